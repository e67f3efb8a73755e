//! The reference kernel: plain loops over ndarray, written for obviousness, generic over the
//! float type (f64 is the oracle; f32/f16/bf16 instances give the "low" reference of the
//! tolerance rule, `theory/kernels.md`, "Tolerances").
//!
//! For window `j`, branch `B`, valid offset `i` holding token `t`:
//!
//! ```text
//! s_{j,i}[c] = (sum_k Z_{g(i)}[c,k] h_t[k]) + b_i[c]
//! a_{j,i}[c] = exp(s_{j,i}[c] - m[c]) / sum_{i' valid} exp(s_{j,i'}[c] - m[c])
//! B_j[e]     = sum_i a_{j,i}[c(e)] * sum_k C_{g(i)}[e,k] h_t[k]     (c(e) = e, or 0 for scalar gates)
//! ```
//!
//! followed by RMSNorm and partial RoPE ([`super::post`]). Empty slots (`pad_left`) are skipped:
//! their weight is exactly 0.
//!
//! One-shot ([`compress`], through the one loop [`compress_by`]) and streaming
//! ([`ReferenceStream`]) both call [`compress_window`] on the same rows, so they agree bit for
//! bit. The softmax is [`crate::numeric::softmax_columns_in_place`] (every gate channel of a
//! window at once; [`crate::numeric::softmax_in_place`] per channel, bit for bit), the one softmax
//! of the crate.

use super::params::{GateParams, KernelParams};
use super::post;
use super::spec::{GateKind, KernelDims, KernelSpec};
use super::Compressed;
use crate::{Error, Result};
use ndarray::{Array1, Array2, Array3, ArrayView1, ArrayView2};
use num_traits::Float;
use std::collections::VecDeque;

/// One compressed window: pooled and post-processed key/value, gate weights.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowOut<F> {
    /// Key after post-processing.
    pub key: Array1<F>,
    /// Value after post-processing.
    pub value: Array1<F>,
    /// Pooled key.
    pub pooled_k: Array1<F>,
    /// Pooled value.
    pub pooled_v: Array1<F>,
    /// Key gate weights `[W, c]`.
    pub gate_k: Array2<F>,
    /// Value gate weights `[W, c]`.
    pub gate_v: Array2<F>,
    /// Entry position.
    pub position: usize,
}

/// Checks the input shape and values.
pub fn check_input<F: Float>(dims: KernelDims, x: ArrayView2<F>) -> Result<()> {
    if x.ncols() != dims.d_model {
        return Err(Error::shape("kernel input", format!("[T, {}]", dims.d_model), format!("{:?}", x.shape())));
    }
    if x.iter().any(|v| !v.is_finite()) {
        return Err(Error::invalid("kernel input", "contains NaN or infinity"));
    }
    Ok(())
}

/// Compresses one sequence `x: [T, d]` with the reference kernel.
pub fn compress<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    x: ArrayView2<F>,
) -> Result<Compressed<F>> {
    let g = spec.geometry;
    compress_by(spec, dims, params, x, |j, i| g.token_at(j, i), |j, rows| compress_window(spec, dims, params, j, rows))
}

/// The one-shot loop: validates, then computes every window `j` of `x` with `window(j, rows)`,
/// where slot `i` holds row `slot(j, i)` of `x` (`None`: an empty slot), and stacks the
/// results. [`compress`] passes the geometry and [`compress_window`]; the conformance room's
/// mutants pass a broken slot rule or window rule (`crate::conformance::mutants`).
pub fn compress_by<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    x: ArrayView2<F>,
    slot: impl Fn(usize, usize) -> Option<usize>,
    window: impl Fn(usize, &[Option<ArrayView1<F>>]) -> WindowOut<F>,
) -> Result<Compressed<F>> {
    spec.validate_for(dims.d_head)?;
    params.validate(spec, dims)?;
    check_input(dims, x)?;
    let g = &spec.geometry;
    let n = g.num_windows(x.nrows());
    let outs: Vec<WindowOut<F>> = (0..n)
        .map(|j| {
            let rows: Vec<Option<ArrayView1<F>>> = (0..g.window()).map(|i| slot(j, i).map(|t| x.row(t))).collect();
            window(j, &rows)
        })
        .collect();
    Ok(assemble(spec, dims, outs))
}

