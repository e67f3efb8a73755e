//! The compressor of the fast engine, forward and backward: the `w{W}s{S}` family of
//! [`crate::kernel::tensor::TensorKernel::compress`] (paper eqs. 1-2) as the decoder
//! differentiates through it, for one attention layer and all its KV heads at once (heads on
//! different grids, `stagger: heads`, one head at a time: `heads`).
//!
//! Layout. `R = B * n` window rows (row `b * n + j`), `H` KV heads, `gw` gate channels per head
//! (`d_h` for vector gates, 1 for scalar and uniform ones). Per offset `i`:
//! `X_i: [R, d]` (the slot's token row of the attention input, zero for an empty slot),
//! `P_i = X_i C_{g(i)}: [R, H*d_h]`, gate logits `S_i = X_i Z_{g(i)} + b_i: [R, H*gw]` (no `b_i`
//! for a spec without gate biases, `gate_bias: false`), gate
//! weights `A_i = softmax_i(S_i)` over the window's valid offsets (uniform: `1/valid`), pooled
//! entry `E = sum_i A_i (.) P_i` (a scalar gate broadcast over its head's channels), then RoPE
//! at the entry positions of [`KernelSpec::entry_position`]. Windows, slots and positions come
//! from [`crate::geometry::Geometry`] (`slot_tokens`, `num_windows`), never re-derived here.
//!
//! Backward, per branch `B` (keys, values) with upstream `dE`:
//! `dP_i = A_i (.) dE`, `dA_i = dE (.) P_i` (summed over a head's channels for a scalar gate;
//! the key and value branches both add to a tied gate's `dA`), softmax backward
//! `dS_i = A_i (.) (dA_i - sum_k A_k (.) dA_k)`; then `dC_{g(i)} += X_i^T dP_i`,
//! `dZ_{g(i)} += X_i^T dS_i`, `db_i += colsum(dS_i)` (when there is a `b`), `dX_i = dP_i C^T + dS_i Z^T`, scattered
//! back onto the slot's token row. Offsets, rows and heads go in one fixed order.

use super::ops::{rms_norm, Rope};
use super::size;
use crate::kernel::spec::{GateKind, KernelSpec};
use crate::numeric::{gemm, View};

mod backward;
mod heads;
pub(super) use heads::{compress_layer_backward, compress_layer_forward, LayerCompress, LayerWindows};

/// The parts of a kernel spec the fast compressor uses, bound to the model's sizes.
#[derive(Debug, Clone)]
pub(super) struct CompressorShape {
    spec: KernelSpec,
    /// Window `W`.
    pub w: usize,
    /// KV heads `H`.
    pub h: usize,
    /// Head width `d_h`.
    pub dh: usize,
    /// Model width `d`.
    pub d: usize,
    /// Gate channels per head (`d_h` vector, 1 scalar or uniform).
    pub gw: usize,
    /// The key gate has parameters (not uniform).
    pub gate_k: bool,
    /// The learned gates carry per-offset biases `b_i` (not DeepSeek-V4.1's `gate_bias:
    /// false`, whose logits are `X_i Z_{g(i)}` alone).
    pub gate_bias: bool,
    /// The value gate has parameters of its own (untied, not uniform).
    pub gate_v: bool,
    /// Keys and values are one vector (DeepSeek-V4): no value projection, and the value entry
    /// is the key entry.
    pub shared_kv: bool,
    /// Epsilon of the RMSNorm on each pooled entry (learned weight `gamma: [H, d_h]`), if any.
    pub norm_eps: Option<f32>,
    /// Inverse RoPE frequencies of the entries (`None`: no RoPE on entries).
    pub rope_freqs: Option<Vec<f64>>,
}

impl CompressorShape {
    /// The shape of a spec's compressor.
    pub fn new(spec: &KernelSpec, d: usize, dh: usize, h: usize) -> Self {
        let gw = if spec.gate == GateKind::Vector { dh } else { 1 };
        let rope_freqs = spec.rope.as_ref().and_then(|rs| {
            let r = rs.rotated_channels(dh);
            (r > 0).then(|| rs.inv_frequencies(r))
        });
        CompressorShape {
            spec: spec.clone(),
            w: spec.geometry.window(),
            h,
            dh,
            d,
            gw,
            gate_k: spec.gate != GateKind::Uniform,
            gate_bias: spec.has_gate_bias(),
            gate_v: spec.has_value_gate(),
            shared_kv: spec.shared_kv,
            norm_eps: spec.rms_norm.then_some(spec.rms_norm_eps as f32),
            rope_freqs,
        }
    }

