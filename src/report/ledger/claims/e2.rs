//! E2: the period follows the stride (`theory/phase-lab.md` §7.5).

use super::pooled::*;
use super::*;

/// The claim (registered in [`super::LEDGER`]).
pub struct E2;

impl LedgerClaim for E2 {
    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let mut parts = Vec::new();
        let mut also = Vec::new();
        for (preset, s) in [("w8s4", 4), ("w8s6", 6), ("w8s8", 8)] {
            let Some(a) = arm_for(&arms, preset, false) else {
                parts.push(Part { verdict: Verdict::NotRun, text: format!("{preset}: not run") });
                continue;
            };
            let (mut part, test) = holds(a, PRIMARY, s);
            if test.is_some() {
                match period(a, PRIMARY) {
                    Ok((scan, stability)) => {
                        if scan.period != Some(s) && part.verdict == Verdict::Reproduced {
                            part.verdict = Verdict::NotReproduced;
                        }
                        part.text += &format!(
                            "; corrected period scan (seeds pooled): best {}, corrected p {}, declared {}, stability {:.0} %",
                            scan.best,
                            scan.corrected_p,
                            scan.period.map(|p| p.to_string()).unwrap_or_else(|| "none".into()),
                            100.0 * stability
                        );
                    }
                    Err(e) => {
                        part.verdict = Verdict::NotRun;
                        part.text += &format!("; period scan: {e}");
                    }
                }
            }
            parts.push(part);
            also.push(reported(a, Protocol::Prefix, s, ALPHA));
        }
        Claim {
            id: "E2".into(),
            claim: "the period follows the stride: S in {4, 6, 8} (W = 8) give periods 4, 6, 8".into(),
            measured: format!("{} || {}", texts(&parts), also.join(" | ")),
            criterion: format!(
                "in-sequence, seeds pooled: for each of w8s4, w8s6, w8s8 the phase effect at its own S holds (pooled p < {ALPHA} and required_seeds(n) seeds) and the corrected period scan declares exactly S (p < {})",
                crate::analysis::phase::PERIOD_ALPHA
            ),
            verdict: combine(&parts),
            figures: both_figs(),
            data: both_data(),
        }
    }
}
