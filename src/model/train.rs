//! The training loop: seeded batches (the batch of step `s` is generator stream `s` of the seed,
//! so a resumed run sees exactly the batches it would have seen), AdamW with warm-up and cosine
//! decay, gradient clipping, periodic evaluation on a fixed held-out set, checkpoints in
//! safetensors, a JSONL log, and `metrics.json` at the end. Progress goes to an [`Observer`];
//! nothing here prints.

pub use super::batch::*;
use super::batch::{engine_for, loss_and_grads};
pub use super::bench::*;
use super::config::RunConfig;
use super::optim::AdamW;
use super::run::{write_atomic, write_json_atomic, RunDir, RunStart};
pub use super::weights::*;
use super::weights::{checkpoint_to_resume, read_json_file, save_tensors, tensors_from_bytes};
use crate::{Error, Result};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::ops::ControlFlow;
use std::path::Path;
use std::time::Instant;

/// One training step as reported to the observer and the log.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepReport {
    /// Steps completed (1-based: the step just taken).
    pub step: usize,
    /// Total steps of the run.
    pub total: usize,
    /// Training loss of this step's batch.
    pub loss: f64,
    /// Exact-match accuracy on this step's batch (before the update).
    pub accuracy: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Seconds of training so far (across resumes).
    pub elapsed_s: f64,
}

/// What `metrics.json` holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Metrics {
    /// Kernel preset.
    pub preset: String,
    /// Seed.
    pub seed: u64,
    /// Steps trained.
    pub steps: usize,
    /// Final evaluation.
    pub final_eval: EvalReport,
    /// Best held-out exact-match accuracy seen at any evaluation.
    pub best_accuracy: f64,
    /// Chance level: guessing uniformly among the values in context.
    pub chance_in_context: f64,
    /// Seconds spent training (across resumes, evaluations included).
    pub train_seconds: f64,
    /// Training tokens per second (sequence tokens, forward + backward).
    pub tokens_per_second: f64,
    /// Trainable parameters.
    pub parameters: usize,
    /// Every evaluation, in order.
    pub evals: Vec<EvalReport>,
    /// The run's identity: [`RunConfig::identity`] of the config it was trained with (absent
    /// in runs from before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// Content hash of `model.safetensors` as saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_hash: Option<String>,
    /// The engine that computed the gradients (`candle` or `fast`; absent in runs from before
    /// it was recorded, which are all `candle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

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

