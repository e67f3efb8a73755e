//! The phase lab on a trained run directory: evaluation under both padding protocols,
//! knockout maps and gate preferences, each written into the run directory as JSON (the data),
//! CSV and SVG+PNG figures (what each measures: `theory/phase-lab.md`). A result already on disk with the same settings is reused, and one
//! with other settings is never overwritten (an error names the file).
//!
//! Files, in the run directory:
//!
//! | file | written by |
//! |---|---|
//! | `eval-<protocol>.json`, `.csv`, `-outcomes.jsonl`, `.svg`, `.png` | [`eval_run`] (older results: [`outcomes::upgrade_run`] adds the issue-31 columns) |
//! | `knockout-<protocol>.json`, `.csv`, `.svg`, `.png` | [`knockout_run`] |
//! | `gates.json`, `gates.csv`, `gates-{scatter,trajectory,profile}.{svg,png}` | [`gates_run`] |
//!
//! Each writer records what it wrote in the run's provenance manifest
//! ([`crate::run_dir::manifest`]); [`load`] is the one loader that reads a run's files back,
//! each checked against the others.

mod audit;
pub mod load;
pub mod outcomes;
mod rows;

pub use audit::{audit_analyze, AuditAnalysis};
use rows::{cycle_rows, gates_rows, group_rows, knockout_rows};

use crate::analysis::eval::{self, Intervention, KnockoutMap};
use crate::analysis::gates::{self, GateSnapshot};
use crate::analysis::phase::{self, PhaseProfile};
use crate::analysis::protocol::{self, Balance, Protocol};
use crate::analysis::stats::GroupAccuracy;
use crate::figures::lab as figures;
use crate::model::{list_snapshots, load_run, verify_run, EVAL_STREAM};
use crate::run_dir::{atomic_write, manifest, write_csv_atomic, write_json_atomic, DirLock};
use crate::stop::Stop;
use crate::task::{layout, Sample};
use crate::{Error, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Settings shared by the lab's steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabSettings {
    /// Evaluation prompts per residue group and protocol.
    pub eval_per_group: usize,
    /// Knockout prompts per residue group (in-sequence protocol).
    pub knockout_per_group: usize,
    /// Same-layout reference prompts per knocked-out prompt.
    pub knockout_reference: usize,
    /// Sequences whose windows the gate statistics average over.
    pub gate_samples: usize,
    /// Seed of prompts, reference sets and permutation tests.
    pub seed: u64,
}

impl Default for LabSettings {
    fn default() -> Self {
        LabSettings {
            // The pre-registered sample size (power of the phase test, theory/phase-lab.md).
            eval_per_group: crate::analysis::phase_test::DEFAULT_PER_GROUP,
            knockout_per_group: 24,
            knockout_reference: 8,
            gate_samples: 64,
            seed: 0,
        }
    }
}

