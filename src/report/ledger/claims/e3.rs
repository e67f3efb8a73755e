//! E3: phase sensitivity without RoPE and with uniform averaging, settled by the one-KV-head
//! capacity arm where the two-head model is at the ceiling (`theory/phase-lab.md` §7.5).

use super::arm::arm_for;
use super::claim::{Claim, LedgerClaim};
use super::files::{both_data, both_figs};
use super::judge::{holds, PRIMARY};
use super::parts::{Part, Reported};
use super::words::{ceiling_words, count_ours, level_words};
use crate::analysis::phase_test::ALPHA;
use crate::analysis::protocol::Protocol;
use crate::analysis::verdict::Verdict;
use crate::report::ledger::collect::{arms, Collected};

/// The claim (registered in [`super::LEDGER`]).
pub struct E3;

impl LedgerClaim for E3 {
    fn id(&self) -> &'static str {
        "E3"
    }

    fn short(&self) -> &'static str {
        "phase sensitivity persists without RoPE and with uniform averaging"
    }

    fn paper(&self) -> &'static str {
        "effect persists"
    }

    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let s = 4;
        let mut parts = Vec::new();
        let mut also = Reported::default();
        for preset in ["w8s4-norope", "w8s4-uniform"] {
            let two = arm_for(&arms, preset, false);
            let one = arm_for(&arms, preset, true);
            let part = match (two, one) {
                (None, None) => Part::new(preset, Verdict::NotRun, format!("{preset}: not run")),
                (Some(a), one) => {
                    let (p, _) = holds(a, PRIMARY, s);
                    match one {
                        // The two-head model at the ceiling: the verdict rests on the one-head arm.
                        Some(o) if p.verdict == Verdict::NotTestableCeiling => {
                            let (q, _) = holds(o, PRIMARY, s);
                            Part { text: format!("{}; so the one-KV-head arm decides: {}", p.text, q.text), ..q }
                        }
                        Some(o) => {
                            also.part("", holds(o, PRIMARY, s).0);
                            p
                        }
                        None => p,
                    }
                }
                (None, Some(o)) => holds(o, PRIMARY, s).0,
            };
            parts.push(part);
            for a in [two, one].into_iter().flatten() {
                also.test(a, Protocol::Prefix, s, ALPHA);
            }
        }
        // The capacity arm of the RoPE kernel: a control, reported.
        if let Some(a) = arm_for(&arms, "w8s4", true) {
            also.part("control ", holds(a, PRIMARY, s).0);
        }
        let mut c = Claim::from_parts(
            self,
            "phase sensitivity persists without RoPE and with uniform averaging",
            format!(
                "in-sequence, seeds pooled: the phase effect at S = 4 holds ({}) for w8s4-norope and for w8s4-uniform; {}, and where a two-KV-head model is, its one-KV-head arm decides",
                level_words(super::super::collect::rules(c), 1),
                ceiling_words(super::super::collect::rules(c))
            ),
            parts,
            also,
        );
        c.ours = count_ours(&c);
        c.figures = both_figs();
        c.data = both_data();
        c
    }
}
