//! A model's phase profile: every statistic of `theory/phase-lab.md` §3 from per-prompt
//! outcomes, whether they come from a model evaluated here ([`crate::analysis::eval`]) or from
//! an external model's results read back ([`crate::analysis::audit`]). [`PhaseProfile`] keeps
//! the first run's statistics; [`statistics`] adds issue 17's (the pre-registered phase test,
//! the corrected period scan, gaps with intervals and noise floors) from per-prompt records that
//! carry positions and depths ([`records`]).

use super::phase_test::{self, PhaseRecord, PhaseTest, PhaseTestConfig};
use super::protocol::Prompt;
use super::stats::{self, GapSummary, GroupAccuracy, PeriodEstimate, PeriodScan, ResampleConfig};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Significance level at which a period is declared.
pub const PERIOD_ALPHA: f64 = 0.01;
/// Rounds of the permutation test.
pub const PERMUTATION_ROUNDS: usize = 2000;

/// The result of one prompt. The columns after `depth` name the model and the prompt so that a
/// line can be used without its directory (issue 31); the evaluation writes them
/// (`lab::outcomes`), and external results may leave them out.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
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
    /// Source-key position of the target (its phase is `position mod S`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
    /// Depth of the scored query (its position minus the target key's), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<usize>,
    /// The arm of the model (the plan's name for a preset with its overrides, `w8s4-kv1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<String>,
    /// The kernel preset of the model (`w8s4` for the arm `w8s4-kv1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// The model's training seed (not the evaluation seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The padding protocol of the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The prompt's phase family, `id = group * n + family` (`n` prompts per group); `None`
    /// where prompts are not built in families.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<usize>,
    /// The target's phase at the kernel's stride, `position mod S` (`None`: no stride, full
    /// attention, or no position).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<usize>,
    /// The model's answer at the scored query (its greedy token at each answer position under
    /// teacher forcing, token ids joined by spaces; any string for an external model): what the
    /// flip rate compares across a family's shifts (`theory/flip-rate.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<String>,
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
    profile_stopping(outcomes, m, stride, seed, &crate::stop::Stop::never())
}

/// [`profile`] with `stop` polled during its permutation test (seconds on a million outcomes).
pub fn profile_stopping(
    outcomes: &[Outcome],
    m: usize,
    stride: Option<usize>,
    seed: u64,
    stop: &crate::stop::Stop,
) -> Result<PhaseProfile> {
    if outcomes.is_empty() {
        return Err(Error::invalid("outcomes", "no outcomes to analyse"));
    }
    let pairs: Vec<(usize, bool)> = outcomes.iter().map(|o| (o.group, o.correct)).collect();
    let groups = stats::group_accuracies(&pairs, m)?;
    let period = stats::estimate_period(&groups, PERIOD_ALPHA)?;
    let (statistic, df, p_value) = stats::chi_square_independence(&groups)?;
    let permutation_p = stats::permutation_test_stopping(&pairs, m, PERMUTATION_ROUNDS, seed, stop)?;
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

/// The issue-17 statistics of one set of outcomes: the pre-registered phase test, the
/// corrected (exploratory) period scan with its stability, and the gaps with their intervals
/// and noise floors (`theory/phase-lab.md`, "Pre-registration").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseStatistics {
    /// The depth-controlled phase test at the kernel's stride (`None` without a stride).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_test: Option<PhaseTest>,
    /// The period scan over the divisors of `M`, corrected for trying them all.
    pub period_scan: PeriodScan,
    /// Fraction of bootstrap resamples whose best period is the scan's best.
    pub period_stability: f64,
    /// The max gap over residue groups.
    pub gap: GapSummary,
    /// The max gap over the kernel's phases (`None` without a stride dividing `M`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folded_gap: Option<GapSummary>,
}

/// The per-prompt records of the phase test from protocol prompts and their outcomes (matched
/// by prompt id; depth is the key-to-query distance of the scored query). Errors name an
/// outcome whose id is not a prompt or whose group contradicts it.
pub fn records(prompts: &[Prompt], outcomes: &[Outcome]) -> Result<Vec<PhaseRecord>> {
    let by_id: std::collections::HashMap<usize, &Prompt> = prompts.iter().map(|p| (p.id, p)).collect();
    outcomes
        .iter()
        .map(|o| {
            let p = by_id
                .get(&o.id)
                .ok_or_else(|| Error::invalid("outcome id", format!("{} is not the id of any prompt", o.id)))?;
            if p.group != o.group {
                return Err(Error::invalid(
                    "outcome group",
                    format!("prompt {} is in group {}, its outcome says {}", o.id, p.group, o.group),
                ));
            }
            Ok(PhaseRecord { position: p.target_pos, depth: p.depth(), correct: o.correct })
        })
        .collect()
}

/// Every issue-17 statistic of `records` with residue modulus `m` and the kernel's `stride`
/// (pre-registered settings, seeded by `seed`).
pub fn statistics(records: &[PhaseRecord], m: usize, stride: Option<usize>, seed: u64) -> Result<PhaseStatistics> {
    statistics_stopping(records, m, stride, seed, &crate::stop::Stop::never())
}

/// [`statistics`] with `stop` polled every resampling round of every test (seconds each on
/// hundreds of thousands of outcomes).
pub fn statistics_stopping(
    records: &[PhaseRecord],
    m: usize,
    stride: Option<usize>,
    seed: u64,
    stop: &crate::stop::Stop,
) -> Result<PhaseStatistics> {
    if records.is_empty() {
        return Err(Error::invalid("outcomes", "no outcomes to analyse"));
    }
    let pairs: Vec<(usize, bool)> = records.iter().map(|r| (r.position % m.max(1), r.correct)).collect();
    let cfg = ResampleConfig { seed, ..ResampleConfig::default() };
    let period_scan = stats::period_scan_stopping(&pairs, m, PERIOD_ALPHA, &cfg, stop)?;
    let period_stability = stats::period_stability_stopping(&pairs, m, period_scan.best, &cfg, stop)?;
    let gap = stats::gap_summary_stopping(&pairs, m, None, &cfg, stop)?;
    let (phase_test, folded_gap) = match stride {
        Some(s) if s > 1 => {
            let t = phase_test::phase_test_stopping(
                records,
                s,
                &PhaseTestConfig { seed, ..PhaseTestConfig::default() },
                stop,
            )?;
            let f = if m.is_multiple_of(s) {
                Some(stats::gap_summary_stopping(&pairs, m, Some(s), &cfg, stop)?)
            } else {
                None
            };
            (Some(t), f)
        }
        _ => (None, None),
    };
    Ok(PhaseStatistics { phase_test, period_scan, period_stability, gap, folded_gap })
}
