//! The fast training engine: a hand-derived f32 forward and backward pass of the whole decoder
//! of [`crate::model::decoder`] on the CPU, in the spirit of a compact C training loop. One
//! training step computes the loss, the accuracy counts and the gradient of every parameter
//! with plain loops and a strided GEMM ([`ops::gemm`]) over row-major buffers: no graph, no
//! broadcast ops, no zero-filled gradient tensors per op.
//!
//! The candle autodiff path stays the reference: `tests/train_fast.rs` checks the loss and every
//! parameter's gradient against it. Supported presets: [`SUPPORTED_PRESETS`] (`full`, causal
//! attention over raw tokens); the compressed presets are refused (`train.engine`).
//!
//! Determinism: every reduction runs in one fixed order on one thread (GEMM with
//! `Parallelism::None`, rows and heads in order), so the same parameters and batch give the
//! same bits whatever `RAYON_NUM_THREADS` is.
//!
//! Layout (row-major, `BT = B * T` rows): hidden states `[BT, d]`; queries `[BT, H_q * d_h]`
//! (head `h` in columns `h*d_h..`), keys and values `[BT, H_kv * d_h]`; attention weights
//! `[B, H_q, T, T]`. Query head `h` reads KV head `h / (H_q / H_kv)` (candle's `repeat_kv`).

mod ops;

