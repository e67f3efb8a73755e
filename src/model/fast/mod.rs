//! The fast training engine: a hand-derived f32 forward and backward pass of the whole decoder
//! of [`crate::model::decoder`] on the CPU, in the spirit of a compact C training loop. One
//! training step computes the loss, the accuracy counts and the gradient of every parameter
//! with plain loops and a strided GEMM ([`ops::gemm`]) over row-major buffers: no graph, no
//! broadcast ops, no zero-filled gradient tensors per op.
//!
//! The candle autodiff path stays the reference: `tests/train_fast.rs` checks the loss and every
//! parameter's gradient against it. Supported ([`SUPPORTED`]): `full` (causal attention over
//! raw tokens), the paper's `w{W}s{S}` family with any gate kind, parameter groups, tying and
//! entry RoPE or none, and DeepSeek-V4's kernels (`dsv4-*`: one shared K/V entry, an RMSNorm on
//! each entry, partial YaRN RoPE) (`compress`: the compressor; `attention`: local window plus
//! visible entries in one softmax).
//!
//! Determinism: every reduction runs in one fixed order on one thread (GEMM with
//! `Parallelism::None`, rows and heads in order), so the same parameters and batch give the
//! same bits whatever `RAYON_NUM_THREADS` is.
//!
//! Layout (row-major, `BT = B * T` rows): hidden states `[BT, d]`; queries `[BT, H_q * d_h]`
//! (head `h` in columns `h*d_h..`), keys and values `[BT, H_kv * d_h]`; what attention reads,
//! `[B, H_kv, n + T, d_h]` (the `n` compressed entries, then the raw tokens); attention weights
//! `[B, H_q, T, n + T]`. Query head `h` reads KV head `h / (H_q / H_kv)` (candle's `repeat_kv`).

mod attention;
mod compress;
mod ops;
use attention::{attention_backward, attention_forward, Mask};
use compress::{compress_backward, compress_forward, CompressCache, CompressScratch, CompressorShape, Windows};

use super::batch::Batch;
use super::config::ModelConfig;
use super::decoder::NORM_EPS;
use super::engine::{EngineStep, TrainEngine};
use super::record::BatchScore;
use crate::kernel::spec::{GateKind, KernelSpec};
use crate::numeric::{gemm, View};
use crate::{Error, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use ops::{rms_norm, rms_norm_back, Rope};

/// What the fast engine implements, in words.
pub const SUPPORTED: &str = "every preset: full, w{W}s{S} with its ablations, and DeepSeek-V4's dsv4-*";

/// Presets of every family the fast engine implements, one each (what the tests compare
/// against the candle path): full attention; the paper's `w{W}s{S}` kernels with vector,
/// scalar and uniform gates, tied or untied, with or without RoPE, overlapping or not; and
/// DeepSeek-V4's kernels (shared K/V, entry RMSNorm, partial YaRN RoPE on rotated channels),
/// CSA (padded left, two parameter groups) and HCA (at rate 4, which the tests' sequences hold);
/// and layers on staggered grids (`-stagger-layers`, each layer's own offset).
pub const SUPPORTED_PRESETS: &[&str] = &[
    "full",
    "w8s4",
    "w8s6",
    "w4s4",
    "w8s4-scalar",
    "w8s4-uniform",
    "w8s4-tied",
    "w8s4-norope",
    "dsv4-csa",
    "dsv4-hca4",
    "w8s8-stagger-layers",
    "w8s4-stagger-layers",
];

/// Refuses a model whose preset does not exist (the fast engine implements every kernel spec
/// the presets make: separate or shared K/V, with or without the entry RMSNorm).
pub fn check_supported(model: &ModelConfig) -> Result<()> {
    if model.is_full() {
        return Ok(());
    }
    let spec = KernelSpec::preset(&model.preset).map_err(|e| Error::invalid("train.engine", e.to_string()))?;
    // KV heads of one layer on different grids (`stagger: heads`): the line names --engine candle.
    (0..model.n_layer).try_for_each(|l| model.layer_spec(&spec, l).map(drop))?;
    // A learned gate without per-offset biases (DeepSeek-V4.1's `gate_bias: false`) is not
    // implemented by the fast compressor yet: refuse it here rather than fail when the
    // engine looks up `gate_k.b`.
    if spec.gate != GateKind::Uniform && !spec.gate_bias {
        return Err(Error::invalid(
            "train.engine",
            format!(
                "the fast engine does not implement gates without biases (preset '{}', gate_bias: false); use --engine candle",
                model.preset
            ),
        ));
    }
    Ok(())
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
    /// Loss and counts.
    pub score: BatchScore,
    /// Gradient of every parameter, in the order of [`FastDecoder::names`].
    pub grads: Vec<Vec<f32>>,
}

/// One batch's ids, checked ([`FastDecoder::inputs`]).
struct Inputs {
    b: usize,
    t: usize,
    tokens: Vec<u32>,
    idx: Vec<u32>,
    targets: Vec<u32>,
    n_queries: usize,
}

/// What the forward and backward pass of one batch share ([`FastDecoder::plan`]).
struct Plan {
    rope: Option<Rope>,
    /// Per layer: its windows and mask (layers differ only on staggered grids).
    win: Vec<Option<Windows>>,
    mask: Vec<Mask>,
}

/// The model's and the batch's sizes.
struct Sizes {
    d: usize,
    dh: usize,
    hq: usize,
    hkv: usize,
    ff: usize,
    nl: usize,
    vocab: usize,
    bt: usize,
    pl: usize,
}

/// The fast engine bound to a model's parameters (candle `Var`s, read at every step, so the
/// optimiser, checkpoints and resume are the same as the candle path's). It keeps its
/// activation and gradient buffers between steps (no allocation or page zeroing per step).
#[derive(Debug)]
pub struct FastDecoder {
    cfg: ModelConfig,
    vocab: usize,
    vars: Vec<(String, Var)>,
    rope_freqs: Option<Vec<f64>>,
    /// Each layer's kernel on its own grid ([`ModelConfig::layer_spec`]).
    layer_specs: Vec<KernelSpec>,
    /// The compressor of every layer (`None` for `full`).
    comp: Option<CompressorShape>,
    /// Parameters per layer ([`LAYER`], then the compressor's).
    per_layer: usize,
    work: Workspace,
}

/// What the forward pass keeps for the backward pass, per layer.
#[derive(Default)]
pub(super) struct LayerCache {
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
    /// Keys and values attended to, `[B, H_kv, n + T, d_h]`: entries, then raw tokens.
    kc: Vec<f32>,
    vc: Vec<f32>,
    comp: CompressCache,
    p: Vec<f32>,
    o: Vec<f32>,
    x_mid: Vec<f32>,
    r2: Vec<f32>,
    h2: Vec<f32>,
    g: Vec<f32>,
    sg: Vec<f32>,
    u: Vec<f32>,
    a: Vec<f32>,
}

/// Buffers reused from step to step. Every buffer is fully written before it is read, except
/// those zeroed explicitly (gradients, scatter targets).
#[derive(Default)]
struct Workspace {
    layers: Vec<LayerCache>,
    x: Vec<f32>,
    hf: Vec<f32>,
    rf: Vec<f32>,
    hs: Vec<f32>,
    logits: Vec<f32>,
    dhs: Vec<f32>,
    dhf: Vec<f32>,
    dx: Vec<f32>,
    da: Vec<f32>,
    dg: Vec<f32>,
    dhid: Vec<f32>,
    d_o: Vec<f32>,
    dq: Vec<f32>,
    dk: Vec<f32>,
    dv: Vec<f32>,
    dqp: Vec<f32>,
    dkp: Vec<f32>,
    ds: Vec<f32>,
    dkc: Vec<f32>,
    dvc: Vec<f32>,
    comp: CompressScratch,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Workspace({} layers)", self.layers.len())
    }
}

