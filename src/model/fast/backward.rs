//! The fast engine's backward pass: from the loss's gradient the forward pass left, through
//! every layer in reverse, to every parameter's gradient.

use super::attention::attention_backward;
use super::compress::compress_layer_backward;
use super::decoder::{FastDecoder, Inputs, Plan, Sizes};
use super::layout::{ATTN_NORM, K_NORM, LAYER, MLP_NORM, Q_NORM, WK, WO, WQ, WV, W_DOWN, W_GATE, W_UP};
use super::ops::{rms_norm_back, size};
use crate::numeric::{gemm, View};

impl FastDecoder {
    /// Backward pass from the loss's gradient [`FastDecoder::forward`] left: every parameter's
    /// gradient.
    pub(super) fn backward(&mut self, w: &[Vec<f32>], x: &Inputs, plan: &Plan) -> Vec<Vec<f32>> {
        let Sizes { d, dh, hq, hkv, ff, nl, vocab, bt } = self.sizes(x);
        let (b, t, tokens, idx) = (x.b, x.t, &x.tokens, &x.idx);
        let (qw, kw) = (hq * dh, hkv * dh);
        let (starts, comps) = (&self.starts, &self.comps);
        let lw = |l: usize, j: usize| -> &[f32] { &w[starts[l] + j] };
        let (final_norm, lm_head) = (&w[starts[nl]], &w[starts[nl] + 1]);
        let (rope, n) = (&plan.rope, idx.len());
        let ws = &mut self.work;
        let mut grads: Vec<Vec<f32>> = w.iter().map(|p| vec![0f32; p.len()]).collect();
        let (g_embed_i, g_final_i, g_head_i) = (0, starts[nl], starts[nl] + 1);
        let dlogits = &ws.logits;
        gemm(d, vocab, n, &mut grads[g_head_i], vocab, false, View::t(&ws.hs, d), View::rows(dlogits, vocab));
        size(&mut ws.dhs, n * d);
        gemm(n, d, vocab, &mut ws.dhs, d, false, View::rows(dlogits, vocab), View::t(lm_head, vocab));
        size(&mut ws.dhf, bt * d);
        ws.dhf.fill(0.0);
        for (row, &i) in ws.dhs.chunks_exact(d).zip(idx) {
            for (a, &g) in ws.dhf[i as usize * d..(i as usize + 1) * d].iter_mut().zip(row) {
                *a += g;
            }
        }
        size(&mut ws.dx, bt * d);
        rms_norm_back(&ws.x, final_norm, &ws.rf, &ws.dhf, &mut ws.dx, false, &mut grads[g_final_i]);
        for (v, n) in [
            (&mut ws.da, bt * ff),
            (&mut ws.dg, bt * ff),
            (&mut ws.dhid, bt * d),
            (&mut ws.d_o, bt * qw),
            (&mut ws.dq, bt * qw),
            (&mut ws.dk, bt * kw),
            (&mut ws.dv, bt * kw),
            (&mut ws.dqp, bt * qw),
            (&mut ws.dkp, bt * kw),
        ] {
            size(v, n);
        }
        let dx = &mut ws.dx;
        for l in (0..nl).rev() {
            let (win, mask) = (&plan.win[l], &plan.mask[l]);
            let (ne, cols) = (mask.n, mask.n + t);
            for (v, n) in
                [(&mut ws.ds, t * cols), (&mut ws.dkc, b * hkv * cols * dh), (&mut ws.dvc, b * hkv * cols * dh)]
            {
                size(v, n);
            }
            let cc = &ws.layers[l];
            let gi = |j: usize| starts[l] + j;
            // x_out = x_mid + a @ w_down
            gemm(ff, d, bt, &mut grads[gi(W_DOWN)], d, false, View::t(&cc.a, ff), View::rows(dx, d));
            gemm(bt, ff, d, &mut ws.da, ff, false, View::rows(dx, d), View::t(lw(l, W_DOWN), d));
            // a = silu(g) * u: da becomes du, dg the gate's gradient.
            for ((((dav, dgv), &g), &s), &u) in ws.da.iter_mut().zip(ws.dg.iter_mut()).zip(&cc.g).zip(&cc.sg).zip(&cc.u)
            {
                *dgv = *dav * u * s * (1.0 + g * (1.0 - s));
                *dav *= g * s;
            }
            let du = &ws.da;
            gemm(d, ff, bt, &mut grads[gi(W_GATE)], ff, false, View::t(&cc.h2, d), View::rows(&ws.dg, ff));
            gemm(d, ff, bt, &mut grads[gi(W_UP)], ff, false, View::t(&cc.h2, d), View::rows(du, ff));
            gemm(bt, d, ff, &mut ws.dhid, d, false, View::rows(&ws.dg, ff), View::t(lw(l, W_GATE), ff));
            gemm(bt, d, ff, &mut ws.dhid, d, true, View::rows(du, ff), View::t(lw(l, W_UP), ff));
            rms_norm_back(&cc.x_mid, lw(l, MLP_NORM), &cc.r2, &ws.dhid, dx, true, &mut grads[gi(MLP_NORM)]);
            // x_mid = x_in + o @ wo
            gemm(qw, d, bt, &mut grads[gi(WO)], d, false, View::t(&cc.o, qw), View::rows(dx, d));
            gemm(bt, qw, d, &mut ws.d_o, qw, false, View::rows(dx, d), View::t(lw(l, WO), d));
            attention_backward(cc, mask, &ws.d_o, &mut ws.dq, &mut ws.dkc, &mut ws.dvc, &mut ws.ds, b, t, hq, hkv, dh);
            for (dst, src) in [(&mut ws.dk, &ws.dkc), (&mut ws.dv, &ws.dvc)] {
                for (row, d) in dst.chunks_exact_mut(dh).enumerate() {
                    let (tok, kv) = (row / hkv, row % hkv);
                    let (bi, tt) = (tok / t, tok % t);
                    let o = ((bi * hkv + kv) * cols + ne + tt) * dh;
                    d.copy_from_slice(&src[o..o + dh]);
                }
            }
            if let Some(rope) = &rope {
                for (i, row) in ws.dq.chunks_exact_mut(dh).enumerate() {
                    rope.apply(row, (i / hq) % t, true);
                }
                for (i, row) in ws.dk.chunks_exact_mut(dh).enumerate() {
                    rope.apply(row, (i / hkv) % t, true);
                }
            }
            rms_norm_back(&cc.qp, lw(l, Q_NORM), &cc.rq, &ws.dq, &mut ws.dqp, false, &mut grads[gi(Q_NORM)]);
            rms_norm_back(&cc.kp, lw(l, K_NORM), &cc.rk, &ws.dk, &mut ws.dkp, false, &mut grads[gi(K_NORM)]);
            gemm(d, qw, bt, &mut grads[gi(WQ)], qw, false, View::t(&cc.h1, d), View::rows(&ws.dqp, qw));
            gemm(d, kw, bt, &mut grads[gi(WK)], kw, false, View::t(&cc.h1, d), View::rows(&ws.dkp, kw));
            gemm(d, kw, bt, &mut grads[gi(WV)], kw, false, View::t(&cc.h1, d), View::rows(&ws.dv, kw));
            gemm(bt, d, qw, &mut ws.dhid, d, false, View::rows(&ws.dqp, qw), View::t(lw(l, WQ), qw));
            gemm(bt, d, kw, &mut ws.dhid, d, true, View::rows(&ws.dkp, kw), View::t(lw(l, WK), kw));
            gemm(bt, d, kw, &mut ws.dhid, d, true, View::rows(&ws.dv, kw), View::t(lw(l, WV), kw));
            if let (Some(sh), Some(win)) = (comps.get(l), win) {
                let (kg, k0) = (&mut grads[gi(LAYER.len())..starts[l + 1]], gi(LAYER.len()));
                let (dkc, dvc) = (&ws.dkc, &ws.dvc);
                compress_layer_backward(sh, win, &cc.comp, w, k0, dkc, dvc, b, t, &mut ws.comp, kg, &mut ws.dhid);
            }
            rms_norm_back(&cc.x_in, lw(l, ATTN_NORM), &cc.r1, &ws.dhid, dx, true, &mut grads[gi(ATTN_NORM)]);
        }
        let g_embed = &mut grads[g_embed_i];
        for (row, &tok) in dx.chunks_exact(d).zip(tokens) {
            for (a, &g) in g_embed[tok as usize * d..(tok as usize + 1) * d].iter_mut().zip(row) {
                *a += g;
            }
        }
        grads
    }
}
