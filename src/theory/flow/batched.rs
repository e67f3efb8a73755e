//! Many seeds of the gradient flow at once: [`LANES`] runs share one lane kernel
//! (`theory::fast`'s `lanes`), each in its own lane; a lane whose run ends takes the next seed
//! (theory/induction-model.md §8). This is a way of running the flow, so it lives here; the
//! kernel it drives knows nothing of the flow.
//!
//! A lane repeats, operation for operation, what [`super::run_flow_with`]`(cfg, seed, true,
//! FlowKernel::Fast)` does with one seed (the same initial logits, the same kernel arithmetic
//! as `FastStatic`, the same integrator arithmetic as `FlowState::step`, the same convergence
//! test, the same final loss and gates), so each [`FlowRun`] is bit-identical to the one-seed
//! run, whatever the lane, the thread or the instruction set (`theory_fast` tests).

use super::config::{FlowConfig, FlowKernel, Integrator};
use super::record::FlowRun;
use super::state::{concentration, FlowState};
use crate::theory::fast::lanes::Kernel;
use crate::theory::fast::simd::{self, Vector};
use crate::theory::fast::Isa;
use crate::theory::task::{softmax_into, TaskParams};
use crate::{Error, Result};
use rayon::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Runs that share one lane kernel (one AVX-512 register of doubles).
pub const LANES: usize = 8;

/// Logits and integrator buffers of `W` runs.
struct Batch<const W: usize> {
    kernel: Kernel<W>,
    isa: Isa,
    theta: Vec<[f64; W]>,
    k: [Vec<[f64; W]>; 4],
    tmp: Vec<[f64; W]>,
}

impl<const W: usize> Batch<W> {
    fn new(heads: usize, stride: usize, isa: Isa) -> Self {
        let n = 2 * heads * stride;
        Batch {
            kernel: Kernel::new(heads, stride),
            isa,
            theta: vec![[0.0; W]; n],
            k: std::array::from_fn(|_| vec![[0.0; W]; n]),
            tmp: vec![[0.0; W]; n],
        }
    }

    /// The arithmetic of `FlowState::step`, lane by lane, on registers `V`.
    #[inline(always)]
    fn step_with<V: Vector<W>>(&mut self, cfg: &FlowConfig) {
        let (p, dt) = (&cfg.params, cfg.dt);
        let [k1, k2, k3, k4] = &mut self.k;
        let (theta, tmp, kernel) = (&mut self.theta, &mut self.tmp, &mut self.kernel);
        match cfg.integrator {
            Integrator::Euler => {
                kernel.eval::<V>(p, theta, k1, false);
                let h = V::splat(dt);
                for (t, k) in theta.iter_mut().zip(k1.iter()) {
                    V::load(t).sub(h.mul(V::load(k))).store(t);
                }
            }
            Integrator::Rk4 => {
                // Stages 2 and 3 start from theta - (dt/2) k, stage 4 from theta - dt k3.
                kernel.eval::<V>(p, theta, k1, false);
                part_step::<W, V>(tmp, theta, k1, 0.5 * dt);
                kernel.eval::<V>(p, tmp, k2, false);
                part_step::<W, V>(tmp, theta, k2, 0.5 * dt);
                kernel.eval::<V>(p, tmp, k3, false);
                part_step::<W, V>(tmp, theta, k3, dt);
                kernel.eval::<V>(p, tmp, k4, false);
                // theta -= dt/6 (k1 + 2 k2 + 2 k3 + k4), summed left to right.
                let (w, two) = (V::splat(dt / 6.0), V::splat(2.0));
                for (i, t) in theta.iter_mut().enumerate() {
                    let (a, b, c, d) = (V::load(&k1[i]), V::load(&k2[i]), V::load(&k3[i]), V::load(&k4[i]));
                    let sum = a.add(two.mul(b)).add(two.mul(c)).add(d);
                    V::load(t).sub(w.mul(sum)).store(t);
                }
            }
        }
    }

    fn load(&mut self, lane: usize, theta: &[f64]) {
        for (t, &x) in self.theta.iter_mut().zip(theta) {
            t[lane] = x;
        }
    }

    fn lane_theta(&self, lane: usize, into: &mut [f64]) {
        for (x, t) in into.iter_mut().zip(&self.theta) {
            *x = t[lane];
        }
    }
}

