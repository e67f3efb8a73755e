//! Batches: samples as tensors ([`Batch`]), the seeded batch of each training step with the
//! curriculum applied ([`training_batch`]), and the generator stream of the held-out set. Data
//! only: which engine scores a batch is the caller's choice ([`crate::model::engine`]).

use super::config::RunConfig;
use crate::task::Sample;
use crate::{Error, Result};
use candle_core::{Device, Tensor};

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
