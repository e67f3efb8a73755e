//! The phase test over seeds: the pooled statistic and how many seeds must agree.

use super::config::{PhaseRecord, PhaseTestConfig, TestMethod};
use super::logistic::{chi2_p, resampled_p};
use super::one_seed::{prepare, PhaseTest, Prepared};
use crate::analysis::stats::PValue;
use crate::{Error, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// How many of `n` seeds must reject on their own for an effect to hold: two thirds, rounded up
/// (2 of 3, 3 of 4, 4 of 5).
pub fn required_seeds(n: usize) -> usize {
    (2 * n).div_ceil(3)
}

/// The agreement of the pooled test and the per-seed tests at `alpha`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedAgreement {
    /// Significance level.
    pub alpha: f64,
    /// Seeds tested.
    pub seeds: usize,
    /// Seeds whose own test rejects.
    pub significant_seeds: usize,
    /// Seeds that must reject ([`required_seeds`]).
    pub required: usize,
    /// Whether the pooled test rejects.
    pub pooled_significant: bool,
}

impl SeedAgreement {
    /// From the pooled p-value and the per-seed p-values.
    pub fn new(pooled: PValue, per_seed: &[PValue], alpha: f64) -> Self {
        SeedAgreement {
            alpha,
            seeds: per_seed.len(),
            significant_seeds: per_seed.iter().filter(|p| p.below(alpha)).count(),
            required: required_seeds(per_seed.len()),
            pooled_significant: pooled.below(alpha),
        }
    }

    /// The effect holds: the pooled test rejects and at least `required` seeds do.
    pub fn present(&self) -> bool {
        self.pooled_significant && self.significant_seeds >= self.required
    }

    /// The effect is absent: the pooled test does not reject and fewer than `required` seeds do.
    pub fn absent(&self) -> bool {
        !self.pooled_significant && self.significant_seeds < self.required
    }

    /// "pooled p < 0.01, 3/3 seeds" style summary.
    pub fn describe(&self) -> String {
        format!(
            "pooled {}, {}/{} seeds significant (need {})",
            if self.pooled_significant { "significant" } else { "not significant" },
            self.significant_seeds,
            self.seeds,
            self.required
        )
    }
}

/// The phase test over seeds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PooledPhaseTest {
    /// The kernel's stride.
    pub stride: usize,
    /// One test per seed, in the order given.
    pub seeds: Vec<PhaseTest>,
    /// Sum of the per-seed statistics.
    pub statistic: f64,
    /// Sum of the per-seed degrees of freedom.
    pub df: usize,
    /// How the pooled p-value was obtained (resampled when any seed is).
    pub method: TestMethod,
    /// The pooled p-value.
    pub p: PValue,
    /// The aggregation rule's inputs and outcome.
    pub agreement: SeedAgreement,
}

/// The phase test of every seed (`seeds[i]` holds seed `i`'s records) and their pooled test
/// (see the module doc).
pub fn pooled_phase_test(seeds: &[Vec<PhaseRecord>], stride: usize, cfg: &PhaseTestConfig) -> Result<PooledPhaseTest> {
    if seeds.is_empty() {
        return Err(Error::invalid("seeds", "no seeds to pool"));
    }
    let prepared: Vec<Prepared> = seeds.iter().map(|r| prepare(r, stride, cfg)).collect::<Result<_>>()?;
    let resample = prepared.iter().any(|p| p.resample(cfg));
    let mut tests = Vec::with_capacity(seeds.len());
    let mut pooled_reps = vec![0f64; if resample { cfg.mc_rounds } else { 0 }];
    for (i, (prep, records)) in prepared.iter().zip(seeds).enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        rng.set_stream(i as u64);
        let reps = if resample {
            Some(prep.problem.bootstrap(&prep.fits, cfg.mc_rounds, &mut rng, &crate::stop::Stop::never())?)
        } else {
            None
        };
        if let Some(r) = &reps {
            pooled_reps.iter_mut().zip(r).for_each(|(a, b)| *a += b);
        }
        let (p, method) = match &reps {
            Some(r) if prep.resample(cfg) => {
                (resampled_p(prep.fits.statistic, r, prep.fits.tie_tolerance()), TestMethod::ParametricBootstrap)
            }
            _ => (chi2_p(prep.fits.statistic, prep.problem.df())?, TestMethod::Asymptotic),
        };
        tests.push(prep.summary(stride, records, p, method));
    }
    let statistic: f64 = tests.iter().map(|t| t.statistic).sum();
    let df: usize = tests.iter().map(|t| t.df).sum();
    let (p, method) = if resample {
        // Ties of the summed statistic: the seeds' tolerances add.
        let tolerance: f64 = prepared.iter().map(|p| p.fits.tie_tolerance()).sum();
        (resampled_p(statistic, &pooled_reps, tolerance), TestMethod::ParametricBootstrap)
    } else {
        (chi2_p(statistic, df)?, TestMethod::Asymptotic)
    };
    let per_seed: Vec<PValue> = tests.iter().map(|t| t.p).collect();
    let agreement = SeedAgreement::new(p, &per_seed, cfg.alpha);
    Ok(PooledPhaseTest { stride, seeds: tests, statistic, df, method, p, agreement })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_seeds_is_two_thirds_rounded_up() {
        assert_eq!((1..=6).map(required_seeds).collect::<Vec<_>>(), vec![1, 2, 2, 3, 4, 4]);
    }
}
