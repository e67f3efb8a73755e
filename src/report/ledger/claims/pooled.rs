//! What the phase claims share (`theory/phase-lab.md` §7.3 and §7.5): an arm's per-seed
//! records, the ceiling rule, the pooled phase test with the seed rule, how one model's part of a
//! claim is judged and written, and how the parts of a claim combine into its verdict.

use super::*;
use crate::analysis::phase_test::{
    pooled_continuous_test, pooled_phase_test, NllRecord, PhaseRecord, PhaseTestConfig, PooledContinuousTest,
    PooledPhaseTest, TestMethod,
};
use crate::analysis::stats::{GapSummary, Magnitude, PeriodScan, ResampleConfig};
use crate::analysis::training::enough_seeds;
pub(super) use crate::analysis::verdict::Combination;
use crate::analysis::verdict::{
    at_ceiling, at_prob_ceiling, verdict, verdict_v2, Effect, Rules, CEILING_ACCURACY, PROB_CEILING,
};

/// The primary protocol of E1-E4 and E6 (distractor phases vary, so phase is the target's).
pub(super) const PRIMARY: Protocol = Protocol::InSequence;
/// The strides full attention is tested at (E1, E5, E6), each at `ALPHA / 3`.
pub(super) const BASELINE_STRIDES: [usize; 3] = [4, 6, 8];
/// What a claim says of a model whose per-prompt outcomes are missing.
pub(super) const NO_OUTCOMES: &str = "not testable: no per-prompt outcomes; rerun eval";

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
    /// Reports an arm's test under `p` ([`reported`]).
    pub fn test(&mut self, a: &Arm, p: Protocol, stride: usize, alpha: f64) {
        let (text, t) = reported(a, p, stride, alpha);
        self.texts.push(text);
        self.tests.extend(t);
    }

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

/// A pooled test as the ledger records it; `a`'s runs are its seeds, in order.
pub(super) fn record(a: &Arm, p: Protocol, t: &PooledPhaseTest, decides: bool) -> TestRecord {
    TestRecord {
        arm: a.name.clone(),
        protocol: p.name().into(),
        decides,
        stride: t.stride,
        alpha: t.agreement.alpha,
        statistic: t.statistic,
        df: t.df,
        method: method_word(t.method).into(),
        p: t.p,
        seeds: t
            .seeds
            .iter()
            .zip(&a.runs)
            .map(|(s, r)| SeedTest { seed: r.seed, p: s.p, adjusted_gap_pp: s.adjusted_gap_pp })
            .collect(),
        significant_seeds: t.agreement.significant_seeds,
        required_seeds: t.agreement.required,
        pooled_significant: t.agreement.pooled_significant,
    }
}

fn method_word(m: TestMethod) -> &'static str {
    match m {
        TestMethod::Asymptotic => "chi-square",
        TestMethod::ParametricBootstrap => "bootstrap",
    }
}

