//! One function per invariant of `spec/kernels.md` §4. Each takes a kernel under test and a
//! drawn [`Case`] and returns a [`Verdict`] with the measured deviation and the allowed bound.
//!
//! Where an invariant is exact ("bit for bit"), the bound is 0. Where two computations of the
//! same quantity may reassociate a sum, the bound is [`tolerance::reassociation`], and the f64
//! reference is still held to exactness where the spec says so (K3, K11).

use super::tolerance::{self, max_abs, max_abs_diff};
use super::{Case, Invariant, KernelUnderTest, Verdict};
use crate::geometry::{Alignment, Visibility};
use crate::kernel::params::{GateParams, KernelParams};
use crate::kernel::reference;
use crate::kernel::spec::{GateKind, KernelSpec};
use crate::kernel::Compressed;
use crate::Result;
use candle_core::DType;
use ndarray::{s, Array1, Array2, Array3, Axis};

/// Runs one invariant on one case.
pub fn check(inv: Invariant, s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
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
    }
}

/// Window `j` as the table of §1 defines it, re-derived here independently of
/// [`crate::geometry`] so that K1/K2 test the geometry module too: `(start, end)` inclusive.
fn window_span(spec: &KernelSpec, j: usize) -> (i64, i64) {
    let (w, st) = (spec.geometry.window() as i64, spec.geometry.stride() as i64);
    let start = match spec.geometry.alignment() {
        Alignment::Start => j as i64 * st,
        Alignment::PadLeft => (j as i64 + 1) * st - w,
    };
    (start, start + w - 1)
}

fn in_window(spec: &KernelSpec, j: usize, t: usize) -> bool {
    let (a, b) = window_span(spec, j);
    (a..=b).contains(&(t as i64))
}

/// Bound for two computations of the same entries: 0 for the f64 reference where the spec asks
/// for bit-exactness, the reassociation bound otherwise.
fn same_bound(s: &dyn KernelUnderTest, exact_for_reference: bool, terms: usize, magnitude: f64) -> f64 {
    if exact_for_reference && s.dtype() == DType::F64 {
        0.0
    } else {
        tolerance::reassociation(s.dtype(), terms, magnitude)
    }
}

fn terms(s: &dyn KernelUnderTest, case: &Case) -> usize {
    s.spec().geometry.window() * case.dims.d_model.max(case.dims.d_head)
}

