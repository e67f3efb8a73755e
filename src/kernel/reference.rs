//! The reference kernel: plain loops over ndarray, written for obviousness, generic over the
//! float type (f64 is the oracle; f32/f16/bf16 instances give the "low" reference of the
//! tolerance rule, `spec/kernels.md` §3).
//!
//! For window `j`, branch `B`, valid offset `i` holding token `t`:
//!
//! ```text
//! s_{j,i}[c] = sum_k Z_{g(i)}[c,k] h_t[k] + b_i[c]
//! a_{j,i}[c] = exp(s_{j,i}[c] - m[c]) / sum_{i' valid} exp(s_{j,i'}[c] - m[c])
//! B_j[e]     = sum_i a_{j,i}[c(e)] * sum_k C_{g(i)}[e,k] h_t[k]     (c(e) = e, or 0 for scalar gates)
//! ```
//!
//! followed by RMSNorm and partial RoPE ([`super::post`]). Empty slots (`pad_left`) are skipped:
//! their weight is exactly 0.
//!
//! One-shot ([`compress`]) and streaming ([`ReferenceStream`]) both call [`compress_window`] on
//! the same rows, so they agree bit for bit.

use super::params::{GateParams, KernelParams};
use super::post;
use super::spec::{GateKind, KernelDims, KernelSpec};
use super::Compressed;
use crate::{Error, Result};
use ndarray::{Array1, Array2, Array3, ArrayView1, ArrayView2};
use num_traits::Float;
use std::collections::VecDeque;

/// Deliberately broken variants of the reference, used to show that the invariant harness
/// catches real bugs. Not part of the supported API.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// The correct kernel.
    None,
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
}

impl Mutation {
    /// Every mutant, with a short name.
    pub fn all() -> [(Mutation, &'static str); 6] {
        [
            (Mutation::WindowStartOffByOne, "off-by-one-window-start"),
            (Mutation::SoftmaxOverChannels, "softmax-over-channels"),
            (Mutation::BiasByWindow, "bias-by-window"),
            (Mutation::PaddedSlotsKeepWeight, "padded-slots-keep-weight"),
            (Mutation::StrideForWindow, "stride-for-window"),
            (Mutation::AttentionLookAhead, "attention-look-ahead"),
        ]
    }

    /// The mutant with this short name.
    pub fn from_name(name: &str) -> Result<Self> {
        Mutation::all().iter().find(|(_, n)| *n == name).map(|(m, _)| *m).ok_or_else(|| {
            let names: Vec<_> = Mutation::all().iter().map(|(_, n)| *n).collect();
            Error::invalid("mutant", format!("unknown mutant '{name}'; expected one of {}", names.join(", ")))
        })
    }
}

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
    compress_mutated(spec, dims, params, x, Mutation::None)
}

/// [`compress`] with a deliberate bug (for the harness's mutant tests).
#[doc(hidden)]
pub fn compress_mutated<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    x: ArrayView2<F>,
    mutation: Mutation,
) -> Result<Compressed<F>> {
    spec.validate_for(dims.d_head)?;
    params.validate(spec, dims)?;
    check_input(dims, x)?;
    let t_len = x.nrows();
    let g = &spec.geometry;
    let n = g.num_windows(t_len);
    let outs: Vec<WindowOut<F>> = (0..n)
        .map(|j| {
            let rows: Vec<Option<ArrayView1<F>>> =
                (0..g.window()).map(|i| slot_token(spec, j, i, t_len, mutation).map(|t| x.row(t))).collect();
            compress_window(spec, dims, params, j, &rows, mutation)
        })
        .collect();
    Ok(assemble(spec, dims, outs))
}

/// The token in slot `i` of window `j` (with the geometry mutations applied).
fn slot_token(spec: &KernelSpec, j: usize, i: usize, t_len: usize, mutation: Mutation) -> Option<usize> {
    let g = &spec.geometry;
    match mutation {
        Mutation::WindowStartOffByOne => g.token_at(j, i).map(|t| t + 1).filter(|&t| t < t_len),
        Mutation::StrideForWindow if i >= g.stride() => None,
        _ => g.token_at(j, i),
    }
}

