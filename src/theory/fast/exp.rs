//! `e^x` without a libm call: the exponential of the fast kernel (theory/induction-model.md §8).

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
/// bits. NaN gives NaN. Every operation is a single IEEE operation (Rust never fuses a multiply
/// and an add on its own), so a scalar and a vectorised evaluation give the same bits.
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
