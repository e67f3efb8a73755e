//! `e^x` without a libm call: the exponential of the fast kernel (theory/induction-model.md §8).

use super::simd::{Lanes, Vector};

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
/// below `4e-18` relative, evaluated by Estrin's scheme with fused multiply-adds), and `2^n`
/// assembled in the exponent bits. NaN gives NaN. The same formula as every lane of
/// [`exp_v`], so the same bits (`f64::mul_add` is correctly rounded with or without FMA
/// hardware; without it, it is a slow library call).
#[inline(always)]
pub fn exp_poly(x: f64) -> f64 {
    exp_v::<1, Lanes<1>>(Lanes([x])).0[0]
}

/// [`exp_poly`] in every lane of `x`. Every operation is a single IEEE operation (a fused
/// multiply-add only where written; Rust never fuses on its own), so every implementation of
/// [`Vector`] gives the same bits.
#[inline(always)]
pub(crate) fn exp_v<const W: usize, V: Vector<W>>(x: V) -> V {
    let c = V::splat;
    let x = x.clamp(EXP_MIN, EXP_MAX); // NaN stays NaN
    let t = x.mul_add(c(std::f64::consts::LOG2_E), c(ROUND_SHIFT));
    let n = t.sub(c(ROUND_SHIFT));
    let r = n.mul_add(c(-LN2_HI), x);
    let r = n.mul_add(c(-LN2_LO), r);
    // Degree-13 Taylor polynomial by Estrin's scheme (dependency chains of 4 fused
    // multiply-adds instead of Horner's 13).
    let r2 = r.mul(r);
    let r4 = r2.mul(r2);
    let r8 = r4.mul(r4);
    let pair = |a: f64, b: f64| r.mul_add(c(b), c(a));
    let a0 = c(1.0).add(r);
    let a1 = pair(0.5, 1.0 / 6.0);
    let a2 = pair(1.0 / 24.0, 1.0 / 120.0);
    let a3 = pair(1.0 / 720.0, 1.0 / 5_040.0);
    let a4 = pair(1.0 / 40_320.0, 1.0 / 362_880.0);
    let a5 = pair(1.0 / 3_628_800.0, 1.0 / 39_916_800.0);
    let a6 = pair(1.0 / 479_001_600.0, 1.0 / 6_227_020_800.0);
    let c0 = a3.mul_add(r2, a2).mul_add(r4, a1.mul_add(r2, a0));
    let c1 = a6.mul_add(r4, a5.mul_add(r2, a4));
    let p = c1.mul_add(r8, c0);
    // The low bits of t hold n (two's complement); n + 1023 lies in 2..=2046 after the clamp.
    p.mul(t.exponent_bits())
}
