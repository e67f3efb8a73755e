//! The compressor's backward pass (the derivation is in the parent module's doc and in
//! `theory/training.md` §5b): `dE` from the attention's entry rows, the gate and softmax
//! backward, and the GEMMs into `dC`, `dZ`, `db` and `dX`.

use super::super::ops::rms_norm_back;
use super::super::ops::size;
use super::shape::{CompressCache, CompressScratch, CompressorShape, EntryRows, KernelGrads, Windows};
use crate::numeric::{gemm, View};

/// The entry RMSNorm of one branch as its backward pass reads it: the pre-norm entries and
/// `1 / rms` the forward kept, the weight, and the weight's gradient (accumulated into).
struct NormBack<'a> {
    pre: &'a [f32],
    inv: &'a [f32],
    gamma: &'a [f32],
    dgamma: &'a mut [f32],
}

/// The [`NormBack`] of a branch when the spec norms its entries.
fn norm_back<'a>(
    pre: &'a [f32],
    inv: &'a [f32],
    gamma: Option<&'a [f32]>,
    dgamma: Option<&'a mut [f32]>,
) -> Option<NormBack<'a>> {
    Some(NormBack { pre, inv, gamma: gamma?, dgamma: dgamma? })
}

/// `dE` of one branch, `[R, H*d_h]`, from the entry rows `at` of `dkc: [B, H_kv, n + T, d_h]` (plus
/// those of `shared`, the value rows of a shared K/V entry): inverse RoPE, then the RMSNorm's
/// backward when there is one.
#[allow(clippy::too_many_arguments)]
fn entry_grads(
    sh: &CompressorShape,
    win: &Windows,
    b: usize,
    at: EntryRows,
    dkc: &[f32],
    shared: Option<&[f32]>,
    mut norm: Option<NormBack>,
    drow: &mut Vec<f32>,
    de: &mut Vec<f32>,
) {
    let (n, h, dh) = (win.n, sh.h, sh.dh);
    let (r, hd) = (b * n, h * dh);
    size(de, r * hd);
    size(drow, dh);
    for row in 0..r {
        let (bb, j) = (row / n, row % n);
        for hh in 0..h {
            let e = at.row(bb, hh, j) * dh..(at.row(bb, hh, j) + 1) * dh;
            drow.copy_from_slice(&dkc[e.clone()]);
            if let Some(dv) = shared {
                for (a, &v) in drow.iter_mut().zip(&dv[e]) {
                    *a += v;
                }
            }
            if let Some(rope) = &win.rope {
                rope.apply(drow, win.positions[j], true);
            }
            let dst = &mut de[row * hd + hh * dh..row * hd + (hh + 1) * dh];
            match norm.as_mut() {
                Some(nb) => {
                    let k = (bb * h + hh) * n + j;
                    let (g, dg) = (&nb.gamma[hh * dh..(hh + 1) * dh], &mut nb.dgamma[hh * dh..(hh + 1) * dh]);
                    rms_norm_back(&nb.pre[k * dh..(k + 1) * dh], g, &nb.inv[k..k + 1], drow, dst, false, dg);
                }
                None => dst.copy_from_slice(drow),
            }
        }
    }
}

/// `dA_i (+)= dE (.) P_i` (`P_i` in columns `col..` of `y`; summed over a head's channels for a
/// scalar gate).
fn gate_grad(sh: &CompressorShape, r: usize, de: &[f32], y: &[f32], nc: usize, col: usize, da: &mut [f32]) {
    let (w, h, dh, gw) = (sh.w, sh.h, sh.dh, sh.gw);
    let (hd, c) = (h * dh, h * gw);
    for i in 0..w {
        for row in 0..r {
            for hh in 0..h {
                let e = &de[row * hd + hh * dh..row * hd + (hh + 1) * dh];
                let o = (i * r + row) * nc + col + hh * dh;
                let pi = &y[o..o + dh];
                let dai = &mut da[(i * r + row) * c + hh * gw..(i * r + row) * c + (hh + 1) * gw];
                if gw == 1 {
                    dai[0] += e.iter().zip(pi).map(|(a, b)| a * b).sum::<f32>();
                } else {
                    for ((dv, &ev), &pv) in dai.iter_mut().zip(e).zip(pi) {
                        *dv += ev * pv;
                    }
                }
            }
        }
    }
}

