//! Collecting a report's data: every reproduction output read and merged (shards: each unit's
//! directory is taken from the first output that has it). Reads only; computes nothing. Runs
//! that differ only in their seed form an arm ([`arms`]); each run's per-prompt outcomes are
//! read as phase-test records where they carry positions and depths.

use crate::analysis::phase::Outcome;
use crate::analysis::phase_test::{NllRecord, PhaseRecord};
use crate::analysis::protocol::Protocol;
use crate::analysis::training::{run_outcome, SeedOutcome};
use crate::analysis::verdict::Rules;
use crate::lab::{read_json, EvalResult, GatesResult, KnockoutResult};
use crate::model::{Metrics, RunConfig};
use crate::reproduce::{KernelsResult, ModelUnitResult, Plan, TheoryResult, PLAN_FILE};
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Everything one trained model left behind.
#[derive(Clone, Debug)]
pub struct RunData {
    /// Preset.
    pub preset: String,
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

/// The records of an outcomes file (read with the JSONL cap): the phase test's, or `None` when
/// some line lacks a position or a depth; the continuous test's, or `None` when some line lacks
/// a position or a probability or the groups are unequal. A line that is not an outcome is an
/// error naming it.
type FileRecords = (Option<Vec<PhaseRecord>>, Option<Vec<NllRecord>>, Option<Vec<usize>>);

fn read_records(path: &Path) -> Result<FileRecords> {
    let text = crate::limits::read_text(path, crate::limits::MAX_JSONL_BYTES)?;
    let mut outcomes = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let o: Outcome = serde_json::from_str(line).map_err(|e| Error::File {
            path: path.to_path_buf(),
            reason: format!("line {}: not an outcome: {e}", i + 1),
        })?;
        outcomes.push(o);
    }
    let records = outcomes
        .iter()
        .map(|o| match (o.position, o.depth) {
            (Some(position), Some(depth)) => Some(PhaseRecord { position, depth, correct: o.correct }),
            _ => None,
        })
        .collect();
    // Prompts per group: `id = group * n + family` (eval writes equal groups in order).
    let mut per_group: BTreeMap<usize, usize> = BTreeMap::new();
    for o in &outcomes {
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
    Ok((records, nll, families))
}

pub use crate::run_dir::arm_of;

fn read_run(dir: &Path) -> Result<Option<RunData>> {
    let Some(config) = opt_json::<RunConfig>(&dir.join(crate::run_dir::CONFIG_FILE))? else { return Ok(None) };
    let mut evals = BTreeMap::new();
    let mut records = BTreeMap::new();
    let mut nll = BTreeMap::new();
    let mut families = BTreeMap::new();
    for p in Protocol::ALL {
        if let Some(e) = opt_json::<EvalResult>(&dir.join(format!("eval-{}.json", p.name())))? {
            evals.insert(p, e);
        }
        let file = dir.join(format!("eval-{}-outcomes.jsonl", p.name()));
        if file.exists() {
            let (r, y, f) = read_records(&file)?;
            if let (Some(r), Some(f)) = (&r, f) {
                if r.len() == f.len() {
                    families.insert(p, f);
                }
            }
            if let Some(r) = r {
                records.insert(p, r);
            }
            if let Some(y) = y {
                nll.insert(p, y);
            }
        }
    }
    let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    Ok(Some(RunData {
        preset: config.model.preset.clone(),
        label: config.model.preset.clone(),
        arm: arm_of(&name).to_string(),
        seed: config.train.seed,
        dir: dir.to_path_buf(),
        metrics: opt_json(&dir.join(crate::run_dir::METRICS_FILE))?,
        evals,
        records,
        nll,
        families,
        knockouts: Protocol::ALL
            .into_iter()
            .filter_map(|p| crate::lab::knockout_file(dir, p).map(|f| read_json(&f).map(|k| (p, k))))
            .collect::<Result<_>>()?,
        gates: opt_json(&dir.join("gates.json"))?,
        unit: opt_json(&dir.join("unit.json"))?,
        environment: opt_json(&dir.join(crate::run_dir::ENVIRONMENT_FILE))?,
        config,
    }))
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
        let runs = src.join("runs");
        if runs.is_dir() {
            let mut dirs: Vec<PathBuf> = std::fs::read_dir(&runs)
                .map_err(|e| Error::io(&runs, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir())
                .collect();
            dirs.sort();
            for d in dirs {
                if let Some(r) = read_run(&d)? {
                    if !c.runs.iter().any(|x| x.dir.file_name() == r.dir.file_name()) {
                        c.runs.push(r);
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
    /// Its runs, one per seed: under the v2 rules only the seeds that trained
    /// (`theory/phase-lab.md` §8.2); under v1 every seed.
    pub runs: Vec<&'a RunData>,
    /// Under the v2 rules, the seeds the training-success rule excludes, with what it made of
    /// them (reported, never pooled); empty under v1.
    pub excluded: Vec<(&'a RunData, SeedOutcome)>,
    /// The rules that judge the arm (the plan's).
    pub rules: Rules,
}

/// The rules of a report's data: the plan's, v1 without a plan.
pub fn rules(c: &Collected) -> Rules {
    c.plan.as_ref().map(|p| p.rules).unwrap_or_default()
}

/// What the training-success rule makes of a run, `None` while it has no metrics (unfinished:
/// kept, as under v1) or no valid accuracy.
pub fn training_outcome(r: &RunData) -> Option<SeedOutcome> {
    run_outcome(r.metrics.as_ref()?).ok()
}

/// The runs grouped into arms, in order of first appearance (plan order where known). Under
/// the v2 rules a seed the training-success rule does not pass is moved to
/// [`Arm::excluded`].
pub fn arms(c: &Collected) -> Vec<Arm<'_>> {
    let rules = rules(c);
    let mut out: Vec<Arm> = Vec::new();
    for r in &c.runs {
        let i = match out.iter().position(|a| a.name == r.arm) {
            Some(i) => i,
            None => {
                out.push(Arm { name: r.arm.clone(), preset: r.preset.clone(), runs: vec![], excluded: vec![], rules });
                out.len() - 1
            }
        };
        match training_outcome(r) {
            Some(o) if rules == Rules::V2 && o != SeedOutcome::Succeeded && !c.keep_excluded => {
                out[i].excluded.push((r, o))
            }
            _ => out[i].runs.push(r),
        }
    }
    out
}
