//! E8 (scalar against vector gates), E9 (tied against untied gates) and E10 (DeepSeek-V4's CSA
//! kernel on the backbone), `theory/phase-lab.md` §8.8. Each reads its arm's effect at `S = 4`
//! by the plan's rules; E8 and E9 report the variant's depth-adjusted spread beside `w8s4`'s
//! with their difference (not a verdict); E10 also needs the corrected period scan to declare
//! 4. An arm that was not trained gives *not run*.

use super::arm::{arm_for, budget_difference, same_seeds, seed_families, seed_records, stat_seed, NO_OUTCOMES};
use super::claim::{not_run, Claim, Interval, LedgerClaim, Measure};
use super::files::{both_data, both_figs};
use super::gaps::{require_period, seed_level_input};
use super::judge::{holds, PRIMARY};
use super::parts::Reported;
use super::words::{count_ours, level_words};
use crate::analysis::phase_test::adjusted_spread_two_stage;
use crate::analysis::phase_test::ALPHA;
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::{self, BootInterval};
use crate::analysis::verdict::Rules;
use crate::report::ledger::collect::{arms, Arm, Collected};

/// A variant of `w8s4` whose effect must hold (E8: `w8s4-scalar`, E9: `w8s4-tied`).
pub struct Variant {
    /// `E8` or `E9`.
    pub id: &'static str,
    /// The variant's arm.
    pub arm: &'static str,
    /// The paper's claim.
    pub claim: &'static str,
    /// The claim in at most 12 words.
    pub short: &'static str,
    /// The paper's value, in words.
    pub paper: &'static str,
}

/// E8 (registered in [`super::LEDGER`]).
pub const E8: Variant = Variant {
    id: "E8",
    arm: "w8s4-scalar",
    claim: "scalar gates (one logit per slot) stay phase sensitive, like vector gates",
    short: "scalar gates stay phase sensitive (w8s4-scalar)",
    paper: "scalar gates phase sensitive",
};
/// E9 (registered in [`super::LEDGER`]).
pub const E9: Variant = Variant {
    id: "E9",
    arm: "w8s4-tied",
    claim: "a value gate tied to the key gate stays phase sensitive, like untied gates",
    short: "tied gates stay phase sensitive (w8s4-tied)",
    paper: "tied gates phase sensitive",
};

const S: usize = 4;

/// The two arms' mean depth-adjusted spreads (all phases) and the difference variant minus
/// `w8s4`, each with its seed-level interval (issue 38, §8.11: the two-stage bootstrap, seeds
/// then prompt families, paired by seed where the arms share their seeds), and whether the
/// draw was paired; or why not.
pub(super) fn difference(a: &Arm, base: &Arm) -> std::result::Result<([BootInterval; 3], bool), String> {
    let phases: Vec<usize> = (0..S).collect();
    let (ra, rb) = (
        seed_records(a, PRIMARY).ok_or_else(|| NO_OUTCOMES.to_string())?,
        seed_records(base, PRIMARY).ok_or_else(|| NO_OUTCOMES.to_string())?,
    );
    let (fa, fb) = (seed_families(a, PRIMARY), seed_families(base, PRIMARY));
    let paired = same_seeds(a, base);
    let (est, _, reps) = adjusted_spread_two_stage(
        &[seed_level_input(&ra, &fa), seed_level_input(&rb, &fb)],
        paired,
        S,
        &phases,
        stats::SEED_LEVEL_ROUNDS,
        stat_seed(a),
    )
    .map_err(|e| e.to_string())?;
    Ok((
        [
            BootInterval::from_sorted(est[0], &stats::column_sorted(&reps, 0)),
            BootInterval::from_sorted(est[1], &stats::column_sorted(&reps, 1)),
            BootInterval::from_sorted(est[0] - est[1], &stats::difference_replicates(&reps, 0, 1)),
        ],
        paired,
    ))
}

