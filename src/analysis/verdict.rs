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
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
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
/// and every plan written before v2) or `v2` (§8: both tests at `ALPHA / 2`, the ceiling rule of
/// §8.5, failed seeds excluded by §8.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rules {
    /// `theory/phase-lab.md` §7.
    #[default]
    V1,
    /// `theory/phase-lab.md` §8.
    V2,
}

impl Rules {
    /// Whether these are the v1 rules (the default, left out of plan files).
    pub fn is_v1(&self) -> bool {
        *self == Rules::V1
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stats::PValue;

    fn agree(pooled: f64, seeds: &[f64]) -> SeedAgreement {
        let per: Vec<PValue> = seeds.iter().map(|&p| PValue::asymptotic(p)).collect();
        SeedAgreement::new(PValue::asymptotic(pooled), &per, 0.01)
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
