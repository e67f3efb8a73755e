//! A model's phase profile: every statistic of `spec/phase-eval.md` §3 from per-prompt
//! outcomes, whether they come from a model evaluated here ([`crate::analysis::eval`]) or from
//! an external model's results read back ([`crate::analysis::audit`]).

use super::stats::{self, GroupAccuracy, PeriodEstimate};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Significance level at which a period is declared.
pub const PERIOD_ALPHA: f64 = 0.01;
/// Rounds of the permutation test.
pub const PERMUTATION_ROUNDS: usize = 2000;

/// The result of one prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Prompt id.
    pub id: usize,
    /// Residue group of the target.
    pub group: usize,
    /// Greedy exact match.
    pub correct: bool,
    /// Probability of the answer (product over answer tokens), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prob: Option<f64>,
}

/// The chi-square test of independence between group and correctness.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChiSquare {
    /// Statistic.
    pub statistic: f64,
    /// Degrees of freedom.
    pub df: usize,
    /// p-value.
    pub p_value: f64,
}

/// Accuracy folded by phase `rho mod stride`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Folded {
    /// The kernel's stride.
    pub stride: usize,
    /// Per phase `0..stride`.
    pub phases: Vec<GroupAccuracy>,
    /// Max minus min phase accuracy, percentage points.
    pub gap_pp: f64,
}

/// Every phase statistic of one set of outcomes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseProfile {
    /// Residue modulus `M`.
    pub modulus: usize,
    /// Prompts.
    pub n: usize,
    /// Mean accuracy over prompts.
    pub mean_accuracy: f64,
    /// Per residue group.
    pub groups: Vec<GroupAccuracy>,
    /// Mean answer probability per group (when every outcome has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_prob: Option<Vec<f64>>,
    /// Max minus min group accuracy, percentage points.
    pub max_gap_pp: f64,
    /// Period estimate over the divisors of `M` (best, runner-up, p-values).
    pub period: PeriodEstimate,
    /// Chi-square test of independence.
    pub chi_square: ChiSquare,
    /// Permutation-test p-value of the max gap.
    pub permutation_p: f64,
    /// Accuracy folded by the kernel's stride (when it divides `M`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folded: Option<Folded>,
}

impl PhaseProfile {
    /// The estimated period, if one is declared at [`PERIOD_ALPHA`].
    pub fn period(&self) -> Option<usize> {
        self.period.period
    }
}

/// The phase profile of `outcomes` with modulus `m`, folded by `stride` when it divides `m`
/// (the permutation test is seeded by `seed`). Every group needs at least one outcome.
pub fn profile(outcomes: &[Outcome], m: usize, stride: Option<usize>, seed: u64) -> Result<PhaseProfile> {
    if outcomes.is_empty() {
        return Err(Error::invalid("outcomes", "no outcomes to analyse"));
    }
    let pairs: Vec<(usize, bool)> = outcomes.iter().map(|o| (o.group, o.correct)).collect();
    let groups = stats::group_accuracies(&pairs, m)?;
    let period = stats::estimate_period(&groups, PERIOD_ALPHA)?;
    let (statistic, df, p_value) = stats::chi_square_independence(&groups)?;
    let permutation_p = stats::permutation_test(&pairs, m, PERMUTATION_ROUNDS, seed)?;
    let folded = match stride {
        Some(s) if s > 1 && m.is_multiple_of(s) => {
            let phases = stats::fold_by_phase(&groups, s)?;
            Some(Folded { stride: s, gap_pp: stats::max_gap_pp(&phases), phases })
        }
        _ => None,
    };
    let mean_prob = if outcomes.iter().all(|o| o.prob.is_some()) {
        let mut sum = vec![0f64; m];
        let mut n = vec![0usize; m];
        for o in outcomes {
            sum[o.group] += o.prob.unwrap_or(0.0);
            n[o.group] += 1;
        }
        Some(sum.iter().zip(&n).map(|(s, &k)| if k > 0 { s / k as f64 } else { f64::NAN }).collect())
    } else {
        None
    };
    Ok(PhaseProfile {
        modulus: m,
        n: outcomes.len(),
        mean_accuracy: pairs.iter().filter(|p| p.1).count() as f64 / pairs.len() as f64,
        max_gap_pp: stats::max_gap_pp(&groups),
        groups,
        mean_prob,
        period,
        chi_square: ChiSquare { statistic, df, p_value },
        permutation_p,
        folded,
    })
}

/// Per-group accuracies as CSV (`group,n,correct,accuracy,wilson_lo,wilson_hi`).
pub fn groups_csv(groups: &[GroupAccuracy]) -> String {
    let mut s = String::from("group,n,correct,accuracy,wilson_lo,wilson_hi\n");
    for g in groups {
        s.push_str(&format!(
            "{},{},{},{:.6},{:.6},{:.6}\n",
            g.group, g.n, g.correct, g.accuracy, g.wilson_lo, g.wilson_hi
        ));
    }
    s
}
