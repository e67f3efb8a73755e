//! The pooled test assembly (`theory/phase-lab.md` §7.3, §8.3-8.5): an arm's binary and
//! continuous tests at a stride with the seed rule and the ceiling rule, and the parts "the
//! effect holds" and "the effect is absent" they judge.

use super::arm::{modulus, nll_records, seed_records, stat_seed, NO_OUTCOMES};
use super::claim::TestRecord;
use super::parts::{combine, Part, Reported};
use super::records::{record, record_nll};
use super::words::{describe, describe_nll};
use crate::analysis::phase_test::{
    pooled_continuous_test, pooled_phase_test, PhaseTestConfig, PooledContinuousTest, PooledPhaseTest, ALPHA,
};
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::{GroupAccuracy, Magnitude};
use crate::analysis::training::enough_seeds;
use crate::analysis::verdict::{
    at_ceiling, at_prob_ceiling, verdict, verdict_v2, Effect, Rules, Verdict, CEILING_ACCURACY, PROB_CEILING,
};
use crate::lab::EvalResult;
use crate::report::ledger::collect::Arm;

/// The primary protocol of E1-E4 and E6 (distractor phases vary, so phase is the target's).
pub(super) const PRIMARY: Protocol = Protocol::InSequence;

/// The strides full attention is tested at (E1, E5, E6), each at `ALPHA / 3`.
pub(super) const BASELINE_STRIDES: [usize; 3] = [4, 6, 8];

/// The ceiling rule on the arm's per-group accuracies pooled over seeds, under every protocol
/// evaluated (`None` when none is).
pub(super) fn ceiling(a: &Arm) -> Option<bool> {
    let m = modulus(a);
    let mut per: Vec<Vec<GroupAccuracy>> = Vec::new();
    for p in Protocol::ALL {
        let evals: Vec<&EvalResult> = a.runs.iter().filter_map(|r| r.evals.get(&p)).collect();
        if evals.is_empty() {
            continue;
        }
        let (mut n, mut k) = (vec![0usize; m], vec![0usize; m]);
        for g in evals.iter().flat_map(|e| &e.profile.groups).filter(|g| g.group < m) {
            n[g.group] += g.n;
            k[g.group] += g.correct;
        }
        per.push((0..m).map(|g| GroupAccuracy::new(g, k[g], n[g])).collect());
    }
    let refs: Vec<&[GroupAccuracy]> = per.iter().map(|v| v.as_slice()).collect();
    at_ceiling(&refs).ok()
}

/// Under the v2 rules (§8.5), whether every residue group's mean teacher-forced probability is
/// at least `PROB_CEILING` under every protocol (seeds pooled; `None` without probabilities).
pub(super) fn prob_ceiling(a: &Arm) -> Option<bool> {
    let m = modulus(a);
    let mut per: Vec<Vec<Option<f64>>> = Vec::new();
    for p in Protocol::ALL {
        let Some(seeds) = nll_records(a, p) else { continue };
        let (mut n, mut s) = (vec![0f64; m], vec![0f64; m]);
        for r in seeds.iter().flatten() {
            n[r.position % m] += 1.0;
            s[r.position % m] += r.prob;
        }
        per.push((0..m).map(|g| (n[g] > 0.0).then(|| s[g] / n[g])).collect());
    }
    let refs: Vec<&[Option<f64>]> = per.iter().map(|v| v.as_slice()).collect();
    at_prob_ceiling(&refs).ok()
}

/// The part of a model at the ceiling (v1: its test is not run; v2: its effect is absent).
pub(super) fn ceiling_part(a: &Arm) -> Part {
    let what = match a.rules {
        Rules::V1 => "",
        Rules::V2 | Rules::V3 => " and every group's mean answer probability >= ",
    };
    Part::new(
        &a.name,
        Verdict::NotTestableCeiling,
        format!(
            "{}: at the ceiling (every group >= {:.0} %{what}{} under every protocol, seeds pooled: {})",
            a.name,
            100.0 * CEILING_ACCURACY,
            if a.rules.has_training_rule() { format!("{PROB_CEILING}") } else { String::new() },
            a.runs.len()
        ),
    )
}

