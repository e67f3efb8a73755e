//! The training loop, an executor over a [`TrainEngine`]: seeded batches (the batch of step `s`
//! is generator stream `s` of the seed, so a resumed run sees exactly the batches it would have
//! seen), AdamW with warm-up, cosine decay and gradient clipping, periodic evaluation on a fixed
//! held-out set on the training engine, checkpoints ([`Checkpointer`]), a JSONL log, and
//! `metrics.json` at the end. Progress goes to an [`Observer`]; nothing here prints.

use super::batch::{training_batch, Batch};
use super::checkpoint::{Checkpointer, Progress};
use super::config::{Engine, RunConfig};
use super::decoder::Decoder;
use super::engine::{evaluate, TrainEngine};
use super::fast::FastDecoder;
use super::optim::AdamW;
use super::record::{EvalReport, ExtensionRecord, Metrics, StepReport};
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
    let tc = &config.train;
    let checkpoints = Checkpointer::new(&run, tc.checkpoint_every, tc.steps);
    let mut session = Session::new(config, &run, &model)?;
    if start == RunStart::Resume {
        session.resume(&checkpoints)?;
    }
    run.truncate_log(session.p.step)?;
    observer.on_start(session.p.step, tc.steps);
    // Parameter snapshots from initialisation on (E7 reads the gates' trajectories).
    if session.p.step == 0 {
        checkpoints.snapshot(0, &model)?;
    }
    session.start_clock();
    if let ControlFlow::Break(step) = session.run_to(tc.steps, &|step| tc.lr_at(step), &checkpoints, observer)? {
        return Ok(Outcome::Interrupted { step });
    }
    let end = session.end()?;
    let metrics = end.metrics(config, &model, Vec::new());
    write_metrics(&run, &metrics)?;
    Ok(Outcome::Finished(metrics))
}

/// One run's training held open: its directory, model, engine, optimiser and progress.
/// [`train`] and [`crate::model::extend()`] drive it over their steps, so both share one loop
/// (batches, evaluation, divergence check, log, checkpoints, observer).
pub(super) struct Session<'a> {
    config: &'a RunConfig,
    run: &'a RunDir,
    model: &'a Model,
    engine: Box<dyn TrainEngine + 'a>,
    opt: AdamW,
    /// Where training is.
    pub(super) p: Progress,
    clock: (Instant, f64),
}

/// What a finished stretch of steps leaves: the final evaluation, the time and the weights'
/// hash (the weights are saved in `model.safetensors`).
pub(super) struct End {
    /// Where training ended.
    pub(super) p: Progress,
    /// The held-out evaluation at the last step.
    pub(super) final_eval: EvalReport,
    /// Seconds of training (across resumes).
    pub(super) train_seconds: f64,
    /// Content hash of `model.safetensors`.
    pub(super) weights_hash: String,
}

impl<'a> Session<'a> {
    /// A session at step 0 (fresh parameters, zero moments) over `model` in `run`.
    pub(super) fn new(config: &'a RunConfig, run: &'a RunDir, model: &'a Model) -> Result<Self> {
        let tc = &config.train;
        let engine = engine_for(config, model)?;
        let opt = AdamW::new(model.store.vars(), tc.beta1, tc.beta2, tc.weight_decay)?;
        Ok(Session { config, run, model, engine, opt, p: Progress::default(), clock: (Instant::now(), 0.0) })
    }

    /// Restores parameters, moments and progress from the run's checkpoint (none: stays at
    /// step 0).
    pub(super) fn resume(&mut self, checkpoints: &Checkpointer) -> Result<()> {
        self.p = checkpoints.resume(self.model, &mut self.opt)?.unwrap_or_default();
        Ok(())
    }

    /// Starts counting training time, on top of the checkpoint's.
    pub(super) fn start_clock(&mut self) {
        self.clock = (Instant::now(), self.p.elapsed_s);
    }

    fn elapsed(&self) -> f64 {
        self.clock.1 + self.clock.0.elapsed().as_secs_f64()
    }

    fn held_out(&mut self, step: usize) -> Result<EvalReport> {
        let tc = &self.config.train;
        evaluate(self.engine.as_mut(), &self.config.task, tc.seed, tc.eval_samples, tc.batch_size.max(1), step)
    }