/// `max |a - b|` over the entry-level outputs (keys, values, pooled, gates) of entries `ja` of
/// `a` and `jb` of `b`.
fn entry_diff(a: &Compressed<f64>, ja: usize, b: &Compressed<f64>, jb: usize, pooled_only: bool) -> f64 {
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

fn magnitude(c: &Compressed<f64>) -> f64 {
    max_abs(&c.keys).max(max_abs(&c.values)).max(max_abs(&c.pooled_k)).max(max_abs(&c.pooled_v))
}

fn all_entries_diff(a: &Compressed<f64>, b: &Compressed<f64>) -> Option<f64> {
    if a.len() != b.len() {
        return None;
    }
    Some((0..a.len()).map(|j| entry_diff(a, j, b, j, false)).fold(0.0, f64::max))
}

fn k1_count(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    let spec = s.spec();
    let t = case.x.nrows();
    let out = s.compress(case.dims, &case.params, case.x.view())?;
    let mut expect = 0usize;
    while t > 0 && window_span(spec, expect).1 < t as i64 {
        expect += 1;
    }
    let n = out.len();
    let shapes_ok =
        out.keys.nrows() == n && out.values.nrows() == n && out.gate_k.dim().0 == n && out.gate_v.dim().0 == n;
    if n != expect || !shapes_ok {
        return Ok(Verdict::Fail(format!("T={t}: {n} entries (outputs {} rows), expected {expect}", out.keys.nrows())));
    }
    Ok(Verdict::pass(0.0, 0.0))
}

fn perturbed(case: &Case) -> Array2<f64> {
    let mut x2 = case.x.clone();
    let mut row = x2.row_mut(case.token);
    row += &case.perturb;
    x2
}

fn k2_locality(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    if case.x.nrows() == 0 {
        return Ok(Verdict::NotApplicable("empty sequence".into()));
    }
    let spec = s.spec();
    let a = s.compress(case.dims, &case.params, case.x.view())?;
    let b = s.compress(case.dims, &case.params, perturbed(case).view())?;
    for j in 0..a.len().min(b.len()) {
        if !in_window(spec, j, case.token) {
            let d = entry_diff(&a, j, &b, j, false);
            if d != 0.0 {
                return Ok(Verdict::Fail(format!(
                    "perturbing token {} (outside window {j} = {:?}) changed entry {j} by {d:.3e}",
                    case.token,
                    window_span(spec, j)
                )));
            }
        }
    }
    Ok(Verdict::pass(0.0, 0.0))
}

fn k3_stride_shift(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    let spec = s.spec();
    let g = spec.geometry;
    let a = s.compress(case.dims, &case.params, case.x.view())?;
    if a.is_empty() {
        return Ok(Verdict::NotApplicable("no window".into()));
    }
    let x2 = ndarray::concatenate(Axis(0), &[case.prefix.view(), case.x.view()]).expect("same width");
    let b = s.compress(case.dims, &case.params, x2.view())?;
    if b.len() != a.len() + 1 {
        return Ok(Verdict::Fail(format!("prepending S tokens gave {} entries, expected {} + 1", b.len(), a.len())));
    }
    let bound = same_bound(s, true, terms(s, case), magnitude(&a));
    let mut worst = 0.0f64;
    for j in 0..a.len() {
        // Entry positions move by S, so post-processed entries rotate differently: compare the
        // pooled entries and gates (RMSNorm is a function of the pooled entry alone).
        let d = entry_diff(&b, j + 1, &a, j, true)
            .max(max_abs_diff(&b.gate_k.index_axis(Axis(0), j + 1), &a.gate_k.index_axis(Axis(0), j)))
            .max(max_abs_diff(&b.gate_v.index_axis(Axis(0), j + 1), &a.gate_v.index_axis(Axis(0), j)));
        if g.valid_slots(j) == g.window() {
            if d > bound {
                return Ok(Verdict::Fail(format!(
                    "new entry {} differs from old entry {j} by {d:.3e} (bound {bound:.1e})",
                    j + 1
                )));
            }
            worst = worst.max(d);
        } else if d <= bound {
            return Ok(Verdict::Fail(format!(
                "old entry {j} had empty slots; after prepending S real tokens new entry {} should change, but differs by only {d:.3e}",
                j + 1
            )));
        }
    }
    Ok(Verdict::pass(worst, bound))
}

/// Proper divisors `p < S` of `S`.
fn proper_divisors(n: usize) -> Vec<usize> {
    (1..n).filter(|p| n.is_multiple_of(*p)).collect()
}

fn k4_phase_not_window(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    let spec = s.spec();
    let t_len = case.x.nrows();
    if t_len == 0 {
        return Ok(Verdict::NotApplicable("empty sequence".into()));
    }
    // (a) The support of dB_j/dh_t is exactly the windows holding t (any parameters).
    // Entries outside the window are bit-for-bit unchanged (K2 holds exactly for every
    // implementation here), so "depends on" is exact too: any change at all.
    let a = s.compress(case.dims, &case.params, case.x.view())?;
    let b = s.compress(case.dims, &case.params, perturbed(case).view())?;
    for j in 0..a.len() {
        let d = entry_diff(&a, j, &b, j, true);
        let inside = in_window(spec, j, case.token);
        if inside && d == 0.0 {
            return Ok(Verdict::Fail(format!(
                "token {} lies in window {j} = {:?} but perturbing it moved entry {j} by only {d:.3e}",
                case.token,
                window_span(spec, j)
            )));
        }
        if !inside && d != 0.0 {
            return Ok(Verdict::Fail(format!("token {} lies outside window {j} but moved it by {d:.3e}", case.token)));
        }
    }
    // (b) Content-free gates: the retention profile of interior tokens has period S, and no
    // smaller one for generic parameters.
    // The retention of token t is the summed norm of the pooled entries when only t carries the
    // probe direction. A window spans W consecutive tokens, so probe tokens W apart never share
    // one: probe sequence o carries the direction at every token t = o (mod W), each entry holds
    // exactly one of them (the other slots add exact zeros), and W sequences give the profile of
    // all T tokens, bit for bit what T single-token probes would.
    let mut p0 = case.params.clone();
    p0.zero_gate_content();
    let w = spec.geometry.window();
    let probes: Vec<Array2<f64>> = (0..w.min(t_len))
        .map(|o| {
            let mut x = Array2::zeros((t_len, case.dims.d_model));
            for t in (o..t_len).step_by(w) {
                x.row_mut(t).assign(&case.direction);
            }
            x
        })
        .collect();
    let outs = s.compress_many(case.dims, &p0, &probes)?;
    let profile: Vec<f64> = (0..t_len)
        .map(|t| {
            let o = &outs[t % w];
            (0..o.len())
                .filter(|&j| in_window(spec, j, t))
                .map(|j| {
                    o.pooled_k.row(j).dot(&o.pooled_k.row(j)).sqrt() + o.pooled_v.row(j).dot(&o.pooled_v.row(j)).sqrt()
                })
                .sum()
        })
        .collect();
    let g = spec.geometry;
    let interior: Vec<bool> = (0..t_len).map(|t| g.is_interior(t, t_len)).collect();
    let st = g.stride();
    // The profile's own scale (one probe token, so no cancellation): often far below 1.
    let scale = profile.iter().cloned().fold(0.0, f64::max);
    let tol = if s.dtype() == DType::F64 { 0.0 } else { tolerance::reassociation_at(s.dtype(), terms(s, case), scale) };
    let mut worst = 0.0f64;
    for t in 0..t_len.saturating_sub(st) {
        if interior[t] && interior[t + st] {
            let d = (profile[t] - profile[t + st]).abs();
            if d > tol {
                return Ok(Verdict::Fail(format!(
                    "content-free retention differs between interior tokens {t} and {} (same phase): {:.6} vs {:.6}",
                    t + st,
                    profile[t],
                    profile[t + st]
                )));
            }
            worst = worst.max(d);
        }
    }
    for p in proper_divisors(st) {
        let pairs: Vec<(usize, usize)> =
            (0..t_len.saturating_sub(p)).filter(|&t| interior[t] && interior[t + p]).map(|t| (t, t + p)).collect();
        if pairs.len() < st {
            continue; // too few interior tokens to tell periods apart in this case
        }
        let distinct = pairs.iter().any(|&(u, v)| (profile[u] - profile[v]).abs() > 10.0 * tol + 1e-9);
        if !distinct {
            return Ok(Verdict::Fail(format!(
                "content-free retention has period {p}, smaller than the stride {st}: profile {:?}",
                &profile[..profile.len().min(2 * st + g.window())]
            )));
        }
    }
    Ok(Verdict::pass(worst, tol))
}

fn k5_normalisation(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    let spec = s.spec();
    let out = s.compress(case.dims, &case.params, case.x.view())?;
    if out.is_empty() {
        return Ok(Verdict::NotApplicable("no window".into()));
    }
    let w = spec.geometry.window();
    let c = spec.gate_width(case.dims.d_head).max(1);
    let bound = 4.0 * tolerance::unit_roundoff(s.dtype()) * w as f64;
    let mut worst = 0.0f64;
    for (name, gate) in [("key", &out.gate_k), ("value", &out.gate_v)] {
        if gate.dim() != (out.len(), w, c) {
            return Ok(Verdict::Fail(format!(
                "{name} gate has shape {:?}, expected [{}, {w}, {c}]",
                gate.shape(),
                out.len()
            )));
        }
        for j in 0..out.len() {
            for ch in 0..c {
                let mut sum = 0.0;
                for i in 0..w {
                    let a = gate[[j, i, ch]];
                    let real = window_span(spec, j).0 + i as i64 >= 0;
                    if !real && a != 0.0 {
                        return Ok(Verdict::Fail(format!(
                            "{name} gate: empty slot {i} of window {j} has weight {a:.3e}, expected exactly 0"
                        )));
                    }
                    // `!(a > 0)` on purpose: a NaN weight fails too.
                    #[allow(clippy::neg_cmp_op_on_partial_ord)]
                    let not_positive = !(a > 0.0);
                    if real && not_positive {
                        return Ok(Verdict::Fail(format!(
                            "{name} gate: slot {i} of window {j} has weight {a:.3e}, expected > 0"
                        )));
                    }
                    sum += a;
                }
                let d = (sum - 1.0).abs();
                if d > bound {
                    return Ok(Verdict::Fail(format!(
                        "{name} gate weights of window {j}, channel {ch} sum to {sum:.6}, expected 1"
                    )));
                }
                worst = worst.max(d);
            }
        }
    }
    Ok(Verdict::pass(worst, bound))
}

/// `C_{g(i)} h` for every slot of every window (`None` for empty slots), in f64.
fn slot_values(spec: &KernelSpec, proj: &Array3<f64>, x: &Array2<f64>, n: usize) -> Vec<Vec<Option<Array1<f64>>>> {
    let w = spec.geometry.window();
    (0..n)
        .map(|j| {
            (0..w)
                .map(|i| {
                    let t = window_span(spec, j).0 + i as i64;
                    (t >= 0).then(|| proj.index_axis(Axis(0), spec.group_of(i)).dot(&x.row(t as usize)))
                })
                .collect()
        })
        .collect()
}

fn k6_convexity(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    let spec = s.spec();
    let out = s.compress(case.dims, &case.params, case.x.view())?;
    if out.is_empty() {
        return Ok(Verdict::NotApplicable("no window".into()));
    }
    let bound = tolerance::reassociation(s.dtype(), terms(s, case), magnitude(&out));
    let mut worst = 0.0f64;
    let proj_v = case.params.proj_v.as_ref().unwrap_or(&case.params.proj_k);
    for (name, proj, pooled) in [("key", &case.params.proj_k, &out.pooled_k), ("value", proj_v, &out.pooled_v)] {
        let vals = slot_values(spec, proj, &case.x, out.len());
        for (j, slots) in vals.iter().enumerate() {
            for e in 0..case.dims.d_head {
                let (lo, hi) = slots
                    .iter()
                    .flatten()
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v[e]), hi.max(v[e])));
                let p = pooled[[j, e]];
                let excess = (lo - p).max(p - hi).max(0.0);
                if excess > bound || p.is_nan() {
                    return Ok(Verdict::Fail(format!(
                        "pooled {name} of window {j}, channel {e} = {p:.6} lies outside [{lo:.6}, {hi:.6}]"
                    )));
                }
                worst = worst.max(excess);
            }
        }
    }
    Ok(Verdict::pass(worst, bound))
}

