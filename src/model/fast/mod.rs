//! The fast training engine: a hand-derived f32 forward and backward pass of the whole decoder
//! of [`crate::model::decoder`] on the CPU, in the spirit of a compact C training loop. One
//! training step computes the loss, the accuracy counts and the gradient of every parameter
//! with plain loops and a strided GEMM ([`ops::gemm`]) over row-major buffers: no graph, no
//! broadcast ops, no zero-filled gradient tensors per op.
//!
//! It is the default engine for every preset. The candle autodiff path stays the reference,
//! chosen explicitly (`--engine candle`): `tests/train_fast.rs` checks the loss and every
//! parameter's gradient against it. Supported ([`SUPPORTED`]): `full` (causal attention over
//! raw tokens), the paper's `w{W}s{S}` family with any gate kind, parameter groups, tying and
//! entry RoPE or none, DeepSeek-V4's kernels (`dsv4-*`: one shared K/V entry, an RMSNorm on
//! each entry, partial YaRN RoPE) and DeepSeek-V4.1's (`dsv41-c{m}`: learned gates without
//! per-offset biases), each on staggered grids too: per layer (`stagger: layers`) or per KV
//! head (`stagger: heads`: each head's windows, entries and visibility from its own grid,
//! `compress/heads.rs`; a layer whose heads share a grid is one batched compressor).
//!
//! Files, one job each: this one binds the engine to a model's parameters and implements
//! [`TrainEngine`]; `forward` (through the loss) and `backward` (every parameter's gradient) are
//! the two passes; `compress` the compressor (forward and backward); `attention` local window
//! plus visible entries in one softmax; `ops` RMSNorm and RoPE.
//!
//! Determinism: every reduction runs in one fixed order on one thread (GEMM with
//! `Parallelism::None`, rows and heads in order), so the same parameters and batch give the
//! same bits whatever `RAYON_NUM_THREADS` is.
//!
//! Layout (row-major, `BT = B * T` rows): hidden states `[BT, d]`; queries `[BT, H_q * d_h]`
//! (head `h` in columns `h*d_h..`), keys and values `[BT, H_kv * d_h]`; what attention reads,
//! `[B, H_kv, n + T, d_h]` (the `n` compressed entries, the longest head's count when heads sit
//! on different grids, then the raw tokens); attention weights
//! `[B, H_q, T, n + T]`. Query head `h` reads KV head `h / (H_q / H_kv)` (candle's `repeat_kv`).

mod attention;
mod backward;
mod compress;
mod forward;
mod ops;
use attention::{attention_backward, attention_forward, Mask};
use compress::{
    compress_layer_backward, compress_layer_forward, CompressScratch, CompressorShape, LayerCompress, LayerWindows,
};

use super::batch::Batch;
use super::config::ModelConfig;
use super::decoder::NORM_EPS;
use super::engine::{EngineStep, TrainEngine};
use super::record::BatchScore;
use crate::kernel::spec::KernelSpec;
use crate::numeric::{gemm, View};
use crate::{Error, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use ops::{rms_norm, rms_norm_back, Rope};

/// What the fast engine implements, in words.
pub const SUPPORTED: &str =
    "every preset: full, w{W}s{S} with its ablations, DeepSeek-V4's dsv4-*, DeepSeek-V4.1's dsv41-c{m}, *-stagger-layers and *-stagger-heads";

/// Presets of every family the fast engine implements, one each (what the tests compare
/// against the candle path): full attention; the paper's `w{W}s{S}` kernels with vector,
/// scalar and uniform gates, tied or untied, with or without RoPE, overlapping or not;
/// DeepSeek-V4's kernels (shared K/V, entry RMSNorm, partial YaRN RoPE on rotated channels),
/// CSA (padded left, two parameter groups) and HCA (at rate 4, which the tests' sequences hold);
/// DeepSeek-V4.1's (a vector gate without per-offset biases, RoPE on the last channels at
/// the group's first token), at ratio 4 (`dsv41-c1` has no gate: uniform pooling, as HCA's);
/// layers on staggered grids (`-stagger-layers`, each layer's own offset) and the KV heads of a
/// layer on staggered grids (`-stagger-heads`, each head's own offset and entry count).
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
    "dsv41-c4",
    "w8s8-stagger-layers",
    "w8s4-stagger-layers",
    "w8s8-stagger-heads",
];

/// Refuses a model whose preset does not exist. Every kernel spec the presets make (separate or
/// shared K/V, with or without the entry RMSNorm, learned gates with or without per-offset
/// biases, layers or the KV heads of a layer on their own grids) is implemented.
pub fn check_supported(model: &ModelConfig) -> Result<()> {
    if model.is_full() {
        return Ok(());
    }
    model.kernel().map_err(|e| Error::invalid("train.engine", e.to_string()))?;
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
    /// Per layer: its windows and mask (layers, or the KV heads of a layer, differ only on
    /// staggered grids).
    win: Vec<Option<LayerWindows>>,
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
    /// Per layer, the kernel of its KV heads ([`ModelConfig::head_specs`]): one spec when they
    /// share a grid (every preset but `stagger: heads`: one batched compressor, one mask), else
    /// one per KV head, each on its own grid.
    layer_grids: Vec<Vec<KernelSpec>>,
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
    comp: LayerCompress,
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
        let spec = config.kernel()?;
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
        let layer_grids = (0..config.n_layer)
            .map(|l| {
                let mut heads = config.head_specs(&spec, l)?;
                if heads.iter().all(|h| h.geometry == heads[0].geometry) {
                    heads.truncate(1);
                }
                Ok(heads)
            })
            .collect::<Result<_>>()?;
        Ok(FastDecoder {
            cfg: config.clone(),
            vocab,
            vars,
            rope_freqs,
            layer_grids,
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
        for grids in &self.layer_grids {
            let w = self.comp.as_ref().map(|sh| LayerWindows::new(sh, grids, t));
            let (ne, counts) = w.as_ref().map_or((0, vec![0; grids.len()]), |w| (w.n(), w.counts()));
            let vis: Vec<_> = grids.iter().zip(counts).map(|(s, ng)| (s.geometry, s.visibility, ng)).collect();
            mask.push(Mask::new(&vis, ne, t, local));
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
