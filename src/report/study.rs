//! `phasekv kernel study`: a kernel designer's question, "is my kernel phase sensitive, and how
//! much, next to the one I ship?", answered on one page. Trains `n` seeds of a candidate kernel
//! (any spec [`crate::model::ModelConfig::kernel`] accepts) and of a baseline, evaluates both
//! padding protocols, and judges by the rule stated in `theory/study.md` (the one place these
//! numbers are defined: the seed-level gap of [`seed_level::family_gap_two_stage`], the
//! seed-level accuracy cost of [`seed_level::accuracy_difference_two_stage`]).
//!
//! Every step resumes: a finished run is reused, an unfinished one continues from its last
//! checkpoint ([`crate::model::train`]), and finished evaluations are reused
//! ([`crate::lab::eval_run`]). A stop request during training stops after the current step with
//! a checkpoint (`Ok(None)`); during an evaluation it ends with [`Error::Interrupted`] (nothing
//! of that evaluation written).

use crate::analysis::flips::{self, Answer, FlipRate};
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::GroupAccuracy;
use crate::analysis::stats::{self as seed_level, SeedCount, SEED_LEVEL_ROUNDS};
use crate::analysis::training::SUCCESS_ACCURACY;
use crate::figures::lab as figures;
use crate::figures::plot;
use crate::lab::load::load_run;
use crate::model::{Outcome, RunConfig};
use crate::reproduce::Progress;
use crate::run_dir::write_json_atomic;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What a study trains and evaluates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudySettings {
    /// The candidate's run config (its kernel in `model`).
    pub candidate: RunConfig,
    /// The baseline's run config (the same task, recipe and sizes, its own kernel).
    pub baseline: RunConfig,
    /// Training seeds of each arm.
    pub seeds: Vec<u64>,
    /// Prompts per residue group in each protocol's evaluation.
    pub per_group: usize,
    /// Seed of the prompts and of the bootstrap.
    pub eval_seed: u64,
}

/// One arm's numbers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArmSummary {
    /// The kernel's name.
    pub kernel: String,
    /// The stride phases fold by (`None`: no compression).
    pub stride: Option<usize>,
    /// Held-out exact-match accuracy of each seed, in `seeds` order.
    pub held_out: Vec<f64>,
    /// Seeds below the training-success threshold ([`SUCCESS_ACCURACY`]): in no gap.
    pub untrained: Vec<u64>,
    /// Prefix-protocol gap folded by the stride, pp: bias-corrected estimate and seed-level
    /// 95 % interval (`None` without a stride or a trained seed).
    pub prefix_gap: Option<(f64, f64, f64)>,
    /// The same under in-sequence padding (the control).
    pub in_sequence_gap: Option<(f64, f64, f64)>,
    /// How many seeds the intervals rest on.
    pub seed_count: SeedCount,
    /// The flip rate under prefix padding (`theory/flip-rate.md`) on the same seeds as the gaps
    /// (`None`: no trained seed, or outcomes without answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_flips: Option<FlipRate>,
    /// The same under in-sequence padding (the control).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_sequence_flips: Option<FlipRate>,
}

/// The verdict of `theory/study.md` §2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sensitivity {
    /// The prefix gap's interval lies wholly above the in-sequence gap's.
    Sensitive,
    /// The intervals overlap: no phase effect shown at this scale.
    NotShown,
    /// Not judged: no stride above 1, or no trained seed.
    NotJudged,
}

/// The study's result (`study.json`; `study.md` renders it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudyResult {
    /// What was run.
    pub settings: StudySettings,
    /// The candidate.
    pub candidate: ArmSummary,
    /// The baseline.
    pub baseline: ArmSummary,
    /// The candidate's verdict.
    pub candidate_verdict: Sensitivity,
    /// The baseline's verdict.
    pub baseline_verdict: Sensitivity,
    /// Held-out accuracy of the candidate minus the baseline's, pp: bias-corrected estimate and
    /// seed-level 95 % interval (paired by seed; `None` without a trained seed in each arm).
    pub accuracy_cost: Option<(f64, f64, f64)>,
}

