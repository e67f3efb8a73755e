//! E1: every compressed model is phase sensitive at its stride; full attention is not
//! (`theory/phase-lab.md` §7.5).

use super::arm::{arm_is_full, evaluated, on_staggered_grids, untrained_part};
use super::claim::{not_run, Claim, LedgerClaim};
use super::files::{both_data, both_figs};
use super::judge::{absent, holds, BASELINE_STRIDES, PRIMARY};
use super::parts::{Part, Reported};
use super::words::{ceiling_words, count_ours, level_words};
use crate::analysis::phase_test::ALPHA;
use crate::analysis::protocol::Protocol;
use crate::analysis::verdict::Verdict;
use crate::report::ledger::collect::{arms, Arm, Collected};

/// The claim (registered in [`super::LEDGER`]).
pub struct E1;

impl LedgerClaim for E1 {
    fn id(&self) -> &'static str {
        "E1"
    }

    fn short(&self) -> &'static str {
        "compressed models are phase sensitive; full attention is not"
    }

    fn paper(&self) -> &'static str {
        "compressed: periodic; full: flat"
    }

    fn check(&self, c: &Collected) -> Claim {
        let claim = "every compressed model is phase sensitive at its stride; full attention is not";
        let arms = arms(c);
        let full: Vec<&Arm> = arms.iter().filter(|a| arm_is_full(a) && evaluated(a)).collect();
        let comp: Vec<&Arm> = arms.iter().filter(|a| !arm_is_full(a) && evaluated(a)).collect();
        if full.is_empty() || comp.is_empty() {
            return not_run(self, claim, both_data());
        }
        // The paper's claim is about its compressors, on one grid: an arm on staggered grids
        // (issue 30) is X1's intervention, reported here and judged there (§8.11).
        let (comp, staggered): (Vec<&Arm>, Vec<&Arm>) = comp.into_iter().partition(|a| !on_staggered_grids(a));
        // An arm none of whose seeds trained is a part that was not run (§8.2, §8.8), never
        // dropped from the claim.
        let mut parts: Vec<Part> =
            arms.iter().filter(|a| !arm_is_full(a) && !on_staggered_grids(a)).filter_map(untrained_part).collect();
        let mut also = Reported::default();
        for a in staggered {
            if let Some(s) = a.stride {
                also.part("on staggered grids (X1's arm, reported): ", holds(a, PRIMARY, s).0);
            }
        }
        for a in comp {
            match a.stride {
                Some(s) => {
                    parts.push(holds(a, PRIMARY, s).0);
                    also.test(a, Protocol::Prefix, s, ALPHA);
                }
                None => parts.push(Part::new(&a.name, Verdict::NotRun, format!("{}: no stride", a.name))),
            }
        }
        for a in full {
            parts.push(absent(a, PRIMARY, &BASELINE_STRIDES));
        }
        let rules = super::super::collect::rules(c);
        let mut c = Claim::from_parts(
            self,
            claim,
            format!(
                "in-sequence, seeds pooled: for every compressed model on one grid the phase effect at its own S holds: {}; for full attention the effect is absent at each of S = 4, 6, 8: {}; {}",
                level_words(rules, 1),
                level_words(rules, 3),
                ceiling_words(rules)
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
