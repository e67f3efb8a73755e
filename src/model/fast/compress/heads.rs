//! One layer's compressor over its KV heads' grids. When every KV head of the layer sits on one
//! grid (every preset but `stagger: heads`) the layer is one batched call of
//! [`compress_forward`] and [`compress_backward`] over all heads, exactly as before grids could
//! differ. When they differ, head `h` compresses on its own grid: a one-head compressor (the
//! layer's shape with `H = 1`) over head `h`'s columns of the stacked parameters (every kernel
//! parameter's last axis is `H * width`: `C: [G, d, H*d_h]`, `Z: [G, d, H*gw]`, `b: [W, H*gw]`,
//! `gamma: [H, d_h]`), as the candle decoder's `TensorParams::head`. Its `n_h` entries go to
//! rows `0..n_h` of its block of the attention's keys and values, whose entry columns are the
//! longest head's `n` (a head at offset `o > 0` has `n_0(T + S - o)` entries, the same as or one
//! more than a head at offset 0); rows `n_h..n` are zeroed, the attention mask hides them from
//! every query ([`super::super::attention::Mask`], each head's visibility from its own grid) and
//! their gradient is never read. Its parameter gradients land in its columns.

use super::backward::compress_backward;
use super::forward::compress_forward;
use super::shape::{CompressCache, CompressScratch, CompressorShape, EntryRows, Windows};
use crate::kernel::spec::KernelSpec;

/// One layer's windows: the one grid of all its KV heads, or each head's own.
pub(in crate::model::fast) enum LayerWindows {
    /// Every KV head on one grid.
    Shared(Windows),
    /// KV head `h` on `heads[h]` (layers of `stagger: heads`), compressed by `shape` (the
    /// layer's compressor with one head).
    PerHead { shape: Box<CompressorShape>, heads: Vec<Windows> },
}

impl LayerWindows {
    /// The windows of a `t`-token sequence on each of `grids` (one spec: every head's; else one
    /// per KV head, in order). Windows, slots and entry positions come from each grid
    /// ([`CompressorShape::windows`]).
    pub fn new(sh: &CompressorShape, grids: &[KernelSpec], t: usize) -> Self {
        match grids {
            [one] => LayerWindows::Shared(sh.windows(one, t)),
            _ => {
                debug_assert_eq!(grids.len(), sh.h, "one grid per KV head");
                let shape = Box::new(CompressorShape { h: 1, ..sh.clone() });
                LayerWindows::PerHead { heads: grids.iter().map(|g| shape.windows(g, t)).collect(), shape }
            }
        }
    }

    /// Entries of each grid, in [`Self::new`]'s order (one, or one per KV head).
    pub fn counts(&self) -> Vec<usize> {
        match self {
            LayerWindows::Shared(w) => vec![w.n],
            LayerWindows::PerHead { heads, .. } => heads.iter().map(|w| w.n).collect(),
        }
    }

    /// The layer's entry columns `n`: the longest head's entry count.
    pub fn n(&self) -> usize {
        match self {
            LayerWindows::Shared(w) => w.n,
            LayerWindows::PerHead { heads, .. } => heads.iter().map(|w| w.n).max().unwrap_or(0),
        }
    }
}

/// What one layer's compressor keeps from its forward to its backward pass.
#[derive(Default)]
pub(in crate::model::fast) struct LayerCompress {
    /// The batched call's (one grid).
    shared: CompressCache,
    /// Per KV head on its own grid: its cache and its columns of the parameters.
    heads: Vec<HeadCompress>,
}

#[derive(Default)]
struct HeadCompress {
    cache: CompressCache,
    /// The head's columns of the layer's kernel parameters ([`CompressorShape::param_names`]
    /// order).
    params: Vec<Vec<f32>>,
}

impl CompressorShape {
    /// Per kernel parameter ([`Self::param_names`] order), the columns one KV head owns on the
    /// last axis: `d_h` for the projections and the entry norm, `gw` for the gates.
    fn head_widths(&self) -> Vec<usize> {
        self.param_names().iter().map(|n| if n.starts_with("gate") { self.gw } else { self.dh }).collect()
    }
}

/// Head `h`'s columns of a parameter whose last axis is `heads * width`, into `dst`.
fn head_columns(src: &[f32], heads: usize, width: usize, h: usize, dst: &mut Vec<f32>) {
    dst.clear();
    for row in src.chunks_exact(heads * width) {
        dst.extend_from_slice(&row[h * width..(h + 1) * width]);
    }
}

