//! K: the kernel invariants K1-K13 hold for every preset.

use super::*;
use crate::reproduce::InvariantStatus;

/// The claim (registered in [`super::LEDGER`]).
pub struct K;

impl LedgerClaim for K {
    fn check(&self, c: &Collected) -> Claim {
        match &c.kernels {
            None => {
                not_run("K", "the kernel invariants K1-K13 hold for every preset", vec!["kernels/kernels.json".into()])
            }
            Some(k) => {
                let failed: Vec<String> = k
                    .rows
                    .iter()
                    .filter(|r| r.status == InvariantStatus::Fail)
                    .map(|r| format!("{} {} {}", r.preset, r.implementation, r.invariant))
                    .collect();
                let presets = k.rows.iter().map(|r| r.preset.as_str()).collect::<std::collections::BTreeSet<_>>().len();
                let paths: Vec<&str> = k.rows.iter().fold(Vec::new(), |mut v, r| {
                    if !v.contains(&r.implementation.as_str()) {
                        v.push(&r.implementation);
                    }
                    v
                });
                Claim {
                    id: "K".into(),
                    claim: "the kernel invariants K1-K13 hold for every preset and every implementation path".into(),
                    measured: format!(
                        "{} presets x {} implementation paths ({}) x 13 invariants, {} cases each: {} pass, {} not applicable, {} fail{}",
                        presets,
                        paths.len(),
                        paths.join(", "),
                        k.cases,
                        k.rows.iter().filter(|r| r.status == InvariantStatus::Pass).count(),
                        k.rows.iter().filter(|r| r.status == InvariantStatus::NotApplicable).count(),
                        failed.len(),
                        if failed.is_empty() { String::new() } else { format!(" ({})", failed.join(", ")) }
                    ),
                    criterion: "no (preset, implementation, invariant) fails".into(),
                    verdict: if failed.is_empty() { Verdict::Reproduced } else { Verdict::NotReproduced },
                    figures: vec![],
                    data: vec!["kernels/kernels.json".into()],
                    ours: format!(
                        "{} pass, {} fail",
                        k.rows.iter().filter(|r| r.status == InvariantStatus::Pass).count(),
                        failed.len()
                    ),
                    ..not_run("K", "", vec![])
                }
            }
        }
    }
}
