//! E3: phase sensitivity persists without RoPE and with uniform averaging.

use super::*;

/// The claim (registered in [`super::LEDGER`]).
pub struct E3;

impl LedgerClaim for E3 {
    fn check(&self, c: &Collected) -> Claim {
        let mut parts = Vec::new();
        let mut all = true;
        let mut missing = false;
        for p in ["w8s4-norope", "w8s4-uniform"] {
            match run(c, p).filter(|r| !r.evals.is_empty()) {
                None => {
                    missing = true;
                    parts.push(format!("{p}: not run"));
                }
                Some(r) => {
                    let per: Vec<String> = r
                        .evals
                        .iter()
                        .map(|(pr, e)| {
                            format!(
                                "{} gap {:.1} pp, chi2 p {}",
                                pr.name(),
                                e.profile.max_gap_pp,
                                fmt_p(e.profile.chi_square.p_value)
                            )
                        })
                        .collect();
                    all &= r.evals.values().any(|e| e.profile.chi_square.p_value < ALPHA);
                    parts.push(format!("{p}: {}", per.join("; ")));
                }
            }
        }
        Claim {
            id: "E3".into(),
            claim: "phase sensitivity persists without RoPE and with uniform averaging".into(),
            measured: parts.join(" | "),
            criterion: format!(
                "w8s4-norope and w8s4-uniform each phase-dependent (chi-square p < {ALPHA}) under some protocol"
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