/// Stacks per-window outputs into a [`Compressed`].
pub fn assemble<F: Float>(spec: &KernelSpec, dims: KernelDims, outs: Vec<WindowOut<F>>) -> Compressed<F> {
    let n = outs.len();
    let (w, dh) = (spec.geometry.window(), dims.d_head);
    let c = spec.gate_width(dh).max(1);
    let stack2 = |f: &dyn Fn(&WindowOut<F>) -> &Array1<F>| {
        let mut a = Array2::zeros((n, dh));
        for (j, o) in outs.iter().enumerate() {
            a.row_mut(j).assign(f(o));
        }
        a
    };
    let stack3 = |f: &dyn Fn(&WindowOut<F>) -> &Array2<F>| {
        let mut a = Array3::zeros((n, w, c));
        for (j, o) in outs.iter().enumerate() {
            a.index_axis_mut(ndarray::Axis(0), j).assign(f(o));
        }
        a
    };
    Compressed {
        keys: stack2(&|o| &o.key),
        values: stack2(&|o| &o.value),
        pooled_k: stack2(&|o| &o.pooled_k),
        pooled_v: stack2(&|o| &o.pooled_v),
        gate_k: stack3(&|o| &o.gate_k),
        gate_v: stack3(&|o| &o.gate_v),
        positions: outs.iter().map(|o| o.position).collect(),
    }
}

/// `m h` row by row: entry `e` is `sum_k m[e, k] h[k]`, summed in index order from 0 (every
/// projection and gate logit of the reference). Four rows are summed side by side, each its own
/// sum in index order, so every entry is bit for bit the plain row-by-row loop while the four
/// independent additions overlap in the pipeline (the reference's time at production widths is
/// mostly these sums).
fn matvec<F: Float>(m: ArrayView2<F>, h: ArrayView1<F>) -> Vec<F> {
    let (rows, d) = (m.nrows(), m.ncols());
    if d == 0 {
        return vec![F::zero(); rows];
    }
    let h = h.as_standard_layout();
    let h = h.as_slice().expect("standard layout");
    let m = m.as_standard_layout();
    let flat = m.as_slice().expect("standard layout");
    let mut out = Vec::with_capacity(rows);
    let blocks = flat.chunks_exact(4 * d);
    let rest = blocks.remainder();
    for block in blocks {
        let (r0, r) = block.split_at(d);
        let (r1, r) = r.split_at(d);
        let (r2, r3) = r.split_at(d);
        let mut acc = [F::zero(); 4];
        for ((((&a0, &a1), &a2), &a3), &x) in r0.iter().zip(r1).zip(r2).zip(r3).zip(h) {
            acc[0] = acc[0] + a0 * x;
            acc[1] = acc[1] + a1 * x;
            acc[2] = acc[2] + a2 * x;
            acc[3] = acc[3] + a3 * x;
        }
        out.extend_from_slice(&acc);
    }
    for row in rest.chunks_exact(d) {
        out.push(row.iter().zip(h).fold(F::zero(), |acc, (&a, &b)| acc + a * b));
    }
    out
}

/// Gate logits of token `h` through parameter group `group` without the slot's bias: `Z_g h`,
/// `c` channels.
fn gate_logits<F: Float>(gate: &GateParams<F>, group: usize, c: usize, h: ArrayView1<F>) -> Vec<F> {
    matvec(gate.z.slice(ndarray::s![group, ..c, ..]), h)
}

/// Projection `C_g h` of token `h` through parameter group `group`, `d_h` channels.
fn projection<F: Float>(p: &Array3<F>, group: usize, d_head: usize, h: ArrayView1<F>) -> Vec<F> {
    matvec(p.slice(ndarray::s![group, ..d_head, ..]), h)
}

/// What one token contributes to a window through a slot of parameter group `g`, computed once
/// and shared by every window (and every displaced window of `validate`'s phase profile) that
/// holds the token in a slot of that group: per branch the gate logits without the slot's bias,
/// `Z_g h` (empty for uniform gates), and the projection `C_g h`.
#[derive(Clone, Debug, PartialEq)]
pub struct Projected<F> {
    logit_k: Vec<F>,
    logit_v: Vec<F>,
    proj_k: Vec<F>,
    proj_v: Vec<F>,
}

