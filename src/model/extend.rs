//! Extensions of a finished run (`theory/phase-lab.md` §8.2, `theory/training.md` §6b): training
//! continues from the run's final checkpoint (parameters and AdamW moments) for steps
//! `start..end` at the learning rate [`Extension::lr_at`], with the same seed and the data
//! stream continued (the batch of step `k` is [`crate::model::training_batch`] of `k`, as in
//! the recipe), evaluated and checkpointed as the recipe's loop does (the loop is the same,
//! [`super::train`]'s), so an extension stopped at step `k` and resumed ends with the weights of
//! one that was not.
//!
//! The run directory records it. Before the first step the run's `metrics.json` and
//! `model.safetensors` are copied, byte for byte, to `metrics.before-extension-<i>.json` and
//! `model.before-extension-<i>.safetensors` (the copy of the metrics is written last and marks
//! a started extension); at the end `model.safetensors`, `curve.csv` and `metrics.json` are the
//! extended run's, and `metrics.json` lists the extension ([`ExtensionRecord`]: schedule,
//! accuracy before and after, the names of the kept files). `config.json` keeps the recipe.
//! Nothing is overwritten that is not kept: an extension the run has had already is refused.

use super::checkpoint::Checkpointer;
use super::config::{Extension, RunConfig};
use super::record::{before_extension, ExtensionRecord, Metrics};
use super::train::{validate, write_metrics, Observer, Outcome, Session};
use super::weights::{read_json_file, verify_run, Model, FINAL_WEIGHTS};
use crate::run_dir::{atomic_write, RunDir, CONFIG_FILE, METRICS_FILE};
use crate::{Error, Result};
use candle_core::Device;
use std::ops::ControlFlow;
use std::path::Path;

/// Runs `extension` on the finished run in `out`, or resumes it where a previous call was
/// stopped. The run must have had `extension.index - 1` extensions and trained
/// `extension.start` steps; each mismatch is one error naming the field. Returns
/// [`Outcome::Finished`] with the extended run's metrics, or [`Outcome::Interrupted`] when the
/// observer stopped it (a checkpoint holds the state; call again to resume).
pub fn extend(out: &Path, extension: &Extension, observer: &mut dyn Observer) -> Result<Outcome> {
    extension.validate()?;
    let run = RunDir::lock_finished(out)?;
    let i = extension.index;
    let (metrics_before, weights_before) = (before_extension(METRICS_FILE, i), before_extension(FINAL_WEIGHTS, i));
    let (config, before) = keep_record_before(&run, extension, &metrics_before, &weights_before)?;
    validate(&config)?;
    let model = Model::new(&config, &Device::Cpu)?;
    let checkpoints = Checkpointer::new(&run, config.train.checkpoint_every, extension.end);
    let mut session = Session::new(&config, &run, &model)?;
    session.resume(&checkpoints)?;
    let step = session.p.step;
    if !(extension.start..=extension.end).contains(&step) {
        return Err(Error::File {
            path: run.file(super::checkpoint::CHECKPOINT_INDEX),
            reason: format!(
                "resumes at step {step}, outside extension {i}'s steps {}..={}; the run's final checkpoint (step {}) is needed",
                extension.start, extension.end, extension.start
            ),
        });
    }
    run.truncate_log(step)?;
    observer.on_start(step, extension.end);
    session.start_clock();
    if let ControlFlow::Break(step) =
        session.run_to(extension.end, &|step| extension.lr_at(step), &checkpoints, observer)?
    {
        return Ok(Outcome::Interrupted { step });
    }
    let end = session.end()?;
    let record = ExtensionRecord {
        schedule: *extension,
        accuracy_before: before.final_eval.accuracy,
        accuracy_after: end.final_eval.accuracy,
        metrics_before,
        weights_before,
    };
    let mut extensions = before.extensions;
    extensions.push(record);
    let metrics = end.metrics(&config, &model, extensions);
    write_metrics(&run, &metrics)?;
    Ok(Outcome::Finished(metrics))
}

/// The run's config and its metrics from before `extension`: on the extension's first call,
/// checks the run (config, metrics, weights: [`verify_run`]) and that it is where the
/// extension starts, then keeps its weights and metrics under the names given (metrics last:
/// their copy marks a started extension); on a later call, reads the kept metrics back.
fn keep_record_before(
    run: &RunDir,
    extension: &Extension,
    metrics_before: &str,
    weights_before: &str,
) -> Result<(RunConfig, Metrics)> {
    let kept = run.file(metrics_before);
    if kept.exists() {
        let before: Metrics = read_json_file(&kept, "the metrics of a run before its extension")?;
        let now: Metrics = read_json_file(&run.file(METRICS_FILE), "the metrics of a finished run")?;
        if now.extension_count() >= extension.index {
            return Err(Error::invalid(
                "extension.index",
                format!(
                    "{} has had extension {} already (its metrics.json records it); nothing is overwritten",
                    run.path().display(),
                    extension.index
                ),
            ));
        }
        let path = run.file(CONFIG_FILE);
        let text = crate::limits::read_text(&path, crate::limits::MAX_JSON_BYTES)?;
        let config = RunConfig::from_json(&text).map_err(|e| Error::File { path, reason: e.to_string() })?;
        check_start(&before, extension)?;
        return Ok((config, before));
    }
    let verified = verify_run(run.path())?;
    check_start(&verified.metrics, extension)?;
    let copy = |from: &str, to: &str| -> Result<()> {
        let path = run.file(from);
        let bytes = crate::limits::read_file(&path, crate::limits::MAX_WEIGHTS_BYTES)?;
        atomic_write(&run.file(to), &bytes)
    };
    copy(FINAL_WEIGHTS, weights_before)?;
    copy(METRICS_FILE, metrics_before)?;
    crate::run_dir::manifest::record(run.path(), &[metrics_before.to_string()])?;
    Ok((verified.config, verified.metrics))
}

/// `Ok` when a run with `metrics` is where `extension` starts: it has had `index - 1`
/// extensions and trained `start` steps.
fn check_start(metrics: &Metrics, extension: &Extension) -> Result<()> {
    let had = metrics.extension_count();
    if had + 1 != extension.index {
        return Err(Error::invalid(
            "extension.index",
            format!("must be {} (the run has had {had} extension(s)), got {}", had + 1, extension.index),
        ));
    }
    if metrics.steps != extension.start {
        return Err(Error::invalid(
            "extension.start",
            format!("must be {} (the steps the run has trained), got {}", metrics.steps, extension.start),
        ));
    }
    Ok(())
}
