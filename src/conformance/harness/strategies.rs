//! Proptest strategies for kernel cases: shapes (including the edge cases `T < W`, `T = W`,
//! `T mod S != 0`, `d_h = 1`), parameters, inputs and the extra draws each invariant needs.
//!
//! Parameter values are drawn away from zero (`|v| in [0.1, 1]`, scaled by `1/sqrt(d)`) so that
//! a case is generic: a perturbed token really moves the entries it belongs to, and
//! content-free retention profiles do not coincide across phases by accident.

use crate::kernel::attention::AttentionInputs;
use crate::kernel::params::{KernelParams, ParamLayout};
use crate::kernel::spec::{KernelDims, KernelSpec};
use ndarray::{Array1, Array2};
use proptest::prelude::*;

/// Everything one invariant check may need, drawn together.
#[derive(Clone, Debug)]
pub struct Case {
    /// Widths.
    pub dims: KernelDims,
    /// Parameters of one head.
    pub params: KernelParams<f64>,
    /// The sequence `[T, d]`.
    pub x: Array2<f64>,
    /// `S` tokens to prepend (K3).
    pub prefix: Array2<f64>,
    /// A token to perturb (K2, K4) and a query position (K12); 0 when `T = 0`.
    pub token: usize,
    /// A generic perturbation `[d]`.
    pub perturb: Array1<f64>,
    /// A generic probe direction `[d]` (K4 retention).
    pub direction: Array1<f64>,
    /// Chunk sizes for streaming (K11).
    pub chunks: Vec<usize>,
    /// Another sequence, streamed before a reset (K11).
    pub other: Array2<f64>,
    /// A permutation of `0..W` (K9).
    pub permutation: Vec<usize>,
    /// Attention inputs for one head (K12).
    pub attention: AttentionInputs<f64>,
}

/// A value in `[-1, -0.1] U [0.1, 1]`.
pub fn generic_value() -> impl Strategy<Value = f64> {
    prop_oneof![-1.0..-0.1f64, 0.1..1.0f64]
}

/// A value in `[-1, 1]`.
pub fn value() -> impl Strategy<Value = f64> {
    -1.0..1.0f64
}

/// Sequence lengths for a spec: mostly small (edge cases around `W`), sometimes long enough
/// to hold interior tokens of every phase twice (`2W + 2S + 3`).
pub fn seq_len(spec: &KernelSpec) -> impl Strategy<Value = usize> {
    let (w, s) = (spec.geometry.window(), spec.geometry.stride());
    let long = 2 * w + 2 * s + 3;
    prop_oneof![
        1 => 0..=w + 1,
        1 => Just(w),
        3 => w..=long,
        2 => Just(long),
    ]
    .prop_map(move |t| t.min(long).max(if s > 0 { 0 } else { 1 }))
}

/// Builds parameters from a drawn flat vector: gate and projection weights scaled by
/// `1/sqrt(d)`, biases as drawn, RMSNorm weights mapped into `[0.5, 1.5]`.
pub fn params_from_draw(spec: &KernelSpec, dims: KernelDims, draw: &[f64]) -> KernelParams<f64> {
    let mut p = KernelParams::from_flat(spec, dims, draw).expect("layout length");
    p.scale_weights(1.0 / (dims.d_model as f64).sqrt());
    if let Some(g) = &mut p.gamma {
        g.mapv_inplace(|v| 1.0 + 0.5 * v);
    }
    p
}

/// The case strategy for a spec.
pub fn case_strategy(spec: &KernelSpec) -> BoxedStrategy<Case> {
    case_strategy_min_head(spec, 1)
}

/// How many head widths [`head_widths`] offers.
const HEAD_WIDTHS: usize = 4;

/// The narrowest head widths from `min_d_head` on that the spec can hold (at most
/// [`HEAD_WIDTHS`] of them): a RoPE channel count needs `d_h >= count`, an explicit frequency
/// list exactly `r / 2` pairs. Drawing from these keeps every valid spec checkable (the
/// documented 24-channel example needs `d_h >= 24`); `[min_d_head]` when none fits below
/// `min_d_head + 4096` (the checks then report the spec's own error).
pub fn head_widths(spec: &KernelSpec, min_d_head: usize) -> Vec<usize> {
    spec.head_widths(min_d_head, HEAD_WIDTHS).unwrap_or_else(|_| vec![min_d_head.max(1)])
}

/// [`case_strategy`] with head widths `d_h` from [`head_widths`] (the first four from
/// `min_d_head` that the spec holds), for kernels that cannot run narrower heads (Hugging
/// Face's DeepSeek-V4 rotates `d_h / 8` channels and needs `d_h >= 16`).
pub fn case_strategy_min_head(spec: &KernelSpec, min_d_head: usize) -> BoxedStrategy<Case> {
    let spec = spec.clone();
    let (w, s) = (spec.geometry.window(), spec.geometry.stride());
    (1usize..=4, proptest::sample::select(head_widths(&spec, min_d_head)), seq_len(&spec))
        .prop_flat_map(move |(d, dh, t)| {
            let dims = KernelDims { d_model: d, d_head: dh };
            let np = ParamLayout::of(&spec, dims).len();
            let spec = spec.clone();
            (
                (
                    proptest::collection::vec(generic_value(), np),
                    proptest::collection::vec(value(), t * d),
                    proptest::collection::vec(value(), s * d),
                    0..t.max(1),
                    proptest::collection::vec(generic_value(), d),
                    proptest::collection::vec(generic_value(), d),
                ),
                (
                    proptest::collection::vec(1..=w + 2, 0..6),
                    proptest::collection::vec(value(), t * d),
                    Just((0..w).collect::<Vec<usize>>()).prop_shuffle(),
                    proptest::collection::vec(value(), 3 * t * dh),
                    1usize..=4,
                ),
            )
                .prop_map(move |((pd, xd, pre, token, pert, dir), (chunks, other, perm, att, local))| {
                    let x = Array2::from_shape_vec((t, d), xd).expect("shape");
                    let att = Array2::from_shape_vec((3 * t, dh), att).expect("shape");
                    Case {
                        dims,
                        params: params_from_draw(&spec, dims, &pd),
                        x,
                        prefix: Array2::from_shape_vec((s, d), pre).expect("shape"),
                        token,
                        perturb: Array1::from_vec(pert),
                        direction: Array1::from_vec(dir),
                        chunks,
                        other: Array2::from_shape_vec((t, d), other).expect("shape"),
                        permutation: perm,
                        attention: AttentionInputs {
                            queries: att.slice(ndarray::s![0..t, ..]).to_owned(),
                            raw_keys: att.slice(ndarray::s![t..2 * t, ..]).to_owned(),
                            raw_values: att.slice(ndarray::s![2 * t..3 * t, ..]).to_owned(),
                            local_window: local,
                        },
                    }
                })
        })
        .boxed()
}