/// The pooled phase test of an arm under `p` at `stride` and level `alpha`, or why there is none.
pub(super) fn pooled(a: &Arm, p: Protocol, stride: usize, alpha: f64) -> std::result::Result<PooledPhaseTest, String> {
    let seeds = seed_records(a, p).ok_or_else(|| NO_OUTCOMES.to_string())?;
    let cfg = PhaseTestConfig { alpha, seed: stat_seed(a), ..PhaseTestConfig::default() };
    pooled_phase_test(&seeds, stride, &cfg).map_err(|e| format!("not testable: {e}"))
}

/// The pooled continuous test (§8.3) of an arm under `p` at `stride` and level `alpha`.
pub(super) fn pooled_nll(
    a: &Arm,
    p: Protocol,
    stride: usize,
    alpha: f64,
) -> std::result::Result<PooledContinuousTest, String> {
    let seeds =
        nll_records(a, p).ok_or_else(|| "not testable: no teacher-forced probabilities; rerun eval".to_string())?;
    let cfg = PhaseTestConfig { alpha, seed: stat_seed(a), ..PhaseTestConfig::default() };
    pooled_continuous_test(&seeds, stride, &cfg).map_err(|e| format!("not testable: {e}"))
}

/// An arm judged at one stride under one protocol: its binary test and, under the v2 rules, its
/// continuous test, the model's effect (§8.4) and the ceiling rule's input (§8.5).
pub(super) struct Judged {
    /// The binary (depth-controlled logistic) test; under v2 at half the level.
    pub test: PooledPhaseTest,
    /// The continuous test (v2 only).
    pub nll: Option<PooledContinuousTest>,
    /// The model's effect: v1 the binary test's; v2 either test's (§8.4).
    pub effect: Effect,
    /// v2: the accuracy and probability ceilings both hold (§8.5); v1: false (judged earlier).
    pub ceiling: bool,
    /// The rules.
    pub rules: Rules,
}

impl Judged {
    /// The verdict of a claim on this arm with magnitude `m`.
    pub fn verdict(&self, claim: crate::analysis::verdict::Claim, m: Magnitude) -> Verdict {
        match self.rules {
            Rules::V1 => verdict(claim, false, &self.test.agreement, m),
            Rules::V2 | Rules::V3 => verdict_v2(claim, self.effect, self.ceiling, m),
        }
    }

    /// Both tests in words, with the effect under v2.
    pub fn describe(&self) -> String {
        match &self.nll {
            None => describe(&self.test),
            Some(c) => format!(
                "{}; {}; effect {}{}",
                describe(&self.test),
                describe_nll(c),
                match self.effect {
                    Effect::Holds => "holds",
                    Effect::Absent => "absent",
                    Effect::Neither => "neither holds nor is absent",
                },
                if self.ceiling { " (at the ceiling)" } else { "" }
            ),
        }
    }

    /// The tests as the ledger records them.
    pub fn records(&self, a: &Arm, p: Protocol, decides: bool) -> Vec<TestRecord> {
        let mut out = vec![record(a, p, &self.test, decides)];
        out.extend(self.nll.as_ref().map(|c| record_nll(a, p, c, &self.test, decides)));
        out
    }
}

/// An arm's tests at `stride` under `p` at level `alpha` by its rules (§7.3 or §8.3-8.5).
pub(super) fn judge(a: &Arm, p: Protocol, stride: usize, alpha: f64) -> std::result::Result<Judged, String> {
    match a.rules {
        Rules::V1 => {
            let test = pooled(a, p, stride, alpha)?;
            let effect = Effect::of(&[&test.agreement]);
            Ok(Judged { test, nll: None, effect, ceiling: false, rules: a.rules })
        }
        Rules::V2 | Rules::V3 => {
            if !enough_seeds(a.runs.len()) {
                return Err(format!(
                    "not run: {} successful seed(s), {} excluded by the training-success rule ({})",
                    a.runs.len(),
                    a.excluded.len(),
                    a.rules.training_section()
                ));
            }
            let test = pooled(a, p, stride, alpha / 2.0)?;
            let nll = pooled_nll(a, p, stride, alpha / 2.0)?;
            let effect = Effect::of(&[&test.agreement, &nll.agreement]);
            let ceiling = ceiling(a) == Some(true) && prob_ceiling(a) == Some(true);
            Ok(Judged { test, nll: Some(nll), effect, ceiling, rules: a.rules })
        }
    }
}

