//! The idealized induction task and its loss (theory/induction-model.md §1-§2).
//!
//! Offsets are 0-based in code (`r = 0..S-1`); the Markdown and every JSON/plot output use the
//! paper's 1-based offsets (`code r` = `paper r + 1`). Query offsets are `r* = 0..S-2`, the
//! target is `r* + 1`.
//!
//! * [`population_loss`] / [`population_loss_grad`]: the exact population loss at `eps = 0`
//!   for the oracle class (per-head, per-chunk gates), eqs. (T-4)-(T-5).
//! * [`static_loss_grad`]: the static-gate closed form (T-6) and its exact gradient (T-6g), the
//!   hot loop of the gradient flow.
//! * [`one_hot_loss`]: `F_1` at a one-hot distinct vertex (T-7).
//! * [`monte_carlo_loss`]: the literal vector model (T-2, T-3) averaged over sampled contexts,
//!   valid for any `eps`.

use super::vocab::Vocabulary;
use crate::{Error, Result};
use nalgebra::DVector;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Parameters of the induction task.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TaskParams {
    /// Compression stride `S` (tokens per chunk).
    pub stride: usize,
    /// Number of heads `H` (`1 <= H < S`).
    pub heads: usize,
    /// Number of chunks `L` (`>= 2`).
    pub chunks: usize,
    /// Vocabulary size `N` (`>= L*S`).
    pub vocab: usize,
    /// Attention inverse temperature `beta > 0`.
    pub beta: f64,
    /// Readout scale `gamma > 0`.
    pub gamma: f64,
    /// Common component `kappa > 0` of the geometry (cancels exactly at `eps = 0`).
    pub kappa: f64,
}

impl Default for TaskParams {
    /// The spec's primary defaults: `S=4, H=2, L=4, N=64, beta=gamma=2, kappa=1`.
    fn default() -> Self {
        TaskParams { stride: 4, heads: 2, chunks: 4, vocab: 64, beta: 2.0, gamma: 2.0, kappa: 1.0 }
    }
}

impl TaskParams {
    /// The spec's secondary defaults: `S=8, H=3, L=4, N=256, beta=gamma=2, kappa=1`.
    pub fn secondary() -> Self {
        TaskParams { stride: 8, heads: 3, chunks: 4, vocab: 256, beta: 2.0, gamma: 2.0, kappa: 1.0 }
    }

    /// Check every parameter; the error names the field and the allowed range.
    pub fn validate(&self) -> Result<()> {
        let p = self;
        if p.stride < 2 {
            return Err(Error::invalid("stride", format!("S must be >= 2, got {}", p.stride)));
        }
        if p.heads < 1 || p.heads >= p.stride {
            return Err(Error::invalid("heads", format!("H must satisfy 1 <= H < S = {}, got {}", p.stride, p.heads)));
        }
        if p.chunks < 2 {
            return Err(Error::invalid("chunks", format!("L must be >= 2, got {}", p.chunks)));
        }
        if p.vocab < p.chunks * p.stride {
            return Err(Error::invalid(
                "vocab",
                format!(
                    "N must be >= L*S = {} (contexts hold L*S distinct tokens), got {}",
                    p.chunks * p.stride,
                    p.vocab
                ),
            ));
        }
        for (name, v) in [("beta", p.beta), ("gamma", p.gamma), ("kappa", p.kappa)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::invalid(name, format!("must be finite and > 0, got {v}")));
            }
        }
        Ok(())
    }

    /// Number of query offsets `R = S - 1` per chunk.
    pub fn query_offsets(&self) -> usize {
        self.stride - 1
    }

    /// Number of distractor tokens `N - L S` (never in the context).
    pub fn distractors(&self) -> f64 {
        (self.vocab - self.chunks * self.stride) as f64
    }
}

/// Oracle-class gates: one key and one value probability vector per (head, chunk).
/// Layout `[h][l][r]`, index `(h * L + l) * S + r`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OracleGates {
    /// `H`.
    pub heads: usize,
    /// `L`.
    pub chunks: usize,
    /// `S`.
    pub stride: usize,
    /// `pK_{h,l}(r)`.
    pub key: Vec<f64>,
    /// `pV_{h,l}(r)`.
    pub value: Vec<f64>,
}

impl OracleGates {
    /// Uniform gates.
    pub fn uniform(p: &TaskParams) -> Self {
        let n = p.heads * p.chunks * p.stride;
        let u = 1.0 / p.stride as f64;
        OracleGates { heads: p.heads, chunks: p.chunks, stride: p.stride, key: vec![u; n], value: vec![u; n] }
    }