/// `eval-<protocol>.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalResult {
    /// Kernel preset (`w8s4` for the arm `w8s4-kv1`: the arm is [`EvalResult::arm`]).
    pub preset: String,
    /// The model's arm (the run directory's name without `-seed<k>`, [`crate::run_dir::arm_of`]);
    /// `None` in results written before issue 31 that were not upgraded
    /// ([`outcomes::upgrade_run`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<String>,
    /// Protocol.
    pub protocol: Protocol,
    /// Prompts per group.
    pub per_group: usize,
    /// The evaluation seed (of the prompts and permutation tests; the same for every model),
    /// not the model's training seed. Written as `seed` before issue 31, still read so.
    #[serde(rename = "eval_seed", alias = "seed")]
    pub eval_seed: u64,
    /// The kernel's stride (`None` for `full`).
    pub stride: Option<usize>,
    /// Achieved target-position balance.
    pub balance: Balance,
    /// Every phase statistic.
    pub profile: PhaseProfile,
    /// The pre-registered statistics (`theory/phase-lab.md` §7.2-7.3): the depth-controlled
    /// phase test at the stride, the corrected period scan, gaps with their noise floors.
    /// `None` in results written before they were computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statistics: Option<phase::PhaseStatistics>,
    /// Accuracy of an elimination-only reader on these prompts ([`layout::elimination_baseline`]):
    /// chance (`1 / n_records`) when the first query is scored. `None` in older results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elimination_baseline: Option<f64>,
    /// Identity of the run evaluated (`<config hash>/<weights hash>`); a cached result is
    /// reused only for the same identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// `knockout-<protocol>.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnockoutResult {
    /// Kernel preset.
    pub preset: String,
    /// Protocol of the prompts.
    pub protocol: Protocol,
    /// Prompts per group.
    pub per_group: usize,
    /// Seed.
    pub seed: u64,
    /// The map.
    pub map: KnockoutMap,
    /// Identity of the run (see [`EvalResult::run_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// `gates.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatesResult {
    /// Kernel preset.
    pub preset: String,
    /// Window `W`.
    pub window: usize,
    /// Sequences averaged over.
    pub samples: usize,
    /// Seed of the sequences.
    pub seed: u64,
    /// One entry per saved checkpoint, in step order (the final model last).
    pub snapshots: Vec<GateSnapshot>,
    /// Identity of the run (see [`EvalResult::run_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// Reads a JSON result file.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text = crate::limits::read_text(path, crate::limits::MAX_JSON_BYTES)?;
    serde_json::from_str(&text)
        .map_err(|e| Error::File { path: path.to_path_buf(), reason: format!("unreadable result: {e}") })
}

/// An existing result with the same settings (reused), or `None` when there is none; a
/// result with other settings is an error (never overwritten).
fn existing<T: DeserializeOwned>(path: &Path, same: impl Fn(&T) -> bool) -> Result<Option<T>> {
    if !path.exists() {
        return Ok(None);
    }
    let have: T = read_json(path)?;
    if same(&have) {
        Ok(Some(have))
    } else {
        Err(Error::File {
            path: path.to_path_buf(),
            reason: "holds a result with other settings; move it away to recompute (results are never overwritten)"
                .into(),
        })
    }
}

/// What [`reuse_or_lock`] found: a cached result, or the run's shared lock to compute it under.
enum Cached<T> {
    /// An existing result with the same settings.
    Reuse(T),
    /// None yet: the lock, held while the result is computed and written.
    Compute(std::sync::Arc<DirLock>),
}

/// The one cache, lock, re-check sequence of every lab result: a cached result is read without
/// the lock; computing one takes the run's shared lock and looks again, in case another writer
/// just finished the same result. A result with other settings is an error ([`existing`]).
fn reuse_or_lock<T: DeserializeOwned>(run: &Path, json: &Path, same: impl Fn(&T) -> bool) -> Result<Cached<T>> {
    if let Some(r) = existing(json, &same)? {
        return Ok(Cached::Reuse(r));
    }
    let lock = DirLock::shared(run)?;
    Ok(match existing(json, &same)? {
        Some(r) => Cached::Reuse(r),
        None => Cached::Compute(lock),
    })
}

/// A run directory must exist and hold `config.json`.
fn check_run(run: &Path) -> Result<()> {
    if !run.join(crate::run_dir::CONFIG_FILE).is_file() {
        return Err(Error::File {
            path: run.to_path_buf(),
            reason: "not a run directory (no config.json; train one with `phasekv train`)".into(),
        });
    }
    Ok(())
}

/// `--samples` prompts per group: within `1..=MAX_SAMPLES_PER_GROUP`, and the prompts of
/// every group (`groups` of them, `seq_len` tokens each) within [`crate::limits::MAX_HELD_TOKENS`].
pub fn check_samples(field: &str, per_group: usize, groups: usize, seq_len: usize) -> Result<()> {
    use crate::limits::*;
    check_range(field, per_group, 1, MAX_SAMPLES_PER_GROUP)?;
    check_product(
        &format!("{field} x groups x sequence length"),
        product(&[per_group, groups, seq_len]),
        MAX_HELD_TOKENS,
    )?;
    Ok(())
}