    /// Trains from the current step to `end` at learning rate `lr(step)`, evaluating every
    /// `eval_every` steps and at `end`, checkpointing on `checkpoints`' cadence; `Break(step)`
    /// when the observer stopped it (a checkpoint holds the state).
    pub(super) fn run_to(
        &mut self,
        end: usize,
        lr: &dyn Fn(usize) -> f64,
        checkpoints: &Checkpointer,
        observer: &mut dyn Observer,
    ) -> Result<ControlFlow<usize>> {
        let tc = &self.config.train;
        while self.p.step < end {
            let batch = Batch::new(&training_batch(self.config, self.p.step), &Device::Cpu)?;
            let s = self.engine.step(&batch)?;
            let loss = s.score.loss;
            if !loss.is_finite() {
                return Err(diverged(self.p.step + 1, format!("training loss is {loss}")));
            }
            let initial = *self.p.initial_loss.get_or_insert(loss);
            let lr = lr(self.p.step);
            let grad_norm = self.opt.clipped_step(&s.grads, lr, tc.grad_clip)?;
            self.p.step += 1;
            let report = StepReport {
                step: self.p.step,
                total: end,
                loss,
                accuracy: s.score.exact as f64 / s.score.queries.max(1) as f64,
                lr,
                grad_norm,
                elapsed_s: self.elapsed(),
            };
            log(self.run, &report, "train")?;
            if self.p.step.is_multiple_of(tc.eval_every) || self.p.step == end {
                let e = self.held_out(self.p.step)?;
                log(self.run, &e, "eval")?;
                observer.on_eval(&e);
                if !(e.loss.is_finite() && e.loss <= DIVERGENCE_FACTOR * initial) {
                    let what =
                        format!("eval loss {:.4} is above {DIVERGENCE_FACTOR} x the initial loss {initial:.4}", e.loss);
                    return Err(diverged(self.p.step, what));
                }
                self.p.evals.push(e);
            }
            let stop = observer.on_step(&report).is_break();
            if checkpoints.due(self.p.step) || stop {
                self.p.elapsed_s = self.elapsed();
                checkpoints.save(&self.p, self.model, &self.opt)?;
            }
            if stop && self.p.step < end {
                return Ok(ControlFlow::Break(self.p.step));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// After the last step: saves the weights as `model.safetensors` and takes the final
    /// evaluation (the loop's, when it evaluated the last step).
    pub(super) fn end(mut self) -> Result<End> {
        let train_seconds = self.elapsed();
        let weights_hash = self.model.save(&self.run.file(FINAL_WEIGHTS))?;
        let final_eval = match self.p.evals.last() {
            Some(e) if e.step == self.p.step => e.clone(),
            _ => self.held_out(self.p.step)?,
        };
        Ok(End { p: self.p, final_eval, train_seconds, weights_hash })
    }
}

impl End {
    /// The run's `metrics.json` with `extensions`.
    pub(super) fn metrics(self, config: &RunConfig, model: &Model, extensions: Vec<ExtensionRecord>) -> Metrics {
        let tc = &config.train;
        let p = self.p;
        Metrics {
            preset: config.model.preset.clone(),
            seed: tc.seed,
            steps: p.step,
            best_accuracy: p.evals.iter().map(|e| e.accuracy).fold(0.0, f64::max),
            final_eval: self.final_eval,
            chance_in_context: config.task.chance_in_context(),
            train_seconds: self.train_seconds,
            // Over every step trained (the recipe's when there is no extension).
            tokens_per_second: (p.step as f64 * tc.batch_size as f64 * config.task.seq_len() as f64)
                / self.train_seconds.max(1e-9),
            parameters: model.store.num_params(),
            evals: p.evals,
            config_hash: Some(config.identity()),
            weights_hash: Some(self.weights_hash),
            engine: Some(tc.engine.name().into()),
            extensions,
        }
    }
}

/// Writes `metrics.json` and the learning curve (`curve.csv`, for plots) of a finished run.
pub(super) fn write_metrics(run: &RunDir, metrics: &Metrics) -> Result<()> {
    crate::run_dir::write_csv_atomic(&run.file("curve.csv"), &metrics.curve_rows())?;
    run.finish_with_metrics(metrics)?;
    // The training record's provenance: the config, environment and metrics (and the metrics
    // kept from before each extension), as they are now (the run's lock is held).
    use crate::run_dir::{manifest, CONFIG_FILE, ENVIRONMENT_FILE, METRICS_FILE};
    let mut names: Vec<String> = [CONFIG_FILE, ENVIRONMENT_FILE, METRICS_FILE].map(String::from).to_vec();
    names
        .extend(manifest::result_files(run.path())?.into_iter().filter(|n| n.starts_with("metrics.before-extension-")));
    manifest::record(run.path(), &names)
}
