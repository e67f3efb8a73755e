//! The one loader of a run directory's data (issue 44): every file the report and the claims
//! read, each held to its meaning at load, every refusal one error naming the file, the line
//! where there is one, and the field. `phasekv report` reads runs only through [`load_run`];
//! the outcome lines go through the reader `audit analyze` uses
//! ([`crate::analysis::audit::read_results`]: ids unique, `prob` in [0, 1], `correct`
//! consistent with `prob`, `group = position mod M`), then through the run's own columns
//! ([`RunColumns::fill`]: arm, preset, seed, protocol, family and phase equal to the
//! directory's, the config's and the evaluation's).
//!
//! | file | checked |
//! |---|---|
//! | the directory's name | a `-seed<k>` suffix equals `config.json`'s `train.seed`; the plan's unit of that name has the config's preset and seed |
//! | `config.json` | a valid config ([`RunConfig::validate`]: positive moduli, strides, counts) |
//! | `metrics.json` | preset and seed the config's; accuracies in [0, 1]; at most the budget's extensions ([`Expected::max_extensions`]; [`MAX_EXTENSIONS_V3`] without a plan), numbered in order; present wherever evaluations are |
//! | `eval-<protocol>.json` | protocol the file's, preset the config's, arm the directory's, `per_group` positive, stride the preset's, a profile of `M` groups with accuracies in [0, 1] |
//! | `eval-<protocol>-outcomes.jsonl` | its evaluation JSON present; `per_group x M` lines, ids below that; every line as above |
//! | `knockout[-<protocol>].json` | protocol, preset, positive `per_group`; clean accuracies and every row of the map's length `M`, accuracies in [0, 1] |
//! | `gates.json` | preset the config's, positive window and samples |
//!
//! Under the v3 rules [`check_beyond_floor`] holds a loaded run to §9.2: every scored line at or
//! beyond the run floor.

use super::cache::read_json;
use super::knockout_run::knockout_file;
use super::outcomes::RunColumns;
use super::results::{EvalResult, GatesResult, KnockoutResult};
use crate::analysis::phase::Outcome;
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::GroupAccuracy;
use crate::analysis::training::{MAX_EXTENSIONS, MAX_EXTENSIONS_V3};
use crate::analysis::verdict::Rules;
use crate::model::{Metrics, RunConfig};
use crate::{Error, Result};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::path::Path;

/// Everything a run directory holds that the report reads, checked.
#[derive(Clone, Debug)]
pub struct RunFiles {
    /// `config.json`.
    pub config: RunConfig,
    /// `metrics.json` (absent while training runs).
    pub metrics: Option<Metrics>,
    /// `eval-<protocol>.json`.
    pub evals: BTreeMap<Protocol, EvalResult>,
    /// `eval-<protocol>-outcomes.jsonl`, every line checked.
    pub outcomes: BTreeMap<Protocol, Vec<Outcome>>,
    /// `knockout-<protocol>.json` (in-sequence: or the older `knockout.json`).
    pub knockouts: BTreeMap<Protocol, KnockoutResult>,
    /// `gates.json`.
    pub gates: Option<GatesResult>,
    /// `environment.json`.
    pub environment: Option<serde_json::Value>,
}

/// What a run must be by the plan that made it: the preset and training seed of the plan's
/// unit with the directory's name, and the training budget of the rules the plan's run is
/// judged under.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    /// The unit's kernel preset.
    pub preset: String,
    /// The unit's training seed.
    pub seed: u64,
    /// The most extensions the run may have: [`budget`] of the plan's rules.
    pub max_extensions: usize,
}

impl Expected {
    /// The unit with training config `config` of a plan judged under `rules`.
    pub fn of(config: &RunConfig, rules: Rules) -> Self {
        Expected { preset: config.model.preset.clone(), seed: config.train.seed, max_extensions: budget(rules) }
    }
}

/// The extensions a run judged under `rules` may have: the rules' budget
/// ([`Rules::max_extensions`]: [`MAX_EXTENSIONS`] under v2, [`MAX_EXTENSIONS_V3`] under v3), and
/// under v1, which has no training rule and never extends, v2's (what every v1 and v2 run was
/// loaded with before the budget followed the rules).
pub fn budget(rules: Rules) -> usize {
    rules.max_extensions().unwrap_or(MAX_EXTENSIONS)
}