/// Trains `config` in run directory `out` (created, or resumed when it holds an unfinished
/// run with the same config; a finished run is [`Error::FinishedRun`]). `environment` is merged
/// into `environment.json`.
pub fn train(
    config: &RunConfig,
    out: &Path,
    environment: serde_json::Value,
    observer: &mut dyn Observer,
) -> Result<Outcome> {
    config.validate()?;
    let device = Device::Cpu;
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
    let model = Model::new(config, &device)?;
    let mut fast = engine_for(config, &model)?;
    let tc = &config.train;
    let mut opt = AdamW::new(model.store.vars(), tc.beta1, tc.beta2, tc.weight_decay)?;
    let mut step = 0usize;
    let mut elapsed_before = 0f64;
    let mut evals: Vec<EvalReport> = Vec::new();
    let mut initial_loss: Option<f64> = None;
    let index_path = run.file(CHECKPOINT_INDEX);
    if start == RunStart::Resume && index_path.exists() {
        let idx: CheckpointIndex = read_json_file(&index_path, "a checkpoint index")?;
        let (idx, bytes) = checkpoint_to_resume(idx, &run)?;
        let map = tensors_from_bytes(&run.file(&idx.file), &bytes, &device)?;
        model.load_tensors(&map)?;
        opt.load_state(&map, idx.step)?;
        step = idx.step;
        elapsed_before = idx.elapsed_s;
        evals = idx.evals;
        initial_loss = idx.initial_loss;
    }
    run.truncate_log(step)?;
    observer.on_start(step, tc.steps);
    let t0 = Instant::now();
    let elapsed = |t0: &Instant| elapsed_before + t0.elapsed().as_secs_f64();
    let eval_chunk = tc.batch_size.max(1);
    // Parameter snapshots (gate trajectories) on the checkpoint cadence and at step 0, so that
    // E7 reads the gates from initialisation on (`theory/phase-lab.md` §7.5).
    let save_snapshot = |step: usize| -> Result<()> {
        let snapshots = run.file(SNAPSHOT_DIR);
        std::fs::create_dir_all(&snapshots).map_err(|e| Error::io(&snapshots, e))?;
        let snapshot = snapshots.join(snapshot_name(step));
        let hash = save_tensors(&model.tensors(), &snapshot)?;
        write_atomic(&snapshot.with_extension(SNAPSHOT_HASH_EXT), hash.as_bytes())
    };
    if step == 0 {
        save_snapshot(0)?;
    }
    let save_checkpoint =
        |step: usize, elapsed_s: f64, evals: &[EvalReport], opt: &AdamW, initial_loss: Option<f64>| -> Result<()> {
            let mut map = model.tensors();
            let (state, _) = opt.state();
            map.extend(state);
            let file = format!("ckpt-{step:07}.safetensors");
            // Snapshots on the cadence only: a stop by a signal at another step leaves none, so a
            // run that was interrupted and resumed has the same snapshots (gate trajectories) as
            // one that was not.
            if step.is_multiple_of(tc.checkpoint_every) || step == tc.steps {
                save_snapshot(step)?;
            }
            let checksum = save_tensors(&map, &run.file(&file))?;
            // The latest checkpoint and the one before it are kept: if the latest is damaged,
            // the run can still resume from the previous one.
            let mut previous: Option<CheckpointIndex> =
                std::fs::read_to_string(&index_path).ok().and_then(|t| serde_json::from_str(&t).ok());
            let older = previous.as_mut().and_then(|p| p.previous.take());
            let previous = previous.filter(|p| p.file != file);
            write_json_atomic(
                &index_path,
                &CheckpointIndex {
                    step,
                    file: file.clone(),
                    elapsed_s,
                    evals: evals.to_vec(),
                    checksum: Some(checksum),
                    initial_loss,
                    previous: previous.clone().map(Box::new),
                },
            )?;
            if let Some(o) = older {
                if o.file != file && previous.as_ref().is_none_or(|p| p.file != o.file) {
                    let _ = std::fs::remove_file(run.file(&o.file));
                }
            }
            Ok(())
        };
    while step < tc.steps {
        let samples = training_batch(config, step);
        let batch = Batch::new(&samples, &device)?;
        let (loss_value, exact, queries, grads) = loss_and_grads(&model.decoder, fast.as_mut(), &batch)?;
        if !loss_value.is_finite() {
            return Err(Error::Diverged {
                step: step + 1,
                reason: format!(
                    "training loss is {loss_value}; lower train.lr or set train.grad_clip (no metrics.json written)"
                ),
            });
        }
        let initial = *initial_loss.get_or_insert(loss_value);
        let grad_norm = opt.grad_norm(&grads)?;
        let scale = if tc.grad_clip > 0.0 && grad_norm > tc.grad_clip { tc.grad_clip / grad_norm } else { 1.0 };
        let lr = tc.lr_at(step);
        opt.step(&grads, lr, scale)?;
        step += 1;
        let report = StepReport {
            step,
            total: tc.steps,
            loss: loss_value,
            accuracy: exact as f64 / queries.max(1) as f64,
            lr,
            grad_norm,
            elapsed_s: elapsed(&t0),
        };
        let mut line = serde_json::to_value(&report).unwrap_or_default();
        line["kind"] = "train".into();
        run.append_log(&line)?;
        if step.is_multiple_of(tc.eval_every) || step == tc.steps {
            let e = evaluate(&model.decoder, &config.task, tc.seed, tc.eval_samples, eval_chunk, step, &device)?;
            let mut line = serde_json::to_value(&e).unwrap_or_default();
            line["kind"] = "eval".into();
            run.append_log(&line)?;
            observer.on_eval(&e);
            if !(e.loss.is_finite() && e.loss <= DIVERGENCE_FACTOR * initial) {
                return Err(Error::Diverged {
                    step,
                    reason: format!(
                        "eval loss {:.4} is above {DIVERGENCE_FACTOR} x the initial loss {initial:.4}; lower \
                         train.lr or set train.grad_clip (no metrics.json written)",
                        e.loss
                    ),
                });
            }
            evals.push(e);
        }
        let stop = observer.on_step(&report).is_break();
        if step.is_multiple_of(tc.checkpoint_every) || step == tc.steps || stop {
            save_checkpoint(step, elapsed(&t0), &evals, &opt, initial_loss)?;
        }
        if stop && step < tc.steps {
            return Ok(Outcome::Interrupted { step });
        }
    }
    let train_seconds = elapsed(&t0);
    let weights_hash = model.save(&run.file(FINAL_WEIGHTS))?;
    let final_eval = match evals.last() {
        Some(e) if e.step == step => e.clone(),
        _ => evaluate(&model.decoder, &config.task, tc.seed, tc.eval_samples, eval_chunk, step, &device)?,
    };
    let metrics = Metrics {
        preset: config.model.preset.clone(),
        seed: tc.seed,
        steps: step,
        best_accuracy: evals.iter().map(|e| e.accuracy).fold(0.0, f64::max),
        final_eval,
        chance_in_context: config.task.chance_in_context(),
        train_seconds,
        tokens_per_second: (tc.steps as f64 * tc.batch_size as f64 * config.task.seq_len() as f64)
            / train_seconds.max(1e-9),
        parameters: model.store.num_params(),
        evals,
        config_hash: Some(config.identity()),
        weights_hash: Some(weights_hash),
        engine: Some(tc.engine.name().into()),
    };
    // Learning curve as CSV next to the log, for plots.
    crate::run_dir::write_csv_atomic(&run.file("curve.csv"), &curve_rows(&metrics))?;
    run.finish_with_metrics(&metrics)?;
    Ok(Outcome::Finished(metrics))
}

