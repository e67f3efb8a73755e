//! Collecting a report's data: every reproduction output read and merged (shards: each unit's
//! directory is taken from the first output that has it). Reads only; computes nothing. Runs
//! that differ only in their seed form an arm ([`arms`]); each run's per-prompt outcomes are
//! read as phase-test records where they carry positions and depths.

use crate::analysis::flips::Answer;
use crate::analysis::phase::Outcome;
use crate::analysis::phase_test::{NllRecord, PhaseRecord};
use crate::analysis::protocol::Protocol;
use crate::analysis::training::{seed_outcome_within, SeedOutcome};
use crate::analysis::verdict::Rules;
use crate::kernel::spec::KernelSpec;
use crate::lab::load::{load_run, Expected};
use crate::lab::{read_json, CycleRunResult, EvalResult, GatesResult, KnockoutResult};
use crate::model::{Metrics, RunConfig};
use crate::reproduce::{KernelsResult, ModelUnitResult, Plan, TheoryResult, PLAN_FILE};
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Everything one trained model left behind.
#[derive(Clone, Debug)]
pub struct RunData {
    /// Preset (or the name of the run's custom kernel spec).
    pub preset: String,
    /// Its kernel, resolved once from its config ([`crate::model::ModelConfig::kernel`]).
    pub kernel: KernelSpec,
    /// The stride its phases fold by (`None` for full attention).
    pub stride: Option<usize>,
    /// Name in figures and tables: the preset, or the run directory's name where several runs
    /// share a preset (seeds, arms of a sweep).
    pub label: String,
    /// Where it was read from.
    pub dir: PathBuf,
    /// Its config.
    pub config: RunConfig,
    /// Training metrics (if finished).
    pub metrics: Option<Metrics>,
    /// The arm: the run directory's name without its `-seed<k>` suffix (plan units are
    /// `<arm>-seed<k>`; a directory without the suffix is an arm of its own).
    pub arm: String,
    /// The training seed (from the config).
    pub seed: u64,
    /// Evaluations by protocol.
    pub evals: BTreeMap<Protocol, EvalResult>,
    /// Per-prompt records of the phase test by protocol (`eval-<protocol>-outcomes.jsonl`),
    /// only where that file exists and every line carries `position` and `depth` (results
    /// written before issue 17 lack them).
    pub records: BTreeMap<Protocol, Vec<PhaseRecord>>,
    /// Per-prompt records of the continuous test (`theory/phase-lab.md` §8.3) by protocol, from
    /// the same files, where every line carries `position` and `prob` and the prompts split into
    /// equal residue groups (`family = id mod n`, `n` prompts per group).
    pub nll: BTreeMap<Protocol, Vec<NllRecord>>,
    /// The prompt family of each of [`RunData::records`]' records (the outcome's `family`, else
    /// `id mod n` where the groups are equal), by protocol, where every record has one: the unit
    /// the seed-level bootstrap redraws (issue 38).
    pub families: BTreeMap<Protocol, Vec<usize>>,
    /// Knockout maps by protocol.
    pub knockouts: BTreeMap<Protocol, KnockoutResult>,
    /// The answers the flip rate reads (`theory/flip-rate.md`) by protocol, from the same outcome
    /// lines as [`RunData::records`], where every line carries `family`, `position` and
    /// `predicted` (outcome files written before 2026-12-04 carry no answers).
    pub answers: BTreeMap<Protocol, Vec<Answer>>,
    /// Gate-cycling experiments (`cycle-<protocol>-layer<L>.json`, [`CycleRunResult`]), in file
    /// name order.
    pub cycles: Vec<CycleRunResult>,
    /// The near-query outcome lines (`near-<protocol>-outcomes.jsonl`, `theory/phase-lab.md`
    /// §9.2) by protocol: reported, never a verdict.
    pub near: BTreeMap<Protocol, Vec<Outcome>>,
    /// Gate preferences.
    pub gates: Option<GatesResult>,
    /// Analysis time of the unit.
    pub unit: Option<ModelUnitResult>,
    /// `environment.json`.
    pub environment: Option<serde_json::Value>,
}