fn k7_uniform_limit(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    let spec = s.spec();
    if spec.gate == GateKind::Uniform {
        return Ok(Verdict::NotApplicable("the kernel is already uniform".into()));
    }
    let mut p = case.params.clone();
    p.zero_gate_content();
    p.equalize_biases();
    let gated = s.compress(case.dims, &p, case.x.view())?;
    let uniform_params = KernelParams { gate_k: None, gate_v: None, ..p };
    let uniform = s.with_spec(spec.with_gate(GateKind::Uniform)).compress(case.dims, &uniform_params, case.x.view())?;
    let bound = tolerance::reassociation(s.dtype(), terms(s, case), magnitude(&gated));
    let d = max_abs_diff(&gated.pooled_k, &uniform.pooled_k).max(max_abs_diff(&gated.pooled_v, &uniform.pooled_v));
    if d > bound {
        return Ok(Verdict::Fail(format!(
            "Z = 0 with equal biases differs from the uniform kernel by {d:.3e} (bound {bound:.1e})"
        )));
    }
    Ok(Verdict::pass(d, bound))
}

/// Bias added at the one-hot offset: large enough that `exp(-BIG)` is 0 in every dtype, small
/// enough to be exact in f16.
const ONE_HOT_BIAS: f64 = 1.0e4;