/// Softmax backward over the offsets, in place: `dA -> dS = A (.) (dA - sum_k A_k dA_k)`.
fn softmax_offsets_back(a: &[f32], da: &mut [f32], w: usize, r: usize, c: usize) {
    let mut dot = vec![0f32; c];
    for row in 0..r {
        dot.fill(0.0);
        for i in 0..w {
            let o = (i * r + row) * c;
            for ((dv, &av), &gv) in dot.iter_mut().zip(&a[o..o + c]).zip(&da[o..o + c]) {
                *dv += av * gv;
            }
        }
        for i in 0..w {
            let o = (i * r + row) * c;
            for ((gv, &av), &dv) in da[o..o + c].iter_mut().zip(&a[o..o + c]).zip(&dot) {
                *gv = av * (*gv - dv);
            }
        }
    }
}

/// `dst[row, col..col + H*d_h] = A_i (.) dE` for one offset's rows (`a_i: [R, H*gw]`).
fn scale_by_gate(sh: &CompressorShape, a_i: &[f32], de: &[f32], dst: &mut [f32], nc: usize, col: usize) {
    let (h, dh, gw) = (sh.h, sh.dh, sh.gw);
    let (hd, c) = (h * dh, h * gw);
    for ((drow, erow), arow) in dst.chunks_exact_mut(nc).zip(de.chunks_exact(hd)).zip(a_i.chunks_exact(c)) {
        for hh in 0..h {
            let (dd, ee) = (&mut drow[col + hh * dh..col + (hh + 1) * dh], &erow[hh * dh..(hh + 1) * dh]);
            let ah = &arow[hh * gw..(hh + 1) * gw];
            if gw == 1 {
                for (x, &e) in dd.iter_mut().zip(ee) {
                    *x = ah[0] * e;
                }
            } else {
                for ((x, &e), &av) in dd.iter_mut().zip(ee).zip(ah) {
                    *x = av * e;
                }
            }
        }
    }
}

