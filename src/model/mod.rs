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
//! | [`train`] | the training loop, evaluation, checkpoints, the observer trait |

pub mod config;
pub mod decoder;
pub mod fast;
pub mod optim;
pub mod params;
pub mod run;
pub mod train;

pub use config::{Engine, ModelConfig, RunConfig, TrainConfig};
pub use decoder::Decoder;
pub use train::{train, EvalReport, Metrics, Model, Observer, Outcome, StepReport};
