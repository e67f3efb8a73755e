//! What the fast compressor is bound to and works on: the spec's parts at the model's sizes
//! ([`CompressorShape`]), the windows of a sequence length, where entries go, the parameter and
//! gradient views, and the buffers the forward keeps for the backward.

use super::super::ops::Rope;
use crate::kernel::spec::{GateKind, KernelSpec};

/// The parts of a kernel spec the fast compressor uses, bound to the model's sizes.
#[derive(Debug, Clone)]
pub(in crate::model::fast) struct CompressorShape {
    pub(super) spec: KernelSpec,
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
pub(in crate::model::fast) struct EntryRows {
    pub heads: usize,
    pub head0: usize,
    pub rows: usize,
}

impl EntryRows {
    /// The row of entry `j` of the call's head `hh` in sequence `bb`.
    pub(super) fn row(&self, bb: usize, hh: usize, j: usize) -> usize {
        (bb * self.heads + self.head0 + hh) * self.rows + j
    }
}

/// The windows of one sequence length.
pub(in crate::model::fast) struct Windows {
    /// Number of windows `n`.
    pub n: usize,
    pub(super) slots: Vec<Option<usize>>,
    pub(super) counts: Vec<usize>,
    pub(super) positions: Vec<usize>,
    pub(super) rope: Option<Rope>,
}

/// One layer's compressor parameters (row-major, the candle tensors' layout):
/// `C: [G, d, H*d_h]`, `Z: [G, d, H*gw]`, `b: [W, H*gw]`, `gamma: [H, d_h]`.
pub(in crate::model::fast) struct KernelParams<'a> {
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
pub(in crate::model::fast) struct KernelGrads<'a> {
    pub proj_k: &'a mut [f32],
    pub proj_v: Option<&'a mut [f32]>,
    pub gate_k: Option<(&'a mut [f32], Option<&'a mut [f32]>)>,
    pub gate_v: Option<(&'a mut [f32], Option<&'a mut [f32]>)>,
    pub gamma: Option<&'a mut [f32]>,
}

/// What the compressor forward keeps for its backward pass.
#[derive(Default)]
pub(in crate::model::fast) struct CompressCache {
    /// `X_i`, `[W, R, d]`.
    pub(super) xw: Vec<f32>,
    /// Every group's matrices side by side, `[G, d, N]`: `C^K | C^V | Z^K | Z^V` (the gates'
    /// only when they have parameters), so that each offset is one GEMM.
    pub(super) wp: Vec<f32>,
    /// `Y_i = X_i [C^K | C^V | Z^K | Z^V]_{g(i)}`, `[W, R, N]` (`P^K_i`, `P^V_i`, gate logits).
    pub(super) y: Vec<f32>,
    /// Gate weights `[W, R, H*gw]` of the key gate and (own parameters only) the value gate.
    pub(super) ak: Vec<f32>,
    pub(super) av: Vec<f32>,
    /// Pooled entries before the RMSNorm, `[B, H, n, d_h]` per branch (keys, values; the keys'
    /// only with shared K/V), and the norm's `1 / rms` per entry row `[B, H, n]`.
    pub(super) ek: Vec<f32>,
    pub(super) ev: Vec<f32>,
    pub(super) rk: Vec<f32>,
    pub(super) rv: Vec<f32>,
}

/// Scratch buffers of the backward pass.
#[derive(Default)]
pub(in crate::model::fast) struct CompressScratch {
    pub(super) dek: Vec<f32>,
    pub(super) dev: Vec<f32>,
    /// `dY_i = dP^K_i | dP^V_i | dS^K_i | dS^V_i`, `[R, N]`.
    pub(super) dy: Vec<f32>,
    /// Gradient of `wp`, `[G, d, N]`.
    pub(super) dwp: Vec<f32>,
    pub(super) dak: Vec<f32>,
    pub(super) dav: Vec<f32>,
    pub(super) dx: Vec<f32>,
    /// Gradient of one entry row after the RMSNorm.
    pub(super) drow: Vec<f32>,
    /// One head's parameter gradients, when the layer's heads sit on different grids.
    pub(super) head_grads: Vec<Vec<f32>>,
}

impl CompressorShape {
    /// Columns `N` of the side-by-side matrices, and the first column of each part:
    /// `(N, P^V, S^K, S^V)` (`P^K` starts at 0; with shared K/V there is no `P^V`).
    pub(super) fn columns(&self) -> (usize, usize, usize, usize) {
        let (hd, c) = (self.h * self.dh, self.h * self.gw);
        let sk = if self.shared_kv { hd } else { 2 * hd };
        let sv = sk + if self.gate_k { c } else { 0 };
        (sv + if self.gate_v { c } else { 0 }, hd, sk, sv)
    }
}
