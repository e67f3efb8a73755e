//! Model, optimiser and run configuration, with validation that names the field and the
//! allowed range. A [`RunConfig`] is what `config.json` of a run directory holds; it
//! (de)serialises as JSON and unknown fields are rejected.

use crate::kernel::spec::KernelSpec;
use crate::task::TaskConfig;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Sizes of the decoder and which kernel its attention layers use.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Kernel preset of every attention layer (`full` = ordinary causal attention).
    pub preset: String,
    /// Hidden width `d`.
    pub d_model: usize,
    /// Number of decoder blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention: `n_head` must be a multiple).
    pub n_kv_head: usize,
    /// Width of each head.
    pub d_head: usize,
    /// Hidden width of the SwiGLU MLP.
    pub d_ff: usize,
    /// Raw tokens a query sees directly (itself included) in compressed layers; ignored by
    /// `full`.
    pub local_window: usize,
    /// Initial weight of the per-head query and key RMSNorms. With normalised `q` and `k` the
    /// largest score is `gain^2 * sqrt(d_head)`, only 4 at `d_head = 16` and gain 1: too flat
    /// to pick one record among dozens until the gains grow (see theory/training.md).
    pub qk_norm_gain: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            preset: "full".into(),
            d_model: 64,
            n_layer: 2,
            n_head: 4,
            n_kv_head: 2,
            d_head: 32,
            d_ff: 128,
            local_window: 4,
            qk_norm_gain: 1.0,
        }
    }
}

impl ModelConfig {
    /// Whether this is the plain causal-attention baseline.
    pub fn is_full(&self) -> bool {
        self.preset == "full"
    }

    /// Checks every field (and that the preset exists).
    pub fn validate(&self) -> Result<()> {
        KernelSpec::preset(&self.preset)?;
        let at_least = |field: &str, v: usize, min: usize| -> Result<()> {
            if v < min {
                Err(Error::invalid(format!("model.{field}"), format!("must be at least {min}, got {v}")))
            } else {
                Ok(())
            }
        };
        at_least("d_model", self.d_model, 1)?;
        at_least("n_layer", self.n_layer, 1)?;
        at_least("n_head", self.n_head, 1)?;
        at_least("n_kv_head", self.n_kv_head, 1)?;
        at_least("d_head", self.d_head, 2)?;
        at_least("d_ff", self.d_ff, 1)?;
        at_least("local_window", self.local_window, 1)?;
        if !(self.qk_norm_gain.is_finite() && self.qk_norm_gain > 0.0 && self.qk_norm_gain <= 100.0) {
            return Err(Error::invalid(
                "model.qk_norm_gain",
                format!("must be in (0, 100], got {}", self.qk_norm_gain),
            ));
        }
        if !self.n_head.is_multiple_of(self.n_kv_head) {
            return Err(Error::invalid(
                "model.n_head",
                format!("must be a multiple of n_kv_head ({}), got {}", self.n_kv_head, self.n_head),
            ));
        }
        Ok(())
    }
}

/// Optimiser, schedule, evaluation and checkpoint cadence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Optimiser steps.
    pub steps: usize,
    /// Sequences per step.
    pub batch_size: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Linear warm-up steps from 0 to `lr`.
    pub warmup_steps: usize,
    /// Cosine decay after warm-up, to `lr * min_lr_ratio` at the last step.
    pub min_lr_ratio: f64,
    /// AdamW decoupled weight decay (on matrices and embeddings; not on norms or biases).
    pub weight_decay: f64,
    /// AdamW `beta1`.
    pub beta1: f64,
    /// AdamW `beta2`.
    pub beta2: f64,
    /// Global gradient-norm clip (0 = off).
    pub grad_clip: f64,
    /// Curriculum: over the first `curriculum_steps` steps the largest prefix and gap grow
    /// linearly from 0 to the task's values, and each sequence holds a number of records drawn
    /// uniformly from 2 up to a cap that grows linearly to `n_records` (0 = no curriculum).
    pub curriculum_steps: usize,
    /// Evaluate every this many steps (and at the end).
    pub eval_every: usize,
    /// Evaluation sequences (a fixed held-out set drawn from its own seed stream).
    pub eval_samples: usize,
    /// Write a checkpoint every this many steps (and at the end).
    pub checkpoint_every: usize,
    /// Seed of initialisation and of every batch.
    pub seed: u64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            steps: 2500,
            batch_size: 16,
            lr: 3e-3,
            warmup_steps: 100,
            min_lr_ratio: 0.1,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.98,
            grad_clip: 1.0,
            curriculum_steps: 0,
            eval_every: 250,
            eval_samples: 256,
            checkpoint_every: 250,
            seed: 0,
        }
    }
}