/// The data of a report, merged over outputs.
#[derive(Clone, Debug, Default)]
pub struct Collected {
    /// The plan (all outputs must agree).
    pub plan: Option<Plan>,
    /// Kernel invariants.
    pub kernels: Option<KernelsResult>,
    /// Theory checks.
    pub theory: Option<TheoryResult>,
    /// Models by preset, in plan order where known.
    pub runs: Vec<RunData>,
    /// Wall-clock records of reproduce invocations (`timing/*.json`).
    pub timings: Vec<serde_json::Value>,
    /// The outputs read.
    pub sources: Vec<PathBuf>,
    /// Keep the seeds the training-success rule excludes as ordinary seeds of their arms (the
    /// exclusion-sensitivity rerun of issue 38; `false` as read).
    pub keep_excluded: bool,
}

fn opt_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    if path.exists() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

/// The records of a run's checked outcome lines ([`crate::lab::load`]): the phase test's, or
/// `None` when some line lacks a position or a depth; the continuous test's, or `None` when
/// some line lacks a position or a probability or the groups are unequal; each line's prompt
/// family, or `None` when some line has none.
type FileRecords = (Option<Vec<PhaseRecord>>, Option<Vec<NllRecord>>, Option<Vec<usize>>);

fn records_of(outcomes: &[Outcome]) -> FileRecords {
    let records = outcomes
        .iter()
        .map(|o| match (o.position, o.depth) {
            (Some(position), Some(depth)) => Some(PhaseRecord { position, depth, correct: o.correct }),
            _ => None,
        })
        .collect();
    // Prompts per group: `id = group * n + family` (eval writes equal groups in order).
    let mut per_group: BTreeMap<usize, usize> = BTreeMap::new();
    for o in outcomes {
        *per_group.entry(o.group).or_default() += 1;
    }
    let n = per_group.values().next().copied().unwrap_or(0);
    let equal = n > 0 && per_group.values().all(|&c| c == n);
    let families = outcomes.iter().map(|o| o.family.or(equal.then_some(o.id % n.max(1)))).collect();
    let nll = if equal {
        outcomes
            .iter()
            .map(|o| match (o.position, o.prob) {
                (Some(position), Some(prob)) => Some(NllRecord { family: o.id % n, position, prob }),
                _ => None,
            })
            .collect()
    } else {
        None
    };
    (records, nll, families)
}

pub use crate::run_dir::arm_of;

/// The flip rate's answers of outcome lines, or `None` when some line lacks its family, position
/// or answer.
fn answers_of(outcomes: &[Outcome]) -> Option<Vec<Answer>> {
    outcomes
        .iter()
        .map(|o| Some(Answer { family: o.family?, position: o.position?, predicted: o.predicted.clone()? }))
        .collect()
}

/// The gate-cycling results in `dir` (`cycle-<protocol>-layer<L>.json`), by file name.
fn read_cycles(dir: &Path) -> Result<Vec<CycleRunResult>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            name.starts_with("cycle-") && name.contains("-layer") && name.ends_with(".json")
        })
        .collect();
    files.sort();
    files.iter().map(|f| read_json(f)).collect()
}

/// The near-query outcome lines in `dir` (`near-<protocol>-outcomes.jsonl`, §9.2) of a task of
/// `m` residue groups, by protocol, through the one reader of outcome lines.
fn read_near(dir: &Path, m: usize) -> Result<BTreeMap<Protocol, Vec<Outcome>>> {
    let mut out = BTreeMap::new();
    for p in Protocol::ALL {
        let file = dir.join(format!("near-{}-outcomes.jsonl", p.name()));
        if !file.is_file() {
            continue;
        }
        let f = std::fs::File::open(&file).map_err(|e| Error::io(&file, e))?;
        let read = crate::analysis::audit::read_results(
            std::io::BufReader::new(f),
            m,
            None,
            u64::MAX,
            0,
            &crate::stop::Stop::never(),
        )
        .map_err(|e| Error::File { path: file.clone(), reason: e.to_string() })?;
        out.insert(p, read);
    }
    Ok(out)
}

