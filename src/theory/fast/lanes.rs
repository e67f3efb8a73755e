//! The static-gate loss (T-6), its exact gradient (T-6g) and the softmax pullback (T-8) for
//! `W` independent parameter vectors at once, one per lane (theory/induction-model.md §8).
//!
//! Every quantity is stored as `[f64; W]`, lane `l` belonging to the `l`-th parameter vector,
//! and every operation is one lane-wise [`Vector`] operation (fused multiply-adds where
//! written), so the lanes never mix: no
//! shuffle, no horizontal sum. Each lane performs exactly the operations of `W = 1`, in the
//! same order, and every [`Vector`] implementation rounds alike, so a lane's result does not
//! depend on `W`, on which lane it occupies, on what the other lanes hold or on the
//! instruction set: bit for bit (checked by the `theory_fast` tests).

use super::exp::exp_v;
use super::simd::Vector;
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
pub(crate) struct Kernel<const W: usize> {
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

impl<const W: usize> Kernel<W> {
    pub(crate) fn new(heads: usize, stride: usize) -> Self {
        let hs = heads * stride;
        let rr = stride.saturating_sub(1);
        Kernel {
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
    /// and of this workspace's `H`, `S`. Call it for a register type `V` only inside a
    /// function compiled for its instruction set.
    #[inline(always)]
    pub(crate) fn eval<V: Vector<W>>(
        &mut self,
        p: &TaskParams,
        theta: &[[f64; W]],
        out: &mut [[f64; W]],
        want_loss: bool,
    ) -> [f64; W] {
        let c = V::splat;
        let (hh, ss) = (self.heads, self.stride);
        let hs = hh * ss;
        let rr = ss - 1;
        let lm1 = (p.chunks - 1) as f64;
        let (beta, gamma) = (c(p.beta), c(p.gamma));
        let dist = c(p.distractors());
        let off = exp_v::<W, V>(c(-p.beta));
        let lm1_off = c(lm1).mul(off);
        let (one, zero, lm1) = (c(1.0), c(0.0), c(lm1));
        let theta = &theta[..2 * hs];
        let out = &mut out[..2 * hs];
        // (T-8) softmax of every block: shift by the maximum, exponentiate, normalise.
        for (blk, g) in theta.chunks_exact(ss).zip(self.gates.chunks_exact_mut(ss)) {
            let mut m = c(f64::NEG_INFINITY);
            for x in blk {
                m = V::load(x).max_gt(m);
            }
            let mut z = zero;
            for (gi, x) in g.iter_mut().zip(blk) {
                let e = exp_v::<W, V>(V::load(x).sub(m));
                e.store(gi);
                z = z.add(e);
            }
            let inv = one.div(z);
            for gi in g.iter_mut() {
                V::load(gi).mul(inv).store(gi);
            }
        }
        let (pk, pv) = self.gates.split_at(hs);
        // (T-6) attention: A_h = e^{beta(pK_h(r*) - 1)} / (e^{beta(pK_h(r*) - 1)} + (L-1) e^{-beta}),
        // B_h = e^{-beta} / (same denominator).
        for rq in 0..rr {
            for h in 0..hh {
                let e = exp_v::<W, V>(beta.mul(V::load(&pk[h * ss + rq]).sub(one)));
                let inv = one.div(e.add(lm1_off));
                e.mul(inv).store(&mut self.a_on[rq * hh + h]);
                off.mul(inv).store(&mut self.b_off[rq * hh + h]);
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
                let (a, b) = (V::load(a), V::load(b));
                for ((o, f), x) in on.iter_mut().zip(of.iter_mut()).zip(v) {
                    let x = V::load(x);
                    a.mul_add(x, V::load(o)).store(o);
                    b.mul_add(x, V::load(f)).store(f);
                }
            }
            // Shift by m = gamma max(u, 0) (the distractors' readout is 0), exponentiate.
            let mut m = zero;
            for x in on.iter().chain(of.iter()) {
                m = V::load(x).max_gt(m);
            }
            let m = gamma.mul(m);
            let neg_m = zero.sub(m);
            let target = on[rq + 1];
            let (mut s_on, mut s_off) = (zero, zero);
            for (o, f) in on.iter_mut().zip(of.iter_mut()) {
                let eo = exp_v::<W, V>(gamma.mul_add(V::load(o), neg_m));
                let ef = exp_v::<W, V>(gamma.mul_add(V::load(f), neg_m));
                eo.store(o);
                ef.store(f);
                s_on = s_on.add(eo);
                s_off = s_off.add(ef);
            }
            // Z / e^m, and (T-6c) loss(r*) = -gamma u_on(r*+1) + m + ln(Z / e^m).
            let z = lm1.mul_add(s_off, dist.mul_add(exp_v::<W, V>(neg_m), s_on));
            if want_loss {
                let (mut zs, mut ms) = ([0.0; W], [0.0; W]);
                z.store(&mut zs);
                m.store(&mut ms);
                for l in 0..W {
                    total[l] += -p.gamma * target[l] + ms[l] + zs[l].ln();
                }
            }
            // (T-6g) G_on = gamma (pi_on - 1{r = r*+1}), G_off = gamma (L-1) pi_off.
            let inv = gamma.div(z);
            let inv_off = inv.mul(lm1);
            for (o, f) in on.iter_mut().zip(of.iter_mut()) {
                V::load(o).mul(inv).store(o);
                V::load(f).mul(inv_off).store(f);
            }
            V::load(&on[rq + 1]).sub(gamma).store(&mut on[rq + 1]);
            // dF/dpV_h(r) += A_h G_on(r) + B_h G_off(r);
            // dF/dpK_h(r*) += beta A_h (1 - A_h) (s_on,h - s_off,h / (L-1)).
            for (h, ((a, b), (v, g))) in
                a_rq.iter().zip(b_rq).zip(pv.chunks_exact(ss).zip(gv.chunks_exact_mut(ss))).enumerate()
            {
                let (a, b) = (V::load(a), V::load(b));
                let (mut son, mut soff) = (zero, zero);
                for (((o, f), x), gr) in on.iter().zip(of.iter()).zip(v).zip(g.iter_mut()) {
                    let (o, f, x) = (V::load(o), V::load(f), V::load(x));
                    son = o.mul_add(x, son);
                    soff = f.mul_add(x, soff);
                    a.mul_add(o, b.mul_add(f, V::load(gr))).store(gr);
                }
                let gkr = &mut gk[h * ss + rq];
                let d = beta.mul(a).mul(one.sub(a)).mul(son.sub(soff.div(lm1)));
                V::load(gkr).add(d).store(gkr);
            }
        }
        // Average over r* and pull back through the softmax (T-8).
        let inv_r = 1.0 / rr as f64;
        let inv_rv = c(inv_r);
        for ((pb, gb), ob) in self.gates.chunks_exact(ss).zip(self.grad.chunks_exact(ss)).zip(out.chunks_exact_mut(ss))
        {
            let mut dot = zero;
            for (x, y) in pb.iter().zip(gb) {
                dot = V::load(x).mul_add(V::load(y), dot);
            }
            for ((o, x), y) in ob.iter_mut().zip(pb).zip(gb) {
                V::load(x).mul(V::load(y).sub(dot)).mul(inv_rv).store(o);
            }
        }
        for t in total.iter_mut() {
            *t *= inv_r;
        }
        total
    }
}
