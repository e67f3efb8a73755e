//! The columns of `eval-<protocol>-outcomes.jsonl` that make a line usable without its
//! directory (issue 31): `arm`, `preset`, `seed` (the training seed), `protocol`, `family`
//! (`id = group * n + family`) and `phase` (`position mod S`). [`eval_run`](super::eval_run)
//! writes them on every line; [`upgrade_run`] adds them to results written before, from the
//! run's own metadata only (`config.json`, the directory's name, `eval-<protocol>.json`), so
//! committed results whose weights are not kept gain them without being re-evaluated, and
//! renames the evaluation JSON's `seed` (the evaluation seed) to `eval_seed` with the `arm`
//! beside the preset.

use super::cache::read_json;
use super::results::EvalResult;
use crate::analysis::phase::Outcome;
use crate::analysis::protocol::Protocol;
use crate::model::RunConfig;
use crate::run_dir::{arm_of, atomic_write};
use crate::task::QueryPlacement;
use crate::{Error, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What every outcome line of one evaluation shares, and how its per-prompt columns follow.
#[derive(Clone, Debug, PartialEq)]
pub struct RunColumns {
    /// The arm ([`arm_of`] the run directory's name).
    pub arm: String,
    /// The kernel preset (`config.json`).
    pub preset: String,
    /// The training seed (`config.json`'s `train.seed`).
    pub seed: u64,
    /// The protocol.
    pub protocol: Protocol,
    /// Prompts per group `n`.
    pub per_group: usize,
    /// The kernel's stride `S` (`None` for full attention).
    pub stride: Option<usize>,
    /// Whether the prompts are phase families (`query_placement = "after_records"`), so that
    /// `family = id - group * n`.
    pub families: bool,
}

impl RunColumns {
    /// The columns of the run in `run` with `config`, evaluated under `protocol` with
    /// `per_group` prompts per group at stride `stride`.
    pub fn new(run: &Path, config: &RunConfig, protocol: Protocol, per_group: usize, stride: Option<usize>) -> Self {
        let name = run.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        RunColumns {
            arm: arm_of(&name).to_string(),
            preset: config.model.preset.clone(),
            seed: config.train.seed,
            protocol,
            per_group,
            stride,
            families: config.task.query_placement == QueryPlacement::AfterRecords,
        }
    }

    /// Fills the columns of `o`; a column already there must agree (an error names it).
    pub fn fill(&self, o: &mut Outcome) -> Result<()> {
        let family = if self.families {
            let f = o.id.checked_sub(o.group * self.per_group).filter(|&f| f < self.per_group);
            Some(f.ok_or_else(|| {
                Error::invalid(
                    "outcome id",
                    format!(
                        "id {} is not group {} * n {} + family in 0..{}",
                        o.id, o.group, self.per_group, self.per_group
                    ),
                )
            })?)
        } else {
            None
        };
        let phase = match (self.stride, o.position) {
            (Some(s), Some(p)) => Some(p % s),
            _ => None,
        };
        set(&mut o.arm, Some(self.arm.clone()), "arm", o.id)?;
        set(&mut o.preset, Some(self.preset.clone()), "preset", o.id)?;
        set(&mut o.seed, Some(self.seed), "seed", o.id)?;
        set(&mut o.protocol, Some(self.protocol.name().to_string()), "protocol", o.id)?;
        set(&mut o.family, family, "family", o.id)?;
        set(&mut o.phase, phase, "phase", o.id)
    }
}

fn set<T: PartialEq + std::fmt::Debug>(slot: &mut Option<T>, value: Option<T>, field: &str, id: usize) -> Result<()> {
    match (slot.as_ref(), value) {
        (Some(have), Some(v)) if *have != v => Err(Error::invalid(
            field,
            format!("outcome {id} says {have:?}, the run's metadata {v:?}; refusing to overwrite"),
        )),
        (_, Some(v)) => {
            *slot = Some(v);
            Ok(())
        }
        (_, None) => Ok(()),
    }
}

/// What [`upgrade_run`] changed in one run directory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Upgraded {
    /// Outcome files rewritten (relative names).
    pub files: Vec<String>,
    /// Outcome lines given columns.
    pub lines: usize,
}

/// What [`upgrade_runs`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpgradeReport {
    /// Each run directory with what changed in it, in the order given (all checked before
    /// any was written).
    pub runs: Vec<(PathBuf, Upgraded)>,
    /// Stale temporary files (`.<pid>-<n>.tmp.<name>`, left by a writer killed mid-write)
    /// removed under the run's lock.
    pub stale_removed: usize,
    /// Whether `stop` said to stop: then nothing, or only whole files, were written (each
    /// file is replaced atomically and the upgrade is idempotent: run it again).
    pub stopped: bool,
}

