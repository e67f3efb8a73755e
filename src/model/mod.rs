//! Controlled pretraining: a small Qwen3-style decoder whose attention uses any kernel preset,
//! trained on the retrieval task of [`crate::task`].
//!
//! | file | owns |
//! |---|---|
//! | [`config`] | model, optimiser and run configs with validation; the recorded defaults |
//! | [`params`] | a seeded parameter store (candle's CPU RNG cannot be seeded) |
//! | [`decoder`] | the decoder: RMSNorm, GQA with q/k norms and RoPE, SwiGLU, compressed attention |
//! | [`fast`] | the fast engine: hand-derived f32 forward and backward on the CPU (`full`) |
//! | [`optim`] | AdamW with exposed state (exact resume) and gradient clipping |
//! | [`run`] | run directories: config, environment, log, metrics; never overwrite a finished run |
//! | [`batch`] | batches as tensors, one step's loss and gradients on either engine, held-out evaluation |
//! | [`weights`] | the model's weights: save/load, checkpoints, snapshots, the provenance check |
//! | [`bench`] | step timing (`train --bench`) and the FLOP count of a step |
//! | [`train`] | the training loop, its reports and metrics, the observer trait |

pub mod batch;
pub mod bench;
pub mod config;
pub mod decoder;
pub mod fast;
pub mod optim;
pub mod params;
pub mod run;
pub mod train;
pub mod weights;

pub use config::{Engine, ModelConfig, RunConfig, TrainConfig};
pub use decoder::Decoder;
pub use train::{train, EvalReport, Metrics, Model, Observer, Outcome, StepReport};