/// The arm directories of a study in `out`: `runs/<kernel>-seed<k>`.
fn run_dir(out: &Path, config: &RunConfig, seed: u64) -> PathBuf {
    out.join("runs").join(format!("{}-seed{seed}", config.model.preset))
}

/// Checks what a study needs beyond each config's own validation: two different kernels, on one
/// task (the gaps are compared), at least one seed, distinct seeds.
pub fn validate(s: &StudySettings) -> Result<()> {
    crate::model::validate(&s.candidate)?;
    crate::model::validate(&s.baseline).map_err(|e| Error::invalid("--baseline", e.to_string()))?;
    if s.candidate.model.preset == s.baseline.model.preset {
        return Err(Error::invalid(
            "--baseline",
            format!("{:?} is the candidate's own name; study it against another kernel", s.baseline.model.preset),
        ));
    }
    if s.candidate.task != s.baseline.task {
        return Err(Error::invalid("--baseline", "must be studied on the candidate's task"));
    }
    crate::limits::check_range("--seeds", s.seeds.len(), 1, 64)?;
    let mut seen = s.seeds.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != s.seeds.len() {
        return Err(Error::invalid("--seeds", format!("must be distinct, got {:?}", s.seeds)));
    }
    let t = &s.candidate.task;
    crate::lab::check_samples("--samples", s.per_group, t.residue_modulus, t.seq_len())
}

/// Trains and evaluates every (arm, seed) not done yet in `out`, then writes `study.json`,
/// `study.md` and the figure; returns the result, or `None` when a stop request stopped a
/// training run with a checkpoint (the same call resumes it).
pub fn run_study(s: &StudySettings, out: &Path, progress: &mut dyn Progress) -> Result<Option<StudyResult>> {
    validate(s)?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let settings_path = out.join("study-settings.json");
    match crate::lab::read_json::<StudySettings>(&settings_path) {
        Ok(have) if have != *s => {
            return Err(Error::invalid(
                "--out",
                format!("{} holds a study with other settings; choose another directory", out.display()),
            ))
        }
        Ok(_) => {}
        Err(_) if !settings_path.exists() => write_json_atomic(&settings_path, s)?,
        Err(e) => return Err(e),
    }
    let stop = progress.stop();
    let total = 2 * s.seeds.len();
    for (i, (config, seed)) in
        [&s.candidate, &s.baseline].into_iter().flat_map(|c| s.seeds.iter().map(move |&k| (c, k))).enumerate()
    {
        let mut config = config.clone();
        config.train.seed = seed;
        let dir = run_dir(out, &config, seed);
        let name = format!("{}-seed{seed} ({} of {total})", config.model.preset, i + 1);
        if !dir.join(crate::run_dir::METRICS_FILE).exists() {
            progress.message(&format!("{name}: training {} steps", config.train.steps));
            let env = serde_json::json!({ "command": "phasekv kernel study" });
            if let Outcome::Interrupted { step } = crate::model::train(&config, &dir, env, progress.trainer())? {
                progress.message(&format!("{name}: stopped after step {step} with a checkpoint"));
                return Ok(None);
            }
        } else {
            progress.message(&format!("{name}: trained before, reused"));
        }
        for protocol in Protocol::ALL {
            let stage = format!("{name} eval {}", protocol.name());
            crate::lab::eval_run(
                &dir,
                protocol,
                s.per_group,
                s.eval_seed,
                crate::lab::Scope::All,
                &mut |d, t| progress.step(&stage, d, t),
                &stop,
            )?;
        }
    }
    let result = judge(s, out)?;
    write_json_atomic(&out.join("study.json"), &result)?;
    write_figure(s, out)?;
    crate::run_dir::atomic_write(&out.join("study.md"), render(&result).as_bytes())?;
    progress.message(&format!("study written to {}", out.join("study.md").display()));
    Ok(Some(result))
}

/// The protocols in the order of [`ArmData::prompts`]: the test, then its control.
const PROTOCOLS: [Protocol; 2] = [Protocol::Prefix, Protocol::InSequence];

