//! Exclusion sensitivity (issue 38, `theory/phase-lab.md` §8.11): every claim that rests on an
//! arm with a seed the training-success rule excluded (§8.2) is computed again with those seeds
//! kept, and every verdict, magnitude, ratio and per-seed result that then reads otherwise is
//! written into the claim ([`Claim::with_excluded`]); the banner lists them. The rule that
//! drops the worst-trained seeds can drop exactly the seeds with the largest effects, so a
//! reader sees both.

use super::claim::{Claim, LedgerClaim, Measure};
use crate::report::ledger::collect::{arms, Collected};

/// The arms with excluded seeds, and those seeds' labels.
fn excluded_arms(c: &Collected) -> Vec<(String, Vec<String>)> {
    arms(c)
        .iter()
        .filter(|a| !a.excluded.is_empty())
        .map(|a| (a.name.clone(), a.excluded.iter().map(|e| e.0.label.clone()).collect()))
        .collect()
}

/// Whether a claim rests on the arm `name` (a part named after it, alone or in a pair
/// `x vs y`, or a per-seed line).
fn rests_on(claim: &Claim, name: &str) -> bool {
    claim.arms.iter().any(|a| a.arm.split_whitespace().any(|w| w == name)) || claim.seeds.iter().any(|s| s.arm == name)
}

/// The clause of `text` that starts at `key`, up to the next `;`.
fn clause<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let start = text.find(key)?;
    let rest = &text[start..];
    Some(rest.split(';').next().unwrap_or(rest).trim())
}

/// What reads otherwise in `new` (the claim with the excluded seeds kept) than in `old`.
pub(super) fn differences(old: &Claim, new: &Claim) -> Vec<String> {
    let mut out = Vec::new();
    if old.verdict != new.verdict {
        out.push(format!("verdict {} -> {}", old.verdict.word(), new.verdict.word()));
    }
    for n in &new.arms {
        let Some(o) = old.arms.iter().find(|o| o.arm == n.arm) else { continue };
        if o.verdict != n.verdict {
            out.push(format!("{}: {} -> {}", n.arm, o.verdict.word(), n.verdict.word()));
        }
        for key in ["ratio R = ", "accuracy difference (staggered minus twin) "] {
            if let (Some(a), Some(b)) = (clause(&o.text, key), clause(&n.text, key)) {
                if a != b {
                    out.push(format!("{}: {a} -> {b}", n.arm));
                }
            }
        }
    }
    for n in &new.measures {
        let same =
            |o: &&Measure| o.arm == n.arm && o.protocol == n.protocol && o.what == n.what && o.groups == n.groups;
        match old.measures.iter().find(same) {
            Some(o) if o.value.words() != n.value.words() => {
                out.push(format!("{} {} ({}): {} -> {}", n.arm, n.what, n.protocol, o.value.words(), n.value.words()))
            }
            _ => {}
        }
    }
    for n in &new.seeds {
        if !old.seeds.iter().any(|o| o.arm == n.arm && o.seed == n.seed) {
            let meets = match n.meets {
                Some(true) => "meets the rule",
                Some(false) => "does not meet the rule",
                None => "not testable",
            };
            out.push(format!("{} seed {} {meets}", n.arm, n.seed));
        }
    }
    out
}

/// Recomputes every claim that rests on an arm with excluded seeds with those seeds kept and
/// records what differs in [`Claim::with_excluded`] (`claims[i]` is `ledger[i]`'s, the
/// ledger's order). No excluded seed: nothing is recomputed.
pub(super) fn compare_with_excluded(c: &Collected, ledger: &[&dyn LedgerClaim], claims: &mut [Claim]) {
    let excluded = excluded_arms(c);
    if excluded.is_empty() {
        return;
    }
    let mut all = c.clone();
    all.keep_excluded = true;
    for (l, claim) in ledger.iter().zip(claims.iter_mut()) {
        let on: Vec<&(String, Vec<String>)> = excluded.iter().filter(|(a, _)| rests_on(claim, a)).collect();
        if on.is_empty() {
            continue;
        }
        let diffs = differences(claim, &l.check(&all));
        if diffs.is_empty() {
            continue;
        }
        let seeds: Vec<String> = on.iter().flat_map(|(_, s)| s.iter().map(|x| format!("`{x}`"))).collect();
        claim.with_excluded.push(format!("with the excluded seed(s) {} kept: {}", seeds.join(", "), diffs.join("; ")));
    }
}

#[cfg(test)]
mod tests {
    use super::super::claim::{not_run, ArmVerdict, Interval};
    use super::super::x1::X1;
    use super::*;
    use crate::analysis::stats;
    use crate::analysis::verdict::Verdict;

    fn measure(arm: &str, pp: f64) -> Measure {
        let b = stats::BootInterval { estimate: pp, lo: pp - 1.0, hi: pp + 1.0, boot_mean: pp };
        Measure {
            arm: arm.into(),
            protocol: "in-sequence".into(),
            what: "spread".into(),
            groups: 8,
            value: Interval::of(&b),
            noise_floor_pp: None,
            p: None,
            paper_pp: None,
            decides: true,
            seeds: Some(2),
            per_seed_pp: Vec::new(),
        }
    }

    /// A verdict, an arm's verdict, its ratio clause and a magnitude that move are each named;
    /// the control, the same claim twice, reads no difference.
    #[test]
    fn what_reads_otherwise_is_named_and_nothing_else() {
        let mut old = not_run(&X1, "c", vec![]);
        old.verdict = Verdict::Reproduced;
        old.arms.push(ArmVerdict {
            arm: "a vs b".into(),
            verdict: Verdict::Reproduced,
            text: "x; ratio R = 0.42 [0.34, 0.50] (seed-level); y".into(),
        });
        old.measures.push(measure("a", 10.0));
        assert!(differences(&old, &old.clone()).is_empty());
        let mut new = old.clone();
        new.verdict = Verdict::NotReproduced;
        new.arms[0].verdict = Verdict::NotReproduced;
        new.arms[0].text = "x; ratio R = 0.84 [0.20, 1.90] (seed-level); y".into();
        new.measures[0] = measure("a", 20.0);
        let d = differences(&old, &new);
        assert_eq!(d.len(), 4, "{d:?}");
        assert!(d[0].contains("reproduced -> not reproduced"), "{d:?}");
        assert!(d[2].contains("ratio R = 0.42 [0.34, 0.50] (seed-level) -> ratio R = 0.84"), "{d:?}");
        assert!(d[3].contains("10.0 pp") && d[3].contains("20.0 pp"), "{d:?}");
        assert!(rests_on(&old, "a") && rests_on(&old, "b") && !rests_on(&old, "vs b"));
    }
}