/// A gap as the ledger records it.
pub(super) fn gap_measure(
    a: &Arm,
    p: Protocol,
    g: &GapSummary,
    paper_pp: Option<f64>,
    decides: bool,
) -> Option<Measure> {
    let b = g.boot()?;
    let what = if g.groups == modulus(a) { format!("{}-group gap", g.groups) } else { "folded gap".to_string() };
    Some(Measure {
        arm: a.name.clone(),
        protocol: p.name().into(),
        what,
        groups: g.groups,
        value: Interval::of_nonneg(&b),
        noise_floor_pp: Some(g.noise_floor_pp),
        p: Some(g.p),
        paper_pp,
        decides,
        seeds: None,
    })
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

/// Whether an arm is full attention.
pub(super) fn arm_is_full(a: &Arm) -> bool {
    a.runs.iter().any(|r| is_full(r))
}

/// Whether some seed of an arm was evaluated.
pub(super) fn evaluated(a: &Arm) -> bool {
    a.runs.iter().any(|r| !r.evals.is_empty())
}

/// The part of an arm none of whose seeds trained under the v2 rules (every seed excluded by
/// §8.2's rule): not run, with what the rule made of each seed; `None` for any other arm.
pub(super) fn untrained_part(a: &Arm) -> Option<Part> {
    if !a.runs.is_empty() || a.excluded.is_empty() {
        return None;
    }
    let seeds: Vec<String> = a
        .excluded
        .iter()
        .map(|(r, o)| {
            let acc = r.metrics.as_ref().map(|m| format!("{:.1} %", 100.0 * m.final_eval.accuracy));
            format!("seed {} {} ({})", r.seed, acc.unwrap_or_else(|| "-".into()), o.words())
        })
        .collect();
    Some(Part::new(
        &a.name,
        Verdict::NotRun,
        format!(
            "{}: not run: 0 successful seeds, {} excluded by the training-success rule (§8.2): {}",
            a.name,
            a.excluded.len(),
            seeds.join(", ")
        ),
    ))
}

/// The arm named `name` whose seeds all failed the training-success rule, if any.
pub(super) fn untrained_arm<'a>(arms: &'a [Arm<'a>], name: &str) -> Option<&'a Arm<'a>> {
    arms.iter().find(|a| a.name == name && untrained_part(a).is_some())
}

/// Whether an arm's preset puts its KV heads or layers on different grids (issue 30).
pub(super) fn on_staggered_grids(a: &Arm) -> bool {
    a.kernel.stagger != crate::kernel::spec::Stagger::None
}

/// Whether an arm has one KV head per layer (the capacity arm of E3).
pub(super) fn one_head(a: &Arm) -> bool {
    a.runs.iter().all(|r| r.config.model.n_kv_head == 1)
}

/// The evaluated arm of `preset` with (`one_head`) or without one KV head per layer, preferring
/// the arm named after the preset.
pub(super) fn arm_for<'a>(arms: &'a [Arm<'a>], preset: &str, one: bool) -> Option<&'a Arm<'a>> {
    let mut c = arms.iter().filter(|a| a.preset == preset && one_head(a) == one && evaluated(a));
    let all: Vec<&Arm> = c.by_ref().collect();
    all.iter().find(|a| a.name == preset).or(all.first()).copied()
}

/// The arm's residue modulus `M`.
pub(super) fn modulus(a: &Arm) -> usize {
    a.runs.iter().chain(a.excluded.iter().map(|e| &e.0)).map(|r| r.config.task.residue_modulus).next().unwrap_or(1)
}

/// The seed of every resampled statistic: the arm's evaluation seed.
pub(super) fn stat_seed(a: &Arm) -> u64 {
    a.runs.iter().flat_map(|r| r.evals.values()).map(|e| e.eval_seed).next().unwrap_or(0)
}

/// Every seed's records under `p` (seeds in collection order), or `None` when a seed lacks them.
pub(super) fn seed_records(a: &Arm, p: Protocol) -> Option<Vec<Vec<PhaseRecord>>> {
    a.runs.iter().map(|r| r.records.get(&p).cloned()).collect()
}

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
        Rules::V2 => " and every group's mean answer probability >= ",
    };
    Part::new(
        &a.name,
        Verdict::NotTestableCeiling,
        format!(
            "{}: at the ceiling (every group >= {:.0} %{what}{} under every protocol, seeds pooled: {})",
            a.name,
            100.0 * CEILING_ACCURACY,
            if a.rules == Rules::V2 { format!("{PROB_CEILING}") } else { String::new() },
            a.runs.len()
        ),
    )
}

/// Every seed's continuous-test records under `p`, or `None` when a seed lacks them.
pub(super) fn nll_records(a: &Arm, p: Protocol) -> Option<Vec<Vec<NllRecord>>> {
    a.runs.iter().map(|r| r.nll.get(&p).cloned()).collect()
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

/// A pooled continuous test in one line.
pub(super) fn describe_nll(t: &PooledContinuousTest) -> String {
    let ps: Vec<String> = t.seeds.iter().map(|s| s.p.to_string()).collect();
    let spread: Vec<String> = t
        .seeds
        .iter()
        .map(|s| {
            let (lo, hi) =
                s.mean_nll.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| (l.min(x), h.max(x)));
            format!("{:.3}", hi - lo)
        })
        .collect();
    format!(
        "NLL S = {}: pooled F {:.2}, within-family permutation p {}; seeds p {} (phase spread of mean NLL {} nats); {} at {}",
        t.stride,
        t.statistic,
        t.p,
        ps.join(" / "),
        spread.join(" / "),
        t.agreement.describe(),
        fmt_p(t.agreement.alpha)
    )
}

