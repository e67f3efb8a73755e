//! A small Qwen3-style decoder whose attention layers use any kernel preset.
//!
//! Token embedding; `n_layer` blocks of pre-RMSNorm attention (grouped-query heads, per-head
//! RMSNorm on queries and keys, RoPE) and pre-RMSNorm SwiGLU MLP; final RMSNorm; LM head.
//!
//! Attention. For the `full` preset it is ordinary causal attention over raw tokens (the `full`
//! kernel's `W = S = 1` entries *are* the tokens, so they are not added a second time). For any
//! other preset each KV head compresses the attention input `x` with the kernel
//! ([`TensorKernel::compress`]) and a query attends in one softmax to the raw tokens of a local
//! window of `local_window` tokens (itself included) plus every visible compressed entry
//! ([`tensor::compressed_attention`]; windows and visibility come from the kernel's geometry).
//!
//! RoPE. Queries and raw keys are rotated with the kernel's own RoPE convention (same rotated
//! channels, same base, interleaved pairs, angles from [`crate::kernel::post::rope_angle`]),
//! at their token positions, and entries at their entry positions, so a score depends only on
//! the relative position. A `-norope` kernel (`nope_model`) makes the whole model NoPE.
//!
//! Every op is differentiable (candle-nn's fused RMSNorm, softmax and RoPE drop gradients; none
//! is used here). As a [`TrainEngine`] (`&Decoder`, engine `candle`) it is the autodiff
//! reference every preset trains on and the fast engine is checked against.

use super::batch::Batch;
use super::config::ModelConfig;
use super::engine::{EngineStep, TrainEngine};
use super::record::BatchScore;
use crate::kernel::spec::{KernelDims, KernelSpec};
use crate::kernel::tensor::{self, SlotContributions, SlotKnock, TensorKernel, TensorParams};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarBuilder};

/// RMSNorm epsilon of the decoder's norms: the kernel's one default,
/// [`crate::kernel::spec::RMS_NORM_EPS`] (DeepSeek-V4's `rms_norm_eps`).
pub const NORM_EPS: f64 = crate::kernel::spec::RMS_NORM_EPS;

/// RMSNorm over the last axis with a learned weight: the kernel's tensor RMSNorm
/// ([`tensor::rms_norm`]) at [`NORM_EPS`].
fn rms_norm(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    tensor::rms_norm(x, weight, NORM_EPS)
}

/// A bias-free linear map stored as `[in, out]` (so `x.matmul(w)` needs no transpose).
fn linear(vb: &VarBuilder, d_in: usize, d_out: usize, name: &str, scale: f64) -> Result<Tensor> {
    Ok(vb.get_with_hints((d_in, d_out), name, Init::Randn { mean: 0.0, stdev: scale / (d_in as f64).sqrt() })?)
}

/// `x: [B, T, a] @ w: [a, b]`.
fn apply(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (b, t, a) = x.dims3()?;
    Ok(x.reshape((b * t, a))?.matmul(w)?.reshape((b, t, w.dim(1)?))?)
}

#[derive(Debug)]
struct Attention {
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    q_norm: Tensor,
    k_norm: Tensor,
    /// Each KV head's kernel, on its own grid ([`ModelConfig::head_specs`]).
    head_specs: Vec<KernelSpec>,
    /// One-head kernels, one per KV head, when this layer's heads sit on different grids
    /// (`stagger: heads`); empty otherwise (every head in one batched kernel).
    head_kernels: Vec<TensorKernel>,
    kernel: Option<(TensorKernel, TensorParams)>,
}

#[derive(Debug)]
struct Block {
    attn_norm: Tensor,
    attn: Attention,
    mlp_norm: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
}

/// The decoder: parameters live in the `VarBuilder`'s store.
#[derive(Debug)]
pub struct Decoder {
    config: ModelConfig,
    spec: KernelSpec,
    embed: Tensor,
    blocks: Vec<Block>,
    final_norm: Tensor,
    lm_head: Tensor,
    device: Device,
}