fn k8_one_hot_limit(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    let spec = s.spec();
    if spec.gate == GateKind::Uniform {
        return Ok(Verdict::NotApplicable("uniform gates have no bias".into()));
    }
    let w = spec.geometry.window();
    let star = case.token % w;
    let mut p = case.params.clone();
    for g in [&mut p.gate_k, &mut p.gate_v].into_iter().flatten() {
        g.b.row_mut(star).mapv_inplace(|v| v + ONE_HOT_BIAS);
    }
    let out = s.compress(case.dims, &p, case.x.view())?;
    if out.is_empty() {
        return Ok(Verdict::NotApplicable("no window".into()));
    }
    let bound = tolerance::reassociation(s.dtype(), case.dims.d_model, magnitude(&out));
    let proj_v = p.proj_v.as_ref().unwrap_or(&p.proj_k);
    let mut worst = 0.0f64;
    let mut checked = 0;
    for (name, proj, pooled) in [("key", &p.proj_k, &out.pooled_k), ("value", proj_v, &out.pooled_v)] {
        let vals = slot_values(spec, proj, &case.x, out.len());
        for (j, slots) in vals.iter().enumerate() {
            if let Some(v) = &slots[star] {
                let d = max_abs_diff(&pooled.row(j), &v.view());
                if d > bound {
                    return Ok(Verdict::Fail(format!(
                        "one-hot bias at offset {star}: pooled {name} of window {j} differs from C h by {d:.3e}"
                    )));
                }
                worst = worst.max(d);
                checked += 1;
            }
        }
    }
    if checked == 0 {
        return Ok(Verdict::NotApplicable(format!("offset {star} is empty in every window")));
    }
    Ok(Verdict::pass(worst, bound))
}

