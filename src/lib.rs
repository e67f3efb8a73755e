//! # phasekv
//!
//! A verification and simulation suite for *phase sensitivity* in chunked KV-cache compression.
//!
//! Crate map (data flows one way: geometry <- kernel <- model <- analysis and theory <- figures <-
//! lab <- reproduce <- report; the `phasekv` binary sits on top, only parses, calls and prints,
//! and is the only place that prints). The floors, drawn from the code's own imports, are checked
//! by `tests/architecture.rs`: error, numeric, limits, geometry, stop <- run_dir, task <- kernel <-
//! conformance, model <- analysis <- theory <- figures <- lab <- reproduce <- report <- cli.
//!
//! | module | owns |
//! |---|---|
//! | [`error`] | the one error enum |
//! | [`geometry`] | windows, phases, multiplicity, visibility, entry positions, the local raw window: the only place those formulas live |
//! | [`numeric`] | the scalar formulas every layer shares: softmax and log-sum-exp over a slice, the one f32 GEMM of the CPU fast paths, the shipped cache formats (bottom layer: imports nothing from the crate) |
//! | [`kernel`] | kernel specs (the preset registry and the JSON spec language), the f64 reference, the candle implementation, streaming, compressed attention: the kernel only |
//! | [`conformance`] | what checks a kernel: the invariant harness K1-K14 (also for a kernel in another process), mutants, dumps and their validation, the kernel bench |
//! | [`analysis`] | the phase lab: padding protocols, phase statistics and the pre-registered phase test, verdict states, evaluation and knockouts, gate preferences, the JSONL audit |
//! | [`limits`] | upper bounds on every size a user gives, and the one bounded file read |
//! | [`figures`] | every plot, drawn from result data: chart helpers (line chart, category grid, scatter; SVG + PNG), lab figures, theory figures |
//! | [`lab`] | the phase lab on a run directory: evaluation, knockouts, gates, written as data and figures |
//! | [`reproduce`] | the reproduction: plan files and sweeps, units (kernels, theory, one per model), shards, resume, Slurm array scripts |
//! | [`theory`] | the idealized induction task, Theorem 1 (oracle, argmin, critical-point classification) and Theorem 2 (gradient flow) |
//! | [`report`] | the claims ledger: collected from run data, one module per claim, rendered as Markdown, JSON and figures; the one-page kernel study (`kernel study`) |
//! | [`stop`] | a stop request (a signal the CLI caught) passed down to long work, which ends with `Error::Interrupted` before writing |
//! | [`run_dir`] | run directories: config, results, environment; a finished run is never overwritten |
//! | [`task`] | the synthetic retrieval task: seeded generator, per-sample records with positions |
//! | [`model`] | the small decoder with compressed attention (its kernel resolved once, `ModelConfig::kernel`), the training engines, training, checkpoints (run directories are [`run_dir`]'s) |

#![warn(missing_docs)]

pub mod analysis;
pub mod conformance;
pub mod error;
pub mod figures;
pub mod geometry;
pub mod kernel;
pub mod lab;
pub mod limits;
pub mod model;
pub mod numeric;
pub mod report;
pub mod reproduce;
pub mod run_dir;
pub mod stop;
pub mod task;
pub mod theory;

pub use error::{Error, Result};