/// The projections of token `h` through parameter group `group` ([`Projected`]).
pub fn project<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    group: usize,
    h: ArrayView1<F>,
) -> Projected<F> {
    let c = spec.gate_width(dims.d_head);
    let logits = |g: Option<&GateParams<F>>| -> Vec<F> { g.map(|g| gate_logits(g, group, c, h)).unwrap_or_default() };
    let proj = |p: &Array3<F>| -> Vec<F> { projection(p, group, dims.d_head, h) };
    Projected {
        logit_k: logits(params.gate_k.as_ref()),
        logit_v: if value_gate_is_key_gate(spec) { Vec::new() } else { logits(params.gate_v.as_ref()) },
        proj_k: proj(&params.proj_k),
        proj_v: params.proj_v.as_ref().map(proj).unwrap_or_default(),
    }
}

/// Compresses window `j` from its rows (`None` for an empty slot).
pub fn compress_window<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    j: usize,
    rows: &[Option<ArrayView1<F>>],
) -> WindowOut<F> {
    let projected: Vec<Option<Projected<F>>> =
        rows.iter().enumerate().map(|(i, r)| r.map(|h| project(spec, dims, params, spec.group_of(i), h))).collect();
    let slots: Vec<Option<&Projected<F>>> = projected.iter().map(Option::as_ref).collect();
    window_from_projected(spec, dims, params, j, &slots)
}

/// Window `j` from the projections of its slots (`None` for an empty slot; slot `i`'s
/// projection must be through group `g(i)`): gate weights, pooling and post-processing,
/// exactly [`compress_window`].
pub fn window_from_projected<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    j: usize,
    slots: &[Option<&Projected<F>>],
) -> WindowOut<F> {
    let p = pooled_from_projected(spec, dims, params, slots);
    let gate_v = p.gate_v.unwrap_or_else(|| p.gate_k.clone());
    finish(spec, params, j, p.pooled_k, p.pooled_v, p.gate_k, gate_v)
}

/// Window `j`'s post-processed key and value from the projections of its slots: the `key` and
/// `value` of [`window_from_projected`], bit for bit (the same path), without laying out its
/// gate weights and pooled entries; `validate`'s phase profile compares only these, for every
/// displaced window.
pub fn entry_from_projected<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    j: usize,
    slots: &[Option<&Projected<F>>],
) -> (Array1<F>, Array1<F>) {
    let p = pooled_from_projected(spec, dims, params, slots);
    post_processed(spec, params, j, &p.pooled_k, &p.pooled_v)
}

/// A window's pooled entries and its gate weights (`[W, c]`, [`slot_weights`]).
struct Pooled<F> {
    pooled_k: Array1<F>,
    pooled_v: Array1<F>,
    gate_k: Array2<F>,
    /// `None`: the value branch pools with the key gate's weights ([`value_gate_is_key_gate`]).
    gate_v: Option<Array2<F>>,
}

/// The one path from slot projections to a window's gate weights and pooled entries.
fn pooled_from_projected<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    slots: &[Option<&Projected<F>>],
) -> Pooled<F> {
    let gate_k = slot_weights(spec, dims, params.gate_k.as_ref(), &by_slot(slots, |p| &p.logit_k));
    let gate_v = (!value_gate_is_key_gate(spec))
        .then(|| slot_weights(spec, dims, params.gate_v.as_ref(), &by_slot(slots, |p| &p.logit_v)));
    let pooled_k = pool(spec, dims, &by_slot(slots, |p| &p.proj_k), &gate_k);
    let pooled_v = if params.proj_v.is_some() {
        pool(spec, dims, &by_slot(slots, |p| &p.proj_v), gate_v.as_ref().unwrap_or(&gate_k))
    } else {
        pooled_k.clone()
    };
    Pooled { pooled_k, pooled_v, gate_k, gate_v }
}

/// One part of every slot's projection (`None` for an empty slot).
fn by_slot<'a, F>(slots: &[Option<&'a Projected<F>>], part: fn(&Projected<F>) -> &[F]) -> Vec<Option<&'a [F]>> {
    slots.iter().map(|p| p.map(part)).collect()
}

