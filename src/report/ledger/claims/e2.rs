//! E2: the period follows the stride.

use super::*;

/// The claim (registered in [`super::LEDGER`]).
pub struct E2;

impl LedgerClaim for E2 {
    fn check(&self, c: &Collected) -> Claim {
        let want = [("w8s4", 4), ("w8s6", 6), ("w8s8", 8)];
        let mut parts = Vec::new();
        let mut all = true;
        let mut missing = false;
        for (p, s) in want {
            match run(c, p).filter(|r| !r.evals.is_empty()) {
                None => {
                    missing = true;
                    parts.push(format!("{p}: not run"));
                }
                Some(r) => {
                    let periods: Vec<String> =
                        r.evals.iter().map(|(pr, e)| format!("{} {}", pr.name(), period_word(e))).collect();
                    let ok = r.evals.values().any(|e| e.profile.period() == Some(s));
                    all &= ok;
                    parts.push(format!("{p} (S = {s}): {}", periods.join(", ")));
                }
            }
        }
        Claim {
            id: "E2".into(),
            claim: "the period follows the stride: S in {4, 6, 8} (W = 8) give periods 4, 6, 8".into(),
            measured: parts.join("; "),
            criterion: format!(
                "each of w8s4, w8s6, w8s8 has estimated period = S (F test p < {}) under some protocol",
                crate::analysis::phase::PERIOD_ALPHA
            ),
            verdict: if missing {
                Verdict::NotRun
            } else if all {
                Verdict::Reproduced
            } else {
                Verdict::NotReproduced
            },
            figures: both_figs(),
            data: both_data(),
        }
    }
}
