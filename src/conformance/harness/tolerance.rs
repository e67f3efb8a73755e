//! Tolerances: the FlashAttention two-references rule (`theory/kernels.md`, "Tolerances") of the
//! property harness, `validate`'s rounding-model rule ([`rounding_bound`]) and the reassociation
//! bound used where two computations of the same quantity may sum in another order. Every
//! tolerance of the harness and of `validate` lives here, with its reason.
//!
//! The harness keeps its statistical floor `4 u sqrt(terms) max(0.3, m)`: it compares candle and
//! the reference on proptest's tiny cases (one window, `d <= 4`), where the ratio of two maxima of
//! one or two roundings is noise and `sqrt(terms)` is at most about 6. `validate` judges real
//! kernels at production widths, where that floor grows as `sqrt(W d)` and becomes vacuous, so it
//! uses [`rounding_bound`] instead.

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

/// Roundings of the stored dtype a correct kernel may make at an output's largest magnitude
/// beyond what its twin shows (`validate`'s max-norm rule): the final rounding of the output,
/// and the roundings of the intermediates a kernel stores in its dtype between fp32
/// accumulations (projections, gate logits and weights, products, the pooled entry, RMSNorm's
/// and RoPE's outputs). Each is at most `u/2` of its stage's magnitude; 8 leaves room for stages
/// whose magnitude exceeds the output's (pooling that cancels) without approaching a 10 %
/// error in bf16 (25.6 units of roundoff). `theory/dump-format.md`, "The tolerance rule".
pub const STAGE_ROUNDINGS: f64 = 8.0;

/// The same roundings in the root-mean-square rule: independent roundings of about `u/2` of
/// their stage add in quadrature to about `u / sqrt(12)` each, so six stages stay below `1 u` of
/// the output's RMS; 2 is twice that.
pub const STAGE_ROUNDINGS_RMS: f64 = 2.0;

/// The dtype a correct kernel computing in `dtype` accumulates in: fp32 accumulators for f32,
/// f16 and bf16 (tensor cores, torch's CPU reductions, MLX), f64 for f64. `validate`'s twin is
/// the reference computed in this dtype on the dump's (already rounded) inputs.
pub fn accumulator(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// `validate`'s max-norm bound of one output (`theory/dump-format.md`, "The tolerance rule"):
/// `2 max|twin - ref64| + STAGE_ROUNDINGS u max|ref64|`, plus for f64 kernels (whose twin is the
/// reference itself, one summation order of many) the statistical sum bound
/// `4 u sqrt(terms) max|ref64|`.
pub fn rounding_bound(err_twin: f64, dtype: DType, magnitude: f64, terms: usize) -> f64 {
    let u = unit_roundoff(dtype);
    let order = if dtype == DType::F64 { 4.0 * u * (terms.max(1) as f64).sqrt() * magnitude } else { 0.0 };
    2.0 * err_twin + STAGE_ROUNDINGS * u * magnitude + order
}

/// `validate`'s root-mean-square bound: `2 rms(twin - ref64) + STAGE_ROUNDINGS_RMS u rms(ref64)`
/// (plus the f64 sum bound at the RMS, as in [`rounding_bound`]).
pub fn rounding_bound_rms(rms_twin: f64, dtype: DType, rms_ref: f64, terms: usize) -> f64 {
    let u = unit_roundoff(dtype);
    let order = if dtype == DType::F64 { 4.0 * u * (terms.max(1) as f64).sqrt() * rms_ref } else { 0.0 };
    2.0 * rms_twin + STAGE_ROUNDINGS_RMS * u * rms_ref + order
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