fn k9_permutation(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    let spec = s.spec();
    let mut p = case.params.clone();
    p.share_groups();
    p.equalize_biases();
    let a = s.compress(case.dims, &p, case.x.view())?;
    if a.is_empty() {
        return Ok(Verdict::NotApplicable("no window".into()));
    }
    let j = case.token % a.len();
    let first = spec.geometry.first_valid_offset(j);
    let (start, _) = window_span(spec, j);
    let sources: Vec<usize> = case.permutation.iter().copied().filter(|&i| i >= first).collect();
    let mut x2 = case.x.clone();
    for (k, &src) in sources.iter().enumerate() {
        let dst = (start + (first + k) as i64) as usize;
        x2.row_mut(dst).assign(&case.x.row((start + src as i64) as usize));
    }
    let b = s.compress(case.dims, &p, x2.view())?;
    let bound = tolerance::reassociation(s.dtype(), terms(s, case), magnitude(&a));
    let d =
        max_abs_diff(&a.pooled_k.row(j), &b.pooled_k.row(j)).max(max_abs_diff(&a.pooled_v.row(j), &b.pooled_v.row(j)));
    if d > bound {
        return Ok(Verdict::Fail(format!(
            "permuting window {j} by {sources:?} changed its entry by {d:.3e} (bound {bound:.1e})"
        )));
    }
    Ok(Verdict::pass(d, bound))
}

/// Scalar gate parameters from channel 0 of each gate, and their vector twin with every channel
/// identical.
fn scalar_and_vector(p: &KernelParams<f64>, d_head: usize) -> (KernelParams<f64>, KernelParams<f64>) {
    let scalar_gate = |g: &GateParams<f64>| GateParams {
        z: g.z.slice(s![.., 0..1, ..]).to_owned(),
        b: g.b.slice(s![.., 0..1]).to_owned(),
    };
    let vector_gate = |g: &GateParams<f64>| {
        let (gg, _, d) = g.z.dim();
        let w = g.b.nrows();
        GateParams {
            z: Array3::from_shape_fn((gg, d_head, d), |(a, _, k)| g.z[[a, 0, k]]),
            b: Array2::from_shape_fn((w, d_head), |(i, _)| g.b[[i, 0]]),
        }
    };
    let scalar = KernelParams {
        gate_k: p.gate_k.as_ref().map(scalar_gate),
        gate_v: p.gate_v.as_ref().map(scalar_gate),
        ..p.clone()
    };
    let vector = KernelParams {
        gate_k: scalar.gate_k.as_ref().map(vector_gate),
        gate_v: scalar.gate_v.as_ref().map(vector_gate),
        ..p.clone()
    };
    (scalar, vector)
}