fn bad(path: &Path, field: &str, reason: impl std::fmt::Display) -> Error {
    Error::File { path: path.to_path_buf(), reason: format!("{field}: {reason}") }
}

/// Whether something is at `path` (a dangling symlink is: reading it then fails, naming it).
fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

fn opt_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    if present(path) {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

fn unit_interval(path: &Path, field: &str, x: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&x) {
        return Err(bad(path, field, format!("{x} is outside [0, 1]")));
    }
    Ok(())
}

/// Group accuracies: `m` groups in order, each accuracy in [0, 1] (NaN for an empty group).
fn check_groups(path: &Path, field: &str, groups: &[GroupAccuracy], m: usize) -> Result<()> {
    if groups.len() != m {
        return Err(bad(path, field, format!("{} groups, the residue modulus M is {m}", groups.len())));
    }
    for (i, g) in groups.iter().enumerate() {
        if g.group != i {
            return Err(bad(path, &format!("{field}[{i}].group"), format!("{} out of order", g.group)));
        }
        if g.correct > g.n {
            return Err(bad(path, &format!("{field}[{i}].correct"), format!("{} above n {}", g.correct, g.n)));
        }
        if g.n > 0 {
            unit_interval(path, &format!("{field}[{i}].accuracy"), g.accuracy)?;
        }
    }
    Ok(())
}

fn check_metrics(dir: &Path, m: &Metrics, config: &RunConfig, max_extensions: usize) -> Result<()> {
    let path = dir.join(crate::run_dir::METRICS_FILE);
    if m.preset != config.model.preset {
        return Err(bad(&path, "preset", format!("{:?}, config.json says {:?}", m.preset, config.model.preset)));
    }
    if m.seed != config.train.seed {
        return Err(bad(&path, "seed", format!("{}, config.json says {}", m.seed, config.train.seed)));
    }
    unit_interval(&path, "final_eval.accuracy", m.final_eval.accuracy)?;
    unit_interval(&path, "final_eval.token_accuracy", m.final_eval.token_accuracy)?;
    unit_interval(&path, "best_accuracy", m.best_accuracy)?;
    for (i, e) in m.evals.iter().enumerate() {
        unit_interval(&path, &format!("evals[{i}].accuracy"), e.accuracy)?;
    }
    if m.extension_count() > max_extensions {
        return Err(bad(
            &path,
            "extensions",
            format!("{} extensions, the training-success rule allows at most {max_extensions}", m.extension_count()),
        ));
    }
    for (i, x) in m.extensions.iter().enumerate() {
        if x.schedule.index != i + 1 {
            return Err(bad(
                &path,
                &format!("extensions[{i}].index"),
                format!("{}, expected {}", x.schedule.index, i + 1),
            ));
        }
        unit_interval(&path, &format!("extensions[{i}].accuracy_before"), x.accuracy_before)?;
        unit_interval(&path, &format!("extensions[{i}].accuracy_after"), x.accuracy_after)?;
    }
    Ok(())
}

fn check_eval(path: &Path, e: &EvalResult, p: Protocol, config: &RunConfig, arm: &str) -> Result<()> {
    if e.protocol != p {
        return Err(bad(path, "protocol", format!("{}, the file is {}'s", e.protocol.name(), p.name())));
    }
    if e.preset != config.model.preset {
        return Err(bad(path, "preset", format!("{:?}, config.json says {:?}", e.preset, config.model.preset)));
    }
    if let Some(a) = e.arm.as_deref().filter(|a| *a != arm) {
        return Err(bad(path, "arm", format!("{a:?}, the directory's arm is {arm:?}")));
    }
    if e.per_group == 0 {
        return Err(bad(path, "per_group", "0; at least one prompt per group"));
    }
    let stride = config.model.phase_stride()?;
    if e.stride != stride {
        return Err(bad(path, "stride", format!("{:?}, the preset {:?} has {stride:?}", e.stride, e.preset)));
    }
    let m = config.task.residue_modulus;
    if e.profile.modulus != m {
        return Err(bad(
            path,
            "profile.modulus",
            format!("{}, config.json's residue_modulus is {m}", e.profile.modulus),
        ));
    }
    check_groups(path, "profile.groups", &e.profile.groups, m)?;
    if e.profile.n > 0 {
        unit_interval(path, "profile.mean_accuracy", e.profile.mean_accuracy)?;
    }
    Ok(())
}

