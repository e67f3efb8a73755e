//! K: the kernel invariants (K1-K14) hold for every preset, on every grid it uses.

use super::claim::{not_run, Claim, LedgerClaim};
use crate::analysis::verdict::Verdict;
use crate::report::ledger::collect::Collected;
use crate::reproduce::InvariantStatus;

/// The claim (registered in [`super::LEDGER`]).
pub struct K;

impl LedgerClaim for K {
    fn id(&self) -> &'static str {
        "K"
    }

    fn short(&self) -> &'static str {
        "every kernel invariant holds on every preset and grid"
    }

    fn paper(&self) -> &'static str {
        "- (our kernels' invariants)"
    }

    fn check(&self, c: &Collected) -> Claim {
        match &c.kernels {
            None => not_run(self, &claim_text(), vec!["kernels/kernels.json".into()]),
            Some(k) => {
                let failed: Vec<String> = k
                    .rows
                    .iter()
                    .filter(|r| r.status == InvariantStatus::Fail)
                    .map(|r| format!("{} {} {}", r.preset, r.implementation, r.invariant))
                    .collect();
                let distinct = |f: &dyn Fn(&str) -> &str| {
                    k.rows.iter().map(|r| f(&r.preset)).collect::<std::collections::BTreeSet<_>>().len()
                };
                let presets = distinct(&|p| p.split('@').next().unwrap_or(p));
                let grids = distinct(&|p| p);
                let invariants =
                    k.rows.iter().map(|r| r.invariant.as_str()).collect::<std::collections::BTreeSet<_>>().len();
                let paths: Vec<&str> = k.rows.iter().fold(Vec::new(), |mut v, r| {
                    if !v.contains(&r.implementation.as_str()) {
                        v.push(&r.implementation);
                    }
                    v
                });
                Claim {
                        claim: format!("{} and every implementation path", claim_text()),
                    measured: format!(
                        "{} presets ({} grids) x {} implementation paths ({}) x {} invariants, {} cases each: {} pass, {} not applicable, {} fail{}",
                        presets,
                        grids,
                        paths.len(),
                        paths.join(", "),
                        invariants,
                        k.cases,
                        k.rows.iter().filter(|r| r.status == InvariantStatus::Pass).count(),
                        k.rows.iter().filter(|r| r.status == InvariantStatus::NotApplicable).count(),
                        failed.len(),
                        if failed.is_empty() { String::new() } else { format!(" ({})", failed.join(", ")) }
                    ),
                    criterion: "no (preset, implementation, invariant) fails".into(),
                    section: String::new(),
                    verdict: if failed.is_empty() { Verdict::Reproduced } else { Verdict::NotReproduced },
                    figures: vec![],
                    data: vec!["kernels/kernels.json".into()],
                    ours: format!(
                        "{} pass, {} fail",
                        k.rows.iter().filter(|r| r.status == InvariantStatus::Pass).count(),
                        failed.len()
                    ),
                    ..not_run(self, "", vec![])
                }
            }
        }
    }
}

/// The claim in words, its invariant range read from the harness's catalogue.
fn claim_text() -> String {
    let all = crate::conformance::harness::Invariant::ALL;
    let (first, last) = (all[0].id(), all[all.len() - 1].id());
    format!("the kernel invariants {first}-{last} hold for every preset, on each grid it uses")
}
