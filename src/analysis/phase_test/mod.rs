//! The pre-registered phase test (`theory/phase-lab.md`, "Pre-registration"): is accuracy
//! different across the kernel's own phases (position mod `S`) once depth is controlled? Also
//! its aggregation over seeds, and the per-row test of a knockout map.
//!
//! **Model.** Per prompt, `logit P(correct) = a + f(depth) + b[position mod S]` with `f` a
//! restricted (natural) cubic spline in depth with [`SPLINE_KNOTS`] knots at equally spaced
//! quantiles of the observed depths, extremes included (`SPLINE_KNOTS - 1` degrees of freedom),
//! and `b` a phase factor (`b[0] = 0`). The null model drops `b`. The statistic is the likelihood
//! ratio `G = 2 (l1 - l0)` with `S - 1` degrees of freedom. Prompts with the same depth and
//! phase are pooled into one binomial cell, so a fit costs microseconds.
//!
//! **Why a model and not a permutation within depth strata.** The scored query sits at a fixed
//! position, so depth determines position and with it the phase: every depth stratum holds
//! exactly one phase and a permutation within strata has nothing to permute. What separates a
//! phase effect from a depth effect is scale: the phase factor repeats every `S` tokens, while
//! the spline's knots lie about a quarter of the depth range apart (about 18 tokens on the
//! first run's task) and cannot follow a pattern of period `S <= 8`. A depth effect that changes
//! within a few tokens cannot be told from phase on such data, whatever the test; the task keeps
//! the target away from the query block so that depth effects are smooth.
//!
//! **p-value.** Chi-square with `S - 1` degrees of freedom when, under the fitted null, every
//! phase expects at least [`MIN_EXPECTED`] correct and [`MIN_EXPECTED`] wrong answers;
//! otherwise (near the ceiling, where the chi-square approximation fails) a parametric
//! bootstrap: [`MC_ROUNDS`] data sets drawn from the fitted null, both models refitted on each,
//! `p = (1 + #{G* >= G - LR_PRECISION (1 + |l0|)}) / (1 + rounds)` (ties counted, §8.6).
//! Every likelihood is its exact supremum (§8.6, `separation`): cells that can be separated
//! are found by Konis's linear program and the rest is fitted to convergence, for the observed
//! statistic and for every replicate.
//!
//! **Seeds.** The pooled test sums the per-seed statistics (each seed with its own spline and
//! phase effects): a test of "no phase effect in any seed" with `n (S - 1)` degrees of freedom,
//! which does not assume that every seed has the same weak phase. A claim of an effect holds when
//! the pooled test rejects *and* at least [`required_seeds`] of the seeds reject on their own
//! ([`SeedAgreement`]).

use super::stats::{GroupAccuracy, PValue};
use crate::numeric::wilson95;
use crate::{Error, Result};
use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use statrs::distribution::{ChiSquared, ContinuousCDF};
use std::collections::BTreeMap;

mod continuous;
mod knockout;
mod logistic;
mod magnitude;
mod separation;

pub use continuous::*;
pub use knockout::*;
pub use logistic::LR_PRECISION;
use logistic::*;
pub use magnitude::{
    adjusted_gap_bootstrap, adjusted_gap_bootstrap_over, adjusted_gap_interval, adjusted_gap_replicates,
    adjusted_spread_two_stage, adjusted_spread_within_seed, spread_pp, spread_ratio, window_sharing_phases, Level,
    SeedRecords, SpreadRatio,
};
use separation::*;

/// Significance level of every pre-registered test.
pub const ALPHA: f64 = 0.01;
/// Knots of the depth spline (its degrees of freedom are one fewer).
pub const SPLINE_KNOTS: usize = 5;
/// Smallest expected count of correct and of wrong answers per phase (or knockout cell) under
/// the null for the chi-square approximation; below it the p-value is resampled.
pub const MIN_EXPECTED: f64 = 10.0;
/// Parametric-bootstrap rounds when the p-value is resampled (floor `1/2000`).
pub const MC_ROUNDS: usize = 1999;
/// Evaluation prompts per residue group and protocol, per seed, that the committed run uses:
/// the sample size at which the test detects one phase 6 pp below the others at 90 % accuracy
/// for `S = 4, 6, 8` (see `tests/phase_test_calibration.rs`).
pub const DEFAULT_PER_GROUP: usize = 240;