/// The first key of `have` (recursively) that `known` lacks, as a path (`profile.extra`):
/// a field the upgrade would silently drop. `null` values and the keys in `aliases` (read
/// under another name) are not counted.
fn unknown_field(have: &Value, known: &Value, aliases: &[&str], at: &str) -> Option<String> {
    match (have, known) {
        (Value::Object(h), Value::Object(k)) => h.iter().find_map(|(key, v)| {
            let path = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
            match k.get(key) {
                None if v.is_null() || (at.is_empty() && aliases.contains(&key.as_str())) => None,
                None => Some(path),
                Some(kv) => unknown_field(v, kv, &[], &path),
            }
        }),
        (Value::Array(h), Value::Array(k)) => {
            h.iter().zip(k).enumerate().find_map(|(i, (a, b))| unknown_field(a, b, &[], &format!("{at}[{i}]")))
        }
        _ => None,
    }
}

/// Refuses a field of `text` that `T` does not know (it would be deleted by a rewrite), in one
/// error naming `path`, the line and the field.
fn refuse_unknown<T: serde::Serialize + serde::de::DeserializeOwned>(
    text: &str,
    value: &T,
    aliases: &[&str],
    path: &Path,
    line: Option<usize>,
) -> Result<()> {
    let have: Value =
        serde_json::from_str(text).map_err(|e| Error::File { path: path.to_path_buf(), reason: e.to_string() })?;
    let known = serde_json::to_value(value).map_err(|e| Error::invalid("upgrade", e.to_string()))?;
    if let Some(field) = unknown_field(&have, &known, aliases, "") {
        let at = line.map(|n| format!("line {n}: ")).unwrap_or_default();
        return Err(Error::File {
            path: path.to_path_buf(),
            reason: format!(
                "{at}{field}: a field this version does not know; the upgrade would delete it, so nothing is rewritten (move the field or the file away)"
            ),
        });
    }
    Ok(())
}

