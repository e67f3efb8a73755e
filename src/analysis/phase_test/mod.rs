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

mod config;
mod continuous;
mod knockout;
mod likelihood;
mod logistic;
mod magnitude;
mod one_seed;
mod pooled;
mod separation;
mod simplex;

pub use config::{
    PhaseRecord, PhaseTestConfig, TestMethod, ALPHA, DEFAULT_PER_GROUP, MC_ROUNDS, MIN_EXPECTED, SPLINE_KNOTS,
};
pub use continuous::*;
pub use knockout::*;
pub use logistic::LR_PRECISION;
pub use magnitude::{
    adjusted_gap_bootstrap, adjusted_gap_bootstrap_over, adjusted_gap_interval, adjusted_gap_replicates,
    adjusted_spread_two_stage, adjusted_spread_within_seed, spread_pp, spread_ratio, window_sharing_phases, Level,
    SeedRecords, SpreadRatio,
};
pub use one_seed::{
    adjusted_phase_accuracies, phase_design, phase_test, phase_test_stopping, suprema, PhaseDesign, PhaseTest, Suprema,
};
pub use pooled::{pooled_phase_test, required_seeds, PooledPhaseTest, SeedAgreement};
