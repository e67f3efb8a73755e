//! [`eval_run`]: a finished run evaluated under one padding protocol, on the families of a
//! [`Scope`] (the scored ones as `eval-<protocol>.*`, the near-query ones as `near-<protocol>.*`).

use super::cache::{check_run, reuse_or_lock, Cached};
use super::outcomes::RunColumns;
use super::results::EvalResult;
use super::rows::group_rows;
use super::scope::Scope;
use super::work::{check_lab_work, check_samples};
use crate::analysis::eval::{self};
use crate::analysis::phase::{self};
use crate::analysis::protocol::{self, Protocol};
use crate::figures::lab as figures;
use crate::model::{load_run, verify_run};
use crate::run_dir::{atomic_write, manifest, write_csv_atomic, write_json_atomic};
use crate::stop::Stop;
use crate::task::{layout, Sample};
use crate::{Error, Result};
use std::path::Path;

/// Evaluates the finished run in `run` under `protocol` with `per_group` prompts per group,
/// drawn in `scope` (its depth band recorded in the result, and compared when a result on disk
/// is reused). `stop` is polled between batches of prompts: a requested stop ends it with
/// [`Error::Interrupted`] before anything is written.
#[allow(clippy::too_many_arguments)]
pub fn eval_run(
    run: &Path,
    protocol: Protocol,
    per_group: usize,
    seed: u64,
    scope: Scope,
    progress: &mut dyn FnMut(usize, usize),
    stop: &Stop,
) -> Result<EvalResult> {
    if let Some(why) = scope.empty_reason() {
        return Err(Error::invalid("scope", format!("no near-query families: {why}")));
    }
    check_run(run)?;
    let verified = verify_run(run)?;
    let task = &verified.config.task;
    check_samples("--samples", per_group, task.residue_modulus, task.seq_len())?;
    let groups = task.residue_modulus as u64;
    let sequences = (per_group as u64).checked_mul(groups);
    check_lab_work("--samples", &verified.config, sequences, groups, "prompts per group")?;
    let stem_name = scope.eval_stem(protocol);
    let json = run.join(format!("{stem_name}.json"));
    let id = verified.identity;
    let depths = scope.recorded();
    let same = |r: &EvalResult| r.per_group == per_group && r.eval_seed == seed && r.run_id == id && r.depths == depths;
    let _lock = match reuse_or_lock(run, &json, same)? {
        Cached::Reuse(r) => return Ok(r),
        Cached::Compute(lock) => lock,
    };
    let (config, model) = load_run(run, None)?;
    let task = &config.task;
    let prompts = protocol::generate_in(task, protocol, per_group, seed, scope.depths())?;
    let balance = protocol::balance(&prompts, task.residue_modulus);
    let mut outcomes = eval::evaluate(&model.decoder, &prompts, progress, stop)?;
    let stride = config.model.phase_stride()?;
    let columns = RunColumns::new(run, &config, protocol, per_group, stride);
    for o in &mut outcomes {
        columns.fill(o)?;
    }
    let profile =
        phase::profile_stopping(&outcomes, task.residue_modulus, stride, seed, stop).map_err(|e| e.during("eval"))?;
    let records = phase::records(&prompts, &outcomes)?;
    // The near-query measurement is reported, never a verdict (`theory/phase-lab.md` §9.2): it
    // carries accuracy by (depth, phase) and no phase test, whose depth model its few shallow
    // depths often cannot separate from phase.
    let statistics = match scope {
        Scope::Near(_) => None,
        _ => Some(
            phase::statistics_stopping(&records, task.residue_modulus, stride, seed, stop)
                .map_err(|e| e.during("eval"))?,
        ),
    };
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
        depths,
    };
    let mut lines = String::new();
    for o in &outcomes {
        lines.push_str(&serde_json::to_string(o).map_err(|e| Error::invalid("outcome", e.to_string()))?);
        lines.push('\n');
    }
    let stem = run.join(&stem_name);
    let jsonl = format!("{stem_name}-outcomes.jsonl");
    write_csv_atomic(&stem.with_extension("csv"), &group_rows(&result.profile.groups))?;
    atomic_write(&run.join(&jsonl), lines.as_bytes())?;
    let title = match scope {
        Scope::Near(_) => format!(
            "{}, {} padding, near-query accuracy (depth {depths_text})",
            result.preset,
            protocol.name(),
            depths_text = scope.depths()
        ),
        _ => format!("{}, {} padding", result.preset, protocol.name()),
    };
    figures::phase_profile(&stem, &title, &result.profile, result.stride)?;
    write_json_atomic(&json, &result)?;
    manifest::record(run, &[format!("{stem_name}.json"), jsonl])?;
    Ok(result)
}
