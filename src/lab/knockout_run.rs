//! [`knockout_run`]: the knockout map of a run under one protocol, and where it is stored.

use super::cache::{check_run, reuse_or_lock, Cached};
use super::results::KnockoutResult;
use super::rows::knockout_rows;
use super::scope::Scope;
use super::work::{check_lab_work, check_samples};
use crate::analysis::eval::{self, Intervention};
use crate::analysis::protocol::{self, Protocol};
use crate::figures::lab as figures;
use crate::model::{load_run, verify_run};
use crate::run_dir::{manifest, write_csv_atomic, write_json_atomic};
use crate::stop::Stop;
use crate::Result;
use std::path::{Path, PathBuf};

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

/// Knockout map of the finished run in `run` under `protocol`, on the families of `scope`
/// (every depth, or the scored ones beyond the run floor; never the near-query ones); `stop` as
/// in [`eval_run`](super::eval_run).
#[allow(clippy::too_many_arguments)]
pub fn knockout_run(
    run: &Path,
    protocol: Protocol,
    per_group: usize,
    reference: usize,
    seed: u64,
    intervention: Intervention,
    scope: Scope,
    progress: &mut dyn FnMut(usize, usize),
    stop: &Stop,
) -> Result<KnockoutResult> {
    let scope = scope.scored_only("a knockout")?;
    check_run(run)?;
    let verified = verify_run(run)?;
    let task = &verified.config.task;
    check_samples("--samples", per_group, task.residue_modulus, task.seq_len())?;
    crate::limits::check_range("--reference", reference, 1, crate::limits::MAX_KNOCKOUT_REFERENCE)?;
    // Per prompt: its clean pass, its references, and one pass per knocked row (the larger of
    // the KV heads and the window slots of every layer).
    let m = &verified.config.model;
    let window = if m.is_full() { 0 } else { m.kernel()?.max_window() };
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
    let depths = scope.recorded();
    let same = |r: &KnockoutResult| {
        r.depths == depths
            && r.per_group == per_group
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
    let prompts = protocol::generate_in(&config.task, protocol, per_group, seed, scope.depths())?;
    let map = eval::knockout_by(&model.decoder, &config.task, &prompts, reference, seed, intervention, progress, stop)?;
    stop.check("knockout")?;
    let result =
        KnockoutResult { preset: config.model.preset.clone(), protocol, per_group, seed, map, run_id: id, depths };
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
