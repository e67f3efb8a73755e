//! The continuous co-primary phase test (`theory/phase-lab.md` §8.3): the answer's
//! teacher-forced negative log-probability `y = -ln(max(prob, PROB_FLOOR))` in a randomized
//! block design, `y = alpha[family] + b[position mod S] + e`, the F statistic for `b`, and its
//! p-value from random permutations of `y` within each phase family.
//!
//! A phase family holds the scored query's depth fixed across its members under both protocols
//! (§7.1.1), so the family is a block and depth is controlled exactly. Under the null that,
//! given its family, a prompt's score does not depend on the residue group it was shifted into,
//! the members' scores are exchangeable within the family and the permutation p-value is exact.
//! It needs no assumption about the heavy-tailed distribution of log-probabilities, and it
//! sees effects where accuracy is at the ceiling.
//!
//! Computation: with `X` the phase indicators centred within each family, the phase sum of
//! squares is `s' (X'X)^-1 s` with `s = X'y`; a within-family permutation leaves the
//! within-family sum of squares unchanged, so each round costs one pass over the prompts.

use super::config::PhaseTestConfig;
use super::pooled::SeedAgreement;
use crate::analysis::stats::PValue;
use crate::{Error, Result};
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The probability floor of the continuous test: `y = -ln(max(prob, PROB_FLOOR))` (§8.3).
pub const PROB_FLOOR: f64 = 1e-6;
/// Largest false-positive rate at `ALPHA` the continuous test may show on synthetic outcomes
/// with a depth effect and no phase effect (§8.3; checked in `tests/phase_test_v2.rs`).
pub const CONT_MAX_FALSE_POSITIVE: f64 = 0.015;

/// One prompt as the continuous test needs it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct NllRecord {
    /// The phase family (`id mod n` in the outcome files): the block.
    pub family: usize,
    /// Source-key position of the target (its phase is `position mod S`).
    pub position: usize,
    /// Teacher-forced probability of the answer.
    pub prob: f64,
}

/// The response of the continuous test: `-ln(max(prob, PROB_FLOOR))`.
pub fn nll(prob: f64) -> f64 {
    -prob.max(PROB_FLOOR).ln()
}

/// The continuous test of one model (one seed, one protocol).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContinuousTest {
    /// The stride `S`.
    pub stride: usize,
    /// Prompts.
    pub n: usize,
    /// Phase families (blocks).
    pub families: usize,
    /// Mean NLL per phase (nats).
    pub mean_nll: Vec<f64>,
    /// The F statistic for phase, families as blocks.
    pub statistic: f64,
    /// Numerator degrees of freedom (`S - 1` when every phase is present).
    pub df1: usize,
    /// Denominator degrees of freedom.
    pub df2: usize,
    /// Within-family permutation p-value.
    pub p: PValue,
}

/// The design of one seed: centred phase indicators, their Gram inverse, and the fixed sums.
struct Design {
    x: DMatrix<f64>,
    ginv: DMatrix<f64>,
    y: Vec<f64>,
    /// Prompt indices of each family (the permutation shuffles within these).
    blocks: Vec<Vec<usize>>,
    ss_within: f64,
    df1: usize,
    df2: usize,
}

impl Design {
    fn new(records: &[NllRecord], stride: usize) -> Result<Design> {
        if stride < 2 {
            return Err(Error::invalid("stride", format!("must be at least 2 for a phase test, got {stride}")));
        }
        if records.is_empty() {
            return Err(Error::invalid("records", "no prompts to test"));
        }
        if let Some(r) = records.iter().find(|r| !(r.prob >= 0.0 && r.prob <= 1.0)) {
            return Err(Error::invalid("prob", format!("must be in [0, 1], got {}", r.prob)));
        }
        let mut by_family: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, r) in records.iter().enumerate() {
            by_family.entry(r.family).or_default().push(i);
        }
        let blocks: Vec<Vec<usize>> = by_family.into_values().collect();
        let y: Vec<f64> = records.iter().map(|r| nll(r.prob)).collect();
        let n = records.len();
        let mut x = DMatrix::<f64>::zeros(n, stride - 1);
        let mut ss_within = 0.0;
        for b in &blocks {
            let mut share = vec![0f64; stride];
            for &i in b {
                share[records[i].position % stride] += 1.0 / b.len() as f64;
            }
            let mean = b.iter().map(|&i| y[i]).sum::<f64>() / b.len() as f64;
            ss_within += b.iter().map(|&i| (y[i] - mean).powi(2)).sum::<f64>();
            for &i in b {
                let ph = records[i].position % stride;
                for j in 1..stride {
                    x[(i, j - 1)] = f64::from(u8::from(ph == j)) - share[j];
                }
            }
        }
        let g = x.transpose() * &x;
        // Phases absent from every family's contrast (or aliased) make `g` singular.
        let ginv = g.clone().try_inverse().filter(|m| m.iter().all(|v| v.is_finite())).ok_or_else(|| {
            Error::invalid(
                "continuous phase test",
                "a phase has no contrast within the families (every family holds one phase, or a phase is missing)",
            )
        })?;
        let df1 = stride - 1;
        let df2 = n.checked_sub(blocks.len() + df1).filter(|&d| d > 0).ok_or_else(|| {
            Error::invalid(
                "continuous phase test",
                format!("{n} prompts in {} families leave no error degrees of freedom", blocks.len()),
            )
        })?;
        Ok(Design { x, ginv, y, blocks, ss_within, df1, df2 })
    }

    /// The F statistic of the scores `y` (a within-family permutation of the observed ones).
    fn f_of(&self, y: &[f64]) -> f64 {
        let s = self.x.tr_mul(&DVector::from_column_slice(y));
        let ss_phase = (s.transpose() * &self.ginv * &s)[(0, 0)].max(0.0);
        if self.ss_within <= 0.0 {
            return 0.0;
        }
        // Rounding can leave the error a hair below 0 when phase explains everything: floored
        // at 1e-12 of the within-family variation, the statistic stays finite (and ordered).
        let ss_error = (self.ss_within - ss_phase).max(1e-12 * self.ss_within);
        (ss_phase / self.df1 as f64) / (ss_error / self.df2 as f64)
    }

    /// Shuffles `buf` within every family (Fisher-Yates on the family's positions). `buf` holds
    /// a within-family permutation of the scores; a uniform shuffle of it is again uniform.
    fn permute(&self, rng: &mut ChaCha8Rng, buf: &mut [f64]) {
        for b in &self.blocks {
            for k in (1..b.len()).rev() {
                let j = rng.random_range(0..=k);
                buf.swap(b[k], b[j]);
            }
        }
    }
}

