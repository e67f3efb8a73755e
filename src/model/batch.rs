//! Batches: samples as tensors, the loss and exact-match counts of one batch, the training
//! step's loss and gradients on either engine, held-out evaluation, and the curriculum's batches.

use super::config::Engine;
use super::config::RunConfig;
use super::decoder::Decoder;
use super::fast::FastDecoder;
use super::weights::Model;
use crate::task::{Sample, TaskConfig};
use crate::{Error, Result};
use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

/// Generator stream of the held-out evaluation set (training streams are step numbers).
pub const EVAL_STREAM: u64 = u64::MAX;

/// A batch as tensors.
#[derive(Debug)]
pub struct Batch {
    /// Token ids `[B, T]`.
    pub tokens: Tensor,
    /// Flat positions `b * T + p` whose next token is an answer token, `[N]`, grouped by query
    /// (`val_len` consecutive positions per query).
    pub idx: Tensor,
    /// The answer tokens at those positions, `[N]`.
    pub targets: Tensor,
    /// Number of queries (`N / val_len`).
    pub n_queries: usize,
}

impl Batch {
    /// Tensors for `samples` (all of the task's sequence length).
    pub fn new(samples: &[Sample], device: &Device) -> Result<Self> {
        let b = samples.len();
        let t = samples.first().map(|s| s.tokens.len()).unwrap_or(0);
        let mut tokens = Vec::with_capacity(b * t);
        let mut idx = Vec::new();
        let mut targets = Vec::new();
        let mut n_queries = 0;
        for (bi, s) in samples.iter().enumerate() {
            if s.tokens.len() != t {
                return Err(Error::shape("batch", format!("{t} tokens"), s.tokens.len().to_string()));
            }
            tokens.extend_from_slice(&s.tokens);
            for q in s.answer_inputs() {
                n_queries += 1;
                for p in q {
                    idx.push((bi * t + p) as u32);
                    targets.push(s.tokens[p + 1]);
                }
            }
        }
        let n = idx.len();
        Ok(Batch {
            tokens: Tensor::from_vec(tokens, (b, t), device)?,
            idx: Tensor::from_vec(idx, n, device)?,
            targets: Tensor::from_vec(targets, n, device)?,
            n_queries,
        })
    }
}

/// Loss and accuracy of a model on one batch.
#[derive(Debug)]
pub struct BatchResult {
    /// Mean cross-entropy over answer tokens (a graph node when computed for training).
    pub loss: Tensor,
    /// Queries whose every answer token is the argmax (= greedy exact match).
    pub exact: usize,
    /// Answer tokens that are the argmax.
    pub token_hits: usize,
    /// Queries.
    pub queries: usize,
    /// Answer tokens.
    pub tokens: usize,
}

/// One training step's loss value, exact-match count, queries and gradients, computed by the
/// candle autodiff path (`fast` is `None`) or the fast engine.
pub(super) fn loss_and_grads(
    model: &Decoder,
    fast: Option<&mut FastDecoder>,
    batch: &Batch,
) -> Result<(f64, usize, usize, GradStore)> {
    match fast {
        None => {
            let r = evaluate_batch(model, batch)?;
            let loss = r.loss.to_scalar::<f32>()? as f64;
            Ok((loss, r.exact, r.queries, r.loss.backward()?))
        }
        Some(f) => {
            let out = f.step(batch)?;
            Ok((out.loss, out.exact, out.queries, f.grad_store(out.grads)?))
        }
    }
}

/// The fast engine of `model` when `config` selects it.
pub(super) fn engine_for(config: &RunConfig, model: &Model) -> Result<Option<FastDecoder>> {
    match config.train.engine {
        Engine::Candle => Ok(None),
        Engine::Fast => Ok(Some(FastDecoder::new(&config.model, config.task.vocab_size(), model.store.vars())?)),
    }
}

/// Loss and exact-match counts of `model` on `batch`.
pub fn evaluate_batch(model: &Decoder, batch: &Batch) -> Result<BatchResult> {
    let fwd = model.forward(&batch.tokens)?;
    let logits = model.logits_at(&fwd, &batch.idx)?;
    let loss = candle_nn::loss::cross_entropy(&logits, &batch.targets)?;
    let pred = logits.argmax(1)?.to_vec1::<u32>()?;
    let tgt = batch.targets.to_vec1::<u32>()?;
    let hits: Vec<bool> = pred.iter().zip(&tgt).map(|(a, b)| a == b).collect();
    let per = hits.len() / batch.n_queries.max(1);
    let exact = hits.chunks(per.max(1)).filter(|c| c.iter().all(|&h| h)).count();
    Ok(BatchResult {
        loss,
        exact,
        token_hits: hits.iter().filter(|&&h| h).count(),
        queries: batch.n_queries,
        tokens: hits.len(),
    })
}

/// An evaluation on the held-out set.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EvalReport {
    /// Steps completed when evaluated.
    pub step: usize,
    /// Mean cross-entropy over answer tokens.
    pub loss: f64,
    /// Exact-match accuracy over queries.
    pub accuracy: f64,
    /// Token accuracy over answer tokens.
    pub token_accuracy: f64,
    /// Number of queries evaluated.
    pub queries: usize,
}

/// Held-out evaluation of `model` on `n` sequences of generator stream [`EVAL_STREAM`] of
/// `seed` (the full randomised task), in chunks of `chunk` sequences.
pub fn evaluate(
    model: &Decoder,
    task: &TaskConfig,
    seed: u64,
    n: usize,
    chunk: usize,
    step: usize,
    device: &Device,
) -> Result<EvalReport> {
    let samples = task.batch(seed, EVAL_STREAM, n);
    let (mut loss, mut exact, mut hits, mut queries, mut tokens) = (0f64, 0, 0, 0, 0);
    for part in samples.chunks(chunk.max(1)) {
        let batch = Batch::new(part, device)?;
        let r = evaluate_batch(model, &batch)?;
        loss += r.loss.to_scalar::<f32>()? as f64 * r.tokens as f64;
        exact += r.exact;
        hits += r.token_hits;
        queries += r.queries;
        tokens += r.tokens;
    }
    Ok(EvalReport {
        step,
        loss: loss / tokens.max(1) as f64,
        accuracy: exact as f64 / queries.max(1) as f64,
        token_accuracy: hits as f64 / tokens.max(1) as f64,
        queries,
    })
}

/// The batch of step `step` (0-based), with the curriculum applied.
pub fn training_batch(config: &RunConfig, step: usize) -> Vec<Sample> {
    let task = &config.task;
    let c = config.train.curriculum_steps;
    let mut rng = {
        use rand::SeedableRng;
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(config.train.seed);
        r.set_stream(step as u64);
        r
    };
    if step >= c {
        return (0..config.train.batch_size).map(|_| task.sample(&mut rng)).collect();
    }
    use rand::Rng;
    let frac = step as f64 / c as f64;
    let pmax = (task.max_prefix as f64 * frac).round() as usize;
    let gmax = (task.max_gap as f64 * frac).round() as usize;
    let lo = task.n_records.min(2);
    let rmax = lo + ((task.n_records - lo) as f64 * frac).round() as usize;
    (0..config.train.batch_size)
        .map(|_| {
            let records = rng.random_range(lo..=rmax);
            let prefix = rng.random_range(0..=pmax);
            let gaps: Vec<usize> = (0..task.n_records).map(|_| rng.random_range(0..=gmax)).collect();
            task.sample_records(&mut rng, records, prefix, &gaps)
        })
        .collect()
}
