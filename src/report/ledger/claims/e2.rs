//! E2: the period follows the stride (`theory/phase-lab.md` §7.5).

use super::arm::{arm_for, untrained_arm, untrained_part};
use super::claim::{Claim, LedgerClaim};
use super::files::{both_data, both_figs};
use super::gaps::require_period;
use super::judge::{holds, PRIMARY};
use super::parts::{Part, Reported};
use super::words::{count_ours, largest_seed_spread, level_words};
use crate::analysis::phase_test::ALPHA;
use crate::analysis::protocol::Protocol;
use crate::analysis::verdict::Verdict;
use crate::report::ledger::collect::{arms, Collected};

/// The claim (registered in [`super::LEDGER`]).
pub struct E2;

impl LedgerClaim for E2 {
    fn id(&self) -> &'static str {
        "E2"
    }

    fn short(&self) -> &'static str {
        "the period follows the stride (S = 4, 6, 8)"
    }

    fn paper(&self) -> &'static str {
        "periods 4, 6, 8"
    }

    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let mut parts = Vec::new();
        let mut also = Reported::default();
        let mut declared = Vec::new();
        // v2 (§8.8) adds W4/S4 and W12/S12: with W8/S8 they hold overlap fixed while the ratio
        // changes.
        let geometries: &[(&str, usize)] = match super::super::collect::rules(c) {
            crate::analysis::verdict::Rules::V1 => &[("w8s4", 4), ("w8s6", 6), ("w8s8", 8)],
            crate::analysis::verdict::Rules::V2 | crate::analysis::verdict::Rules::V3 => {
                &[("w8s4", 4), ("w8s6", 6), ("w8s8", 8), ("w4s4", 4), ("w12s12", 12)]
            }
        };
        for &(preset, s) in geometries {
            let Some(a) = arm_for(&arms, preset, false) else {
                match untrained_arm(&arms, preset).and_then(untrained_part) {
                    Some(p) => parts.push(p),
                    None => parts.push(Part::new(preset, Verdict::NotRun, format!("{preset}: not run"))),
                }
                continue;
            };
            let (mut part, test) = holds(a, PRIMARY, s);
            if a.rules.has_training_rule() {
                if let Some(w) = largest_seed_spread(&part) {
                    part.text += &format!("; largest per-seed depth-adjusted spread {w}");
                }
            }
            if test.is_some() {
                if let Some(declared_period) = require_period(&mut part, a, PRIMARY, s) {
                    let words = declared_period.map(|p| p.to_string()).unwrap_or_else(|| "none".into());
                    declared.push(format!("{}: {words}", a.name));
                }
            }
            parts.push(part);
            also.test(a, Protocol::Prefix, s, ALPHA);
        }
        let mut c = Claim::from_parts(
            self,
            "the period follows the stride: S in {4, 6, 8} (W = 8) give periods 4, 6, 8",
            format!(
                "in-sequence, seeds pooled: for each of {} the phase effect at its own S holds ({}) and the corrected period scan declares exactly S (p < {})",
                geometries.iter().map(|g| g.0).collect::<Vec<_>>().join(", "),
                level_words(super::super::collect::rules(c), 1),
                crate::analysis::phase::PERIOD_ALPHA
            ),
            parts,
            also,
        );
        c.ours = if declared.is_empty() {
            count_ours(&c)
        } else {
            format!("declared period {}; {}", declared.join(", "), count_ours(&c))
        };
        c.figures = both_figs();
        c.data = both_data();
        c
    }
}
