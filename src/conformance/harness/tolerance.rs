//! Tolerances: the FlashAttention two-references rule (`theory/kernels.md`, "Tolerances") and the
//! reassociation bound used where two computations of the same quantity may sum in another
//! order. Every tolerance of the harness lives here, with its reason.

use candle_core::DType;
use ndarray::{ArrayBase, Data, Dimension};

/// Unit roundoff `2^-p` of a dtype (half the machine epsilon).
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON / 2.0,
        DType::F32 => f32::EPSILON as f64 / 2.0,
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => f32::EPSILON as f64 / 2.0,
    }
}

/// `floor(dtype)` of the tolerance rule: the rounding error of a length-`terms` sum in the
/// dtype at the output's magnitude (never below the spec's 0.3), `4 u sqrt(terms) max(0.3, m)`.
///
/// The spec's floor is `u * 0.3`; on the small cases property tests draw (a single window, two
/// outputs) the maximum error of the implementation and of the low reference are each one or two
/// roundings, and their ratio is noise: with the bare floor, shrinking reliably finds a case
/// where the implementation is 3x the low reference. The `sqrt(terms)` factor is the usual
/// statistical accumulation bound (Higham §2.8), see `theory/kernels.md`.
pub fn floor(dtype: DType, magnitude: f64, terms: usize) -> f64 {
    4.0 * unit_roundoff(dtype) * (terms.max(1) as f64).sqrt() * magnitude.max(0.3)
}

/// The tolerance rule: `max|impl - ref64| <= 2 max|low - ref64| + floor(dtype)`. Returns the
/// bound.
pub fn two_reference_bound(err_low: f64, dtype: DType, magnitude: f64, terms: usize) -> f64 {
    2.0 * err_low + floor(dtype, magnitude, terms)
}

/// Bound for two evaluations of the same sum of `terms` products in another order:
/// `c * u * terms * magnitude` with `c = 4` (faer's habit: scale with the problem size).
pub fn reassociation(dtype: DType, terms: usize, magnitude: f64) -> f64 {
    if dtype == DType::F64 {
        // The reference is deterministic; f64 reassociation can still differ between two
        // code paths (e.g. the uniform gate computed as 1/n versus a softmax of equal logits).
        return 4.0 * unit_roundoff(DType::F64) * terms.max(1) as f64 * magnitude.max(1.0);
    }
    4.0 * unit_roundoff(dtype) * terms.max(1) as f64 * magnitude.max(1.0)
}

/// `max |a - b|` (0 for empty arrays; infinite on a shape mismatch or a NaN).
pub fn max_abs_diff<S1, S2, D>(a: &ArrayBase<S1, D>, b: &ArrayBase<S2, D>) -> f64
where
    S1: Data<Elem = f64>,
    S2: Data<Elem = f64>,
    D: Dimension,
{
    if a.shape() != b.shape() {
        return f64::INFINITY;
    }
    a.iter().zip(b.iter()).fold(0.0, |m, (x, y)| {
        let d = (x - y).abs();
        if d.is_nan() {
            f64::INFINITY
        } else {
            m.max(d)
        }
    })
}

/// `max |a|` (0 for empty arrays).
pub fn max_abs<S, D>(a: &ArrayBase<S, D>) -> f64
where
    S: Data<Elem = f64>,
    D: Dimension,
{
    a.iter().fold(0.0, |m, x| m.max(x.abs()))
}

/// Reassociation bound `4 u n |x|` at an explicit magnitude, without the floor at 1 (for
/// quantities whose scale is known and may be far below 1, like K4's retention profile).
pub fn reassociation_at(dtype: DType, terms: usize, magnitude: f64) -> f64 {
    4.0 * unit_roundoff(dtype) * terms.max(1) as f64 * magnitude
}