/// Work of one forward pass of the decoder over one sequence of `config`, in units of one
/// multiply-add, estimated: every token meets every parameter (`RunConfig::parameter_estimate`)
/// and, per layer and query head, the `T` keys of its sequence (`T d_h` scores and as many
/// value terms). `None` on overflow.
pub fn forward_work(config: &crate::model::RunConfig) -> Option<u64> {
    let m = &config.model;
    let t = config.task.checked_seq_len()?;
    let attention = crate::limits::product(&[m.n_layer, m.n_head, 2 * m.d_head, t])?;
    config.parameter_estimate()?.checked_add(attention)?.checked_mul(t as u64)
}

/// `sequences` forward passes of `config`'s decoder ([`forward_work`]) within
/// [`crate::limits::MAX_LAB_WORK`], checked before any work; above it, an error naming
/// `field`, the estimate, the limit and how many `unit`s fit (`per_unit` sequences each).
pub fn check_lab_work(
    field: &str,
    config: &crate::model::RunConfig,
    sequences: Option<u64>,
    per_unit: u64,
    unit: &str,
) -> Result<()> {
    let max = crate::limits::MAX_LAB_WORK;
    let one = forward_work(config);
    let work = sequences.zip(one).and_then(|(n, w)| n.checked_mul(w));
    if work.is_some_and(|w| w <= max) {
        return Ok(());
    }
    let fit = one.and_then(|w| w.checked_mul(per_unit.max(1))).map_or(0, |u| max / u.max(1));
    Err(Error::invalid(
        field,
        format!(
            "{} units of work (forward passes x multiply-adds each) are above the limit of {max} (MAX_LAB_WORK); {}",
            work.map_or("more than 2^64".to_string(), |w| w.to_string()),
            match fit {
                0 => "not even one fits on this model".to_string(),
                k => format!("at most {k} {unit} fit"),
            }
        ),
    ))
}

/// Evaluates the finished run in `run` under `protocol` with `per_group` prompts per group.
/// `stop` is polled between batches of prompts: a requested stop ends it with
/// [`Error::Interrupted`] before anything is written.
pub fn eval_run(
    run: &Path,
    protocol: Protocol,
    per_group: usize,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
    stop: &Stop,
) -> Result<EvalResult> {
    check_run(run)?;
    let verified = verify_run(run)?;
    let task = &verified.config.task;
    check_samples("--samples", per_group, task.residue_modulus, task.seq_len())?;
    let groups = task.residue_modulus as u64;
    let sequences = (per_group as u64).checked_mul(groups);
    check_lab_work("--samples", &verified.config, sequences, groups, "prompts per group")?;
    let json = run.join(format!("eval-{}.json", protocol.name()));
    let id = verified.identity;
    let same = |r: &EvalResult| r.per_group == per_group && r.eval_seed == seed && r.run_id == id;
    let _lock = match reuse_or_lock(run, &json, same)? {
        Cached::Reuse(r) => return Ok(r),
        Cached::Compute(lock) => lock,
    };
    let (config, model) = load_run(run, None)?;
    let task = &config.task;
    let prompts = protocol::generate(task, protocol, per_group, seed)?;
    let balance = protocol::balance(&prompts, task.residue_modulus);
    let mut outcomes = eval::evaluate(&model.decoder, &prompts, progress, stop)?;
    let stride = config.model.phase_stride()?;
    let columns = outcomes::RunColumns::new(run, &config, protocol, per_group, stride);
    for o in &mut outcomes {
        columns.fill(o)?;
    }
    let profile = phase::profile_stopping(&outcomes, task.residue_modulus, stride, seed, stop).map_err(|e| e.during("eval"))?;
    let records = phase::records(&prompts, &outcomes)?;
    let statistics =
        Some(phase::statistics_stopping(&records, task.residue_modulus, stride, seed, stop).map_err(|e| e.during("eval"))?);
    stop.check("eval")?;
    let samples: Vec<Sample> = prompts.iter().map(|p| p.sample.clone()).collect();
    let result = EvalResult {
        preset: config.model.preset.clone(),
        arm: Some(columns.arm.clone()),
        protocol,
        per_group,
        eval_seed: seed,
        stride,
        balance,
        profile,
        statistics,
        elimination_baseline: Some(layout::elimination_baseline(task, &samples)),
        run_id: id,
    };
    let mut lines = String::new();
    for o in &outcomes {
        lines.push_str(&serde_json::to_string(o).map_err(|e| Error::invalid("outcome", e.to_string()))?);
        lines.push('\n');
    }
    let stem = run.join(format!("eval-{}", protocol.name()));
    write_csv_atomic(&stem.with_extension("csv"), &group_rows(&result.profile.groups))?;
    atomic_write(&run.join(format!("eval-{}-outcomes.jsonl", protocol.name())), lines.as_bytes())?;
    figures::phase_profile(
        &stem,
        &format!("{}, {} padding", result.preset, protocol.name()),
        &result.profile,
        result.stride,
    )?;
    write_json_atomic(&json, &result)?;
    let jsonl = format!("eval-{}-outcomes.jsonl", protocol.name());
    manifest::record(run, &[format!("eval-{}.json", protocol.name()), jsonl])?;
    Ok(result)
}

