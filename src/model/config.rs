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
    /// Kernel preset of every attention layer (`full` = ordinary causal attention), or the name
    /// of the custom kernel [`ModelConfig::spec`] when there is one.
    pub preset: String,
    /// A kernel spec that is no preset (`phasekv train --spec FILE`, a plan arm's `spec`): the
    /// kernel of every attention layer, written into `config.json` whole so that the run
    /// directory keeps it. Absent (and left out of the JSON, so that the configs and identities
    /// of preset runs are unchanged) when the kernel is the preset `preset` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<KernelSpec>,
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
            spec: None,
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
        crate::kernel::spec::presets::is_baseline(&self.preset)
    }

    /// The kernel of every KV head of layer `layer`: the layer's kernel (a layout's entry for
    /// that layer, [`KernelSpec::layer`]) on that head's grid ([`KernelSpec::for_head`]; all
    /// alike unless the spec staggers). The one per-layer resolution every engine asks.
    pub fn head_specs(&self, spec: &KernelSpec, layer: usize) -> Result<Vec<KernelSpec>> {
        (0..self.n_kv_head).map(|h| spec.for_head(layer, self.n_layer, h, self.n_kv_head)).collect()
    }

    /// The kernel of every attention layer: [`ModelConfig::spec`] when the config carries one,
    /// the preset `preset` names otherwise. The one place a model's kernel is resolved from its
    /// name; every consumer (engines, lab, reproduction, report) reads the stride, window and
    /// grid from what it returns. A custom spec must carry `preset` as its name and must not
    /// take a listed preset's name for another kernel (its results would be reported under
    /// that preset).
    pub fn kernel(&self) -> Result<KernelSpec> {
        let listed = KernelSpec::preset(&self.preset);
        let Some(spec) = &self.spec else { return listed };
        let ok = |c: char| c.is_ascii_alphanumeric() || "-_.@".contains(c);
        if spec.name.is_empty() || spec.name.len() > 64 || !spec.name.chars().all(ok) || spec.name.starts_with('.') {
            return Err(Error::invalid(
                "spec.name",
                format!(
                    "{:?} must be 1 to 64 letters, digits or -_.@, not starting with a dot (it names run directories)",
                    spec.name
                ),
            ));
        }
        if spec.name != self.preset {
            return Err(Error::invalid(
                "model.preset",
                format!("{:?} must be the name of the config's kernel spec, {:?}", self.preset, spec.name),
            ));
        }
        if listed.is_ok_and(|p| p != *spec) {
            return Err(Error::invalid(
                "spec.name",
                format!(
                    "{:?} is a listed preset with other knobs; name the custom kernel otherwise (e.g. {:?})",
                    spec.name,
                    format!("{}-custom", spec.name)
                ),
            ));
        }
        spec.check_deserialized()?;
        Ok(spec.clone())
    }

    /// This model on kernel `spec`: `preset` becomes the spec's name, and the spec is carried
    /// whole ([`ModelConfig::spec`]) unless it is exactly the listed preset of that name (then
    /// the config is that preset's, with its identity).
    pub fn set_kernel(&mut self, spec: KernelSpec) {
        self.preset = spec.name.clone();
        self.spec = (!spec.is_listed()).then_some(spec);
    }

    /// The stride phases are folded by: `None` for the uncompressed baseline. For a layer
    /// layout, the representative layer's (the smallest stride among its layers,
    /// `theory/kernels.md`, "Layer layouts"), which is the layout spec's own geometry.
    pub fn phase_stride(&self) -> Result<Option<usize>> {
        if self.is_full() {
            return Ok(None);
        }
        Ok(Some(self.kernel()?.geometry.stride()))
    }

    /// Checks every field (and that the kernel resolves: [`ModelConfig::kernel`]).
    pub fn validate(&self) -> Result<()> {
        let spec = self.kernel()?;
        use crate::limits::*;
        let range = |field: &str, v: usize, min: usize, max: usize| check_range(&format!("model.{field}"), v, min, max);
        range("d_model", self.d_model, 1, MAX_WIDTH)?;
        range("n_layer", self.n_layer, 1, MAX_LAYERS)?;
        range("n_head", self.n_head, 1, MAX_HEADS)?;
        range("n_kv_head", self.n_kv_head, 1, MAX_HEADS)?;
        range("d_head", self.d_head, 2, MAX_D_HEAD)?;
        // What the kernel needs of the head width (DeepSeek-V4.1 rotates 64 channels of each
        // entry, so its presets need d_head >= 64): refused here, not when the model is built.
        spec.validate_for(self.d_head)
            .map_err(|e| Error::invalid("model.d_head", format!("{} for preset {}: {e}", self.d_head, self.preset)))?;
        range("d_ff", self.d_ff, 1, MAX_WIDTH)?;
        range("local_window", self.local_window, 1, MAX_SEQ_LEN)?;
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
        spec.check_stagger_shape(self.n_layer, self.n_kv_head)?;
        let len = spec.layout_len();
        if !self.n_layer.is_multiple_of(len) {
            return Err(Error::invalid(
                "model.n_layer",
                format!(
                    "is {}, but kernel '{}' lays out {len} layer kernels; allowed: a multiple of {len} (every \
                     layer kernel of the layout in the model, the layout repeated whole)",
                    self.n_layer, self.preset
                ),
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
    /// Which implementation computes the loss, the gradients and the evaluations ([`Engine`]).
    /// Always written to the JSON (every committed run names it); a config file that leaves it
    /// out takes [`Engine::default`], the one engine default, as `phasekv train` and
    /// [`RunConfig::recommended`] do. Run directories written before the field existed (the
    /// candle runs of `theory/training-runs/`) carry no identity, and their `metrics.json` says
    /// which engine trained them ([`crate::model::Metrics::engine`], absent = candle).
    pub engine: Engine,
}

/// The implementation of a training step's forward and backward pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// candle autodiff (the reference the fast engine's gradients are tested against; every
    /// preset; chosen explicitly).
    Candle,
    /// The hand-derived f32 CPU path of [`crate::model::fast`], every preset
    /// ([`crate::model::fast::SUPPORTED`]), 3-4x candle's step: the one default, of a config
    /// file that names no engine, of [`RunConfig::recommended`] and of `phasekv train`.
    #[default]
    Fast,
}

impl Engine {
    /// The name used in configs, metrics and on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Engine::Candle => "candle",
            Engine::Fast => "fast",
        }
    }
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
            engine: Engine::default(),
        }
    }
}

