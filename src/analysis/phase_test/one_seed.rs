//! The phase test on one seed's records: the likelihood-ratio statistic with its p-value, the
//! depth-adjusted phase accuracies, the suprema and the design.

use super::config::{PhaseRecord, PhaseTestConfig, TestMethod, SPLINE_KNOTS};
use super::likelihood::sigmoid;
use super::logistic::{chi2_p, fit, knots_for, resampled_p, spline_basis, LrFits, LrProblem};
use super::separation::exact_fit;
use crate::analysis::stats::{GroupAccuracy, PValue};
use crate::{Error, Result};
use nalgebra::{DMatrix, DVector};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
pub(super) struct Prepared {
    pub(super) problem: LrProblem,
    pub(super) fits: LrFits,
    pub(super) knots: Vec<f64>,
    pub(super) records: usize,
}

pub(super) fn prepare(records: &[PhaseRecord], stride: usize, cfg: &PhaseTestConfig) -> Result<Prepared> {
    cfg.check()?;
    let (problem, knots) = phase_problem(records, stride, cfg.knots)?;
    let fits = problem.fits()?;
    Ok(Prepared { problem, fits, knots, records: records.len() })
}

impl Prepared {
    pub(super) fn resample(&self, cfg: &PhaseTestConfig) -> bool {
        self.fits.min_expected < cfg.min_expected
    }

    pub(super) fn summary(&self, stride: usize, records: &[PhaseRecord], p: PValue, method: TestMethod) -> PhaseTest {
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
