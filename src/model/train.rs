//! The training loop: seeded batches (the batch of step `s` is generator stream `s` of the seed,
//! so a resumed run sees exactly the batches it would have seen), AdamW with warm-up and cosine
//! decay, gradient clipping, periodic evaluation on a fixed held-out set, checkpoints in
//! safetensors, a JSONL log, and `metrics.json` at the end. Progress goes to an [`Observer`];
//! nothing here prints.

use super::config::Engine;
use super::config::RunConfig;
use super::decoder::{Decoder, MODEL_DTYPE};
use super::fast::FastDecoder;
use super::optim::AdamW;
use super::params::ParamStore;
use super::run::{write_atomic, write_json_atomic, RunDir, RunStart};
use crate::task::{Sample, TaskConfig};
use crate::{Error, Result};
use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::Instant;

/// Generator stream of the held-out evaluation set (training streams are step numbers).
pub const EVAL_STREAM: u64 = u64::MAX;
/// File naming the latest checkpoint.
pub const CHECKPOINT_INDEX: &str = "checkpoint.json";
/// Directory (in a run directory) of the parameter snapshots kept at every checkpoint step,
/// for analyses across training (gate trajectories); the optimiser state is not kept there.
pub const SNAPSHOT_DIR: &str = "snapshots";

/// Extension of the file beside each snapshot that holds its content hash.
pub const SNAPSHOT_HASH_EXT: &str = "hash";

/// File name of the parameter snapshot at `step` (inside [`SNAPSHOT_DIR`]).
pub fn snapshot_name(step: usize) -> String {
    format!("step-{step:07}.safetensors")
}

