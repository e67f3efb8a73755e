//! The literal vector model (T-2, T-3): sampled contexts and the Monte-Carlo loss, valid for any `eps`.

use super::oracle_gates::OracleGates;
use super::params::TaskParams;
use crate::numeric::softmax_into;
use crate::theory::vocab::Vocabulary;
use crate::{Error, Result};
use nalgebra::DVector;
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Per-query outcome of the literal vector model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueryOutcome {
    /// Cross-entropy `-log softmax(z)_{y*}`.
    pub loss: f64,
    /// Whether `argmax_y z_y = y*` (strictly: ties count as wrong).
    pub correct: bool,
    /// `softmax(z)_{y*}`.
    pub target_prob: f64,
}

/// Draw a context: `L*S` distinct token ids, uniformly without replacement (row-major `[l][r]`).
pub fn sample_context(p: &TaskParams, rng: &mut impl Rng) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..p.vocab).collect();
    let k = p.chunks * p.stride;
    for i in 0..k {
        let j = rng.random_range(i..p.vocab);
        ids.swap(i, j);
    }
    ids.truncate(k);
    ids
}

/// The literal vector model (T-2, T-3) on one context: compress every chunk with the gates,
/// then answer all `L (S-1)` queries with full `d`-dimensional inner products against the
/// whole vocabulary. Returns outcomes in order `(l*, r*)`, `r* = 0..S-2`.
pub fn literal_context(
    p: &TaskParams,
    vocab: &Vocabulary,
    g: &OracleGates,
    context: &[usize],
) -> Result<Vec<QueryOutcome>> {
    p.validate()?;
    g.check(p)?;
    if vocab.len() != p.vocab {
        return Err(Error::shape("vocabulary", format!("N = {}", p.vocab), format!("{}", vocab.len())));
    }
    let (hh, ll, ss) = (p.heads, p.chunks, p.stride);
    let x = &vocab.embeddings;
    let d = vocab.dim();
    // k_{h,l} = sum_r pK_{h,l}(r) x_{l,r}, v_{h,l} likewise (T-2).
    let mut keys = vec![DVector::<f64>::zeros(d); hh * ll];
    let mut vals = vec![DVector::<f64>::zeros(d); hh * ll];
    for h in 0..hh {
        for l in 0..ll {
            for r in 0..ss {
                let col = x.column(context[l * ss + r]);
                keys[h * ll + l] += g.key[g.idx(h, l, r)] * col;
                vals[h * ll + l] += g.value[g.idx(h, l, r)] * col;
            }
        }
    }
    let mut out = Vec::with_capacity(ll * (ss - 1));
    let mut att = vec![0.0; ll];
    for lq in 0..ll {
        for rq in 0..ss - 1 {
            let q = x.column(context[lq * ss + rq]);
            let target = context[lq * ss + rq + 1];
            let mut o = DVector::<f64>::zeros(d);
            for h in 0..hh {
                // a_{h,l} = softmax_l(beta q.k_{h,l}) (T-3)
                let logits: Vec<f64> = (0..ll).map(|l| p.beta * q.dot(&keys[h * ll + l])).collect();
                softmax_into(&logits, &mut att);
                for l in 0..ll {
                    o += att[l] * &vals[h * ll + l];
                }
            }
            // z_y = gamma y.o for every y in V; loss = -log softmax(z)_{y*}
            let z = x.tr_mul(&o) * p.gamma;
            let lse = crate::numeric::log_sum_exp(z.iter().copied());
            let zt = z[target];
            let correct = z.iter().enumerate().all(|(i, &v)| i == target || v < zt);
            out.push(QueryOutcome { loss: lse - zt, correct, target_prob: (zt - lse).exp() });
        }
    }
    Ok(out)
}

/// A Monte Carlo estimate over sampled contexts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MonteCarlo {
    /// Mean loss over contexts (each context averaged over all its queries).
    pub mean: f64,
    /// Standard error of the mean over contexts (0 when every context gives the same loss).
    pub std_err: f64,
    /// Number of contexts.
    pub contexts: usize,
}

/// Monte Carlo estimate of `F` with the literal vector model (T-2, T-3) over `contexts`
/// seeded contexts; valid for any `eps`.
pub fn monte_carlo_loss(
    p: &TaskParams,
    vocab: &Vocabulary,
    g: &OracleGates,
    contexts: usize,
    seed: u64,
) -> Result<MonteCarlo> {
    if contexts == 0 {
        return Err(Error::invalid("contexts", "need at least 1 context, got 0"));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut per = Vec::with_capacity(contexts);
    for _ in 0..contexts {
        let ctx = sample_context(p, &mut rng);
        let outs = literal_context(p, vocab, g, &ctx)?;
        per.push(outs.iter().map(|o| o.loss).sum::<f64>() / outs.len() as f64);
    }
    let n = per.len() as f64;
    let mean = per.iter().sum::<f64>() / n;
    let var = if per.len() > 1 { per.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    Ok(MonteCarlo { mean, std_err: (var / n).sqrt(), contexts })
}