/// The reported tests of an arm (`Reported` is [`super::parts::Reported`]: its tests are
/// judged here, beside the assembly that runs them).
impl Reported {
    /// Reports an arm's test under `p` ([`reported`]).
    pub fn test(&mut self, a: &Arm, p: Protocol, stride: usize, alpha: f64) {
        let (text, t) = reported(a, p, stride, alpha);
        self.texts.push(text);
        self.tests.extend(t);
    }
}

/// An arm's tests under `p` in one line, for the protocol that is reported but does not
/// decide, and the tests when they were run (v2: both tests, §8.3).
pub(super) fn reported(a: &Arm, p: Protocol, stride: usize, alpha: f64) -> (String, Vec<TestRecord>) {
    match judge(a, p, stride, alpha) {
        Ok(j) => (format!("{} {} (reported): {}", a.name, p.name(), j.describe()), j.records(a, p, false)),
        Err(e) => (format!("{} {} (reported): {e}", a.name, p.name()), vec![]),
    }
}

/// The part "the effect holds at `stride` under `p`" of an arm (ceiling rule, tests and seed
/// rule; no magnitude criterion), and the judged tests when they were run. v1: a model at the
/// ceiling is not tested. v2 (§8.5): the tests always run; an effect that holds counts, an
/// absent one at the ceiling is not testable.
pub(super) fn holds(a: &Arm, p: Protocol, stride: usize) -> (Part, Option<Judged>) {
    if a.rules == Rules::V1 && ceiling(a) == Some(true) {
        return (ceiling_part(a), None);
    }
    match judge(a, p, stride, ALPHA) {
        Err(e) => (Part::new(&a.name, Verdict::NotRun, format!("{} {}: {e}", a.name, p.name())), None),
        Ok(j) => {
            let any = Magnitude { pp: f64::INFINITY, lo_pp: f64::INFINITY, hi_pp: f64::INFINITY };
            let verdict = j.verdict(crate::analysis::verdict::Claim::Effect { paper_pp: 0.0 }, any);
            let text = if verdict == Verdict::NotTestableCeiling {
                format!("{}; {}", ceiling_part(a).text, j.describe())
            } else {
                format!("{} {}: {}", a.name, p.name(), j.describe())
            };
            let mut part = Part::new(&a.name, verdict, text);
            part.tests.extend(j.records(a, p, true));
            (part, Some(j))
        }
    }
}

/// The part "no effect at any of `strides`" of an arm under `p`, each stride tested at
/// `ALPHA / strides` (Bonferroni; under v2 halved again per test, §8.8): reproduced when the
/// effect is absent at every stride. Under v2 an effect that holds at the ceiling counts, and
/// an absent one there is not testable.
pub(super) fn absent(a: &Arm, p: Protocol, strides: &[usize]) -> Part {
    if a.rules == Rules::V1 && ceiling(a) == Some(true) {
        return ceiling_part(a);
    }
    let alpha = ALPHA / strides.len() as f64;
    let mut verdicts = Vec::new();
    let mut lines = Vec::new();
    let mut tests = Vec::new();
    for &s in strides {
        match judge(a, p, s, alpha) {
            Err(e) => {
                verdicts = vec![Part::new(&a.name, Verdict::NotRun, String::new())];
                lines.push(e);
                break;
            }
            Ok(j) => {
                // No magnitude criterion here: the bound is met by construction.
                let m = Magnitude { pp: 0.0, lo_pp: f64::NEG_INFINITY, hi_pp: 0.0 };
                let v = j.verdict(crate::analysis::verdict::Claim::NoEffect { paper_max_pp: 0.0 }, m);
                verdicts.push(Part::new(&a.name, v, String::new()));
                lines.push(j.describe());
                tests.extend(j.records(a, p, true));
            }
        }
    }
    let verdict = combine(&verdicts);
    let mut text = format!("{} {}: {}", a.name, p.name(), lines.join("; "));
    if verdict == Verdict::NotTestableCeiling {
        text = format!("{}; {text}", ceiling_part(a).text);
    }
    Part { tests, ..Part::new(&a.name, verdict, text) }
}
