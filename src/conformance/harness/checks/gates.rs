//! K5-K10: what the gates do (normalisation, convexity, uniform and one-hot limits,
//! permutation, tied scalar gates).

use super::super::invariant::CheckVerdict;
use super::super::strategies::Case;
use super::super::subject::KernelUnderTest;
use super::super::tolerance::{self, max_abs_diff};
use super::shared::{magnitude, terms, window_span};
use crate::kernel::params::{GateParams, KernelParams};
use crate::kernel::spec::{GateKind, KernelSpec};
use crate::Result;
use ndarray::{s, Array1, Array2, Array3, Axis};

pub(super) fn k5_normalisation(s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    let spec = s.spec();
    let out = s.compress(case.dims, &case.params, case.x.view())?;
    if out.is_empty() {
        return Ok(CheckVerdict::NotApplicable("no window".into()));
    }
    let w = spec.geometry.window();
    let c = spec.gate_width(case.dims.d_head).max(1);
    let bound = 4.0 * tolerance::unit_roundoff(s.dtype()) * w as f64;
    let mut worst = 0.0f64;
    for (name, gate) in [("key", &out.gate_k), ("value", &out.gate_v)] {
        if gate.dim() != (out.len(), w, c) {
            return Ok(CheckVerdict::Fail(format!(
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
                        return Ok(CheckVerdict::Fail(format!(
                            "{name} gate: empty slot {i} of window {j} has weight {a:.3e}, expected exactly 0"
                        )));
                    }
                    // `!(a > 0)` on purpose: a NaN weight fails too.
                    #[allow(clippy::neg_cmp_op_on_partial_ord)]
                    let not_positive = !(a > 0.0);
                    if real && not_positive {
                        return Ok(CheckVerdict::Fail(format!(
                            "{name} gate: slot {i} of window {j} has weight {a:.3e}, expected > 0"
                        )));
                    }
                    sum += a;
                }
                let d = (sum - 1.0).abs();
                if d > bound {
                    return Ok(CheckVerdict::Fail(format!(
                        "{name} gate weights of window {j}, channel {ch} sum to {sum:.6}, expected 1"
                    )));
                }
                worst = worst.max(d);
            }
        }
    }
    Ok(CheckVerdict::pass(worst, bound))
}

/// `C_{g(i)} h` for every slot of every window (`None` for empty slots), in f64.
fn slot_values(spec: &KernelSpec, proj: &Array3<f64>, x: &Array2<f64>, n: usize) -> Vec<Vec<Option<Array1<f64>>>> {
    let w = spec.geometry.window();
    (0..n)
        .map(|j| {
            (0..w)
                .map(|i| {
                    let t = window_span(spec, j).0 + i as i64;
                    // A kernel that returns more entries than fit (a mutant on another grid) must
                    // fail a check, not panic the harness: slots past the sequence are empty.
                    (t >= 0 && (t as usize) < x.nrows())
                        .then(|| proj.index_axis(Axis(0), spec.group_of(i)).dot(&x.row(t as usize)))
                })
                .collect()
        })
        .collect()
}

pub(super) fn k6_convexity(s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    let spec = s.spec();
    let out = s.compress(case.dims, &case.params, case.x.view())?;
    if out.is_empty() {
        return Ok(CheckVerdict::NotApplicable("no window".into()));
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
                    return Ok(CheckVerdict::Fail(format!(
                        "pooled {name} of window {j}, channel {e} = {p:.6} lies outside [{lo:.6}, {hi:.6}]"
                    )));
                }
                worst = worst.max(excess);
            }
        }
    }
    Ok(CheckVerdict::pass(worst, bound))
}

pub(super) fn k7_uniform_limit(s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    let spec = s.spec();
    if spec.gate == GateKind::Uniform {
        return Ok(CheckVerdict::NotApplicable("the kernel is already uniform".into()));
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
        return Ok(CheckVerdict::Fail(format!(
            "Z = 0 with equal biases differs from the uniform kernel by {d:.3e} (bound {bound:.1e})"
        )));
    }
    Ok(CheckVerdict::pass(d, bound))
}

