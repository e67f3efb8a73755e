//! The phase lab on a trained run directory: evaluation under both padding protocols,
//! knockout maps and gate preferences, each written into the run directory as JSON (the data),
//! CSV and SVG+PNG figures (what each measures: `theory/phase-lab.md`). A result already on disk with the same settings is reused, and one
//! with other settings is never overwritten (an error names the file).
//!
//! Files, in the run directory:
//!
//! | file | written by |
//! |---|---|
//! | `eval-<protocol>.json`, `.csv`, `-outcomes.jsonl`, `.svg`, `.png` | [`eval_run`] (older results: [`outcomes::upgrade_run`] adds the issue-31 columns) |
//! | `near-<protocol>.json`, `.csv`, `-outcomes.jsonl`, `.svg`, `.png` | [`eval_run`] on the near-query families ([`Scope::Near`], v3 only) |
//! | `cycle-<protocol>-layer<L>.json`, `.csv` | [`cycle_run`] |
//! | `knockout-<protocol>.json`, `.csv`, `.svg`, `.png` | [`knockout_run`] |
//! | `gates.json`, `gates.csv`, `gates-{scatter,trajectory,profile}.{svg,png}` | [`gates_run`] |
//!
//! Each writer records what it wrote in the run's provenance manifest
//! ([`crate::run_dir::manifest`]); [`load`] is the one loader that reads a run's files back,
//! each checked against the others.

mod audit;
mod cache;
mod cycle_run;
mod eval_run;
mod gates_run;
mod knockout_run;
pub mod load;
pub mod outcomes;
mod results;
mod rows;
mod scope;
mod settings;
mod work;

pub use audit::{audit_analyze, AuditAnalysis};
pub use cache::read_json;
pub use cycle_run::{cycle_run, cycle_stem, run_window};
pub use eval_run::eval_run;
pub use gates_run::gates_run;
pub use knockout_run::{knockout_file, knockout_run, knockout_stem};
pub use results::{CycleRunResult, EvalResult, GatesResult, KnockoutResult};
pub use scope::{Scope, NEAR_QUERY_PER_GROUP};
pub use settings::{LabSettings, V3_EVAL_PER_GROUP};
pub use work::{check_lab_work, check_samples, forward_work};