impl Batch<LANES> {
    /// One integrator step of every lane, on the batch's instruction set.
    fn step(&mut self, cfg: &FlowConfig) {
        match self.isa {
            // SAFETY: `run_seeds_on` checked that the CPU has the instruction set.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { self.step_avx512(cfg) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { self.step_avx2(cfg) },
            _ => self.step_with::<simd::Lanes<LANES>>(cfg),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn step_avx512(&mut self, cfg: &FlowConfig) {
        self.step_with::<simd::Avx512>(cfg)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn step_avx2(&mut self, cfg: &FlowConfig) {
        self.step_with::<simd::Avx2x2>(cfg)
    }
}

/// `u = theta - h k` lane by lane, as `FlowState::step` computes `theta - 0.5 * dt * k`
/// (`h = 0.5 * dt` rounded once, as there) and `theta - dt * k`.
#[inline(always)]
fn part_step<const W: usize, V: Vector<W>>(u: &mut [[f64; W]], theta: &[[f64; W]], k: &[[f64; W]], h: f64) {
    let h = V::splat(h);
    for ((u, t), k) in u.iter_mut().zip(theta).zip(k) {
        V::load(t).sub(h.mul(V::load(k))).store(u);
    }
}

/// The convergence test of `flow::run_flow_with`: per head `Some(r)` for the key offset `r`
/// with `pK_h(r) > threshold` and `pV_h(r + 1) > threshold` ([`concentration`], softmax
/// as `FlowState` computes it), and whether every head has one.
fn converged_heads(p: &TaskParams, threshold: f64, theta: &[f64], buf: &mut [f64], out: &mut [Option<usize>]) -> bool {
    let s = p.stride;
    let hs = p.heads * s;
    let (pk, pv) = buf.split_at_mut(hs);
    let mut all = true;
    for h in 0..p.heads {
        softmax_into(&theta[h * s..(h + 1) * s], &mut pk[h * s..(h + 1) * s]);
        softmax_into(&theta[hs + h * s..hs + (h + 1) * s], &mut pv[h * s..(h + 1) * s]);
        let (r, c) = concentration(&pk[h * s..(h + 1) * s], &pv[h * s..(h + 1) * s]);
        out[h] = (c > threshold).then_some(r);
        all &= out[h].is_some();
    }
    all
}

/// A necessary condition for [`converged_heads`] to return true, without exponentials:
/// `p_r > t > 1/2` forces `r` to be the block's unique largest logit, ahead of every other by
/// more than `ln(t / (1 - t))`. `margin` is that bound less 1e-6 (far above the rounding of
/// the softmax); with `margin <= 0` the test always passes.
fn may_have_converged(p: &TaskParams, margin: f64, theta: &[f64]) -> bool {
    if margin <= 0.0 {
        return true;
    }
    let s = p.stride;
    let hs = p.heads * s;
    let lead = |blk: &[f64]| {
        let (mut best, mut at, mut second) = (f64::NEG_INFINITY, 0, f64::NEG_INFINITY);
        for (r, &x) in blk.iter().enumerate() {
            if x > best {
                second = best;
                best = x;
                at = r;
            } else if x > second {
                second = x;
            }
        }
        (at, best - second > margin)
    };
    (0..p.heads).all(|h| {
        let (rk, ok_k) = lead(&theta[h * s..(h + 1) * s]);
        let (rv, ok_v) = lead(&theta[hs + h * s..hs + (h + 1) * s]);
        ok_k && ok_v && rk + 1 < s && rv == rk + 1
    })
}

/// The run of one lane.
#[derive(Debug, Clone, Copy)]
struct LaneRun {
    /// Index into the seed list.
    index: usize,
    seed: u64,
    steps: usize,
    t: f64,
}

/// Results by seed index, filled by the workers.
type Slots = Mutex<Vec<Option<Result<FlowRun>>>>;

/// [`super::run_seeds`] for static gates without trajectories, [`LANES`] runs at
/// a time per thread on the widest instruction set of the CPU; the same results, bit for bit.
pub fn run_seeds_batched(cfg: &FlowConfig, seeds: &[u64], progress: impl Fn() + Sync) -> Result<Vec<FlowRun>> {
    run_seeds_on(cfg, seeds, Isa::detect(), progress)
}

/// [`run_seeds_batched`] on a chosen instruction set (an error if the CPU lacks it).
pub fn run_seeds_on(cfg: &FlowConfig, seeds: &[u64], isa: Isa, progress: impl Fn() + Sync) -> Result<Vec<FlowRun>> {
    cfg.validate()?;
    if cfg.content.is_some() || cfg.record_every > 0 {
        return Err(Error::invalid(
            "flow config",
            "the batched runner takes static gates without a content term or trajectory recording",
        ));
    }
    if !isa.available() {
        return Err(Error::invalid("instruction set", format!("{isa:?} is not available on this CPU")));
    }
    let next = AtomicUsize::new(0);
    let slots: Slots = Mutex::new((0..seeds.len()).map(|_| None).collect());
    let workers = rayon::current_num_threads().min(seeds.len().div_ceil(LANES)).max(1);
    (0..workers).into_par_iter().for_each(|_| worker(cfg, seeds, isa, &next, &slots, &progress));
    let slots = slots.into_inner().unwrap_or_else(|e| e.into_inner());
    slots.into_iter().map(|r| r.expect("every seed was run")).collect()
}

/// Pull seeds from `next` into free lanes until none is left and every lane has finished.
fn worker(cfg: &FlowConfig, seeds: &[u64], isa: Isa, next: &AtomicUsize, slots: &Slots, progress: &(impl Fn() + Sync)) {
    let p = cfg.params;
    let n = 2 * p.heads * p.stride;
    let max_steps = (cfg.t_max / cfg.dt).round() as usize;
    let margin = (cfg.threshold / (1.0 - cfg.threshold)).ln() - 1e-6;
    let mut batch = Batch::<LANES>::new(p.heads, p.stride, isa);
    let mut lanes: [Option<LaneRun>; LANES] = [None; LANES];
    let mut theta = vec![0.0; n];
    let mut buf = vec![0.0; n];
    let mut heads = vec![None; p.heads];
    let mut finisher: Option<FlowState> = None;
    let store = |index: usize, r: Result<FlowRun>| {
        slots.lock().unwrap_or_else(|e| e.into_inner())[index] = Some(r);
        progress();
    };
    loop {
        for (l, lane) in lanes.iter_mut().enumerate() {
            while lane.is_none() {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(&seed) = seeds.get(index) else { break };
                match FlowState::with_kernel(cfg, seed, FlowKernel::Fast) {
                    Err(e) => store(index, Err(e)),
                    Ok(st) if max_steps == 0 => {
                        theta.copy_from_slice(st.theta());
                        let fin = finisher.get_or_insert(st);
                        let run = LaneRun { index, seed, steps: 0, t: 0.0 };
                        store(index, Ok(finish(cfg, fin, run, None, &theta, &mut buf, &mut heads)));
                    }
                    Ok(st) => {
                        batch.load(l, st.theta());
                        finisher.get_or_insert(st);
                        *lane = Some(LaneRun { index, seed, steps: 0, t: 0.0 });
                    }
                }
            }
        }
        if lanes.iter().all(Option::is_none) {
            return;
        }
        batch.step(cfg);
        for (l, lane) in lanes.iter_mut().enumerate() {
            let Some(run) = lane.as_mut() else { continue };
            run.steps += 1;
            run.t += cfg.dt;
            batch.lane_theta(l, &mut theta);
            let done = if !theta.iter().all(|x| x.is_finite()) {
                store(
                    run.index,
                    Err(Error::Numerical {
                        what: "gradient flow".into(),
                        reason: format!("non-finite logits at t = {} (seed {}); reduce dt", run.t, run.seed),
                    }),
                );
                true
            } else if may_have_converged(&p, margin, &theta)
                && converged_heads(&p, cfg.threshold, &theta, &mut buf, &mut heads)
            {
                let fin = finisher.as_mut().expect("a lane was loaded");
                let t_conv = Some(run.t);
                store(run.index, Ok(finish(cfg, fin, *run, t_conv, &theta, &mut buf, &mut heads)));
                true
            } else if run.steps >= max_steps {
                let fin = finisher.as_mut().expect("a lane was loaded");
                store(run.index, Ok(finish(cfg, fin, *run, None, &theta, &mut buf, &mut heads)));
                true
            } else {
                false
            };
            if done {
                *lane = None;
            }
        }
    }
}

/// The [`FlowRun`] of a finished lane, built as `run_flow_with` builds it. With `t_conv`,
/// `heads` holds the converged offsets; without, they are recomputed at the final logits.
fn finish(
    cfg: &FlowConfig,
    fin: &mut FlowState,
    run: LaneRun,
    t_conv: Option<f64>,
    theta: &[f64],
    buf: &mut [f64],
    heads: &mut [Option<usize>],
) -> FlowRun {
    if t_conv.is_none() {
        converged_heads(&cfg.params, cfg.threshold, theta, buf, heads);
    }
    fin.set_theta(theta).expect("same length");
    let final_loss = fin.loss_grad_at(theta, buf);
    let (key, value) = fin.gates();
    let chosen: Vec<usize> = heads.iter().flatten().copied().collect();
    let mut sorted = chosen.clone();
    sorted.sort_unstable();
    sorted.dedup();
    FlowRun {
        seed: run.seed,
        converged: t_conv.is_some(),
        t_conv,
        key_offsets: heads.iter().map(|o| o.map(|r| r + 1)).collect(),
        heads_coincide: sorted.len() < chosen.len(),
        content_norm: fin.content_norm(),
        content_norm_init: 0.0,
        key,
        value,
        final_loss,
        steps: run.steps,
        trajectory: None,
    }
}
