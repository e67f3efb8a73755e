//! Theorem 2 (theory/induction-model.md §4): gradient flow `d theta/dt = -grad F` on static
//! softmax gates `pK_h = softmax(thetaK_h)`, `pV_h = softmax(thetaV_h)` from `theta(0) ~
//! N(0, sigma^2)`, integrated with RK4 (or Euler), seeds in parallel with rayon.
//!
//! The hot loop ([`FlowState::step`]) allocates nothing: it evaluates the exact static-gate
//! gradient (T-6g) through the softmax (T-8) into preallocated buffers.
//!
//! Optionally a content term (T-11): per-head token biases `bK_h(i) = wK_h.e_i` (the component
//! of `w` along the common direction `u` shifts every logit of a chunk equally and cancels in
//! the softmax, so these biases are all of `w` that matters at `eps = 0`). The population is
//! then a fixed, seeded sample of base contexts closed under the `N` cyclic relabellings of
//! the vocabulary, so that every token occupies every position equally often and the sample
//! gradient with respect to `w` vanishes at `w = 0` exactly, as the population gradient does.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas (T-6g, T-11)

use super::fast::FastStatic;
use super::task::{
    population_loss_grad, sample_context, softmax_into, softmax_pullback, static_loss_grad, OracleGates,
    StaticWorkspace, TaskParams,
};
use crate::{Error, Result};
use ndarray_rand::rand_distr::{Distribution, StandardNormal};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Integrator of the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Integrator {
    /// Classical fourth-order Runge-Kutta.
    Rk4,
    /// Forward Euler.
    Euler,
}

/// Which implementation evaluates the static-gate right-hand side (the content term always
/// uses the oracle closed form).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum FlowKernel {
    /// [`super::fast::FastStatic`]: batched, vectorised exponentials (the default).
    #[default]
    Fast,
    /// [`super::task::static_loss_grad`] plus a separate softmax pullback: the reference the
    /// fast kernel is tested and benchmarked against.
    Reference,
}

/// Content-term options (T-11).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ContentOptions {
    /// Base contexts; the sample holds `base_contexts * N` contexts (all cyclic relabellings).
    pub base_contexts: usize,
    /// Standard deviation of the initial content weights (per token bias).
    pub init_scale: f64,
}

/// Gradient-flow configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FlowConfig {
    /// Task parameters.
    pub params: TaskParams,
    /// Initial logit standard deviation `sigma`.
    pub sigma: f64,
    /// Step size.
    pub dt: f64,
    /// Time horizon `T_max`.
    pub t_max: f64,
    /// Integrator.
    pub integrator: Integrator,
    /// Convergence threshold on `pK_h(r_h)` and `pV_h(r_h + 1)` (spec: 0.99).
    pub threshold: f64,
    /// Record gates every this many steps (0: no trajectory).
    pub record_every: usize,
    /// Content term (None: static gates only).
    pub content: Option<ContentOptions>,
}

impl Default for FlowConfig {
    /// Spec §6 primary defaults: RK4 with `dt = 2`, `T_max = 3000`, `sigma = 0.01`.
    fn default() -> Self {
        FlowConfig {
            params: TaskParams::default(),
            sigma: 0.01,
            dt: 2.0,
            t_max: 3000.0,
            integrator: Integrator::Rk4,
            threshold: 0.99,
            record_every: 0,
            content: None,
        }
    }
}

