//! Causal softmax attention of the fast engine, forward and backward, in row blocks.

use super::ops::{gemm, View};
use super::{LayerCache, ROW_BLOCK};

/// Causal softmax attention of every (sequence, query head): weights into `cache.p` (zero
/// above the diagonal), output into `cache.o`. Scores are `q k^T` times `1/sqrt(d_h)`, softmax
/// with the row maximum subtracted (the candle path's order). Rows go in blocks of
/// [`ROW_BLOCK`], each against the keys it can see.
pub(super) fn attention_forward(cc: &mut LayerCache, b: usize, t: usize, hq: usize, hkv: usize, dh: usize) {
    let (qw, kw) = (hq * dh, hkv * dh);
    let groups = hq / hkv;
    let scale = (1.0 / (dh as f64).sqrt()) as f32;
    for bi in 0..b {
        for h in 0..hq {
            let kv = h / groups;
            let (qo, ko) = (bi * t * qw + h * dh, bi * t * kw + kv * dh);
            let p = &mut cc.p[(bi * hq + h) * t * t..(bi * hq + h + 1) * t * t];
            for r0 in (0..t).step_by(ROW_BLOCK) {
                let r1 = (r0 + ROW_BLOCK).min(t);
                let q = View { data: &cc.q[qo + r0 * qw..], rs: qw, cs: 1 };
                gemm(r1 - r0, r1, dh, &mut p[r0 * t..], t, false, q, View { data: &cc.k[ko..], rs: 1, cs: kw });
                for i in r0..r1 {
                    let row = &mut p[i * t..(i + 1) * t];
                    let mut m = f32::NEG_INFINITY;
                    for v in &mut row[..=i] {
                        *v *= scale;
                        m = m.max(*v);
                    }
                    let mut sum = 0f32;
                    for v in &mut row[..=i] {
                        *v = (*v - m).exp();
                        sum += *v;
                    }
                    for v in &mut row[..=i] {
                        *v /= sum;
                    }
                    row[i + 1..].fill(0.0);
                }
                let pv = View { data: &p[r0 * t..], rs: t, cs: 1 };
                gemm(
                    r1 - r0,
                    dh,
                    r1,
                    &mut cc.o[qo + r0 * qw..],
                    qw,
                    false,
                    pv,
                    View { data: &cc.v[ko..], rs: kw, cs: 1 },
                );
            }
        }
    }
}

/// Backward of [`attention_forward`]: `dq` (overwritten), `dk` and `dv` (overwritten; query
/// heads of a group and row blocks add up in order). `dS = P * (dP - rowsum(dO * O))`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention_backward(
    cc: &LayerCache,
    d_o: &[f32],
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
    ds: &mut [f32],
    b: usize,
    t: usize,
    hq: usize,
    hkv: usize,
    dh: usize,
) {
    let (qw, kw) = (hq * dh, hkv * dh);
    let groups = hq / hkv;
    let scale = (1.0 / (dh as f64).sqrt()) as f32;
    dk.fill(0.0);
    dv.fill(0.0);
    for bi in 0..b {
        for h in 0..hq {
            let kv = h / groups;
            let (qo, ko) = (bi * t * qw + h * dh, bi * t * kw + kv * dh);
            let p = &cc.p[(bi * hq + h) * t * t..(bi * hq + h + 1) * t * t];
            for r0 in (0..t).step_by(ROW_BLOCK) {
                let (r1, rb) = ((r0 + ROW_BLOCK).min(t), (r0 + ROW_BLOCK).min(t) - r0);
                let dov = View { data: &d_o[qo + r0 * qw..], rs: qw, cs: 1 };
                gemm(rb, r1, dh, &mut ds[r0 * t..], t, false, dov, View { data: &cc.v[ko..], rs: 1, cs: kw });
                for i in r0..r1 {
                    let (row, prow) = (&mut ds[i * t..(i + 1) * t], &p[i * t..(i + 1) * t]);
                    let (oi, doi) = (&cc.o[qo + i * qw..qo + i * qw + dh], &d_o[qo + i * qw..qo + i * qw + dh]);
                    let dot: f32 = oi.iter().zip(doi).map(|(a, b)| a * b).sum();
                    for (s, &pv) in row[..=i].iter_mut().zip(prow) {
                        *s = pv * (*s - dot) * scale;
                    }
                    row[i + 1..].fill(0.0);
                }
                let dsv = View { data: &ds[r0 * t..], rs: t, cs: 1 };
                let dst = View { data: &ds[r0 * t..], rs: 1, cs: t };
                let qv = View { data: &cc.q[qo + r0 * qw..], rs: qw, cs: 1 };
                gemm(rb, dh, r1, &mut dq[qo + r0 * qw..], qw, false, dsv, View { data: &cc.k[ko..], rs: kw, cs: 1 });
                gemm(r1, dh, rb, &mut dk[ko..], kw, true, dst, qv);
                gemm(r1, dh, rb, &mut dv[ko..], kw, true, View { data: &p[r0 * t..], rs: 1, cs: t }, dov);
            }
        }
    }
}
