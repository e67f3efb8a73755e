//! Staggered chunk grids in the idealized induction model (issue 30, item 5; the mathematics and
//! what it predicts are in `theory/induction-model.md` §10).
//!
//! The paper's model (T-2) chunks one context the same way for every head. Here head `h` chunks
//! it on its own grid: its chunks start at `o_h + l S`. So that every head still has exactly `L`
//! whole chunks, the `L S` tokens sit on a circle (position `L S` is position 0); with every
//! `o_h = 0` the circle's chunks are the paper's and nothing wraps. Gates are static (one key and
//! one value probability vector per head, over the head's own chunk offsets), as in (T-6), and
//! `eps = 0`.
//!
//! A query is a bigram on the circle: key at position `q`, target at `q + 1`. Its **phase** is
//! `q mod S`. [`Phases::WithinChunk`] takes the paper's queries (phases `0..S-1`, 0-based: the
//! target in the key's chunk of the unstaggered grid); [`Phases::All`] takes every phase,
//! including `S - 1`, whose target lies in the next chunk of the unstaggered grid (the window
//! boundary). Comparing grids needs [`Phases::All`]: the boundary is exactly what a stagger moves.
//!
//! Per query (0-based offsets; `rel_h(p)` and `chunk_h(p)` the offset and chunk of position `p`
//! on head `h`'s grid):
//!
//! ```text
//! c_h = pK_h(rel_h(q)),  A_h = e^{beta c_h} / (e^{beta c_h} + L - 1),  B_h = (1 - A_h) / (L - 1)
//! U(p) = sum_h [chunk_h(p) = chunk_h(q) ? A_h : B_h] pV_h(rel_h(p))
//! loss = -gamma U(q + 1) + log( sum_p e^{gamma U(p)} + N - L S )
//! ```
//!
//! which is (T-4) with the attention and value terms read on each head's grid; with every
//! `o_h = 0` and [`Phases::WithinChunk`] it is (T-6) term by term (checked by
//! `tests/theory_stagger.rs`). Its gradient is (T-6g)'s, per head on its own grid.

use super::oracle::minimise;
use super::task::{softmax_pullback, TaskParams};
use crate::numeric::softmax_into;
use crate::{Error, Result};
use argmin::core::{CostFunction, Gradient};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Largest number of one-hot configurations [`best_one_hot`] enumerates (`S^(2H)`; the heads
/// are not interchangeable once their grids differ, so no multiset reduction applies).
pub const MAX_STAGGER_ONE_HOT: usize = 1 << 22;

/// Which query phases the loss averages over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phases {
    /// The paper's queries: phases `0..S-1` (target in the key's chunk of the unstaggered grid).
    WithinChunk,
    /// Every phase `0..S`, the boundary phase `S - 1` included.
    All,
}

/// The induction task with one chunk grid per head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaggeredTask {
    /// `S`, `H`, `L`, `N`, `beta`, `gamma` as in (T-1)-(T-3). Here `H >= S` is allowed: the
    /// question is precisely what more heads than phases buy on staggered grids.
    pub params: TaskParams,
    /// Grid offset `o_h` in `0..S` per head.
    pub offsets: Vec<usize>,
}

impl StaggeredTask {
    /// A validated task: every parameter as [`TaskParams::validate`] checks it except `H < S`
    /// (here any `H >= 1`), and one offset in `0..S` per head.
    pub fn new(params: TaskParams, offsets: Vec<usize>) -> Result<Self> {
        // Validate everything but the head bound with one head, then the heads themselves.
        TaskParams { heads: 1, ..params }.validate()?;
        if params.heads == 0 || params.heads > 16 {
            return Err(Error::invalid("heads", format!("H must be in 1..=16, got {}", params.heads)));
        }
        if offsets.len() != params.heads {
            return Err(Error::invalid(
                "offsets",
                format!("one grid offset per head: expected {}, got {}", params.heads, offsets.len()),
            ));
        }
        if let Some(&o) = offsets.iter().find(|&&o| o >= params.stride) {
            return Err(Error::invalid(
                "offsets",
                format!("each offset must be in 0..S = 0..{}, got {o}", params.stride),
            ));
        }
        Ok(StaggeredTask { params, offsets })
    }

