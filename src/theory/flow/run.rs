//! Running the flow: one seed to convergence (with its trajectory), many seeds in parallel, and the summary over seeds.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas (T-6g, T-11)

use super::batched::run_seeds_batched;
use super::config::FlowConfig;
use super::config::FlowKernel;
use super::record::{ConvergenceCurve, FlowRun, Trajectory};
use super::state::FlowState;
use crate::theory::task::TaskParams;
use crate::Error;
use crate::Result;
use rayon::prelude::*;
use serde::Deserialize;
use serde::Serialize;

/// Run the flow from seed `seed` until every head has converged or `t_max` is reached. With
/// `stop_at_convergence = false` it runs to `t_max` (for trajectories).
pub fn run_flow(cfg: &FlowConfig, seed: u64, stop_at_convergence: bool) -> Result<FlowRun> {
    run_flow_with(cfg, seed, stop_at_convergence, FlowKernel::Fast)
}

/// [`run_flow`] with a chosen static-gate kernel.
pub fn run_flow_with(cfg: &FlowConfig, seed: u64, stop_at_convergence: bool, kernel: FlowKernel) -> Result<FlowRun> {
    let mut st = FlowState::with_kernel(cfg, seed, kernel)?;
    let p = cfg.params;
    let content_norm_init = st.content_norm();
    let max_steps = (cfg.t_max / cfg.dt).round() as usize;
    let mut heads = vec![None; p.heads];
    let mut conv_heads = vec![None; p.heads];
    let mut t_conv = None;
    let mut traj =
        (cfg.record_every > 0).then(|| Trajectory { times: vec![], key: vec![], value: vec![], loss: vec![] });
    let mut scratch = vec![0.0; st.theta.len()];
    let record = |st: &mut FlowState, traj: &mut Option<Trajectory>, scratch: &mut Vec<f64>| {
        if let Some(tr) = traj.as_mut() {
            let theta = st.theta.clone();
            let f = st.loss_grad_at(&theta, scratch);
            let (k, v) = st.gates();
            tr.times.push(st.t);
            tr.key.push(k);
            tr.value.push(v);
            tr.loss.push(f);
        }
    };
    record(&mut st, &mut traj, &mut scratch);
    let mut steps = 0;
    while steps < max_steps {
        st.step();
        steps += 1;
        if !st.theta.iter().all(|x| x.is_finite()) {
            return Err(Error::Numerical {
                what: "gradient flow".into(),
                reason: format!("non-finite logits at t = {} (seed {seed}); reduce dt", st.t),
            });
        }
        if cfg.record_every > 0 && steps % cfg.record_every == 0 {
            record(&mut st, &mut traj, &mut scratch);
        }
        if t_conv.is_none() && st.converged_heads(&mut heads) {
            t_conv = Some(st.t);
            conv_heads.copy_from_slice(&heads);
            if stop_at_convergence {
                break;
            }
        }
    }
    if t_conv.is_none() {
        st.converged_heads(&mut heads);
        conv_heads.copy_from_slice(&heads);
    }
    let theta = st.theta.clone();
    let final_loss = st.loss_grad_at(&theta, &mut scratch);
    let (key, value) = st.gates();
    let chosen: Vec<usize> = conv_heads.iter().flatten().copied().collect();
    let mut sorted = chosen.clone();
    sorted.sort_unstable();
    sorted.dedup();
    Ok(FlowRun {
        seed,
        converged: t_conv.is_some(),
        t_conv,
        key_offsets: conv_heads.iter().map(|o| o.map(|r| r + 1)).collect(),
        heads_coincide: sorted.len() < chosen.len(),
        content_norm: st.content_norm(),
        content_norm_init,
        key,
        value,
        final_loss,
        steps,
        trajectory: traj,
    })
}

/// Run many seeds in parallel (rayon); `progress` is called once per finished run (from
/// worker threads).
pub fn run_seeds(cfg: &FlowConfig, seeds: &[u64], progress: impl Fn() + Sync) -> Result<Vec<FlowRun>> {
    run_seeds_with(cfg, seeds, FlowKernel::Fast, progress)
}

