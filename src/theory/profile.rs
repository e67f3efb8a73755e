//! Phase profile of a model (theory/induction-model.md §5, eq. T-10): retrieval accuracy and
//! target probability by query offset and by position in the context.
//!
//! At `eps = 0` the readout of context token `(l, r)` is `gamma (H kappa + U_{l,r})` and of a
//! distractor `gamma H kappa`, so retrieval is correct iff `U_{l*,r*+1}` is strictly larger
//! than every other `U_{l,r}` and (when distractors exist) than 0. This is exact for every
//! context; [`phase_profile_mc`] measures the same with the literal vector model at any eps.

use super::task::{literal_context, sample_context, OracleGates, TaskParams};
use super::vocab::Vocabulary;
use crate::{Error, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Retrieval statistics at one query position.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PositionStat {
    /// Chunk (1-based).
    pub chunk: usize,
    /// Query offset (1-based, `1..S-1`).
    pub offset: usize,
    /// Position in the context (1-based, `(chunk-1) S + offset`).
    pub position: usize,
    /// Retrieval accuracy (argmax of the logits is the target).
    pub accuracy: f64,
    /// Mean probability of the target.
    pub target_prob: f64,
}

/// A phase profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseProfile {
    /// One entry per query position `(l*, r*)`.
    pub positions: Vec<PositionStat>,
    /// Accuracy by query offset (1-based index `r - 1`), averaged over chunks.
    pub accuracy_by_offset: Vec<f64>,
    /// Target probability by query offset, averaged over chunks.
    pub target_prob_by_offset: Vec<f64>,
    /// Chance level `1/N`.
    pub chance: f64,
}

fn by_offset(p: &TaskParams, positions: &[PositionStat]) -> (Vec<f64>, Vec<f64>) {
    let r = p.stride - 1;
    let mut acc = vec![0.0; r];
    let mut prob = vec![0.0; r];
    for s in positions {
        acc[s.offset - 1] += s.accuracy / p.chunks as f64;
        prob[s.offset - 1] += s.target_prob / p.chunks as f64;
    }
    (acc, prob)
}

/// Exact phase profile at `eps = 0` for oracle gates (T-10).
pub fn phase_profile(p: &TaskParams, g: &OracleGates) -> Result<PhaseProfile> {
    p.validate()?;
    if g.key.len() != p.heads * p.chunks * p.stride
        || g.heads != p.heads
        || g.chunks != p.chunks
        || g.stride != p.stride
    {
        return Err(Error::shape(
            "oracle gates",
            format!("[{}][{}][{}]", p.heads, p.chunks, p.stride),
            format!("[{}][{}][{}]", g.heads, g.chunks, g.stride),
        ));
    }
    let (hh, ll, ss) = (p.heads, p.chunks, p.stride);
    let mut positions = Vec::new();
    let mut u = vec![0.0; ll * ss];
    for lq in 0..ll {
        for rq in 0..ss - 1 {
            for l in 0..ll {
                for r in 0..ss {
                    let mut acc = 0.0;
                    for h in 0..hh {
                        let c = g.key[g.idx(h, lq, rq)];
                        let e = (p.beta * (c - 1.0)).exp();
                        let den = e + (ll - 1) as f64 * (-p.beta).exp();
                        let a = if l == lq { e / den } else { (-p.beta).exp() / den };
                        acc += a * g.value[g.idx(h, l, r)];
                    }
                    u[l * ss + r] = acc;
                }
            }
            let t = lq * ss + rq + 1;
            let mut correct = u.iter().enumerate().all(|(i, &v)| i == t || v < u[t]);
            if p.distractors() > 0.0 {
                correct &= u[t] > 0.0;
            }
            let m = u.iter().cloned().fold(0.0, f64::max) * p.gamma;
            let z: f64 = u.iter().map(|v| (p.gamma * v - m).exp()).sum::<f64>() + p.distractors() * (-m).exp();
            positions.push(PositionStat {
                chunk: lq + 1,
                offset: rq + 1,
                position: lq * ss + rq + 1,
                accuracy: if correct { 1.0 } else { 0.0 },
                target_prob: (p.gamma * u[t] - m).exp() / z,
            });
        }
    }
    let (accuracy_by_offset, target_prob_by_offset) = by_offset(p, &positions);
    Ok(PhaseProfile { positions, accuracy_by_offset, target_prob_by_offset, chance: 1.0 / p.vocab as f64 })
}

/// Phase profile measured with the literal vector model over `contexts` seeded contexts
/// (any eps).
pub fn phase_profile_mc(
    p: &TaskParams,
    vocab: &Vocabulary,
    g: &OracleGates,
    contexts: usize,
    seed: u64,
) -> Result<PhaseProfile> {
    if contexts == 0 {
        return Err(Error::invalid("contexts", "need at least 1 context, got 0"));
    }
    let (ll, ss) = (p.chunks, p.stride);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut acc = vec![0.0; ll * (ss - 1)];
    let mut prob = vec![0.0; ll * (ss - 1)];
    for _ in 0..contexts {
        let ctx = sample_context(p, &mut rng);
        for (i, o) in literal_context(p, vocab, g, &ctx)?.iter().enumerate() {
            acc[i] += if o.correct { 1.0 } else { 0.0 } / contexts as f64;
            prob[i] += o.target_prob / contexts as f64;
        }
    }
    let mut positions = Vec::new();
    for lq in 0..ll {
        for rq in 0..ss - 1 {
            let i = lq * (ss - 1) + rq;
            positions.push(PositionStat {
                chunk: lq + 1,
                offset: rq + 1,
                position: lq * ss + rq + 1,
                accuracy: acc[i],
                target_prob: prob[i],
            });
        }
    }
    let (accuracy_by_offset, target_prob_by_offset) = by_offset(p, &positions);
    Ok(PhaseProfile { positions, accuracy_by_offset, target_prob_by_offset, chance: 1.0 / p.vocab as f64 })
}