    /// One-hot gates: head `h` in chunk `l` uses key offset `offsets[h][l]` and value offset
    /// `offsets[h][l] + 1` (0-based; each must be `<= S - 2`).
    pub fn one_hot(p: &TaskParams, offsets: &[Vec<usize>]) -> Result<Self> {
        if offsets.len() != p.heads || offsets.iter().any(|o| o.len() != p.chunks) {
            return Err(Error::shape(
                "one-hot offsets",
                format!("[{}][{}]", p.heads, p.chunks),
                format!("[{}][..]", offsets.len()),
            ));
        }
        let mut g = OracleGates::uniform(p);
        g.key.iter_mut().for_each(|x| *x = 0.0);
        g.value.iter_mut().for_each(|x| *x = 0.0);
        for (h, per_chunk) in offsets.iter().enumerate() {
            for (l, &r) in per_chunk.iter().enumerate() {
                if r + 1 >= p.stride {
                    return Err(Error::invalid(
                        "offset",
                        format!("key offset must be <= S-2 = {} (0-based), got {r}", p.stride - 2),
                    ));
                }
                let (ik, iv) = (g.idx(h, l, r), g.idx(h, l, r + 1));
                g.key[ik] = 1.0;
                g.value[iv] = 1.0;
            }
        }
        Ok(g)
    }

    /// Replicate static gates (`H x S`, the same in every chunk) into the oracle layout.
    pub fn from_static(p: &TaskParams, key: &[f64], value: &[f64]) -> Self {
        let mut g = OracleGates::uniform(p);
        for h in 0..p.heads {
            for l in 0..p.chunks {
                for r in 0..p.stride {
                    let i = g.idx(h, l, r);
                    g.key[i] = key[h * p.stride + r];
                    g.value[i] = value[h * p.stride + r];
                }
            }
        }
        g
    }

    /// Flat index of `(h, l, r)`.
    #[inline]
    pub fn idx(&self, h: usize, l: usize, r: usize) -> usize {
        (h * self.chunks + l) * self.stride + r
    }

    fn check(&self, p: &TaskParams) -> Result<()> {
        let n = p.heads * p.chunks * p.stride;
        if self.heads != p.heads
            || self.chunks != p.chunks
            || self.stride != p.stride
            || self.key.len() != n
            || self.value.len() != n
        {
            return Err(Error::shape(
                "oracle gates",
                format!("[H={}][L={}][S={}]", p.heads, p.chunks, p.stride),
                format!("[{}][{}][{}] with {} entries", self.heads, self.chunks, self.stride, self.key.len()),
            ));
        }
        Ok(())
    }
}

/// `log(sum_i w_i e^{x_i} + c)` helper state: returns (shift m) so that all exponents are <= 0.
#[inline]
fn shift_for(max_logit: f64) -> f64 {
    max_logit.max(0.0)
}

/// Exact population loss at `eps = 0` for oracle gates, eq. (T-4). Gates must be
/// probability vectors (not checked here, for speed; see [`OracleGates`]).
pub fn population_loss(p: &TaskParams, g: &OracleGates) -> Result<f64> {
    population_loss_impl(p, g, None)
}

/// Exact population loss (T-4) and its gradient with respect to `pK` and `pV` (T-5), in the
/// layout of [`OracleGates`]. Returns `(F, dF/dpK, dF/dpV)`.
pub fn population_loss_grad(p: &TaskParams, g: &OracleGates) -> Result<(f64, Vec<f64>, Vec<f64>)> {
    let n = g.key.len();
    let mut gk = vec![0.0; n];
    let mut gv = vec![0.0; n];
    let f = population_loss_impl(p, g, Some((&mut gk, &mut gv)))?;
    Ok((f, gk, gv))
}

