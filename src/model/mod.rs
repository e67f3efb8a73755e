//! Controlled pretraining: a small Qwen3-style decoder whose attention uses any kernel preset,
//! trained on the retrieval task of [`crate::task`].
//!
//! The training loop is an executor over engines, the way argmin keeps a problem apart from
//! its executor: the data ([`batch`]) and the run's record ([`record`]) are plain types, an
//! engine ([`engine::TrainEngine`]) turns a batch into a loss, counts and gradients, and
//! [`train`] drives an engine, the optimiser, an [`Observer`] and the [`checkpoint`]s.
//!
//! Two engines implement every preset `phasekv kernel list` shows: [`fast`] (hand-derived f32
//! forward and backward on the CPU), the default of `phasekv train` and of
//! [`RunConfig::recommended`], and the candle [`decoder`] (autodiff), the reference whose
//! gradients the fast engine is tested against (`tests/train_fast.rs`), chosen explicitly
//! (`--engine candle`, or a config file that names no engine, as the runs committed before
//! the fast engine do). Evaluation runs on the training engine.
//!
//! | file | owns |
//! |---|---|
//! | [`config`] | model, optimiser and run configs with validation; the recorded defaults |
//! | [`batch`] | batches as tensors, the seeded batch of each step with the curriculum |
//! | [`record`] | the run's record: batch scores, step and evaluation reports, metrics |
//! | [`engine`] | the engine trait and the held-out evaluation on an engine |
//! | [`params`] | a seeded parameter store (candle's CPU RNG cannot be seeded) |
//! | [`decoder`] | the decoder on candle (the autodiff engine `candle`, the reference): RMSNorm, GQA with q/k norms and RoPE, SwiGLU, compressed attention |
//! | [`fast`] | the fast engine `fast` (the default): hand-derived f32 forward and backward on the CPU, every preset ([`fast::SUPPORTED`]) |
//! | [`optim`] | AdamW with exposed state (exact resume) and gradient clipping |
//! | [`weights`] | the model's weights: save/load and the provenance check of a finished run |
//! | [`checkpoint`] | checkpoints (read, write, retention, resume) and parameter snapshots |
//! | [`train`] | the executor: validation, engine choice, the training loop, the observer |
//! | [`floor`] | the depth floor: from which depth a scored record reaches the query through closed compressed entries only (`theory/phase-lab.md` §9.2) |
//! | [`extend`] | an extension of a finished run (`theory/phase-lab.md` §8.2): its steps on the same loop, the record kept |
//! | [`bench`] | step timing (`train --bench`) and the FLOP count of a step |
//!
//! Run directories are [`crate::run_dir`]'s. Files of this folder import one another in one
//! direction only (`tests/architecture.rs`); this file is the front door.

pub mod batch;
pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod decoder;
pub mod engine;
pub mod extend;
pub mod fast;
pub mod floor;
pub mod optim;
pub mod params;
pub mod record;
pub mod train;
pub mod weights;

pub use batch::{training_batch, Batch, EVAL_STREAM};
pub use bench::{bench_steps, step_flops, StepBench};
pub use checkpoint::{list_snapshots, snapshot_name, CheckpointIndex, CHECKPOINT_INDEX, SNAPSHOT_DIR};
pub use config::{Engine, Extension, ModelConfig, RunConfig, TrainConfig};
pub use decoder::{BatchLoss, Decoder};
pub use engine::{evaluate, EngineStep, TrainEngine};
pub use extend::extend;
pub use floor::{depth_floor, DepthFloor};
pub use record::{before_extension, BatchScore, EvalReport, ExtensionRecord, Metrics, StepReport};
pub use train::{engine_for, train, validate, Observer, Outcome, Silent, DIVERGENCE_FACTOR};
pub use weights::{load_run, verify_run, Model, VerifiedRun, FINAL_WEIGHTS, SNAPSHOT_HASH_EXT};