/// Output of one forward pass.
#[derive(Debug)]
pub struct Forward {
    /// Final-normed hidden states `[B, T, d]`.
    pub hidden: Tensor,
    /// What [`Probe::capture`] asked for, one entry per layer (empty otherwise).
    pub captures: Vec<LayerCapture>,
}

/// What one attention layer attends to, captured for analyses.
#[derive(Clone, Debug)]
pub struct LayerCapture {
    /// The attended keys of every KV head, `[B, H_kv, n, d_h]`: the compressed entries of a
    /// compressed layer, the (normed, rotated) token keys of `full`.
    pub keys: Tensor,
    /// The attended values, `[B, H_kv, n, d_h]`.
    pub values: Tensor,
    /// Key gate weights `[B, H_kv, n, W, c]` of a compressed layer (`None` for `full`).
    pub gate_k: Option<Tensor>,
    /// Value gate weights `[B, H_kv, n, W, c]` of a compressed layer.
    pub gate_v: Option<Tensor>,
    /// The compressor's input `[B, T, d]` of a compressed layer (what its projections read;
    /// `None` for `full`).
    pub input: Option<Tensor>,
    /// Every window slot's gated contribution to the entries, `[W, B, n, H_kv*d_h]`, of a
    /// compressed layer whose KV heads share one grid (`None` otherwise).
    pub slots: Option<SlotContributions>,
}

/// Mean replacement of one KV head's attended keys and values (`theory/phase-lab.md` §4).
#[derive(Clone, Debug)]
pub struct Replacement {
    /// Layer index.
    pub layer: usize,
    /// KV head index.
    pub head: usize,
    /// Replacement keys for entries `0..m`, `[B, m, d_h]` (the batch of the forward pass).
    pub keys: Tensor,
    /// Replacement values, `[B, m, d_h]`.
    pub values: Tensor,
}

/// Captures and interventions of a forward pass ([`Decoder::forward_probe`]).
#[derive(Clone, Debug, Default)]
pub struct Probe {
    /// Return every layer's attended keys, values and gates.
    pub capture: bool,
    /// With `capture`, also every window slot's contribution ([`LayerCapture::slots`]).
    pub capture_slots: bool,
    /// Replace one head's first entries (compressed entries, or token keys/values of `full`).
    pub replace: Option<Replacement>,
    /// Replace one window slot's gated contribution to every entry of one layer
    /// (`theory/phase-lab.md` §8.9's offset knockout; compressed layers on one grid only).
    pub knock_slot: Option<(usize, SlotKnock)>,
}