fn population_loss_impl(
    p: &TaskParams,
    g: &OracleGates,
    mut grad: Option<(&mut Vec<f64>, &mut Vec<f64>)>,
) -> Result<f64> {
    p.validate()?;
    g.check(p)?;
    let (hh, ll, ss) = (p.heads, p.chunks, p.stride);
    let lm1 = (ll - 1) as f64;
    let mut a_on = vec![0.0; hh];
    let mut a_off = vec![0.0; hh];
    let mut u = vec![0.0; ll * ss];
    let mut gmat = vec![0.0; ll * ss];
    let mut s = vec![0.0; hh * ll];
    let mut total = 0.0;
    for lq in 0..ll {
        for rq in 0..ss - 1 {
            // (T-4a) attention: a_{h,l} = [e^{beta c_h} 1{l=l*} + 1{l!=l*}] / (e^{beta c_h} + L - 1)
            for h in 0..hh {
                let c = g.key[g.idx(h, lq, rq)];
                let e = (p.beta * (c - 1.0)).exp(); // scaled by e^{-beta}: e^{beta c}/e^{beta}
                let off = (-p.beta).exp();
                let den = e + lm1 * off;
                a_on[h] = e / den;
                a_off[h] = off / den;
            }
            // (T-4b) U_{l,r} = sum_h a_{h,l} pV_{h,l}(r)
            let mut umax = f64::NEG_INFINITY;
            for l in 0..ll {
                for r in 0..ss {
                    let mut acc = 0.0;
                    for h in 0..hh {
                        let a = if l == lq { a_on[h] } else { a_off[h] };
                        acc += a * g.value[g.idx(h, l, r)];
                    }
                    u[l * ss + r] = acc;
                    umax = umax.max(acc);
                }
            }
            // (T-4c) loss = -gamma U_target + log(sum e^{gamma U} + N - L S)
            let m = shift_for(p.gamma * umax);
            let mut z = p.distractors() * (-m).exp();
            for (gm, &uv) in gmat.iter_mut().zip(u.iter()) {
                let e = (p.gamma * uv - m).exp();
                *gm = e;
                z += e;
            }
            let target = lq * ss + rq + 1;
            total += -p.gamma * u[target] + m + z.ln();
            if let Some((gk, gv)) = grad.as_mut() {
                // (T-5) G_{l,r} = gamma (pi_{l,r} - 1{target})
                for gm in gmat.iter_mut() {
                    *gm = p.gamma * *gm / z;
                }
                gmat[target] -= p.gamma;
                for h in 0..hh {
                    let mut sbar = 0.0;
                    for l in 0..ll {
                        let a = if l == lq { a_on[h] } else { a_off[h] };
                        let mut sh = 0.0;
                        for r in 0..ss {
                            let i = g.idx(h, l, r);
                            sh += gmat[l * ss + r] * g.value[i];
                            gv[i] += a * gmat[l * ss + r];
                        }
                        s[h * ll + l] = sh;
                        sbar += a * sh;
                    }
                    let i = g.idx(h, lq, rq);
                    gk[i] += p.beta * a_on[h] * (s[h * ll + lq] - sbar);
                }
            }
        }
    }
    let nq = (ll * (ss - 1)) as f64;
    if let Some((gk, gv)) = grad {
        gk.iter_mut().for_each(|x| *x /= nq);
        gv.iter_mut().for_each(|x| *x /= nq);
    }
    let f = total / nq;
    if !f.is_finite() {
        return Err(Error::Numerical { what: "population loss".into(), reason: format!("non-finite value {f}") });
    }
    Ok(f)
}

/// `F_1`, the loss of any one-hot distinct configuration, eq. (T-7).
pub fn one_hot_loss(p: &TaskParams) -> Result<f64> {
    p.validate()?;
    let (h, l, s) = (p.heads as f64, p.chunks as f64, p.stride as f64);
    let eb = p.beta.exp();
    let a = eb / (eb + l - 1.0);
    let b = 1.0 / (eb + l - 1.0);
    let g = p.gamma;
    let rest = p.vocab as f64 - l * h;
    let loss_cov = -g * a + ((g * a).exp() + (l - 1.0) * (g * b).exp() + (h - 1.0) * l * (g / l).exp() + rest).ln();
    let loss_unc = (l * h * (g / l).exp() + rest).ln();
    Ok((h * loss_cov + (s - 1.0 - h) * loss_unc) / (s - 1.0))
}

/// Preallocated buffers for [`static_loss_grad`], so that the gradient-flow loop allocates
/// nothing.
#[derive(Debug, Clone)]
pub struct StaticWorkspace {
    a_on: Vec<f64>,
    b_off: Vec<f64>,
    u_on: Vec<f64>,
    u_off: Vec<f64>,
    g_on: Vec<f64>,
    g_off: Vec<f64>,
}

impl StaticWorkspace {
    /// Buffers for `H` heads and stride `S`.
    pub fn new(heads: usize, stride: usize) -> Self {
        StaticWorkspace {
            a_on: vec![0.0; heads],
            b_off: vec![0.0; heads],
            u_on: vec![0.0; stride],
            u_off: vec![0.0; stride],
            g_on: vec![0.0; stride],
            g_off: vec![0.0; stride],
        }
    }
}