    /// Parameter names after `layer{l}.attn.kernel.`, in the order of [`KernelParams`] slots.
    pub fn param_names(&self) -> Vec<&'static str> {
        let mut v = vec!["proj_k"];
        if !self.shared_kv {
            v.push("proj_v");
        }
        for (has, z, b) in [(self.gate_k, "gate_k.z", "gate_k.b"), (self.gate_v, "gate_v.z", "gate_v.b")] {
            if has {
                v.push(z);
                if self.gate_bias {
                    v.push(b);
                }
            }
        }
        if self.norm_eps.is_some() {
            v.push("gamma");
        }
        v
    }

    /// One layer's parameters, whose first ([`Self::param_names`] order) is `w[k0]`.
    pub fn params<'a>(&self, w: &'a [Vec<f32>], k0: usize) -> KernelParams<'a> {
        let mut it = w[k0..].iter().map(|v| &v[..]);
        let mut next = || it.next().expect("one tensor per kernel parameter");
        let proj_k = next();
        let proj_v = (!self.shared_kv).then(&mut next);
        let mut gate = |has: bool| has.then(|| (next(), self.gate_bias.then(&mut next)));
        let (gate_k, gate_v) = (gate(self.gate_k), gate(self.gate_v));
        let gamma = self.norm_eps.map(|_| next());
        KernelParams { proj_k, proj_v, gate_k, gate_v, gamma }
    }

    /// One layer's gradients, `g` in [`Self::param_names`] order.
    pub fn grads<'a>(&self, g: &'a mut [Vec<f32>]) -> KernelGrads<'a> {
        let mut it = g.iter_mut().map(|v| &mut v[..]);
        let mut next = || it.next().expect("one gradient per kernel parameter");
        let proj_k = next();
        let proj_v = (!self.shared_kv).then(&mut next);
        let mut gate = |has: bool| has.then(|| (next(), self.gate_bias.then(&mut next)));
        let (gate_k, gate_v) = (gate(self.gate_k), gate(self.gate_v));
        let gamma = self.norm_eps.map(|_| next());
        KernelGrads { proj_k, proj_v, gate_k, gate_v, gamma }
    }

    /// The windows of a `t`-token sequence on one grid (`spec`: this shape's spec on the grid of
    /// a layer's or a KV head's offset, [`crate::model::config::ModelConfig::head_specs`]): slot tokens
    /// `[n, W]`, valid slots per window and the entry positions (all from the geometry and the
    /// spec).
    pub fn windows(&self, spec: &KernelSpec, t: usize) -> Windows {
        debug_assert_eq!(
            KernelSpec { geometry: self.spec.geometry, stagger: self.spec.stagger, ..spec.clone() },
            self.spec,
            "a layer's spec differs from the shape's in more than its grid"
        );
        let g = &spec.geometry;
        let n = g.num_windows(t);
        let slots = g.slot_tokens(t);
        let counts = slots.chunks(self.w).map(|c| c.iter().filter(|s| s.is_some()).count()).collect();
        let positions: Vec<usize> = (0..n).map(|j| spec.entry_position(j)).collect();
        let rope = self.rope_freqs.as_ref().map(|f| Rope::new(f, positions.iter().max().map_or(0, |&p| p + 1)));
        Windows { n, slots, counts, positions, rope }
    }
}

/// Where one compressor call's entries go in the attention's key and value buffers
/// `[B, H_kv, n + T, d_h]`: its `h` heads are heads `head0..head0 + h` of `heads`, each block of
/// one sequence and head `rows` long (the layer's entry columns `n` plus `T`), entry `j` at row
/// `j`. The layer's batched compressor is all of it (`head0 = 0`, `rows = n + T`); a head on its
/// own grid is one head of it, with `rows` the longest head's entries plus `T`.
#[derive(Clone, Copy, Debug)]
pub(super) struct EntryRows {
    pub heads: usize,
    pub head0: usize,
    pub rows: usize,
}

impl EntryRows {
    /// The row of entry `j` of the call's head `hh` in sequence `bb`.
    fn row(&self, bb: usize, hh: usize, j: usize) -> usize {
        (bb * self.heads + self.head0 + hh) * self.rows + j
    }
}