    /// Every head on the unstaggered grid (`o_h = 0`).
    pub fn unstaggered(params: TaskParams) -> Result<Self> {
        Self::new(params, vec![0; params.heads])
    }

    /// The query phases of `which`.
    pub fn phases(&self, which: Phases) -> std::ops::Range<usize> {
        match which {
            Phases::WithinChunk => 0..self.params.stride - 1,
            Phases::All => 0..self.params.stride,
        }
    }

    /// `(chunk, offset)` of position `p` on head `h`'s grid.
    fn locate(&self, h: usize, p: usize) -> (usize, usize) {
        let s = self.params.stride;
        let t = self.params.chunks * s;
        let shifted = (p + t - self.offsets[h]) % t;
        (shifted / s, shifted % s)
    }
}

/// The loss of one query phase and, with `grad`, its gradient **added** into `gk`, `gv`
/// (layout `h * S + r`, offsets on the head's own grid).
fn phase_loss(
    task: &StaggeredTask,
    phase: usize,
    key: &[f64],
    value: &[f64],
    grad: Option<(&mut [f64], &mut [f64])>,
) -> f64 {
    let p = &task.params;
    let (hh, ll, ss) = (p.heads, p.chunks, p.stride);
    let t = ll * ss;
    let lm1 = (ll - 1) as f64;
    let off = (-p.beta).exp();
    let (q, target) = (phase, (phase + 1) % t);
    let mut a = vec![0.0; hh];
    let mut b = vec![0.0; hh];
    let mut home = vec![0usize; hh];
    for h in 0..hh {
        let (chunk, r) = task.locate(h, q);
        home[h] = chunk;
        let e = (p.beta * (key[h * ss + r] - 1.0)).exp();
        let den = e + lm1 * off;
        a[h] = e / den;
        b[h] = off / den;
    }
    // Per (position, head): whether the position lies in the query's chunk on that head's
    // grid, and its offset there; computed once, read by the loss and the gradient.
    let weight: Vec<(bool, usize)> = (0..t)
        .flat_map(|pos| {
            let home = &home;
            (0..hh).map(move |h| {
                let (chunk, r) = task.locate(h, pos);
                (chunk == home[h], r)
            })
        })
        .collect();
    let u: Vec<f64> = (0..t)
        .map(|pos| {
            (0..hh)
                .map(|h| {
                    let (on, r) = weight[pos * hh + h];
                    (if on { a[h] } else { b[h] }) * value[h * ss + r]
                })
                .sum()
        })
        .collect();
    let m = p.gamma * u.iter().fold(0.0f64, |acc, &x| acc.max(x));
    let expo: Vec<f64> = u.iter().map(|&x| (p.gamma * x - m).exp()).collect();
    let z = p.distractors() * (-m).exp() + expo.iter().sum::<f64>();
    let loss = -p.gamma * u[target] + m + z.ln();
    if let Some((gk, gv)) = grad {
        let mut s_on = vec![0.0; hh];
        let mut s_off = vec![0.0; hh];
        for (pos, &e) in expo.iter().enumerate() {
            // G(p) = dloss/dU(p) = gamma (pi(p) - 1{p = target})
            let g = p.gamma * (e / z - if pos == target { 1.0 } else { 0.0 });
            for h in 0..hh {
                let (on, r) = weight[pos * hh + h];
                let v = value[h * ss + r];
                if on {
                    gv[h * ss + r] += a[h] * g;
                    s_on[h] += v * g;
                } else {
                    gv[h * ss + r] += b[h] * g;
                    s_off[h] += v * g;
                }
            }
        }
        for h in 0..hh {
            let r = weight[q * hh + h].1;
            gk[h * ss + r] += p.beta * a[h] * (1.0 - a[h]) * (s_on[h] - s_off[h] / lm1);
        }
    }
    loss
}

