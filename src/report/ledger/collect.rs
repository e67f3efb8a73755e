//! Collecting a report's data: every reproduction output read and merged (shards: each unit's
//! directory is taken from the first output that has it). Reads only; computes nothing.

use crate::analysis::protocol::Protocol;
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
    /// Evaluations by protocol.
    pub evals: BTreeMap<Protocol, EvalResult>,
    /// Knockout map.
    pub knockout: Option<KnockoutResult>,
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
}

fn opt_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    if path.exists() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

fn read_run(dir: &Path) -> Result<Option<RunData>> {
    let Some(config) = opt_json::<RunConfig>(&dir.join(crate::model::run::CONFIG_FILE))? else { return Ok(None) };
    let mut evals = BTreeMap::new();
    for p in Protocol::ALL {
        if let Some(e) = opt_json::<EvalResult>(&dir.join(format!("eval-{}.json", p.name())))? {
            evals.insert(p, e);
        }
    }
    Ok(Some(RunData {
        preset: config.model.preset.clone(),
        label: config.model.preset.clone(),
        dir: dir.to_path_buf(),
        metrics: opt_json(&dir.join(crate::model::run::METRICS_FILE))?,
        evals,
        knockout: crate::lab::knockout_file(dir, Protocol::InSequence).map(|p| read_json(&p)).transpose()?,
        gates: opt_json(&dir.join("gates.json"))?,
        unit: opt_json(&dir.join("unit.json"))?,
        environment: opt_json(&dir.join(crate::model::run::ENVIRONMENT_FILE))?,
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

/// The first run of `preset`.
pub fn run<'a>(c: &'a Collected, preset: &str) -> Option<&'a RunData> {
    c.runs.iter().find(|r| r.preset == preset)
}
