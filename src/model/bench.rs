//! Timing of training steps without a run directory (`phasekv train --bench`), and the FLOP
//! count both engines and the PyTorch twin are measured against.

use super::batch::{training_batch, Batch};
use super::config::RunConfig;
use super::optim::AdamW;
use super::train::{engine_for, validate};
use super::weights::Model;
use crate::Result;
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Timing of training steps (forward, backward, optimiser update) without a run directory.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepBench {
    /// Kernel preset.
    pub preset: String,
    /// Engine timed (`candle` or `fast`).
    pub engine: String,
    /// Timed steps (after `warmup` untimed ones).
    pub steps: usize,
    /// Median seconds per step.
    pub median_s: f64,
    /// Mean seconds per step.
    pub mean_s: f64,
    /// Sequence tokens per step (`batch_size * seq_len`).
    pub tokens_per_step: usize,
    /// Tokens per second at the median step time.
    pub tokens_per_s: f64,
    /// Sequence length of the workload (what the PyTorch twin must match).
    pub seq_len: usize,
    /// Vocabulary size of the workload.
    pub vocab: usize,
    /// Floating-point operations of one step ([`step_flops`]).
    pub flops_per_step: f64,
    /// `flops_per_step / median_s / 1e9`.
    pub gflops: f64,
}

/// Floating-point operations of one training step, counted as 3x the forward matmuls (the
/// backward pass does two matmuls per forward one): per layer and token, the q/k/v/o and
/// SwiGLU projections and the scores and weighted sum over all `T` raw keys (both engines and
/// the PyTorch twin compute the full `T x T` matrix, masked), plus for a compressed preset the
/// compressor of every KV head ([`crate::kernel::forward_flops`]) and the scores and weighted
/// sum over its entries; the LM head at the scored positions. Norms, softmax, RoPE and the
/// optimiser are lower order and not counted.
pub fn step_flops(config: &RunConfig, scored_positions: usize) -> f64 {
    let m = &config.model;
    let (b, t) = (config.train.batch_size as f64, config.task.seq_len() as f64);
    let (d, dh, hq, hkv, ff) = (m.d_model as f64, m.d_head as f64, m.n_head as f64, m.n_kv_head as f64, m.d_ff as f64);
    let proj = 2.0 * d * dh * (2.0 * hq + 2.0 * hkv) + 3.0 * 2.0 * d * ff;
    let mut attn_keys = t;
    let mut per_seq_layer = 0.0;
    if !m.is_full() {
        if let Ok(spec) = m.kernel() {
            attn_keys += spec.geometry.num_windows(config.task.seq_len()) as f64;
            if let Ok(dims) = crate::kernel::KernelDims::new(m.d_model, m.d_head) {
                per_seq_layer = hkv * crate::kernel::forward_flops(&spec, dims, config.task.seq_len());
            }
        }
    }
    let attn = 2.0 * 2.0 * attn_keys * dh * hq;
    let forward = m.n_layer as f64 * (b * t * (proj + attn) + b * per_seq_layer)
        + scored_positions as f64 * 2.0 * d * config.task.vocab_size() as f64;
    3.0 * forward
}

/// Times `steps` training steps of `config` after `warmup` untimed ones (batches of steps
/// `0..warmup + steps`, same as training).
pub fn bench_steps(config: &RunConfig, warmup: usize, steps: usize) -> Result<StepBench> {
    validate(config)?;
    crate::limits::check_range("--bench", steps, 1, crate::limits::MAX_BENCH_STEPS)?;
    let device = Device::Cpu;
    let model = Model::new(config, &device)?;
    let mut engine = engine_for(config, &model)?;
    let tc = &config.train;
    let mut opt = AdamW::new(model.store.vars(), tc.beta1, tc.beta2, tc.weight_decay)?;
    let mut times = Vec::with_capacity(steps);
    let mut scored = 0usize;
    for step in 0..warmup + steps {
        let t0 = Instant::now();
        let batch = Batch::new(&training_batch(config, step), &device)?;
        scored = batch.idx.dim(0)?;
        let grads = engine.step(&batch)?.grads;
        opt.clipped_step(&grads, tc.lr_at(step), tc.grad_clip)?;
        if step >= warmup {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    let mean_s = times.iter().sum::<f64>() / times.len() as f64;
    times.sort_by(|a, b| a.total_cmp(b));
    let median_s = times[times.len() / 2];
    let tokens_per_step = tc.batch_size * config.task.seq_len();
    let flops_per_step = step_flops(config, scored);
    Ok(StepBench {
        preset: config.model.preset.clone(),
        engine: tc.engine.name().into(),
        steps,
        median_s,
        mean_s,
        tokens_per_step,
        tokens_per_s: tokens_per_step as f64 / median_s,
        seq_len: config.task.seq_len(),
        vocab: config.task.vocab_size(),
        flops_per_step,
        gflops: flops_per_step / median_s / 1e9,
    })
}