/// The stem of a knockout's files under `protocol`: `knockout-<protocol>` (runs analysed
/// before knockouts ran under both protocols have one in-sequence `knockout.json`, which
/// [`knockout_file`] finds).
pub fn knockout_stem(protocol: Protocol) -> String {
    format!("knockout-{}", protocol.name())
}

/// The knockout JSON of `run` under `protocol`, if there is one (in-sequence: the older
/// `knockout.json` too).
pub fn knockout_file(run: &Path, protocol: Protocol) -> Option<PathBuf> {
    let new = run.join(format!("{}.json", knockout_stem(protocol)));
    let old = run.join("knockout.json");
    if new.exists() {
        Some(new)
    } else if protocol == Protocol::InSequence && old.exists() {
        Some(old)
    } else {
        None
    }
}

/// Knockout map of the finished run in `run` under `protocol`; `stop` as in [`eval_run`].
#[allow(clippy::too_many_arguments)]
pub fn knockout_run(
    run: &Path,
    protocol: Protocol,
    per_group: usize,
    reference: usize,
    seed: u64,
    intervention: Intervention,
    progress: &mut dyn FnMut(usize, usize),
    stop: &Stop,
) -> Result<KnockoutResult> {
    check_run(run)?;
    let verified = verify_run(run)?;
    let task = &verified.config.task;
    check_samples("--samples", per_group, task.residue_modulus, task.seq_len())?;
    crate::limits::check_range("--reference", reference, 1, crate::limits::MAX_KNOCKOUT_REFERENCE)?;
    // Per prompt: its clean pass, its references, and one pass per knocked row (the larger of
    // the KV heads and the window slots of every layer).
    let m = &verified.config.model;
    let window = if m.is_full() { 0 } else { m.kernel()?.geometry.window() };
    let rows = m.n_layer.saturating_mul(m.n_kv_head.max(window)) as u64;
    let per_prompt = (reference as u64).saturating_add(1).saturating_add(rows);
    let groups = task.residue_modulus as u64;
    let prompts = (per_group as u64).checked_mul(groups);
    let sequences = prompts.and_then(|p| p.checked_mul(per_prompt));
    let per_unit = groups.saturating_mul(per_prompt);
    check_lab_work(
        "--samples x --reference",
        &verified.config,
        sequences,
        per_unit,
        "prompts per group at this --reference",
    )?;
    let stem = run.join(knockout_stem(protocol));
    let json = stem.with_extension("json");
    let id = verified.identity;
    let same = |r: &KnockoutResult| {
        r.per_group == per_group
            && r.seed == seed
            && r.map.reference == reference
            && r.run_id == id
            && r.map.intervention == intervention
    };
    let _lock = match reuse_or_lock(run, &json, same)? {
        Cached::Reuse(r) => return Ok(r),
        Cached::Compute(lock) => lock,
    };
    let (config, model) = load_run(run, None)?;
    let prompts = protocol::generate(&config.task, protocol, per_group, seed)?;
    let map = eval::knockout_by(&model.decoder, &config.task, &prompts, reference, seed, intervention, progress, stop)?;
    stop.check("knockout")?;
    let result = KnockoutResult { preset: config.model.preset.clone(), protocol, per_group, seed, map, run_id: id };
    write_csv_atomic(&stem.with_extension("csv"), &knockout_rows(&result))?;
    figures::knockout_map(
        &stem,
        &format!(
            "{}, {} padding: accuracy drop (pp) when {} is mean-replaced",
            result.preset,
            protocol.name(),
            match intervention {
                Intervention::KvHead => "one KV head",
                Intervention::WindowSlot => "one window slot's contribution",
            }
        ),
        &result.map,
    )?;
    write_json_atomic(&json, &result)?;
    manifest::record(run, &[format!("{}.json", knockout_stem(protocol))])?;
    Ok(result)
}