impl FlowConfig {
    /// Check the configuration (task parameters, `sigma >= 0`, `dt > 0`, `t_max >= dt`,
    /// threshold in (0.5, 1)).
    pub fn validate(&self) -> Result<()> {
        self.params.validate()?;
        if !(self.sigma.is_finite() && self.sigma >= 0.0) {
            return Err(Error::invalid("sigma", format!("must be finite and >= 0, got {}", self.sigma)));
        }
        if !(self.dt.is_finite() && self.dt > 0.0) {
            return Err(Error::invalid("dt", format!("must be finite and > 0, got {}", self.dt)));
        }
        if !(self.t_max.is_finite() && self.t_max >= self.dt) {
            return Err(Error::invalid("t_max", format!("must be finite and >= dt = {}, got {}", self.dt, self.t_max)));
        }
        let steps = self.t_max / self.dt;
        if steps > super::limits::MAX_FLOW_STEPS {
            return Err(Error::invalid(
                "t_max",
                format!(
                    "t_max / dt = {steps} steps exceeds the limit {} (theory/induction-model.md §9)",
                    super::limits::MAX_FLOW_STEPS
                ),
            ));
        }
        if !(self.threshold > 0.5 && self.threshold < 1.0) {
            return Err(Error::invalid("threshold", format!("must lie in (0.5, 1), got {}", self.threshold)));
        }
        if let Some(c) = self.content {
            if c.base_contexts == 0 {
                return Err(Error::invalid("content base_contexts", "need >= 1"));
            }
            super::limits::at_most(
                "content contexts (base contexts x N)",
                c.base_contexts.saturating_mul(self.params.vocab),
                super::limits::MAX_CONTENT_CONTEXTS,
            )?;
            if !(c.init_scale.is_finite() && c.init_scale >= 0.0) {
                return Err(Error::invalid(
                    "content init_scale",
                    format!("must be finite and >= 0, got {}", c.init_scale),
                ));
            }
        }
        Ok(())
    }
}

/// The fixed context sample of the content term: contexts closed under cyclic relabelling.
#[derive(Debug, Clone)]
struct ContentSample {
    contexts: Vec<Vec<usize>>,
}

impl ContentSample {
    fn new(p: &TaskParams, base: usize, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC0FF_EE00);
        let mut contexts = Vec::with_capacity(base * p.vocab);
        for _ in 0..base {
            let ctx = sample_context(p, &mut rng);
            for shift in 0..p.vocab {
                contexts.push(ctx.iter().map(|&t| (t + shift) % p.vocab).collect());
            }
        }
        ContentSample { contexts }
    }
}

/// State of one gradient-flow run, with every buffer the step needs.
#[derive(Debug, Clone)]
pub struct FlowState {
    cfg: FlowConfig,
    /// `[thetaK (H*S), thetaV (H*S), bK (H*N), bV (H*N)]` (content part only with a content term).
    theta: Vec<f64>,
    /// Current time.
    pub t: f64,
    k: [Vec<f64>; 4],
    tmp: Vec<f64>,
    pk: Vec<f64>,
    pv: Vec<f64>,
    gk: Vec<f64>,
    gv: Vec<f64>,
    ws: StaticWorkspace,
    fast: FastStatic,
    kernel: FlowKernel,
    sample: Option<ContentSample>,
}

impl FlowState {
    /// Initial state: `theta ~ N(0, sigma^2)` (content biases `N(0, init_scale^2)`), seeded.
    pub fn new(cfg: &FlowConfig, seed: u64) -> Result<Self> {
        Self::with_kernel(cfg, seed, FlowKernel::Fast)
    }

