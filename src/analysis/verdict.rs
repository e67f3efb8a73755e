//! Verdict states of a phase claim and the rules that assign them (`theory/phase-lab.md`,
//! "Pre-registration"). The thresholds are the constants below; the document quotes them.

use super::phase_test::SeedAgreement;
use super::stats::{GroupAccuracy, Magnitude};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// A model is at the ceiling when every residue group's accuracy is at least this under both
/// protocols: no phase can then be more than 2 pp worse than another, so "no effect" says
/// nothing about phase sensitivity.
pub const CEILING_ACCURACY: f64 = 0.98;
/// An effect is reproduced (not just "qualitatively") when its measured magnitude is at least
/// this fraction of the paper's: our models are orders of magnitude smaller and shorter, so
/// the same order of magnitude is what can be asked.
pub const MAGNITUDE_FRACTION: f64 = 0.5;
/// The paper's largest prefix-padding gap of a compressed model, percentage points (E5).
pub const PAPER_COMPRESSED_GAP_PP: f64 = 78.0;
/// The paper's largest gap of a full-attention baseline, percentage points (E5).
pub const PAPER_BASELINE_GAP_PP: f64 = 6.1;
/// The paper's accuracy spread among phases sharing one window (W8/S8), percentage points (E4).
pub const PAPER_WITHIN_WINDOW_PP: f64 = 50.0;

/// E7: a live head drifts toward static concentration when its static effective number of
/// read offsets (gate times the norm of the projected value, `theory/phase-lab.md` §7.6) falls
/// by at least this many offsets from step 0 to the end of training.
pub const E7_MIN_DRIFT_OFFSETS: f64 = 1.0;
/// E7: a head is dead (excluded) when knocking it out changes no prompt's accuracy by more than
/// this, in percentage points, in every cell of both protocols' knockout maps.
pub const DEAD_HEAD_MAX_DROP_PP: f64 = 0.0;

/// A claim's verdict: the one verdict type of the ledger (`report::ledger` re-exports it).
/// The phase claims E1-E6 use every state ([`verdict`] assigns the ceiling and magnitude
/// states); the others use [`Verdict::Reproduced`], [`Verdict::NotReproduced`] and
/// [`Verdict::NotRun`]. Distinct from
/// `theory::oracle::PointVerdict` (Theorem 1's verdict at one parameter point) and
/// `conformance::harness::CheckVerdict` (one invariant check on one kernel case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The effect holds by the aggregation rule and its magnitude is at least
    /// [`MAGNITUDE_FRACTION`] of the paper's (or, for a claim of no effect, none is found).
    Reproduced,
    /// The effect holds by the aggregation rule but is smaller than [`MAGNITUDE_FRACTION`] of
    /// the paper's.
    ReproducedSmaller,
    /// The data do not meet the criterion.
    NotReproduced,
    /// Every model the claim rests on is at the ceiling ([`at_ceiling`]).
    NotTestableCeiling,
    /// Some data the claim needs are missing.
    NotRun,
    /// The claim's rule does not apply to this part: what it asks is undefined there (E7's
    /// "value peak = key peak + 1" in a model with no value branch is 0 of 0 heads). Never a
    /// pass; [`combine`] leaves such a part out.
    NotApplicable,
    /// A claim stated per part and never pooled across its parts (X1, §8.8: per pair of
    /// grids): it has no verdict of its own; each part's verdict is the claim's answer for it.
    PerPart,
}

impl Verdict {
    /// As written in reports.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::ReproducedSmaller => "reproduced qualitatively (smaller)",
            Verdict::NotReproduced => "not reproduced",
            Verdict::NotTestableCeiling => "not testable (ceiling)",
            Verdict::NotRun => "not run",
            Verdict::NotApplicable => "not applicable",
            Verdict::PerPart => "stated per part (never pooled)",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// How a claim's parts make its verdict: the one place of the rule (`theory/phase-lab.md` §7.6,
/// which §8.8 keeps; X1's exception is §8.8's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Combination {
    /// §7.6: *not reproduced* if any part is; otherwise *not run* if any part lacks data;
    /// otherwise *not testable (ceiling)* if any part is at the ceiling; otherwise the weakest
    /// of *reproduced qualitatively (smaller)* and *reproduced*. A part the rule does not apply
    /// to ([`Verdict::NotApplicable`]) is left out; a claim whose every part is so is not
    /// applicable; a claim with no parts is not run.
    EveryPart,
    /// §8.8 (X1): "stated per grid, never pooled across pairs": the claim's verdict is
    /// [`Verdict::PerPart`] (each part answers for itself) once some part has a verdict, and
    /// not run when none has (no part, or every part not run).
    PerPart,
}

