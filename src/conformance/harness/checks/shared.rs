//! What the checks share: window spans, the bound of two computations of one quantity, and
//! the differences between entries.

use super::super::strategies::Case;
use super::super::subject::KernelUnderTest;
use super::super::tolerance::{self, max_abs, max_abs_diff};
use crate::geometry::Alignment;
use crate::kernel::spec::KernelSpec;
use crate::kernel::Compressed;
use candle_core::DType;
use ndarray::Axis;

/// Window `j` as the geometry table of `theory/kernels.md` defines it, re-derived here independently of
/// [`crate::geometry`] so that K1/K2 test the geometry module too: `(start, end)` inclusive. On a
/// grid with offset `o > 0` ("Staggered grids") window 0 is the one ending at `o - 1 + W - S`
/// (`start`) or `o - 1` (`pad_left`): the unshifted window moved by `o - S`.
pub(in crate::conformance::harness) fn window_span(spec: &KernelSpec, j: usize) -> (i64, i64) {
    let (w, st) = (spec.geometry.window() as i64, spec.geometry.stride() as i64);
    let o = spec.geometry.offset() as i64;
    let start = match spec.geometry.alignment() {
        Alignment::Start => j as i64 * st,
        Alignment::PadLeft => (j as i64 + 1) * st - w,
    } + if o > 0 { o - st } else { 0 };
    (start, start + w - 1)
}

pub(in crate::conformance::harness) fn in_window(spec: &KernelSpec, j: usize, t: usize) -> bool {
    let (a, b) = window_span(spec, j);
    (a..=b).contains(&(t as i64))
}

/// Bound for two computations of the same entries: 0 for the f64 reference where the spec asks
/// for bit-exactness, the reassociation bound otherwise.
pub(in crate::conformance::harness) fn same_bound(
    s: &dyn KernelUnderTest,
    exact_for_reference: bool,
    terms: usize,
    magnitude: f64,
) -> f64 {
    if exact_for_reference && s.dtype() == DType::F64 {
        0.0
    } else {
        tolerance::reassociation(s.dtype(), terms, magnitude)
    }
}

pub(in crate::conformance::harness) fn terms(s: &dyn KernelUnderTest, case: &Case) -> usize {
    s.spec().geometry.window() * case.dims.d_model.max(case.dims.d_head)
}

/// `max |a - b|` over the entry-level outputs (keys, values, pooled, gates) of entries `ja` of
/// `a` and `jb` of `b`.
pub(in crate::conformance::harness) fn entry_diff(
    a: &Compressed<f64>,
    ja: usize,
    b: &Compressed<f64>,
    jb: usize,
    pooled_only: bool,
) -> f64 {
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

pub(in crate::conformance::harness) fn magnitude(c: &Compressed<f64>) -> f64 {
    max_abs(&c.keys).max(max_abs(&c.values)).max(max_abs(&c.pooled_k)).max(max_abs(&c.pooled_v))
}

pub(in crate::conformance::harness) fn all_entries_diff(a: &Compressed<f64>, b: &Compressed<f64>) -> Option<f64> {
    if a.len() != b.len() {
        return None;
    }
    Some((0..a.len()).map(|j| entry_diff(a, j, b, j, false)).fold(0.0, f64::max))
}
