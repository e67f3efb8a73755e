//! Theorem 2 as one run (what `phasekv theory t2` writes): the flow over seeds
//! ([`super::flow::run_seeds`]), the check against forward Euler at half the step, the recorded
//! trajectory of one seed and the phase profile of the first converged run. The mathematics is
//! in `theory/induction-model.md` (§4); the figures are drawn by `crate::figures::theory`.

use super::flow::{run_flow, run_seeds, FlowConfig, FlowRun, FlowSummary, Integrator};
use super::profile::{phase_profile, PhaseProfile};
use super::task::OracleGates;
use crate::numeric::wilson95;
use crate::Result;
use serde::Serialize;

/// Rerunning every seed with forward Euler at half the step: do the two integrators agree?
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EulerCheck {
    /// Euler's step (half the RK4 step).
    pub dt: f64,
    /// Fraction of the runs converged both ways whose chosen offsets agree.
    pub same_offsets_fraction: f64,
    /// 95 % Wilson interval of `same_offsets_fraction`.
    pub same_offsets_wilson95: (f64, f64),
    /// Largest `|t_conv(RK4) - t_conv(Euler)| / t_conv(RK4)` over all runs that converged both
    /// ways, and over those whose chosen offsets agree.
    pub max_rel_t_conv_diff: f64,
    /// See [`EulerCheck::max_rel_t_conv_diff`].
    pub max_rel_t_conv_diff_same_offsets: f64,
    /// Runs converged both ways.
    pub both_converged: usize,
    /// Seeds (both converged) whose chosen offsets differ.
    pub different_offsets_seeds: Vec<u64>,
}

/// Compares `runs` (of `cfg` over `seeds`) with forward Euler at `cfg.dt / 2`; `progress` is
/// called once per Euler seed.
pub fn euler_check(
    cfg: &FlowConfig,
    seeds: &[u64],
    runs: &[FlowRun],
    progress: impl Fn() + Sync,
) -> Result<EulerCheck> {
    let ecfg = FlowConfig { integrator: Integrator::Euler, dt: cfg.dt / 2.0, ..*cfg };
    let eruns = run_seeds(&ecfg, seeds, progress)?;
    let mut same = 0;
    let mut both = 0;
    let mut worst: f64 = 0.0;
    let mut worst_same: f64 = 0.0;
    let mut different = Vec::new();
    for (r, e) in runs.iter().zip(&eruns) {
        if let (Some(t1), Some(t2)) = (r.t_conv, e.t_conv) {
            both += 1;
            worst = worst.max((t1 - t2).abs() / t1);
            if r.key_offsets == e.key_offsets {
                same += 1;
                worst_same = worst_same.max((t1 - t2).abs() / t1);
            } else {
                different.push(r.seed);
            }
        }
    }
    Ok(EulerCheck {
        dt: ecfg.dt,
        same_offsets_fraction: if both > 0 { same as f64 / both as f64 } else { 0.0 },
        same_offsets_wilson95: wilson95(same, both),
        max_rel_t_conv_diff: worst,
        max_rel_t_conv_diff_same_offsets: worst_same,
        both_converged: both,
        different_offsets_seeds: different,
    })
}

/// Reruns `first` (a run of `cfg`) recording its trajectory (about 400 points) to a little after
/// its convergence (`1.3 t_conv + 50`, at most `t_max`).
pub fn recorded_trajectory(cfg: &FlowConfig, first: &FlowRun) -> Result<FlowRun> {
    let t_end = first.t_conv.map(|t| (1.3 * t + 50.0).min(cfg.t_max)).unwrap_or(cfg.t_max);
    let steps = (t_end / cfg.dt).round().max(1.0) as usize;
    let tcfg = FlowConfig { t_max: steps as f64 * cfg.dt, record_every: (steps / 400).max(1), ..*cfg };
    run_flow(&tcfg, first.seed, false)
}

/// The phase profile of the first converged run of `runs`, with that run.
pub fn converged_profile<'a>(cfg: &FlowConfig, runs: &'a [FlowRun]) -> Result<Option<(&'a FlowRun, PhaseProfile)>> {
    let Some(conv) = runs.iter().find(|r| r.converged) else { return Ok(None) };
    let g = OracleGates::from_static(&cfg.params, &conv.key, &conv.value);
    Ok(Some((conv, phase_profile(&cfg.params, &g)?)))
}

/// `theorem2.json`: the summary, the Euler check, the seeds' wall time and every run.
#[derive(Debug, Clone, Serialize)]
pub struct T2Results {
    /// Summary over seeds.
    pub summary: FlowSummary,
    /// The Euler check (None when skipped).
    pub euler_check: Option<EulerCheck>,
    /// Wall seconds of the seeds.
    pub wall_seconds_seeds: f64,
    /// Every run.
    pub runs: Vec<FlowRun>,
}