/// The result of one prompt as the phase test needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseRecord {
    /// Source-key position of the target (its phase is `position mod S`).
    pub position: usize,
    /// Depth: the key-to-query distance (or any coordinate that the depth effect is smooth in).
    pub depth: usize,
    /// Greedy exact match.
    pub correct: bool,
}

/// Settings of the phase test (the defaults are the pre-registered ones).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseTestConfig {
    /// Spline knots (3 to 7).
    pub knots: usize,
    /// Smallest expected count for the chi-square approximation.
    pub min_expected: f64,
    /// Parametric-bootstrap rounds when resampling.
    pub mc_rounds: usize,
    /// Significance level.
    pub alpha: f64,
    /// Seed of the resampling.
    pub seed: u64,
}

impl Default for PhaseTestConfig {
    fn default() -> Self {
        PhaseTestConfig { knots: SPLINE_KNOTS, min_expected: MIN_EXPECTED, mc_rounds: MC_ROUNDS, alpha: ALPHA, seed: 0 }
    }
}

impl PhaseTestConfig {
    fn check(&self) -> Result<()> {
        if !(3..=7).contains(&self.knots) {
            return Err(Error::invalid("spline knots", format!("must be in 3..=7, got {}", self.knots)));
        }
        if self.mc_rounds == 0 {
            return Err(Error::invalid("bootstrap rounds", "must be at least 1, got 0"));
        }
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(Error::invalid("alpha", format!("must be in (0, 1), got {}", self.alpha)));
        }
        if self.min_expected.is_nan() || self.min_expected < 0.0 {
            return Err(Error::invalid("min expected count", format!("must be at least 0, got {}", self.min_expected)));
        }
        Ok(())
    }
}

/// How a p-value was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestMethod {
    /// Chi-square approximation of the likelihood ratio.
    Asymptotic,
    /// Parametric bootstrap from the fitted null.
    ParametricBootstrap,
}

/// The phase test of one model (one seed, one protocol).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseTest {
    /// The kernel's stride `S`.
    pub stride: usize,
    /// Prompts.
    pub n: usize,
    /// Mean accuracy.
    pub accuracy: f64,
    /// The spline's knots (depths).
    pub knots: Vec<f64>,
    /// Raw accuracy per phase, with Wilson intervals.
    pub phases: Vec<GroupAccuracy>,
    /// Depth-adjusted accuracy per phase: the full model's mean predicted accuracy over every
    /// prompt's depth with the phase set to each value in turn.
    pub adjusted: Vec<f64>,
    /// Max minus min depth-adjusted phase accuracy, percentage points.
    pub adjusted_gap_pp: f64,
    /// Likelihood-ratio statistic.
    pub statistic: f64,
    /// Degrees of freedom (`S - 1`).
    pub df: usize,
    /// Smallest expected count of correct or wrong answers of a phase under the null fit.
    pub min_expected: f64,
    /// How the p-value was obtained.
    pub method: TestMethod,
    /// The p-value.
    pub p: PValue,
}

impl PhaseTest {
    /// Whether the test rejects "no phase effect" at `alpha`.
    pub fn rejects(&self, alpha: f64) -> bool {
        self.p.below(alpha)
    }
}

/// The phase test's problem: one cell per (depth, phase).
fn phase_problem(records: &[PhaseRecord], stride: usize, k: usize) -> Result<(LrProblem, Vec<f64>)> {
    if stride < 2 {
        return Err(Error::invalid("stride", format!("must be at least 2 for a phase test, got {stride}")));
    }
    if records.is_empty() {
        return Err(Error::invalid("records", "no prompts to test"));
    }
    let mut cells: BTreeMap<(usize, usize), (f64, f64)> = BTreeMap::new();
    for r in records {
        let c = cells.entry((r.depth, r.position % stride)).or_insert((0.0, 0.0));
        c.0 += 1.0;
        c.1 += f64::from(u8::from(r.correct));
    }
    let mut depths: Vec<f64> = records.iter().map(|r| r.depth as f64).collect();
    depths.sort_by(f64::total_cmp);
    let knots = knots_for(&depths, k);
    let n_spline = if knots.len() >= 2 { knots.len() - 1 } else { 0 };
    let null_cols = 1 + n_spline;
    let cols = null_cols + stride - 1;
    let mut x = DMatrix::<f64>::zeros(cells.len(), cols);
    let (mut n, mut y, mut class) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (&(depth, phase), &(ni, yi))) in cells.iter().enumerate() {
        x[(i, 0)] = 1.0;
        for (j, b) in spline_basis(depth as f64, &knots).into_iter().enumerate() {
            x[(i, 1 + j)] = b;
        }
        if phase > 0 {
            x[(i, null_cols + phase - 1)] = 1.0;
        }
        n.push(ni);
        y.push(yi);
        class.push(phase);
    }
    let x_null = x.columns(0, null_cols).into_owned();
    let problem = LrProblem { x_full: x, x_null, n, y, class, classes: stride };
    problem.check_rank("phase test")?;
    Ok((problem, knots))
}

