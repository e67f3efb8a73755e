//! The static-gate loss (T-6), its exact gradient (T-6g) and the softmax pullback (T-8) for
//! `W` independent parameter vectors at once, one per lane (theory/induction-model.md §8).
//!
//! Every quantity is stored as `[f64; W]`, lane `l` belonging to the `l`-th parameter vector,
//! and every operation is written once per lane (`for l in 0..W`), so the lanes never mix: no
//! shuffle, no horizontal sum, and the compiler turns each lane loop into one vector
//! instruction (8 lanes: one AVX-512 register, two AVX2 registers). Each lane performs exactly
//! the operations of `W = 1`, in the same order, and Rust never fuses a multiply and an add on
//! its own, so a lane's result does not depend on `W`, on which lane it occupies, on what the
//! other lanes hold or on the instruction set: bit for bit (checked by this module's tests).

use super::exp::exp_poly;
use crate::theory::task::TaskParams;

/// Instruction set a kernel is compiled for (the arithmetic, and so the result, is the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512 (F), 8 doubles per register.
    Avx512,
    /// AVX2 and FMA (FMA is enabled but never used for arithmetic: no contraction).
    Avx2,
    /// The target's baseline (SSE2 on x86_64).
    Generic,
}

impl Isa {
    /// The widest instruction set the running CPU has.
    pub fn detect() -> Isa {
        [Isa::Avx512, Isa::Avx2].into_iter().find(|i| i.available()).unwrap_or(Isa::Generic)
    }