/// The loss averaged over the query phases of `which`, and with `grad` its exact gradient with
/// respect to `pK_h(r)`, `pV_h(r)` (layout `h * S + r`; written, not accumulated).
pub fn stagger_loss_grad(
    task: &StaggeredTask,
    which: Phases,
    key: &[f64],
    value: &[f64],
    grad: Option<(&mut [f64], &mut [f64])>,
) -> f64 {
    let phases = task.phases(which);
    let n = phases.len() as f64;
    match grad {
        None => phases.map(|ph| phase_loss(task, ph, key, value, None)).sum::<f64>() / n,
        Some((gk, gv)) => {
            gk.iter_mut().chain(gv.iter_mut()).for_each(|x| *x = 0.0);
            let mut total = 0.0;
            for ph in phases {
                total += phase_loss(task, ph, key, value, Some((&mut *gk, &mut *gv)));
            }
            gk.iter_mut().chain(gv.iter_mut()).for_each(|x| *x /= n);
            total / n
        }
    }
}

/// The loss of every query phase `0..S` (the phase profile of a configuration: the weak phases
/// are the ones with a high loss).
pub fn phase_profile(task: &StaggeredTask, key: &[f64], value: &[f64]) -> Vec<f64> {
    task.phases(Phases::All).map(|ph| phase_loss(task, ph, key, value, None)).collect()
}

/// One-hot static gates: head `h` reads key offset `keys[h]` and value offset `values[h]`
/// (0-based, on its own grid).
pub fn one_hot_gates(task: &StaggeredTask, keys: &[usize], values: &[usize]) -> (Vec<f64>, Vec<f64>) {
    let ss = task.params.stride;
    let mut key = vec![0.0; task.params.heads * ss];
    let mut value = key.clone();
    for (h, (&k, &v)) in keys.iter().zip(values).enumerate() {
        key[h * ss + k] = 1.0;
        value[h * ss + v] = 1.0;
    }
    (key, value)
}

/// The best one-hot configuration, by enumeration of every `(key, value)` offset pair per head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaggerOneHot {
    /// Its loss.
    pub loss: f64,
    /// Key offset per head (0-based, on the head's grid).
    pub keys: Vec<usize>,
    /// Value offset per head (0-based, on the head's grid).
    pub values: Vec<usize>,
    /// The absolute phase `(o_h + key_h) mod S` each head's key serves.
    pub served_phases: Vec<usize>,
    /// How many configurations were evaluated.
    pub enumerated: usize,
}

/// Enumerate every one-hot configuration (`S^(2H)` of them, at most [`MAX_STAGGER_ONE_HOT`]) and
/// return the best (the first of equals in enumeration order).
pub fn best_one_hot(task: &StaggeredTask, which: Phases) -> Result<StaggerOneHot> {
    let (hh, ss) = (task.params.heads, task.params.stride);
    let pairs = ss * ss;
    let total = (0..hh).try_fold(1usize, |acc, _| acc.checked_mul(pairs)).filter(|&n| n <= MAX_STAGGER_ONE_HOT);
    let Some(total) = total else {
        return Err(Error::invalid(
            "heads",
            format!("S^(2H) = {ss}^{} one-hot configurations exceed the enumeration cap {MAX_STAGGER_ONE_HOT}", 2 * hh),
        ));
    };
    let mut best: Option<(f64, usize)> = None;
    for code in 0..total {
        let (keys, values) = decode(code, hh, ss);
        let (key, value) = one_hot_gates(task, &keys, &values);
        let f = stagger_loss_grad(task, which, &key, &value, None);
        if best.is_none_or(|(b, _)| f < b - 1e-12) {
            best = Some((f, code));
        }
    }
    let (loss, code) = best.ok_or_else(|| Error::invalid("heads", "no configuration to enumerate"))?;
    let (keys, values) = decode(code, hh, ss);
    let served_phases = keys.iter().zip(&task.offsets).map(|(&k, &o)| (o + k) % ss).collect();
    Ok(StaggerOneHot { loss, keys, values, served_phases, enumerated: total })
}

fn decode(mut code: usize, heads: usize, stride: usize) -> (Vec<usize>, Vec<usize>) {
    let (mut keys, mut values) = (Vec::with_capacity(heads), Vec::with_capacity(heads));
    for _ in 0..heads {
        let pair = code % (stride * stride);
        code /= stride * stride;
        keys.push(pair / stride);
        values.push(pair % stride);
    }
    (keys, values)
}