/// `cycle-<protocol>-layer<L>.json`: a gate-cycling experiment on one layer of a run
/// ([`crate::analysis::cycling`], `theory/gate-cycling.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CycleRunResult {
    /// Kernel preset.
    pub preset: String,
    /// Protocol of the prompts.
    pub protocol: Protocol,
    /// Prompts per group.
    pub per_group: usize,
    /// Seed of the prompts.
    pub seed: u64,
    /// The experiment.
    pub cycle: crate::analysis::cycling::CycleResult,
    /// Identity of the run (see [`EvalResult::run_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// The window of a finished run's kernel (1 for `full`), from its verified config.
pub fn run_window(run: &Path) -> Result<usize> {
    let m = verify_run(run)?.config.model;
    Ok(if m.is_full() { 1 } else { m.kernel()?.geometry.window() })
}

/// The stem of a cycling experiment's files: `cycle-<protocol>-layer<L>`.
pub fn cycle_stem(protocol: Protocol, layer: usize) -> String {
    format!("cycle-{}-layer{layer}", protocol.name())
}

/// Gate cycling on layer `layer` of the finished run in `run` (every KV head of the layer
/// cycled together, or only `head`), by each of `ks`, on `per_group` prompts per group of
/// `protocol`; `stop` as in [`eval_run`]. A result with the same settings is reused; one with
/// other settings is replaced only by this computation, under the run's lock.
#[allow(clippy::too_many_arguments)]
pub fn cycle_run(
    run: &Path,
    protocol: Protocol,
    per_group: usize,
    seed: u64,
    layer: usize,
    head: Option<usize>,
    ks: &[usize],
    progress: &mut dyn FnMut(usize, usize),
    stop: &Stop,
) -> Result<CycleRunResult> {
    check_run(run)?;
    let verified = verify_run(run)?;
    let task = &verified.config.task;
    check_samples("--samples", per_group, task.residue_modulus, task.seq_len())?;
    let m = &verified.config.model;
    crate::limits::check_range("--layer", layer, 0, m.n_layer.saturating_sub(1))?;
    if let Some(h) = head {
        crate::limits::check_range("--head", h, 0, m.n_kv_head.saturating_sub(1))?;
    }
    if ks.is_empty() || ks.len() > 4096 {
        return Err(Error::invalid("--k", format!("give 1 to 4096 cycle amounts, got {}", ks.len())));
    }
    let groups = task.residue_modulus as u64;
    let sequences = (per_group as u64).checked_mul(groups).and_then(|p| p.checked_mul(ks.len() as u64 + 1));
    check_lab_work("--samples x --k", &verified.config, sequences, groups, "prompts per group at this --k")?;
    let heads: Vec<usize> = match head {
        Some(h) => vec![h],
        None => (0..m.n_kv_head).collect(),
    };
    let stem = run.join(cycle_stem(protocol, layer));
    let json = stem.with_extension("json");
    let id = verified.identity;
    let mut want: Vec<usize> = vec![0];
    let w = run_window(run)?;
    want.extend(ks.iter().copied().filter(|&k| k % w != 0));
    let same = |r: &CycleRunResult| {
        r.per_group == per_group
            && r.seed == seed
            && r.run_id == id
            && r.cycle.heads == heads
            && r.cycle.rows.iter().map(|row| row.k).collect::<Vec<_>>() == want
    };
    let _lock = match reuse_or_lock(run, &json, same)? {
        Cached::Reuse(r) => return Ok(r),
        Cached::Compute(lock) => lock,
    };
    let (config, model) = load_run(run, None)?;
    let prompts = protocol::generate(&config.task, protocol, per_group, seed)?;
    let cycle = crate::analysis::cycling::cycle_profiles(
        &model,
        &prompts,
        config.task.residue_modulus,
        layer,
        &heads,
        ks,
        progress,
        stop,
    )?;
    stop.check("cycle")?;
    let result = CycleRunResult { preset: config.model.preset.clone(), protocol, per_group, seed, cycle, run_id: id };
    write_csv_atomic(&stem.with_extension("csv"), &cycle_rows(&result.cycle))?;
    write_json_atomic(&json, &result)?;
    manifest::record(run, &[format!("{}.json", cycle_stem(protocol, layer))])?;
    Ok(result)
}