/// Backward: from the entry rows `at` of `dkc`, `dvc` (`[B, H_kv, n + T, d_h]`) to the kernel
/// parameters' gradients and `dx: [B*T, d]` (accumulated).
#[allow(clippy::too_many_arguments)]
pub(in crate::model::fast) fn compress_backward(
    sh: &CompressorShape,
    win: &Windows,
    cache: &CompressCache,
    dkc: &[f32],
    dvc: &[f32],
    b: usize,
    t: usize,
    at: EntryRows,
    s: &mut CompressScratch,
    grads: KernelGrads,
    gamma: Option<&[f32]>,
    dx: &mut [f32],
) {
    let (w, n, d, hd, c) = (sh.w, win.n, sh.d, sh.h * sh.dh, sh.h * sh.gw);
    let (nc, cv, sk, sv) = sh.columns();
    let groups = sh.spec.num_groups();
    let r = b * n;
    if r == 0 {
        return;
    }
    let KernelGrads { proj_k, proj_v, gate_k, gate_v, gamma: mut dgamma } = grads;
    // The entry RMSNorm's backward per branch (both branches add to its weight's gradient);
    // with shared K/V one branch whose upstream is the key rows plus the value rows.
    let shared = sh.shared_kv.then_some(dvc);
    let nk = norm_back(&cache.ek, &cache.rk, gamma, dgamma.as_deref_mut());
    entry_grads(sh, win, b, at, dkc, shared, nk, &mut s.drow, &mut s.dek);
    if !sh.shared_kv {
        let nv = norm_back(&cache.ev, &cache.rv, gamma, dgamma);
        entry_grads(sh, win, b, at, dvc, None, nv, &mut s.drow, &mut s.dev);
    }
    // dA of the key gate (keys, and values when the value branch reads the key gate) and of
    // the value gate's own parameters, then dS in place.
    let av: &[f32] = if sh.gate_v { &cache.av } else { &cache.ak };
    if sh.gate_k {
        size(&mut s.dak, w * r * c);
        s.dak.fill(0.0);
        gate_grad(sh, r, &s.dek, &cache.y, nc, 0, &mut s.dak);
        if !sh.gate_v && !sh.shared_kv {
            gate_grad(sh, r, &s.dev, &cache.y, nc, cv, &mut s.dak);
        }
        softmax_offsets_back(&cache.ak, &mut s.dak, w, r, c);
    }
    if sh.gate_v {
        size(&mut s.dav, w * r * c);
        s.dav.fill(0.0);
        gate_grad(sh, r, &s.dev, &cache.y, nc, cv, &mut s.dav);
        softmax_offsets_back(&cache.av, &mut s.dav, w, r, c);
    }
    size(&mut s.dy, r * nc);
    size(&mut s.dx, r * d);
    size(&mut s.dwp, groups * d * nc);
    s.dwp.fill(0.0);
    // The gates' bias gradients: `Some(None)` for a learned gate without biases.
    let (mut gbk, mut gbv) = (None, None);
    let mut unpack = vec![(proj_k, 0, hd)];
    if let Some(pv) = proj_v {
        unpack.push((pv, cv, hd));
    }
    if let Some((z, bias)) = gate_k {
        unpack.push((z, sk, c));
        gbk = Some(bias);
    }
    if let Some((z, bias)) = gate_v {
        unpack.push((z, sv, c));
        gbv = Some(bias);
    }
    for i in 0..w {
        let g = sh.spec.group_of(i);
        let xi = &cache.xw[i * r * d..(i + 1) * r * d];
        scale_by_gate(sh, &cache.ak[i * r * c..(i + 1) * r * c], &s.dek, &mut s.dy, nc, 0);
        if !sh.shared_kv {
            scale_by_gate(sh, &av[i * r * c..(i + 1) * r * c], &s.dev, &mut s.dy, nc, cv);
        }
        for (ds, col, bias) in [(&s.dak, sk, gbk.as_mut()), (&s.dav, sv, gbv.as_mut())] {
            let Some(bias) = bias else { continue };
            let dsi = &ds[i * r * c..(i + 1) * r * c];
            for (drow, srow) in s.dy.chunks_exact_mut(nc).zip(dsi.chunks_exact(c)) {
                drow[col..col + c].copy_from_slice(srow);
                if let Some(bias) = bias.as_deref_mut() {
                    for (bv, &v) in bias[i * c..(i + 1) * c].iter_mut().zip(srow) {
                        *bv += v;
                    }
                }
            }
        }
        let dw = &mut s.dwp[g * d * nc..(g + 1) * d * nc];
        gemm(d, nc, r, dw, nc, true, View::t(xi, d), View::rows(&s.dy, nc));
        let wt = View::t(&cache.wp[g * d * nc..(g + 1) * d * nc], nc);
        gemm(r, d, nc, &mut s.dx, d, false, View::rows(&s.dy, nc), wt);
        for (row, dxr) in s.dx.chunks_exact(d).enumerate() {
            let (bb, j) = (row / n, row % n);
            if let Some(tok) = win.slots[j * w + i] {
                for (a, &v) in dx[(bb * t + tok) * d..(bb * t + tok + 1) * d].iter_mut().zip(dxr) {
                    *a += v;
                }
            }
        }
    }
    for (m, col, width) in unpack {
        for (dst, src) in m.chunks_exact_mut(width).zip(s.dwp.chunks_exact(nc)) {
            for (a, &v) in dst.iter_mut().zip(&src[col..col + width]) {
                *a += v;
            }
        }
    }
}
