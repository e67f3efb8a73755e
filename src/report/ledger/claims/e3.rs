//! E3: phase sensitivity without RoPE and with uniform averaging, settled by the one-KV-head
//! capacity arm where the two-head model is at the ceiling (`theory/phase-lab.md` §7.5).

use super::pooled::*;
use super::*;

/// The claim (registered in [`super::LEDGER`]).
pub struct E3;

impl LedgerClaim for E3 {
    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let s = 4;
        let mut parts = Vec::new();
        let mut also = Vec::new();
        for preset in ["w8s4-norope", "w8s4-uniform"] {
            let two = arm_for(&arms, preset, false);
            let one = arm_for(&arms, preset, true);
            let part = match (two, one) {
                (None, None) => Part { verdict: Verdict::NotRun, text: format!("{preset}: not run") },
                (Some(a), one) => {
                    let (p, _) = holds(a, PRIMARY, s);
                    match one {
                        // The two-head model at the ceiling: the verdict rests on the one-head arm.
                        Some(o) if p.verdict == Verdict::NotTestableCeiling => {
                            let (q, _) = holds(o, PRIMARY, s);
                            Part {
                                verdict: q.verdict,
                                text: format!("{}; so the one-KV-head arm decides: {}", p.text, q.text),
                            }
                        }
                        Some(o) => {
                            also.push(holds(o, PRIMARY, s).0.text);
                            p
                        }
                        None => p,
                    }
                }
                (None, Some(o)) => holds(o, PRIMARY, s).0,
            };
            parts.push(part);
            for a in [two, one].into_iter().flatten() {
                also.push(reported(a, Protocol::Prefix, s, ALPHA));
            }
        }
        // The capacity arm of the RoPE kernel: a control, reported.
        if let Some(a) = arm_for(&arms, "w8s4", true) {
            also.push(format!("control {}", holds(a, PRIMARY, s).0.text));
        }
        Claim {
            id: "E3".into(),
            claim: "phase sensitivity persists without RoPE and with uniform averaging".into(),
            measured: format!("{} || {}", texts(&parts), also.join(" | ")),
            criterion: format!(
                "in-sequence, seeds pooled: the phase effect at S = 4 holds (pooled p < {ALPHA} and required_seeds(n) seeds) for w8s4-norope and for w8s4-uniform; a model at the ceiling is not testable, and where the two-KV-head norope model is, its one-KV-head arm decides"
            ),
            verdict: combine(&parts),
            figures: both_figs(),
            data: both_data(),
        }
    }
}