    /// [`FlowState::new`] with a chosen static-gate kernel.
    pub fn with_kernel(cfg: &FlowConfig, seed: u64, kernel: FlowKernel) -> Result<Self> {
        cfg.validate()?;
        let p = &cfg.params;
        let hs = p.heads * p.stride;
        let n = 2 * hs + if cfg.content.is_some() { 2 * p.heads * p.vocab } else { 0 };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut theta = vec![0.0; n];
        for (i, t) in theta.iter_mut().enumerate() {
            let z: f64 = StandardNormal.sample(&mut rng);
            let scale = if i < 2 * hs { cfg.sigma } else { cfg.content.map_or(0.0, |c| c.init_scale) };
            *t = scale * z;
        }
        let sample = cfg.content.map(|c| ContentSample::new(p, c.base_contexts, seed));
        Ok(FlowState {
            cfg: *cfg,
            theta,
            t: 0.0,
            k: [vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]],
            tmp: vec![0.0; n],
            pk: vec![0.0; hs],
            pv: vec![0.0; hs],
            gk: vec![0.0; hs],
            gv: vec![0.0; hs],
            ws: StaticWorkspace::new(p.heads, p.stride),
            fast: FastStatic::new(p.heads, p.stride),
            kernel,
            sample,
        })
    }

    /// Current logits `[thetaK, thetaV, (bK, bV)]`.
    pub fn theta(&self) -> &[f64] {
        &self.theta
    }

    /// Replace the logits (same length), e.g. to evaluate the gradient at a chosen point.
    pub fn set_theta(&mut self, theta: &[f64]) -> Result<()> {
        if theta.len() != self.theta.len() {
            return Err(Error::shape("flow logits", format!("{}", self.theta.len()), format!("{}", theta.len())));
        }
        self.theta.copy_from_slice(theta);
        Ok(())
    }

    /// Static gates `(pK, pV)`, `H x S` each, from the current logits.
    pub fn gates(&self) -> (Vec<f64>, Vec<f64>) {
        let p = &self.cfg.params;
        let s = p.stride;
        let hs = p.heads * s;
        let mut pk = vec![0.0; hs];
        let mut pv = vec![0.0; hs];
        for h in 0..p.heads {
            softmax_into(&self.theta[h * s..(h + 1) * s], &mut pk[h * s..(h + 1) * s]);
            softmax_into(&self.theta[hs + h * s..hs + (h + 1) * s], &mut pv[h * s..(h + 1) * s]);
        }
        (pk, pv)
    }

    /// Euclidean norm of the content weights (0 without a content term).
    pub fn content_norm(&self) -> f64 {
        let hs = self.cfg.params.heads * self.cfg.params.stride;
        self.theta[2 * hs..].iter().map(|x| x * x).sum::<f64>().sqrt()
    }

    /// Loss and gradient `grad F` with respect to the logits at `theta` into `out`
    /// (static: T-6, T-6g, T-8; with content: T-11).
    pub fn loss_grad_at(&mut self, theta: &[f64], out: &mut [f64]) -> f64 {
        let p = self.cfg.params;
        let s = p.stride;
        let hs = p.heads * s;
        if let Some(sample) = &self.sample {
            content_loss_grad(&p, theta, sample, out)
        } else if self.kernel == FlowKernel::Fast {
            self.fast.eval(&p, &theta[..2 * hs], &mut out[..2 * hs])
        } else {
            for h in 0..p.heads {
                softmax_into(&theta[h * s..(h + 1) * s], &mut self.pk[h * s..(h + 1) * s]);
                softmax_into(&theta[hs + h * s..hs + (h + 1) * s], &mut self.pv[h * s..(h + 1) * s]);
            }
            let f = static_loss_grad(&p, &self.pk, &self.pv, &mut self.ws, Some((&mut self.gk, &mut self.gv)));
            for h in 0..p.heads {
                let r = h * s..(h + 1) * s;
                softmax_pullback(&self.pk[r.clone()], &mut self.gk[r.clone()]);
                softmax_pullback(&self.pv[r.clone()], &mut self.gv[r.clone()]);
            }
            out[..hs].copy_from_slice(&self.gk);
            out[hs..2 * hs].copy_from_slice(&self.gv);
            f
        }
    }

    /// One integrator step of size `dt` (allocation-free for static gates).
    pub fn step(&mut self) {
        let dt = self.cfg.dt;
        let n = self.theta.len();
        let theta = std::mem::take(&mut self.theta);
        let mut k = std::mem::take(&mut self.k);
        let mut tmp = std::mem::take(&mut self.tmp);
        match self.cfg.integrator {
            Integrator::Euler => {
                self.loss_grad_at(&theta, &mut k[0]);
                self.theta = theta;
                for i in 0..n {
                    self.theta[i] -= dt * k[0][i];
                }
            }
            Integrator::Rk4 => {
                let [k1, k2, k3, k4] = &mut k;
                self.loss_grad_at(&theta, k1);
                for i in 0..n {
                    tmp[i] = theta[i] - 0.5 * dt * k1[i];
                }
                self.loss_grad_at(&tmp, k2);
                for i in 0..n {
                    tmp[i] = theta[i] - 0.5 * dt * k2[i];
                }
                self.loss_grad_at(&tmp, k3);
                for i in 0..n {
                    tmp[i] = theta[i] - dt * k3[i];
                }
                self.loss_grad_at(&tmp, k4);
                self.theta = theta;
                for i in 0..n {
                    self.theta[i] -= dt / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]);
                }
            }
        }
        self.k = k;
        self.tmp = tmp;
        self.t += dt;
    }

    /// Per head: `Some(r_h)` (0-based key offset) when `pK_h(r_h) > threshold` and
    /// `pV_h(r_h + 1) > threshold`, else `None`. Allocation-free.
    fn converged_heads(&mut self, out: &mut [Option<usize>]) -> bool {
        let p = self.cfg.params;
        let s = p.stride;
        let hs = p.heads * s;
        let mut all = true;
        for h in 0..p.heads {
            softmax_into(&self.theta[h * s..(h + 1) * s], &mut self.pk[h * s..(h + 1) * s]);
            softmax_into(&self.theta[hs + h * s..hs + (h + 1) * s], &mut self.pv[h * s..(h + 1) * s]);
            out[h] = None;
            for r in 0..s - 1 {
                if self.pk[h * s + r] > self.cfg.threshold && self.pv[h * s + r + 1] > self.cfg.threshold {
                    out[h] = Some(r);
                }
            }
            all &= out[h].is_some();
        }
        all
    }
}