/// The windows of one sequence length.
pub(super) struct Windows {
    /// Number of windows `n`.
    pub n: usize,
    slots: Vec<Option<usize>>,
    counts: Vec<usize>,
    positions: Vec<usize>,
    rope: Option<Rope>,
}

/// One layer's compressor parameters (row-major, the candle tensors' layout):
/// `C: [G, d, H*d_h]`, `Z: [G, d, H*gw]`, `b: [W, H*gw]`, `gamma: [H, d_h]`.
pub(super) struct KernelParams<'a> {
    pub proj_k: &'a [f32],
    /// `None` with shared K/V.
    pub proj_v: Option<&'a [f32]>,
    /// `(Z, b)` of a learned gate (`b` `None` without gate biases).
    pub gate_k: Option<(&'a [f32], Option<&'a [f32]>)>,
    pub gate_v: Option<(&'a [f32], Option<&'a [f32]>)>,
    /// The entry RMSNorm's weight, if the spec has one.
    pub gamma: Option<&'a [f32]>,
}

/// Gradients of [`KernelParams`], same layout (accumulated into; zero on entry).
pub(super) struct KernelGrads<'a> {
    pub proj_k: &'a mut [f32],
    pub proj_v: Option<&'a mut [f32]>,
    pub gate_k: Option<(&'a mut [f32], Option<&'a mut [f32]>)>,
    pub gate_v: Option<(&'a mut [f32], Option<&'a mut [f32]>)>,
    pub gamma: Option<&'a mut [f32]>,
}

/// What the compressor forward keeps for its backward pass.
#[derive(Default)]
pub(super) struct CompressCache {
    /// `X_i`, `[W, R, d]`.
    xw: Vec<f32>,
    /// Every group's matrices side by side, `[G, d, N]`: `C^K | C^V | Z^K | Z^V` (the gates'
    /// only when they have parameters), so that each offset is one GEMM.
    wp: Vec<f32>,
    /// `Y_i = X_i [C^K | C^V | Z^K | Z^V]_{g(i)}`, `[W, R, N]` (`P^K_i`, `P^V_i`, gate logits).
    y: Vec<f32>,
    /// Gate weights `[W, R, H*gw]` of the key gate and (own parameters only) the value gate.
    ak: Vec<f32>,
    av: Vec<f32>,
    /// Pooled entries before the RMSNorm, `[B, H, n, d_h]` per branch (keys, values; the keys'
    /// only with shared K/V), and the norm's `1 / rms` per entry row `[B, H, n]`.
    ek: Vec<f32>,
    ev: Vec<f32>,
    rk: Vec<f32>,
    rv: Vec<f32>,
}

/// Scratch buffers of the backward pass.
#[derive(Default)]
pub(super) struct CompressScratch {
    dek: Vec<f32>,
    dev: Vec<f32>,
    /// `dY_i = dP^K_i | dP^V_i | dS^K_i | dS^V_i`, `[R, N]`.
    dy: Vec<f32>,
    /// Gradient of `wp`, `[G, d, N]`.
    dwp: Vec<f32>,
    dak: Vec<f32>,
    dav: Vec<f32>,
    dx: Vec<f32>,
    /// Gradient of one entry row after the RMSNorm.
    drow: Vec<f32>,
    /// One head's parameter gradients, when the layer's heads sit on different grids.
    head_grads: Vec<Vec<f32>>,
}

/// Softmax over the offset axis of `s: [W, R, C]` in place, per window row and channel, over
/// the valid offsets only (`-inf` elsewhere in the candle path: weight 0); the maximum is
/// subtracted first, as in [`crate::kernel::tensor::softmax`].
fn softmax_offsets(s: &mut [f32], win: &Windows, w: usize, r: usize, c: usize) {
    let mut m = vec![0f32; c];
    let mut sum = vec![0f32; c];
    for row in 0..r {
        let j = row % win.n;
        let valid = |i: usize| win.slots[j * w + i].is_some();
        m.fill(f32::NEG_INFINITY);
        for i in (0..w).filter(|&i| valid(i)) {
            for (mv, &v) in m.iter_mut().zip(&s[(i * r + row) * c..(i * r + row + 1) * c]) {
                *mv = mv.max(v);
            }
        }
        sum.fill(0.0);
        for i in 0..w {
            let x = &mut s[(i * r + row) * c..(i * r + row + 1) * c];
            if valid(i) {
                for ((v, &mv), sv) in x.iter_mut().zip(&m).zip(sum.iter_mut()) {
                    *v = (*v - mv).exp();
                    *sv += *v;
                }
            } else {
                x.fill(0.0);
            }
        }
        for i in (0..w).filter(|&i| valid(i)) {
            for (v, &sv) in s[(i * r + row) * c..(i * r + row + 1) * c].iter_mut().zip(&sum) {
                *v /= sv;
            }
        }
    }
}

