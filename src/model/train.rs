//! The training loop, an executor over a [`TrainEngine`]: seeded batches (the batch of step `s`
//! is generator stream `s` of the seed, so a resumed run sees exactly the batches it would have
//! seen), AdamW with warm-up, cosine decay and gradient clipping, periodic evaluation on a fixed
//! held-out set on the training engine, checkpoints ([`Checkpointer`]), a JSONL log, and
//! `metrics.json` at the end. Progress goes to an [`Observer`]; nothing here prints.

use super::batch::{training_batch, Batch};
use super::checkpoint::{Checkpointer, Progress};
use super::config::{Engine, ModelConfig, RunConfig};
use super::decoder::Decoder;
use super::engine::{evaluate, TrainEngine};
use super::fast::FastDecoder;
use super::optim::AdamW;
use super::record::{EvalReport, Metrics, StepReport};
use super::weights::{Model, FINAL_WEIGHTS};
use crate::run_dir::{RunDir, RunStart};
use crate::{Error, Result};
use candle_core::Device;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::Instant;

/// Training stops as diverged when an evaluation's loss exceeds this multiple of the first
/// step's training loss (the loss of the freshly initialised model), or any loss is not finite.
pub const DIVERGENCE_FACTOR: f64 = 10.0;

/// Receives progress from [`train`]. Every method has a default that does nothing.
pub trait Observer {
    /// Called once before the first step, with the step training starts from (non-zero on a
    /// resume) and the total.
    fn on_start(&mut self, _start_step: usize, _total: usize) {}
    /// Called after every step; `Break` stops training after a checkpoint (resumable).
    fn on_step(&mut self, _report: &StepReport) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
    /// Called after every evaluation.
    fn on_eval(&mut self, _report: &EvalReport) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct Silent;
impl Observer for Silent {}

/// How [`train`] ended.
// Returned once per run: boxing `Metrics` would only change every caller's pattern.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Outcome {
    /// All steps done; `metrics.json` written.
    Finished(Metrics),
    /// Stopped by the observer after `step` steps; a checkpoint holds the state.
    Interrupted {
        /// Steps completed.
        step: usize,
    },
}

/// Checks `config` ([`RunConfig::validate`]) and that its engine implements its model
/// ([`TrainEngine::supports`]); every error is one line naming the field.
pub fn validate(config: &RunConfig) -> Result<()> {
    config.validate()?;
    match config.train.engine {
        Engine::Candle => <&Decoder as TrainEngine>::supports(&config.model),
        Engine::Fast => FastDecoder::supports(&config.model),
    }
}

/// The engine a model trains on when nobody chose one: `fast`, which implements every listed
/// preset (`candle` only for a model it refuses, an unknown preset, whose validation then names
/// the problem as the model's).
pub fn preferred_engine(model: &ModelConfig) -> Engine {
    if FastDecoder::supports(model).is_ok() {
        Engine::Fast
    } else {
        Engine::Candle
    }
}

/// The engine `config` selects, over the parameters of `model`.
pub fn engine_for<'a>(config: &RunConfig, model: &'a Model) -> Result<Box<dyn TrainEngine + 'a>> {
    Ok(match config.train.engine {
        Engine::Candle => Box::new(&model.decoder),
        Engine::Fast => Box::new(FastDecoder::new(&config.model, config.task.vocab_size(), model.store.vars())?),
    })
}

/// Appends `record` to the run's log as a line of kind `kind`.
fn log<T: serde::Serialize>(run: &RunDir, record: &T, kind: &str) -> Result<()> {
    let mut line = serde_json::to_value(record).unwrap_or_default();
    line["kind"] = kind.into();
    run.append_log(&line)
}

/// The error of a run whose loss left the range training can come back from.
fn diverged(step: usize, what: String) -> Error {
    Error::Diverged { step, reason: format!("{what}; lower train.lr or set train.grad_clip (no metrics.json written)") }
}

