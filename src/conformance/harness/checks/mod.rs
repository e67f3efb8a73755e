//! One function per invariant of the catalogue (`theory/kernels.md`, "The catalogue and the tests"). Each takes a kernel under test and a
//! drawn [`Case`] and returns a [`CheckVerdict`] with the measured deviation and the allowed bound.
//!
//! Where an invariant is exact ("bit for bit"), the bound is 0. Where two computations of the
//! same quantity may reassociate a sum, the bound is [`tolerance::reassociation`], and the f64
//! reference is still held to exactness where the spec says so (K3, K11).

mod agreement;
mod gates;
mod geometry;

use agreement::{k11_streaming, k12_causality, k13_reference};
pub(crate) use agreement::{low_reference, low_reference_mutated, post_rows};
use gates::{k10_tied_scalar, k5_normalisation, k6_convexity, k7_uniform_limit, k8_one_hot_limit, k9_permutation};
use geometry::{k14_grid_shift, k1_count, k2_locality, k3_stride_shift, k4_phase_not_window, perturbed};

use super::tolerance::{self, max_abs, max_abs_diff};
use super::{Case, CheckVerdict, Invariant, KernelUnderTest};
use crate::geometry::Alignment;
use crate::kernel::spec::KernelSpec;
use crate::kernel::Compressed;
use crate::Result;
use candle_core::DType;
use ndarray::{Array2, Axis};

/// Runs one invariant on one case.
pub fn check(inv: Invariant, s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    match inv {
        Invariant::K1Count => k1_count(s, case),
        Invariant::K2Locality => k2_locality(s, case),
        Invariant::K3StrideShift => k3_stride_shift(s, case),
        Invariant::K4PhaseNotWindow => k4_phase_not_window(s, case),
        Invariant::K5Normalisation => k5_normalisation(s, case),
        Invariant::K6Convexity => k6_convexity(s, case),
        Invariant::K7UniformLimit => k7_uniform_limit(s, case),
        Invariant::K8OneHotLimit => k8_one_hot_limit(s, case),
        Invariant::K9Permutation => k9_permutation(s, case),
        Invariant::K10TiedScalar => k10_tied_scalar(s, case),
        Invariant::K11Streaming => k11_streaming(s, case),
        Invariant::K12Causality => k12_causality(s, case),
        Invariant::K13ReferenceAgreement => k13_reference(s, case),
        Invariant::K14GridShift => k14_grid_shift(s, case),
    }
}

/// Window `j` as the geometry table of `theory/kernels.md` defines it, re-derived here independently of
/// [`crate::geometry`] so that K1/K2 test the geometry module too: `(start, end)` inclusive. On a
/// grid with offset `o > 0` ("Staggered grids") window 0 is the one ending at `o - 1 + W - S`
/// (`start`) or `o - 1` (`pad_left`): the unshifted window moved by `o - S`.
pub(super) fn window_span(spec: &KernelSpec, j: usize) -> (i64, i64) {
    let (w, st) = (spec.geometry.window() as i64, spec.geometry.stride() as i64);
    let o = spec.geometry.offset() as i64;
    let start = match spec.geometry.alignment() {
        Alignment::Start => j as i64 * st,
        Alignment::PadLeft => (j as i64 + 1) * st - w,
    } + if o > 0 { o - st } else { 0 };
    (start, start + w - 1)
}

pub(super) fn in_window(spec: &KernelSpec, j: usize, t: usize) -> bool {
    let (a, b) = window_span(spec, j);
    (a..=b).contains(&(t as i64))
}

/// Bound for two computations of the same entries: 0 for the f64 reference where the spec asks
/// for bit-exactness, the reassociation bound otherwise.
pub(super) fn same_bound(s: &dyn KernelUnderTest, exact_for_reference: bool, terms: usize, magnitude: f64) -> f64 {
    if exact_for_reference && s.dtype() == DType::F64 {
        0.0
    } else {
        tolerance::reassociation(s.dtype(), terms, magnitude)
    }
}

pub(super) fn terms(s: &dyn KernelUnderTest, case: &Case) -> usize {
    s.spec().geometry.window() * case.dims.d_model.max(case.dims.d_head)
}

/// `max |a - b|` over the entry-level outputs (keys, values, pooled, gates) of entries `ja` of
/// `a` and `jb` of `b`.
pub(super) fn entry_diff(a: &Compressed<f64>, ja: usize, b: &Compressed<f64>, jb: usize, pooled_only: bool) -> f64 {
    let mut d = max_abs_diff(&a.pooled_k.row(ja), &b.pooled_k.row(jb))
        .max(max_abs_diff(&a.pooled_v.row(ja), &b.pooled_v.row(jb)));
    if !pooled_only {
        d = d
            .max(max_abs_diff(&a.keys.row(ja), &b.keys.row(jb)))
            .max(max_abs_diff(&a.values.row(ja), &b.values.row(jb)))
            .max(max_abs_diff(&a.gate_k.index_axis(Axis(0), ja), &b.gate_k.index_axis(Axis(0), jb)))
            .max(max_abs_diff(&a.gate_v.index_axis(Axis(0), ja), &b.gate_v.index_axis(Axis(0), jb)));
    }
    d
}

pub(super) fn magnitude(c: &Compressed<f64>) -> f64 {
    max_abs(&c.keys).max(max_abs(&c.values)).max(max_abs(&c.pooled_k)).max(max_abs(&c.pooled_v))
}

pub(super) fn all_entries_diff(a: &Compressed<f64>, b: &Compressed<f64>) -> Option<f64> {
    if a.len() != b.len() {
        return None;
    }
    Some((0..a.len()).map(|j| entry_diff(a, j, b, j, false)).fold(0.0, f64::max))
}

pub(super) fn perturbed_or_same(case: &Case) -> Array2<f64> {
    if case.x.nrows() == 0 {
        case.x.clone()
    } else {
        perturbed(case)
    }
}