/// One arm's per-seed evaluation data, read through the one loader.
struct ArmData {
    held_out: Vec<(u64, usize, usize)>,
    /// Per protocol of [`PROTOCOLS`], each trained seed's prompts as `(family, group, correct)`.
    prompts: [Vec<Vec<(usize, usize, bool)>>; 2],
    /// Per protocol, each trained seed's answers (`None` where an outcome has no answer).
    answers: [Option<Vec<Vec<Answer>>>; 2],
    /// Per seed (trained or not), the prefix protocol's per-group accuracies (the figure).
    groups: Vec<Vec<GroupAccuracy>>,
}

fn read_arm(s: &StudySettings, out: &Path, config: &RunConfig) -> Result<ArmData> {
    let mut d =
        ArmData { held_out: vec![], prompts: [vec![], vec![]], answers: [Some(vec![]), Some(vec![])], groups: vec![] };
    for &seed in &s.seeds {
        let dir = run_dir(out, config, seed);
        let f = load_run(&dir, None)?.ok_or_else(|| Error::File { path: dir.clone(), reason: "no run".into() })?;
        let m = f.metrics.ok_or_else(|| Error::File { path: dir.clone(), reason: "unfinished run".into() })?;
        let queries = m.final_eval.queries;
        let correct = (m.final_eval.accuracy * queries as f64).round() as usize;
        d.held_out.push((seed, correct, queries));
        if let Some(e) = f.evals.get(&Protocol::Prefix) {
            d.groups.push(e.profile.groups.clone());
        }
        if m.final_eval.accuracy < SUCCESS_ACCURACY {
            continue;
        }
        for (k, protocol) in PROTOCOLS.into_iter().enumerate() {
            let outcomes = f
                .outcomes
                .get(&protocol)
                .ok_or_else(|| Error::File { path: dir.clone(), reason: format!("no {} outcomes", protocol.name()) })?;
            let per = s.per_group.max(1);
            d.prompts[k].push(outcomes.iter().map(|o| (o.family.unwrap_or(o.id % per), o.group, o.correct)).collect());
            let answers: Option<Vec<Answer>> = outcomes
                .iter()
                .map(|o| {
                    Some(Answer {
                        family: o.family.unwrap_or(o.id % per),
                        position: o.position?,
                        predicted: o.predicted.clone()?,
                    })
                })
                .collect();
            d.answers[k] = match (d.answers[k].take(), answers) {
                (Some(mut all), Some(a)) => {
                    all.push(a);
                    Some(all)
                }
                _ => None,
            };
        }
    }
    Ok(d)
}

fn summarise(s: &StudySettings, config: &RunConfig, d: &ArmData) -> Result<(ArmSummary, Sensitivity)> {
    let stride = config.model.phase_stride()?;
    let m = config.task.residue_modulus;
    let gap = |k: usize| -> Result<Option<(f64, f64, f64)>> {
        match stride {
            Some(st) if st > 1 && m.is_multiple_of(st) && !d.prompts[k].is_empty() => {
                let (b, _) =
                    seed_level::family_gap_two_stage(&d.prompts[k], m, Some(st), SEED_LEVEL_ROUNDS, s.eval_seed)?;
                Ok(Some(b.corrected_nonneg()))
            }
            _ => Ok(None),
        }
    };
    let (prefix_gap, in_sequence_gap) = (gap(0)?, gap(1)?);
    let flip = |k: usize| -> Result<Option<FlipRate>> {
        match &d.answers[k] {
            Some(a) if !a.is_empty() => Ok(Some(flips::flip_rate(a, SEED_LEVEL_ROUNDS, s.eval_seed)?)),
            _ => Ok(None),
        }
    };
    let verdict = match (prefix_gap, in_sequence_gap) {
        (Some((_, lo, _)), Some((_, _, hi))) if lo > hi => Sensitivity::Sensitive,
        (Some(_), Some(_)) => Sensitivity::NotShown,
        _ => Sensitivity::NotJudged,
    };
    let untrained = d
        .held_out
        .iter()
        .filter(|&&(_, k, n)| (k as f64) < SUCCESS_ACCURACY * n as f64)
        .map(|&(seed, _, _)| seed)
        .collect();
    let summary = ArmSummary {
        kernel: config.model.preset.clone(),
        stride,
        held_out: d.held_out.iter().map(|&(_, k, n)| k as f64 / n.max(1) as f64).collect(),
        untrained,
        prefix_gap,
        in_sequence_gap,
        seed_count: SeedCount { seeds: d.prompts[0].len() },
        prefix_flips: flip(0)?,
        in_sequence_flips: flip(1)?,
    };
    Ok((summary, verdict))
}