/// A claim's verdict from its parts' verdicts by `rule` (see [`Combination`]). Every claim of
/// the ledger combines its parts here, and so does a part made of sub-parts (a model tested at
/// several strides).
pub fn combine(rule: Combination, parts: &[Verdict]) -> Verdict {
    let judged: Vec<Verdict> = parts.iter().copied().filter(|&v| v != Verdict::NotApplicable).collect();
    if parts.is_empty() {
        return Verdict::NotRun;
    }
    if judged.is_empty() {
        return Verdict::NotApplicable;
    }
    match rule {
        Combination::PerPart if judged.iter().all(|&v| v == Verdict::NotRun) => Verdict::NotRun,
        Combination::PerPart => Verdict::PerPart,
        Combination::EveryPart => {
            let rank = |v: Verdict| match v {
                Verdict::NotReproduced => 0,
                Verdict::NotRun => 1,
                Verdict::NotTestableCeiling => 2,
                Verdict::ReproducedSmaller => 3,
                Verdict::Reproduced => 4,
                // A part stated per part is a claim of its own: it decides nothing here.
                Verdict::PerPart | Verdict::NotApplicable => 5,
            };
            judged.into_iter().min_by_key(|&v| rank(v)).unwrap_or(Verdict::NotRun)
        }
    }
}

/// Whether a model is at the ceiling: given its per-group accuracies under each protocol
/// (pooled over seeds), every non-empty group of every protocol is at least
/// [`CEILING_ACCURACY`]. Needs at least one protocol with at least one non-empty group.
pub fn at_ceiling(protocols: &[&[GroupAccuracy]]) -> Result<bool> {
    if !protocols.iter().any(|p| p.iter().any(|g| g.n > 0)) {
        return Err(Error::invalid("ceiling rule", "needs at least one protocol with prompts"));
    }
    Ok(protocols.iter().all(|p| p.iter().filter(|g| g.n > 0).all(|g| g.accuracy >= CEILING_ACCURACY)))
}

/// What a claim asserts about an effect.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Claim {
    /// An effect exists, of the paper's magnitude `paper_pp` (e.g. compressed models' gaps).
    Effect {
        /// The paper's magnitude.
        paper_pp: f64,
    },
    /// No effect beyond `paper_max_pp` (e.g. full attention's gap of at most 6.1 pp).
    NoEffect {
        /// The paper's bound.
        paper_max_pp: f64,
    },
}

/// The verdict of a claim from the ceiling rule, the aggregation rule over seeds and the
/// measured magnitude:
///
/// - at the ceiling: not testable, whichever the claim (a model that gets almost everything
///   right can neither show an effect nor its absence);
/// - an effect: it must hold ([`SeedAgreement::present`]); then reproduced if the magnitude is
///   at least [`MAGNITUDE_FRACTION`] of the paper's, else reproduced qualitatively (smaller);
/// - no effect: reproduced if the effect is absent ([`SeedAgreement::absent`]) and the interval
///   of the magnitude reaches down to the paper's bound (the data are consistent with it).
pub fn verdict(claim: Claim, ceiling: bool, agreement: &SeedAgreement, measured: Magnitude) -> Verdict {
    if ceiling {
        return Verdict::NotTestableCeiling;
    }
    match claim {
        Claim::Effect { paper_pp } => {
            if !agreement.present() {
                Verdict::NotReproduced
            } else if measured.pp >= MAGNITUDE_FRACTION * paper_pp {
                Verdict::Reproduced
            } else {
                Verdict::ReproducedSmaller
            }
        }
        Claim::NoEffect { paper_max_pp } => {
            if agreement.absent() && measured.lo_pp <= paper_max_pp {
                Verdict::Reproduced
            } else {
                Verdict::NotReproduced
            }
        }
    }
}