/// Sizes `v` to `n` elements (contents unspecified: the caller overwrites them).
fn size(v: &mut Vec<f32>, n: usize) {
    v.resize(n, 0.0);
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Query rows per block of the causal attention: a block of rows `r0..r1` needs keys `0..r1`
/// only, which skips about a third of the score and weighted-sum work at `T = 98`.
const ROW_BLOCK: usize = 32;

impl FastDecoder {
    /// The engine for `config` over the variables of its parameter store (every decoder
    /// parameter must be there, and nothing else).
    pub fn new(config: &ModelConfig, vocab: usize, store_vars: Vec<(String, Var)>) -> Result<Self> {
        config.validate()?;
        check_supported(config)?;
        let spec = KernelSpec::preset(&config.preset)?;
        let comp =
            (!config.is_full()).then(|| CompressorShape::new(&spec, config.d_model, config.d_head, config.n_kv_head));
        let knames = comp.as_ref().map(|c| c.param_names()).unwrap_or_default();
        let mut names = vec!["embed".to_string()];
        for l in 0..config.n_layer {
            names.extend(LAYER.iter().map(|n| format!("layer{l}.{n}")));
            names.extend(knames.iter().map(|n| format!("layer{l}.attn.kernel.{n}")));
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
        let per_layer = LAYER.len() + knames.len();
        let layer_specs = (0..config.n_layer).map(|l| config.layer_spec(&spec, l)).collect::<Result<_>>()?;
        Ok(FastDecoder {
            cfg: config.clone(),
            vocab,
            vars,
            rope_freqs,
            layer_specs,
            comp,
            per_layer,
            work: Workspace::default(),
        })
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

    /// Loss, accuracy counts and gradients of `batch` at the variables' current values (the
    /// gradients in the order of [`FastDecoder::names`]).
    pub fn gradients(&mut self, batch: &Batch) -> Result<StepOutput> {
        let (w, x) = (self.params()?, self.inputs(batch)?);
        let plan = self.plan(x.t);
        let score = self.forward(&w, &x, &plan);
        let grads = self.backward(&w, &x, &plan);
        Ok(StepOutput { score, grads })
    }

    /// Every parameter's current values.
    fn params(&self) -> Result<Vec<Vec<f32>>> {
        let params = self
            .vars
            .iter()
            .map(|(_, v)| v.as_tensor().flatten_all()?.to_vec1::<f32>())
            .collect::<candle_core::Result<_>>()?;
        Ok(params)
    }

    /// The batch's ids, checked against the vocabulary and the batch's positions.
    fn inputs(&self, batch: &Batch) -> Result<Inputs> {
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
        Ok(Inputs { b, t, tokens, idx, targets, n_queries: batch.n_queries })
    }

    /// RoPE tables, windows and mask of a `t`-token sequence. Compressed layers: windows and
    /// entries of this length; `full` attends causally (a local window of the whole sequence,
    /// as the decoder calls it).
    fn plan(&self, t: usize) -> Plan {
        let local = if self.comp.is_some() { self.cfg.local_window } else { t.max(1) };
        let (mut win, mut mask) = (Vec::new(), Vec::new());
        for spec in &self.layer_specs {
            let w = self.comp.as_ref().map(|sh| sh.windows(spec, t));
            let ne = w.as_ref().map_or(0, |w| w.n);
            mask.push(Mask::new(&spec.geometry, spec.visibility, ne, t, local));
            win.push(w);
        }
        Plan { rope: self.rope_freqs.as_ref().map(|f| Rope::new(f, t)), win, mask }
    }

    /// The sizes of one batch.
    fn sizes(&self, x: &Inputs) -> Sizes {
        let c = &self.cfg;
        Sizes {
            d: c.d_model,
            dh: c.d_head,
            hq: c.n_head,
            hkv: c.n_kv_head,
            ff: c.d_ff,
            nl: c.n_layer,
            vocab: self.vocab,
            bt: x.b * x.t,
            pl: self.per_layer,
        }
    }

    /// Forward pass through the loss: every layer's cache, the final hidden states and, in
    /// `work.logits`, the loss's gradient with respect to the logits (what
    /// [`FastDecoder::backward`] starts from).
    fn forward(&mut self, w: &[Vec<f32>], x: &Inputs, plan: &Plan) -> BatchScore {
        let Sizes { d, dh, hq, hkv, ff, nl, vocab, bt, pl } = self.sizes(x);
        let (b, t, tokens, idx, targets) = (x.b, x.t, &x.tokens, &x.idx, &x.targets);
        let (qw, kw) = (hq * dh, hkv * dh);
        let eps = NORM_EPS as f32;
        let lw = |l: usize, j: usize| -> &[f32] { &w[1 + l * pl + j] };
        let (embed, final_norm, lm_head) = (&w[0], &w[1 + nl * pl], &w[2 + nl * pl]);
        let (comp, rope) = (self.comp.as_ref(), &plan.rope);
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
            if let (Some(sh), Some(win)) = (comp, win) {
                let kp = sh.params(w, 1 + l * pl + LAYER.len());
                compress_forward(sh, win, &kp, &cc.h1, b, t, &mut cc.comp, &mut cc.kc, &mut cc.vc);
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

    /// Backward pass from the loss's gradient [`FastDecoder::forward`] left: every parameter's
    /// gradient.
    fn backward(&mut self, w: &[Vec<f32>], x: &Inputs, plan: &Plan) -> Vec<Vec<f32>> {
        let Sizes { d, dh, hq, hkv, ff, nl, vocab, bt, pl } = self.sizes(x);
        let (b, t, tokens, idx) = (x.b, x.t, &x.tokens, &x.idx);
        let (qw, kw) = (hq * dh, hkv * dh);
        let lw = |l: usize, j: usize| -> &[f32] { &w[1 + l * pl + j] };
        let (final_norm, lm_head) = (&w[1 + nl * pl], &w[2 + nl * pl]);
        let (comp, rope, n) = (self.comp.as_ref(), &plan.rope, idx.len());
        let ws = &mut self.work;
        let mut grads: Vec<Vec<f32>> = w.iter().map(|p| vec![0f32; p.len()]).collect();
        let (g_embed_i, g_final_i, g_head_i) = (0, 1 + nl * pl, 2 + nl * pl);
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
            let gi = |j: usize| 1 + l * pl + j;
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
            if let (Some(sh), Some(win)) = (comp, win) {
                let kg = sh.grads(&mut grads[gi(LAYER.len())..gi(pl)]);
                let gamma = sh.params(w, gi(LAYER.len())).gamma;
                compress_backward(sh, win, &cc.comp, &ws.dkc, &ws.dvc, b, t, &mut ws.comp, kg, gamma, &mut ws.dhid);
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

impl TrainEngine for FastDecoder {
    fn name(&self) -> &'static str {
        "fast"
    }

    fn supports(model: &ModelConfig) -> Result<()> {
        check_supported(model)
    }

    fn step(&mut self, batch: &Batch) -> Result<EngineStep> {
        let out = self.gradients(batch)?;
        Ok(EngineStep { score: out.score, grads: self.grad_store(out.grads)? })
    }

    fn evaluate(&mut self, batch: &Batch) -> Result<BatchScore> {
        let (w, x) = (self.params()?, self.inputs(batch)?);
        let plan = self.plan(x.t);
        Ok(self.forward(&w, &x, &plan))
    }
}