impl Decoder {
    /// Builds the decoder for `vocab_size` tokens (parameters created through `vb`).
    pub fn new(config: &ModelConfig, vocab_size: usize, vb: &VarBuilder) -> Result<Self> {
        config.validate()?;
        if vocab_size == 0 {
            return Err(Error::invalid("vocab_size", "must be at least 1, got 0"));
        }
        let spec = config.kernel()?;
        let (d, dh, hq, hkv, ff) = (config.d_model, config.d_head, config.n_head, config.n_kv_head, config.d_ff);
        let device = vb.device().clone();
        let out_scale = 1.0 / (2.0 * config.n_layer as f64).sqrt();
        let ones = |vb: &VarBuilder, n: usize, name: &str| -> Result<Tensor> {
            Ok(vb.get_with_hints(n, name, Init::Const(1.0))?)
        };
        let embed = vb.get_with_hints((vocab_size, d), "embed", Init::Randn { mean: 0.0, stdev: 1.0 })?;
        let mut blocks = Vec::with_capacity(config.n_layer);
        for l in 0..config.n_layer {
            let vb = vb.pp(format!("layer{l}"));
            let va = vb.pp("attn");
            let head_specs = config.head_specs(&spec, l)?;
            let staggered = head_specs.iter().any(|h| h.geometry != head_specs[0].geometry);
            let mut head_kernels = Vec::new();
            let kernel = if config.is_full() {
                None
            } else {
                let dims = KernelDims::new(d, dh)?;
                if staggered {
                    for hs in &head_specs {
                        head_kernels.push(TensorKernel::new(hs, dims, 1, &device, vb.dtype())?);
                    }
                }
                let k = TensorKernel::new(&head_specs[0], dims, hkv, &device, vb.dtype())?;
                let p = TensorParams::init(spec.layer(l), dims, hkv, &va.pp("kernel"))?;
                Some((k, p))
            };
            let attn = Attention {
                wq: linear(&va, d, hq * dh, "wq", 1.0)?,
                wk: linear(&va, d, hkv * dh, "wk", 1.0)?,
                wv: linear(&va, d, hkv * dh, "wv", 1.0)?,
                wo: linear(&va, hq * dh, d, "wo", out_scale)?,
                q_norm: va.get_with_hints(dh, "q_norm", Init::Const(config.qk_norm_gain))?,
                k_norm: va.get_with_hints(dh, "k_norm", Init::Const(config.qk_norm_gain))?,
                head_specs,
                head_kernels,
                kernel,
            };
            let vm = vb.pp("mlp");
            blocks.push(Block {
                attn_norm: ones(&vb, d, "attn_norm")?,
                attn,
                mlp_norm: ones(&vb, d, "mlp_norm")?,
                w_gate: linear(&vm, d, ff, "w_gate", 1.0)?,
                w_up: linear(&vm, d, ff, "w_up", 1.0)?,
                w_down: linear(&vm, ff, d, "w_down", out_scale)?,
            });
        }
        Ok(Decoder {
            config: config.clone(),
            spec,
            embed,
            blocks,
            final_norm: ones(vb, d, "final_norm")?,
            lm_head: linear(vb, d, vocab_size, "lm_head", 1.0)?,
            device,
        })
    }

    /// The model config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The compressor parameters of layer `layer` (`None` for `full` or a layer out of range).
    pub fn compressor(&self, layer: usize) -> Option<&TensorParams> {
        self.blocks.get(layer).and_then(|b| b.attn.kernel.as_ref()).map(|(_, p)| p)
    }

    /// The kernel spec of the attention layers (the preset's, with its stagger rule; each
    /// KV head computes on [`Decoder::head_spec`]).
    pub fn spec(&self) -> &KernelSpec {
        &self.spec
    }

    /// The kernel of KV head `head` of layer `layer` on that head's grid (the preset's spec for
    /// an index out of range).
    pub fn head_spec(&self, layer: usize, head: usize) -> &KernelSpec {
        self.blocks.get(layer).and_then(|b| b.attn.head_specs.get(head)).unwrap_or(&self.spec)
    }

    /// Final-normed hidden states for token ids `tokens: [B, T]` (u32).
    pub fn forward(&self, tokens: &Tensor) -> Result<Forward> {
        self.forward_probe(tokens, &Probe::default())
    }