/// Which pre-registration judges a run (a plan's `rules`): `v1` (§7, the committed issue-17 run
/// and every plan written before v2), `v2` (§8: both tests at `ALPHA / 2`, the ceiling rule of
/// §8.5, failed seeds excluded by §8.2) or `v3` (§9: v2's tests on the families scored beyond the
/// run's depth floor, §9.2, with §9.4's training budget).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rules {
    /// `theory/phase-lab.md` §7.
    #[default]
    V1,
    /// `theory/phase-lab.md` §8.
    V2,
    /// `theory/phase-lab.md` §9.
    V3,
}

impl Rules {
    /// Whether these are the v1 rules (the default, left out of plan files).
    pub fn is_v1(&self) -> bool {
        *self == Rules::V1
    }

    /// The training-success rule's budget of extensions (§8.2, §9.4), or `None` under v1, which
    /// has no training-success rule (§7.3).
    pub fn max_extensions(&self) -> Option<usize> {
        match self {
            Rules::V1 => None,
            Rules::V2 => Some(crate::analysis::training::MAX_EXTENSIONS),
            Rules::V3 => Some(crate::analysis::training::MAX_EXTENSIONS_V3),
        }
    }

    /// Whether scored families must lie beyond the run's depth floor (§9.2).
    pub fn scores_beyond_floor(&self) -> bool {
        *self == Rules::V3
    }

    /// Whether these rules judge by §8's machinery: the training-success rule excludes failed
    /// seeds (§8.2, §9.4), the binary and continuous tests at `ALPHA / 2` with the ceiling rule
    /// of §8.5, magnitudes as seed means with seed-level intervals (§8.7, §8.11). v2 and v3
    /// (§9.6: "§8.3-8.7 unchanged"); not v1.
    pub fn has_training_rule(&self) -> bool {
        self.max_extensions().is_some()
    }

    /// The rules' name as the ledger writes it (`v1`, `v2`, `v3`).
    pub fn name(&self) -> &'static str {
        match self {
            Rules::V1 => "v1",
            Rules::V2 => "v2",
            Rules::V3 => "v3",
        }
    }

    /// The section of `theory/phase-lab.md` that states the training-success rule and its
    /// budget (§8.2 for v2, §9.4 for v3; v1 has none and answers §7.3, which says so).
    pub fn training_section(&self) -> &'static str {
        match self {
            Rules::V1 => "§7.3",
            Rules::V2 => "§8.2",
            Rules::V3 => "§9.4",
        }
    }
}

/// §8.5: a model whose effect is absent is not testable (ceiling) only when, besides the
/// accuracy ceiling, every residue group's mean teacher-forced probability of the answer is at
/// least this under both protocols (the continuous test has no room either).
pub const PROB_CEILING: f64 = 0.99;

/// Whether every group's mean teacher-forced probability is at least [`PROB_CEILING`] under
/// every protocol given (`protocols[k][g]`: the mean over the group's prompts, `None` for an
/// empty group). Needs at least one protocol with at least one non-empty group.
pub fn at_prob_ceiling(protocols: &[&[Option<f64>]]) -> Result<bool> {
    if !protocols.iter().any(|p| p.iter().any(Option::is_some)) {
        return Err(Error::invalid("probability ceiling", "needs at least one protocol with prompts"));
    }
    Ok(protocols.iter().all(|p| p.iter().flatten().all(|&m| m >= PROB_CEILING)))
}

/// A model's phase effect by §8.4: each test (binary, continuous) holds, is absent or neither
/// by its own seed rule; the model's effect **holds** when it holds in either test and is
/// **absent** when it is absent in both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Effect {
    /// Holds in at least one test.
    Holds,
    /// Absent in every test.
    Absent,
    /// Neither.
    Neither,
}

