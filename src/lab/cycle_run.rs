//! [`cycle_run`]: the cycle test of one layer under one protocol, and where it is stored.

use super::cache::{check_run, reuse_or_lock, Cached};
use super::results::CycleRunResult;
use super::rows::cycle_rows;
use super::scope::Scope;
use super::work::{check_lab_work, check_samples};
use crate::analysis::protocol::{self, Protocol};
use crate::model::{load_run, verify_run};
use crate::run_dir::{manifest, write_csv_atomic, write_json_atomic};
use crate::stop::Stop;
use crate::{Error, Result};
use std::path::Path;

/// The window of layer `layer`'s kernel in a finished run (1 for `full`), from its verified
/// config: a layout's own layer ([`crate::kernel::KernelSpec::layer`]), not its representative,
/// which is what [`crate::analysis::cycling::cycle_profiles`] cycles.
pub fn run_window(run: &Path, layer: usize) -> Result<usize> {
    layer_window(&verify_run(run)?.config.model, layer)
}

/// The window of layer `layer`'s kernel in `model` (1 for `full`): what [`run_window`] reads
/// from a run's config.
fn layer_window(model: &crate::model::ModelConfig, layer: usize) -> Result<usize> {
    Ok(if model.is_full() { 1 } else { model.kernel()?.layer(layer).geometry.window() })
}

/// The stem of a cycling experiment's files: `cycle-<protocol>-layer<L>`.
pub fn cycle_stem(protocol: Protocol, layer: usize) -> String {
    format!("cycle-{}-layer{layer}", protocol.name())
}

/// Gate cycling on layer `layer` of the finished run in `run` (every KV head of the layer
/// cycled together, or only `head`), by each of `ks`, on `per_group` prompts per group of
/// `protocol` drawn in `scope` (every depth, or the scored families beyond the run floor);
/// `stop` as in [`eval_run`](super::eval_run). A result with the same settings is reused; one with
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
    scope: Scope,
    progress: &mut dyn FnMut(usize, usize),
    stop: &Stop,
) -> Result<CycleRunResult> {
    let scope = scope.scored_only("gate cycling")?;
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
    let w = layer_window(m, layer)?;
    want.extend(ks.iter().copied().filter(|&k| k % w != 0));
    let depths = scope.recorded();
    let same = |r: &CycleRunResult| {
        r.depths == depths
            && r.per_group == per_group
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
    let prompts = protocol::generate_in(&config.task, protocol, per_group, seed, scope.depths())?;
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
    let result =
        CycleRunResult { preset: config.model.preset.clone(), protocol, per_group, seed, cycle, run_id: id, depths };
    write_csv_atomic(&stem.with_extension("csv"), &cycle_rows(&result.cycle))?;
    write_json_atomic(&json, &result)?;
    manifest::record(run, &[format!("{}.json", cycle_stem(protocol, layer))])?;
    Ok(result)
}