/// The numbers and verdicts of `theory/study.md` from the runs in `out`.
pub fn judge(s: &StudySettings, out: &Path) -> Result<StudyResult> {
    let (a, b) = (read_arm(s, out, &s.candidate)?, read_arm(s, out, &s.baseline)?);
    let (candidate, candidate_verdict) = summarise(s, &s.candidate, &a)?;
    let (baseline, baseline_verdict) = summarise(s, &s.baseline, &b)?;
    let cells = |d: &ArmData| d.held_out.iter().map(|&(_, k, n)| (k, n)).collect::<Vec<_>>();
    let accuracy_cost = Some(
        seed_level::accuracy_difference_two_stage(&cells(&a), &cells(&b), true, SEED_LEVEL_ROUNDS, s.eval_seed)?
            .corrected(),
    );
    Ok(StudyResult { settings: s.clone(), candidate, baseline, candidate_verdict, baseline_verdict, accuracy_cost })
}

fn write_figure(s: &StudySettings, out: &Path) -> Result<()> {
    let mut panels = Vec::new();
    for (i, config) in [&s.candidate, &s.baseline].into_iter().enumerate() {
        let d = read_arm(s, out, config)?;
        if d.groups.is_empty() {
            continue;
        }
        let seeds: Vec<&[GroupAccuracy]> = d.groups.iter().map(Vec::as_slice).collect();
        let trained = d.prompts[0].len();
        panels.push(figures::seeds_panel(
            format!("{}: {} seed(s), {trained} trained", config.model.preset, seeds.len()),
            format!("residue group (source-key position mod {})", config.task.residue_modulus),
            &seeds,
            None,
            config.model.phase_stride()?,
            i,
        ));
    }
    if panels.is_empty() {
        return Ok(());
    }
    // One y range for both arms (issue 43), so the same pp is the same height.
    figures::share_y_range(&mut panels);
    let cols = panels.len() as u32;
    plot::line_panels(
        &out.join("study-prefix"),
        "Per-group accuracy under prefix padding",
        &panels,
        panels.len(),
        (560 * cols, 420),
    )?;
    Ok(())
}

fn interval(x: Option<(f64, f64, f64)>) -> String {
    match x {
        Some((m, lo, hi)) => format!("{m:.1} pp [{lo:.1}, {hi:.1}]"),
        None => "not computed".into(),
    }
}

fn flip_words(f: &Option<FlipRate>) -> String {
    match f {
        Some(f) => {
            let (m, lo, hi) = f.interval;
            format!("{:.1} % [{:.1}, {:.1}]", 100.0 * m, 100.0 * lo, 100.0 * hi)
        }
        None => "not measured".into(),
    }
}

fn verdict_words(a: &ArmSummary, v: Sensitivity) -> String {
    let s = a.stride.unwrap_or(1);
    match v {
        Sensitivity::Sensitive => format!("**phase sensitive at period {s}** (its stride)"),
        Sensitivity::NotShown => format!("no phase effect shown at period {s} at this scale"),
        Sensitivity::NotJudged if a.stride.unwrap_or(1) <= 1 => "not judged: no stride above 1 (no phases)".into(),
        Sensitivity::NotJudged => format!(
            "not judged: no seed reached {:.0} % held-out accuracy (train longer: --steps)",
            100.0 * SUCCESS_ACCURACY
        ),
    }
}

