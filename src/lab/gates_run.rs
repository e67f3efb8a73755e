//! [`gates_run`]: the gate preferences of a run across its snapshots.

use super::cache::{check_run, reuse_or_lock, Cached};
use super::results::GatesResult;
use super::rows::gates_rows;
use super::work::check_lab_work;
use crate::analysis::gates::{self, GateSnapshot};
use crate::figures::lab as figures;
use crate::model::{list_snapshots, load_run, verify_run, EVAL_STREAM};
use crate::run_dir::{manifest, write_csv_atomic, write_json_atomic};
use crate::stop::Stop;
use crate::Result;
use std::path::{Path, PathBuf};

/// Gate preferences of the finished run in `run` at every saved snapshot and the final model
/// (`None` for `full`, which has no gates); `stop` as in [`eval_run`](super::eval_run), polled between batches
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
    // Each layer's gates are profiled on its own window; the figures' axes span the widest
    // (a layer layout's, `theory/kernels.md`, "Layer layouts").
    let window = config.model.kernel()?.max_window();
    let result = GatesResult { preset: config.model.preset.clone(), window, samples, seed, snapshots, run_id: id };
    figures::gate_figures(&run.join("gates"), &result.preset, &result.snapshots, window)?;
    write_csv_atomic(&run.join("gates.csv"), &gates_rows(&result))?;
    write_json_atomic(&json, &result)?;
    manifest::record(run, &["gates.json".to_string()])?;
    Ok(Some(result))
}
