//! E14 (v3 only, `theory/phase-lab.md` §9.7): meaning-preserving shifts flip answers. The flip
//! rate of `theory/flip-rate.md` (`analysis::flips`), prefix protocol on the scored families, one
//! part per paper-geometry arm ([`E14_ARMS`]): the part holds when the seed-level 95 % interval
//! of (arm minus full attention) lies above 0, each arm's seeds drawn independently; the parts
//! combine by `analysis::verdict::combine`. The in-sequence flip rate and the prefix shift curve
//! are reported beside each part.

use super::arm::{arm_for, stat_seed};
use super::claim::{not_run, Claim, Interval, LedgerClaim, Measure};
use super::parts::{Part, Reported};
use super::words::count_ours;
use crate::analysis::claims_v3::{flips_more_than_full, E14_ARMS};
use crate::analysis::flips::{flip_difference, flip_rate, Answer};
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::{BootInterval, SeedCount, SEED_LEVEL_ROUNDS};
use crate::analysis::verdict::{Rules, Verdict};
use crate::report::ledger::collect::{arms, Arm, Collected};

/// The claim (registered in [`super::LEDGER`]).
pub struct E14;

const CLAIM: &str = "meaning-preserving shifts flip answers: a compressed model's answer to one prompt changes with its shift more often than full attention's";

/// Every seed's answers under `p`, or `None` when a seed has none (outcome lines without
/// `predicted`).
fn answers(a: &Arm, p: Protocol) -> Option<Vec<Vec<Answer>>> {
    a.runs.iter().map(|r| r.answers.get(&p).cloned()).collect::<Option<Vec<_>>>().filter(|v| !v.is_empty())
}

/// A flip-rate interval in percentage points.
fn pp(b: BootInterval) -> BootInterval {
    BootInterval { estimate: 100.0 * b.estimate, lo: 100.0 * b.lo, hi: 100.0 * b.hi, boot_mean: 100.0 * b.boot_mean }
}

fn measure(arm: &str, what: &str, v: Interval, seeds: usize, decides: bool) -> Measure {
    Measure {
        arm: arm.into(),
        protocol: Protocol::Prefix.name().into(),
        what: what.into(),
        groups: 0,
        value: v,
        noise_floor_pp: None,
        p: None,
        paper_pp: None,
        decides,
        seeds: Some(seeds),
        per_seed_pp: Vec::new(),
    }
}

/// What is reported beside a part: the arm's in-sequence flip rate and its prefix shift curve.
fn reported(a: &Arm, seed: u64) -> String {
    let mut out = Vec::new();
    match answers(a, Protocol::InSequence).map(|s| flip_rate(&s, SEED_LEVEL_ROUNDS, seed)) {
        Some(Ok(r)) => out.push(format!(
            "in-sequence flip rate {:.1} % [{:.1}, {:.1}] (reported)",
            100.0 * r.interval.0,
            100.0 * r.interval.1,
            100.0 * r.interval.2
        )),
        Some(Err(e)) => out.push(format!("in-sequence flip rate: {e}")),
        None => out.push("in-sequence flip rate: no answers".into()),
    }
    if let Some(Ok(r)) = answers(a, Protocol::Prefix).map(|s| flip_rate(&s, 1, seed)) {
        let curve: Vec<String> = r.curve.iter().map(|c| format!("{}: {:.1} %", c.shift, 100.0 * c.rate)).collect();
        out.push(format!("prefix shift curve (shift k: share of pairs that differ) {}", curve.join(", ")));
    }
    out.join("; ")
}

/// One arm's part against full attention.
fn part(a: &Arm, full: &Arm) -> Part {
    let (Some(xa), Some(xf)) = (answers(a, Protocol::Prefix), answers(full, Protocol::Prefix)) else {
        return Part::new(
            &a.name,
            Verdict::NotRun,
            format!("{}: no answers in the prefix outcome lines (`predicted`) of it or of full attention", a.name),
        );
    };
    let d = match flip_difference(&xa, &xf, SEED_LEVEL_ROUNDS, stat_seed(a)) {
        Ok(d) => d,
        Err(e) => return Part::new(&a.name, Verdict::NotRun, format!("{}: flip rate: {e}", a.name)),
    };
    let (diff, arm_v, base_v) =
        (Interval::of(&pp(d.difference)), Interval::of_nonneg(&pp(d.arm)), Interval::of_nonneg(&pp(d.base)));
    let verdict =
        if flips_more_than_full(d.difference.corrected().1) { Verdict::Reproduced } else { Verdict::NotReproduced };
    let text = format!(
        "{} prefix: flip rate {} against full attention's {}, difference {} ({} and {}; seeds drawn independently per arm): {}; {}",
        a.name,
        arm_v.words(),
        base_v.words(),
        diff.words(),
        SeedCount { seeds: xa.len() }.words(),
        SeedCount { seeds: xf.len() }.words(),
        if verdict == Verdict::Reproduced { "the interval lies above 0" } else { "the interval does not lie above 0" },
        reported(a, stat_seed(a))
    );
    let mut p = Part::new(&a.name, verdict, text);
    p.measures.push(measure(&a.name, "flip rate minus full attention's", diff, xa.len(), true));
    p.measures.push(measure(&a.name, "flip rate", arm_v, xa.len(), false));
    p.measures.push(measure(&full.name, "flip rate", base_v, xf.len(), false));
    p
}

impl LedgerClaim for E14 {
    fn id(&self) -> &'static str {
        "E14"
    }

    fn short(&self) -> &'static str {
        "shifts flip answers more often than under full attention"
    }

    fn paper(&self) -> &'static str {
        "V4-Flash's answer flips 8 / 32 with period 4"
    }

    fn applies_to(&self, rules: Rules) -> bool {
        rules == Rules::V3
    }

    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let Some(full) = arm_for(&arms, "full", false) else {
            let mut n = not_run(self, CLAIM, vec![]);
            n.measured = "no data yet: full attention, the baseline, was not trained in this run set".into();
            return n;
        };
        let parts: Vec<Part> = E14_ARMS
            .iter()
            .map(|&name| match arm_for(&arms, name, false) {
                Some(a) => part(a, full),
                None => Part::new(name, Verdict::NotRun, format!("{name}: not in this run set")),
            })
            .collect();
        let mut rep = Reported::default();
        rep.texts.push(format!("full attention: {}", reported(full, stat_seed(full))));
        let mut claim = Claim::from_parts(
            self,
            CLAIM,
            format!(
                "prefix protocol on the scored families (§9.2): for each of {}, the flip rate of theory/flip-rate.md (a family's share of shifts whose answer differs from its majority answer, mean over families, then seeds) minus full attention's, with the seed-level 95 % interval (two-stage bootstrap, seeds drawn independently per arm, bias-corrected basic interval), lies above 0; the parts combine by analysis::verdict::combine (a part not reproduced makes the claim not reproduced); the in-sequence flip rate and the shift curve are reported, not judged",
                E14_ARMS.join(", ")
            ),
            parts,
            rep,
        );
        claim.ours = count_ours(&claim);
        claim
    }
}