/// One row of a run's `curve.csv` (floats with six decimals, as the committed runs have them).
#[derive(Serialize, Default)]
struct CurveCsvRow {
    step: usize,
    eval_loss: String,
    eval_accuracy: String,
    eval_token_accuracy: String,
}

fn curve_rows(metrics: &Metrics) -> Vec<CurveCsvRow> {
    metrics
        .evals
        .iter()
        .map(|e| CurveCsvRow {
            step: e.step,
            eval_loss: format!("{:.6}", e.loss),
            eval_accuracy: format!("{:.6}", e.accuracy),
            eval_token_accuracy: format!("{:.6}", e.token_accuracy),
        })
        .collect()
}

#[cfg(test)]
mod curve_csv_tests {
    /// Every committed run's `curve.csv` is what [`super::curve_rows`] makes of its
    /// `metrics.json` (the `csv` crate changed no byte).
    #[test]
    fn committed_curves_are_reproduced_byte_for_byte() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut checked = 0;
        for base in ["reports/runs", "theory/training-runs"] {
            for entry in std::fs::read_dir(root.join(base)).unwrap() {
                let run = entry.unwrap().path();
                let (m, c) = (run.join("metrics.json"), run.join("curve.csv"));
                if !(m.is_file() && c.is_file()) {
                    continue;
                }
                let metrics: super::Metrics = serde_json::from_str(&std::fs::read_to_string(&m).unwrap()).unwrap();
                let bytes = crate::run_dir::csv_bytes(&super::curve_rows(&metrics)).unwrap();
                assert_eq!(bytes, std::fs::read(&c).unwrap(), "{c:?}");
                checked += 1;
            }
        }
        assert!(checked >= 6, "only {checked} committed curves found");
    }
}