impl CompressorShape {
    /// Columns `N` of the side-by-side matrices, and the first column of each part:
    /// `(N, P^V, S^K, S^V)` (`P^K` starts at 0; with shared K/V there is no `P^V`).
    fn columns(&self) -> (usize, usize, usize, usize) {
        let (hd, c) = (self.h * self.dh, self.h * self.gw);
        let sk = if self.shared_kv { hd } else { 2 * hd };
        let sv = sk + if self.gate_k { c } else { 0 };
        (sv + if self.gate_v { c } else { 0 }, hd, sk, sv)
    }
}

/// How one gate's weights are formed.
#[derive(Clone, Copy)]
enum Gate<'a> {
    /// `1 / valid` on every valid slot.
    Uniform,
    /// Softmax over the offsets of the logits plus the per-offset bias, when the spec has one
    /// (`None`: `gate_bias: false`, the logits alone).
    Learned(Option<&'a [f32]>),
}

impl<'a> Gate<'a> {
    /// The gate of a branch's parameters `(Z, b)` (`None`: no parameters, uniform).
    fn of(params: Option<(&'a [f32], Option<&'a [f32]>)>) -> Self {
        params.map_or(Gate::Uniform, |(_, bias)| Gate::Learned(bias))
    }
}

/// Gate weights `[W, R, H*gw]` of one gate: softmax over the offsets of the logits in columns
/// `col..col + H*gw` of `y` (plus the bias, if any), or uniform.
#[allow(clippy::too_many_arguments)]
fn gate_forward(
    sh: &CompressorShape,
    win: &Windows,
    r: usize,
    y: &[f32],
    nc: usize,
    col: usize,
    gate: Gate,
    a: &mut Vec<f32>,
) {
    let (w, c) = (sh.w, sh.h * sh.gw);
    size(a, w * r * c);
    match gate {
        Gate::Learned(bias) => {
            for i in 0..w {
                for row in 0..r {
                    let src = &y[(i * r + row) * nc + col..(i * r + row) * nc + col + c];
                    let dst = &mut a[(i * r + row) * c..(i * r + row + 1) * c];
                    match bias {
                        Some(bias) => {
                            for ((dv, &sv), &bv) in dst.iter_mut().zip(src).zip(&bias[i * c..(i + 1) * c]) {
                                *dv = sv + bv;
                            }
                        }
                        None => dst.copy_from_slice(src),
                    }
                }
            }
            softmax_offsets(a, win, w, r, c);
        }
        Gate::Uniform => {
            for i in 0..w {
                for row in 0..r {
                    let j = row % win.n;
                    let v = if win.slots[j * w + i].is_some() { 1.0 / win.counts[j] as f32 } else { 0.0 };
                    a[(i * r + row) * c..(i * r + row + 1) * c].fill(v);
                }
            }
        }
    }
}

/// `E = sum_i A_i (.) P_i` (`P_i` in columns `col..` of `y`) into the entry rows `at` of
/// `kc: [B, H_kv, n + T, d_h]` (rows `0..n` of each sequence and head), RMS-normed with `gamma`
/// (the pre-norm entries into `pre`, `1 / rms` into `inv`) and rotated at the entry positions.
#[allow(clippy::too_many_arguments)]
fn pool(
    sh: &CompressorShape,
    win: &Windows,
    b: usize,
    y: &[f32],
    nc: usize,
    col: usize,
    a: &[f32],
    gamma: Option<&[f32]>,
    pre: &mut Vec<f32>,
    inv: &mut Vec<f32>,
    at: EntryRows,
    kc: &mut [f32],
) {
    let (w, n, h, dh, gw) = (sh.w, win.n, sh.h, sh.dh, sh.gw);
    let (r, c) = (b * n, h * gw);
    if gamma.is_some() {
        size(pre, r * h * dh);
        size(inv, r * h);
    }
    for row in 0..r {
        let (bb, j) = (row / n, row % n);
        for hh in 0..h {
            let e = &mut kc[at.row(bb, hh, j) * dh..(at.row(bb, hh, j) + 1) * dh];
            e.fill(0.0);
            for i in 0..w {
                let o = (i * r + row) * nc + col + hh * dh;
                let pi = &y[o..o + dh];
                let ai = &a[(i * r + row) * c + hh * gw..(i * r + row) * c + (hh + 1) * gw];
                if gw == 1 {
                    for (ev, &pv) in e.iter_mut().zip(pi) {
                        *ev += ai[0] * pv;
                    }
                } else {
                    for ((ev, &pv), &av) in e.iter_mut().zip(pi).zip(ai) {
                        *ev += av * pv;
                    }
                }
            }
            if let (Some(gamma), Some(eps)) = (gamma, sh.norm_eps) {
                let k = (bb * h + hh) * n + j;
                pre[k * dh..(k + 1) * dh].copy_from_slice(e);
                rms_norm(&pre[k * dh..(k + 1) * dh], &gamma[hh * dh..(hh + 1) * dh], eps, e, &mut inv[k..k + 1]);
            }
            if let Some(rope) = &win.rope {
                rope.apply(e, win.positions[j], false);
            }
        }
    }
}

