//! The compressor forward: gate weights (softmax over the valid offsets, or uniform), the
//! pooled entries, then the entry RMSNorm and RoPE.

use super::super::ops::{rms_norm, size};
use super::shape::{CompressCache, CompressorShape, EntryRows, KernelParams, Windows};
use crate::numeric::{gemm, View};

/// Softmax over the offset axis of `s: [W, R, C]` in place, per window row and channel, over
/// the valid offsets only (`-inf` elsewhere in the candle path: weight 0); the maximum is
/// subtracted first, as in [`crate::kernel::tensor::softmax`].
pub(super) fn softmax_offsets(s: &mut [f32], win: &Windows, w: usize, r: usize, c: usize) {
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

/// How one gate's weights are formed.
#[derive(Clone, Copy)]
pub(super) enum Gate<'a> {
    /// `1 / valid` on every valid slot.
    Uniform,
    /// Softmax over the offsets of the logits plus the per-offset bias, when the spec has one
    /// (`None`: `gate_bias: false`, the logits alone).
    Learned(Option<&'a [f32]>),
}

impl<'a> Gate<'a> {
    /// The gate of a branch's parameters `(Z, b)` (`None`: no parameters, uniform).
    pub(super) fn of(params: Option<(&'a [f32], Option<&'a [f32]>)>) -> Self {
        params.map_or(Gate::Uniform, |(_, bias)| Gate::Learned(bias))
    }
}

/// Gate weights `[W, R, H*gw]` of one gate: softmax over the offsets of the logits in columns
/// `col..col + H*gw` of `y` (plus the bias, if any), or uniform.
#[allow(clippy::too_many_arguments)]
pub(super) fn gate_forward(
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
pub(super) fn pool(
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
pub(in crate::model::fast) fn compress_forward(
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
