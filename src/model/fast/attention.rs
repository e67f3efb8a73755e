//! The attention of the fast engine, forward and backward, in row blocks: one softmax over the
//! visible compressed entries and the raw tokens of the query's local window
//! ([`crate::kernel::tensor::compressed_attention`]); `full` is the case without entries and
//! a local window of the whole sequence (causal attention), as the decoder calls it.
//!
//! Keys and values of each (sequence, KV head) are one matrix `[n + T, d_h]`: the `n` entries,
//! then the `T` raw tokens. A block of query rows `r0..r1` needs two column ranges only: the
//! entries visible to its last row, `0..visible[r1 - 1]`, and the raw tokens from its first
//! row's window start to its last row, `n + raw_from[r0] .. n + r1`; every product runs on those
//! two ranges, and the weights elsewhere are 0. When the KV heads of the layer sit on different
//! grids, `n` is the longest head's entry count and each head's visible entries are its own
//! grid's (a head with fewer entries never sees its padded columns).

use super::buffers::LayerCache;
use crate::geometry::{Geometry, Visibility};
use crate::numeric::{gemm, View};

/// Which columns each query row may attend to.
pub(super) struct Mask {
    /// Entry columns `n` (columns `0..n`): the longest KV head's entries when the heads of the
    /// layer sit on different grids (a head with fewer has its last columns padded, and they are
    /// visible to no query).
    pub n: usize,
    /// Per grid (one when the layer's KV heads share a grid, else one per KV head): entries
    /// visible to the query at position `q`, columns `0..visible[g][q]`.
    visible: Vec<Vec<usize>>,
    /// Raw tokens visible to the query at `q`: columns `n + raw_from[q] ..= n + q`.
    pub raw_from: Vec<usize>,
}

impl Mask {
    /// The mask of a `t`-token sequence with `n` entry columns, one visibility per grid
    /// (`grids`: the one grid of all KV heads, or each head's own, with its entry count
    /// `n_g <= n`). Entry visibility is the geometry's ([`Geometry::num_visible`]: entries become
    /// visible in order, checked against [`Geometry::is_visible`] in debug builds), capped at the
    /// grid's own `n_g`, so a head's padded columns `n_g..n` are visible to no query; the local
    /// window is [`crate::geometry::local_window_start`]`(q, local) ..= q`.
    pub fn new(grids: &[(Geometry, Visibility, usize)], n: usize, t: usize, local: usize) -> Self {
        let visible = grids
            .iter()
            .map(|&(geometry, visibility, ng)| {
                debug_assert!(ng <= n, "a head has more entries than the layer's columns");
                let v: Vec<usize> = (0..t).map(|q| geometry.num_visible(q, visibility).min(ng)).collect();
                debug_assert!((0..t).all(|q| (0..ng).all(|j| geometry.is_visible(j, q, visibility) == (j < v[q]))));
                v
            })
            .collect();
        let raw_from = (0..t).map(|q| crate::geometry::local_window_start(q, local)).collect();
        Mask { n, visible, raw_from }
    }

    /// Entries visible to each query position for KV head `kv`.
    pub fn visible(&self, kv: usize) -> &[usize] {
        &self.visible[if self.visible.len() == 1 { 0 } else { kv }]
    }

    /// The two column ranges rows `r0..r1` read for KV head `kv`: raw tokens
    /// `n + raw_from[r0] .. n + r1`, then entries `0..visible[r1 - 1]` (raw first, so that a
    /// product into a fresh output starts on a non-empty range; the entry range is empty for
    /// `full` and for early rows).
    pub fn ranges(&self, kv: usize, r0: usize, r1: usize) -> [(usize, usize); 2] {
        [(self.n + self.raw_from[r0], self.n + r1), (0, self.visible(kv)[r1 - 1])]
    }
}