/// The run in `dir` through the one loader ([`load_run`]), with the unit's timing.
fn read_run(dir: &Path, expected: Option<&Expected>, floor: Option<usize>) -> Result<Option<RunData>> {
    let Some(f) = load_run(dir, expected)? else { return Ok(None) };
    if let Some(floor) = floor {
        crate::lab::load::check_beyond_floor(dir, &f, floor)?;
    }
    let mut records = BTreeMap::new();
    let mut nll = BTreeMap::new();
    let mut families = BTreeMap::new();
    let mut answers = BTreeMap::new();
    for (p, outcomes) in &f.outcomes {
        if let Some(a) = answers_of(outcomes) {
            answers.insert(*p, a);
        }
        let (r, y, fam) = records_of(outcomes);
        if let (Some(r), Some(fam)) = (&r, fam) {
            if r.len() == fam.len() {
                families.insert(*p, fam);
            }
        }
        if let Some(r) = r {
            records.insert(*p, r);
        }
        if let Some(y) = y {
            nll.insert(*p, y);
        }
    }
    let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    Ok(Some(RunData {
        preset: f.config.model.preset.clone(),
        kernel: f.config.model.kernel()?,
        stride: f.config.model.phase_stride()?,
        label: f.config.model.preset.clone(),
        arm: arm_of(&name).to_string(),
        seed: f.config.train.seed,
        dir: dir.to_path_buf(),
        metrics: f.metrics,
        evals: f.evals,
        records,
        nll,
        families,
        knockouts: f.knockouts,
        answers,
        cycles: read_cycles(dir)?,
        near: read_near(dir, f.config.task.residue_modulus)?,
        gates: f.gates,
        unit: opt_json(&dir.join("unit.json"))?,
        environment: f.environment,
        config: f.config,
    }))
}

/// Verifies the provenance of every run directory of the outputs `from` against its
/// manifest ([`crate::run_dir::manifest::verify`]) before anything is read: `phasekv report`
/// runs it first. A run of `unfinished` (a partial report's, `--partial`) that has no manifest
/// yet is passed over: it holds no result its writers have recorded (it has no metrics, so the
/// loader refuses any evaluation in it); one that has a manifest is verified like the rest.
pub fn verify_provenance(from: &[PathBuf], unfinished: &[PathBuf]) -> Result<()> {
    for src in from {
        for d in run_dirs(src)? {
            let manifest = crate::run_dir::manifest::read(&d)?;
            if manifest.is_none() && unfinished.iter().any(|u| same_dir(u, &d)) {
                continue;
            }
            if d.join(crate::run_dir::CONFIG_FILE).exists() || manifest.is_some() {
                crate::run_dir::manifest::verify(&d)?;
            }
        }
    }
    Ok(())
}

fn same_dir(a: &Path, b: &Path) -> bool {
    a == b || matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
}