impl TrainConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<()> {
        use crate::limits::*;
        let range = |field: &str, v: usize, min: usize, max: usize| check_range(&format!("train.{field}"), v, min, max);
        range("steps", self.steps, 1, MAX_STEPS)?;
        range("warmup_steps", self.warmup_steps, 0, MAX_STEPS)?;
        range("curriculum_steps", self.curriculum_steps, 0, MAX_STEPS)?;
        range("batch_size", self.batch_size, 1, MAX_BATCH)?;
        range("eval_every", self.eval_every, 1, MAX_STEPS)?;
        range("eval_samples", self.eval_samples, 1, MAX_EVAL_SAMPLES)?;
        range("checkpoint_every", self.checkpoint_every, 1, MAX_STEPS)?;
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

/// A continuation of a finished run: steps `start..end` on the learning-rate schedule
/// [`Extension::lr_at`] (a warm restart: `warmup_steps` of linear warm-up to `peak_lr`, then
/// cosine decay to `final_lr` at step `end`), from the run's final checkpoint with the data
/// stream continued. The training-success rule of `theory/phase-lab.md` §8.2
/// ([`crate::analysis::training`]) says when and with which numbers; [`crate::model::extend()`]
/// runs it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Extension {
    /// Which extension (1-based).
    pub index: usize,
    /// The first step of the extension.
    pub start: usize,
    /// Its last step plus one (`start + steps`).
    pub end: usize,
    /// Warm-up steps (the recipe's).
    pub warmup_steps: usize,
    /// Peak rate.
    pub peak_lr: f64,
    /// Final rate.
    pub final_lr: f64,
}

impl Extension {
    /// The learning rate at `step` (`start <= step < end`).
    pub fn lr_at(&self, step: usize) -> f64 {
        let k = step.saturating_sub(self.start);
        if k < self.warmup_steps {
            return self.peak_lr * (k + 1) as f64 / self.warmup_steps as f64;
        }
        let decay = (self.end - self.start).saturating_sub(self.warmup_steps).max(1) as f64;
        let p = ((k - self.warmup_steps) as f64 / decay).min(1.0);
        let cos = 0.5 * (1.0 + (std::f64::consts::PI * p).cos());
        self.final_lr + (self.peak_lr - self.final_lr) * cos
    }