/// A pooled continuous test as the ledger records it (`df`: the seeds' numerator degrees of
/// freedom; each seed's depth-adjusted spread is the binary test's, `binary`).
pub(super) fn record_nll(
    a: &Arm,
    p: Protocol,
    t: &PooledContinuousTest,
    binary: &PooledPhaseTest,
    decides: bool,
) -> TestRecord {
    TestRecord {
        arm: a.name.clone(),
        protocol: p.name().into(),
        decides,
        stride: t.stride,
        alpha: t.agreement.alpha,
        statistic: t.statistic,
        df: t.seeds.iter().map(|s| s.df1).sum(),
        method: "NLL permutation F".into(),
        p: t.p,
        seeds: t
            .seeds
            .iter()
            .zip(&binary.seeds)
            .zip(&a.runs)
            .map(|((s, b), r)| SeedTest { seed: r.seed, p: s.p, adjusted_gap_pp: b.adjusted_gap_pp })
            .collect(),
        significant_seeds: t.agreement.significant_seeds,
        required_seeds: t.agreement.required,
        pooled_significant: t.agreement.pooled_significant,
    }
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
            Rules::V2 => verdict_v2(claim, self.effect, self.ceiling, m),
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
        Rules::V2 => {
            if !enough_seeds(a.runs.len()) {
                return Err(format!(
                    "not run: {} successful seed(s), {} excluded by the training-success rule (§8.2)",
                    a.runs.len(),
                    a.excluded.len()
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

/// The pooled phase test of an arm under `p` at `stride` and level `alpha`, or why there is none.
pub(super) fn pooled(a: &Arm, p: Protocol, stride: usize, alpha: f64) -> std::result::Result<PooledPhaseTest, String> {
    let seeds = seed_records(a, p).ok_or_else(|| NO_OUTCOMES.to_string())?;
    let cfg = PhaseTestConfig { alpha, seed: stat_seed(a), ..PhaseTestConfig::default() };
    pooled_phase_test(&seeds, stride, &cfg).map_err(|e| format!("not testable: {e}"))
}

/// A pooled test in one line: statistic, df, method, p, each seed's p and the agreement.
pub(super) fn describe(t: &PooledPhaseTest) -> String {
    let method = method_word(t.method);
    let ps: Vec<String> = t.seeds.iter().map(|s| s.p.to_string()).collect();
    let gaps: Vec<String> = t.seeds.iter().map(|s| format!("{:.1}", s.adjusted_gap_pp)).collect();
    format!(
        "S = {}: pooled LR {:.1}, df {}, {method} p {}; seeds p {} (depth-adjusted phase spread {} pp); {} at {}",
        t.stride,
        t.statistic,
        t.df,
        t.p,
        ps.join(" / "),
        gaps.join(" / "),
        t.agreement.describe(),
        fmt_p(t.agreement.alpha)
    )
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

/// The `(residue group, correct)` pairs of every seed under `p`, pooled.
pub(super) fn pooled_pairs(a: &Arm, p: Protocol) -> Option<Vec<(usize, bool)>> {
    let m = modulus(a).max(1);
    seed_records(a, p).map(|s| s.iter().flatten().map(|r| (r.position % m, r.correct)).collect())
}

/// The resampling settings of the ledger's exploratory statistics.
pub(super) fn resample_cfg(a: &Arm) -> ResampleConfig {
    ResampleConfig { seed: stat_seed(a), ..ResampleConfig::default() }
}

/// The max gap of the arm under `p`, seeds pooled, over residue groups (`fold` `None`) or
/// folded by `fold`, with its interval and noise floor.
pub(super) fn gap(a: &Arm, p: Protocol, fold: Option<usize>) -> std::result::Result<GapSummary, String> {
    let pairs = pooled_pairs(a, p).ok_or_else(|| NO_OUTCOMES.to_string())?;
    stats::gap_summary(&pairs, modulus(a), fold, &resample_cfg(a)).map_err(|e| format!("not testable: {e}"))
}

/// Under the v2 rules (§8.7), the mean over the arm's seeds of each seed's gap under `p`
/// (folded by `fold`), with its seed-level bootstrap summary (issue 38: seeds, then prompt
/// families within each seed; read it with `Interval::of_nonneg`), and each seed's gap with its
/// training seed.
pub(super) fn seed_gap(
    a: &Arm,
    p: Protocol,
    fold: Option<usize>,
) -> std::result::Result<(stats::BootInterval, Vec<(u64, f64)>), String> {
    let m = modulus(a).max(1);
    let seeds = seed_records(a, p).ok_or_else(|| NO_OUTCOMES.to_string())?;
    // Issue 38: seeds drawn with replacement, then whole prompt families within each seed
    // (a family's shifts stay paired); prompts without families are families of one.
    let fams = seed_families(a, p);
    let prompts: Vec<Vec<(usize, usize, bool)>> = seeds
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let f = fams.as_ref().and_then(|f| f.get(i)).filter(|f| f.len() == s.len());
            s.iter().enumerate().map(|(j, r)| (f.map_or(j, |f| f[j]), r.position % m, r.correct)).collect()
        })
        .collect();
    let (b, each) = stats::family_gap_two_stage(&prompts, m, fold, stats::SEED_LEVEL_ROUNDS, stat_seed(a))
        .map_err(|e| format!("not testable: {e}"))?;
    Ok((b, a.runs.iter().map(|r| r.seed).zip(each).collect()))
}

/// Every seed's prompt families under `p` (aligned with [`seed_records`]), or `None` when a
/// seed lacks them.
pub(super) fn seed_families(a: &Arm, p: Protocol) -> Option<Vec<Vec<usize>>> {
    a.runs.iter().map(|r| r.families.get(&p).cloned()).collect()
}

/// Whether two arms share their seed numbers in the same order (a comparison is then paired by
/// seed, issue 38).
pub(super) fn same_seeds(a: &Arm, b: &Arm) -> bool {
    a.runs.iter().map(|r| r.seed).eq(b.runs.iter().map(|r| r.seed))
}

/// The seeds of an arm as the seed-level bootstrap reads them: records and families under `p`.
pub(super) fn seed_level_input<'a>(
    recs: &'a [Vec<PhaseRecord>],
    fams: &'a Option<Vec<Vec<usize>>>,
) -> Vec<crate::analysis::phase_test::SeedRecords<'a>> {
    recs.iter()
        .enumerate()
        .map(|(i, r)| crate::analysis::phase_test::SeedRecords {
            records: r,
            families: fams.as_ref().and_then(|f| f.get(i)).map(|f| f.as_slice()).filter(|f| f.len() == r.len()),
        })
        .collect()
}

/// The seed-level mean spread of an arm over `phases` at `stride` under `p` (two-stage:
/// seeds, then families within each seed), with each seed's spread.
pub(super) fn seed_level_spread(
    a: &Arm,
    p: Protocol,
    stride: usize,
    phases: &[usize],
) -> std::result::Result<(stats::BootInterval, Vec<(u64, f64)>), String> {
    let recs = seed_records(a, p).ok_or_else(|| NO_OUTCOMES.to_string())?;
    let fams = seed_families(a, p);
    let (est, each, reps) = crate::analysis::phase_test::adjusted_spread_two_stage(
        &[seed_level_input(&recs, &fams)],
        false,
        stride,
        phases,
        stats::SEED_LEVEL_ROUNDS,
        stat_seed(a),
    )
    .map_err(|e| e.to_string())?;
    let b = stats::BootInterval::from_sorted(est[0], &stats::column_sorted(&reps, 0));
    Ok((b, a.runs.iter().map(|r| r.seed).zip(each[0].iter().copied()).collect()))
}

/// The seeds of an arm with how many trained longer (v2's extensions, §8.2), in words: `k of n
/// seeds extended` (issue 38: a comparison states unequal training budgets).
pub(super) fn extended_words(a: &Arm) -> (usize, String) {
    let ext = |r: &RunData| r.metrics.as_ref().is_some_and(|m| !m.extensions.is_empty());
    let k = a.runs.iter().filter(|r| ext(r)).count();
    let kx = a.excluded.iter().filter(|e| ext(e.0)).count();
    let extra = if a.excluded.is_empty() {
        String::new()
    } else {
        format!(" ({} of {} with the excluded)", k + kx, a.runs.len() + a.excluded.len())
    };
    (k, format!("{} extended in {k} of {} seeds{extra}", a.name, a.runs.len()))
}

/// The training budgets of two compared arms in words, when they differ (the fraction of seeds
/// extended), else `None`.
pub(super) fn budget_difference(a: &Arm, b: &Arm) -> Option<String> {
    let ((ka, wa), (kb, wb)) = (extended_words(a), extended_words(b));
    let fa = ka as f64 / a.runs.len().max(1) as f64;
    let fb = kb as f64 / b.runs.len().max(1) as f64;
    (fa != fb).then(|| format!("unequal training budgets: {wa}, {wb}"))
}

/// The largest of per-seed values `(seed, pp)` in words: `x pp (seed k)`.
pub(super) fn largest_seed(each: &[(u64, f64)]) -> String {
    match each.iter().max_by(|x, y| x.1.total_cmp(&y.1)) {
        Some((k, v)) => format!("{v:.1} pp (seed {k})"),
        None => "-".into(),
    }
}

/// The largest per-seed depth-adjusted spread of a part's deciding binary tests (§8.7: E2 and
/// E5 report it with its seed), in words.
pub(super) fn largest_seed_spread(part: &Part) -> Option<String> {
    let each: Vec<(u64, f64)> = part
        .tests
        .iter()
        .filter(|t| t.decides && t.method != "NLL permutation F")
        .flat_map(|t| t.seeds.iter().map(|s| (s.seed, s.adjusted_gap_pp)))
        .collect();
    (!each.is_empty()).then(|| largest_seed(&each))
}

/// A gap in words: value, interval (bias-corrected, with the raw value and the percentile
/// interval beside it), noise floor, permutation p.
pub(super) fn gap_words(g: &GapSummary) -> String {
    let value = match g.boot() {
        Some(b) => Interval::of_nonneg(&b).full_words(),
        None => format!("{:.1} pp [{:.1}, {:.1}]", g.gap_pp, g.ci_lo_pp, g.ci_hi_pp),
    };
    format!("{value}, noise floor {:.1} pp, perm. p {}", g.noise_floor_pp, g.p)
}

/// The corrected period scan of the arm under `p` on pooled seeds, with its stability.
pub(super) fn period(a: &Arm, p: Protocol) -> std::result::Result<(PeriodScan, f64), String> {
    let pairs = pooled_pairs(a, p).ok_or_else(|| NO_OUTCOMES.to_string())?;
    let (m, cfg) = (modulus(a), resample_cfg(a));
    let scan = stats::period_scan(&pairs, m, crate::analysis::phase::PERIOD_ALPHA, &cfg)
        .map_err(|e| format!("not testable: {e}"))?;
    let stability = stats::period_stability(&pairs, m, scan.best, &cfg).map_err(|e| format!("not testable: {e}"))?;
    Ok((scan, stability))
}

/// The period rule on a part whose phase effect at `s` was judged: the corrected period scan of
/// the arm (seeds pooled) must declare exactly `s`, or a reproduced part is not reproduced; a
/// scan that cannot run makes the part not run. Returns the declared period (`None`: none, or
/// no scan).
pub(super) fn require_period(part: &mut Part, a: &Arm, p: Protocol, s: usize) -> Option<Option<usize>> {
    match period(a, p) {
        Ok((scan, stability)) => {
            if scan.period != Some(s) && part.verdict == Verdict::Reproduced {
                part.verdict = Verdict::NotReproduced;
            }
            part.text += &format!(
                "; corrected period scan (seeds pooled): best {}, corrected p {}, declared {}, stability {:.0} %",
                scan.best,
                scan.corrected_p,
                scan.period.map(|p| p.to_string()).unwrap_or_else(|| "none".into()),
                100.0 * stability
            );
            Some(scan.period)
        }
        Err(e) => {
            part.verdict = Verdict::NotRun;
            part.text += &format!("; period scan: {e}");
            None
        }
    }
}

/// Our value of a claim without a magnitude: its arms counted by verdict.
pub(super) fn count_ours(c: &Claim) -> String {
    let states = [
        (Verdict::Reproduced, "reproduced"),
        (Verdict::ReproducedSmaller, "smaller"),
        (Verdict::NotReproduced, "not reproduced"),
        (Verdict::NotTestableCeiling, "at the ceiling"),
        (Verdict::NotRun, "not run"),
        (Verdict::NotApplicable, "not applicable"),
    ];
    let bits: Vec<String> = states
        .iter()
        .map(|&(v, w)| (c.arms.iter().filter(|a| a.verdict == v).count(), w))
        .filter(|(n, _)| *n > 0)
        .map(|(n, w)| format!("{n} {w}"))
        .collect();
    format!("arms: {}", bits.join(", "))
}

/// Arms sharing one count: (seeds meeting the rule, seeds, not applicable) and their names.
type SeedCountGroup<'a> = ((usize, usize, bool), Vec<&'a str>);

/// Our value of a claim judged seed by seed: per arm, the seeds that meet its rule.
pub(super) fn seeds_ours(c: &Claim) -> String {
    // Arms with the same count share one entry; more than two of them are counted, not named
    // (the top table's cells stay short; the claim's section names every arm).
    // An arm the rule does not apply to reads `n/a`, never a count of seeds that "meet" it.
    let mut groups: Vec<SeedCountGroup> = Vec::new();
    for a in &c.arms {
        let of: Vec<&SeedLine> = c.seeds.iter().filter(|s| s.arm == a.arm).collect();
        let key = (of.iter().filter(|s| s.meets == Some(true)).count(), of.len(), a.verdict == Verdict::NotApplicable);
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => g.1.push(&a.arm),
            None => groups.push((key, vec![&a.arm])),
        }
    }
    let bits: Vec<String> = groups
        .iter()
        .map(|((ok, n, na), arms)| {
            let count = if *na { "n/a".to_string() } else { format!("{ok}/{n}") };
            if arms.len() > 2 {
                format!("{} arms {count}", arms.len())
            } else {
                format!("{} {count}", arms.join(", "))
            }
        })
        .collect();
    format!("seeds meeting the rule: {}", bits.join("; "))
}