/// Static-gate closed form (T-6) and, if `grad` is given, its exact gradient (T-6g) with
/// respect to `pK_h(r)` and `pV_h(r)` (layout `h * S + r`, written, not accumulated).
/// Parameters are assumed valid (call [`TaskParams::validate`] once outside the hot loop).
pub fn static_loss_grad(
    p: &TaskParams,
    key: &[f64],
    value: &[f64],
    ws: &mut StaticWorkspace,
    grad: Option<(&mut [f64], &mut [f64])>,
) -> f64 {
    let (hh, ll, ss) = (p.heads, p.chunks, p.stride);
    let lm1 = (ll - 1) as f64;
    let rr = ss - 1;
    let gamma = p.gamma;
    let dist = p.distractors();
    let off = (-p.beta).exp();
    let mut total = 0.0;
    let mut grad = grad;
    if let Some((gk, gv)) = grad.as_mut() {
        gk.iter_mut().for_each(|x| *x = 0.0);
        gv.iter_mut().for_each(|x| *x = 0.0);
    }
    for rq in 0..rr {
        // A_h = e^{beta pK_h(r*)} / (e^{beta pK_h(r*)} + L - 1), B_h = (1 - A_h)/(L - 1)
        for h in 0..hh {
            let e = (p.beta * (key[h * ss + rq] - 1.0)).exp();
            let den = e + lm1 * off;
            ws.a_on[h] = e / den;
            ws.b_off[h] = off / den;
        }
        let mut umax = 0.0f64;
        for r in 0..ss {
            let (mut on, mut of) = (0.0, 0.0);
            for h in 0..hh {
                let v = value[h * ss + r];
                on += ws.a_on[h] * v;
                of += ws.b_off[h] * v;
            }
            ws.u_on[r] = on;
            ws.u_off[r] = of;
            umax = umax.max(on).max(of);
        }
        let m = gamma * umax;
        let mut z = dist * (-m).exp();
        for r in 0..ss {
            let eon = (gamma * ws.u_on[r] - m).exp();
            let eoff = (gamma * ws.u_off[r] - m).exp();
            ws.g_on[r] = eon;
            ws.g_off[r] = eoff;
            z += eon + lm1 * eoff;
        }
        total += -gamma * ws.u_on[rq + 1] + m + z.ln();
        if let Some((gk, gv)) = grad.as_mut() {
            let inv = gamma / z;
            for r in 0..ss {
                ws.g_on[r] *= inv; // gamma pi_on(r)
                ws.g_off[r] *= inv * lm1; // gamma (L-1) pi_off(r)
            }
            ws.g_on[rq + 1] -= gamma;
            for h in 0..hh {
                let (a, b) = (ws.a_on[h], ws.b_off[h]);
                let (mut son, mut soff) = (0.0, 0.0);
                let base = h * ss;
                for r in 0..ss {
                    let v = value[base + r];
                    son += ws.g_on[r] * v;
                    soff += ws.g_off[r] * v;
                    gv[base + r] += a * ws.g_on[r] + b * ws.g_off[r];
                }
                gk[base + rq] += p.beta * a * (1.0 - a) * (son - soff / lm1);
            }
        }
    }
    let inv_r = 1.0 / rr as f64;
    if let Some((gk, gv)) = grad {
        gk.iter_mut().for_each(|x| *x *= inv_r);
        gv.iter_mut().for_each(|x| *x *= inv_r);
    }
    total * inv_r
}

/// Softmax of `logits` into `out` (same length): the one softmax of the crate.
pub use crate::numeric::softmax_into;

/// Pull a gradient `g` with respect to `p = softmax(theta)` back to `theta` in place:
/// `d/dtheta = p (.) (g - <p, g>)` (T-8).
#[inline]
pub fn softmax_pullback(p: &[f64], g: &mut [f64]) {
    let dot: f64 = p.iter().zip(g.iter()).map(|(a, b)| a * b).sum();
    for (gi, &pi) in g.iter_mut().zip(p) {
        *gi = pi * (*gi - dot);
    }
}

/// Per-query outcome of the literal vector model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueryOutcome {
    /// Cross-entropy `-log softmax(z)_{y*}`.
    pub loss: f64,
    /// Whether `argmax_y z_y = y*` (strictly: ties count as wrong).
    pub correct: bool,
    /// `softmax(z)_{y*}`.
    pub target_prob: f64,
}