/// The staggered problem over softmax logits `[thetaK (H*S) | thetaV (H*S)]`, for argmin.
#[derive(Debug, Clone)]
pub struct StaggerProblem {
    /// The task.
    pub task: StaggeredTask,
    /// The query phases the loss averages over.
    pub which: Phases,
}

impl StaggerProblem {
    /// Gates `(pK, pV)` from logits (softmax per head block).
    pub fn gates(&self, theta: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let ss = self.task.params.stride;
        let n = self.task.params.heads * ss;
        let (mut key, mut value) = (vec![0.0; n], vec![0.0; n]);
        for b in 0..self.task.params.heads {
            softmax_into(&theta[b * ss..(b + 1) * ss], &mut key[b * ss..(b + 1) * ss]);
            softmax_into(&theta[n + b * ss..n + (b + 1) * ss], &mut value[b * ss..(b + 1) * ss]);
        }
        (key, value)
    }

    /// Loss and gradient with respect to the logits (T-8).
    pub fn loss_and_grad(&self, theta: &[f64]) -> (f64, Vec<f64>) {
        let ss = self.task.params.stride;
        let (key, value) = self.gates(theta);
        let (mut gk, mut gv) = (vec![0.0; key.len()], vec![0.0; value.len()]);
        let f = stagger_loss_grad(&self.task, self.which, &key, &value, Some((&mut gk, &mut gv)));
        for b in 0..self.task.params.heads {
            softmax_pullback(&key[b * ss..(b + 1) * ss], &mut gk[b * ss..(b + 1) * ss]);
            softmax_pullback(&value[b * ss..(b + 1) * ss], &mut gv[b * ss..(b + 1) * ss]);
        }
        gk.extend_from_slice(&gv);
        (f, gk)
    }
}

impl CostFunction for StaggerProblem {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, theta: &Vec<f64>) -> std::result::Result<f64, argmin::core::Error> {
        let (key, value) = self.gates(theta);
        Ok(stagger_loss_grad(&self.task, self.which, &key, &value, None))
    }
}

impl Gradient for StaggerProblem {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, theta: &Vec<f64>) -> std::result::Result<Vec<f64>, argmin::core::Error> {
        Ok(self.loss_and_grad(theta).1)
    }
}

/// The best point of a seeded multi-start L-BFGS search over static gates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaggerSearch {
    /// The lowest loss found: an upper bound on the minimum over static gates.
    pub loss: f64,
    /// Its key gates, layout `h * S + r`.
    pub key: Vec<f64>,
    /// Its value gates.
    pub value: Vec<f64>,
    /// The smallest block maximum of those gates (1 at a one-hot point).
    pub min_peak: f64,
    /// Restarts run.
    pub restarts: usize,
}

/// Multi-start L-BFGS over the static gates of `task` (random logits at scales 0.3, 1 and 3 in
/// turn, seeded), at most `iters` iterations each; returns the best end point.
pub fn search(task: &StaggeredTask, which: Phases, restarts: usize, iters: u64, seed: u64) -> Result<StaggerSearch> {
    if restarts == 0 {
        return Err(Error::invalid("restarts", "must be >= 1, got 0"));
    }
    let problem = StaggerProblem { task: task.clone(), which };
    let dim = 2 * task.params.heads * task.params.stride;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut best: Option<(f64, Vec<f64>)> = None;
    for i in 0..restarts {
        let scale = [0.3, 1.0, 3.0][i % 3];
        let init: Vec<f64> = (0..dim).map(|_| scale * rng.random_range(-1.0..1.0)).collect();
        let run = minimise(&problem, init, iters);
        if run.loss.is_finite() && best.as_ref().is_none_or(|(b, _)| run.loss < *b) {
            best = Some((run.loss, run.theta));
        }
    }
    let (loss, theta) =
        best.ok_or_else(|| Error::Numerical { what: "staggered search".into(), reason: "no finite end point".into() })?;
    let (key, value) = problem.gates(&theta);
    let ss = task.params.stride;
    let min_peak = key
        .chunks(ss)
        .chain(value.chunks(ss))
        .map(|b| b.iter().cloned().fold(f64::NEG_INFINITY, f64::max))
        .fold(f64::INFINITY, f64::min);
    Ok(StaggerSearch { loss, key, value, min_peak, restarts })
}