impl Effect {
    /// The model's effect from its tests' agreements (each already at `ALPHA / 2`, §8.3).
    pub fn of(tests: &[&SeedAgreement]) -> Effect {
        if tests.iter().any(|a| a.present()) {
            Effect::Holds
        } else if !tests.is_empty() && tests.iter().all(|a| a.absent()) {
            Effect::Absent
        } else {
            Effect::Neither
        }
    }
}

/// The verdict of one model's part by the v2 rules (§8.4, §8.5): a significant effect counts
/// whatever the accuracy; only an **absent** effect at the ceiling (`ceiling`: accuracy and
/// probability ceilings both, [`at_ceiling`] and [`at_prob_ceiling`]) is not testable.
///
/// - an effect: holds, then the magnitude rule of §7.5; absent at the ceiling: not testable;
///   otherwise not reproduced;
/// - no effect: holds: not reproduced (at the ceiling too); absent at the ceiling: not
///   testable; absent elsewhere: reproduced when the magnitude's lower end is at most the
///   paper's bound; neither: not reproduced.
pub fn verdict_v2(claim: Claim, effect: Effect, ceiling: bool, measured: Magnitude) -> Verdict {
    match (claim, effect) {
        (Claim::Effect { paper_pp }, Effect::Holds) => {
            if measured.pp >= MAGNITUDE_FRACTION * paper_pp {
                Verdict::Reproduced
            } else {
                Verdict::ReproducedSmaller
            }
        }
        (_, Effect::Absent) if ceiling => Verdict::NotTestableCeiling,
        (Claim::NoEffect { paper_max_pp }, Effect::Absent) if measured.lo_pp <= paper_max_pp => Verdict::Reproduced,
        _ => Verdict::NotReproduced,
    }
}

/// X1's half: staggering "removes at least half" of the effect when the ratio's upper end is at
/// most this (`theory/phase-lab.md` §8.8).
pub const X1_HALF: f64 = 0.5;
/// X1's accuracy margin: "no cost" when the lower end of every accuracy difference's interval is
/// at least minus this many percentage points (§8.8).
pub const X1_ACCURACY_MARGIN_PP: f64 = 1.0;

/// What staggering did to a pair's phase effect (§8.8's X1, the first that applies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StaggerEffect {
    /// Absent at `S` and `S / 2`, and the ratio's upper end at most [`X1_HALF`].
    Removes,
    /// Absent at `S` (or the ratio's upper end below 1), holding at `S / 2` with the period scan
    /// declaring `S / 2`.
    MovesThePeriod,
    /// The ratio at most [`X1_HALF`] with its upper end below 1.
    Reduces,
    /// The ratio's interval contains 1.
    NoEffect,
    /// The ratio's lower end above 1.
    Worse,
    /// Otherwise (the ratio's upper end below 1, the ratio above [`X1_HALF`]).
    ReducesLessThanHalf,
}