/// The directories under `src/runs`, sorted.
fn run_dirs(src: &Path) -> Result<Vec<PathBuf>> {
    let runs = src.join("runs");
    if !runs.is_dir() {
        return Ok(vec![]);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&runs)
        .map_err(|e| Error::io(&runs, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// Reads and merges reproduction outputs.
pub fn collect(from: &[PathBuf]) -> Result<Collected> {
    let mut c = Collected::default();
    for src in from {
        if !src.is_dir() {
            return Err(Error::invalid("--from", format!("{} is not a directory", src.display())));
        }
        c.sources.push(src.clone());
        if let Some(plan) = opt_json::<Plan>(&src.join(PLAN_FILE))? {
            match &c.plan {
                Some(p) if p != &plan => {
                    return Err(Error::invalid(
                        "--from",
                        format!("{} was produced by a different plan than the outputs before it", src.display()),
                    ))
                }
                _ => c.plan = Some(plan),
            }
        }
        if c.kernels.is_none() {
            c.kernels = opt_json(&src.join("kernels").join("kernels.json"))?;
        }
        if c.theory.is_none() {
            c.theory = opt_json(&src.join("theory").join("theory.json"))?;
        }
        let timing = src.join("timing");
        if timing.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&timing)
                .map_err(|e| Error::io(&timing, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            for f in files {
                c.timings.push(read_json(&f)?);
            }
        }
        // The plan's units by directory name: a run must be the unit its name says.
        let units: BTreeMap<String, Expected> = match &c.plan {
            Some(p) => p.models()?.iter().map(|m| (m.key(), Expected::of(&m.config, p.rules))).collect(),
            None => BTreeMap::new(),
        };
        // §9.2: under v3 no verdict reads a prompt below the run floor; a run that holds one is
        // refused, naming the file and line.
        let floor = match &c.plan {
            Some(p) => p.run_floor()?,
            None => None,
        };
        for d in run_dirs(src)? {
            let name = d.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            if c.runs.iter().any(|x| x.dir.file_name() == d.file_name()) {
                continue;
            }
            if let Some(r) = read_run(&d, units.get(&name), floor)? {
                c.runs.push(r);
            }
        }
    }
    // One model is one run: two directories whose evaluations carry the same run identity
    // (config and weights hashes) hold the same model twice (a directory copied under
    // another seed's name).
    let mut seen: BTreeMap<&str, &Path> = BTreeMap::new();
    for r in &c.runs {
        for e in r.evals.values() {
            if let Some(id) = e.run_id.as_deref() {
                match seen.get(id) {
                    Some(other) if *other != r.dir.as_path() => {
                        return Err(Error::File {
                            path: r.dir.clone(),
                            reason: format!(
                                "run_id: {id} is also {}'s: the same model twice (copied under another name?)",
                                other.display()
                            ),
                        })
                    }
                    _ => {
                        seen.insert(id, r.dir.as_path());
                    }
                }
            }
        }
    }
    // Plan order (runs of one directory name merge over outputs: the first output wins).
    let order: Vec<String> = match &c.plan {
        Some(p) => p.models()?.iter().map(|m| m.key()).collect(),
        None => vec![],
    };
    let key = |r: &RunData| r.dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    c.runs.sort_by_key(|r| (order.iter().position(|k| k == &key(r)).unwrap_or(usize::MAX), key(r)));
    let shared: Vec<bool> = c.runs.iter().map(|r| c.runs.iter().filter(|x| x.preset == r.preset).count() > 1).collect();
    for (r, shared) in c.runs.iter_mut().zip(shared) {
        if shared {
            r.label = key(r);
        }
    }
    Ok(c)
}

/// The runs of one arm, in the order collected.
#[derive(Clone, Debug)]
pub struct Arm<'a> {
    /// The arm's name ([`RunData::arm`]).
    pub name: String,
    /// Its preset.
    pub preset: String,
    /// Its kernel (its first run's [`RunData::kernel`]).
    pub kernel: KernelSpec,
    /// The stride its phases fold by (its first run's [`RunData::stride`]).
    pub stride: Option<usize>,
    /// Its runs, one per seed: under the v2 and v3 rules only the seeds that trained
    /// (`theory/phase-lab.md` §8.2); under v1 every seed.
    pub runs: Vec<&'a RunData>,
    /// Under the v2 and v3 rules, the seeds the training-success rule excludes, with what it made of
    /// them (reported, never pooled); empty under v1.
    pub excluded: Vec<(&'a RunData, SeedOutcome)>,
    /// The rules that judge the arm (the plan's).
    pub rules: Rules,
}

/// The rules of a report's data: the plan's, v1 without a plan.
pub fn rules(c: &Collected) -> Rules {
    c.plan.as_ref().map(|p| p.rules).unwrap_or_default()
}

/// What the training-success rule makes of a run under `rules`, with their budget of
/// extensions (§8.2's one, §9.4's four), `None` under v1 (no such rule), while it has no metrics
/// (unfinished: kept, as under v1) or no valid accuracy (more extensions than the budget).
pub fn training_outcome(r: &RunData, rules: Rules) -> Option<SeedOutcome> {
    let m = r.metrics.as_ref()?;
    seed_outcome_within(m.final_eval.accuracy, m.extension_count(), rules.max_extensions()?).ok()
}

/// The runs grouped into arms, in order of first appearance (plan order where known). Under
/// the v2 and v3 rules a seed the training-success rule does not pass is moved to
/// [`Arm::excluded`].
pub fn arms(c: &Collected) -> Vec<Arm<'_>> {
    let rules = rules(c);
    let mut out: Vec<Arm> = Vec::new();
    for r in &c.runs {
        let i = match out.iter().position(|a| a.name == r.arm) {
            Some(i) => i,
            None => {
                out.push(Arm {
                    name: r.arm.clone(),
                    preset: r.preset.clone(),
                    kernel: r.kernel.clone(),
                    stride: r.stride,
                    runs: vec![],
                    excluded: vec![],
                    rules,
                });
                out.len() - 1
            }
        };
        match training_outcome(r, rules) {
            Some(o) if o != SeedOutcome::Succeeded && !c.keep_excluded => out[i].excluded.push((r, o)),
            _ => out[i].runs.push(r),
        }
    }
    out
}
