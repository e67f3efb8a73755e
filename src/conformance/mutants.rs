//! Deliberately broken variants of the reference ("mutants"), used to show that the invariant
//! harness and the dump validator catch real bugs (`tests/kernel_mutants.rs`,
//! `tests/kernel_validate_mutants.rs`, `phasekv kernel check --mutant`).
//!
//! A mutant is a wrapper around the reference's own building blocks
//! ([`reference::compress_by`], [`reference::compress_window`], [`reference::gate_scores`],
//! [`attention::compressed_attention_masked`]) with one planted bug; the kernel itself carries
//! no test-only switch.

use crate::kernel::attention::{self, AttentionInputs, AttentionOut};
use crate::kernel::params::{GateParams, KernelParams};
use crate::kernel::reference::{self, WindowOut};
use crate::kernel::spec::{GateKind, KernelDims, KernelSpec};
use crate::kernel::Compressed;
use crate::{Error, Result};
use ndarray::{Array1, Array2, ArrayView1, ArrayView2};
use num_traits::Float;

/// One planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// Windows start one token late (`start(j) + 1`).
    WindowStartOffByOne,
    /// Gate softmax normalised over channels instead of offsets.
    SoftmaxOverChannels,
    /// Bias row chosen by the window index (`b_{j mod W}`) instead of the offset.
    BiasByWindow,
    /// Empty (`pad_left`) slots take part in the softmax with a zero value.
    PaddedSlotsKeepWeight,
    /// Only the first `S` offsets of a window are used (stride where window belongs).
    StrideForWindow,
    /// Compressed attention sees one token ahead (entries visible when `end(j) <= q + 1`).
    AttentionLookAhead,
    /// The grid offset is ignored: windows sit on the unshifted grid (as many as the spec's).
    IgnoreOffset,
    /// The offset of the other head of a two-way stagger, `(o + S/2) mod S`, is applied instead
    /// of this head's `o` (the heads' grids swapped: `w8s8-stagger-heads` puts head 0 at 4 and
    /// head 1 at 0). Windows, count and entry positions all follow that wrong grid.
    OtherHeadOffset,
}

impl Mutant {
    /// Every mutant, with its short name.
    pub const ALL: [(Mutant, &'static str); 8] = [
        (Mutant::WindowStartOffByOne, "off-by-one-window-start"),
        (Mutant::SoftmaxOverChannels, "softmax-over-channels"),
        (Mutant::BiasByWindow, "bias-by-window"),
        (Mutant::PaddedSlotsKeepWeight, "padded-slots-keep-weight"),
        (Mutant::StrideForWindow, "stride-for-window"),
        (Mutant::AttentionLookAhead, "attention-look-ahead"),
        (Mutant::IgnoreOffset, "ignore-offset"),
        (Mutant::OtherHeadOffset, "other-head-offset"),
    ];

    /// The short name (`off-by-one-window-start` ...).
    pub fn name(self) -> &'static str {
        Mutant::ALL.iter().find(|(m, _)| *m == self).map(|(_, n)| *n).expect("every mutant is listed")
    }

    /// The mutant with this short name.
    pub fn from_name(name: &str) -> Result<Self> {
        Mutant::ALL.iter().find(|(_, n)| *n == name).map(|(m, _)| *m).ok_or_else(|| {
            let names: Vec<_> = Mutant::ALL.iter().map(|(_, n)| *n).collect();
            Error::invalid("mutant", format!("unknown mutant '{name}'; expected one of {}", names.join(", ")))
        })
    }

