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

/// An open (unfinished) run directory, holding its lock ([`DirLock`]) while any clone lives.
#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
    _lock: std::sync::Arc<DirLock>,
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
    /// Errors with [`Error::FinishedRun`] if the directory holds a finished run, and with
    /// [`Error::Busy`] if another process has it open.
    pub fn create(path: impl AsRef<Path>, seed: u64, command: &str) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if path.join(DONE_MARKER).exists() {
            return Err(Error::FinishedRun { path });
        }
        let lock = DirLock::shared(&path)?;
        if path.join(DONE_MARKER).exists() {
            return Err(Error::FinishedRun { path });
        }
        let dir = RunDir { path, _lock: lock };
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

/// A temporary name next to `path`, unique per process and per call (`.<pid>-<n>.tmp.<name>`,
/// so it keeps the extension, which the PNG writer goes by): two writers never share one.
/// The one temporary-name scheme of the crate (JSON, safetensors, figures).
pub fn temp_sibling(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "file".into());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{}-{n}.tmp.{name}", std::process::id()))
}

/// Moves a finished temporary file (from [`temp_sibling`]) onto `path`, removing it on failure.
pub fn persist(tmp: &Path, path: &Path) -> Result<()> {
    std::fs::rename(tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        Error::io(path, e)
    })
}

/// Write `bytes` to `path` through a temporary sibling file (unique to this writer), flushed
/// to disk, and a rename: an interrupted run never leaves a half-written file. The one atomic
/// write of the crate. Files get the ordinary mode (0666 less the umask).
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = temp_sibling(path);
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(&tmp, e));
    }
    persist(&tmp, path)
}

/// Like [`atomic_write`], but never replaces an existing `path`: the finished temporary file
/// is hard-linked into place, which fails if `path` exists (also when another writer created
/// it meanwhile), so results written this way are never overwritten.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = temp_sibling(path);
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    written.map_err(|e| Error::io(path, e))
}

/// Name of the lock file of a directory with one writer.
pub const LOCK_FILE: &str = ".lock";

/// An advisory lock on a directory (`flock` on its `.lock` file, which records the holder's
/// pid): one writer per run directory. Released when dropped or when the process ends, even
/// by `kill -9`.
#[derive(Debug)]
pub struct DirLock {
    _file: std::fs::File,
}

impl DirLock {
    /// Creates `dir` if needed and takes its lock, or fails at once with [`Error::Busy`]
    /// naming the pid that holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        use std::io::Write;
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = dir.join(LOCK_FILE);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let pid = std::fs::read_to_string(&path).unwrap_or_default();
                let holder = match pid.trim().parse::<u32>() {
                    Ok(pid) => format!("pid {pid}"),
                    Err(_) => "another process".to_string(),
                };
                return Err(Error::Busy { path: dir.to_path_buf(), holder });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
        }
        file.set_len(0).map_err(|e| Error::io(&path, e))?;
        writeln!(file, "{}", std::process::id()).map_err(|e| Error::io(&path, e))?;
        Ok(DirLock { _file: file })
    }

    /// The lock of `dir` for this process: the one this process already holds (a run
    /// directory reopened by the same writer, e.g. a resume in the same process), else a newly
    /// acquired one ([`DirLock::acquire`]). Other processes are refused either way.
    pub fn shared(dir: &Path) -> Result<std::sync::Arc<DirLock>> {
        use std::collections::HashMap;
        use std::sync::{Arc, Mutex, OnceLock, Weak};
        static HELD: OnceLock<Mutex<HashMap<PathBuf, Weak<DirLock>>>> = OnceLock::new();
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let key = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
        let mut held = HELD.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lock) = held.get(&key).and_then(Weak::upgrade) {
            return Ok(lock);
        }
        let lock = Arc::new(DirLock::acquire(dir)?);
        held.retain(|_, w| w.strong_count() > 0);
        held.insert(key, Arc::downgrade(&lock));
        Ok(lock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_directory_is_refused_naming_the_pid_and_freed_on_drop() {
        let dir = std::env::temp_dir().join(format!("phasekv-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let held = DirLock::acquire(&dir).unwrap();
        let e = DirLock::acquire(&dir).unwrap_err().to_string();
        assert!(e.contains(&format!("in use by pid {}", std::process::id())), "{e}");
        drop(held);
        let a = DirLock::shared(&dir).unwrap();
        let b = DirLock::shared(&dir).unwrap();
        assert!(std::sync::Arc::ptr_eq(&a, &b), "the same process shares its lock");
        assert!(DirLock::acquire(&dir).is_err());
        drop((a, b));
        DirLock::acquire(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_new_never_replaces_a_file() {
        let dir = std::env::temp_dir().join(format!("phasekv-write-new-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("out.jsonl");
        write_new(&f, b"first").unwrap();
        let e = write_new(&f, b"second").unwrap_err().to_string();
        assert!(e.contains("out.jsonl") && e.contains("exists"), "{e}");
        assert_eq!(std::fs::read(&f).unwrap(), b"first");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "temporary file left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporary_names_are_unique_and_keep_the_extension() {
        let p = Path::new("/x/fig.png");
        let (a, b) = (temp_sibling(p), temp_sibling(p));
        assert_ne!(a, b);
        assert!(a.to_string_lossy().ends_with(".png") && a.file_name().unwrap().to_string_lossy().starts_with('.'));
    }
}