/// One seed's problem, fits and (when resampled) replicates.
struct Prepared {
    problem: LrProblem,
    fits: LrFits,
    knots: Vec<f64>,
    records: usize,
}

fn prepare(records: &[PhaseRecord], stride: usize, cfg: &PhaseTestConfig) -> Result<Prepared> {
    cfg.check()?;
    let (problem, knots) = phase_problem(records, stride, cfg.knots)?;
    let fits = problem.fits()?;
    Ok(Prepared { problem, fits, knots, records: records.len() })
}

impl Prepared {
    fn resample(&self, cfg: &PhaseTestConfig) -> bool {
        self.fits.min_expected < cfg.min_expected
    }

    fn summary(&self, stride: usize, records: &[PhaseRecord], p: PValue, method: TestMethod) -> PhaseTest {
        let mut n = vec![0usize; stride];
        let mut k = vec![0usize; stride];
        for r in records {
            n[r.position % stride] += 1;
            k[r.position % stride] += r.correct as usize;
        }
        let phases: Vec<GroupAccuracy> = (0..stride).map(|f| GroupAccuracy::new(f, k[f], n[f])).collect();
        let pr = &self.problem;
        let adjusted = adjusted_accuracies(pr, &self.fits.full_beta, stride);
        let (lo, hi) = adjusted.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        PhaseTest {
            stride,
            n: self.records,
            accuracy: k.iter().sum::<usize>() as f64 / self.records as f64,
            knots: self.knots.clone(),
            phases,
            adjusted_gap_pp: 100.0 * (hi - lo),
            adjusted,
            statistic: self.fits.statistic,
            df: pr.df(),
            min_expected: self.fits.min_expected,
            method,
            p,
        }
    }
}

/// Depth-adjusted accuracy per phase: the full model's mean predicted accuracy over every
/// cell's depth (weighted by its prompts) with the phase set to each value in turn, from the
/// finite coefficients `beta` of the capped Newton fit.
fn adjusted_accuracies(pr: &LrProblem, beta: &DVector<f64>, stride: usize) -> Vec<f64> {
    let null_cols = pr.x_null.ncols();
    let base = pr.x_null.clone() * beta.rows(0, null_cols);
    let total: f64 = pr.n.iter().sum();
    (0..stride)
        .map(|f| {
            let shift = if f > 0 { beta[null_cols + f - 1] } else { 0.0 };
            base.iter().zip(&pr.n).map(|(&e, &ni)| ni * sigmoid(e + shift)).sum::<f64>() / total
        })
        .collect()
}

/// The depth-adjusted accuracy per phase of one model's `records` at `stride` (what
/// [`PhaseTest::adjusted`] holds), without the test: the magnitudes' bootstrap refits only this.
pub fn adjusted_phase_accuracies(records: &[PhaseRecord], stride: usize) -> Result<Vec<f64>> {
    let (problem, _) = phase_problem(records, stride, SPLINE_KNOTS)?;
    let null = fit(&problem.x_null, &problem.n, &problem.y, None)?;
    let beta = fit(&problem.x_full, &problem.n, &problem.y, Some(&problem.extend(&null.beta)))?.beta;
    Ok(adjusted_accuracies(&problem, &beta, stride))
}

/// The pre-registered phase test of one model's `records` for stride `stride` (see the module
/// doc).
pub fn phase_test(records: &[PhaseRecord], stride: usize, cfg: &PhaseTestConfig) -> Result<PhaseTest> {
    phase_test_stopping(records, stride, cfg, &crate::stop::Stop::never())
}

/// [`phase_test`] with `stop` polled every parametric-bootstrap round.
pub fn phase_test_stopping(
    records: &[PhaseRecord],
    stride: usize,
    cfg: &PhaseTestConfig,
    stop: &crate::stop::Stop,
) -> Result<PhaseTest> {
    let prep = prepare(records, stride, cfg)?;
    let (p, method) = if prep.resample(cfg) {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let reps = prep.problem.bootstrap(&prep.fits, cfg.mc_rounds, &mut rng, stop)?;
        (resampled_p(prep.fits.statistic, &reps, prep.fits.tie_tolerance()), TestMethod::ParametricBootstrap)
    } else {
        (chi2_p(prep.fits.statistic, prep.problem.df())?, TestMethod::Asymptotic)
    };
    Ok(prep.summary(stride, records, p, method))
}