/// Per channel, the first-order scale of the roundings a correct low-precision kernel makes in
/// window `j`'s pooled entry, for the keys and the values, on the tokens of `x` (`[T, d]`): each
/// gated term `t_i = a_i C h_i` rounded once, its weight off by the rounding of its logit `l_i`
/// (softmax: `da_i = a_i (dl_i - sum_k a_k dl_k)`, `dl ~ u |l|`), and the sum rounded once:
/// `sqrt(sum_i t_i^2 (1 + l_i^2) + y^2 (1 + sum_i a_i l_i^2))`, in units of roundoff.
/// `kernel validate`'s localized-error row divides each entry's error by it, so an entry whose
/// terms cancel or whose logits are large does not look like a bug.
pub fn pooled_rounding_scale(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<f64>,
    x: ArrayView2<f64>,
    j: usize,
) -> (Array1<f64>, Array1<f64>) {
    let g = spec.geometry;
    let slots: Vec<Option<Projected<f64>>> = (0..g.window())
        .map(|i| {
            g.token_at(j, i).filter(|&t| t < x.nrows()).map(|t| project(spec, dims, params, spec.group_of(i), x.row(t)))
        })
        .collect();
    let refs: Vec<Option<&Projected<f64>>> = slots.iter().map(Option::as_ref).collect();
    let out = window_from_projected(spec, dims, params, j, &refs);
    let vector = spec.gate == GateKind::Vector;
    let scale = |a: &Array2<f64>,
                 y: &Array1<f64>,
                 gate: Option<&GateParams<f64>>,
                 logit: fn(&Projected<f64>) -> &[f64],
                 v: fn(&Projected<f64>) -> &[f64]|
     -> Array1<f64> {
        let mut sq = Array1::<f64>::zeros(dims.d_head);
        let mut weighted = Array1::<f64>::zeros(dims.d_head);
        for (i, p) in refs.iter().enumerate() {
            let Some(p) = p else { continue };
            let proj = v(p);
            if proj.is_empty() {
                continue;
            }
            let (w, l) = (a.row(i), logit(p));
            for e in 0..dims.d_head {
                let ch = if vector { e } else { 0 };
                let li = match (gate, l.get(ch)) {
                    (Some(gp), Some(&l)) => l + gp.b[[i, ch]],
                    _ => 0.0,
                };
                let t = w[ch] * proj[e];
                sq[e] += t * t * (1.0 + li * li);
                weighted[e] += w[ch] * li * li;
            }
        }
        Array1::from_shape_fn(dims.d_head, |e| (sq[e] + y[e] * y[e] * (1.0 + weighted[e])).sqrt())
    };
    let key_gate = if spec.gate == GateKind::Uniform { None } else { params.gate_k.as_ref() };
    let key = scale(&out.gate_k, &out.pooled_k, key_gate, |p| &p.logit_k, |p| &p.proj_k);
    let value = if params.proj_v.is_none() {
        key.clone()
    } else if value_gate_is_key_gate(spec) {
        scale(&out.gate_v, &out.pooled_v, key_gate, |p| &p.logit_k, |p| &p.proj_v)
    } else {
        let value_gate = if spec.gate == GateKind::Uniform { None } else { params.gate_v.as_ref() };
        scale(&out.gate_v, &out.pooled_v, value_gate, |p| &p.logit_v, |p| &p.proj_v)
    };
    (key, value)
}

/// Whether the value branch reuses the key gate's weights (shared or tied gates, uniform pooling).
pub fn value_gate_is_key_gate(spec: &KernelSpec) -> bool {
    spec.shared_kv || spec.tied || spec.gate == GateKind::Uniform
}

/// Pools window `j` with the given gate weights `[W, c]` and post-processes the result.
pub fn window_from_gates<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    j: usize,
    rows: &[Option<ArrayView1<F>>],
    gate_k: Array2<F>,
    gate_v: Array2<F>,
) -> WindowOut<F> {
    let projections = |p: &Array3<F>| -> Vec<Option<Vec<F>>> {
        rows.iter().enumerate().map(|(i, r)| r.map(|h| projection(p, spec.group_of(i), dims.d_head, h))).collect()
    };
    let pk = projections(&params.proj_k);
    let pk_ref: Vec<Option<&[F]>> = pk.iter().map(|p| p.as_deref()).collect();
    let pooled_k = pool(spec, dims, &pk_ref, &gate_k);
    let pooled_v = match &params.proj_v {
        Some(pv) => {
            let pv = projections(pv);
            let pv_ref: Vec<Option<&[F]>> = pv.iter().map(|p| p.as_deref()).collect();
            pool(spec, dims, &pv_ref, &gate_v)
        }
        None => pooled_k.clone(),
    };
    finish(spec, params, j, pooled_k, pooled_v, gate_k, gate_v)
}