    /// [`Decoder::forward`] with captures and an intervention (analyses; not differentiable
    /// through the replaced entries).
    pub fn forward_probe(&self, tokens: &Tensor, probe: &Probe) -> Result<Forward> {
        if let Some(r) = &probe.replace {
            if r.layer >= self.blocks.len() || r.head >= self.config.n_kv_head {
                return Err(Error::invalid(
                    "replacement",
                    format!(
                        "layer {} head {} does not exist (layers 0..{}, KV heads 0..{})",
                        r.layer,
                        r.head,
                        self.blocks.len(),
                        self.config.n_kv_head
                    ),
                ));
            }
        }
        if let Some((l, _)) = &probe.knock_slot {
            let one_grid = self.blocks.get(*l).map(|b| b.attn.kernel.is_some() && b.attn.head_kernels.is_empty());
            if one_grid != Some(true) {
                return Err(Error::invalid(
                    "slot knockout",
                    format!(
                        "layer {l} must be a compressed layer whose KV heads share one grid (layers 0..{}, preset {})",
                        self.blocks.len(),
                        self.config.preset
                    ),
                ));
            }
        }
        let (b, t) = tokens.dims2().map_err(|_| Error::shape("tokens", "[B, T]", format!("{:?}", tokens.dims())))?;
        let mut x = self.embed.index_select(&tokens.flatten_all()?, 0)?.reshape((b, t, self.config.d_model))?;
        let positions: Vec<usize> = (0..t).collect();
        let mut captures = Vec::new();
        for (l, block) in self.blocks.iter().enumerate() {
            let h = rms_norm(&x, &block.attn_norm)?;
            let replace = probe.replace.as_ref().filter(|r| r.layer == l);
            let knock = probe.knock_slot.as_ref().filter(|(kl, _)| *kl == l).map(|(_, k)| k);
            let (a, cap) = self.attention(&block.attn, &h, &positions, (replace, knock), probe)?;
            captures.extend(cap);
            x = (x + a)?;
            let h = rms_norm(&x, &block.mlp_norm)?;
            let g = apply(&h, &block.w_gate)?;
            let u = apply(&h, &block.w_up)?;
            let m = apply(&(candle_nn::ops::silu(&g)? * u)?, &block.w_down)?;
            x = (x + m)?;
        }
        Ok(Forward { hidden: rms_norm(&x, &self.final_norm)?, captures })
    }

    /// Logits `[N, V]` at flat positions `idx: [N]` (u32, `b * T + t`) of a forward pass.
    pub fn logits_at(&self, fwd: &Forward, idx: &Tensor) -> Result<Tensor> {
        let (b, t, d) = fwd.hidden.dims3()?;
        let h = fwd.hidden.reshape((b * t, d))?.index_select(idx, 0)?;
        Ok(h.matmul(&self.lm_head)?)
    }

    /// Logits `[B, T, V]` at every position (analysis and tests; training uses
    /// [`Decoder::logits_at`]).
    pub fn logits(&self, tokens: &Tensor) -> Result<Tensor> {
        let fwd = self.forward(tokens)?;
        let (b, t, _) = fwd.hidden.dims3()?;
        let idx = Tensor::arange(0u32, (b * t) as u32, &self.device)?;
        Ok(self.logits_at(&fwd, &idx)?.reshape((b, t, self.lm_head.dim(1)?))?)
    }

    fn rope(&self, u: &Tensor, positions: &[usize]) -> Result<Tensor> {
        match &self.spec.rope {
            Some(rs) if !self.spec.nope_model => {
                let r = rs.rotated_channels(self.config.d_head);
                if r == 0 {
                    return Ok(u.clone());
                }
                tensor::rope_tensor(u, &rs.inv_frequencies(r), positions, &self.device)
            }
            _ => Ok(u.clone()),
        }
    }

