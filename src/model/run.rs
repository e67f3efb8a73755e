//! Run directories of training runs: the crate's one run-directory type, [`crate::run_dir::RunDir`],
//! re-exported under the path the model code and its tests use. Its finished marker is
//! `metrics.json` ([`METRICS_FILE`]).

pub use crate::run_dir::{
    atomic_write as write_atomic, git_hash, write_json_atomic, RunDir, RunStart, CONFIG_FILE, ENVIRONMENT_FILE,
    LOG_FILE, METRICS_FILE,
};