/// Forward: entries of every sequence and KV head of the call into their rows `at` of `kc` and
/// `vc` (`[B, H_kv, n + T, d_h]`), from the attention input `x: [B*T, d]`.
#[allow(clippy::too_many_arguments)]
pub(super) fn compress_forward(
    sh: &CompressorShape,
    win: &Windows,
    prm: &KernelParams,
    x: &[f32],
    b: usize,
    t: usize,
    at: EntryRows,
    cache: &mut CompressCache,
    kc: &mut [f32],
    vc: &mut [f32],
) {
    let (w, n, d, hd, c) = (sh.w, win.n, sh.d, sh.h * sh.dh, sh.h * sh.gw);
    let (nc, cv, sk, sv) = sh.columns();
    let groups = sh.spec.num_groups();
    let r = b * n;
    if r == 0 {
        return;
    }
    size(&mut cache.xw, w * r * d);
    size(&mut cache.y, w * r * nc);
    size(&mut cache.wp, groups * d * nc);
    for i in 0..w {
        for row in 0..r {
            let (bb, j) = (row / n, row % n);
            let dst = &mut cache.xw[(i * r + row) * d..(i * r + row + 1) * d];
            match win.slots[j * w + i] {
                Some(tok) => dst.copy_from_slice(&x[(bb * t + tok) * d..(bb * t + tok + 1) * d]),
                None => dst.fill(0.0),
            }
        }
    }
    let parts = [
        Some((prm.proj_k, 0, hd)),
        prm.proj_v.map(|p| (p, cv, hd)),
        prm.gate_k.map(|(z, _)| (z, sk, c)),
        prm.gate_v.map(|(z, _)| (z, sv, c)),
    ];
    for (m, col, width) in parts.into_iter().flatten() {
        for (dst, src) in cache.wp.chunks_exact_mut(nc).zip(m.chunks_exact(width)) {
            dst[col..col + width].copy_from_slice(src);
        }
    }
    for i in 0..w {
        let g = sh.spec.group_of(i);
        let xi = View::rows(&cache.xw[i * r * d..(i + 1) * r * d], d);
        let yi = &mut cache.y[i * r * nc..(i + 1) * r * nc];
        gemm(r, nc, d, yi, nc, false, xi, View::rows(&cache.wp[g * d * nc..(g + 1) * d * nc], nc));
    }
    gate_forward(sh, win, r, &cache.y, nc, sk, Gate::of(prm.gate_k), &mut cache.ak);
    let g = prm.gamma;
    pool(sh, win, b, &cache.y, nc, 0, &cache.ak, g, &mut cache.ek, &mut cache.rk, at, kc);
    if sh.shared_kv {
        // The value entry is the key entry (normed and rotated once).
        let dh = sh.dh;
        for bb in 0..b {
            for hh in 0..sh.h {
                let e = at.row(bb, hh, 0) * dh..at.row(bb, hh, n) * dh;
                vc[e.clone()].copy_from_slice(&kc[e]);
            }
        }
    } else if sh.gate_v {
        gate_forward(sh, win, r, &cache.y, nc, sv, Gate::of(prm.gate_v), &mut cache.av);
        pool(sh, win, b, &cache.y, nc, cv, &cache.av, g, &mut cache.ev, &mut cache.rv, at, vc);
    } else {
        pool(sh, win, b, &cache.y, nc, cv, &cache.ak, g, &mut cache.ev, &mut cache.rv, at, vc);
    }
}