impl StaggerEffect {
    /// Its words in the ledger.
    pub fn words(self) -> &'static str {
        match self {
            StaggerEffect::Removes => "removes",
            StaggerEffect::MovesThePeriod => "moves the period",
            StaggerEffect::Reduces => "reduces",
            StaggerEffect::NoEffect => "no effect",
            StaggerEffect::Worse => "worse",
            StaggerEffect::ReducesLessThanHalf => "reduces (less than half)",
        }
    }

    /// §8.8's rule, the first that applies: the staggered arm's effect at `S` and at `S / 2`,
    /// whether its corrected period scan declares `S / 2`, and the ratio `r` (staggered over
    /// twin) with its interval `(lo, hi)`.
    pub fn of(at_s: Effect, at_half: Effect, period_is_half: bool, r: f64, (lo, hi): (f64, f64)) -> StaggerEffect {
        if at_s == Effect::Absent && at_half == Effect::Absent && hi <= X1_HALF {
            StaggerEffect::Removes
        } else if (at_s == Effect::Absent || hi < 1.0) && at_half == Effect::Holds && period_is_half {
            StaggerEffect::MovesThePeriod
        } else if r <= X1_HALF && hi < 1.0 {
            StaggerEffect::Reduces
        } else if lo <= 1.0 && hi >= 1.0 {
            StaggerEffect::NoEffect
        } else if lo > 1.0 {
            StaggerEffect::Worse
        } else {
            StaggerEffect::ReducesLessThanHalf
        }
    }

    /// Whether X1 holds for the pair: the effect is removed or reduced (by at least half) and
    /// staggering cost no accuracy (`cost_lower_ends`: the lower end of every accuracy
    /// difference's interval, pp).
    pub fn x1_holds(self, cost_lower_ends: &[f64]) -> bool {
        matches!(self, StaggerEffect::Removes | StaggerEffect::Reduces)
            && !cost_lower_ends.is_empty()
            && cost_lower_ends.iter().all(|&lo| lo >= -X1_ACCURACY_MARGIN_PP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stats::PValue;

    fn agree(pooled: f64, seeds: &[f64]) -> SeedAgreement {
        let per: Vec<PValue> = seeds.iter().map(|&p| PValue::asymptotic(p)).collect();
        SeedAgreement::new(PValue::asymptotic(pooled), &per, 0.01)
    }

    /// X1's rule (§8.8), each state reached and its neighbours refused: the negative controls
    /// are the near misses (an upper end of 0.51, an effect left at `S / 2`, a cost of 1.01 pp).
    #[test]
    fn stagger_effects_follow_the_pre_registered_order() {
        use Effect::{Absent, Holds, Neither};
        use StaggerEffect::*;
        assert_eq!(StaggerEffect::of(Absent, Absent, false, 0.1, (0.0, 0.5)), Removes);
        assert_eq!(StaggerEffect::of(Absent, Absent, false, 0.1, (0.0, 0.51)), Reduces, "upper end above half");
        assert_eq!(StaggerEffect::of(Absent, Neither, false, 0.1, (0.0, 0.3)), Reduces, "S/2 not absent");
        assert_eq!(StaggerEffect::of(Absent, Holds, true, 0.8, (0.5, 1.2)), MovesThePeriod);
        assert_eq!(StaggerEffect::of(Holds, Holds, true, 0.8, (0.5, 0.99)), MovesThePeriod);
        assert_eq!(StaggerEffect::of(Holds, Holds, true, 0.8, (0.5, 1.2)), NoEffect, "S held, ratio up to 1.2");
        assert_eq!(StaggerEffect::of(Absent, Holds, false, 0.8, (0.5, 1.2)), NoEffect, "the scan did not say S/2");
        assert_eq!(StaggerEffect::of(Holds, Neither, false, 0.5, (0.3, 0.9)), Reduces);
        assert_eq!(StaggerEffect::of(Holds, Neither, false, 0.51, (0.3, 0.9)), ReducesLessThanHalf);
        assert_eq!(StaggerEffect::of(Holds, Neither, false, 1.0, (0.7, 1.3)), NoEffect);
        assert_eq!(StaggerEffect::of(Holds, Holds, false, 1.5, (1.01, 2.0)), Worse);
        assert!(Removes.x1_holds(&[-0.2, 0.5, -1.0]));
        assert!(!Removes.x1_holds(&[-0.2, 0.5, -1.01]), "a cost beyond the margin");
        assert!(!Removes.x1_holds(&[]), "no cost measured: not shown");
        assert!(Reduces.x1_holds(&[0.0]));
        for v in [MovesThePeriod, NoEffect, Worse, ReducesLessThanHalf] {
            assert!(!v.x1_holds(&[0.0]), "{v:?}");
        }
    }

    #[test]
    fn verdict_states_follow_the_rules() {
        let big = Magnitude { pp: 45.0, lo_pp: 30.0, hi_pp: 60.0 };
        let small = Magnitude { pp: 12.0, lo_pp: 6.0, hi_pp: 18.0 };
        let effect = Claim::Effect { paper_pp: PAPER_COMPRESSED_GAP_PP };
        assert_eq!(verdict(effect, false, &agree(1e-6, &[1e-4, 1e-3, 0.2]), big), Verdict::Reproduced);
        assert_eq!(verdict(effect, false, &agree(1e-6, &[1e-4, 1e-3, 0.2]), small), Verdict::ReproducedSmaller);
        // pooled significant but only one seed: does not hold
        assert_eq!(verdict(effect, false, &agree(1e-6, &[1e-9, 0.3, 0.2]), big), Verdict::NotReproduced);
        assert_eq!(verdict(effect, true, &agree(0.5, &[0.5, 0.5, 0.5]), small), Verdict::NotTestableCeiling);
        let none = Claim::NoEffect { paper_max_pp: PAPER_BASELINE_GAP_PP };
        assert_eq!(verdict(none, false, &agree(0.4, &[0.3, 0.02, 0.9]), small), Verdict::Reproduced);
        assert_eq!(verdict(none, false, &agree(1e-3, &[0.3, 0.02, 0.9]), small), Verdict::NotReproduced);
        assert_eq!(verdict(none, false, &agree(0.4, &[0.3, 0.02, 0.9]), big), Verdict::NotReproduced);
        assert_eq!(Verdict::ReproducedSmaller.to_string(), "reproduced qualitatively (smaller)");
    }

    #[test]
    fn ceiling_needs_every_group_of_every_protocol() {
        let high: Vec<GroupAccuracy> = (0..24).map(|g| GroupAccuracy::new(g, 99, 100)).collect();
        let mut one_low = high.clone();
        one_low[5] = GroupAccuracy::new(5, 97, 100);
        assert!(at_ceiling(&[&high, &high]).unwrap());
        assert!(!at_ceiling(&[&high, &one_low]).unwrap());
        assert!(at_ceiling(&[&[]]).is_err());
    }

    #[test]
    fn v2_a_significant_effect_counts_at_the_ceiling_and_only_absence_is_not_testable() {
        let m = Magnitude { pp: 45.0, lo_pp: 30.0, hi_pp: 60.0 };
        let zero = Magnitude { pp: 0.5, lo_pp: -1.0, hi_pp: 2.0 };
        let effect = Claim::Effect { paper_pp: PAPER_COMPRESSED_GAP_PP };
        let none = Claim::NoEffect { paper_max_pp: PAPER_BASELINE_GAP_PP };
        let holds = agree(1e-6, &[1e-4, 1e-3, 0.2]);
        let gone = agree(0.5, &[0.5, 0.2, 0.9]);
        let mid = agree(0.5, &[1e-4, 1e-3, 0.9]);
        // Either test holding makes the model's effect hold; absence needs both.
        assert_eq!(Effect::of(&[&gone, &holds]), Effect::Holds);
        assert_eq!(Effect::of(&[&gone, &gone]), Effect::Absent);
        assert_eq!(Effect::of(&[&gone, &mid]), Effect::Neither);
        assert_eq!(Effect::of(&[]), Effect::Neither);
        // At the ceiling: a held effect counts (v1 said not testable), an absent one does not.
        assert_eq!(verdict_v2(effect, Effect::Holds, true, m), Verdict::Reproduced);
        assert_eq!(verdict_v2(effect, Effect::Absent, true, m), Verdict::NotTestableCeiling);
        assert_eq!(verdict_v2(effect, Effect::Absent, false, m), Verdict::NotReproduced);
        assert_eq!(verdict_v2(none, Effect::Holds, true, zero), Verdict::NotReproduced);
        assert_eq!(verdict_v2(none, Effect::Absent, true, zero), Verdict::NotTestableCeiling);
        assert_eq!(verdict_v2(none, Effect::Absent, false, zero), Verdict::Reproduced);
        assert_eq!(verdict_v2(none, Effect::Absent, false, m), Verdict::NotReproduced);
        assert_eq!(verdict_v2(none, Effect::Neither, true, zero), Verdict::NotReproduced);
        // The probability ceiling: every group of every protocol.
        let hi = [Some(0.995), None, Some(0.999)];
        let lo = [Some(0.995), Some(0.98)];
        assert!(at_prob_ceiling(&[&hi, &hi]).unwrap());
        assert!(!at_prob_ceiling(&[&hi, &lo]).unwrap());
        assert!(at_prob_ceiling(&[&[None]]).is_err());
    }
}