/// Steps and paths of the parameter snapshots of the run in `run`, in step order.
pub fn list_snapshots(run: &Path) -> Result<Vec<(usize, std::path::PathBuf)>> {
    let dir = run.join(SNAPSHOT_DIR);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
        let path = entry.map_err(|e| Error::io(&dir, e))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(step) = name.strip_prefix("step-").and_then(|n| n.strip_suffix(".safetensors")) {
            if let Ok(step) = step.parse::<usize>() {
                out.push((step, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A batch as tensors.
#[derive(Debug)]
pub struct Batch {
    /// Token ids `[B, T]`.
    pub tokens: Tensor,
    /// Flat positions `b * T + p` whose next token is an answer token, `[N]`, grouped by query
    /// (`val_len` consecutive positions per query).
    pub idx: Tensor,
    /// The answer tokens at those positions, `[N]`.
    pub targets: Tensor,
    /// Number of queries (`N / val_len`).
    pub n_queries: usize,
}

impl Batch {
    /// Tensors for `samples` (all of the task's sequence length).
    pub fn new(samples: &[Sample], device: &Device) -> Result<Self> {
        let b = samples.len();
        let t = samples.first().map(|s| s.tokens.len()).unwrap_or(0);
        let mut tokens = Vec::with_capacity(b * t);
        let mut idx = Vec::new();
        let mut targets = Vec::new();
        let mut n_queries = 0;
        for (bi, s) in samples.iter().enumerate() {
            if s.tokens.len() != t {
                return Err(Error::shape("batch", format!("{t} tokens"), s.tokens.len().to_string()));
            }
            tokens.extend_from_slice(&s.tokens);
            for q in s.answer_inputs() {
                n_queries += 1;
                for p in q {
                    idx.push((bi * t + p) as u32);
                    targets.push(s.tokens[p + 1]);
                }
            }
        }
        let n = idx.len();
        Ok(Batch {
            tokens: Tensor::from_vec(tokens, (b, t), device)?,
            idx: Tensor::from_vec(idx, n, device)?,
            targets: Tensor::from_vec(targets, n, device)?,
            n_queries,
        })
    }
}

/// Loss and accuracy of a model on one batch.
#[derive(Debug)]
pub struct BatchResult {
    /// Mean cross-entropy over answer tokens (a graph node when computed for training).
    pub loss: Tensor,
    /// Queries whose every answer token is the argmax (= greedy exact match).
    pub exact: usize,
    /// Answer tokens that are the argmax.
    pub token_hits: usize,
    /// Queries.
    pub queries: usize,
    /// Answer tokens.
    pub tokens: usize,
}

/// One training step's loss value, exact-match count, queries and gradients, computed by the
/// candle autodiff path (`fast` is `None`) or the fast engine.
fn loss_and_grads(
    model: &Decoder,
    fast: Option<&mut FastDecoder>,
    batch: &Batch,
) -> Result<(f64, usize, usize, GradStore)> {
    match fast {
        None => {
            let r = evaluate_batch(model, batch)?;
            let loss = r.loss.to_scalar::<f32>()? as f64;
            Ok((loss, r.exact, r.queries, r.loss.backward()?))
        }
        Some(f) => {
            let out = f.step(batch)?;
            Ok((out.loss, out.exact, out.queries, f.grad_store(out.grads)?))
        }
    }
}

/// The fast engine of `model` when `config` selects it.
fn engine_for(config: &RunConfig, model: &Model) -> Result<Option<FastDecoder>> {
    match config.train.engine {
        Engine::Candle => Ok(None),
        Engine::Fast => Ok(Some(FastDecoder::new(&config.model, config.task.vocab_size(), model.store.vars())?)),
    }
}

/// Loss and exact-match counts of `model` on `batch`.
pub fn evaluate_batch(model: &Decoder, batch: &Batch) -> Result<BatchResult> {
    let fwd = model.forward(&batch.tokens)?;
    let logits = model.logits_at(&fwd, &batch.idx)?;
    let loss = candle_nn::loss::cross_entropy(&logits, &batch.targets)?;
    let pred = logits.argmax(1)?.to_vec1::<u32>()?;
    let tgt = batch.targets.to_vec1::<u32>()?;
    let hits: Vec<bool> = pred.iter().zip(&tgt).map(|(a, b)| a == b).collect();
    let per = hits.len() / batch.n_queries.max(1);
    let exact = hits.chunks(per.max(1)).filter(|c| c.iter().all(|&h| h)).count();
    Ok(BatchResult {
        loss,
        exact,
        token_hits: hits.iter().filter(|&&h| h).count(),
        queries: batch.n_queries,
        tokens: hits.len(),
    })
}

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

/// An evaluation on the held-out set.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EvalReport {
    /// Steps completed when evaluated.
    pub step: usize,
    /// Mean cross-entropy over answer tokens.
    pub loss: f64,
    /// Exact-match accuracy over queries.
    pub accuracy: f64,
    /// Token accuracy over answer tokens.
    pub token_accuracy: f64,
    /// Number of queries evaluated.
    pub queries: usize,
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

/// The latest checkpoint, as recorded in `checkpoint.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckpointIndex {
    /// Steps completed at the checkpoint.
    pub step: usize,
    /// The safetensors file (in the run directory).
    pub file: String,
    /// Training seconds so far.
    pub elapsed_s: f64,
    /// Evaluations so far.
    pub evals: Vec<EvalReport>,
    /// Content hash of the checkpoint file; a resume refuses a file that does not match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// Training loss of the first step, the reference of the divergence check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_loss: Option<f64>,
    /// The checkpoint before this one (kept on disk), to resume from if this one is damaged
    /// or removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Box<CheckpointIndex>>,
}

impl CheckpointIndex {
    /// The checkpoint file's bytes when it exists and matches its checksum; `Ok(None)` when
    /// the file is missing, an error naming the file when it fails its checksum.
    fn read_checked(&self, run: &RunDir) -> Result<Option<Vec<u8>>> {
        let path = run.file(&self.file);
        if !path.exists() {
            return Ok(None);
        }
        let bytes = crate::limits::read_file(&path, crate::limits::MAX_WEIGHTS_BYTES)?;
        match &self.checksum {
            Some(want) if crate::limits::content_hash(&bytes) != *want => Err(Error::File {
                path,
                reason: format!("checkpoint of step {} fails its checksum (saved as {want})", self.step),
            }),
            _ => Ok(Some(bytes)),
        }
    }
}

/// The checkpoint to resume from: the latest one in `idx` when intact; the previous one when
/// the latest file was removed (the way to resume from it). A latest checkpoint that fails its
/// checksum is refused, naming the step that can be resumed from instead.
fn checkpoint_to_resume(idx: CheckpointIndex, run: &RunDir) -> Result<(CheckpointIndex, Vec<u8>)> {
    let latest = run.file(&idx.file);
    let previous = match idx.previous.as_deref() {
        Some(p) => p.read_checked(run).ok().flatten().map(|_| p.step),
        None => None,
    };
    match idx.read_checked(run) {
        Ok(Some(bytes)) => Ok((idx, bytes)),
        Err(Error::File { path, reason }) => {
            let hint = match previous {
                Some(p) => format!(
                    "the checkpoint of step {p} is intact: delete {} and rerun the same command to resume from step {p}",
                    path.display()
                ),
                None => format!(
                    "no intact checkpoint is left, so the run can only restart from step 0: move {} away and rerun",
                    run.path().display()
                ),
            };
            Err(Error::File { path, reason: format!("{reason} and is refused; {hint}") })
        }
        Err(e) => Err(e),
        Ok(None) => match idx.previous {
            Some(p) => match p.read_checked(run)? {
                Some(bytes) => Ok((*p, bytes)),
                None => Err(Error::File { path: latest, reason: "missing, and so is the previous checkpoint".into() }),
            },
            None => Err(Error::File {
                path: latest,
                reason: format!("missing; move {} away to restart from step 0", run.path().display()),
            }),
        },
    }
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

/// A model with its parameter store, ready to train or evaluate.
#[derive(Debug)]
pub struct Model {
    /// Parameters.
    pub store: ParamStore,
    /// The decoder.
    pub decoder: Decoder,
}

impl Model {
    /// A freshly initialised model for `config` (parameters drawn from `config.train.seed`).
    pub fn new(config: &RunConfig, device: &Device) -> Result<Self> {
        let store = ParamStore::new(config.train.seed);
        let vb = store.var_builder(MODEL_DTYPE, device);
        let decoder = Decoder::new(&config.model, config.task.vocab_size(), &vb)?;
        Ok(Model { store, decoder })
    }

    /// Parameters as named tensors (`param.<name>`).
    pub fn tensors(&self) -> HashMap<String, Tensor> {
        self.store.vars().into_iter().map(|(n, v)| (format!("param.{n}"), v.as_tensor().clone())).collect()
    }

    /// Sets every parameter from named tensors (`param.<name>`); all must be present with the
    /// right shapes, and no `param.*` tensor may be left over: a checkpoint of another
    /// architecture (a `w8s4` model's, which holds every tensor of a `full` model plus the
    /// compressor's) is refused rather than silently loaded in part.
    pub fn load_tensors(&self, map: &HashMap<String, Tensor>) -> Result<()> {
        let vars = self.store.vars();
        let mut extra: Vec<&str> = map
            .keys()
            .filter(|k| k.starts_with("param."))
            .filter(|k| !vars.iter().any(|(n, _)| k.strip_prefix("param.") == Some(n.as_str())))
            .map(String::as_str)
            .collect();
        if !extra.is_empty() {
            extra.sort_unstable();
            return Err(Error::invalid(
                "checkpoint",
                format!(
                    "{} tensor(s) this model does not have, first {} (a checkpoint of another preset or size?)",
                    extra.len(),
                    extra[0]
                ),
            ));
        }
        for (n, v) in vars {
            let k = format!("param.{n}");
            let t = map.get(&k).ok_or_else(|| Error::invalid("checkpoint", format!("missing tensor {k}")))?;
            if t.dims() != v.dims() {
                return Err(Error::shape(k, format!("{:?}", v.dims()), format!("{:?}", t.dims())));
            }
            v.set(t)?;
        }
        Ok(())
    }

    /// Saves the parameters to a safetensors file (atomically); returns the file's content
    /// hash.
    pub fn save(&self, path: &Path) -> Result<String> {
        save_tensors(&self.tensors(), path)
    }

    /// Loads parameters saved by [`Model::save`].
    pub fn load(&self, path: &Path) -> Result<()> {
        let bytes = crate::limits::read_file(path, crate::limits::MAX_WEIGHTS_BYTES)?;
        let map = tensors_from_bytes(path, &bytes, &self.decoder_device())?;
        self.load_tensors(&map)
    }

    fn decoder_device(&self) -> Device {
        self.store.vars().first().map(|(_, v)| v.device().clone()).unwrap_or(Device::Cpu)
    }
}

/// A finished run whose provenance checked out: its config, metrics and identity.
#[derive(Clone, Debug)]
pub struct VerifiedRun {
    /// The config from `config.json`.
    pub config: RunConfig,
    /// `metrics.json`.
    pub metrics: Metrics,
    /// `<config hash>/<weights hash>`, the key of cached analyses; `None` for a run from before
    /// hashes were recorded.
    pub identity: Option<String>,
}

fn read_json_file<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<T> {
    let text = crate::limits::read_text(path, crate::limits::MAX_JSON_BYTES)?;
    serde_json::from_str(&text)
        .map_err(|e| Error::File { path: path.to_path_buf(), reason: format!("not {what}: {e}") })
}

/// Checks that `run` holds a finished run whose files agree: `metrics.json` is readable,
/// `config.json` is the config the run was trained with (its hash, or for older runs its
/// preset, seed and steps, match the metrics), and `model.safetensors` has the hash it was
/// saved with. Every analysis starts here, so an edited config or swapped weights are refused
/// instead of being evaluated under the wrong label.
pub fn verify_run(run: &Path) -> Result<VerifiedRun> {
    let cfg_path = run.join(super::run::CONFIG_FILE);
    let text = crate::limits::read_text(&cfg_path, crate::limits::MAX_JSON_BYTES)?;
    let config = RunConfig::from_json(&text)
        .map_err(|e| Error::File { path: cfg_path.clone(), reason: format!("not a run config: {e}") })?;
    config.validate().map_err(|e| Error::File { path: cfg_path.clone(), reason: e.to_string() })?;
    let metrics_path = run.join(super::run::METRICS_FILE);
    if !metrics_path.exists() {
        return Err(Error::File {
            path: metrics_path,
            reason: "missing: the run is not finished (rerun `phasekv train` with the same config to resume it)".into(),
        });
    }
    let metrics: Metrics = read_json_file(&metrics_path, "the metrics of a finished run")?;
    let changed = |what: String| Error::File {
        path: cfg_path.clone(),
        reason: format!("{what}: config.json was changed after training; restore it or train a new run"),
    };
    let id = config.identity();
    match &metrics.config_hash {
        Some(h) if *h != id => return Err(changed(format!("hash {id}, trained as {h}"))),
        _ => {}
    }
    let recorded = (&metrics.preset, metrics.seed, metrics.steps);
    if recorded != (&config.model.preset, config.train.seed, config.train.steps) {
        return Err(changed(format!(
            "preset {} seed {} steps {}, trained as preset {} seed {} steps {}",
            config.model.preset, config.train.seed, config.train.steps, recorded.0, recorded.1, recorded.2
        )));
    }
    let weights = run.join(FINAL_WEIGHTS);
    let identity = match (&metrics.config_hash, &metrics.weights_hash) {
        (Some(c), Some(w)) => {
            let bytes = read_weights(&weights)?;
            let have = crate::limits::content_hash(&bytes);
            if have != *w {
                return Err(Error::File {
                    path: weights,
                    reason: format!(
                        "hash {have} is not the {w} this run saved; the weights were changed after training"
                    ),
                });
            }
            Some(format!("{c}/{w}"))
        }
        _ => None,
    };
    Ok(VerifiedRun { config, metrics, identity })
}

/// File name of a finished run's weights.
pub const FINAL_WEIGHTS: &str = "model.safetensors";

fn read_weights(path: &Path) -> Result<Vec<u8>> {
    if !path.exists() {
        return Err(Error::File {
            path: path.to_path_buf(),
            reason: "no trained weights here (is the run finished? rerun `phasekv train` to resume it)".into(),
        });
    }
    crate::limits::read_file(path, crate::limits::MAX_WEIGHTS_BYTES)
}

/// A trained model read back from its run directory after [`verify_run`]: the config from
/// `config.json`, the parameters from `weights` (default: the final `model.safetensors`).
///
/// Other weights (a snapshot) are checked against the hash saved beside them
/// (`step-N.hash`), which runs with recorded hashes must have.
pub fn load_run(run: &Path, weights: Option<&Path>) -> Result<(RunConfig, Model)> {
    let verified = verify_run(run)?;
    let config = verified.config;
    let final_weights = run.join(FINAL_WEIGHTS);
    let path = weights.unwrap_or(&final_weights);
    let bytes = read_weights(path)?;
    if weights.is_some() {
        let sidecar = path.with_extension(SNAPSHOT_HASH_EXT);
        match crate::limits::read_text(&sidecar, 1024) {
            Ok(want) => {
                let have = crate::limits::content_hash(&bytes);
                if have != want.trim() {
                    return Err(Error::File {
                        path: path.to_path_buf(),
                        reason: format!(
                            "hash {have} is not the {} saved with it; the snapshot was changed",
                            want.trim()
                        ),
                    });
                }
            }
            Err(_) if verified.identity.is_none() => {} // a run from before hashes were recorded
            Err(e) => return Err(e),
        }
    }
    let model = Model::new(&config, &Device::Cpu)?;
    model.load_tensors(&tensors_from_bytes(path, &bytes, &Device::Cpu)?)?;
    Ok((config, model))
}

/// Writes named tensors as a safetensors file through [`crate::run_dir::atomic_write`] (a
/// temporary name unique to this writer, then a rename); returns the file's content hash.
fn save_tensors(map: &HashMap<String, Tensor>, path: &Path) -> Result<String> {
    let mut sorted: Vec<(&String, &Tensor)> = map.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let bytes = safetensors::tensor::serialize(sorted, None)
        .map_err(|e| Error::File { path: path.to_path_buf(), reason: format!("cannot write safetensors: {e}") })?;
    write_atomic(path, &bytes)?;
    Ok(crate::limits::content_hash(&bytes))
}

fn tensors_from_bytes(path: &Path, bytes: &[u8], device: &Device) -> Result<HashMap<String, Tensor>> {
    candle_core::safetensors::load_buffer(bytes, device)
        .map_err(|e| Error::File { path: path.to_path_buf(), reason: format!("cannot read safetensors: {e}") })
}

/// Held-out evaluation of `model` on `n` sequences of generator stream [`EVAL_STREAM`] of
/// `seed` (the full randomised task), in chunks of `chunk` sequences.
pub fn evaluate(
    model: &Decoder,
    task: &TaskConfig,
    seed: u64,
    n: usize,
    chunk: usize,
    step: usize,
    device: &Device,
) -> Result<EvalReport> {
    let samples = task.batch(seed, EVAL_STREAM, n);
    let (mut loss, mut exact, mut hits, mut queries, mut tokens) = (0f64, 0, 0, 0, 0);
    for part in samples.chunks(chunk.max(1)) {
        let batch = Batch::new(part, device)?;
        let r = evaluate_batch(model, &batch)?;
        loss += r.loss.to_scalar::<f32>()? as f64 * r.tokens as f64;
        exact += r.exact;
        hits += r.token_hits;
        queries += r.queries;
        tokens += r.tokens;
    }
    Ok(EvalReport {
        step,
        loss: loss / tokens.max(1) as f64,
        accuracy: exact as f64 / queries.max(1) as f64,
        token_accuracy: hits as f64 / tokens.max(1) as f64,
        queries,
    })
}

/// The batch of step `step` (0-based), with the curriculum applied.
pub fn training_batch(config: &RunConfig, step: usize) -> Vec<Sample> {
    let task = &config.task;
    let c = config.train.curriculum_steps;
    let mut rng = {
        use rand::SeedableRng;
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(config.train.seed);
        r.set_stream(step as u64);
        r
    };
    if step >= c {
        return (0..config.train.batch_size).map(|_| task.sample(&mut rng)).collect();
    }
    use rand::Rng;
    let frac = step as f64 / c as f64;
    let pmax = (task.max_prefix as f64 * frac).round() as usize;
    let gmax = (task.max_gap as f64 * frac).round() as usize;
    let lo = task.n_records.min(2);
    let rmax = lo + ((task.n_records - lo) as f64 * frac).round() as usize;
    (0..config.train.batch_size)
        .map(|_| {
            let records = rng.random_range(lo..=rmax);
            let prefix = rng.random_range(0..=pmax);
            let gaps: Vec<usize> = (0..task.n_records).map(|_| rng.random_range(0..=gmax)).collect();
            task.sample_records(&mut rng, records, prefix, &gaps)
        })
        .collect()
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
                let snapshots = run.file(SNAPSHOT_DIR);
                std::fs::create_dir_all(&snapshots).map_err(|e| Error::io(&snapshots, e))?;
                let snapshot = snapshots.join(snapshot_name(step));
                let hash = save_tensors(&model.tensors(), &snapshot)?;
                write_atomic(&snapshot.with_extension(SNAPSHOT_HASH_EXT), hash.as_bytes())?;
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
    let mut csv = String::from("step,eval_loss,eval_accuracy,eval_token_accuracy\n");
    for e in &metrics.evals {
        csv.push_str(&format!("{},{:.6},{:.6},{:.6}\n", e.step, e.loss, e.accuracy, e.token_accuracy));
    }
    write_atomic(&run.file("curve.csv"), csv.as_bytes())?;
    run.finish(&metrics)?;
    Ok(Outcome::Finished(metrics))
}

/// Timing of training steps (forward, backward, optimiser update) without a run directory.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepBench {
    /// Kernel preset.
    pub preset: String,
    /// Engine timed (`candle` or `fast`).
    pub engine: String,
    /// Timed steps (after `warmup` untimed ones).
    pub steps: usize,
    /// Median seconds per step.
    pub median_s: f64,
    /// Mean seconds per step.
    pub mean_s: f64,
    /// Sequence tokens per step (`batch_size * seq_len`).
    pub tokens_per_step: usize,
    /// Tokens per second at the median step time.
    pub tokens_per_s: f64,
    /// Sequence length of the workload (what the PyTorch twin must match).
    pub seq_len: usize,
    /// Vocabulary size of the workload.
    pub vocab: usize,
    /// Floating-point operations of one step ([`step_flops`]).
    pub flops_per_step: f64,
    /// `flops_per_step / median_s / 1e9`.
    pub gflops: f64,
}

/// Floating-point operations of one training step, counted as 3x the forward matmuls (the
/// backward pass does two matmuls per forward one): per layer and token, the q/k/v/o and
/// SwiGLU projections and the scores and weighted sum over all `T` raw keys (both engines and
/// the PyTorch twin compute the full `T x T` matrix, masked), plus for a compressed preset the
/// compressor of every KV head ([`crate::kernel::forward_flops`]) and the scores and weighted
/// sum over its entries; the LM head at the scored positions. Norms, softmax, RoPE and the
/// optimiser are lower order and not counted.
pub fn step_flops(config: &RunConfig, scored_positions: usize) -> f64 {
    let m = &config.model;
    let (b, t) = (config.train.batch_size as f64, config.task.seq_len() as f64);
    let (d, dh, hq, hkv, ff) = (m.d_model as f64, m.d_head as f64, m.n_head as f64, m.n_kv_head as f64, m.d_ff as f64);
    let proj = 2.0 * d * dh * (2.0 * hq + 2.0 * hkv) + 3.0 * 2.0 * d * ff;
    let mut attn_keys = t;
    let mut per_seq_layer = 0.0;
    if !m.is_full() {
        if let Ok(spec) = crate::kernel::KernelSpec::preset(&m.preset) {
            attn_keys += spec.geometry.num_windows(config.task.seq_len()) as f64;
            if let Ok(dims) = crate::kernel::KernelDims::new(m.d_model, m.d_head) {
                per_seq_layer = hkv * crate::kernel::forward_flops(&spec, dims, config.task.seq_len());
            }
        }
    }
    let attn = 2.0 * 2.0 * attn_keys * dh * hq;
    let forward = m.n_layer as f64 * (b * t * (proj + attn) + b * per_seq_layer)
        + scored_positions as f64 * 2.0 * d * config.task.vocab_size() as f64;
    3.0 * forward
}

/// Times `steps` training steps of `config` after `warmup` untimed ones (batches of steps
/// `0..warmup + steps`, same as training).
pub fn bench_steps(config: &RunConfig, warmup: usize, steps: usize) -> Result<StepBench> {
    config.validate()?;
    crate::limits::check_range("--bench", steps, 1, crate::limits::MAX_BENCH_STEPS)?;
    let device = Device::Cpu;
    let model = Model::new(config, &device)?;
    let mut fast = engine_for(config, &model)?;
    let tc = &config.train;
    let mut opt = AdamW::new(model.store.vars(), tc.beta1, tc.beta2, tc.weight_decay)?;
    let mut times = Vec::with_capacity(steps);
    let mut scored = 0usize;
    for step in 0..warmup + steps {
        let t0 = Instant::now();
        let batch = Batch::new(&training_batch(config, step), &device)?;
        scored = batch.idx.dim(0)?;
        let (_, _, _, grads) = loss_and_grads(&model.decoder, fast.as_mut(), &batch)?;
        let norm = opt.grad_norm(&grads)?;
        let scale = if tc.grad_clip > 0.0 && norm > tc.grad_clip { tc.grad_clip / norm } else { 1.0 };
        opt.step(&grads, tc.lr_at(step), scale)?;
        if step >= warmup {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    let mean_s = times.iter().sum::<f64>() / times.len() as f64;
    times.sort_by(|a, b| a.total_cmp(b));
    let median_s = times[times.len() / 2];
    let tokens_per_step = tc.batch_size * config.task.seq_len();
    let flops_per_step = step_flops(config, scored);
    Ok(StepBench {
        preset: config.model.preset.clone(),
        engine: tc.engine.name().into(),
        steps,
        median_s,
        mean_s,
        tokens_per_step,
        tokens_per_s: tokens_per_step as f64 / median_s,
        seq_len: config.task.seq_len(),
        vocab: config.task.vocab_size(),
        flops_per_step,
        gflops: flops_per_step / median_s / 1e9,
    })
}