/// Gate preferences of the finished run in `run` at every saved snapshot and the final model
/// (`None` for `full`, which has no gates); `stop` as in [`eval_run`], polled between batches
/// of [`gates::GATE_BATCH`] sequences. The work (samples x snapshots forward passes) is
/// bounded by [`check_lab_work`] before any model is loaded.
pub fn gates_run(
    run: &Path,
    samples: usize,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
    stop: &Stop,
) -> Result<Option<GatesResult>> {
    check_run(run)?;
    let verified = verify_run(run)?;
    let config = verified.config;
    crate::limits::check_range("--samples", samples, 1, crate::limits::MAX_SAMPLES_PER_GROUP)?;
    crate::limits::check_product(
        "--samples x sequence length",
        crate::limits::product(&[samples, config.task.seq_len()]),
        crate::limits::MAX_HELD_TOKENS,
    )?;
    if config.model.is_full() {
        return Ok(None);
    }
    let json = run.join("gates.json");
    let id = verified.identity;
    let same = |r: &GatesResult| r.samples == samples && r.seed == seed && r.run_id == id;
    let _lock = match reuse_or_lock(run, &json, same)? {
        Cached::Reuse(r) => return Ok(Some(r)),
        Cached::Compute(lock) => lock,
    };
    let task = &config.task;
    let seqs = task.batch(seed, EVAL_STREAM - 1, samples);
    let mut weights: Vec<(usize, Option<PathBuf>)> =
        list_snapshots(run)?.into_iter().map(|(s, p)| (s, Some(p))).collect();
    if weights.last().map(|w| w.0) != Some(config.train.steps) {
        weights.push((config.train.steps, None));
    }
    // One forward pass of every sample per snapshot, bounded before any model is loaded.
    let snaps = weights.len() as u64;
    check_lab_work("--samples", &config, (samples as u64).checked_mul(snaps), snaps, "samples")?;
    // Every snapshot is loaded (and its hash checked) before any is analysed: a changed one is
    // refused before any work.
    let models = weights.iter().map(|(_, path)| Ok(load_run(run, path.as_deref())?.1)).collect::<Result<Vec<_>>>()?;
    let mut snapshots = Vec::with_capacity(weights.len());
    for (i, ((step, _), model)) in weights.iter().zip(&models).enumerate() {
        stop.check("gates")?;
        snapshots.push(GateSnapshot { step: *step, gates: gates::gate_stats(&model.decoder, &seqs, stop)? });
        progress(i + 1, weights.len());
    }
    stop.check("gates")?;
    let window = config.model.kernel()?.geometry.window();
    let result = GatesResult { preset: config.model.preset.clone(), window, samples, seed, snapshots, run_id: id };
    figures::gate_figures(&run.join("gates"), &result.preset, &result.snapshots, window)?;
    write_csv_atomic(&run.join("gates.csv"), &gates_rows(&result))?;
    write_json_atomic(&json, &result)?;
    manifest::record(run, &["gates.json".to_string()])?;
    Ok(Some(result))
}