/// Draw a context: `L*S` distinct token ids, uniformly without replacement (row-major `[l][r]`).
pub fn sample_context(p: &TaskParams, rng: &mut impl Rng) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..p.vocab).collect();
    let k = p.chunks * p.stride;
    for i in 0..k {
        let j = rng.random_range(i..p.vocab);
        ids.swap(i, j);
    }
    ids.truncate(k);
    ids
}

/// The literal vector model (T-2, T-3) on one context: compress every chunk with the gates,
/// then answer all `L (S-1)` queries with full `d`-dimensional inner products against the
/// whole vocabulary. Returns outcomes in order `(l*, r*)`, `r* = 0..S-2`.
pub fn literal_context(
    p: &TaskParams,
    vocab: &Vocabulary,
    g: &OracleGates,
    context: &[usize],
) -> Result<Vec<QueryOutcome>> {
    p.validate()?;
    g.check(p)?;
    if vocab.len() != p.vocab {
        return Err(Error::shape("vocabulary", format!("N = {}", p.vocab), format!("{}", vocab.len())));
    }
    let (hh, ll, ss) = (p.heads, p.chunks, p.stride);
    let x = &vocab.embeddings;
    let d = vocab.dim();
    // k_{h,l} = sum_r pK_{h,l}(r) x_{l,r}, v_{h,l} likewise (T-2).
    let mut keys = vec![DVector::<f64>::zeros(d); hh * ll];
    let mut vals = vec![DVector::<f64>::zeros(d); hh * ll];
    for h in 0..hh {
        for l in 0..ll {
            for r in 0..ss {
                let col = x.column(context[l * ss + r]);
                keys[h * ll + l] += g.key[g.idx(h, l, r)] * col;
                vals[h * ll + l] += g.value[g.idx(h, l, r)] * col;
            }
        }
    }
    let mut out = Vec::with_capacity(ll * (ss - 1));
    let mut att = vec![0.0; ll];
    for lq in 0..ll {
        for rq in 0..ss - 1 {
            let q = x.column(context[lq * ss + rq]);
            let target = context[lq * ss + rq + 1];
            let mut o = DVector::<f64>::zeros(d);
            for h in 0..hh {
                // a_{h,l} = softmax_l(beta q.k_{h,l}) (T-3)
                let logits: Vec<f64> = (0..ll).map(|l| p.beta * q.dot(&keys[h * ll + l])).collect();
                softmax_into(&logits, &mut att);
                for l in 0..ll {
                    o += att[l] * &vals[h * ll + l];
                }
            }
            // z_y = gamma y.o for every y in V; loss = -log softmax(z)_{y*}
            let z = x.tr_mul(&o) * p.gamma;
            let lse = crate::numeric::log_sum_exp(z.iter().copied());
            let zt = z[target];
            let correct = z.iter().enumerate().all(|(i, &v)| i == target || v < zt);
            out.push(QueryOutcome { loss: lse - zt, correct, target_prob: (zt - lse).exp() });
        }
    }
    Ok(out)
}

/// A Monte Carlo estimate over sampled contexts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MonteCarlo {
    /// Mean loss over contexts (each context averaged over all its queries).
    pub mean: f64,
    /// Standard error of the mean over contexts (0 when every context gives the same loss).
    pub std_err: f64,
    /// Number of contexts.
    pub contexts: usize,
}

/// Monte Carlo estimate of `F` with the literal vector model (T-2, T-3) over `contexts`
/// seeded contexts; valid for any `eps`.
pub fn monte_carlo_loss(
    p: &TaskParams,
    vocab: &Vocabulary,
    g: &OracleGates,
    contexts: usize,
    seed: u64,
) -> Result<MonteCarlo> {
    if contexts == 0 {
        return Err(Error::invalid("contexts", "need at least 1 context, got 0"));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut per = Vec::with_capacity(contexts);
    for _ in 0..contexts {
        let ctx = sample_context(p, &mut rng);
        let outs = literal_context(p, vocab, g, &ctx)?;
        per.push(outs.iter().map(|o| o.loss).sum::<f64>() / outs.len() as f64);
    }
    let n = per.len() as f64;
    let mean = per.iter().sum::<f64>() / n;
    let var = if per.len() > 1 { per.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    Ok(MonteCarlo { mean, std_err: (var / n).sqrt(), contexts })
}