/// Relative tolerance of a permutation tie: permuted sums differ from the observed one by
/// rounding only when the permutation maps every score to an equal one.
const F_TIE: f64 = 1e-9;

fn count_at_least(obs: f64, reps: &[f64]) -> usize {
    reps.iter().filter(|&&f| f >= obs - F_TIE * (1.0 + obs.abs())).count()
}

fn mean_by_phase(records: &[NllRecord], stride: usize) -> Vec<f64> {
    let mut s = vec![0f64; stride];
    let mut c = vec![0f64; stride];
    for r in records {
        s[r.position % stride] += nll(r.prob);
        c[r.position % stride] += 1.0;
    }
    s.iter().zip(&c).map(|(a, b)| if *b > 0.0 { a / b } else { f64::NAN }).collect()
}

/// The continuous test of every seed (`seeds[i]` holds seed `i`'s prompts) and the pooled test
/// (§8.4): the pooled statistic sums the seeds' F statistics, each round permuting every seed
/// independently. `cfg.mc_rounds` permutations, seeded by `cfg.seed` (seed `i` on stream `i`).
pub fn pooled_continuous_test(
    seeds: &[Vec<NllRecord>],
    stride: usize,
    cfg: &PhaseTestConfig,
) -> Result<PooledContinuousTest> {
    cfg.check()?;
    if seeds.is_empty() {
        return Err(Error::invalid("seeds", "no seeds to pool"));
    }
    let designs: Vec<Design> = seeds.iter().map(|r| Design::new(r, stride)).collect::<Result<_>>()?;
    let mut pooled_reps = vec![0f64; cfg.mc_rounds];
    let mut tests = Vec::with_capacity(seeds.len());
    for (i, (d, records)) in designs.iter().zip(seeds).enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        rng.set_stream(i as u64);
        let obs = d.f_of(&d.y);
        let mut buf = d.y.clone();
        let reps: Vec<f64> = (0..cfg.mc_rounds)
            .map(|_| {
                d.permute(&mut rng, &mut buf);
                d.f_of(&buf)
            })
            .collect();
        pooled_reps.iter_mut().zip(&reps).for_each(|(a, b)| *a += b);
        tests.push(ContinuousTest {
            stride,
            n: records.len(),
            families: d.blocks.len(),
            mean_nll: mean_by_phase(records, stride),
            statistic: obs,
            df1: d.df1,
            df2: d.df2,
            p: PValue::resampled(count_at_least(obs, &reps), cfg.mc_rounds),
        });
    }
    let statistic: f64 = tests.iter().map(|t| t.statistic).sum();
    let p = PValue::resampled(count_at_least(statistic, &pooled_reps), cfg.mc_rounds);
    let per_seed: Vec<PValue> = tests.iter().map(|t| t.p).collect();
    let agreement = SeedAgreement::new(p, &per_seed, cfg.alpha);
    Ok(PooledContinuousTest { stride, seeds: tests, statistic, p, agreement })
}

/// The continuous test of one model ([`pooled_continuous_test`] of one seed, whose pooled p is
/// the seed's).
pub fn continuous_test(records: &[NllRecord], stride: usize, cfg: &PhaseTestConfig) -> Result<ContinuousTest> {
    let mut pooled = pooled_continuous_test(std::slice::from_ref(&records.to_vec()), stride, cfg)?;
    Ok(pooled.seeds.remove(0))
}

/// The continuous test over seeds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PooledContinuousTest {
    /// The stride.
    pub stride: usize,
    /// One test per seed, in the order given.
    pub seeds: Vec<ContinuousTest>,
    /// Sum of the per-seed F statistics.
    pub statistic: f64,
    /// The pooled permutation p-value.
    pub p: PValue,
    /// The aggregation rule at `cfg.alpha` (§8.4 runs it at `ALPHA / 2`).
    pub agreement: SeedAgreement,
}