/// Trains `config` in run directory `out` (created, or resumed when it holds an unfinished
/// run with the same config; a finished run is [`Error::FinishedRun`]). `environment` is merged
/// into `environment.json`.
pub fn train(
    config: &RunConfig,
    out: &Path,
    environment: serde_json::Value,
    observer: &mut dyn Observer,
) -> Result<Outcome> {
    validate(config)?;
    let mut env = serde_json::json!({
        "seed": config.train.seed,
        "preset": config.model.preset,
        "dtype": "f32",
        "device": "cpu",
        "engine": config.train.engine.name(),
    });
    if let (Some(o), serde_json::Value::Object(extra)) = (env.as_object_mut(), environment) {
        o.extend(extra);
    }
    let (run, start) = RunDir::open(out, config, env)?;
    let model = Model::new(config, &Device::Cpu)?;
    let mut engine = engine_for(config, &model)?;
    let tc = &config.train;
    let mut opt = AdamW::new(model.store.vars(), tc.beta1, tc.beta2, tc.weight_decay)?;
    let checkpoints = Checkpointer::new(&run, tc.checkpoint_every, tc.steps);
    let resumed = if start == RunStart::Resume { checkpoints.resume(&model, &mut opt)? } else { None };
    let mut p = resumed.unwrap_or_default();
    run.truncate_log(p.step)?;
    observer.on_start(p.step, tc.steps);
    // Parameter snapshots from initialisation on (E7 reads the gates' trajectories).
    if p.step == 0 {
        checkpoints.snapshot(0, &model)?;
    }
    let (t0, elapsed_before) = (Instant::now(), p.elapsed_s);
    let elapsed = || elapsed_before + t0.elapsed().as_secs_f64();
    let held_out = |engine: &mut dyn TrainEngine, step: usize| {
        evaluate(engine, &config.task, tc.seed, tc.eval_samples, tc.batch_size.max(1), step)
    };
    while p.step < tc.steps {
        let batch = Batch::new(&training_batch(config, p.step), &Device::Cpu)?;
        let s = engine.step(&batch)?;
        let loss = s.score.loss;
        if !loss.is_finite() {
            return Err(diverged(p.step + 1, format!("training loss is {loss}")));
        }
        let initial = *p.initial_loss.get_or_insert(loss);
        let lr = tc.lr_at(p.step);
        let grad_norm = opt.clipped_step(&s.grads, lr, tc.grad_clip)?;
        p.step += 1;
        let report = StepReport {
            step: p.step,
            total: tc.steps,
            loss,
            accuracy: s.score.exact as f64 / s.score.queries.max(1) as f64,
            lr,
            grad_norm,
            elapsed_s: elapsed(),
        };
        log(&run, &report, "train")?;
        if p.step.is_multiple_of(tc.eval_every) || p.step == tc.steps {
            let e = held_out(engine.as_mut(), p.step)?;
            log(&run, &e, "eval")?;
            observer.on_eval(&e);
            if !(e.loss.is_finite() && e.loss <= DIVERGENCE_FACTOR * initial) {
                let what =
                    format!("eval loss {:.4} is above {DIVERGENCE_FACTOR} x the initial loss {initial:.4}", e.loss);
                return Err(diverged(p.step, what));
            }
            p.evals.push(e);
        }
        let stop = observer.on_step(&report).is_break();
        if checkpoints.due(p.step) || stop {
            p.elapsed_s = elapsed();
            checkpoints.save(&p, &model, &opt)?;
        }
        if stop && p.step < tc.steps {
            return Ok(Outcome::Interrupted { step: p.step });
        }
    }
    let train_seconds = elapsed();
    let weights_hash = model.save(&run.file(FINAL_WEIGHTS))?;
    let final_eval = match p.evals.last() {
        Some(e) if e.step == p.step => e.clone(),
        _ => held_out(engine.as_mut(), p.step)?,
    };
    finish(config, &run, &model, p, final_eval, train_seconds, weights_hash)
}

/// Writes `metrics.json` and the learning curve of a finished run.
fn finish(
    config: &RunConfig,
    run: &RunDir,
    model: &Model,
    p: Progress,
    final_eval: EvalReport,
    train_seconds: f64,
    weights_hash: String,
) -> Result<Outcome> {
    let tc = &config.train;
    let metrics = Metrics {
        preset: config.model.preset.clone(),
        seed: tc.seed,
        steps: p.step,
        best_accuracy: p.evals.iter().map(|e| e.accuracy).fold(0.0, f64::max),
        final_eval,
        chance_in_context: config.task.chance_in_context(),
        train_seconds,
        tokens_per_second: (tc.steps as f64 * tc.batch_size as f64 * config.task.seq_len() as f64)
            / train_seconds.max(1e-9),
        parameters: model.store.num_params(),
        evals: p.evals,
        config_hash: Some(config.identity()),
        weights_hash: Some(weights_hash),
        engine: Some(tc.engine.name().into()),
    };
    // Learning curve as CSV next to the log, for plots.
    crate::run_dir::write_csv_atomic(&run.file("curve.csv"), &metrics.curve_rows())?;
    run.finish_with_metrics(&metrics)?;
    Ok(Outcome::Finished(metrics))
}