    /// Whether the running CPU can execute code compiled for this instruction set.
    pub fn available(self) -> bool {
        match self {
            Isa::Generic => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// Buffers of the lane kernel for `H` heads and stride `S`.
#[derive(Debug, Clone)]
pub(crate) struct Lanes<const W: usize> {
    heads: usize,
    stride: usize,
    /// `[pK (H S) | pV (H S)]` of the last evaluation.
    pub(crate) gates: Vec<[f64; W]>,
    /// `A_h` for query offset `r*`, layout `r* * H + h`.
    a_on: Vec<[f64; W]>,
    /// `B_h` for query offset `r*`, layout `r* * H + h`.
    b_off: Vec<[f64; W]>,
    /// `[u_on (S) | u_off (S)]` of one query offset, then its scaled exponentials.
    row: Vec<[f64; W]>,
    /// Gradient with respect to the gates, `[dF/dpK | dF/dpV]`.
    grad: Vec<[f64; W]>,
}

impl<const W: usize> Lanes<W> {
    pub(crate) fn new(heads: usize, stride: usize) -> Self {
        let hs = heads * stride;
        let rr = stride.saturating_sub(1);
        Lanes {
            heads,
            stride,
            gates: vec![[0.0; W]; 2 * hs],
            a_on: vec![[0.0; W]; rr * heads],
            b_off: vec![[0.0; W]; rr * heads],
            row: vec![[0.0; W]; 2 * stride],
            grad: vec![[0.0; W]; 2 * hs],
        }
    }

    /// Per lane: the logit gradient of `F` at `theta = [thetaK (H S) | thetaV (H S)]` into
    /// `out`, and (with `want_loss`) the loss `F`, else zeros. Parameters are assumed valid
    /// and of this workspace's `H`, `S`.
    #[inline(always)]
    pub(crate) fn eval_generic(
        &mut self,
        p: &TaskParams,
        theta: &[[f64; W]],
        out: &mut [[f64; W]],
        want_loss: bool,
    ) -> [f64; W] {
        let (hh, ss) = (self.heads, self.stride);
        let hs = hh * ss;
        let rr = ss - 1;
        let lm1 = (p.chunks - 1) as f64;
        let (beta, gamma) = (p.beta, p.gamma);
        let dist = p.distractors();
        let off = exp_poly(-beta);
        let lm1_off = lm1 * off;
        let theta = &theta[..2 * hs];
        let out = &mut out[..2 * hs];
        // (T-8) softmax of every block: shift by the maximum, exponentiate, normalise.
        for (blk, g) in theta.chunks_exact(ss).zip(self.gates.chunks_exact_mut(ss)) {
            let mut m = [f64::NEG_INFINITY; W];
            for x in blk {
                for l in 0..W {
                    m[l] = if x[l] > m[l] { x[l] } else { m[l] };
                }
            }
            let mut z = [0.0; W];
            for (gi, x) in g.iter_mut().zip(blk) {
                for l in 0..W {
                    gi[l] = exp_poly(x[l] - m[l]);
                    z[l] += gi[l];
                }
            }
            let mut inv = [0.0; W];
            for l in 0..W {
                inv[l] = 1.0 / z[l];
            }
            for gi in g.iter_mut() {
                for l in 0..W {
                    gi[l] *= inv[l];
                }
            }
        }
        let (pk, pv) = self.gates.split_at(hs);
        // (T-6) attention: A_h = e^{beta(pK_h(r*) - 1)} / (e^{beta(pK_h(r*) - 1)} + (L-1) e^{-beta}),
        // B_h = e^{-beta} / (same denominator).
        for rq in 0..rr {
            for h in 0..hh {
                let x = &pk[h * ss + rq];
                let (a, b) = (&mut self.a_on[rq * hh + h], &mut self.b_off[rq * hh + h]);
                for l in 0..W {
                    let e = exp_poly(beta * (x[l] - 1.0));
                    let inv = 1.0 / (e + lm1_off);
                    a[l] = e * inv;
                    b[l] = off * inv;
                }
            }
        }
        let mut total = [0.0; W];
        self.grad.iter_mut().for_each(|g| *g = [0.0; W]);
        let (gk, gv) = self.grad.split_at_mut(hs);
        let (on, of) = self.row.split_at_mut(ss);
        for rq in 0..rr {
            let a_rq = &self.a_on[rq * hh..(rq + 1) * hh];
            let b_rq = &self.b_off[rq * hh..(rq + 1) * hh];
            // u_on(r) = sum_h A_h pV_h(r), u_off(r) = sum_h B_h pV_h(r).
            on.iter_mut().chain(of.iter_mut()).for_each(|x| *x = [0.0; W]);
            for ((a, b), v) in a_rq.iter().zip(b_rq).zip(pv.chunks_exact(ss)) {
                for ((o, f), x) in on.iter_mut().zip(of.iter_mut()).zip(v) {
                    for l in 0..W {
                        o[l] += a[l] * x[l];
                        f[l] += b[l] * x[l];
                    }
                }
            }
            // Shift by m = gamma max(u, 0) (the distractors' readout is 0), exponentiate.
            let mut m = [0.0; W];
            for x in on.iter().chain(of.iter()) {
                for l in 0..W {
                    m[l] = if x[l] > m[l] { x[l] } else { m[l] };
                }
            }
            for l in 0..W {
                m[l] *= gamma;
            }
            let target = on[rq + 1];
            let (mut s_on, mut s_off) = ([0.0; W], [0.0; W]);
            for (o, f) in on.iter_mut().zip(of.iter_mut()) {
                for l in 0..W {
                    o[l] = exp_poly(gamma * o[l] - m[l]);
                    f[l] = exp_poly(gamma * f[l] - m[l]);
                    s_on[l] += o[l];
                    s_off[l] += f[l];
                }
            }
            // Z / e^m, and (T-6c) loss(r*) = -gamma u_on(r*+1) + m + ln(Z / e^m).
            let mut z = [0.0; W];
            for l in 0..W {
                z[l] = dist * exp_poly(-m[l]) + s_on[l] + lm1 * s_off[l];
            }
            if want_loss {
                for l in 0..W {
                    total[l] += -gamma * target[l] + m[l] + z[l].ln();
                }
            }
            // (T-6g) G_on = gamma (pi_on - 1{r = r*+1}), G_off = gamma (L-1) pi_off.
            let (mut inv, mut inv_off) = ([0.0; W], [0.0; W]);
            for l in 0..W {
                inv[l] = gamma / z[l];
                inv_off[l] = inv[l] * lm1;
            }
            for (o, f) in on.iter_mut().zip(of.iter_mut()) {
                for l in 0..W {
                    o[l] *= inv[l];
                    f[l] *= inv_off[l];
                }
            }
            for l in 0..W {
                on[rq + 1][l] -= gamma;
            }
            // dF/dpV_h(r) += A_h G_on(r) + B_h G_off(r);
            // dF/dpK_h(r*) += beta A_h (1 - A_h) (s_on,h - s_off,h / (L-1)).
            for (h, ((a, b), (v, g))) in
                a_rq.iter().zip(b_rq).zip(pv.chunks_exact(ss).zip(gv.chunks_exact_mut(ss))).enumerate()
            {
                let (mut son, mut soff) = ([0.0; W], [0.0; W]);
                for (((o, f), x), gr) in on.iter().zip(of.iter()).zip(v).zip(g.iter_mut()) {
                    for l in 0..W {
                        son[l] += o[l] * x[l];
                        soff[l] += f[l] * x[l];
                        gr[l] += a[l] * o[l] + b[l] * f[l];
                    }
                }
                let gkr = &mut gk[h * ss + rq];
                for l in 0..W {
                    gkr[l] += beta * a[l] * (1.0 - a[l]) * (son[l] - soff[l] / lm1);
                }
            }
        }
        // Average over r* and pull back through the softmax (T-8).
        let inv_r = 1.0 / rr as f64;
        for ((pb, gb), ob) in self.gates.chunks_exact(ss).zip(self.grad.chunks_exact(ss)).zip(out.chunks_exact_mut(ss))
        {
            let mut dot = [0.0; W];
            for (x, y) in pb.iter().zip(gb) {
                for l in 0..W {
                    dot[l] += x[l] * y[l];
                }
            }
            for ((o, x), y) in ob.iter_mut().zip(pb).zip(gb) {
                for l in 0..W {
                    o[l] = x[l] * (y[l] - dot[l]) * inv_r;
                }
            }
        }
        for t in total.iter_mut() {
            *t *= inv_r;
        }
        total
    }

    /// [`Lanes::eval_generic`] compiled for `isa`.
    ///
    /// # Panics
    /// If the running CPU lacks `isa` (see [`Isa::available`]).
    pub(crate) fn eval(
        &mut self,
        isa: Isa,
        p: &TaskParams,
        theta: &[[f64; W]],
        out: &mut [[f64; W]],
        want_loss: bool,
    ) -> [f64; W] {
        assert!(isa.available(), "instruction set {isa:?} not available on this CPU");
        match isa {
            // SAFETY: the CPU reports the instruction set (asserted above).
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { self.eval_avx512(p, theta, out, want_loss) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { self.eval_avx2(p, theta, out, want_loss) },
            _ => self.eval_generic(p, theta, out, want_loss),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn eval_avx512(
        &mut self,
        p: &TaskParams,
        theta: &[[f64; W]],
        out: &mut [[f64; W]],
        want_loss: bool,
    ) -> [f64; W] {
        self.eval_generic(p, theta, out, want_loss)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn eval_avx2(
        &mut self,
        p: &TaskParams,
        theta: &[[f64; W]],
        out: &mut [[f64; W]],
        want_loss: bool,
    ) -> [f64; W] {
        self.eval_generic(p, theta, out, want_loss)
    }
}
