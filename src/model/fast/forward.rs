//! The fast engine's forward pass, through the loss: embedding, every layer (RMSNorm, the
//! projections, RoPE, the compressor, attention, the SwiGLU MLP) with what the backward pass
//! reads kept in [`LayerCache`], the final norm, the logits and the loss's gradient with respect
//! to them.

use super::attention::attention_forward;
use super::buffers::LayerCache;
use super::compress::compress_layer_forward;
use super::decoder::{FastDecoder, Inputs, Plan, Sizes};
use super::layout::{ATTN_NORM, K_NORM, LAYER, MLP_NORM, Q_NORM, WK, WO, WQ, WV, W_DOWN, W_GATE, W_UP};
use super::ops::{rms_norm, sigmoid, size};
use crate::model::decoder::NORM_EPS;
use crate::model::record::BatchScore;
use crate::numeric::{gemm, View};

impl FastDecoder {
    /// Forward pass through the loss: every layer's cache, the final hidden states and, in
    /// `work.logits`, the loss's gradient with respect to the logits (what
    /// [`FastDecoder::backward`] starts from).
    pub(super) fn forward(&mut self, w: &[Vec<f32>], x: &Inputs, plan: &Plan) -> BatchScore {
        let Sizes { d, dh, hq, hkv, ff, nl, vocab, bt } = self.sizes(x);
        let (b, t, tokens, idx, targets) = (x.b, x.t, &x.tokens, &x.idx, &x.targets);
        let (qw, kw) = (hq * dh, hkv * dh);
        let eps = NORM_EPS as f32;
        let (starts, comps) = (&self.starts, &self.comps);
        let lw = |l: usize, j: usize| -> &[f32] { &w[starts[l] + j] };
        let kernel_slot = |l: usize| starts[l] + LAYER.len();
        let (embed, final_norm, lm_head) = (&w[0], &w[starts[nl]], &w[starts[nl] + 1]);
        let rope = &plan.rope;
        let ws = &mut self.work;
        ws.layers.resize_with(nl, LayerCache::default);
        size(&mut ws.x, bt * d);
        for (row, &tok) in ws.x.chunks_exact_mut(d).zip(tokens) {
            row.copy_from_slice(&embed[tok as usize * d..(tok as usize + 1) * d]);
        }
        for l in 0..nl {
            let (win, mask) = (&plan.win[l], &plan.mask[l]);
            let (ne, cols) = (mask.n, mask.n + t);
            let cc = &mut ws.layers[l];
            for (v, n) in [
                (&mut cc.x_in, bt * d),
                (&mut cc.r1, bt),
                (&mut cc.h1, bt * d),
                (&mut cc.qp, bt * qw),
                (&mut cc.rq, bt * hq),
                (&mut cc.q, bt * qw),
                (&mut cc.kp, bt * kw),
                (&mut cc.rk, bt * hkv),
                (&mut cc.k, bt * kw),
                (&mut cc.v, bt * kw),
                (&mut cc.kc, b * hkv * cols * dh),
                (&mut cc.vc, b * hkv * cols * dh),
                (&mut cc.p, b * hq * t * cols),
                (&mut cc.o, bt * qw),
                (&mut cc.x_mid, bt * d),
                (&mut cc.r2, bt),
                (&mut cc.h2, bt * d),
                (&mut cc.g, bt * ff),
                (&mut cc.sg, bt * ff),
                (&mut cc.u, bt * ff),
                (&mut cc.a, bt * ff),
            ] {
                size(v, n);
            }
            cc.x_in.copy_from_slice(&ws.x);
            cc.x_mid.copy_from_slice(&ws.x);
            rms_norm(&cc.x_in, lw(l, ATTN_NORM), eps, &mut cc.h1, &mut cc.r1);
            gemm(bt, qw, d, &mut cc.qp, qw, false, View::rows(&cc.h1, d), View::rows(lw(l, WQ), qw));
            gemm(bt, kw, d, &mut cc.kp, kw, false, View::rows(&cc.h1, d), View::rows(lw(l, WK), kw));
            gemm(bt, kw, d, &mut cc.v, kw, false, View::rows(&cc.h1, d), View::rows(lw(l, WV), kw));
            rms_norm(&cc.qp, lw(l, Q_NORM), eps, &mut cc.q, &mut cc.rq);
            rms_norm(&cc.kp, lw(l, K_NORM), eps, &mut cc.k, &mut cc.rk);
            if let Some(rope) = &rope {
                for (i, row) in cc.q.chunks_exact_mut(dh).enumerate() {
                    rope.apply(row, (i / hq) % t, false);
                }
                for (i, row) in cc.k.chunks_exact_mut(dh).enumerate() {
                    rope.apply(row, (i / hkv) % t, false);
                }
            }
            for (dst, src) in [(&mut cc.kc, &cc.k), (&mut cc.vc, &cc.v)] {
                for (row, s) in src.chunks_exact(dh).enumerate() {
                    let (tok, kv) = (row / hkv, row % hkv);
                    let (bi, tt) = (tok / t, tok % t);
                    let o = ((bi * hkv + kv) * cols + ne + tt) * dh;
                    dst[o..o + dh].copy_from_slice(s);
                }
            }
            if let (Some(sh), Some(win)) = (comps.get(l), win) {
                let k0 = kernel_slot(l);
                compress_layer_forward(sh, win, w, k0, &cc.h1, b, t, &mut cc.comp, &mut cc.kc, &mut cc.vc);
            }
            attention_forward(cc, mask, b, t, hq, hkv, dh);
            gemm(bt, d, qw, &mut cc.x_mid, d, true, View::rows(&cc.o, qw), View::rows(lw(l, WO), d));
            rms_norm(&cc.x_mid, lw(l, MLP_NORM), eps, &mut cc.h2, &mut cc.r2);
            gemm(bt, ff, d, &mut cc.g, ff, false, View::rows(&cc.h2, d), View::rows(lw(l, W_GATE), ff));
            gemm(bt, ff, d, &mut cc.u, ff, false, View::rows(&cc.h2, d), View::rows(lw(l, W_UP), ff));
            for (((a, sg), &g), &u) in cc.a.iter_mut().zip(cc.sg.iter_mut()).zip(&cc.g).zip(&cc.u) {
                *sg = sigmoid(g);
                *a = g * *sg * u;
            }
            ws.x.copy_from_slice(&cc.x_mid);
            gemm(bt, d, ff, &mut ws.x, d, true, View::rows(&cc.a, ff), View::rows(lw(l, W_DOWN), d));
        }
        size(&mut ws.hf, bt * d);
        size(&mut ws.rf, bt);
        rms_norm(&ws.x, final_norm, eps, &mut ws.hf, &mut ws.rf);
        let n = idx.len();
        size(&mut ws.hs, n * d);
        for (row, &i) in ws.hs.chunks_exact_mut(d).zip(idx) {
            row.copy_from_slice(&ws.hf[i as usize * d..(i as usize + 1) * d]);
        }
        size(&mut ws.logits, n * vocab);
        gemm(n, vocab, d, &mut ws.logits, vocab, false, View::rows(&ws.hs, d), View::rows(lm_head, vocab));

        // ---- loss, accuracy, and d loss / d logits (in place) ----
        let mut loss = 0f64;
        let mut hits = Vec::with_capacity(n);
        for (row, &tgt) in ws.logits.chunks_exact_mut(vocab).zip(targets) {
            let (mut best, mut arg) = (f32::NEG_INFINITY, 0usize);
            for (j, &v) in row.iter().enumerate() {
                if v > best {
                    best = v;
                    arg = j;
                }
            }
            hits.push(arg == tgt as usize);
            let sum: f32 = row.iter().map(|&v| (v - best).exp()).sum();
            loss += (best + sum.ln() - row[tgt as usize]) as f64;
            for v in row.iter_mut() {
                *v = (*v - best).exp() / sum / n as f32;
            }
            row[tgt as usize] -= 1.0 / n as f32;
        }
        BatchScore::from_hits(loss / n.max(1) as f64, &hits, x.n_queries)
    }
}