/// A level as the criteria print it (`0.005`, `0.00167`).
pub(super) fn fmt_level(x: f64) -> String {
    let s = format!("{x:.5}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The level a phase effect of one model is judged at under `rules`, each of `strides` strides
/// Bonferroni-corrected, in the criteria's words: v1 one test at `ALPHA / strides` (§7.3); v2
/// either of two tests at `ALPHA / strides / 2` (§8.3-8.4).
pub(super) fn level_words(rules: Rules, strides: usize) -> String {
    let per = ALPHA / strides as f64;
    let over = if strides > 1 { format!(" (ALPHA / {strides})") } else { String::new() };
    match rules {
        Rules::V1 => format!("pooled p < {}{over} and in at least required_seeds(n) seeds (§7.3)", fmt_level(per)),
        Rules::V2 => format!(
            "the binary or the continuous test, each at p < {} (ALPHA{} / 2), pooled and in at least required_seeds(n) successful seeds (§8.3-8.4)",
            fmt_level(per / 2.0),
            if strides > 1 { format!(" / {strides}") } else { String::new() }
        ),
    }
}

/// The ceiling rule in the criteria's words: v1 a model at the ceiling is not tested (§7.5);
/// v2 only an absent effect at both ceilings is not testable (§8.5).
pub(super) fn ceiling_words(rules: Rules) -> &'static str {
    match rules {
        Rules::V1 => "a model at the ceiling is not testable (§7.5)",
        Rules::V2 => "an effect that holds counts at the ceiling; an absent one is not testable when every group is at both the accuracy and the probability ceiling (§8.5)",
    }
}
