//! Run directories: one directory per run holding `config.json`, `environment.json` (git hash,
//! seed, preset, versions), the training log `log.jsonl`, checkpoints, and `metrics.json`,
//! whose presence marks the run as finished. A finished run is never overwritten
//! ([`crate::Error::FinishedRun`]); an unfinished one with the same config is resumed; one with a
//! different config is an error. Every file is written to a temporary name and renamed.

pub use crate::run_dir::{atomic_write as write_atomic, git_hash, write_json_atomic};
use crate::{Error, Result};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// File that marks a finished run.
pub const METRICS_FILE: &str = "metrics.json";
/// The run's configuration.
pub const CONFIG_FILE: &str = "config.json";
/// Environment: git hash, seed, preset, versions.
pub const ENVIRONMENT_FILE: &str = "environment.json";
/// Training log, one JSON object per line.
pub const LOG_FILE: &str = "log.jsonl";

/// How [`RunDir::open`] found the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStart {
    /// A new run (the directory was created or was empty of a run).
    Fresh,
    /// An unfinished run with the same configuration: resume it.
    Resume,
}

/// An open run directory. One opened for writing ([`RunDir::open`]) holds the directory's
/// lock ([`crate::run_dir::DirLock`]) for as long as any clone of it lives.
#[derive(Clone, Debug)]
pub struct RunDir {
    path: PathBuf,
    _lock: Option<std::sync::Arc<crate::run_dir::DirLock>>,
}

impl RunDir {
    /// Opens `path` for a run with `config` (any serialisable value, compared as JSON):
    /// a finished run is [`Error::FinishedRun`]; an unfinished run with an equal config is
    /// resumed; with a different config it is an error naming `--out`; otherwise the directory
    /// is created and `config.json` and `environment.json` (with `environment` merged in) are
    /// written.
    ///
    /// A second process opening the same directory while the first holds it gets
    /// [`Error::Busy`] naming the first one's pid.
    pub fn open<C: Serialize>(path: &Path, config: &C, environment: serde_json::Value) -> Result<(RunDir, RunStart)> {
        if path.join(METRICS_FILE).exists() {
            return Err(Error::FinishedRun { path: path.to_path_buf() });
        }
        let lock = crate::run_dir::DirLock::shared(path)?;
        let dir = RunDir { path: path.to_path_buf(), _lock: Some(lock) };
        // Checked again under the lock: another writer may have finished it meanwhile.
        if dir.is_finished() {
            return Err(Error::FinishedRun { path: path.to_path_buf() });
        }
        let want = serde_json::to_value(config).map_err(|e| Error::invalid("config", e.to_string()))?;
        let cfg_path = dir.file(CONFIG_FILE);
        if cfg_path.exists() {
            let text = crate::limits::read_text(&cfg_path, crate::limits::MAX_JSON_BYTES)?;
            let have: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| Error::File { path: cfg_path.clone(), reason: format!("not valid JSON: {e}") })?;
            if have != want {
                return Err(Error::invalid(
                    "--out",
                    format!(
                        "{} holds an unfinished run with a different config; resume it with the \
                         same config or choose another directory",
                        path.display()
                    ),
                ));
            }
            return Ok((dir, RunStart::Resume));
        }
        std::fs::create_dir_all(path).map_err(|e| Error::io(path, e))?;
        let mut env = serde_json::json!({
            "git_hash": git_hash(),
            "phasekv_version": env!("CARGO_PKG_VERSION"),
            "os": std::env::consts::OS,
            "arch": std::env::consts::ARCH,
            "rayon_num_threads": std::env::var("RAYON_NUM_THREADS").ok(),
            "candle_num_threads": std::env::var("CANDLE_NUM_THREADS").ok(),
            "created_unix_s": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        });
        if let (Some(obj), serde_json::Value::Object(extra)) = (env.as_object_mut(), environment) {
            obj.extend(extra);
        }
        write_json_atomic(&dir.file(ENVIRONMENT_FILE), &env)?;
        // config.json last: its presence is what marks a started run.
        write_json_atomic(&cfg_path, &want)?;
        Ok((dir, RunStart::Fresh))
    }

    /// A handle on an existing directory (reading logs and metrics; no checks).
    pub fn open_existing(path: &Path) -> RunDir {
        RunDir { path: path.to_path_buf(), _lock: None }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A file inside the run directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Whether `metrics.json` exists.
    pub fn is_finished(&self) -> bool {
        self.file(METRICS_FILE).exists()
    }

    /// Writes `metrics.json` (atomically); the run is finished from then on.
    pub fn finish<T: Serialize>(&self, metrics: &T) -> Result<()> {
        write_json_atomic(&self.file(METRICS_FILE), metrics)
    }

    /// Appends one JSON object as a line of `log.jsonl`.
    pub fn append_log<T: Serialize>(&self, line: &T) -> Result<()> {
        let path = self.file(LOG_FILE);
        let text =
            serde_json::to_string(line).map_err(|e| Error::File { path: path.clone(), reason: e.to_string() })?;
        let mut f =
            std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(|e| Error::io(&path, e))?;
        writeln!(f, "{text}").map_err(|e| Error::io(&path, e))
    }

    /// Keeps only the log lines whose `"step"` is at most `step` (after a resume, the lines
    /// written after the last checkpoint belong to steps that will be redone).
    pub fn truncate_log(&self, step: usize) -> Result<()> {
        let path = self.file(LOG_FILE);
        if !path.exists() {
            return Ok(());
        }
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let mut kept = String::new();
        for line in text.lines() {
            let v: serde_json::Value = match serde_json::from_str(line) {
                Ok(v) => v,
                Err(_) => continue, // a line cut by a crash
            };
            if v.get("step").and_then(|s| s.as_u64()).unwrap_or(0) as usize <= step {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        write_atomic(&path, kept.as_bytes())
    }

    /// The parsed lines of `log.jsonl` (empty when there is none).
    pub fn read_log(&self) -> Result<Vec<serde_json::Value>> {
        let path = self.file(LOG_FILE);
        if !path.exists() {
            return Ok(Vec::new());
        }
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
    }
}