/// The outcome lines of `path`, each checked against the run ([`RunColumns`]) and counted:
/// `per_group x M` lines with ids below that.
fn read_outcomes(path: &Path, columns: &RunColumns, m: usize) -> Result<Vec<Outcome>> {
    let (file, _) = crate::limits::open_regular(path, crate::limits::MAX_JSONL_BYTES)?;
    let reader = std::io::BufReader::new(std::io::Read::take(file, crate::limits::MAX_JSONL_BYTES + 1));
    let outcomes = crate::analysis::audit::read_results(reader, m, None, u64::MAX, 0, &crate::stop::Stop::never())
        .map_err(|e| Error::File { path: path.to_path_buf(), reason: e.to_string() })?;
    let want = columns.per_group * m;
    if outcomes.len() != want {
        return Err(bad(
            path,
            "lines",
            format!("{} outcome lines, per_group {} x groups {m} = {want}", outcomes.len(), columns.per_group),
        ));
    }
    for (i, o) in outcomes.iter().enumerate() {
        if o.id >= want {
            return Err(bad(
                path,
                &format!("line {}: id", i + 1),
                format!("{} is not below per_group x groups = {want}", o.id),
            ));
        }
        columns
            .fill(&mut o.clone())
            .map_err(|e| Error::File { path: path.to_path_buf(), reason: format!("line {}: {e}", i + 1) })?;
    }
    Ok(outcomes)
}

fn check_knockout(path: &Path, k: &KnockoutResult, p: Protocol, config: &RunConfig) -> Result<()> {
    if k.protocol != p {
        return Err(bad(path, "protocol", format!("{}, the file is {}'s", k.protocol.name(), p.name())));
    }
    if k.preset != config.model.preset {
        return Err(bad(path, "preset", format!("{:?}, config.json says {:?}", k.preset, config.model.preset)));
    }
    if k.per_group == 0 {
        return Err(bad(path, "per_group", "0; at least one prompt per group"));
    }
    let m = config.task.residue_modulus;
    if k.map.modulus != m {
        return Err(bad(path, "map.modulus", format!("{}, config.json's residue_modulus is {m}", k.map.modulus)));
    }
    check_groups(path, "map.clean", &k.map.clean, m)?;
    for (i, r) in k.map.rows.iter().enumerate() {
        check_groups(path, &format!("map.rows[{i}].groups"), &r.groups, m)?;
        if r.drop_pp.len() != m {
            return Err(bad(
                path,
                &format!("map.rows[{i}].drop_pp"),
                format!("{} entries, the map has {m} groups", r.drop_pp.len()),
            ));
        }
    }
    Ok(())
}