/// [`run_seeds`] with a chosen static-gate kernel.
pub fn run_seeds_with(
    cfg: &FlowConfig,
    seeds: &[u64],
    kernel: FlowKernel,
    progress: impl Fn() + Sync,
) -> Result<Vec<FlowRun>> {
    cfg.validate()?;
    if kernel == FlowKernel::Fast && cfg.content.is_none() && cfg.record_every == 0 {
        // Same runs bit for bit, several seeds per vector register (theory/induction-model.md §8).
        return run_seeds_batched(cfg, seeds, progress);
    }
    seeds
        .par_iter()
        .map(|&s| {
            let r = run_flow_with(cfg, s, true, kernel);
            progress();
            r
        })
        .collect()
}

/// The [`ConvergenceCurve`] of each of `seeds`, recording every `record_every` integrator
/// steps (at least 1) up to `t_max`, past convergence (so a curve shows that concentration
/// stays), in parallel. The runs are [`run_flow`]'s, so each curve's `t_conv` is the one the
/// summary's run of that seed finds.
pub fn convergence_curves(cfg: &FlowConfig, seeds: &[u64], record_every: usize) -> Result<Vec<ConvergenceCurve>> {
    if record_every == 0 {
        return Err(Error::invalid("record_every", "must be at least 1 for a convergence curve"));
    }
    let cfg = FlowConfig { record_every, ..*cfg };
    cfg.validate()?;
    seeds
        .par_iter()
        .map(|&s| {
            let run = run_flow(&cfg, s, false)?;
            ConvergenceCurve::of(&run, cfg.params.stride)
                .ok_or_else(|| Error::invalid("record_every", "the run recorded no trajectory"))
        })
        .collect()
}

/// Summary over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowSummary {
    /// Number of runs.
    pub runs: usize,
    /// Fraction that converged.
    pub converged_fraction: f64,
    /// Median convergence time over converged runs.
    pub median_t_conv: Option<f64>,
    /// Minimum and maximum convergence time.
    pub t_conv_range: Option<(f64, f64)>,
    /// Fraction of converged runs in which heads coincide.
    pub coincide_fraction: f64,
    /// How often each key offset (1-based, index 0 = offset 1) was chosen, over all heads of
    /// converged runs.
    pub offset_counts: Vec<usize>,
    /// Largest final content-weight norm.
    pub max_content_norm: f64,
}

/// Summarise runs.
pub fn summarise(p: &TaskParams, runs: &[FlowRun]) -> FlowSummary {
    let conv: Vec<&FlowRun> = runs.iter().filter(|r| r.converged).collect();
    let mut times: Vec<f64> = conv.iter().filter_map(|r| r.t_conv).collect();
    times.sort_by(f64::total_cmp);
    let median = (!times.is_empty()).then(|| {
        let n = times.len();
        if n % 2 == 1 {
            times[n / 2]
        } else {
            0.5 * (times[n / 2 - 1] + times[n / 2])
        }
    });
    let mut counts = vec![0; p.stride - 1];
    for r in &conv {
        for o in r.key_offsets.iter().flatten() {
            if (1..p.stride).contains(o) {
                counts[o - 1] += 1;
            }
        }
    }
    FlowSummary {
        runs: runs.len(),
        converged_fraction: if runs.is_empty() { 0.0 } else { conv.len() as f64 / runs.len() as f64 },
        median_t_conv: median,
        t_conv_range: times.first().zip(times.last()).map(|(a, b)| (*a, *b)),
        coincide_fraction: if conv.is_empty() {
            0.0
        } else {
            conv.iter().filter(|r| r.heads_coincide).count() as f64 / conv.len() as f64
        },
        offset_counts: counts,
        max_content_norm: runs.iter().map(|r| r.content_norm).fold(0.0, f64::max),
    }
}
