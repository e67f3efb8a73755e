//! The phase test's settings and constants, and the record of one prompt it reads.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};

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
    pub(super) fn check(&self) -> Result<()> {
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