/// The log-likelihood suprema behind one model's statistic at a stride (§8.6): the null model's
/// (depth only), the full model's (depth and phase) and the saturated depth x phase model's
/// (one probability per cell, closed form: `sum y ln(y / n) + (n - y) ln(1 - y / n)`, with
/// `0 ln 0 = 0`). The statistic is `2 (full - null)`; the full model is nested in the saturated
/// one, so `2 (saturated - null)` bounds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Suprema {
    /// The null model's supremum.
    pub null: f64,
    /// The full model's supremum.
    pub full: f64,
    /// The saturated depth x phase model's supremum.
    pub saturated: f64,
}

/// The [`Suprema`] of `records` at `stride` (the default spline).
pub fn suprema(records: &[PhaseRecord], stride: usize) -> Result<Suprema> {
    let (pr, _) = phase_problem(records, stride, SPLINE_KNOTS)?;
    let null = exact_fit(&pr.x_null, &pr.n, &pr.y)?.loglik;
    let full = exact_fit(&pr.x_full, &pr.n, &pr.y)?.loglik;
    let term = |k: f64, n: f64| if k > 0.0 { k * (k / n).ln() } else { 0.0 };
    let saturated = pr.n.iter().zip(&pr.y).map(|(&n, &y)| term(y, n) + term(n - y, n)).sum();
    Ok(Suprema { null, full, saturated })
}

/// The binomial cells and design of one model's test at a stride (the default spline): one row
/// per (depth, phase) cell, the null model's columns first (intercept, spline) and the phase
/// columns after them. For audits and the fit's tests, which recompute the suprema by other
/// means.
#[derive(Clone, Debug)]
pub struct PhaseDesign {
    /// The full model's design (cells x columns).
    pub x_full: DMatrix<f64>,
    /// How many leading columns the null model has.
    pub null_columns: usize,
    /// Prompts per cell.
    pub n: Vec<f64>,
    /// Correct answers per cell.
    pub y: Vec<f64>,
}

