//! One model's part of a phase claim, the tests reported beside the deciding parts, and how the
//! parts combine into the claim's line and verdict (`theory/phase-lab.md` §7.6; the rule's one
//! place is `analysis::verdict::combine`).

use super::claim::{not_run, ArmVerdict, Claim, LedgerClaim, Measure, SeedLine, TestRecord};
use crate::analysis::verdict::{Combination, Verdict};

/// One model's part of a claim.
pub(super) struct Part {
    /// The arm it judges.
    pub arm: String,
    /// Its verdict.
    pub verdict: Verdict,
    /// What was measured.
    pub text: String,
    /// The tests it ran (deciding).
    pub tests: Vec<TestRecord>,
    /// Its magnitudes.
    pub measures: Vec<Measure>,
    /// Its per-seed results (claims judged seed by seed).
    pub seeds: Vec<SeedLine>,
}

impl Part {
    /// A part with no structured numbers.
    pub fn new(arm: &str, verdict: Verdict, text: String) -> Part {
        Part { arm: arm.into(), verdict, text, tests: vec![], measures: vec![], seeds: vec![] }
    }
}

/// Tests and texts reported beside a claim's deciding parts.
#[derive(Default)]
pub(super) struct Reported {
    /// In words.
    pub texts: Vec<String>,
    /// The tests.
    pub tests: Vec<TestRecord>,
}

impl Reported {
    /// Reports a part (a control): its text and tests, which do not decide.
    pub fn part(&mut self, prefix: &str, part: Part) {
        self.texts.push(format!("{prefix}{}", part.text));
        self.tests.extend(part.tests.into_iter().map(|t| TestRecord { decides: false, ..t }));
    }
}

impl Claim {
    /// The line of claim `of` with its parts' verdicts, tests, magnitudes and seeds, and the
    /// reported tests; `measured` is the parts' texts, then `||` and the reported texts.
    pub(super) fn from_parts(
        of: &dyn LedgerClaim,
        claim: &str,
        criterion: String,
        parts: Vec<Part>,
        rep: Reported,
    ) -> Claim {
        Claim::from_parts_by(Combination::EveryPart, of, claim, criterion, parts, rep)
    }

    /// As [`Claim::from_parts`], the parts combined by `rule`.
    pub(super) fn from_parts_by(
        rule: Combination,
        of: &dyn LedgerClaim,
        claim: &str,
        criterion: String,
        parts: Vec<Part>,
        rep: Reported,
    ) -> Claim {
        let measured = if rep.texts.is_empty() {
            texts(&parts)
        } else {
            format!("{} || {}", texts(&parts), rep.texts.join(" | "))
        };
        let mut c = not_run(of, claim, vec![]);
        c.verdict = combine_by(rule, &parts);
        c.measured = measured;
        c.criterion = criterion;
        for p in parts {
            c.arms.push(ArmVerdict { arm: p.arm, verdict: p.verdict, text: p.text });
            c.tests.extend(p.tests);
            c.measures.extend(p.measures);
            c.seeds.extend(p.seeds);
        }
        c.tests.extend(rep.tests);
        c
    }
}

/// A claim's verdict from its parts by §7.6's rule ([`crate::analysis::verdict::combine`], the
/// rule's one place): not reproduced if any part is; otherwise not run (data missing) if any
/// part is; otherwise not testable (ceiling) if any part is; otherwise the weakest of
/// reproduced qualitatively (smaller) and reproduced; a part the rule does not apply to is left
/// out. No parts: not run.
pub(super) fn combine(parts: &[Part]) -> Verdict {
    combine_by(Combination::EveryPart, parts)
}

/// A claim's verdict from its parts by `rule`.
pub(super) fn combine_by(rule: Combination, parts: &[Part]) -> Verdict {
    let verdicts: Vec<Verdict> = parts.iter().map(|p| p.verdict).collect();
    crate::analysis::verdict::combine(rule, &verdicts)
}

/// The joined texts of parts.
pub(super) fn texts(parts: &[Part]) -> String {
    parts.iter().map(|p| p.text.as_str()).collect::<Vec<_>>().join(" | ")
}
