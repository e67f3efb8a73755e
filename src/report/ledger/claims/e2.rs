//! E2: the period follows the stride (`theory/phase-lab.md` §7.5).

use super::pooled::*;
use super::*;

/// The claim (registered in [`super::LEDGER`]).
pub struct E2;

impl LedgerClaim for E2 {
    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let mut parts = Vec::new();
        let mut also = Reported::default();
        let mut declared = Vec::new();
        for (preset, s) in [("w8s4", 4), ("w8s6", 6), ("w8s8", 8)] {
            let Some(a) = arm_for(&arms, preset, false) else {
                parts.push(Part::new(preset, Verdict::NotRun, format!("{preset}: not run")));
                continue;
            };
            let (mut part, test) = holds(a, PRIMARY, s);
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
            "E2",
            "the period follows the stride: S in {4, 6, 8} (W = 8) give periods 4, 6, 8",
            format!(
                "in-sequence, seeds pooled: for each of w8s4, w8s6, w8s8 the phase effect at its own S holds (pooled p < {ALPHA} and required_seeds(n) seeds) and the corrected period scan declares exactly S (p < {})",
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
