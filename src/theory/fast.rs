//! The gradient flow's hot loop, fast (theory/induction-model.md §8): the static-gate loss
//! (T-6), its exact gradient (T-6g) and the softmax pullback (T-8) straight from the logits,
//! with every exponential of one evaluation batched into contiguous arrays and computed by a
//! branch-free polynomial [`exp_poly`] that the compiler vectorises (AVX2 when the CPU has it,
//! chosen once at run time; the same code and the same results otherwise: Rust never fuses a
//! multiply and an add on its own, so both paths round identically).
//!
//! [`super::task::static_loss_grad`] stays the reference: `flow::FlowKernel::Reference` runs
//! the flow through it, tests compare the two (`theory_fast` tests), and the bench
//! `theory_flow` times both side by side.

#![allow(clippy::needless_range_loop)] // index loops mirror (T-6g)

use super::task::TaskParams;

/// `ln 2`, high part (exact in its leading 32 bits, so `n * LN2_HI` is exact for `|n| < 2^21`).
const LN2_HI: f64 = 6.931_471_803_691_238e-1;
/// `ln 2 - LN2_HI`.
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
/// `1.5 * 2^52`: adding it rounds to the nearest integer and leaves it in the low mantissa bits.
const ROUND_SHIFT: f64 = 6_755_399_441_055_744.0;
/// Arguments are clamped to `[EXP_MIN, EXP_MAX]` (NaN passes through). Below `EXP_MIN` the
/// result is `e^EXP_MIN ~ 3e-308` instead of something smaller: every use here adds such terms
/// to a sum that holds a term equal to 1 (max-shifted), so the difference is below rounding.
const EXP_MIN: f64 = -708.0;
const EXP_MAX: f64 = 709.0;

/// `e^x` to about 1 ulp, branch-free so that loops over it vectorise: Cody-Waite reduction
/// `x = n ln 2 + r`, `|r| <= ln 2 / 2`, Taylor polynomial of degree 13 in `r` (truncation error
/// below `4e-18` relative, evaluated by Estrin's scheme), and `2^n` assembled in the exponent
/// bits. NaN gives NaN.
#[inline(always)]
pub fn exp_poly(x: f64) -> f64 {
    let x = x.clamp(EXP_MIN, EXP_MAX); // NaN stays NaN
    let t = x * std::f64::consts::LOG2_E + ROUND_SHIFT;
    let n = t - ROUND_SHIFT;
    let r = x - n * LN2_HI - n * LN2_LO;
    // Degree-13 Taylor polynomial by Estrin's scheme (dependency chains of 4 multiply-adds
    // instead of Horner's 13, so consecutive lanes overlap in the pipeline).
    let r2 = r * r;
    let r4 = r2 * r2;
    let r8 = r4 * r4;
    let a0 = 1.0 + r;
    let a1 = 0.5 + r * (1.0 / 6.0);
    let a2 = 1.0 / 24.0 + r * (1.0 / 120.0);
    let a3 = 1.0 / 720.0 + r * (1.0 / 5_040.0);
    let a4 = 1.0 / 40_320.0 + r * (1.0 / 362_880.0);
    let a5 = 1.0 / 3_628_800.0 + r * (1.0 / 39_916_800.0);
    let a6 = 1.0 / 479_001_600.0 + r * (1.0 / 6_227_020_800.0);
    let c0 = (a0 + a1 * r2) + (a2 + a3 * r2) * r4;
    let c1 = (a4 + a5 * r2) + a6 * r4;
    let p = c0 + c1 * r8;
    // The low bits of t hold n (two's complement); n + 1023 lies in 2..=2046 after the clamp.
    let scale = f64::from_bits(t.to_bits().wrapping_add(1023) << 52);
    p * scale
}

/// `x <- e^x` for every entry.
#[inline(always)]
fn exp_slice(xs: &mut [f64]) {
    for x in xs.iter_mut() {
        *x = exp_poly(*x);
    }
}

