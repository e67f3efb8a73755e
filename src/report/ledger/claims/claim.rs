//! One line of the ledger ([`Claim`], every number in it structured) and the trait a claim
//! implements ([`LedgerClaim`]): its id, the words of the top table, and its check.

use crate::analysis::stats;
use crate::analysis::verdict::Verdict;
use crate::report::ledger::collect::Collected;
use crate::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One line of the ledger: the prose (`measured`, `criterion`) and every number in it
/// structured (`arms`, `tests`, `measures`, `seeds`), so that the Markdown renders from
/// `ledger.json` alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// `T1`, `T2`, `E1`..`E14`, `X1`, `K`.
    pub id: String,
    /// The paper's claim.
    pub claim: String,
    /// The claim in at most 12 words (the top table).
    pub short: String,
    /// The paper's value, in words (the top table).
    pub paper: String,
    /// Our headline value (the top table): a number with its interval and the arm it comes
    /// from where the claim has a magnitude, else the count the verdict rests on.
    pub ours: String,
    /// What was measured, with the numbers (the claim's section).
    pub measured: String,
    /// The criterion the verdict applies.
    pub criterion: String,
    /// The section of `theory/phase-lab.md` the criterion is judged by ([`section_of`](super::words::section_of); empty
    /// in a ledger written before this field).
    #[serde(default)]
    pub section: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The verdict of every arm the claim rests on.
    #[serde(default)]
    pub arms: Vec<ArmVerdict>,
    /// Every pooled phase test run for the claim, deciding or reported.
    #[serde(default)]
    pub tests: Vec<TestRecord>,
    /// Every magnitude, with its interval.
    #[serde(default)]
    pub measures: Vec<Measure>,
    /// Per-seed results of the claims judged seed by seed (E6, E7).
    #[serde(default)]
    pub seeds: Vec<SeedLine>,
    /// What a reader must know first: changes made after seeing the data, and their reason.
    #[serde(default)]
    pub flags: Vec<String>,
    /// Where the claim reads otherwise with the seeds the training-success rule excluded
    /// (issue 38): each verdict and magnitude that differs, recomputed with those seeds kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub with_excluded: Vec<String>,
    /// Figures (relative to the report directory).
    pub figures: Vec<String>,
    /// Data files (relative to the report directory).
    pub data: Vec<String>,
}

/// One arm's part of a claim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmVerdict {
    /// The arm (for E5's compressed part, the arm with the largest gap).
    pub arm: String,
    /// Its verdict.
    pub verdict: Verdict,
    /// What was measured, in words.
    pub text: String,
}

/// A pooled phase test (`phase_test::pooled_phase_test`) as the ledger records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestRecord {
    /// The arm tested.
    pub arm: String,
    /// The protocol.
    pub protocol: String,
    /// Whether the test decides the claim (`false`: reported only).
    pub decides: bool,
    /// The stride tested.
    pub stride: usize,
    /// The level it is judged at.
    pub alpha: f64,
    /// The pooled likelihood-ratio statistic.
    pub statistic: f64,
    /// Its degrees of freedom.
    pub df: usize,
    /// `chi-square` or `bootstrap`.
    pub method: String,
    /// The pooled p-value.
    pub p: stats::PValue,
    /// Each seed's test.
    pub seeds: Vec<SeedTest>,
    /// Seeds significant on their own.
    pub significant_seeds: usize,
    /// Seeds required (`required_seeds(n)`).
    pub required_seeds: usize,
    /// Whether the pooled test rejects.
    pub pooled_significant: bool,
}

/// One seed's phase test.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedTest {
    /// The training seed.
    pub seed: u64,
    /// Its p-value.
    pub p: stats::PValue,
    /// Its depth-adjusted phase spread (max minus min adjusted phase accuracy), pp.
    pub adjusted_gap_pp: f64,
}

/// A magnitude with its interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measure {
    /// The arm.
    pub arm: String,
    /// The protocol.
    pub protocol: String,
    /// What is measured (`folded gap`, `24-group gap`, `depth-adjusted phase spread`).
    pub what: String,
    /// Phases compared (the stride folded by, or the residue groups).
    pub groups: usize,
    /// The estimate and its interval.
    pub value: Interval,
    /// The noise floor (95th percentile of the statistic under permutation), where computed.
    pub noise_floor_pp: Option<f64>,
    /// The permutation p-value, where computed.
    pub p: Option<stats::PValue>,
    /// The paper's value it is set beside, pp.
    pub paper_pp: Option<f64>,
    /// Whether the claim's verdict reads it.
    pub decides: bool,
    /// `Some(n)`: the interval is seed-level (issue 38: the two-stage bootstrap over the arm's
    /// `n` seeds, then prompts or prompt families within each); `None`: prompts resampled within
    /// seeds, the seeds held fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeds: Option<usize>,
    /// Each seed's value `(seed, pp)` of a seed-level magnitude, where the claim keeps them
    /// (rendering only: the report's seed mean ± sd; absent in a ledger written before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_seed_pp: Vec<(u64, f64)>,
}