use super::config::ModelConfig;
use super::decoder::NORM_EPS;
use super::train::Batch;
use crate::kernel::spec::KernelSpec;
use crate::{Error, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use ops::{gemm, rms_norm, rms_norm_back, Rope, View};

/// Presets the fast engine implements.
pub const SUPPORTED_PRESETS: &[&str] = &["full"];

/// Refuses a model the fast engine does not implement, naming the field and what is allowed.
pub fn check_supported(model: &ModelConfig) -> Result<()> {
    if SUPPORTED_PRESETS.contains(&model.preset.as_str()) {
        Ok(())
    } else {
        Err(Error::invalid(
            "train.engine",
            format!(
                "fast supports the presets {} only, got preset {} (use engine candle for it)",
                SUPPORTED_PRESETS.join(", "),
                model.preset
            ),
        ))
    }
}

/// Per-layer parameter names (after `layer{l}.`), in the order of [`FastDecoder`]'s slots.
const LAYER: [&str; 11] = [
    "attn_norm",
    "attn.wq",
    "attn.wk",
    "attn.wv",
    "attn.wo",
    "attn.q_norm",
    "attn.k_norm",
    "mlp_norm",
    "mlp.w_gate",
    "mlp.w_up",
    "mlp.w_down",
];
const ATTN_NORM: usize = 0;
const WQ: usize = 1;
const WK: usize = 2;
const WV: usize = 3;
const WO: usize = 4;
const Q_NORM: usize = 5;
const K_NORM: usize = 6;
const MLP_NORM: usize = 7;
const W_GATE: usize = 8;
const W_UP: usize = 9;
const W_DOWN: usize = 10;

/// Loss, accuracy counts and gradients of one batch.
#[derive(Debug)]
pub struct StepOutput {
    /// Mean cross-entropy over answer tokens.
    pub loss: f64,
    /// Queries whose every answer token is the argmax.
    pub exact: usize,
    /// Answer tokens that are the argmax.
    pub token_hits: usize,
    /// Queries.
    pub queries: usize,
    /// Answer tokens.
    pub tokens: usize,
    /// Gradient of every parameter, in the order of [`FastDecoder::names`].
    pub grads: Vec<Vec<f32>>,
}

/// The fast engine bound to a model's parameters (candle `Var`s, read at every step, so the
/// optimiser, checkpoints and resume are the same as the candle path's).
#[derive(Debug)]
pub struct FastDecoder {
    cfg: ModelConfig,
    vocab: usize,
    vars: Vec<(String, Var)>,
    rope_freqs: Option<Vec<f64>>,
}

/// What the forward pass keeps for the backward pass, per layer.
struct LayerCache {
    x_in: Vec<f32>,
    r1: Vec<f32>,
    h1: Vec<f32>,
    qp: Vec<f32>,
    rq: Vec<f32>,
    q: Vec<f32>,
    kp: Vec<f32>,
    rk: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    p: Vec<f32>,
    o: Vec<f32>,
    x_mid: Vec<f32>,
    r2: Vec<f32>,
    h2: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    a: Vec<f32>,
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl FastDecoder {
    /// The engine for `config` over the variables of its parameter store (every decoder
    /// parameter must be there, and nothing else).
    pub fn new(config: &ModelConfig, vocab: usize, store_vars: Vec<(String, Var)>) -> Result<Self> {
        config.validate()?;
        check_supported(config)?;
        let spec = KernelSpec::preset(&config.preset)?;
        let mut names = vec!["embed".to_string()];
        for l in 0..config.n_layer {
            names.extend(LAYER.iter().map(|n| format!("layer{l}.{n}")));
        }
        names.push("final_norm".into());
        names.push("lm_head".into());
        let mut vars = Vec::with_capacity(names.len());
        for n in &names {
            let v = store_vars
                .iter()
                .find(|(m, _)| m == n)
                .ok_or_else(|| Error::invalid("train.engine", format!("fast: parameter {n} is not in the model")))?;
            vars.push(v.clone());
        }
        if let Some((extra, _)) = store_vars.iter().find(|(m, _)| !names.contains(m)) {
            return Err(Error::invalid("train.engine", format!("fast: parameter {extra} is not implemented")));
        }
        let rope_freqs = match &spec.rope {
            Some(rs) if !spec.nope_model => {
                let r = rs.rotated_channels(config.d_head);
                (r > 0).then(|| rs.inv_frequencies(r))
            }
            _ => None,
        };
        Ok(FastDecoder { cfg: config.clone(), vocab, vars, rope_freqs })
    }

    /// Parameter names, in the order of [`StepOutput::grads`].
    pub fn names(&self) -> Vec<String> {
        self.vars.iter().map(|(n, _)| n.clone()).collect()
    }

    /// The gradients as a candle [`GradStore`] keyed by the model's variables (what
    /// [`crate::model::optim::AdamW`] takes).
    pub fn grad_store(&self, grads: Vec<Vec<f32>>) -> Result<GradStore> {
        let mut store = GradStore::default();
        for ((_, var), g) in self.vars.iter().zip(grads) {
            let t = Tensor::from_vec(g, var.shape(), var.device())?;
            store.insert(var.as_tensor(), t);
        }
        Ok(store)
    }

    /// Loss, accuracy counts and gradients of `batch` at the variables' current values.
    pub fn step(&self, batch: &Batch) -> Result<StepOutput> {
        let params: Vec<Vec<f32>> = self
            .vars
            .iter()
            .map(|(_, v)| v.as_tensor().flatten_all()?.to_vec1::<f32>())
            .collect::<candle_core::Result<_>>()?;
        let (b, t) = batch.tokens.dims2()?;
        let tokens = batch.tokens.flatten_all()?.to_vec1::<u32>()?;
        let idx = batch.idx.to_vec1::<u32>()?;
        let targets = batch.targets.to_vec1::<u32>()?;
        if let Some(&bad) = tokens.iter().chain(&targets).find(|&&v| v as usize >= self.vocab) {
            return Err(Error::invalid(
                "tokens",
                format!("token id {bad} is outside the vocabulary 0..{}", self.vocab),
            ));
        }
        if let Some(&bad) = idx.iter().find(|&&i| i as usize >= b * t) {
            return Err(Error::invalid("batch.idx", format!("position {bad} is outside 0..{}", b * t)));
        }
        Ok(self.run(&params, b, t, &tokens, &idx, &targets, batch.n_queries))
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        w: &[Vec<f32>],
        b: usize,
        t: usize,
        tokens: &[u32],
        idx: &[u32],
        targets: &[u32],
        n_queries: usize,
    ) -> StepOutput {
        let c = &self.cfg;
        let (d, dh, hq, hkv, ff, nl, vocab) =
            (c.d_model, c.d_head, c.n_head, c.n_kv_head, c.d_ff, c.n_layer, self.vocab);
        let bt = b * t;
        let (qw, kw) = (hq * dh, hkv * dh);
        let eps = NORM_EPS as f32;
        let rope = self.rope_freqs.as_ref().map(|f| Rope::new(f, t));
        let lw = |l: usize, j: usize| -> &[f32] { &w[1 + l * LAYER.len() + j] };
        let (embed, final_norm, lm_head) = (&w[0], &w[1 + nl * LAYER.len()], &w[2 + nl * LAYER.len()]);

        // ---- forward ----
        let mut x = vec![0f32; bt * d];
        for (row, &tok) in x.chunks_exact_mut(d).zip(tokens) {
            row.copy_from_slice(&embed[tok as usize * d..(tok as usize + 1) * d]);
        }
        let mut caches = Vec::with_capacity(nl);
        for l in 0..nl {
            let mut cache = LayerCache {
                r1: vec![0.0; bt],
                h1: vec![0.0; bt * d],
                qp: vec![0.0; bt * qw],
                rq: vec![0.0; bt * hq],
                q: vec![0.0; bt * qw],
                kp: vec![0.0; bt * kw],
                rk: vec![0.0; bt * hkv],
                k: vec![0.0; bt * kw],
                v: vec![0.0; bt * kw],
                p: vec![0.0; b * hq * t * t],
                o: vec![0.0; bt * qw],
                x_mid: x.clone(),
                r2: vec![0.0; bt],
                h2: vec![0.0; bt * d],
                g: vec![0.0; bt * ff],
                u: vec![0.0; bt * ff],
                a: vec![0.0; bt * ff],
                x_in: x,
            };
            let cc = &mut cache;
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
            attention_forward(cc, b, t, hq, hkv, dh);
            gemm(bt, d, qw, &mut cc.x_mid, d, true, View::rows(&cc.o, qw), View::rows(lw(l, WO), d));
            rms_norm(&cc.x_mid, lw(l, MLP_NORM), eps, &mut cc.h2, &mut cc.r2);
            gemm(bt, ff, d, &mut cc.g, ff, false, View::rows(&cc.h2, d), View::rows(lw(l, W_GATE), ff));
            gemm(bt, ff, d, &mut cc.u, ff, false, View::rows(&cc.h2, d), View::rows(lw(l, W_UP), ff));
            for ((a, &g), &u) in cc.a.iter_mut().zip(&cc.g).zip(&cc.u) {
                *a = g * sigmoid(g) * u;
            }
            x = cc.x_mid.clone();
            gemm(bt, d, ff, &mut x, d, true, View::rows(&cc.a, ff), View::rows(lw(l, W_DOWN), d));
            caches.push(cache);
        }
        let mut hf = vec![0f32; bt * d];
        let mut rf = vec![0f32; bt];
        rms_norm(&x, final_norm, eps, &mut hf, &mut rf);
        let n = idx.len();
        let mut hs = vec![0f32; n * d];
        for (row, &i) in hs.chunks_exact_mut(d).zip(idx) {
            row.copy_from_slice(&hf[i as usize * d..(i as usize + 1) * d]);
        }
        let mut logits = vec![0f32; n * vocab];
        gemm(n, vocab, d, &mut logits, vocab, false, View::rows(&hs, d), View::rows(lm_head, vocab));

        // ---- loss, accuracy, and d loss / d logits (in place) ----
        let mut loss = 0f64;
        let mut hits = Vec::with_capacity(n);
        for (row, &tgt) in logits.chunks_exact_mut(vocab).zip(targets) {
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
        let loss = loss / n.max(1) as f64;
        let per = (hits.len() / n_queries.max(1)).max(1);
        let exact = hits.chunks(per).filter(|c| c.iter().all(|&h| h)).count();
        let token_hits = hits.iter().filter(|&&h| h).count();

        // ---- backward ----
        let mut grads: Vec<Vec<f32>> = w.iter().map(|p| vec![0f32; p.len()]).collect();
        let (g_embed_i, g_final_i, g_head_i) = (0, 1 + nl * LAYER.len(), 2 + nl * LAYER.len());
        let dlogits = logits;
        gemm(d, vocab, n, &mut grads[g_head_i], vocab, false, View::t(&hs, d), View::rows(&dlogits, vocab));
        let mut dhs = vec![0f32; n * d];
        gemm(n, d, vocab, &mut dhs, d, false, View::rows(&dlogits, vocab), View::t(lm_head, vocab));
        let mut dhf = vec![0f32; bt * d];
        for (row, &i) in dhs.chunks_exact(d).zip(idx) {
            for (a, &g) in dhf[i as usize * d..(i as usize + 1) * d].iter_mut().zip(row) {
                *a += g;
            }
        }
        let mut dx = vec![0f32; bt * d];
        rms_norm_back(&x, final_norm, &rf, &dhf, &mut dx, false, &mut grads[g_final_i]);
        drop(dhf);
        let mut da = vec![0f32; bt * ff];
        let mut dg = vec![0f32; bt * ff];
        let mut dhid = vec![0f32; bt * d];
        let mut d_o = vec![0f32; bt * qw];
        let mut dq = vec![0f32; bt * qw];
        let mut dk = vec![0f32; bt * kw];
        let mut dv = vec![0f32; bt * kw];
        let mut dqp = vec![0f32; bt * qw];
        let mut dkp = vec![0f32; bt * kw];
        for l in (0..nl).rev() {
            let cc = &caches[l];
            let gi = |j: usize| 1 + l * LAYER.len() + j;
            // x_out = x_mid + a @ w_down
            gemm(ff, d, bt, &mut grads[gi(W_DOWN)], d, false, View::t(&cc.a, ff), View::rows(&dx, d));
            gemm(bt, ff, d, &mut da, ff, false, View::rows(&dx, d), View::t(lw(l, W_DOWN), d));
            // a = silu(g) * u: da becomes du, dg the gate's gradient.
            for (((dav, dgv), &g), &u) in da.iter_mut().zip(dg.iter_mut()).zip(&cc.g).zip(&cc.u) {
                let s = sigmoid(g);
                *dgv = *dav * u * s * (1.0 + g * (1.0 - s));
                *dav *= g * s;
            }
            let du = &da;
            gemm(d, ff, bt, &mut grads[gi(W_GATE)], ff, false, View::t(&cc.h2, d), View::rows(&dg, ff));
            gemm(d, ff, bt, &mut grads[gi(W_UP)], ff, false, View::t(&cc.h2, d), View::rows(du, ff));
            gemm(bt, d, ff, &mut dhid, d, false, View::rows(&dg, ff), View::t(lw(l, W_GATE), ff));
            gemm(bt, d, ff, &mut dhid, d, true, View::rows(du, ff), View::t(lw(l, W_UP), ff));
            rms_norm_back(&cc.x_mid, lw(l, MLP_NORM), &cc.r2, &dhid, &mut dx, true, &mut grads[gi(MLP_NORM)]);
            // x_mid = x_in + o @ wo
            gemm(qw, d, bt, &mut grads[gi(WO)], d, false, View::t(&cc.o, qw), View::rows(&dx, d));
            gemm(bt, qw, d, &mut d_o, qw, false, View::rows(&dx, d), View::t(lw(l, WO), d));
            attention_backward(cc, &d_o, &mut dq, &mut dk, &mut dv, b, t, hq, hkv, dh);
            if let Some(rope) = &rope {
                for (i, row) in dq.chunks_exact_mut(dh).enumerate() {
                    rope.apply(row, (i / hq) % t, true);
                }
                for (i, row) in dk.chunks_exact_mut(dh).enumerate() {
                    rope.apply(row, (i / hkv) % t, true);
                }
            }
            rms_norm_back(&cc.qp, lw(l, Q_NORM), &cc.rq, &dq, &mut dqp, false, &mut grads[gi(Q_NORM)]);
            rms_norm_back(&cc.kp, lw(l, K_NORM), &cc.rk, &dk, &mut dkp, false, &mut grads[gi(K_NORM)]);
            gemm(d, qw, bt, &mut grads[gi(WQ)], qw, false, View::t(&cc.h1, d), View::rows(&dqp, qw));
            gemm(d, kw, bt, &mut grads[gi(WK)], kw, false, View::t(&cc.h1, d), View::rows(&dkp, kw));
            gemm(d, kw, bt, &mut grads[gi(WV)], kw, false, View::t(&cc.h1, d), View::rows(&dv, kw));
            gemm(bt, d, qw, &mut dhid, d, false, View::rows(&dqp, qw), View::t(lw(l, WQ), qw));
            gemm(bt, d, kw, &mut dhid, d, true, View::rows(&dkp, kw), View::t(lw(l, WK), kw));
            gemm(bt, d, kw, &mut dhid, d, true, View::rows(&dv, kw), View::t(lw(l, WV), kw));
            rms_norm_back(&cc.x_in, lw(l, ATTN_NORM), &cc.r1, &dhid, &mut dx, true, &mut grads[gi(ATTN_NORM)]);
        }
        let g_embed = &mut grads[g_embed_i];
        for (row, &tok) in dx.chunks_exact(d).zip(tokens) {
            for (a, &g) in g_embed[tok as usize * d..(tok as usize + 1) * d].iter_mut().zip(row) {
                *a += g;
            }
        }
        StepOutput { loss, exact, token_hits, queries: n_queries, tokens: n, grads }
    }
}

/// Causal softmax attention of every (sequence, query head): weights into `cache.p`, output
/// into `cache.o`. Scores are `q k^T` times `1/sqrt(d_h)`, softmax with the row maximum
/// subtracted (the candle path's order).
fn attention_forward(cc: &mut LayerCache, b: usize, t: usize, hq: usize, hkv: usize, dh: usize) {
    let (qw, kw) = (hq * dh, hkv * dh);
    let groups = hq / hkv;
    let scale = (1.0 / (dh as f64).sqrt()) as f32;
    for bi in 0..b {
        for h in 0..hq {
            let kv = h / groups;
            let (qo, ko) = (bi * t * qw + h * dh, bi * t * kw + kv * dh);
            let p = &mut cc.p[(bi * hq + h) * t * t..(bi * hq + h + 1) * t * t];
            gemm(
                t,
                t,
                dh,
                p,
                t,
                false,
                View { data: &cc.q[qo..], rs: qw, cs: 1 },
                View { data: &cc.k[ko..], rs: 1, cs: kw },
            );
            for (i, row) in p.chunks_exact_mut(t).enumerate() {
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
            gemm(t, dh, t, &mut cc.o[qo..], qw, false, View::rows(p, t), View { data: &cc.v[ko..], rs: kw, cs: 1 });
        }
    }
}

/// Backward of [`attention_forward`]: `dq` (overwritten), `dk` and `dv` (overwritten; query
/// heads of a group add up in head order). `dS = P * (dP - rowsum(dO * O))`.
#[allow(clippy::too_many_arguments)]
fn attention_backward(
    cc: &LayerCache,
    d_o: &[f32],
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
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
    let mut ds = vec![0f32; t * t];
    for bi in 0..b {
        for h in 0..hq {
            let kv = h / groups;
            let (qo, ko) = (bi * t * qw + h * dh, bi * t * kw + kv * dh);
            let p = &cc.p[(bi * hq + h) * t * t..(bi * hq + h + 1) * t * t];
            let dov = View { data: &d_o[qo..], rs: qw, cs: 1 };
            gemm(t, t, dh, &mut ds, t, false, dov, View { data: &cc.v[ko..], rs: 1, cs: kw });
            for (i, (row, prow)) in ds.chunks_exact_mut(t).zip(p.chunks_exact(t)).enumerate() {
                let (oi, doi) = (&cc.o[qo + i * qw..qo + i * qw + dh], &d_o[qo + i * qw..qo + i * qw + dh]);
                let dot: f32 = oi.iter().zip(doi).map(|(a, b)| a * b).sum();
                for (s, &pv) in row[..=i].iter_mut().zip(prow) {
                    *s = pv * (*s - dot) * scale;
                }
                row[i + 1..].fill(0.0);
            }
            gemm(t, dh, t, &mut dq[qo..], qw, false, View::rows(&ds, t), View { data: &cc.k[ko..], rs: kw, cs: 1 });
            gemm(t, dh, t, &mut dk[ko..], kw, true, View::t(&ds, t), View { data: &cc.q[qo..], rs: qw, cs: 1 });
            gemm(t, dh, t, &mut dv[ko..], kw, true, View::t(p, t), dov);
        }
    }
}