impl TrainConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<()> {
        let at_least = |field: &str, v: usize, min: usize| -> Result<()> {
            if v < min {
                Err(Error::invalid(format!("train.{field}"), format!("must be at least {min}, got {v}")))
            } else {
                Ok(())
            }
        };
        at_least("steps", self.steps, 1)?;
        at_least("batch_size", self.batch_size, 1)?;
        at_least("eval_every", self.eval_every, 1)?;
        at_least("eval_samples", self.eval_samples, 1)?;
        at_least("checkpoint_every", self.checkpoint_every, 1)?;
        let in_range = |field: &str, v: f64, lo: f64, hi: f64, incl_lo: bool| -> Result<()> {
            let ok = v.is_finite() && (if incl_lo { v >= lo } else { v > lo }) && v <= hi;
            if ok {
                Ok(())
            } else {
                let open = if incl_lo { '[' } else { '(' };
                Err(Error::invalid(format!("train.{field}"), format!("must be in {open}{lo}, {hi}], got {v}")))
            }
        };
        in_range("lr", self.lr, 0.0, 10.0, false)?;
        in_range("min_lr_ratio", self.min_lr_ratio, 0.0, 1.0, true)?;
        in_range("weight_decay", self.weight_decay, 0.0, 1.0, true)?;
        in_range("beta1", self.beta1, 0.0, 0.999_999, true)?;
        in_range("beta2", self.beta2, 0.0, 0.999_999_9, true)?;
        in_range("grad_clip", self.grad_clip, 0.0, 1e6, true)?;
        Ok(())
    }

    /// Learning rate at step `step` (0-based): linear warm-up to `lr`, then cosine to
    /// `lr * min_lr_ratio` at the last step.
    pub fn lr_at(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let decay = self.steps.saturating_sub(self.warmup_steps).max(1) as f64;
        let p = ((step - self.warmup_steps) as f64 / decay).min(1.0);
        let cos = 0.5 * (1.0 + (std::f64::consts::PI * p).cos());
        self.lr * (self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cos)
    }
}

/// Everything a training run depends on (written to `config.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// The task distribution.
    pub task: TaskConfig,
    /// The model.
    pub model: ModelConfig,
    /// The optimiser and cadence.
    pub train: TrainConfig,
}

impl RunConfig {
    /// Checks each part and the constraints between them (the local window must be shorter
    /// than the sequence, so that retrieval has to go through compressed entries).
    pub fn validate(&self) -> Result<()> {
        self.task.validate()?;
        self.model.validate()?;
        self.train.validate()?;
        let t = self.task.seq_len();
        if !self.model.is_full() && self.model.local_window >= t {
            return Err(Error::invalid(
                "model.local_window",
                format!(
                    "must be shorter than the sequence ({t} tokens) so that retrieval goes \
                     through compressed entries, got {}",
                    self.model.local_window
                ),
            ));
        }
        Ok(())
    }

    /// Reads a JSON config; fields and sections left out take their defaults, unknown fields
    /// are errors.
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::invalid("config", e.to_string()))
    }
}
