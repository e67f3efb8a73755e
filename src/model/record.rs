//! The run's record: what one batch scores ([`BatchScore`]), what the loop reports after each
//! step ([`StepReport`]) and each evaluation ([`EvalReport`]), and what a finished run keeps
//! ([`Metrics`], and its learning curve as CSV rows). Plain data, written to the log,
//! `checkpoint.json` and `metrics.json`; nothing here computes a model.

use super::config::Extension;
use serde::{Deserialize, Serialize};

/// Loss and exact-match counts of a model on one batch, as either engine computes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchScore {
    /// Mean cross-entropy over answer tokens.
    pub loss: f64,
    /// Queries whose every answer token is the argmax (= greedy exact match).
    pub exact: usize,
    /// Answer tokens that are the argmax.
    pub token_hits: usize,
    /// Queries.
    pub queries: usize,
    /// Answer tokens.
    pub tokens: usize,
}

impl BatchScore {
    /// Exact-match counts from per-token hits grouped by query (`hits.len() / queries`
    /// consecutive tokens per query).
    pub fn from_hits(loss: f64, hits: &[bool], queries: usize) -> Self {
        let per = (hits.len() / queries.max(1)).max(1);
        BatchScore {
            loss,
            exact: hits.chunks(per).filter(|c| c.iter().all(|&h| h)).count(),
            token_hits: hits.iter().filter(|&&h| h).count(),
            queries,
            tokens: hits.len(),
        }
    }
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

impl EvalReport {
    /// The report of batch scores summed over the held-out set (losses weighted by tokens).
    pub fn from_scores(step: usize, scores: &[BatchScore]) -> Self {
        let (mut loss, mut exact, mut hits, mut queries, mut tokens) = (0f64, 0, 0, 0, 0);
        for s in scores {
            loss += s.loss * s.tokens as f64;
            exact += s.exact;
            hits += s.token_hits;
            queries += s.queries;
            tokens += s.tokens;
        }
        EvalReport {
            step,
            loss: loss / tokens.max(1) as f64,
            accuracy: exact as f64 / queries.max(1) as f64,
            token_accuracy: hits as f64 / tokens.max(1) as f64,
            queries,
        }
    }
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
    /// The run's identity: [`crate::model::RunConfig::identity`] of the config it was trained
    /// with (absent in runs from before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// Content hash of `model.safetensors` as saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_hash: Option<String>,
    /// The engine that computed the gradients and, since evaluation runs on the training
    /// engine, the evaluations (`candle` or `fast`; absent in runs from before it was recorded,
    /// which are all `candle`). Runs trained on `fast` before evaluation moved to the training
    /// engine were evaluated by candle (`theory/training.md` §5c).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// The extensions the run has had ([`crate::model::extend()`]), in order; absent (empty) in a
    /// run that has had none, so every run from before extensions reads as it did. With
    /// extensions, `steps`, `final_eval`, `evals` and the hashes are the extended run's and
    /// `config.json` keeps the recipe's steps ([`Metrics::recipe_steps`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<ExtensionRecord>,
}

/// One extension of a run as `metrics.json` records it: its schedule, the held-out accuracy
/// before and after it, and where the run's record from before it is kept (the files it
/// replaced, copied byte for byte, never overwritten).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ExtensionRecord {
    /// The schedule (`index`, `start`, `end`, `warmup_steps`, `peak_lr`, `final_lr`).
    #[serde(flatten)]
    pub schedule: Extension,
    /// Held-out exact match at step `start` (the final evaluation before the extension).
    pub accuracy_before: f64,
    /// Held-out exact match at step `end`.
    pub accuracy_after: f64,
    /// The run's `metrics.json` from before the extension, kept under this name.
    pub metrics_before: String,
    /// The run's `model.safetensors` from before the extension, kept under this name.
    pub weights_before: String,
}

/// Name under which extension `index` keeps the run's file `name` from before it
/// (`metrics.json` -> `metrics.before-extension-1.json`).
pub fn before_extension(name: &str, index: usize) -> String {
    match name.rsplit_once('.') {
        Some((stem, ext)) => format!("{stem}.before-extension-{index}.{ext}"),
        None => format!("{name}.before-extension-{index}"),
    }
}

/// One row of a run's `curve.csv` (floats with six decimals, as the committed runs have them).
#[derive(Serialize, Default)]
pub struct CurveCsvRow {
    step: usize,
    eval_loss: String,
    eval_accuracy: String,
    eval_token_accuracy: String,
}

impl Metrics {
    /// Extensions the run has had: the one count the training-success rule reads
    /// ([`crate::analysis::training::run_outcome`]).
    pub fn extension_count(&self) -> usize {
        self.extensions.len()
    }

    /// The recipe's steps (`config.json`'s `train.steps`): `steps` less every extension's.
    pub fn recipe_steps(&self) -> usize {
        self.steps.saturating_sub(self.extensions.iter().map(|e| e.schedule.steps()).sum::<usize>())
    }

    /// The learning curve as the rows of `curve.csv`, one per evaluation.
    pub fn curve_rows(&self) -> Vec<CurveCsvRow> {
        self.evals
            .iter()
            .map(|e| CurveCsvRow {
                step: e.step,
                eval_loss: format!("{:.6}", e.loss),
                eval_accuracy: format!("{:.6}", e.accuracy),
                eval_token_accuracy: format!("{:.6}", e.token_accuracy),
            })
            .collect()
    }
}

#[cfg(test)]
mod curve_csv_tests {
    /// Every committed run's `curve.csv` is what [`super::Metrics::curve_rows`] makes of its
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
                let bytes = crate::run_dir::csv_bytes(&metrics.curve_rows()).unwrap();
                assert_eq!(bytes, std::fs::read(&c).unwrap(), "{c:?}");
                checked += 1;
            }
        }
        assert!(checked >= 6, "only {checked} committed curves found");
    }
}