    /// The reference compression with this bug.
    pub fn compress<F: Float>(
        self,
        spec: &KernelSpec,
        dims: KernelDims,
        params: &KernelParams<F>,
        x: ArrayView2<F>,
    ) -> Result<Compressed<F>> {
        if self == Mutant::OtherHeadOffset {
            let g = spec.geometry;
            let wrong = g.with_offset((g.offset() + g.stride() / 2) % g.stride())?;
            return reference::compress(&KernelSpec { geometry: wrong, ..spec.clone() }, dims, params, x);
        }
        let g = spec.geometry;
        let unshifted = g.with_offset(0)?;
        let t_len = x.nrows();
        let slot = |j: usize, i: usize| match self {
            Mutant::WindowStartOffByOne => g.token_at(j, i).map(|t| t + 1).filter(|&t| t < t_len),
            Mutant::IgnoreOffset => unshifted.token_at(j, i).filter(|&t| t < t_len),
            Mutant::StrideForWindow if i >= g.stride() => None,
            _ => g.token_at(j, i),
        };
        let zero = Array1::<F>::zeros(dims.d_model);
        let window = |j: usize, rows: &[Option<ArrayView1<F>>]| -> WindowOut<F> {
            match self {
                Mutant::SoftmaxOverChannels => {
                    let weights = |gate: Option<&GateParams<F>>| softmax_over_channels(spec, dims, gate, rows);
                    let (gk, gv) = gate_pair(spec, params, weights);
                    reference::window_from_gates(spec, dims, params, j, rows, gk, gv)
                }
                Mutant::BiasByWindow => {
                    let p = bias_of_window(params, j % g.window());
                    reference::compress_window(spec, dims, &p, j, rows)
                }
                Mutant::PaddedSlotsKeepWeight => {
                    // Empty slots enter the gate softmax as zero rows (score = bias); pooling
                    // still skips them, so the weights on real tokens sum to less than one.
                    let padded: Vec<Option<ArrayView1<F>>> =
                        rows.iter().map(|r| Some(r.unwrap_or_else(|| zero.view()))).collect();
                    let weights = |gate: Option<&GateParams<F>>| match (spec.gate, gate) {
                        (GateKind::Uniform, _) | (_, None) => reference::gate_weights(spec, dims, gate, rows),
                        _ => reference::gate_weights(spec, dims, gate, &padded),
                    };
                    let (gk, gv) = gate_pair(spec, params, weights);
                    reference::window_from_gates(spec, dims, params, j, rows, gk, gv)
                }
                _ => reference::compress_window(spec, dims, params, j, rows),
            }
        };
        reference::compress_by(spec, dims, params, x, slot, window)
    }

    /// The reference compression then compressed attention, with this bug.
    pub fn attend(
        self,
        spec: &KernelSpec,
        dims: KernelDims,
        params: &KernelParams<f64>,
        x: ArrayView2<f64>,
        inputs: &AttentionInputs<f64>,
    ) -> Result<AttentionOut<f64>> {
        let c = self.compress(spec, dims, params, x)?;
        let (mut g, vis) = (spec.geometry, spec.visibility);
        if self == Mutant::OtherHeadOffset {
            g = g.with_offset((g.offset() + g.stride() / 2) % g.stride())?;
        }
        let horizon = |q: usize| if self == Mutant::AttentionLookAhead { q + 1 } else { q };
        attention::compressed_attention_masked(c.keys.view(), c.values.view(), inputs, |j, q| {
            g.is_visible(j, horizon(q), vis)
        })
    }
}

/// The reference, or the reference with `mutant`'s bug.
pub fn compress<F: Float>(
    mutant: Option<Mutant>,
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    x: ArrayView2<F>,
) -> Result<Compressed<F>> {
    match mutant {
        None => reference::compress(spec, dims, params, x),
        Some(m) => m.compress(spec, dims, params, x),
    }
}

/// Key and value gate weights from one weight rule, the value branch reusing the key's where
/// the reference does.
fn gate_pair<F: Float>(
    spec: &KernelSpec,
    params: &KernelParams<F>,
    weights: impl Fn(Option<&GateParams<F>>) -> Array2<F>,
) -> (Array2<F>, Array2<F>) {
    let gk = weights(params.gate_k.as_ref());
    let gv = if reference::value_gate_is_key_gate(spec) { gk.clone() } else { weights(params.gate_v.as_ref()) };
    (gk, gv)
}

/// Gate weights normalised over channels (per slot) instead of over slots.
fn softmax_over_channels<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    gate: Option<&GateParams<F>>,
    rows: &[Option<ArrayView1<F>>],
) -> Array2<F> {
    let gate = match (spec.gate, gate) {
        (GateKind::Uniform, _) | (_, None) => return reference::gate_weights(spec, dims, gate, rows),
        (_, Some(g)) => g,
    };
    let valid: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].is_some()).collect();
    let mut a = reference::gate_scores(spec, dims, gate, rows, &valid);
    for &i in &valid {
        let mut row: Vec<F> = a.row(i).to_vec();
        crate::numeric::softmax_in_place(&mut row);
        a.row_mut(i).assign(&Array1::from(row));
    }
    a
}

/// The parameters with every bias row replaced by row `r` (so every slot of a window uses the
/// window's row, `b_{j mod W}`).
fn bias_of_window<F: Float>(params: &KernelParams<F>, r: usize) -> KernelParams<F> {
    let mut p = params.clone();
    for gate in [p.gate_k.as_mut(), p.gate_v.as_mut()].into_iter().flatten() {
        let row = gate.b.row(r).to_owned();
        for mut b in gate.b.rows_mut() {
            b.assign(&row);
        }
    }
    p
}
