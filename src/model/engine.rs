//! The training engine: what computes one batch's loss, counts and gradients, and the held-out
//! evaluation on the same engine. The loop ([`crate::model::train`]) is the executor and knows
//! engines only through [`TrainEngine`]; the candle decoder ([`crate::model::decoder`], autodiff,
//! the reference) and the fast decoder ([`crate::model::fast`], hand-derived) implement it.

use super::batch::{Batch, EVAL_STREAM};
use super::config::ModelConfig;
use super::record::{BatchScore, EvalReport};
use crate::task::TaskConfig;
use crate::Result;
use candle_core::backprop::GradStore;
use candle_core::Device;

/// One training step's result: the batch's score (before the update) and the gradient of every
/// parameter, keyed by the model's variables (what [`crate::model::optim::AdamW`] takes).
#[derive(Debug)]
pub struct EngineStep {
    /// Loss and counts of the batch.
    pub score: BatchScore,
    /// Gradients.
    pub grads: GradStore,
}

/// An implementation of the decoder's forward and backward pass over a model's parameters
/// (read at every call, so the optimiser, checkpoints and resume are the engine's business
/// no more than the data is).
pub trait TrainEngine {
    /// The engine's name in configs, metrics and on the command line (`candle`, `fast`).
    fn name(&self) -> &'static str;

    /// `Ok` when this engine implements `model`; otherwise one error naming `train.engine`,
    /// the preset and what is supported.
    fn supports(model: &ModelConfig) -> Result<()>
    where
        Self: Sized;

    /// Loss, counts and gradients of `batch` at the parameters' current values.
    fn step(&mut self, batch: &Batch) -> Result<EngineStep>;

    /// Loss and counts of `batch` at the parameters' current values (no gradients).
    fn evaluate(&mut self, batch: &Batch) -> Result<BatchScore>;
}

/// Held-out evaluation on `engine`: `n` sequences of generator stream [`EVAL_STREAM`] of `seed`
/// (the full randomised task), in chunks of `chunk` sequences.
pub fn evaluate(
    engine: &mut dyn TrainEngine,
    task: &TaskConfig,
    seed: u64,
    n: usize,
    chunk: usize,
    step: usize,
) -> Result<EvalReport> {
    let samples = task.batch(seed, EVAL_STREAM, n);
    let scores = samples
        .chunks(chunk.max(1))
        .map(|part| engine.evaluate(&Batch::new(part, &Device::Cpu)?))
        .collect::<Result<Vec<_>>>()?;
    Ok(EvalReport::from_scores(step, &scores))
}
