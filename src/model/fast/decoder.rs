//! [`FastDecoder`]: the fast engine bound to a model's parameters, one batch's inputs and plan,
//! and its [`TrainEngine`] implementation.

use super::attention::Mask;
use super::buffers::Workspace;
use super::compress::{CompressorShape, LayerWindows};
use super::layout::LAYER;
use super::ops::Rope;
use super::supported::check_supported;
use crate::kernel::spec::KernelSpec;
use crate::model::batch::Batch;
use crate::model::config::ModelConfig;
use crate::model::engine::{EngineStep, TrainEngine};
use crate::model::record::BatchScore;
use crate::{Error, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};

/// Loss, accuracy counts and gradients of one batch.
#[derive(Debug)]
pub struct StepOutput {
    /// Loss and counts.
    pub score: BatchScore,
    /// Gradient of every parameter, in the order of [`FastDecoder::names`].
    pub grads: Vec<Vec<f32>>,
}

/// One batch's ids, checked ([`FastDecoder::inputs`]).
pub(super) struct Inputs {
    pub(super) b: usize,
    pub(super) t: usize,
    pub(super) tokens: Vec<u32>,
    pub(super) idx: Vec<u32>,
    pub(super) targets: Vec<u32>,
    pub(super) n_queries: usize,
}

/// What the forward and backward pass of one batch share ([`FastDecoder::plan`]).
pub(super) struct Plan {
    pub(super) rope: Option<Rope>,
    /// Per layer: its windows and mask (layers, or the KV heads of a layer, differ only on
    /// staggered grids).
    pub(super) win: Vec<Option<LayerWindows>>,
    pub(super) mask: Vec<Mask>,
}

/// The model's and the batch's sizes.
pub(super) struct Sizes {
    pub(super) d: usize,
    pub(super) dh: usize,
    pub(super) hq: usize,
    pub(super) hkv: usize,
    pub(super) ff: usize,
    pub(super) nl: usize,
    pub(super) vocab: usize,
    pub(super) bt: usize,
}

/// The fast engine bound to a model's parameters (candle `Var`s, read at every step, so the
/// optimiser, checkpoints and resume are the same as the candle path's). It keeps its
/// activation and gradient buffers between steps (no allocation or page zeroing per step).
#[derive(Debug)]
pub struct FastDecoder {
    pub(super) cfg: ModelConfig,
    pub(super) vocab: usize,
    pub(super) vars: Vec<(String, Var)>,
    pub(super) rope_freqs: Option<Vec<f64>>,
    /// Per layer, the kernel of its KV heads ([`ModelConfig::head_specs`]): one spec when they
    /// share a grid (every preset but `stagger: heads`: one batched compressor, one mask), else
    /// one per KV head, each on its own grid.
    pub(super) layer_grids: Vec<Vec<KernelSpec>>,
    /// The compressor of each layer, on that layer's kernel (a layout's layers differ: a
    /// `W = 16` layer's gate parameters are not a `W = 4` layer's); empty for `full`.
    pub(super) comps: Vec<CompressorShape>,
    /// The slot of each layer's first parameter ([`LAYER`], then its compressor's), and last
    /// the slot of `final_norm` (`n_layer + 1` entries).
    pub(super) starts: Vec<usize>,
    pub(super) work: Workspace,
}

impl FastDecoder {
    /// The engine for `config` over the variables of its parameter store (every decoder
    /// parameter must be there, and nothing else).
    pub fn new(config: &ModelConfig, vocab: usize, store_vars: Vec<(String, Var)>) -> Result<Self> {
        config.validate()?;
        check_supported(config)?;
        let spec = config.kernel()?;
        let comps: Vec<CompressorShape> = if config.is_full() {
            Vec::new()
        } else {
            (0..config.n_layer)
                .map(|l| CompressorShape::new(spec.layer(l), config.d_model, config.d_head, config.n_kv_head))
                .collect()
        };
        let mut names = vec!["embed".to_string()];
        let mut starts = Vec::with_capacity(config.n_layer + 1);
        for l in 0..config.n_layer {
            starts.push(names.len());
            names.extend(LAYER.iter().map(|n| format!("layer{l}.{n}")));
            let knames = comps.get(l).map(|c| c.param_names()).unwrap_or_default();
            names.extend(knames.iter().map(|n| format!("layer{l}.attn.kernel.{n}")));
        }
        starts.push(names.len());
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
            comps,
            starts,
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
    pub(super) fn params(&self) -> Result<Vec<Vec<f32>>> {
        let params = self
            .vars
            .iter()
            .map(|(_, v)| v.as_tensor().flatten_all()?.to_vec1::<f32>())
            .collect::<candle_core::Result<_>>()?;
        Ok(params)
    }

    /// The batch's ids, checked against the vocabulary and the batch's positions.
    pub(super) fn inputs(&self, batch: &Batch) -> Result<Inputs> {
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
    pub(super) fn plan(&self, t: usize) -> Plan {
        let local = if self.comps.is_empty() { t.max(1) } else { self.cfg.local_window };
        let (mut win, mut mask) = (Vec::new(), Vec::new());
        for (l, grids) in self.layer_grids.iter().enumerate() {
            let w = self.comps.get(l).map(|sh| LayerWindows::new(sh, grids, t));
            let (ne, counts) = w.as_ref().map_or((0, vec![0; grids.len()]), |w| (w.n(), w.counts()));
            let vis: Vec<_> = grids.iter().zip(counts).map(|(s, ng)| (s.geometry, s.visibility, ng)).collect();
            mask.push(Mask::new(&vis, ne, t, local));
            win.push(w);
        }
        Plan { rope: self.rope_freqs.as_ref().map(|f| Rope::new(f, t)), win, mask }
    }

    /// The sizes of one batch.
    pub(super) fn sizes(&self, x: &Inputs) -> Sizes {
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