/// The [`PhaseDesign`] of `records` at `stride`.
pub fn phase_design(records: &[PhaseRecord], stride: usize) -> Result<PhaseDesign> {
    let (pr, _) = phase_problem(records, stride, SPLINE_KNOTS)?;
    Ok(PhaseDesign { null_columns: pr.x_null.ncols(), x_full: pr.x_full, n: pr.n, y: pr.y })
}

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
    fn spline_is_linear_beyond_the_outer_knots() {
        let knots = [10.0, 20.0, 30.0, 40.0, 50.0];
        // Second differences vanish outside [10, 50] (natural spline).
        for &x in &[0.0, 55.0, 70.0] {
            let b: Vec<Vec<f64>> = [x - 1.0, x, x + 1.0].iter().map(|&v| spline_basis(v, &knots)).collect();
            for (j, ((a, m), c)) in b[0].iter().zip(&b[1]).zip(&b[2]).enumerate() {
                let d2 = a - 2.0 * m + c;
                assert!(d2.abs() < 1e-12, "basis {j} at {x}: second difference {d2}");
            }
        }
        assert_eq!(spline_basis(30.0, &knots).len(), 4);
    }

    #[test]
    fn logistic_fit_recovers_known_coefficients() {
        // One covariate, exact cell proportions sigma(-1 + 2 x): the MLE is (-1, 2).
        let xs = [0.0, 0.25, 0.5, 0.75, 1.0];
        let mut x = DMatrix::zeros(5, 2);
        let n = vec![1e6; 5];
        let mut y = Vec::new();
        for (i, &v) in xs.iter().enumerate() {
            x[(i, 0)] = 1.0;
            x[(i, 1)] = v;
            y.push(1e6 * sigmoid(-1.0 + 2.0 * v));
        }
        let f = fit(&x, &n, &y, None).unwrap();
        assert!((f.beta[0] + 1.0).abs() < 1e-6 && (f.beta[1] - 2.0).abs() < 1e-6, "{:?}", f.beta);
    }

    #[test]
    fn separation_reaches_the_supremum_exactly() {
        // Group 1 always right: its coefficient diverges; the supremum is group 0's alone.
        let mut x = DMatrix::zeros(2, 2);
        x[(0, 0)] = 1.0;
        x[(1, 0)] = 1.0;
        x[(1, 1)] = 1.0;
        let f = exact_fit(&x, &[100.0, 100.0], &[50.0, 100.0]).unwrap();
        let sup = 100.0 * 0.5f64.ln(); // 50 ln .5 + 50 ln .5
        assert!((f.loglik - sup).abs() < 1e-12, "{} vs {sup}", f.loglik);
        assert!((f.mu[0] - 0.5).abs() < 1e-12 && f.mu[1] == 1.0, "{:?}", f.mu);
        // Negative control: nothing separable when every cell has both answers.
        let g = exact_fit(&x, &[100.0, 100.0], &[50.0, 99.0]).unwrap();
        assert!((g.mu[1] - 0.99).abs() < 1e-9, "{:?}", g.mu);
    }

    #[test]
    fn the_lp_finds_separation_the_witness_cannot() {
        // Rows b = (1, 0), (-1, 1), (0, -1) in R^2 leave only z = 0 (b1 + b2 + b3 = 0): nothing
        // separable. Rows (1, 0), (0, 1), (-1, 1) cone: z = (1, 2) separates all three, but
        // their sum (0, 2) is 0 on the first row, so the LP must decide.
        let rows = |v: &[[f64; 2]]| v.iter().map(|r| DVector::from_column_slice(r)).collect::<Vec<_>>();
        let none = separation::konis_lp_for_tests(&rows(&[[1.0, 0.0], [-1.0, 1.0], [0.0, -1.0]]), 2).unwrap();
        assert!(none.iter().all(|&t| t < 0.5), "{none:?}");
        let all = separation::konis_lp_for_tests(&rows(&[[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]]), 2).unwrap();
        assert!(all.iter().all(|&t| t > 0.5), "{all:?}");
        let some = separation::konis_lp_for_tests(&rows(&[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]]), 2).unwrap();
        assert_eq!(some.iter().map(|&t| t > 0.5).collect::<Vec<_>>(), vec![false, false, true]);
    }

    #[test]
    fn the_perceptron_witness_proves_only_full_separation() {
        let rows = |v: &[[f64; 2]]| v.iter().map(|r| DVector::from_column_slice(r)).collect::<Vec<_>>();
        // The sum (0, 2) is 0 on the first row; one perceptron round gives (1, 2), positive on all.
        assert!(separation::witness_for_tests(&rows(&[[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]])));
        // Negative controls: rows that force z = 0, and a pair b, -b.
        assert!(!separation::witness_for_tests(&rows(&[[1.0, 0.0], [-1.0, 1.0], [0.0, -1.0]])));
        assert!(!separation::witness_for_tests(&rows(&[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])));
    }

    /// At the size of the v1 data's hardest case (185 LP rows: full-seed1, prefix, S = 6 and 8;
    /// the data itself is `report_committed::the_separation_fit_decides_full_attention_at_strides_6_and_8`):
    /// 180 rows positive on a direction `d0` and 10 pairs `v, -v` orthogonal to it, which only
    /// `z . v = 0` satisfies. The LP must finish and separate exactly the first 180.
    #[test]
    fn the_lp_decides_at_the_size_of_the_data() {
        let k = 6;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut uniform = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        let d0 = DVector::from_fn(k, |j, _| if j == 0 { 1.0 } else { 0.0 });
        let mut rows = Vec::new();
        while rows.len() < 180 {
            let mut b = DVector::from_fn(k, |_, _| uniform());
            b[0] = b[0].abs() + 0.05;
            rows.push(b.normalize());
        }
        for _ in 0..10 {
            let mut v = DVector::from_fn(k, |_, _| uniform());
            v[0] = 0.0;
            let v = v.normalize();
            rows.push(-v.clone());
            rows.push(v);
        }
        assert!(rows.iter().take(180).all(|b| b.dot(&d0) > 0.0));
        assert!(!separation::witness_for_tests(&rows), "the pairs leave no direction positive on all");
        let t = separation::konis_lp_for_tests(&rows, k).unwrap();
        let separated: Vec<bool> = t.iter().map(|&t| t > 0.5).collect();
        assert_eq!(separated, (0..200).map(|i| i < 180).collect::<Vec<_>>());
    }

    #[test]
    fn required_seeds_is_two_thirds_rounded_up() {
        assert_eq!((1..=6).map(required_seeds).collect::<Vec<_>>(), vec![1, 2, 2, 3, 4, 4]);
    }
}