    fn attention(
        &self,
        a: &Attention,
        x: &Tensor,
        positions: &[usize],
        (replace, knock): (Option<&Replacement>, Option<&SlotKnock>),
        probe: &Probe,
    ) -> Result<(Tensor, Option<LayerCapture>)> {
        let capture = probe.capture;
        let (b, t, _) = x.dims3()?;
        let (dh, hq, hkv) = (self.config.d_head, self.config.n_head, self.config.n_kv_head);
        let heads = |w: &Tensor, h: usize| -> Result<Tensor> {
            Ok(apply(x, w)?.reshape((b, t, h, dh))?.transpose(1, 2)?.contiguous()?)
        };
        let q = rms_norm(&heads(&a.wq, hq)?, &a.q_norm)?;
        let k = rms_norm(&heads(&a.wk, hkv)?, &a.k_norm)?;
        let v = heads(&a.wv, hkv)?;
        let q = self.rope(&q, positions)?;
        let k = self.rope(&k, positions)?;
        let (out, cap) = match &a.kernel {
            None => {
                let (k, v) = match replace {
                    Some(r) => (replace_head(&k, r.head, &r.keys)?, replace_head(&v, r.head, &r.values)?),
                    None => (k, v),
                };
                let empty = Tensor::zeros((b, hkv, 0, dh), x.dtype(), &self.device)?;
                let out = tensor::compressed_attention(
                    &self.spec.geometry,
                    self.spec.visibility,
                    t.max(1),
                    &q,
                    &k,
                    &v,
                    &empty,
                    &empty,
                )?;
                let cap = capture.then(|| LayerCapture {
                    keys: k,
                    values: v,
                    gate_k: None,
                    gate_v: None,
                    input: None,
                    slots: None,
                });
                (out.output, cap)
            }
            Some((_, params)) if !a.head_kernels.is_empty() => {
                self.attention_per_head(a, params, x, (&q, &k, &v), replace, capture)?
            }
            Some((kernel, params)) => {
                let (entries, slots) = kernel.compress_probe(params, x, knock, capture && probe.capture_slots)?;
                let (ek, ev) = match replace {
                    Some(r) => (
                        replace_head(&entries.keys, r.head, &r.keys)?,
                        replace_head(&entries.values, r.head, &r.values)?,
                    ),
                    None => (entries.keys, entries.values),
                };
                let out = tensor::compressed_attention(
                    &a.head_specs[0].geometry,
                    a.head_specs[0].visibility,
                    self.config.local_window,
                    &q,
                    &k,
                    &v,
                    &ek,
                    &ev,
                )?;
                let cap = capture.then(|| LayerCapture {
                    keys: ek,
                    values: ev,
                    gate_k: Some(entries.gate_k),
                    gate_v: Some(entries.gate_v),
                    input: Some(x.clone()),
                    slots,
                });
                (out.output, cap)
            }
        };
        let o = out.transpose(1, 2)?.contiguous()?.reshape((b, t, hq * dh))?;
        Ok((apply(&o, &a.wo)?, cap))
    }
}

impl Decoder {
    /// Compressed attention of a layer whose KV heads sit on different grids: each KV head
    /// compresses with its own one-head kernel (its columns of the stacked parameters) and its
    /// query heads attend over its own entries and visibility. Captured entries and gates are
    /// padded with zeros to the longest head's count (a head's own windows are
    /// [`Decoder::head_spec`]'s).
    fn attention_per_head(
        &self,
        a: &Attention,
        params: &TensorParams,
        x: &Tensor,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        replace: Option<&Replacement>,
        capture: bool,
    ) -> Result<(Tensor, Option<LayerCapture>)> {
        let (hq, hkv) = (self.config.n_head, self.config.n_kv_head);
        let groups = hq / hkv;
        let mut outs = Vec::with_capacity(hkv);
        let mut caps = Vec::with_capacity(hkv);
        for (h, (spec, kernel)) in a.head_specs.iter().zip(&a.head_kernels).enumerate() {
            let e = kernel.compress(&params.head(h, hkv)?, x)?;
            let (ek, ev) = match replace.filter(|r| r.head == h) {
                Some(r) => (replace_head(&e.keys, 0, &r.keys)?, replace_head(&e.values, 0, &r.values)?),
                None => (e.keys, e.values),
            };
            let out = tensor::compressed_attention(
                &spec.geometry,
                spec.visibility,
                self.config.local_window,
                &q.narrow(1, h * groups, groups)?.contiguous()?,
                &k.narrow(1, h, 1)?.contiguous()?,
                &v.narrow(1, h, 1)?.contiguous()?,
                &ek,
                &ev,
            )?;
            outs.push(out.output);
            if capture {
                caps.push([ek, ev, e.gate_k, e.gate_v]);
            }
        }
        let out = Tensor::cat(&outs, 1)?;
        if !capture {
            return Ok((out, None));
        }
        let n = caps.iter().map(|c| c[0].dim(2)).collect::<candle_core::Result<Vec<_>>>()?.into_iter().max();
        let n = n.unwrap_or(0);
        let stack = |i: usize| -> Result<Tensor> {
            let padded = caps.iter().map(|c| pad_entries(&c[i], n)).collect::<Result<Vec<_>>>()?;
            Ok(Tensor::cat(&padded, 1)?)
        };
        let cap = LayerCapture {
            keys: stack(0)?,
            values: stack(1)?,
            gate_k: Some(stack(2)?),
            gate_v: Some(stack(3)?),
            input: Some(x.clone()),
            slots: None,
        };
        Ok((out, Some(cap)))
    }
}