fn k10_tied_scalar(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    let spec = s.spec();
    if spec.gate == GateKind::Uniform {
        return Ok(Verdict::NotApplicable("uniform gates".into()));
    }
    if spec.tied {
        let out = s.compress(case.dims, &case.params, case.x.view())?;
        let d = max_abs_diff(&out.gate_k, &out.gate_v);
        if d != 0.0 {
            return Ok(Verdict::Fail(format!("tied gates: key and value weights differ by {d:.3e}")));
        }
        return Ok(Verdict::pass(0.0, 0.0));
    }
    let (scalar, vector) = scalar_and_vector(&case.params, case.dims.d_head);
    let vs = s.with_spec(spec.with_gate(GateKind::Vector)).compress(case.dims, &vector, case.x.view())?;
    let ss = s.with_spec(spec.with_gate(GateKind::Scalar)).compress(case.dims, &scalar, case.x.view())?;
    let bound = tolerance::reassociation(s.dtype(), terms(s, case), magnitude(&vs));
    let d = max_abs_diff(&vs.pooled_k, &ss.pooled_k).max(max_abs_diff(&vs.pooled_v, &ss.pooled_v));
    if d > bound {
        return Ok(Verdict::Fail(format!(
            "vector gate with identical channels differs from the scalar gate by {d:.3e} (bound {bound:.1e})"
        )));
    }
    Ok(Verdict::pass(d, bound))
}

fn k11_streaming(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    let t_len = case.x.nrows();
    let one = s.compress(case.dims, &case.params, case.x.view())?;
    let seqs = vec![
        (case.other.view(), case.chunks.clone()),
        (case.x.view(), vec![1; t_len]),
        (case.x.view(), case.chunks.clone()),
    ];
    let streamed = s.stream(case.dims, &case.params, &seqs)?;
    let bound = same_bound(s, true, terms(s, case), magnitude(&one));
    let mut worst = 0.0f64;
    for (label, got) in [("token by token (after a reset)", &streamed[1]), ("in chunks", &streamed[2])] {
        match all_entries_diff(&one, got) {
            None => {
                return Ok(Verdict::Fail(format!(
                    "streaming {label} gave {} entries, one-shot {}",
                    got.len(),
                    one.len()
                )))
            }
            Some(d) if d > bound => {
                return Ok(Verdict::Fail(format!(
                    "streaming {label} differs from one-shot by {d:.3e} (bound {bound:.1e}), chunks {:?}",
                    case.chunks
                )))
            }
            Some(d) => worst = worst.max(d),
        }
    }
    let prefix = s.compress(case.dims, &case.params, case.x.slice(s![..case.token, ..]))?;
    if prefix.len() > one.len() {
        return Ok(Verdict::Fail(format!(
            "a prefix of {} tokens gave more entries than the whole sequence",
            case.token
        )));
    }
    match all_entries_diff(&one.take(prefix.len()), &prefix) {
        Some(d) if d > bound => Ok(Verdict::Fail(format!(
            "not prefix-closed: the entries of the first {} tokens change by {d:.3e} when the rest arrives",
            case.token
        ))),
        Some(d) => Ok(Verdict::pass(worst.max(d), bound)),
        None => unreachable!("take() gives the same length"),
    }
}

fn k12_causality(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    let spec = s.spec();
    let t_len = case.x.nrows();
    if t_len == 0 {
        return Ok(Verdict::NotApplicable("empty sequence".into()));
    }
    let q0 = case.token;
    let a = s.attend(case.dims, &case.params, case.x.view(), &case.attention)?;
    let mut x2 = case.x.clone();
    let mut att2 = case.attention.clone();
    for t in q0 + 1..t_len {
        let mut row = x2.row_mut(t);
        row += &case.perturb;
        for m in [&mut att2.queries, &mut att2.raw_keys, &mut att2.raw_values] {
            m.row_mut(t).mapv_inplace(|v| v + 0.5);
        }
    }
    let b = s.attend(case.dims, &case.params, x2.view(), &att2)?;
    let d = max_abs_diff(&a.output.slice(s![..=q0, ..]), &b.output.slice(s![..=q0, ..]));
    if d != 0.0 {
        return Ok(Verdict::Fail(format!(
            "changing tokens after {q0} changed the attention output at or before {q0} by {d:.3e}"
        )));
    }
    for q in 0..t_len {
        for j in 0..a.entry_weights.ncols() {
            let end = window_span(spec, j).1;
            let visible = match spec.visibility {
                Visibility::Inclusive => end <= q as i64,
                Visibility::Strict => end < q as i64,
            };
            let wgt = a.entry_weights[[q, j]];
            if visible != (wgt > 0.0) {
                return Ok(Verdict::Fail(format!(
                    "query {q} puts weight {wgt:.3e} on entry {j} (last token {end}); visible under {:?}: {visible}",
                    spec.visibility
                )));
            }
        }
    }
    Ok(Verdict::pass(0.0, 0.0))
}