/// Content-term loss and gradient (T-11): average over the sample of the oracle closed form
/// (T-4, T-5) with per-context gates `pK_{h,l}(r) = softmax_r(thetaK_h(r) + bK_h(x_{l,r}))`.
fn content_loss_grad(p: &TaskParams, theta: &[f64], sample: &ContentSample, out: &mut [f64]) -> f64 {
    let (hh, ll, ss, nn) = (p.heads, p.chunks, p.stride, p.vocab);
    let hs = hh * ss;
    out.iter_mut().for_each(|x| *x = 0.0);
    let mut g = OracleGates::uniform(p);
    let mut logits = vec![0.0; ss];
    let mut total = 0.0;
    for ctx in &sample.contexts {
        for (branch, theta_off, bias_off) in [(0usize, 0usize, 2 * hs), (1, hs, 2 * hs + hh * nn)] {
            for h in 0..hh {
                for l in 0..ll {
                    for r in 0..ss {
                        logits[r] = theta[theta_off + h * ss + r] + theta[bias_off + h * nn + ctx[l * ss + r]];
                    }
                    let i = g.idx(h, l, 0);
                    let dst = if branch == 0 { &mut g.key[i..i + ss] } else { &mut g.value[i..i + ss] };
                    softmax_into(&logits, dst);
                }
            }
        }
        let Ok((f, mut gk, mut gv)) = population_loss_grad(p, &g) else {
            return f64::NAN;
        };
        total += f;
        for h in 0..hh {
            for l in 0..ll {
                let i = g.idx(h, l, 0);
                softmax_pullback(&g.key[i..i + ss], &mut gk[i..i + ss]);
                softmax_pullback(&g.value[i..i + ss], &mut gv[i..i + ss]);
                for r in 0..ss {
                    let tok = ctx[l * ss + r];
                    out[h * ss + r] += gk[i + r];
                    out[hs + h * ss + r] += gv[i + r];
                    out[2 * hs + h * nn + tok] += gk[i + r];
                    out[2 * hs + hh * nn + h * nn + tok] += gv[i + r];
                }
            }
        }
    }
    let m = sample.contexts.len() as f64;
    out.iter_mut().for_each(|x| *x /= m);
    total / m
}

/// Recorded gates over time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// Times of the records.
    pub times: Vec<f64>,
    /// `pK` (`H x S`, row-major) at each record.
    pub key: Vec<Vec<f64>>,
    /// `pV` (`H x S`) at each record.
    pub value: Vec<Vec<f64>>,
    /// Loss at each record.
    pub loss: Vec<f64>,
}

/// Outcome of one gradient-flow run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowRun {
    /// Seed of the initialisation.
    pub seed: u64,
    /// Every head reached `pK(r_h) > threshold` and `pV(r_h + 1) > threshold`.
    pub converged: bool,
    /// First time at which that held.
    pub t_conv: Option<f64>,
    /// Chosen key offsets (1-based), per head, at convergence (None for a head that did not
    /// converge).
    pub key_offsets: Vec<Option<usize>>,
    /// Two or more heads chose the same offset.
    pub heads_coincide: bool,
    /// Norm of the content weights at the end (0 without content term).
    pub content_norm: f64,
    /// Norm of the content weights at the start.
    pub content_norm_init: f64,
    /// Final static gates `pK` (`H x S`).
    pub key: Vec<f64>,
    /// Final static gates `pV` (`H x S`).
    pub value: Vec<f64>,
    /// Loss at the end.
    pub final_loss: f64,
    /// Integrator steps taken.
    pub steps: usize,
    /// Recorded trajectory, if asked for.
    pub trajectory: Option<Trajectory>,
}

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
        return super::fast::run_seeds_batched(cfg, seeds, progress);
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