/// Whether something is at `path` (a FIFO, a device, a dangling symlink are: reading refuses
/// them, naming the path).
fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Removes the temporary files a killed writer left in `run` (hidden `.<pid>-<n>.tmp.<name>`
/// files): called holding the run's lock, so no live writer owns one.
fn remove_stale_temps(run: &Path) -> Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(run).map_err(|e| Error::io(run, e))? {
        let e = e.map_err(|e| Error::io(run, e))?;
        let name = e.file_name().to_string_lossy().to_string();
        let is_temp = name.starts_with('.') && name.contains(".tmp.");
        if is_temp && e.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::remove_file(e.path()).map_err(|err| Error::io(e.path(), err))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Outcome lines between two polls of the stop while an outcome file is planned.
const STOP_LINES: usize = 4096;

/// The new contents of the files of `run` that the upgrade changes (nothing written).
fn plan_run(run: &Path, stop: &dyn Fn() -> bool) -> Result<(Vec<(PathBuf, Vec<u8>)>, Upgraded)> {
    let config: RunConfig = read_json(&run.join(crate::run_dir::CONFIG_FILE))?;
    let mut done = Upgraded::default();
    let mut writes = Vec::new();
    for p in Protocol::ALL {
        if stop() {
            break;
        }
        let json = run.join(format!("eval-{}.json", p.name()));
        let file = run.join(format!("eval-{}-outcomes.jsonl", p.name()));
        if !present(&json) {
            if present(&file) {
                return Err(Error::File {
                    path: file,
                    reason: format!("eval: {} is missing: outcomes without their evaluation", json.display()),
                });
            }
            continue;
        }
        let before = crate::limits::read_text(&json, crate::limits::MAX_JSON_BYTES)?;
        let mut eval: EvalResult = serde_json::from_str(&before)
            .map_err(|e| Error::File { path: json.clone(), reason: format!("unreadable result: {e}") })?;
        refuse_unknown(&before, &eval, &["seed"], &json, None)?;
        let columns = RunColumns::new(run, &config, p, eval.per_group, eval.stride);
        if eval.arm.as_deref().is_some_and(|a| a != columns.arm) {
            return Err(Error::invalid(
                "arm",
                format!("{} says {:?}, the directory {:?}", json.display(), eval.arm, columns.arm),
            ));
        }
        eval.arm = Some(columns.arm.clone());
        let after = serde_json::to_string_pretty(&eval).map_err(|e| Error::invalid("eval", e.to_string()))? + "\n";
        if after != before {
            writes.push((json.clone(), after.into_bytes()));
            done.files.push(format!("eval-{}.json", p.name()));
        }
        if !present(&file) {
            continue;
        }
        let text = crate::limits::read_text(&file, crate::limits::MAX_JSONL_BYTES)?;
        let mut out = String::with_capacity(text.len() * 2);
        let mut changed = 0;
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            // A large file stops within it too (nothing of this run is written then).
            if i % STOP_LINES == 0 && stop() {
                return Ok((Vec::new(), Upgraded::default()));
            }
            let mut o: Outcome = serde_json::from_str(line).map_err(|e| Error::File {
                path: file.clone(),
                reason: format!("line {}: not an outcome: {e}", i + 1),
            })?;
            refuse_unknown(line, &o, &[], &file, Some(i + 1))?;
            columns
                .fill(&mut o)
                .map_err(|e| Error::File { path: file.clone(), reason: format!("line {}: {e}", i + 1) })?;
            let new = serde_json::to_string(&o).map_err(|e| Error::invalid("outcome", e.to_string()))?;
            changed += usize::from(new != line);
            out.push_str(&new);
            out.push('\n');
        }
        if changed > 0 {
            writes.push((file, out.into_bytes()));
            done.files.push(format!("eval-{}-outcomes.jsonl", p.name()));
            done.lines += changed;
        }
    }
    Ok((writes, done))
}

/// Adds the issue-31 columns to every `eval-<protocol>-outcomes.jsonl` of the run in `run`
/// and states `arm` and `eval_seed` in its `eval-<protocol>.json` ([`upgrade_runs`] of one run,
/// never stopped).
pub fn upgrade_run(run: &Path) -> Result<Upgraded> {
    let report = upgrade_runs(&[run.to_path_buf()], &|| false)?;
    Ok(report.runs.into_iter().next().map(|r| r.1).unwrap_or_default())
}

/// Adds the issue-31 columns to every `eval-<protocol>-outcomes.jsonl` of the runs in `runs`
/// and states `arm` and `eval_seed` in their `eval-<protocol>.json`, from `config.json`, the
/// directory's name and the evaluation JSON (its `per_group` and `stride`). Deterministic and
/// idempotent: a second call changes nothing. Every run's lock is taken
/// ([`crate::run_dir::DirLock`]: a run being evaluated is refused as in use) and every file of
/// every run is checked before any is rewritten: a column that disagrees with the metadata, a
/// field this version does not know (which a rewrite would delete), a FIFO or a device where a
/// result should be, a run whose manifest does not verify, each is one error and nothing is
/// written. Stale temporary files of killed writers are removed under the lock. `stop` is
/// asked between files (a signal): it stops before the next one. A run with a manifest
/// ([`crate::run_dir::manifest`]) gets the rewritten files recorded in it.
pub fn upgrade_runs(runs: &[PathBuf], stop: &dyn Fn() -> bool) -> Result<UpgradeReport> {
    let mut report = UpgradeReport::default();
    let mut locks = Vec::new();
    let mut planned = Vec::new();
    for run in runs {
        if stop() {
            report.stopped = true;
            return Ok(report);
        }
        if !run.join(crate::run_dir::CONFIG_FILE).is_file() {
            return Err(Error::File { path: run.to_path_buf(), reason: "not a run directory (no config.json)".into() });
        }
        locks.push(crate::run_dir::DirLock::shared(run)?);
        report.stale_removed += remove_stale_temps(run)?;
        let has_manifest = crate::run_dir::manifest::read(run)?.is_some();
        if has_manifest {
            crate::run_dir::manifest::verify(run)?;
        }
        let (writes, done) = plan_run(run, stop)?;
        planned.push((run.clone(), writes, done, has_manifest));
    }
    for (run, writes, done, has_manifest) in planned {
        for (path, bytes) in writes {
            if stop() {
                report.stopped = true;
                return Ok(report);
            }
            atomic_write(&path, &bytes)?;
            // Each file's new hash is recorded as soon as it is in place (a stop between
            // files leaves a manifest that verifies).
            if has_manifest {
                let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
                crate::run_dir::manifest::record(&run, &[name])?;
            }
        }
        report.runs.push((run, done));
    }
    report.stopped = stop();
    drop(locks);
    Ok(report)
}
