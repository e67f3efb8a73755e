//! E4: within-window asymmetry in W8/S8, its magnitude beside the paper's
//! (`theory/phase-lab.md` §7.5).

use super::pooled::*;
use super::*;
use crate::analysis::phase_test::adjusted_gap_bootstrap;
use crate::analysis::stats::{BootInterval, Magnitude};
use crate::analysis::verdict::{self, MAGNITUDE_FRACTION, PAPER_WITHIN_WINDOW_PP};

/// The claim (registered in [`super::LEDGER`]).
pub struct E4;

impl LedgerClaim for E4 {
    fn check(&self, c: &Collected) -> Claim {
        let claim = "within-window asymmetry: in W8/S8, accuracy varies strongly among phases that share a window";
        let arms = arms(c);
        let Some(a) = arm_for(&arms, "w8s8", false) else { return not_run("E4", claim, vec![]) };
        let s = 8;
        let (mut part, test) = holds(a, PRIMARY, s);
        if let Some(t) = test {
            let seeds = seed_records(a, PRIMARY).unwrap_or_default();
            match adjusted_gap_bootstrap(&seeds, s, stats::BOOTSTRAP_ROUNDS, stat_seed(a)) {
                Ok(b) => {
                    // The v1 verdict reads the raw spread and its percentile interval (§7.5).
                    part.verdict = verdict::verdict(
                        verdict::Claim::Effect { paper_pp: PAPER_WITHIN_WINDOW_PP },
                        false,
                        &t.agreement,
                        Magnitude { pp: b.estimate, lo_pp: b.lo, hi_pp: b.hi },
                    );
                    part.text += &magnitude_words(&b);
                    part.measures.push(Measure {
                        arm: a.name.clone(),
                        protocol: PRIMARY.name().into(),
                        what: "depth-adjusted phase spread (mean over seeds)".into(),
                        groups: s,
                        value: Interval::of(&b),
                        noise_floor_pp: None,
                        p: None,
                        paper_pp: Some(PAPER_WITHIN_WINDOW_PP),
                        decides: true,
                    });
                }
                Err(e) => {
                    part.verdict = Verdict::NotRun;
                    part.text += &format!("; magnitude: not testable: {e}");
                }
            }
        }
        let mut also = Reported::default();
        also.test(a, Protocol::Prefix, s, ALPHA);
        let mut c = Claim::from_parts(
            "E4",
            claim,
            format!(
                "in-sequence, seeds pooled: the phase effect of w8s8 at S = 8 holds (pooled p < {ALPHA} and required_seeds(n) seeds); reproduced when its depth-adjusted phase spread is at least {MAGNITUDE_FRACTION} of the paper's {PAPER_WITHIN_WINDOW_PP} pp, else reproduced qualitatively (smaller); at the ceiling not testable"
            ),
            vec![part],
            also,
        );
        c.ours = match c.measures.first() {
            Some(m) => format!("{} ({})", m.value.words(), m.arm),
            None => count_ours(&c),
        };
        c.flags.push(INTERVAL_FLAG.into());
        c.figures = vec!["figures/folded-prefix.png".into(), "figures/folded-in-sequence.png".into()];
        c.data = vec!["figures/folded-prefix.csv".into(), "figures/folded-in-sequence.csv".into()];
        c
    }
}

/// A magnitude beside the paper's.
fn magnitude_words(b: &BootInterval) -> String {
    format!(
        "; depth-adjusted phase spread (mean over seeds) {} (paper: {PAPER_WITHIN_WINDOW_PP} pp)",
        Interval::of(b).full_words()
    )
}