/// Stacks per-window outputs into a [`Compressed`].
pub(crate) fn assemble<F: Float>(spec: &KernelSpec, dims: KernelDims, outs: Vec<WindowOut<F>>) -> Compressed<F> {
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

/// Compresses window `j` from its rows (`None` for an empty slot).
pub fn compress_window<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    j: usize,
    rows: &[Option<ArrayView1<F>>],
    mutation: Mutation,
) -> WindowOut<F> {
    let gate_k = gate_weights(spec, dims, params.gate_k.as_ref(), j, rows, mutation);
    let gate_v = if spec.shared_kv || spec.tied || spec.gate == GateKind::Uniform {
        gate_k.clone()
    } else {
        gate_weights(spec, dims, params.gate_v.as_ref(), j, rows, mutation)
    };
    let pooled_k = pool(spec, dims, &params.proj_k, &gate_k, rows);
    let pooled_v = match &params.proj_v {
        Some(pv) => pool(spec, dims, pv, &gate_v, rows),
        None => pooled_k.clone(),
    };
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
    WindowOut { key, value, pooled_k, pooled_v, gate_k, gate_v, position }
}

/// Gate weights `[W, c]` of one window.
fn gate_weights<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    gate: Option<&GateParams<F>>,
    j: usize,
    rows: &[Option<ArrayView1<F>>],
    mutation: Mutation,
) -> Array2<F> {
    let w = rows.len();
    let dg = spec.gate_width(dims.d_head);
    let c = dg.max(1);
    let mut a = Array2::<F>::zeros((w, c));
    let valid: Vec<usize> = (0..w).filter(|&i| rows[i].is_some()).collect();
    let gate = match (spec.gate, gate) {
        (GateKind::Uniform, _) | (_, None) => {
            let u = F::one() / F::from(valid.len()).expect("count");
            for &i in &valid {
                a[[i, 0]] = u;
            }
            return a;
        }
        (_, Some(g)) => g,
    };
    // Slots that take part in the softmax.
    let slots: Vec<usize> = if mutation == Mutation::PaddedSlotsKeepWeight { (0..w).collect() } else { valid };
    let mut s = Array2::<F>::zeros((w, c));
    for &i in &slots {
        let grp = spec.group_of(i);
        let brow = if mutation == Mutation::BiasByWindow { j % w } else { i };
        for ch in 0..c {
            let mut acc = gate.b[[brow, ch]];
            if let Some(h) = rows[i] {
                for k in 0..dims.d_model {
                    acc = acc + gate.z[[grp, ch, k]] * h[k];
                }
            }
            s[[i, ch]] = acc;
        }
    }
    if mutation == Mutation::SoftmaxOverChannels {
        for &i in &slots {
            let m = (0..c).map(|ch| s[[i, ch]]).fold(F::neg_infinity(), F::max);
            let z = (0..c).fold(F::zero(), |acc, ch| acc + (s[[i, ch]] - m).exp());
            for ch in 0..c {
                a[[i, ch]] = (s[[i, ch]] - m).exp() / z;
            }
        }
        return a;
    }
    for ch in 0..c {
        let m = slots.iter().map(|&i| s[[i, ch]]).fold(F::neg_infinity(), F::max);
        let z = slots.iter().fold(F::zero(), |acc, &i| acc + (s[[i, ch]] - m).exp());
        for &i in &slots {
            a[[i, ch]] = (s[[i, ch]] - m).exp() / z;
        }
    }
    a
}

/// Pooled output `sum_i a_i (.) C_{g(i)} h_i` of one window.
fn pool<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    proj: &Array3<F>,
    a: &Array2<F>,
    rows: &[Option<ArrayView1<F>>],
) -> Array1<F> {
    let dh = dims.d_head;
    let vector = spec.gate == GateKind::Vector;
    let mut out = Array1::<F>::zeros(dh);
    for (i, row) in rows.iter().enumerate() {
        let Some(h) = row else { continue };
        let grp = spec.group_of(i);
        for e in 0..dh {
            let mut v = F::zero();
            for k in 0..dims.d_model {
                v = v + proj[[grp, e, k]] * h[k];
            }
            let weight = if vector { a[[i, e]] } else { a[[i, 0]] };
            out[e] = out[e] + weight * v;
        }
    }
    out
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
                out.push(compress_window(&self.spec, self.dims, &self.params, j, &rows, Mutation::None));
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

/// Streams `x` through a [`ReferenceStream`] in chunks of the given sizes (the last chunk takes
/// the remainder) and assembles the entries.
pub fn compress_streaming<F: Float>(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<F>,
    x: ArrayView2<F>,
    chunks: &[usize],
) -> Result<Compressed<F>> {
    let mut stream = ReferenceStream::new(spec, dims, params)?;
    let mut outs = Vec::new();
    let mut at = 0;
    let mut sizes = chunks.iter().copied().filter(|&c| c > 0);
    while at < x.nrows() {
        let c = sizes.next().unwrap_or(x.nrows() - at).min(x.nrows() - at);
        outs.extend(stream.push(x.slice(ndarray::s![at..at + c, ..]))?);
        at += c;
    }
    Ok(assemble(spec, dims, outs))
}