/// K13 in two well-conditioned stages. (1) Pooling and gates: the two-references rule against
/// the f64 reference and the reference computed in the implementation's dtype. (2) Post-processing
/// (RMSNorm, RoPE): the implementation's entries against the f64 post-processing of *its own*
/// pooled entries, with the dtype's post-processing of the same input as the low reference.
/// Comparing post-processed outputs end to end is ill-conditioned: RMSNorm of a short vector
/// near zero amplifies any pooling difference (by ~1000x for `d_h = 1`), so both references
/// would differ wildly and the rule would measure noise.
fn k13_reference(s: &dyn KernelUnderTest, case: &Case) -> Result<Verdict> {
    if s.is_reference() {
        return Ok(Verdict::NotApplicable("the f64 reference is what K13 compares implementations with".into()));
    }
    let spec = s.spec();
    let dims = case.dims;
    // The rule compares maxima over many outputs; three sequences instead of one keep the
    // maxima from being decided by a single rounding.
    let xs = [case.x.clone(), case.other.clone(), perturbed_or_same(case)];
    let got_all = s.compress_many(dims, &case.params, &xs)?;
    let n_terms = terms(s, case);
    // (err, err_low, magnitude) per compared output
    let mut errs = [(0.0f64, 0.0f64, 0.0f64); 6];
    let mut fold = |k: usize, err: f64, err_low: f64, mag: f64| {
        errs[k].0 = errs[k].0.max(err);
        errs[k].1 = errs[k].1.max(err_low);
        errs[k].2 = errs[k].2.max(mag);
    };
    for (x, got) in xs.iter().zip(&got_all) {
        let ref64 = reference::compress(spec, dims, &case.params, x.view())?;
        let low = match low_reference(s.dtype(), spec, dims, &case.params, x)? {
            Some(l) => l,
            None => return Ok(Verdict::NotApplicable(format!("no low-precision reference for {:?}", s.dtype()))),
        };
        if got.len() != ref64.len() {
            return Ok(Verdict::Fail(format!("{} entries, the reference has {}", got.len(), ref64.len())));
        }
        fold(
            0,
            max_abs_diff(&got.pooled_k, &ref64.pooled_k),
            max_abs_diff(&low.pooled_k, &ref64.pooled_k),
            max_abs(&ref64.pooled_k),
        );
        fold(
            1,
            max_abs_diff(&got.pooled_v, &ref64.pooled_v),
            max_abs_diff(&low.pooled_v, &ref64.pooled_v),
            max_abs(&ref64.pooled_v),
        );
        fold(2, max_abs_diff(&got.gate_k, &ref64.gate_k), max_abs_diff(&low.gate_k, &ref64.gate_k), 1.0);
        fold(3, max_abs_diff(&got.gate_v, &ref64.gate_v), max_abs_diff(&low.gate_v, &ref64.gate_v), 1.0);
        for (k, (out, pooled)) in [(&got.keys, &got.pooled_k), (&got.values, &got.pooled_v)].into_iter().enumerate() {
            let post64 = post_rows::<f64>(spec, &case.params, pooled, &got.positions);
            let post_low = match s.dtype() {
                DType::F64 => post64.clone(),
                DType::F32 => post_rows::<f32>(spec, &case.params, pooled, &got.positions),
                DType::F16 => post_rows::<half::f16>(spec, &case.params, pooled, &got.positions),
                DType::BF16 => post_rows::<half::bf16>(spec, &case.params, pooled, &got.positions),
                _ => unreachable!("handled above"),
            };
            fold(4 + k, max_abs_diff(out, &post64), max_abs_diff(&post_low, &post64), max_abs(&post64));
        }
    }
    let names = ["pooled keys", "pooled values", "key gate", "value gate", "keys (post)", "values (post)"];
    let mut worst = (0.0f64, 0.0f64, 0.0f64);
    for (name, (err, err_low, mag)) in names.iter().zip(errs) {
        let bound = tolerance::two_reference_bound(err_low, s.dtype(), mag, n_terms);
        if err > bound {
            return Ok(Verdict::Fail(format!(
                "{name}: max|impl - ref64| = {err:.3e} > 2 * max|low - ref64| ({err_low:.3e}) + floor = {bound:.3e}"
            )));
        }
        let ratio = if bound > 0.0 { err / bound } else { 0.0 };
        if ratio >= worst.0 {
            worst = (ratio, err, bound);
        }
    }
    Ok(Verdict::pass(worst.1, worst.2))
}