/// Post-processes pooled entries (RMSNorm, RoPE at the entry position) into a [`WindowOut`].
fn finish<F: Float>(
    spec: &KernelSpec,
    params: &KernelParams<F>,
    j: usize,
    pooled_k: Array1<F>,
    pooled_v: Array1<F>,
    gate_k: Array2<F>,
    gate_v: Array2<F>,
) -> WindowOut<F> {
    let (key, value) = post_processed(spec, params, j, &pooled_k, &pooled_v);
    WindowOut { key, value, pooled_k, pooled_v, gate_k, gate_v, position: spec.entry_position(j) }
}

/// Window `j`'s key and value: its pooled entries post-processed (RMSNorm, RoPE at the entry
/// position; the value is the key for shared key/value).
fn post_processed<F: Float>(
    spec: &KernelSpec,
    params: &KernelParams<F>,
    j: usize,
    pooled_k: &Array1<F>,
    pooled_v: &Array1<F>,
) -> (Array1<F>, Array1<F>) {
    let position = spec.entry_position(j);
    let gamma = params.gamma.as_ref().map(|g| g.as_slice().expect("contiguous gamma"));
    let mut key = pooled_k.clone();
    post::apply(spec, key.as_slice_mut().expect("contiguous"), gamma, position);
    let value = if spec.shared_kv {
        key.clone()
    } else {
        let mut v = pooled_v.clone();
        post::apply(spec, v.as_slice_mut().expect("contiguous"), gamma, position);
        v
    };
    (key, value)
}

/// Gate weights `[W, c]` of one window (`c` the gate width, at least 1) from each slot's
/// logits without bias (`None`: an empty slot): per channel, the softmax of the scores
/// `l_i[c] + b_i[c]` over the non-empty slots (uniform `1/valid` on channel 0 for uniform pooling
/// or a missing gate); empty slots weigh 0. The scores of the non-empty slots are one row-major
/// block, softmaxed down its columns ([`crate::numeric::softmax_columns_in_place`]): each
/// channel's softmax over the slots, read row by row.
fn slot_weights<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    gate: Option<&GateParams<F>>,
    logits: &[Option<&[F]>],
) -> Array2<F> {
    let (w, c) = (logits.len(), spec.gate_width(dims.d_head).max(1));
    let valid: Vec<(usize, &[F])> = logits.iter().enumerate().filter_map(|(i, l)| l.map(|l| (i, l))).collect();
    let mut a = Array2::<F>::zeros((w, c));
    match (spec.gate, gate) {
        (GateKind::Uniform, _) | (_, None) => {
            let u = F::one() / F::from(valid.len()).expect("count");
            for &(i, _) in &valid {
                a[[i, 0]] = u;
            }
        }
        (_, Some(g)) => {
            let mut scores = vec![F::zero(); valid.len() * c];
            for (row, &(i, l)) in scores.chunks_exact_mut(c).zip(&valid) {
                for ((s, &l), &b) in row.iter_mut().zip(&l[..c]).zip(g.b.row(i)) {
                    *s = l + b;
                }
            }
            crate::numeric::softmax_columns_in_place(&mut scores, c);
            for (row, &(i, _)) in scores.chunks_exact(c).zip(&valid) {
                a.row_mut(i).assign(&ArrayView1::from(row));
            }
        }
    }
    a
}

/// Gate weights `[W, c]` of one window: per channel, the softmax of the scores over the
/// non-empty slots (uniform over them for uniform pooling or a missing gate); empty slots weigh 0.
pub fn gate_weights<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    gate: Option<&GateParams<F>>,
    rows: &[Option<ArrayView1<F>>],
) -> Array2<F> {
    let c = spec.gate_width(dims.d_head);
    let logits: Vec<Option<Vec<F>>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            r.map(|h| match (spec.gate, gate) {
                (GateKind::Uniform, _) | (_, None) => Vec::new(),
                (_, Some(g)) => gate_logits(g, spec.group_of(i), c, h),
            })
        })
        .collect();
    let logits: Vec<Option<&[F]>> = logits.iter().map(|l| l.as_deref()).collect();
    slot_weights(spec, dims, gate, &logits)
}

