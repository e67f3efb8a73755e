//! The columns of `eval-<protocol>-outcomes.jsonl` that make a line usable without its
//! directory (issue 31): `arm`, `preset`, `seed` (the training seed), `protocol`, `family`
//! (`id = group * n + family`) and `phase` (`position mod S`). [`eval_run`](super::eval_run)
//! writes them on every line; [`upgrade_run`] adds them to results written before, from the
//! run's own metadata only (`config.json`, the directory's name, `eval-<protocol>.json`), so
//! committed results whose weights are not kept gain them without being re-evaluated, and
//! renames the evaluation JSON's `seed` (the evaluation seed) to `eval_seed` with the `arm`
//! beside the preset.

use super::{read_json, EvalResult};
use crate::analysis::phase::Outcome;
use crate::analysis::protocol::Protocol;
use crate::model::RunConfig;
use crate::run_dir::{arm_of, atomic_write, write_json_atomic};
use crate::task::QueryPlacement;
use crate::{Error, Result};
use std::path::Path;

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

/// Adds the issue-31 columns to every `eval-<protocol>-outcomes.jsonl` of the run in `run`
/// and states `arm` and `eval_seed` in its `eval-<protocol>.json`, from `config.json`, the
/// directory's name and the evaluation JSON (its `per_group` and `stride`). Deterministic and
/// idempotent: a second call changes nothing; a column that disagrees with the metadata is an
/// error and nothing of that file is written.
pub fn upgrade_run(run: &Path) -> Result<Upgraded> {
    let config: RunConfig = read_json(&run.join(crate::run_dir::CONFIG_FILE))?;
    let mut done = Upgraded::default();
    for p in Protocol::ALL {
        let json = run.join(format!("eval-{}.json", p.name()));
        if !json.is_file() {
            continue;
        }
        let mut eval: EvalResult = read_json(&json)?;
        let columns = RunColumns::new(run, &config, p, eval.per_group, eval.stride);
        if eval.arm.as_deref().is_some_and(|a| a != columns.arm) {
            return Err(Error::invalid(
                "arm",
                format!("{} says {:?}, the directory {:?}", json.display(), eval.arm, columns.arm),
            ));
        }
        let before = std::fs::read_to_string(&json).map_err(|e| Error::io(&json, e))?;
        eval.arm = Some(columns.arm.clone());
        let after = serde_json::to_string_pretty(&eval).map_err(|e| Error::invalid("eval", e.to_string()))? + "\n";
        if after != before {
            write_json_atomic(&json, &eval)?;
            done.files.push(format!("eval-{}.json", p.name()));
        }
        let file = run.join(format!("eval-{}-outcomes.jsonl", p.name()));
        if !file.is_file() {
            continue;
        }
        let text = crate::limits::read_text(&file, crate::limits::MAX_JSONL_BYTES)?;
        let mut out = String::with_capacity(text.len() * 2);
        let mut changed = 0;
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let mut o: Outcome = serde_json::from_str(line).map_err(|e| Error::File {
                path: file.clone(),
                reason: format!("line {}: not an outcome: {e}", i + 1),
            })?;
            columns
                .fill(&mut o)
                .map_err(|e| Error::File { path: file.clone(), reason: format!("line {}: {e}", i + 1) })?;
            let new = serde_json::to_string(&o).map_err(|e| Error::invalid("outcome", e.to_string()))?;
            changed += usize::from(new != line);
            out.push_str(&new);
            out.push('\n');
        }
        if changed > 0 {
            atomic_write(&file, out.as_bytes())?;
            done.files.push(format!("eval-{}-outcomes.jsonl", p.name()));
            done.lines += changed;
        }
    }
    Ok(done)
}