/// Buffers of the fast static kernel for `H` heads and stride `S`; after [`FastStatic::eval`]
/// they also hold the gates `pK`, `pV` of the evaluated logits.
#[derive(Debug, Clone)]
pub struct FastStatic {
    heads: usize,
    stride: usize,
    /// `[pK (H S) | pV (H S)]` of the last evaluation.
    gates: Vec<f64>,
    /// `e^{beta (pK_h(r) - 1)}`, layout `h * R + r`.
    att: Vec<f64>,
    /// `A_h` for query offset `r*`, layout `r* * H + h`.
    a_on: Vec<f64>,
    /// `B_h` for query offset `r*`, layout `r* * H + h`.
    b_off: Vec<f64>,
    /// Per `r*`: `[u_on (S) | u_off (S)]`, then overwritten by the shifted exponentials.
    ex: Vec<f64>,
    /// Per `r*`: the shift `m = gamma max(u)`.
    shift: Vec<f64>,
    /// Per `r*`: `u_on(r* + 1)`, the target's readout.
    target_u: Vec<f64>,
    /// Gradient with respect to the gates, `[dF/dpK | dF/dpV]`.
    grad: Vec<f64>,
    simd: bool,
}

impl FastStatic {
    /// Buffers for `H` heads and stride `S`.
    pub fn new(heads: usize, stride: usize) -> Self {
        let hs = heads * stride;
        let rr = stride.saturating_sub(1);
        FastStatic {
            heads,
            stride,
            gates: vec![0.0; 2 * hs],
            att: vec![0.0; heads * rr],
            a_on: vec![0.0; rr * heads],
            b_off: vec![0.0; rr * heads],
            ex: vec![0.0; rr * 2 * stride],
            shift: vec![0.0; rr],
            target_u: vec![0.0; rr],
            grad: vec![0.0; 2 * hs],
            simd: simd_available(),
        }
    }

    /// Gates `pK` (`H x S`) of the last evaluation.
    pub fn key(&self) -> &[f64] {
        &self.gates[..self.heads * self.stride]
    }

    /// Gates `pV` (`H x S`) of the last evaluation.
    pub fn value(&self) -> &[f64] {
        &self.gates[self.heads * self.stride..]
    }