/// Attention of every (sequence, query head): weights into `cache.p` (`[B, Hq, T, n + T]`, zero
/// where masked), output into `cache.o`. Scores are `q k^T` times `1/sqrt(d_h)`, softmax with
/// the row maximum subtracted (the candle path's order). Rows go in blocks of [`ROW_BLOCK`].
pub(super) fn attention_forward(
    cc: &mut LayerCache,
    mask: &Mask,
    b: usize,
    t: usize,
    hq: usize,
    hkv: usize,
    dh: usize,
) {
    let qw = hq * dh;
    let groups = hq / hkv;
    let cols = mask.n + t;
    let scale = (1.0 / (dh as f64).sqrt()) as f32;
    for bi in 0..b {
        for h in 0..hq {
            let (head, kv) = (h / groups, bi * hkv + h / groups);
            let (qo, visible) = (bi * t * qw + h * dh, mask.visible(head));
            let (kc, vc) = (&cc.kc[kv * cols * dh..], &cc.vc[kv * cols * dh..]);
            let p = &mut cc.p[(bi * hq + h) * t * cols..(bi * hq + h + 1) * t * cols];
            for r0 in (0..t).step_by(ROW_BLOCK) {
                let r1 = (r0 + ROW_BLOCK).min(t);
                let q = View { data: &cc.q[qo + r0 * qw..], rs: qw, cs: 1 };
                for (c0, c1) in mask.ranges(head, r0, r1) {
                    let k = View { data: &kc[c0 * dh..], rs: 1, cs: dh };
                    gemm(r1 - r0, c1 - c0, dh, &mut p[r0 * cols + c0..], cols, false, q, k);
                }
                for i in r0..r1 {
                    let (ne, lo, hi) = (visible[i], mask.n + mask.raw_from[i], mask.n + i + 1);
                    let (ents, raw) = p[i * cols..(i + 1) * cols].split_at_mut(lo);
                    ents[ne..].fill(0.0);
                    raw[hi - lo..].fill(0.0);
                    let (ents, raw) = (&mut ents[..ne], &mut raw[..hi - lo]);
                    let mut m = f32::NEG_INFINITY;
                    for v in ents.iter_mut().chain(raw.iter_mut()) {
                        *v *= scale;
                        m = m.max(*v);
                    }
                    let mut sum = 0f32;
                    for v in ents.iter_mut().chain(raw.iter_mut()) {
                        *v = (*v - m).exp();
                        sum += *v;
                    }
                    for v in ents.iter_mut().chain(raw.iter_mut()) {
                        *v /= sum;
                    }
                }
                for (k, (c0, c1)) in mask.ranges(head, r0, r1).into_iter().enumerate() {
                    let pv = View { data: &p[r0 * cols + c0..], rs: cols, cs: 1 };
                    let v = View { data: &vc[c0 * dh..], rs: dh, cs: 1 };
                    gemm(r1 - r0, dh, c1 - c0, &mut cc.o[qo + r0 * qw..], qw, k > 0, pv, v);
                }
            }
        }
    }
}

/// Backward of [`attention_forward`]: `dq` (overwritten), `dkc` and `dvc` (`[B, Hkv, n + T,
/// d_h]`, overwritten; query heads of a group and row blocks add up in order).
/// `dS = P * (dP - rowsum(dO * O))`; masked weights are exactly 0, so their `dS` is 0.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention_backward(
    cc: &LayerCache,
    mask: &Mask,
    d_o: &[f32],
    dq: &mut [f32],
    dkc: &mut [f32],
    dvc: &mut [f32],
    ds: &mut [f32],
    b: usize,
    t: usize,
    hq: usize,
    hkv: usize,
    dh: usize,
) {
    let qw = hq * dh;
    let groups = hq / hkv;
    let cols = mask.n + t;
    let scale = (1.0 / (dh as f64).sqrt()) as f32;
    dkc.fill(0.0);
    dvc.fill(0.0);
    for bi in 0..b {
        for h in 0..hq {
            let (head, kv) = (h / groups, bi * hkv + h / groups);
            let qo = bi * t * qw + h * dh;
            let (kc, vc) = (&cc.kc[kv * cols * dh..], &cc.vc[kv * cols * dh..]);
            let p = &cc.p[(bi * hq + h) * t * cols..(bi * hq + h + 1) * t * cols];
            for r0 in (0..t).step_by(ROW_BLOCK) {
                let (r1, rb) = ((r0 + ROW_BLOCK).min(t), (r0 + ROW_BLOCK).min(t) - r0);
                let ranges = mask.ranges(head, r0, r1);
                let dov = View { data: &d_o[qo + r0 * qw..], rs: qw, cs: 1 };
                for &(c0, c1) in &ranges {
                    let v = View { data: &vc[c0 * dh..], rs: 1, cs: dh };
                    gemm(rb, c1 - c0, dh, &mut ds[r0 * cols + c0..], cols, false, dov, v);
                }
                for i in r0..r1 {
                    let (oi, doi) = (&cc.o[qo + i * qw..qo + i * qw + dh], &d_o[qo + i * qw..qo + i * qw + dh]);
                    let dot: f32 = oi.iter().zip(doi).map(|(a, b)| a * b).sum();
                    for &(c0, c1) in &ranges {
                        let (row, prow) = (&mut ds[i * cols + c0..i * cols + c1], &p[i * cols + c0..i * cols + c1]);
                        for (s, &pv) in row.iter_mut().zip(prow) {
                            *s = pv * (*s - dot) * scale;
                        }
                    }
                }
                let qv = View { data: &cc.q[qo + r0 * qw..], rs: qw, cs: 1 };
                for (k, &(c0, c1)) in ranges.iter().enumerate() {
                    let dsv = View { data: &ds[r0 * cols + c0..], rs: cols, cs: 1 };
                    let dst = View { data: &ds[r0 * cols + c0..], rs: 1, cs: cols };
                    let pt = View { data: &p[r0 * cols + c0..], rs: 1, cs: cols };
                    let kv_rows = View { data: &kc[c0 * dh..], rs: dh, cs: 1 };
                    gemm(rb, dh, c1 - c0, &mut dq[qo + r0 * qw..], qw, k > 0, dsv, kv_rows);
                    gemm(c1 - c0, dh, rb, &mut dkc[(kv * cols + c0) * dh..], dh, true, dst, qv);
                    gemm(c1 - c0, dh, rb, &mut dvc[(kv * cols + c0) * dh..], dh, true, pt, dov);
                }
            }
        }
    }
}

/// Query rows per block of the causal attention: a block of rows `r0..r1` needs keys `0..r1`
/// only, which skips about a third of the score and weighted-sum work at `T = 98`.
pub(super) const ROW_BLOCK: usize = 32;