    /// Steps of the extension (`end - start`).
    pub fn steps(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// `Ok` when the schedule can run: `index` at least 1, `start < end <= start + MAX_STEPS`,
    /// `warmup_steps <= end - start`, rates finite, `peak_lr` in (0, 10], `final_lr` in
    /// [0, `peak_lr`]; otherwise one error naming the field, its value and the range.
    pub fn validate(&self) -> Result<()> {
        use crate::limits::{check_range, MAX_STEPS};
        if self.index == 0 {
            return Err(Error::invalid("extension.index", "must be at least 1, got 0"));
        }
        if self.end <= self.start || self.end - self.start > MAX_STEPS {
            return Err(Error::invalid(
                "extension.end",
                format!("must be in ({}, {}], got {}", self.start, self.start + MAX_STEPS, self.end),
            ));
        }
        check_range("extension.warmup_steps", self.warmup_steps, 0, self.end - self.start)?;
        if !(self.peak_lr.is_finite() && self.peak_lr > 0.0 && self.peak_lr <= 10.0) {
            return Err(Error::invalid("extension.peak_lr", format!("must be in (0, 10], got {}", self.peak_lr)));
        }
        if !(self.final_lr.is_finite() && (0.0..=self.peak_lr).contains(&self.final_lr)) {
            return Err(Error::invalid(
                "extension.final_lr",
                format!("must be in [0, {}] (the peak), got {}", self.peak_lr, self.final_lr),
            ));
        }
        Ok(())
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
    /// What `phasekv train` trains without `--config`: the recorded defaults on the task and
    /// recipe of the committed reproduction (`plans/full.json`, the second pre-registration's,
    /// `theory/phase-lab.md` §8.1: v1's task of §7.1.1, the query block right after the records
    /// with a filler tail of up to 24 tokens and the first query scored, with the records packed,
    /// `max_gap` 0; recipe R2, 300 warm-up steps of 3 000) on the default engine.
    /// [`RunConfig::default`] stays the serde default (a config file's missing fields, and with
    /// them the identity of every run recorded before these fields existed);
    /// `tests/train_cli.rs` keeps this config equal to the plan's.
    pub fn recommended() -> Self {
        let mut c = RunConfig::default();
        c.task.query_placement = crate::task::QueryPlacement::AfterRecords;
        c.task.max_tail = 24;
        c.task.scored_query = crate::task::ScoredQuery::First;
        c.task.max_gap = 0;
        c.train.warmup_steps = 300;
        c.train.steps = 3000;
        c
    }

    /// Checks each part and the constraints between them (the local window must be shorter
    /// than the sequence, so that retrieval has to go through compressed entries). Whether the
    /// engine implements the model is the engine's to say: [`crate::model::validate`] checks
    /// both.
    pub fn validate(&self) -> Result<()> {
        use crate::limits::*;
        self.task.validate()?;
        self.model.validate()?;
        self.train.validate()?;
        let t = self.task.seq_len();
        if !self.model.is_full() {
            // Degenerate geometry: a window or stride longer than the sequence leaves no
            // compressed entry, and the run would train a local-window model under the
            // preset's name (checked on every layer's kernel of a layout).
            let spec = self.model.kernel()?;
            for (l, k) in spec.distinct_layers(self.model.n_layer) {
                let g = k.geometry;
                let (w, s) = (g.window(), g.stride());
                if w > t || s > t || g.num_windows(t) == 0 {
                    let layer = if spec.is_layout() { format!(" layer {l} kernel {}", k.name) } else { String::new() };
                    return Err(Error::invalid(
                        "model.preset",
                        format!(
                            "{}{layer} (W = {w}, S = {s}) gives {} compressed entries on the task's {t}-token \
                             sequences; W and S must be at most the sequence length",
                            self.model.preset,
                            g.num_windows(t)
                        ),
                    ));
                }
            }
        }
        check_product("model parameters", self.parameter_estimate(), MAX_PARAMS)?;
        check_product("activations per step", self.activation_floats(), MAX_ACTIVATION_FLOATS)?;
        check_product("train.eval_samples x sequence length", product(&[self.train.eval_samples, t]), MAX_HELD_TOKENS)?;
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

    /// Parameters of the decoder, estimated from the sizes (embedding and output head, the
    /// attention and MLP matrices of every block); `None` when the arithmetic overflows.
    pub fn parameter_estimate(&self) -> Option<u64> {
        let m = &self.model;
        let v = self.task.vocab_size() as u64;
        let d = m.d_model as u64;
        let attn = (d * m.d_head as u64).checked_mul(2 * m.n_head as u64 + 2 * m.n_kv_head as u64)?;
        let mlp = d.checked_mul(3 * m.d_ff as u64)?;
        let block = attn.checked_add(mlp)?.checked_add(4 * d)?;
        v.checked_mul(2 * d)?.checked_add(block.checked_mul(m.n_layer as u64)?)
    }

    /// f32 values one training step holds at its peak, estimated: per layer, batch and token,
    /// the hidden states, the MLP, the heads' queries, keys and values, the attention scores
    /// over the keys a query may see (the sequence, plus the compressed entries for a kernel
    /// preset), counted 16 times (candle keeps the masked scores, the softmax and their
    /// gradients), and the compressed windows (`ceil(W / S)` copies of each key and value).
    /// Calibrated with `train --bench 1` on 965-token sequences (`max_prefix` 900), batch 16:
    /// `full` 6 711 MiB peak RSS measured, 7 411 MiB estimated; `w8s4` 9 027 MiB measured,
    /// 9 250 MiB estimated. `None` when the arithmetic overflows.
    pub fn activation_floats(&self) -> Option<u64> {
        let m = &self.model;
        let t = self.task.checked_seq_len()? as u64;
        let (copies, entries) = if m.is_full() {
            (0, 0)
        } else {
            // `None` (no estimate) only for a kernel that does not resolve, which
            // [`RunConfig::validate`] refuses, naming it, before it asks for this estimate.
            let g = m.kernel().ok()?.geometry;
            (g.window().div_ceil(g.stride()) as u64, g.num_windows(t as usize) as u64)
        };
        let heads = (m.n_head as u64 + 2 * m.n_kv_head as u64) * m.d_head as u64;
        let per_token = (8 * m.d_model as u64)
            .checked_add(3 * m.d_ff as u64)?
            .checked_add(heads)?
            .checked_add((16 * m.n_head as u64).checked_mul(t.checked_add(entries)?)?)?
            .checked_add((2 * m.n_kv_head as u64 * m.d_head as u64).checked_mul(copies)?)?;
        per_token.checked_mul(t)?.checked_mul(self.train.batch_size as u64)?.checked_mul(m.n_layer as u64)
    }

    /// Reads a JSON config; fields and sections left out take their defaults, unknown fields
    /// are errors, and anything but a JSON object (`[]`, a number) is refused.
    pub fn from_json(text: &str) -> Result<Self> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Error::invalid("config", e.to_string()))?;
        if !value.is_object() {
            return Err(Error::invalid("config", "must be a JSON object with sections task, model, train"));
        }
        serde_json::from_value(value).map_err(|e| Error::invalid("config", e.to_string()))
    }

    /// Reads and parses a config file (a regular file of at most
    /// [`crate::limits::MAX_JSON_BYTES`]); every error names the file.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = crate::limits::read_text(path, crate::limits::MAX_JSON_BYTES)?;
        Self::from_json(&text).map_err(|e| Error::File { path: path.to_path_buf(), reason: e.to_string() })
    }

