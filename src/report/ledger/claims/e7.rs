//! E7: gates drifting toward static concentration during training.

use super::*;
use crate::analysis::gates::Branch;

/// The claim (registered in [`super::LEDGER`]).
pub struct E7;

impl LedgerClaim for E7 {
    fn check(&self, c: &Collected) -> Claim {
        let claim =
            "some gates drift toward static concentration during training, key and value gates at adjacent offsets";
        let gated: Vec<&RunData> =
            c.runs.iter().filter(|r| r.gates.as_ref().is_some_and(|g| g.snapshots.len() >= 2)).collect();
        if gated.is_empty() {
            not_run("E7", claim, vec![])
        } else {
            let mut parts = Vec::new();
            let mut any_drift = false;
            let mut any_adjacent = false;
            for r in &gated {
                let Some(g) = &r.gates else { continue };
                let (first, last) = (&g.snapshots[0], &g.snapshots[g.snapshots.len() - 1]);
                let w = g.window as f64;
                let mut drifting = 0;
                let mut adjacent = 0;
                for x in &last.gates {
                    let x0 =
                        first.gates.iter().find(|y| y.layer == x.layer && y.head == x.head && y.branch == x.branch);
                    if let Some(x0) = x0 {
                        if x.static_concentration <= E7_MAX_STATIC_FRACTION_OF_W * w
                            && x.static_concentration <= E7_MAX_STATIC_RATIO * x0.static_concentration
                        {
                            drifting += 1;
                        }
                    }
                    if x.branch == Branch::Value {
                        let k = last
                            .gates
                            .iter()
                            .find(|y| y.layer == x.layer && y.head == x.head && y.branch == Branch::Key);
                        let peak = |p: &[f64]| p.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|q| q.0);
                        if let (Some(k), Some(v)) = (k.and_then(|k| peak(&k.profile)), peak(&x.profile)) {
                            if v == k + E7_VALUE_AFTER_KEY {
                                adjacent += 1;
                            }
                        }
                    }
                }
                let min_static = last.gates.iter().map(|x| x.static_concentration).fold(f64::INFINITY, f64::min);
                any_drift |= drifting > 0;
                any_adjacent |= adjacent > 0;
                parts.push(format!(
                    "{}: {drifting}/{} gates drifted to static concentration (lowest exp(H(E[a])) {:.2} of W = {}), {adjacent} heads with value peak = key peak + 1",
                    r.label,
                    last.gates.len(),
                    min_static,
                    g.window
                ));
            }
            Claim {
                id: "E7".into(),
                claim: claim.into(),
                measured: parts.join("; "),
                criterion: format!(
                    "some gate ends with static concentration <= {E7_MAX_STATIC_FRACTION_OF_W} W, at most {E7_MAX_STATIC_RATIO} of its value at the first checkpoint, and some head ends with its value gate's peak offset {E7_VALUE_AFTER_KEY} after its key gate's (criterion changed after the committed run: the adjacency was reported, now it also decides)"
                ),
                verdict: if any_drift && any_adjacent { Verdict::Reproduced } else { Verdict::NotReproduced },
                figures: gated.iter().map(|r| format!("figures/gates-{}-trajectory.png", r.label)).collect(),
                data: gated.iter().map(|r| format!("figures/gates-{}.json", r.label)).collect(),
            }
        }
    }
}