    /// Loss `F` (T-6) at logits `theta = [thetaK (H S) | thetaV (H S)]` and its gradient with
    /// respect to the logits (T-6g pulled back through T-8) into `out` (length `2 H S`).
    /// Parameters are assumed valid and of this workspace's `H`, `S`.
    pub fn eval(&mut self, p: &TaskParams, theta: &[f64], out: &mut [f64]) -> f64 {
        #[cfg(target_arch = "x86_64")]
        if self.simd {
            // SAFETY: `simd` is true only when the running CPU reports AVX2 and FMA.
            return unsafe { self.eval_avx2(p, theta, out) };
        }
        self.eval_generic(p, theta, out)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn eval_avx2(&mut self, p: &TaskParams, theta: &[f64], out: &mut [f64]) -> f64 {
        self.eval_generic(p, theta, out)
    }

    #[inline(always)]
    fn eval_generic(&mut self, p: &TaskParams, theta: &[f64], out: &mut [f64]) -> f64 {
        let (hh, ss) = (self.heads, self.stride);
        let hs = hh * ss;
        let rr = ss - 1;
        let lm1 = (p.chunks - 1) as f64;
        let (beta, gamma) = (p.beta, p.gamma);
        let dist = p.distractors();
        let off = exp_poly(-beta);
        // (T-8) softmax of every block: shift, one batched exp, normalise.
        let gates = &mut self.gates[..2 * hs];
        for b in 0..2 * hh {
            let blk = &theta[b * ss..(b + 1) * ss];
            let m = blk.iter().fold(f64::NEG_INFINITY, |a, &x| if x > a { x } else { a });
            for r in 0..ss {
                gates[b * ss + r] = blk[r] - m;
            }
        }
        exp_slice(gates);
        for b in 0..2 * hh {
            let blk = &mut gates[b * ss..(b + 1) * ss];
            let z: f64 = blk.iter().sum();
            let inv = 1.0 / z;
            blk.iter_mut().for_each(|x| *x *= inv);
        }
        let (pk, pv) = self.gates.split_at(hs);
        // (T-6) attention: A_h = e^{beta(pK_h(r*) - 1)} / (e^{beta(pK_h(r*) - 1)} + (L-1) e^{-beta}).
        for h in 0..hh {
            for r in 0..rr {
                self.att[h * rr + r] = beta * (pk[h * ss + r] - 1.0);
            }
        }
        exp_slice(&mut self.att);
        for rq in 0..rr {
            for h in 0..hh {
                let e = self.att[h * rr + rq];
                let inv = 1.0 / (e + lm1 * off);
                self.a_on[rq * hh + h] = e * inv;
                self.b_off[rq * hh + h] = off * inv;
            }
        }
        // u_on(r) = sum_h A_h pV_h(r), u_off(r) = sum_h B_h pV_h(r); shift by gamma max u.
        for rq in 0..rr {
            let row = &mut self.ex[rq * 2 * ss..(rq + 1) * 2 * ss];
            row.iter_mut().for_each(|x| *x = 0.0);
            let (on, of) = row.split_at_mut(ss);
            for h in 0..hh {
                let (a, b) = (self.a_on[rq * hh + h], self.b_off[rq * hh + h]);
                let v = &pv[h * ss..(h + 1) * ss];
                for ((o, f), &x) in on.iter_mut().zip(of.iter_mut()).zip(v) {
                    *o += a * x;
                    *f += b * x;
                }
            }
            let umax = row.iter().fold(0.0f64, |a, &x| if x > a { x } else { a });
            let m = gamma * umax;
            self.shift[rq] = m;
            self.target_u[rq] = row[rq + 1];
            for x in row.iter_mut() {
                *x = gamma * *x - m;
            }
        }
        let mut total = 0.0;
        for rq in 0..rr {
            total += -gamma * self.target_u[rq] + self.shift[rq];
        }
        exp_slice(&mut self.ex);
        self.grad.iter_mut().for_each(|x| *x = 0.0);
        let (gk, gv) = self.grad.split_at_mut(hs);
        for rq in 0..rr {
            let m = self.shift[rq];
            let row = &mut self.ex[rq * 2 * ss..(rq + 1) * 2 * ss];
            let (mut s_on, mut s_off) = (0.0, 0.0);
            for r in 0..ss {
                s_on += row[r];
                s_off += row[ss + r];
            }
            let z = dist * exp_poly(-m) + s_on + lm1 * s_off;
            total += z.ln();
            // (T-6g) G_on = gamma (pi_on - 1{r = r*+1}), G_off = gamma (L-1) pi_off.
            let inv = gamma / z;
            let inv_off = inv * lm1;
            let (on, of) = row.split_at_mut(ss);
            on.iter_mut().for_each(|x| *x *= inv);
            of.iter_mut().for_each(|x| *x *= inv_off);
            on[rq + 1] -= gamma;
            for h in 0..hh {
                let (a, b) = (self.a_on[rq * hh + h], self.b_off[rq * hh + h]);
                let v = &pv[h * ss..(h + 1) * ss];
                let g = &mut gv[h * ss..(h + 1) * ss];
                let (mut son, mut soff) = (0.0, 0.0);
                for ((&x, &y), &w) in on.iter().zip(of.iter()).zip(v) {
                    son += x * w;
                    soff += y * w;
                }
                for ((gr, &x), &y) in g.iter_mut().zip(on.iter()).zip(of.iter()) {
                    *gr += a * x + b * y;
                }
                gk[h * ss + rq] += beta * a * (1.0 - a) * (son - soff / lm1);
            }
        }
        // Average over r* and pull back through the softmax (T-8).
        let inv_r = 1.0 / rr as f64;
        for b in 0..2 * hh {
            let pb = &self.gates[b * ss..(b + 1) * ss];
            let gb = &self.grad[b * ss..(b + 1) * ss];
            let dot: f64 = pb.iter().zip(gb).map(|(x, y)| x * y).sum();
            for r in 0..ss {
                out[b * ss + r] = pb[r] * (gb[r] - dot) * inv_r;
            }
        }
        total * inv_r
    }
}

fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