/// The reference computed in `dtype` on inputs rounded to it (`None` for unsupported dtypes).
pub(crate) fn low_reference(
    dtype: DType,
    spec: &KernelSpec,
    dims: crate::kernel::KernelDims,
    params: &KernelParams<f64>,
    x: &Array2<f64>,
) -> Result<Option<Compressed<f64>>> {
    low_reference_mutated(dtype, spec, dims, params, x, None)
}

/// [`low_reference`] with a planted bug (the known-bad dumps of the test suite).
pub(crate) fn low_reference_mutated(
    dtype: DType,
    spec: &KernelSpec,
    dims: crate::kernel::KernelDims,
    params: &KernelParams<f64>,
    x: &Array2<f64>,
    m: Option<crate::conformance::mutants::Mutant>,
) -> Result<Option<Compressed<f64>>> {
    use crate::conformance::mutants::compress as c;
    Ok(Some(match dtype {
        DType::F64 => c(m, spec, dims, params, x.view())?,
        DType::F32 => widen(c::<f32>(m, spec, dims, &params.cast(), x.mapv(|v| v as f32).view())?),
        DType::F16 => widen(c::<half::f16>(m, spec, dims, &params.cast(), x.mapv(half::f16::from_f64).view())?),
        DType::BF16 => widen(c::<half::bf16>(m, spec, dims, &params.cast(), x.mapv(half::bf16::from_f64).view())?),
        _ => return Ok(None),
    }))
}

/// The spec's post-processing of every row of `pooled`, computed in `F` (inputs rounded to it).
pub(crate) fn post_rows<F: num_traits::Float>(
    spec: &KernelSpec,
    params: &KernelParams<f64>,
    pooled: &Array2<f64>,
    positions: &[usize],
) -> Array2<f64> {
    let gamma: Option<Vec<F>> = params.gamma.as_ref().map(|g| g.iter().map(|&v| F::from(v).expect("cast")).collect());
    let mut out = pooled.clone();
    for (j, mut row) in out.rows_mut().into_iter().enumerate() {
        let mut v: Vec<F> = row.iter().map(|&x| F::from(x).expect("cast")).collect();
        crate::kernel::post::apply(spec, &mut v, gamma.as_deref(), positions[j]);
        for (o, x) in row.iter_mut().zip(v) {
            *o = x.to_f64().expect("finite");
        }
    }
    out
}

fn perturbed_or_same(case: &Case) -> Array2<f64> {
    if case.x.nrows() == 0 {
        case.x.clone()
    } else {
        perturbed(case)
    }
}

pub(crate) fn widen<F: num_traits::Float>(c: Compressed<F>) -> Compressed<f64> {
    let w = |v: &F| v.to_f64().expect("finite");
    Compressed {
        keys: c.keys.map(w),
        values: c.values.map(w),
        pooled_k: c.pooled_k.map(w),
        pooled_v: c.pooled_v.map(w),
        gate_k: c.gate_k.map(w),
        gate_v: c.gate_v.map(w),
        positions: c.positions,
    }
}
