//! Run directories, reusable by every experiment: one directory per run holding
//! `config.json`, result files, `environment.json` (git hash, crate version, seed, timestamp)
//! and, once finished, a `DONE` marker. Every write goes to a temporary file that is then
//! renamed, so an interrupted run never leaves a half-written file. A finished run is never
//! overwritten: opening it again returns [`Error::FinishedRun`].

use crate::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Name of the marker file of a finished run.
pub const DONE_MARKER: &str = "DONE";

/// An open (unfinished) run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
}

/// What `environment.json` records.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    /// `git rev-parse HEAD`, or `"unknown"`.
    pub git_hash: String,
    /// Crate version.
    pub crate_version: String,
    /// Seed of the run.
    pub seed: u64,
    /// Seconds since the Unix epoch when the run was opened.
    pub timestamp_unix: u64,
    /// The command line or other description supplied by the caller.
    pub command: String,
}

/// The git commit of the working directory, or `"unknown"` (with `-dirty` when there are
/// uncommitted changes to tracked files).
pub fn git_hash() -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match run(&["rev-parse", "HEAD"]) {
        Some(h) if !h.is_empty() => {
            let dirty = run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{h}-dirty")
            } else {
                h
            }
        }
        _ => "unknown".into(),
    }
}

impl RunDir {
    /// Create (or reopen an unfinished) run directory and write `environment.json`.
    /// Errors with [`Error::FinishedRun`] if the directory holds a finished run.
    pub fn create(path: impl AsRef<Path>, seed: u64, command: &str) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if path.join(DONE_MARKER).exists() {
            return Err(Error::FinishedRun { path });
        }
        std::fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        let dir = RunDir { path };
        let env = Environment {
            git_hash: git_hash(),
            crate_version: env!("CARGO_PKG_VERSION").to_string(),
            seed,
            timestamp_unix: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            command: command.to_string(),
        };
        dir.write_json("environment.json", &env)?;
        Ok(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Write `config.json`.
    pub fn write_config<T: Serialize>(&self, config: &T) -> Result<()> {
        self.write_json("config.json", config)
    }

    /// Write `name` as pretty JSON (temporary file, then rename).
    pub fn write_json<T: Serialize>(&self, name: &str, value: &T) -> Result<()> {
        let text = serde_json::to_string_pretty(value)
            .map_err(|e| Error::File { path: self.file(name), reason: format!("cannot serialise: {e}") })?;
        self.write_bytes(name, text.as_bytes())
    }

    /// Write raw bytes to `name` (temporary file, then rename).
    pub fn write_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        atomic_write(&self.file(name), bytes)
    }

    /// Mark the run finished (`DONE`); afterwards [`RunDir::create`] refuses the directory.
    pub fn finish(self) -> Result<PathBuf> {
        self.write_bytes(DONE_MARKER, b"finished\n")?;
        Ok(self.path)
    }
}

/// Pretty JSON of `value` (and a final newline), written with [`atomic_write`].
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::File { path: path.to_path_buf(), reason: format!("cannot serialise: {e}") })?;
    atomic_write(path, format!("{text}\n").as_bytes())
}

/// Write `bytes` to `path` through a temporary sibling file, flushed to disk, and a rename: an
/// interrupted run never leaves a half-written file. The one atomic write of the crate.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "file".into());
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        f.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
        f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}