/// A bootstrap estimate, shown bias-corrected with the basic bootstrap interval
/// ([`stats::BootInterval::corrected`]); the raw statistic and the percentile interval the v1
/// verdicts were judged on are kept beside it (flagged: interval method changed after the run,
/// issue 31, `theory/phase-lab.md` §7.9).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The bias-corrected estimate `2 m - mean(m*)`, pp (`raw_pp - bias_pp`).
    pub pp: f64,
    /// Its interval's lower end `2 m - q_97.5`, pp.
    pub lo_pp: f64,
    /// Its interval's upper end `2 m - q_2.5`, pp.
    pub hi_pp: f64,
    /// The statistic on the data `m`, pp.
    pub raw_pp: f64,
    /// The bootstrap bias `mean(m*) - m`, pp.
    pub bias_pp: f64,
    /// The percentile interval (what the v1 verdict was judged on), pp.
    pub percentile_pp: (f64, f64),
}

impl Interval {
    /// From a bootstrap summary.
    pub fn of(b: &stats::BootInterval) -> Self {
        let (pp, lo_pp, hi_pp) = b.corrected();
        Interval { pp, lo_pp, hi_pp, raw_pp: b.estimate, bias_pp: b.bias(), percentile_pp: (b.lo, b.hi) }
    }

    /// From a bootstrap summary of a statistic that cannot be negative (a spread, a gap):
    /// each end clamped at 0 ([`stats::BootInterval::corrected_nonneg`], issue 38).
    pub fn of_nonneg(b: &stats::BootInterval) -> Self {
        let (pp, lo_pp, hi_pp) = b.corrected_nonneg();
        Interval { pp, lo_pp, hi_pp, raw_pp: b.estimate, bias_pp: b.bias(), percentile_pp: (b.lo, b.hi) }
    }

    /// `pp [lo, hi]`, bias-corrected.
    pub fn words(&self) -> String {
        format!("{:.1} pp [{:.1}, {:.1}]", self.pp, self.lo_pp, self.hi_pp)
    }

    /// The words with the raw statistic, its bias and the percentile interval beside them.
    pub fn full_words(&self) -> String {
        format!(
            "{} (bias-corrected; raw {:.1} pp, bias {:.1} pp, percentile [{:.1}, {:.1}])",
            self.words(),
            self.raw_pp,
            self.bias_pp,
            self.percentile_pp.0,
            self.percentile_pp.1
        )
    }
}

/// One seed's result in a claim judged seed by seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeedLine {
    /// The arm.
    pub arm: String,
    /// The training seed.
    pub seed: u64,
    /// Whether the seed meets the claim's rule (`None`: not judged, because it is not testable
    /// or the rule does not apply to it; the text says which).
    pub meets: Option<bool>,
    /// What was measured, in words.
    pub text: String,
}

/// The flag every claim with a bootstrap magnitude carries (issue 31).
pub const INTERVAL_FLAG: &str = "flagged: interval method changed after the run (issue 31): magnitudes are shown bias-corrected (2 m - mean of the bootstrap replicates) with the basic bootstrap interval [2 m - q97.5, 2 m - q2.5], because a percentile interval of a max-minus-min statistic is biased upward and need not contain its estimate; the raw value and its percentile interval are kept beside each, and the v1 verdict is still judged on them (theory/phase-lab.md §7.9)";

/// One claim of the ledger: its id and the words of the top table, with the claim, and its
/// check (adding a claim is one module implementing this).
pub trait LedgerClaim: Sync {
    /// The claim's id: `T1`, `T2`, `E1`..`E10`, `X1`, `K`.
    fn id(&self) -> &'static str;
    /// The claim in at most 12 words (the top table).
    fn short(&self) -> &'static str;
    /// The paper's value, in words (the top table; `-` with a reason where the paper has none).
    fn paper(&self) -> &'static str;
    /// The claim's line: numbers and verdict from the data.
    fn check(&self, c: &Collected) -> Claim;
    /// Whether a ledger judged by `rules` has this claim: every claim except those a later
    /// pre-registration added (E11-E14 exist only under v3, §9.7), so that an earlier run's
    /// ledger gains no row.
    fn applies_to(&self, _rules: crate::analysis::verdict::Rules) -> bool {
        true
    }
    /// Draws the figures only this claim links into `out` (the report directory); returns
    /// `(figure, caption)` pairs, figures relative to `out`. Most claims link figures drawn
    /// for the whole report and draw none.
    fn draw(&self, _c: &Collected, _out: &Path) -> Result<Vec<(String, String)>> {
        Ok(vec![])
    }
}

/// The line of claim `of` when the data it needs are not in the run set (`claim`: the paper's
/// claim; `data`: the files it would read); a claim's `check` also starts its own line from it.
pub(super) fn not_run(of: &dyn LedgerClaim, claim: &str, data: Vec<String>) -> Claim {
    Claim {
        id: of.id().into(),
        claim: claim.into(),
        short: of.short().into(),
        paper: of.paper().into(),
        ours: "-".into(),
        measured: "the data this claim needs are not in the run set".into(),
        criterion: "-".into(),
        section: String::new(),
        verdict: Verdict::NotRun,
        arms: vec![],
        tests: vec![],
        measures: vec![],
        seeds: vec![],
        flags: vec![],
        with_excluded: vec![],
        figures: vec![],
        data,
    }
}
