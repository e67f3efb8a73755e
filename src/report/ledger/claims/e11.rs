//! E11 (v3 only, `theory/phase-lab.md` §9.7; the paper's Appendix H, `theory/gate-cycling.md`):
//! gate cycling shifts the pattern but does not restore the weakest phase. On `w8s8`, prefix
//! protocol, the KV heads of the last layer cycled by each `k` in `1..S`; per seed (a) the lag is
//! non-zero for at least half of the `k` and (b) under every `k` the uncycled model's weakest
//! phase stays below the mean of the others; E11 holds when (a) and (b) hold in at least
//! `required_seeds(n)` seeds. The lag against `k mod S` is reported per `k`.

use super::arm::arm_for;
use super::claim::{not_run, Claim, LedgerClaim, SeedLine};
use super::parts::{Part, Reported};
use super::words::seeds_ours;
use crate::analysis::claims_v3::{e11_seed, holds_in_enough_seeds, E11_PRESET};
use crate::analysis::phase_test::required_seeds;
use crate::analysis::protocol::Protocol;
use crate::analysis::verdict::{Rules, Verdict};
use crate::report::ledger::collect::{arms, Arm, Collected, RunData};
use std::collections::BTreeMap;

/// The claim (registered in [`super::LEDGER`]).
pub struct E11;

const CLAIM: &str =
    "cycling a layer's gates shifts the accuracy pattern but does not restore the weakest (boundary) phase";

/// The run's cycling experiment E11 reads: prefix protocol, the last layer.
fn last_layer_cycle(r: &RunData) -> Option<&crate::analysis::cycling::CycleResult> {
    let last = r.config.model.n_layer.checked_sub(1)?;
    r.cycles.iter().find(|c| c.protocol == Protocol::Prefix && c.cycle.layer == last).map(|c| &c.cycle)
}

/// The arm's part: every seed's rule, and the lags by `k`.
fn part(a: &Arm) -> (Part, String) {
    let mut lines = Vec::new();
    let mut meeting = 0;
    let mut by_k: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut stride = None;
    for r in &a.runs {
        let Some(c) = last_layer_cycle(r) else {
            return (
                Part::new(
                    &a.name,
                    Verdict::NotRun,
                    format!("{}: seed {} has no prefix cycling result of its last layer", a.name, r.seed),
                ),
                String::new(),
            );
        };
        stride = Some(c.stride);
        let (meets, text) = match e11_seed(c) {
            Ok(s) => {
                for (k, l) in s.ks.iter().zip(&s.lags) {
                    by_k.entry(*k).or_default().push(l.map(|l| l.to_string()).unwrap_or_else(|| "-".into()));
                }
                (
                    Some(s.meets()),
                    format!(
                        "weakest phase {}; (a) the pattern shifts: {} (lags {}); (b) the weakest phase stays below the others' mean under every k: {}",
                        c.weakest_phase,
                        if s.shifts { "yes" } else { "no" },
                        s.lags.iter().map(|l| l.map(|l| l.to_string()).unwrap_or_else(|| "-".into())).collect::<Vec<_>>().join(", "),
                        if s.not_restored { "yes" } else { "no" }
                    ),
                )
            }
            Err(e) => (None, format!("not testable: {e}")),
        };
        meeting += usize::from(meets == Some(true));
        lines.push(SeedLine { arm: a.name.clone(), seed: r.seed, meets, text });
    }
    let n = a.runs.len();
    let verdict = if holds_in_enough_seeds(meeting, n) { Verdict::Reproduced } else { Verdict::NotReproduced };
    let mut p = Part::new(
        &a.name,
        verdict,
        format!("{}: (a) and (b) in {meeting} of {n} seeds (required {})", a.name, required_seeds(n)),
    );
    p.seeds = lines;
    let s = stride.unwrap_or(1).max(1);
    let lags: Vec<String> =
        by_k.iter().map(|(k, l)| format!("k = {k} (k mod S = {}): lags {}", k % s, l.join(", "))).collect();
    (p, format!("lag against k, seeds in order: {}", lags.join("; ")))
}

impl LedgerClaim for E11 {
    fn id(&self) -> &'static str {
        "E11"
    }

    fn short(&self) -> &'static str {
        "gate cycling shifts the pattern, the weakest phase stays weak"
    }

    fn paper(&self) -> &'static str {
        "pattern shifts; boundary phase not restored (App. H)"
    }

    fn applies_to(&self, rules: Rules) -> bool {
        rules == Rules::V3
    }

    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let Some(a) = arm_for(&arms, E11_PRESET, false) else {
            let mut n = not_run(self, CLAIM, vec![]);
            n.measured = "no data yet: the arm w8s8 was not trained in this run set".into();
            return n;
        };
        let (p, lags) = part(a);
        let mut rep = Reported::default();
        if !lags.is_empty() {
            rep.texts.push(lags);
        }
        let mut claim = Claim::from_parts(
            self,
            CLAIM,
            "w8s8, prefix protocol, the KV heads of the last layer cycled by each k in 1..S (theory/gate-cycling.md); per seed (a) the pattern shifts: the lag is non-zero for at least half of the k; (b) the weakest phase is not restored: for every k the uncycled model's weakest phase stays below the mean of the others; E11 holds when (a) and (b) hold in at least required_seeds(n) of the n successful seeds (§9.7); the lag against k mod S is reported per k".into(),
            vec![p],
            rep,
        );
        claim.ours = seeds_ours(&claim);
        claim
    }
}