/// Bias added at the one-hot offset: large enough that `exp(-BIG)` is 0 in every dtype, small
/// enough to be exact in f16.
const ONE_HOT_BIAS: f64 = 1.0e4;

pub(super) fn k8_one_hot_limit(s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    let spec = s.spec();
    if !spec.has_gate_bias() {
        return Ok(CheckVerdict::NotApplicable("the gates have no bias (uniform, or gate_bias false)".into()));
    }
    let w = spec.geometry.window();
    let star = case.token % w;
    let mut p = case.params.clone();
    for g in [&mut p.gate_k, &mut p.gate_v].into_iter().flatten() {
        g.b.row_mut(star).mapv_inplace(|v| v + ONE_HOT_BIAS);
    }
    let out = s.compress(case.dims, &p, case.x.view())?;
    if out.is_empty() {
        return Ok(CheckVerdict::NotApplicable("no window".into()));
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
                    return Ok(CheckVerdict::Fail(format!(
                        "one-hot bias at offset {star}: pooled {name} of window {j} differs from C h by {d:.3e}"
                    )));
                }
                worst = worst.max(d);
                checked += 1;
            }
        }
    }
    if checked == 0 {
        return Ok(CheckVerdict::NotApplicable(format!("offset {star} is empty in every window")));
    }
    Ok(CheckVerdict::pass(worst, bound))
}

pub(super) fn k9_permutation(s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    let spec = s.spec();
    let mut p = case.params.clone();
    p.share_groups();
    p.equalize_biases();
    let a = s.compress(case.dims, &p, case.x.view())?;
    if a.is_empty() {
        return Ok(CheckVerdict::NotApplicable("no window".into()));
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
        return Ok(CheckVerdict::Fail(format!(
            "permuting window {j} by {sources:?} changed its entry by {d:.3e} (bound {bound:.1e})"
        )));
    }
    Ok(CheckVerdict::pass(d, bound))
}

/// Scalar gate parameters from channel 0 of each gate, and their vector twin with every channel
/// identical.
fn scalar_and_vector(p: &KernelParams<f64>, d_head: usize) -> (KernelParams<f64>, KernelParams<f64>) {
    let scalar_gate = |g: &GateParams<f64>| GateParams {
        z: g.z.slice(s![.., 0..1, ..]).to_owned(),
        b: g.b.slice(s![.., 0..1]).to_owned(),
        bias: g.bias,
    };
    let vector_gate = |g: &GateParams<f64>| {
        let (gg, _, d) = g.z.dim();
        let w = g.b.nrows();
        GateParams {
            z: Array3::from_shape_fn((gg, d_head, d), |(a, _, k)| g.z[[a, 0, k]]),
            b: Array2::from_shape_fn((w, d_head), |(i, _)| g.b[[i, 0]]),
            bias: g.bias,
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

pub(super) fn k10_tied_scalar(s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    let spec = s.spec();
    if spec.gate == GateKind::Uniform {
        return Ok(CheckVerdict::NotApplicable("uniform gates".into()));
    }
    if spec.tied {
        let out = s.compress(case.dims, &case.params, case.x.view())?;
        let d = max_abs_diff(&out.gate_k, &out.gate_v);
        if d != 0.0 {
            return Ok(CheckVerdict::Fail(format!("tied gates: key and value weights differ by {d:.3e}")));
        }
        return Ok(CheckVerdict::pass(0.0, 0.0));
    }
    let (scalar, vector) = scalar_and_vector(&case.params, case.dims.d_head);
    let vs = s.with_spec(spec.with_gate(GateKind::Vector)).compress(case.dims, &vector, case.x.view())?;
    let ss = s.with_spec(spec.with_gate(GateKind::Scalar)).compress(case.dims, &scalar, case.x.view())?;
    let bound = tolerance::reassociation(s.dtype(), terms(s, case), magnitude(&vs));
    let d = max_abs_diff(&vs.pooled_k, &ss.pooled_k).max(max_abs_diff(&vs.pooled_v, &ss.pooled_v));
    if d > bound {
        return Ok(CheckVerdict::Fail(format!(
            "vector gate with identical channels differs from the scalar gate by {d:.3e} (bound {bound:.1e})"
        )));
    }
    Ok(CheckVerdict::pass(d, bound))
}