/// Forward of one layer's compressor: the entries of every sequence and KV head into rows
/// `0..n` of their blocks of `kc` and `vc` (`[B, H_kv, n + T, d_h]`, `n` = [`LayerWindows::n`]);
/// the layer's kernel parameters are `w[k0..]`.
#[allow(clippy::too_many_arguments)]
pub(in crate::model::fast) fn compress_layer_forward(
    sh: &CompressorShape,
    win: &LayerWindows,
    w: &[Vec<f32>],
    k0: usize,
    x: &[f32],
    b: usize,
    t: usize,
    cache: &mut LayerCompress,
    kc: &mut [f32],
    vc: &mut [f32],
) {
    match win {
        LayerWindows::Shared(one) => {
            let at = EntryRows { heads: sh.h, head0: 0, rows: one.n + t };
            compress_forward(sh, one, &sh.params(w, k0), x, b, t, at, &mut cache.shared, kc, vc);
        }
        LayerWindows::PerHead { shape, heads } => {
            let (n, dh, widths) = (win.n(), sh.dh, sh.head_widths());
            cache.heads.resize_with(heads.len(), HeadCompress::default);
            for (h, (hw, hc)) in heads.iter().zip(&mut cache.heads).enumerate() {
                hc.params.resize_with(widths.len(), Vec::new);
                for ((dst, src), &width) in hc.params.iter_mut().zip(&w[k0..]).zip(&widths) {
                    head_columns(src, sh.h, width, h, dst);
                }
                let at = EntryRows { heads: sh.h, head0: h, rows: n + t };
                compress_forward(shape, hw, &shape.params(&hc.params, 0), x, b, t, at, &mut hc.cache, kc, vc);
                // The padded entry rows (a head with fewer entries than the longest).
                for bb in 0..b {
                    let pad = at.row(bb, 0, hw.n) * dh..at.row(bb, 0, n) * dh;
                    kc[pad.clone()].fill(0.0);
                    vc[pad].fill(0.0);
                }
            }
        }
    }
}

/// Backward of [`compress_layer_forward`]: from the entry rows of `dkc`, `dvc` to the layer's
/// kernel parameter gradients `grads` ([`CompressorShape::param_names`] order, accumulated into;
/// zero on entry) and `dx: [B*T, d]` (accumulated). A padded entry row's gradient is never read.
#[allow(clippy::too_many_arguments)]
pub(in crate::model::fast) fn compress_layer_backward(
    sh: &CompressorShape,
    win: &LayerWindows,
    cache: &LayerCompress,
    w: &[Vec<f32>],
    k0: usize,
    dkc: &[f32],
    dvc: &[f32],
    b: usize,
    t: usize,
    s: &mut CompressScratch,
    grads: &mut [Vec<f32>],
    dx: &mut [f32],
) {
    match win {
        LayerWindows::Shared(one) => {
            let at = EntryRows { heads: sh.h, head0: 0, rows: one.n + t };
            let gamma = sh.params(w, k0).gamma;
            compress_backward(sh, one, &cache.shared, dkc, dvc, b, t, at, s, sh.grads(grads), gamma, dx);
        }
        LayerWindows::PerHead { shape, heads } => {
            let (n, widths) = (win.n(), sh.head_widths());
            let mut hg = std::mem::take(&mut s.head_grads);
            hg.resize_with(widths.len(), Vec::new);
            for (h, (hw, hc)) in heads.iter().zip(&cache.heads).enumerate() {
                for (g, p) in hg.iter_mut().zip(&hc.params) {
                    g.clear();
                    g.resize(p.len(), 0.0);
                }
                let at = EntryRows { heads: sh.h, head0: h, rows: n + t };
                let gamma = shape.params(&hc.params, 0).gamma;
                compress_backward(shape, hw, &hc.cache, dkc, dvc, b, t, at, s, shape.grads(&mut hg), gamma, dx);
                for ((full, g), &width) in grads.iter_mut().zip(&hg).zip(&widths) {
                    for (row, src) in full.chunks_exact_mut(sh.h * width).zip(g.chunks_exact(width)) {
                        for (a, &v) in row[h * width..(h + 1) * width].iter_mut().zip(src) {
                            *a += v;
                        }
                    }
                }
            }
            s.head_grads = hg;
        }
    }
}