impl LedgerClaim for Variant {
    fn id(&self) -> &'static str {
        self.id
    }

    fn short(&self) -> &'static str {
        self.short
    }

    fn paper(&self) -> &'static str {
        self.paper
    }

    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let Some(a) = arm_for(&arms, self.arm, false) else {
            let mut n = not_run(self, self.claim, both_data());
            n.measured = format!("no data yet: the arm {} was not trained in this run set", self.arm);
            return n;
        };
        let (mut part, judged) = holds(a, PRIMARY, S);
        if judged.is_some() {
            match arm_for(&arms, "w8s4", false).map(|b| (b, difference(a, b))) {
                Some((b, Ok(([va, vb, d], paired)))) => {
                    part.text += &format!(
                        "; depth-adjusted spread (mean over seeds) {} against w8s4's {}, difference {} (seed-level: seeds, then prompt families; {}, {}; reported, not a verdict){}",
                        Interval::of_nonneg(&va).words(),
                        Interval::of_nonneg(&vb).words(),
                        Interval::of(&d).words(),
                        stats::SeedCount { seeds: a.runs.len().min(b.runs.len()) }.words(),
                        if paired { "paired by seed" } else { "unpaired: the seeds differ" },
                        budget_difference(a, b).map(|w| format!("; {w}")).unwrap_or_default()
                    );
                    for (arm, v, n) in [(&a.name, va, a.runs.len()), (&b.name, vb, b.runs.len())] {
                        part.measures.push(Measure {
                            arm: arm.clone(),
                            protocol: PRIMARY.name().into(),
                            what: "depth-adjusted phase spread (mean over seeds)".into(),
                            groups: S,
                            value: Interval::of_nonneg(&v),
                            noise_floor_pp: None,
                            p: None,
                            paper_pp: None,
                            decides: false,
                            seeds: Some(n),
                            per_seed_pp: Vec::new(),
                        });
                    }
                }
                Some((_, Err(e))) => part.text += &format!("; spreads: {e}"),
                None => part.text += "; w8s4 not in the run set: no comparison",
            }
        }
        let mut also = Reported::default();
        also.test(a, Protocol::Prefix, S, ALPHA);
        let mut c = Claim::from_parts(
            self,
            self.claim,
            format!(
                "in-sequence, seeds pooled: {}'s phase effect at S = 4 holds ({}); its spread beside w8s4's with their difference is reported, not judged",
                self.arm,
                level_words(a.rules, 1)
            ),
            vec![part],
            also,
        );
        c.ours = count_ours(&c);
        c.figures = both_figs();
        c.data = both_data();
        c
    }
}

/// E10's paper value under v3 (§9.7): "HCA layers contribute little" is E12's to test, so E10
/// no longer carries it.
pub const E10_PAPER_V3: &str = "CSA period 4";

/// E10 (registered in [`super::LEDGER`]).
pub struct E10;

impl LedgerClaim for E10 {
    fn id(&self) -> &'static str {
        "E10"
    }

    fn short(&self) -> &'static str {
        "DeepSeek-V4 CSA on the backbone: period 4"
    }

    fn paper(&self) -> &'static str {
        "CSA period 4; HCA contributes little"
    }

    fn check(&self, c: &Collected) -> Claim {
        let claim = "DeepSeek-V4's CSA kernel on the backbone is phase sensitive with period 4";
        let arms = arms(c);
        let Some(a) = arm_for(&arms, "dsv4-csa", false) else {
            let mut n = not_run(self, claim, both_data());
            n.measured = "no data yet: the arm dsv4-csa was not trained in this run set".into();
            if crate::report::ledger::collect::rules(c) == Rules::V3 {
                n.paper = E10_PAPER_V3.into();
            }
            return n;
        };
        let (mut part, judged) = holds(a, PRIMARY, S);
        if judged.is_some() {
            require_period(&mut part, a, PRIMARY, S);
        }
        let mut also = Reported::default();
        also.test(a, Protocol::Prefix, S, ALPHA);
        // §9.7: under v3 the HCA half of the paper's observation is E12's claim, not E10's.
        let v3 = a.rules == Rules::V3;
        if !v3 {
            also.texts.push(
                "the paper's \"HCA layers contribute little\" is not tested: no arm has an HCA layer (the backbone's sequences are far shorter than HCA's rate of 128)".into(),
            );
        }
        let mut c = Claim::from_parts(
            self,
            claim,
            format!(
                "in-sequence, seeds pooled: dsv4-csa's phase effect at S = 4 holds ({}) and the corrected period scan declares 4",
                level_words(a.rules, 1)
            ),
            vec![part],
            also,
        );
        c.ours = count_ours(&c);
        if v3 {
            c.paper = E10_PAPER_V3.into();
        }
        c.figures = both_figs();
        c.data = both_data();
        c
    }
}