    /// The run's identity: a hash of its config as canonical JSON (sorted keys), recorded in
    /// `metrics.json` and checked by every analysis of the run.
    pub fn identity(&self) -> String {
        let text = serde_json::to_value(self).map(|v| v.to_string()).unwrap_or_default();
        crate::limits::content_hash(text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calibration quoted on [`RunConfig::activation_floats`] (estimates in MiB of f32).
    #[test]
    fn activation_estimate_matches_its_calibration() {
        let mib = |preset: &str| {
            let mut c = RunConfig::default();
            c.task.max_prefix = 900;
            c.model.preset = preset.into();
            assert_eq!(c.task.seq_len(), 965);
            (c.activation_floats().unwrap() * 4) as f64 / (1u64 << 20) as f64
        };
        assert_eq!(mib("full").round(), 7411.0);
        assert_eq!(mib("w8s4").round(), 9250.0);
        // Both are accepted; the default config is far below the bound.
        assert!(RunConfig::default().activation_floats().unwrap() < crate::limits::MAX_ACTIVATION_FLOATS / 50);
    }

    /// A layer layout repeats whole in the model, and every layer's kernel must hold an entry
    /// on the task's sequences: both refused in one line naming the field.
    #[test]
    fn a_layout_model_needs_whole_layouts_and_sequences_that_hold_every_layer() {
        let mut c = RunConfig::recommended();
        c.model.preset = "dsv4-layout".into();
        c.validate().unwrap();
        assert_eq!(c.model.phase_stride().unwrap(), Some(4), "the representative (CSA) layer's stride");
        // The lab's sequences (98 tokens) hold 6 HCA16 entries and 24 CSA entries per layer.
        let spec = c.model.kernel().unwrap();
        let t = c.task.seq_len();
        assert_eq!((t, spec.layer(1).geometry.num_windows(t), spec.layer(0).geometry.num_windows(t)), (98, 6, 24));
        c.model.n_layer = 3;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("model.n_layer") && e.contains("is 3") && e.contains("multiple of 2"), "{e}");
        c.model.n_layer = 4;
        c.validate().unwrap();
        let heads: Vec<_> =
            (0..4).map(|l| c.model.head_specs(&c.model.kernel().unwrap(), l).unwrap()[0].name.clone()).collect();
        assert_eq!(heads, ["dsv4-csa", "dsv4-hca16", "dsv4-csa", "dsv4-hca16"]);
        // Sequences of 14 tokens hold CSA entries but no HCA16 entry: layer 1 is named.
        c.task = TaskConfig { max_prefix: 0, max_tail: 0, n_records: 2, n_queries: 2, ..c.task.clone() };
        c.model.local_window = 2;
        assert!(c.task.seq_len() < 16, "{}", c.task.seq_len());
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("model.preset") && e.contains("layer 1 kernel dsv4-hca16"), "{e}");
    }
}