/// Gate scores `[W, c]` of the given slots: `s_i[c] = sum_k Z_{g(i)}[c,k] h_i[k] + b_i[c]` (the
/// sum first, then the bias, as [`window_from_projected`] does; an empty slot's row counts as
/// zero); other slots score 0.
pub fn gate_scores<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    gate: &GateParams<F>,
    rows: &[Option<ArrayView1<F>>],
    slots: &[usize],
) -> Array2<F> {
    let c = spec.gate_width(dims.d_head).max(1);
    let mut s = Array2::<F>::zeros((rows.len(), c));
    for &i in slots {
        let zh = rows[i].map(|h| gate_logits(gate, spec.group_of(i), c, h));
        for ch in 0..c {
            s[[i, ch]] = zh.as_ref().map_or(F::zero(), |z| z[ch]) + gate.b[[i, ch]];
        }
    }
    s
}

/// Pooled output `sum_i a_i (.) v_i` of one window from its slots' projections `v_i = C_{g(i)} h_i`
/// and its gate weights `a` (`[W, c]`): per channel, the terms added in slot order from 0.
fn pool<F: Float>(spec: &KernelSpec, dims: KernelDims, projected: &[Option<&[F]>], a: &Array2<F>) -> Array1<F> {
    let vector = spec.gate == GateKind::Vector;
    let mut out = vec![F::zero(); dims.d_head];
    for (i, v) in projected.iter().enumerate() {
        let Some(v) = v else { continue };
        let w = a.row(i);
        if vector {
            for ((o, &weight), &v) in out.iter_mut().zip(w.iter()).zip(&v[..dims.d_head]) {
                *o = *o + weight * v;
            }
        } else {
            let weight = w[0];
            for (o, &v) in out.iter_mut().zip(&v[..dims.d_head]) {
                *o = *o + weight * v;
            }
        }
    }
    Array1::from(out)
}

/// Token-by-token (or chunked) reference compression with carried state: the last `W` input
/// rows. Entries for a prefix never change when tokens are appended; [`ReferenceStream::reset`]
/// starts a new sequence.
#[derive(Clone, Debug)]
pub struct ReferenceStream<F> {
    spec: KernelSpec,
    dims: KernelDims,
    params: KernelParams<F>,
    buffer: VecDeque<(usize, Array1<F>)>,
    next_pos: usize,
    next_window: usize,
}

impl<F: Float> ReferenceStream<F> {
    /// A stream at the start of a sequence.
    pub fn new(spec: &KernelSpec, dims: KernelDims, params: &KernelParams<F>) -> Result<Self> {
        spec.validate_for(dims.d_head)?;
        params.validate(spec, dims)?;
        Ok(ReferenceStream {
            spec: spec.clone(),
            dims,
            params: params.clone(),
            buffer: VecDeque::new(),
            next_pos: 0,
            next_window: 0,
        })
    }

    /// Starts a new sequence: forgets every carried token.
    pub fn reset(&mut self) {
        self.buffer.clear();
        self.next_pos = 0;
        self.next_window = 0;
    }

    /// Appends tokens `[c, d]` and returns the entries they complete, in order.
    pub fn push(&mut self, x: ArrayView2<F>) -> Result<Vec<WindowOut<F>>> {
        check_input(self.dims, x)?;
        let g = self.spec.geometry;
        let mut out = Vec::new();
        for row in x.rows() {
            let pos = self.next_pos;
            self.buffer.push_back((pos, row.to_owned()));
            self.next_pos += 1;
            while g.end(self.next_window) == pos {
                let j = self.next_window;
                let rows: Vec<Option<ArrayView1<F>>> = (0..g.window())
                    .map(|i| {
                        g.token_at(j, i).map(|t| {
                            let (p0, _) = self.buffer[0];
                            self.buffer[t - p0].1.view()
                        })
                    })
                    .collect();
                out.push(compress_window(&self.spec, self.dims, &self.params, j, &rows));
                self.next_window += 1;
            }
            // Keep only tokens that a future window can still use.
            let keep_from = g.start(self.next_window).max(0) as usize;
            while self.buffer.front().is_some_and(|(p, _)| *p < keep_from) {
                self.buffer.pop_front();
            }
        }
        Ok(out)
    }
}
