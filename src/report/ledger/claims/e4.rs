//! E4: within-window asymmetry in W8/S8, its magnitude beside the paper's
//! (`theory/phase-lab.md` §7.5).

use super::pooled::*;
use super::*;
use crate::analysis::phase_test::adjusted_gap_interval;
use crate::analysis::verdict::{self, Magnitude, MAGNITUDE_FRACTION, PAPER_WITHIN_WINDOW_PP};

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
            match adjusted_gap_interval(&seeds, s, stats::BOOTSTRAP_ROUNDS, stat_seed(a)) {
                Ok(m) => {
                    part.verdict = verdict::verdict(
                        verdict::Claim::Effect { paper_pp: PAPER_WITHIN_WINDOW_PP },
                        false,
                        &t.agreement,
                        m,
                    );
                    part.text += &magnitude_words(&m);
                }
                Err(e) => {
                    part.verdict = Verdict::NotRun;
                    part.text += &format!("; magnitude: not testable: {e}");
                }
            }
        }
        let also = reported(a, Protocol::Prefix, s, ALPHA);
        Claim {
            id: "E4".into(),
            claim: claim.into(),
            measured: format!("{} || {also}", part.text),
            criterion: format!(
                "in-sequence, seeds pooled: the phase effect of w8s8 at S = 8 holds (pooled p < {ALPHA} and required_seeds(n) seeds); reproduced when its depth-adjusted phase spread is at least {MAGNITUDE_FRACTION} of the paper's {PAPER_WITHIN_WINDOW_PP} pp, else reproduced qualitatively (smaller); at the ceiling not testable"
            ),
            verdict: part.verdict,
            figures: vec!["figures/folded-prefix.png".into(), "figures/folded-in-sequence.png".into()],
            data: vec!["figures/folded-prefix.csv".into(), "figures/folded-in-sequence.csv".into()],
        }
    }
}

/// A magnitude beside the paper's.
fn magnitude_words(m: &Magnitude) -> String {
    format!(
        "; depth-adjusted phase spread (mean over seeds) {:.1} pp [{:.1}, {:.1}] (paper: {PAPER_WITHIN_WINDOW_PP} pp)",
        m.pp, m.lo_pp, m.hi_pp
    )
}