/// `study.md`: the answer in its first lines, then the numbers, the figure and the rule.
pub fn render(r: &StudyResult) -> String {
    let (c, b) = (&r.candidate, &r.baseline);
    let mut t = format!("# Kernel study: {} against {}\n\n", c.kernel, b.kernel);
    t += &format!("- **{}**: {}.\n", c.kernel, verdict_words(c, r.candidate_verdict));
    t += &format!("- **{}** (baseline): {}.\n", b.kernel, verdict_words(b, r.baseline_verdict));
    t += &format!(
        "- Effect size (prefix-padding accuracy gap over phases, seed-level 95 % interval): {} {}, {} {}.\n",
        c.kernel,
        interval(c.prefix_gap),
        b.kernel,
        interval(b.prefix_gap)
    );
    t += &format!(
        "- Accuracy cost (held-out exact match, {} minus {}): {}.\n",
        c.kernel,
        b.kernel,
        interval(r.accuracy_cost)
    );
    t += &format!(
        "- Flip rate (share of a prompt family's shifts whose answer differs from the family's majority, \
         `theory/flip-rate.md`; prefix padding, seed-level 95 % interval; the in-sequence control is in the table): {} {}, {} {}.\n\n",
        c.kernel,
        flip_words(&c.prefix_flips),
        b.kernel,
        flip_words(&b.prefix_flips)
    );
    t += "| kernel | stride | held-out accuracy per seed | untrained seeds | prefix gap | in-sequence gap (control) | prefix flip rate | in-sequence flip rate (control) | seeds |\n";
    t += "|---|---|---|---|---|---|---|---|---|\n";
    for a in [c, b] {
        let acc: Vec<String> = a.held_out.iter().map(|x| format!("{:.1} %", 100.0 * x)).collect();
        t += &format!(
            "| {} | {} | {} | {:?} | {} | {} | {} | {} | {} |\n",
            a.kernel,
            a.stride.map_or("-".into(), |s| s.to_string()),
            acc.join(", "),
            a.untrained,
            interval(a.prefix_gap),
            interval(a.in_sequence_gap),
            flip_words(&a.prefix_flips),
            flip_words(&a.in_sequence_flips),
            a.seed_count.words()
        );
    }
    t += "\n![per-group accuracy under prefix padding](study-prefix.svg)\n\n";
    t += &format!(
        "Rule (`theory/study.md`): a kernel is phase sensitive at its stride S when the lower end of the \
         seed-level 95 % interval of its prefix-padding gap folded by S lies above the upper end of the same \
         interval under in-sequence padding. Seeds below {:.0} % held-out accuracy are in no gap. {} seeds, \
         {} prompts per residue group and protocol, evaluation seed {}.\n",
        100.0 * SUCCESS_ACCURACY,
        r.settings.seeds.len(),
        r.settings.per_group,
        r.settings.eval_seed
    );
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(seeds: usize) -> StudySettings {
        let mut c = RunConfig::default();
        c.model.preset = "w4s2".into();
        c.task.residue_modulus = 4;
        let mut b = c.clone();
        b.model.preset = "w4s4".into();
        StudySettings { candidate: c, baseline: b, seeds: (0..seeds as u64).collect(), per_group: 60, eval_seed: 0 }
    }

    /// Seeds whose prompts (60 families per group, M = 4) are correct except where `wrong`
    /// says, under each protocol.
    fn arm(seeds: usize, prefix_wrong: fn(usize, usize) -> bool, in_seq_wrong: fn(usize, usize) -> bool) -> ArmData {
        let prompts = |wrong: fn(usize, usize) -> bool| -> Vec<Vec<(usize, usize, bool)>> {
            (0..seeds).map(|_| (0..4).flat_map(|g| (0..60).map(move |f| (f, g, !wrong(f, g)))).collect()).collect()
        };
        ArmData {
            held_out: (0..seeds as u64).map(|s| (s, 990, 1000)).collect(),
            prompts: [prompts(prefix_wrong), prompts(in_seq_wrong)],
            answers: [None, None],
            groups: vec![],
        }
    }

    /// theory/study.md §2 on data where it holds (odd phases lose half their prompts under
    /// prefix padding only) and where it does not (the same loss under both protocols, and no
    /// loss at all): the negative controls.
    #[test]
    fn the_rule_says_sensitive_only_when_prefix_padding_alone_shows_the_gap() {
        let s = settings(3);
        let (a, v) =
            summarise(&s, &s.candidate, &arm(3, |f, g| g % 2 == 1 && f % 2 == 0, |f, g| (f + g) % 8 == 0)).unwrap();
        assert_eq!(v, Sensitivity::Sensitive, "{a:?}");
        assert_eq!(a.stride, Some(2));
        let (m, lo, _) = a.prefix_gap.unwrap();
        assert!((m - 50.0).abs() < 5.0 && lo > 30.0, "{a:?}");
        let (a, v) =
            summarise(&s, &s.candidate, &arm(3, |f, g| g % 2 == 1 && f % 2 == 0, |f, g| g % 2 == 1 && f % 2 == 0))
                .unwrap();
        assert_eq!(v, Sensitivity::NotShown, "the same gap under both protocols: {a:?}");
        let (_, v) = summarise(&s, &s.candidate, &arm(3, |_, _| false, |_, _| false)).unwrap();
        assert_eq!(v, Sensitivity::NotShown, "no gap at all");
        // An arm whose seeds did not train is not judged, and says so.
        let mut untrained = arm(3, |f, g| g % 2 == 1 && f % 2 == 0, |_, _| false);
        untrained.prompts = [vec![], vec![]];
        untrained.held_out = vec![(0, 100, 1000), (1, 200, 1000), (2, 300, 1000)];
        let (a, v) = summarise(&s, &s.candidate, &untrained).unwrap();
        assert_eq!((v, a.untrained.clone()), (Sensitivity::NotJudged, vec![0, 1, 2]));
        assert!(verdict_words(&a, v).contains("no seed reached"));
    }

    /// The flip rate (`theory/flip-rate.md`) reaches the summary and the page: answers that
    /// change at odd phases under prefix padding only give a prefix rate near the planted one
    /// and a control near 0; outcomes without answers give "not measured", never a number.
    #[test]
    fn the_flip_rate_is_reported_per_protocol_and_only_from_answers() {
        let s = settings(3);
        let mut d = arm(3, |f, g| g % 2 == 1 && f % 2 == 0, |_, _| false);
        let answers = |flip: bool| -> Vec<Vec<Answer>> {
            (0..3)
                .map(|_| {
                    (0..4)
                        .flat_map(|g| {
                            (0..60).map(move |f| Answer {
                                family: f,
                                position: 40 + g,
                                predicted: if flip && g % 2 == 1 && f % 2 == 0 { "32".into() } else { "8".into() },
                            })
                        })
                        .collect()
                })
                .collect()
        };
        d.answers = [Some(answers(true)), Some(answers(false))];
        let (a, _) = summarise(&s, &s.candidate, &d).unwrap();
        let (p, c) = (a.prefix_flips.clone().unwrap(), a.in_sequence_flips.clone().unwrap());
        // Half the families flip at 2 of 4 members (fraction 0.5): rate 0.25.
        assert!((p.interval.0 - 0.25).abs() < 0.02 && p.interval.1 > 0.1, "{p:?}");
        assert_eq!(c.interval, (0.0, 0.0, 0.0));
        // Members 2 apart share a phase's parity and never differ; 1 and 3 apart do.
        assert!(p.curve.iter().any(|k| k.shift == 2 && k.differ == 0), "{:?}", p.curve);
        assert!(p.curve.iter().any(|k| k.shift == 1 && k.differ > 0), "{:?}", p.curve);
        let (none, _) = summarise(&s, &s.candidate, &arm(3, |_, _| false, |_, _| false)).unwrap();
        assert!(none.prefix_flips.is_none());
        assert_eq!(flip_words(&none.prefix_flips), "not measured");
        assert!(flip_words(&a.prefix_flips).starts_with("25."), "{}", flip_words(&a.prefix_flips));
    }

    /// A study of a kernel against itself, on another task, with no or repeated seeds is refused
    /// naming the option.
    #[test]
    fn bad_studies_are_refused_naming_the_option() {
        let mut s = settings(2);
        s.per_group = 2;
        let field = |s: &StudySettings| match validate(s) {
            Err(Error::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let mut same = s.clone();
        same.baseline.model.preset = "w4s2".into();
        assert_eq!(field(&same), "--baseline");
        let mut other_task = s.clone();
        other_task.baseline.task.n_key += 1;
        assert_eq!(field(&other_task), "--baseline");
        let mut none = s.clone();
        none.seeds.clear();
        assert_eq!(field(&none), "--seeds");
        let mut twice = s.clone();
        twice.seeds = vec![1, 1];
        assert_eq!(field(&twice), "--seeds");
    }
}