/// `u: [B, 1, m, ...]` padded with zeros to `n` entries on axis 2.
fn pad_entries(u: &Tensor, n: usize) -> Result<Tensor> {
    let m = u.dim(2)?;
    if m == n {
        return Ok(u.clone());
    }
    let mut shape = u.dims().to_vec();
    shape[2] = n - m;
    Ok(Tensor::cat(&[u, &Tensor::zeros(shape, u.dtype(), u.device())?], 2)?)
}

/// The loss of one batch as a graph node (what autodiff differentiates), with its score.
#[derive(Debug)]
pub struct BatchLoss {
    /// Mean cross-entropy over answer tokens, `[]`.
    pub loss: Tensor,
    /// Its value and the exact-match counts.
    pub score: BatchScore,
}

impl Decoder {
    /// Loss and exact-match counts of this model on `batch`.
    pub fn batch_loss(&self, batch: &Batch) -> Result<BatchLoss> {
        let fwd = self.forward(&batch.tokens)?;
        let logits = self.logits_at(&fwd, &batch.idx)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &batch.targets)?;
        let pred = logits.argmax(1)?.to_vec1::<u32>()?;
        let tgt = batch.targets.to_vec1::<u32>()?;
        let hits: Vec<bool> = pred.iter().zip(&tgt).map(|(a, b)| a == b).collect();
        let value = loss.to_scalar::<f32>()? as f64;
        Ok(BatchLoss { loss, score: BatchScore::from_hits(value, &hits, batch.n_queries) })
    }
}

impl TrainEngine for &Decoder {
    fn name(&self) -> &'static str {
        "candle"
    }

    /// Every preset.
    fn supports(_model: &ModelConfig) -> Result<()> {
        Ok(())
    }

    fn step(&mut self, batch: &Batch) -> Result<EngineStep> {
        let r = self.batch_loss(batch)?;
        Ok(EngineStep { score: r.score, grads: r.loss.backward()? })
    }

    fn evaluate(&mut self, batch: &Batch) -> Result<BatchScore> {
        Ok(self.batch_loss(batch)?.score)
    }
}

/// `u: [B, H, n, d]` with head `head`'s rows `0..m` replaced by `by: [B, m, d]`.
fn replace_head(u: &Tensor, head: usize, by: &Tensor) -> Result<Tensor> {
    let (b, h, n, d) = u.dims4()?;
    let (bb, m, dd) = by.dims3()?;
    if bb != b || dd != d || m > n {
        return Err(Error::shape("replacement", format!("[{b}, <= {n}, {d}]"), format!("{:?}", by.dims())));
    }
    let by = by.to_dtype(u.dtype())?.unsqueeze(1)?;
    let row = if m < n { Tensor::cat(&[&by, &u.narrow(1, head, 1)?.narrow(2, m, n - m)?], 2)? } else { by };
    let mut parts = Vec::with_capacity(3);
    if head > 0 {
        parts.push(u.narrow(1, 0, head)?);
    }
    parts.push(row);
    if head + 1 < h {
        parts.push(u.narrow(1, head + 1, h - head - 1)?);
    }
    Ok(Tensor::cat(&parts, 1)?.contiguous()?)
}

/// The dtype every model here trains in.
pub const MODEL_DTYPE: DType = DType::F32;
