//! E8 (scalar against vector gates), E9 (tied against untied gates) and E10 (DeepSeek-V4's CSA
//! kernel on the backbone), `theory/phase-lab.md` §8.8. Each reads its arm's effect at `S = 4`
//! by the plan's rules; E8 and E9 report the variant's depth-adjusted spread beside `w8s4`'s
//! with their difference (not a verdict); E10 also needs the corrected period scan to declare
//! 4. An arm that was not trained gives *not run*.

use super::pooled::*;
use super::*;
use crate::analysis::phase_test::adjusted_gap_replicates;
use crate::analysis::stats::BootInterval;

/// A variant of `w8s4` whose effect must hold (E8: `w8s4-scalar`, E9: `w8s4-tied`).
pub struct Variant {
    /// `E8` or `E9`.
    pub id: &'static str,
    /// The variant's arm.
    pub arm: &'static str,
    /// The paper's claim.
    pub claim: &'static str,
}

/// E8 (registered in [`super::LEDGER`]).
pub const E8: Variant = Variant {
    id: "E8",
    arm: "w8s4-scalar",
    claim: "scalar gates (one logit per slot) stay phase sensitive, like vector gates",
};
/// E9 (registered in [`super::LEDGER`]).
pub const E9: Variant = Variant {
    id: "E9",
    arm: "w8s4-tied",
    claim: "a value gate tied to the key gate stays phase sensitive, like untied gates",
};

const S: usize = 4;

/// The two arms' mean depth-adjusted spreads (all phases) and the difference variant minus
/// `w8s4`, each with its bootstrap interval (replicates paired by index, §8.7), or why not.
fn difference(a: &Arm, base: &Arm) -> std::result::Result<[BootInterval; 3], String> {
    let phases: Vec<usize> = (0..S).collect();
    let run = |x: &Arm| -> std::result::Result<(f64, Vec<f64>), String> {
        let seeds = seed_records(x, PRIMARY).ok_or_else(|| NO_OUTCOMES.to_string())?;
        adjusted_gap_replicates(&seeds, S, &phases, stats::BOOTSTRAP_ROUNDS, stat_seed(x)).map_err(|e| e.to_string())
    };
    let ((va, ra), (vb, rb)) = (run(a)?, run(base)?);
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let rd: Vec<f64> = ra.iter().zip(&rb).map(|(x, y)| x - y).collect();
    Ok([
        BootInterval::from_sorted(va, &sorted(ra)),
        BootInterval::from_sorted(vb, &sorted(rb)),
        BootInterval::from_sorted(va - vb, &sorted(rd)),
    ])
}

impl LedgerClaim for Variant {
    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let Some(a) = arm_for(&arms, self.arm, false) else {
            let mut n = not_run(self.id, self.claim, both_data());
            n.measured = format!("no data yet: the arm {} was not trained in this run set", self.arm);
            return n;
        };
        let (mut part, judged) = holds(a, PRIMARY, S);
        if judged.is_some() {
            match arm_for(&arms, "w8s4", false).map(|b| (b, difference(a, b))) {
                Some((b, Ok([va, vb, d]))) => {
                    part.text += &format!(
                        "; depth-adjusted spread (mean over seeds) {} against w8s4's {}, difference {} (reported, not a verdict)",
                        Interval::of(&va).words(),
                        Interval::of(&vb).words(),
                        Interval::of(&d).words()
                    );
                    for (arm, v) in [(&a.name, va), (&b.name, vb)] {
                        part.measures.push(Measure {
                            arm: arm.clone(),
                            protocol: PRIMARY.name().into(),
                            what: "depth-adjusted phase spread (mean over seeds)".into(),
                            groups: S,
                            value: Interval::of(&v),
                            noise_floor_pp: None,
                            p: None,
                            paper_pp: None,
                            decides: false,
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
            self.id,
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

/// E10 (registered in [`super::LEDGER`]).
pub struct E10;

impl LedgerClaim for E10 {
    fn check(&self, c: &Collected) -> Claim {
        let claim = "DeepSeek-V4's CSA kernel on the backbone is phase sensitive with period 4";
        let arms = arms(c);
        let Some(a) = arm_for(&arms, "dsv4-csa", false) else {
            let mut n = not_run("E10", claim, both_data());
            n.measured = "no data yet: the arm dsv4-csa was not trained in this run set".into();
            return n;
        };
        let (mut part, judged) = holds(a, PRIMARY, S);
        if judged.is_some() {
            require_period(&mut part, a, PRIMARY, S);
        }
        let mut also = Reported::default();
        also.test(a, Protocol::Prefix, S, ALPHA);
        also.texts.push(
            "the paper's \"HCA layers contribute little\" is not tested: no arm has an HCA layer (the backbone's sequences are far shorter than HCA's rate of 128)".into(),
        );
        let mut c = Claim::from_parts(
            "E10",
            claim,
            format!(
                "in-sequence, seeds pooled: dsv4-csa's phase effect at S = 4 holds ({}) and the corrected period scan declares 4",
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