/// Loads the run in `dir` (`None` when it holds no `config.json`: not a run), every file
/// checked as the module doc says; `expected` is the plan's unit of that name, when there is a
/// plan that has one. A run loaded without one may have the largest budget of any rules,
/// [`MAX_EXTENSIONS_V3`] extensions: the loader cannot tell which rules judge it.
pub fn load_run(dir: &Path, expected: Option<&Expected>) -> Result<Option<RunFiles>> {
    let config_path = dir.join(crate::run_dir::CONFIG_FILE);
    let Some(config) = opt_json::<RunConfig>(&config_path)? else { return Ok(None) };
    config.validate().map_err(|e| Error::File { path: config_path.clone(), reason: e.to_string() })?;
    let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let arm = crate::run_dir::arm_of(&name).to_string();
    if arm != name {
        let suffix = &name[arm.len() + "-seed".len()..];
        if suffix.parse::<u64>().ok() != Some(config.train.seed) {
            return Err(bad(
                &config_path,
                "train.seed",
                format!("{}, the directory is named {name:?}", config.train.seed),
            ));
        }
    }
    if let Some(x) = expected {
        if x.preset != config.model.preset {
            return Err(bad(
                &config_path,
                "model.preset",
                format!("{:?}, the plan's unit {name:?} has {:?}", config.model.preset, x.preset),
            ));
        }
        if x.seed != config.train.seed {
            return Err(bad(
                &config_path,
                "train.seed",
                format!("{}, the plan's unit {name:?} has {}", config.train.seed, x.seed),
            ));
        }
    }
    let metrics_path = dir.join(crate::run_dir::METRICS_FILE);
    let metrics: Option<Metrics> = opt_json(&metrics_path)?;
    if let Some(m) = &metrics {
        check_metrics(dir, m, &config, expected.map_or(MAX_EXTENSIONS_V3, |x| x.max_extensions))?;
    }
    let m = config.task.residue_modulus;
    let mut evals = BTreeMap::new();
    let mut outcomes = BTreeMap::new();
    for p in Protocol::ALL {
        let json = dir.join(format!("eval-{}.json", p.name()));
        let file = dir.join(format!("eval-{}-outcomes.jsonl", p.name()));
        let eval: Option<EvalResult> = opt_json(&json)?;
        if let Some(e) = &eval {
            check_eval(&json, e, p, &config, &arm)?;
        }
        if present(&file) {
            let Some(e) = &eval else {
                return Err(bad(
                    &file,
                    "eval",
                    format!("{} is missing: outcomes without their evaluation", json.display()),
                ));
            };
            let columns = RunColumns::new(dir, &config, p, e.per_group, e.stride);
            outcomes.insert(p, read_outcomes(&file, &columns, m)?);
        }
        if let Some(e) = eval {
            evals.insert(p, e);
        }
    }
    let mut knockouts = BTreeMap::new();
    for p in Protocol::ALL {
        if let Some(f) = knockout_file(dir, p) {
            let k: KnockoutResult = read_json(&f)?;
            check_knockout(&f, &k, p, &config)?;
            knockouts.insert(p, k);
        }
    }
    let gates_path = dir.join("gates.json");
    let gates: Option<GatesResult> = opt_json(&gates_path)?;
    if let Some(g) = &gates {
        if g.preset != config.model.preset {
            return Err(bad(
                &gates_path,
                "preset",
                format!("{:?}, config.json says {:?}", g.preset, config.model.preset),
            ));
        }
        if g.window == 0 || g.samples == 0 {
            return Err(bad(
                &gates_path,
                "window",
                format!("window {} and samples {} must be positive", g.window, g.samples),
            ));
        }
    }
    if metrics.is_none() && (!evals.is_empty() || !knockouts.is_empty() || gates.is_some()) {
        return Err(bad(
            &metrics_path,
            "metrics",
            "missing, yet the run has evaluations (only a finished run is evaluated)",
        ));
    }
    let environment = opt_json(&dir.join(crate::run_dir::ENVIRONMENT_FILE))?;
    Ok(Some(RunFiles { config, metrics, evals, outcomes, knockouts, gates, environment }))
}

/// §9.2's guarantee on a loaded run (`theory/phase-lab.md`: no verdict reads a prompt whose
/// depth is below the run floor `D`): every scored outcome line (`eval-<protocol>-outcomes.jsonl`)
/// carries its depth and it is at least `floor`, and every evaluation and knockout records a
/// depth band ([`EvalResult::depths`], [`KnockoutResult::depths`]) that starts at `floor` or
/// deeper. The first line or file that breaks it is the error, naming the file, the line and
/// the field. `dir` is the run's directory (for the names).
pub fn check_beyond_floor(dir: &Path, run: &RunFiles, floor: usize) -> Result<()> {
    let band = |path: &Path, depths: Option<crate::analysis::protocol::Depths>| -> Result<()> {
        match depths {
            Some(d) if d.min >= floor => Ok(()),
            Some(d) => Err(bad(path, "depths", format!("families drawn at depth {d}, the run floor is {floor}"))),
            None => Err(bad(path, "depths", format!("no depth band recorded: not drawn beyond the run floor {floor}"))),
        }
    };
    for (p, e) in &run.evals {
        band(&dir.join(format!("eval-{}.json", p.name())), e.depths)?;
    }
    for (p, k) in &run.knockouts {
        band(&knockout_file(dir, *p).unwrap_or_else(|| dir.join("knockout.json")), k.depths)?;
    }
    for (p, outcomes) in &run.outcomes {
        let path = dir.join(format!("eval-{}-outcomes.jsonl", p.name()));
        for (i, o) in outcomes.iter().enumerate() {
            match o.depth {
                Some(d) if d >= floor => {}
                Some(d) => {
                    return Err(bad(
                        &path,
                        &format!("line {}: depth", i + 1),
                        format!("{d}, below the run floor {floor}"),
                    ))
                }
                None => {
                    return Err(bad(
                        &path,
                        &format!("line {}: depth", i + 1),
                        "missing; a scored line carries its depth",
                    ))
                }
            }
        }
    }
    Ok(())
}
