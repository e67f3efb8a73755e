//! Run directories, the one run-directory protocol of the crate: one directory per run holding
//! `config.json`, result files, `environment.json` (git hash, crate version, seed, timestamp),
//! for training runs the log `log.jsonl` and checkpoints, and, once finished, `metrics.json`.
//! Every write goes to a temporary file that is then renamed, so an interrupted run never
//! leaves a half-written file. A finished run is never overwritten: opening it again returns
//! [`Error::FinishedRun`]. Tables are written with [`write_csv_atomic`].

pub mod manifest;

use crate::{Error, Result};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// File whose presence marks a finished run: `metrics.json`. This is the marker because every
/// committed run directory (`reports/runs/*`, `theory/training-runs/*`) is a finished training
/// run that holds a `metrics.json` and none holds a `DONE` file, so with this marker every one
/// of them still reads as finished (and stays protected from being overwritten). Runs with no
/// training metrics (theory runs) finish with a small [`Finished`] record under this name.
pub const METRICS_FILE: &str = "metrics.json";
/// The run's configuration.
pub const CONFIG_FILE: &str = "config.json";
/// Environment: git hash, seed, versions.
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

/// A run directory (the only run-directory type). One
/// opened for writing ([`RunDir::create`], [`RunDir::open`]) holds the directory's lock
/// ([`DirLock`]) for as long as any clone of it lives; one from [`RunDir::open_existing`] only
/// reads. The run is finished once [`METRICS_FILE`] exists.
#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
    _lock: Option<std::sync::Arc<DirLock>>,
}

/// What `environment.json` records for runs opened with [`RunDir::create`].
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

/// What [`RunDir::finish`] writes to [`METRICS_FILE`] for a run without training metrics.
#[derive(Debug, Clone, Serialize)]
pub struct Finished {
    /// Always `true`.
    pub finished: bool,
    /// Seconds since the Unix epoch when the run finished.
    pub finished_unix_s: u64,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The git commit the crate was built from, with `-dirty` when its sources (`src/`,
/// `Cargo.toml`, `Cargo.lock`, `build.rs`) had uncommitted changes, or `"unknown"` when it was
/// built outside a git checkout. Fixed at build time by `build.rs`: it names the code that runs,
/// whatever the working tree holds while it runs.
pub fn git_hash() -> String {
    env!("PHASEKV_GIT_HASH").to_string()
}

impl RunDir {
    /// Takes the lock of `path` for writing, refusing a finished run (checked before and again
    /// under the lock: another writer may have finished it meanwhile).
    fn lock_unfinished(path: &Path) -> Result<RunDir> {
        if path.join(METRICS_FILE).exists() {
            return Err(Error::FinishedRun { path: path.to_path_buf() });
        }
        let lock = DirLock::shared(path)?;
        let dir = RunDir { path: path.to_path_buf(), _lock: Some(lock) };
        if dir.is_finished() {
            return Err(Error::FinishedRun { path: path.to_path_buf() });
        }
        Ok(dir)
    }

    /// Create (or reopen an unfinished) run directory and write `environment.json`.
    /// Errors with [`Error::FinishedRun`] if the directory holds a finished run, and with
    /// [`Error::Busy`] if another process has it open.
    pub fn create(path: impl AsRef<Path>, seed: u64, command: &str) -> Result<Self> {
        let dir = RunDir::lock_unfinished(path.as_ref())?;
        let env = Environment {
            git_hash: git_hash(),
            crate_version: env!("CARGO_PKG_VERSION").to_string(),
            seed,
            timestamp_unix: unix_now(),
            command: command.to_string(),
        };
        dir.write_json(ENVIRONMENT_FILE, &env)?;
        Ok(dir)
    }

    /// Opens `path` for a run with `config` (any serialisable value, compared as JSON):
    /// a finished run is [`Error::FinishedRun`]; an unfinished run with an equal config is
    /// resumed; with a different config it is an error naming `--out`; otherwise the directory
    /// is created and `config.json` and `environment.json` (with `environment` merged in) are
    /// written.
    ///
    /// A second process opening the same directory while the first holds it gets
    /// [`Error::Busy`] naming the first one's pid.
    pub fn open<C: Serialize>(path: &Path, config: &C, environment: serde_json::Value) -> Result<(RunDir, RunStart)> {
        let dir = RunDir::lock_unfinished(path)?;
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
            "created_unix_s": unix_now(),
        });
        if let (Some(obj), serde_json::Value::Object(extra)) = (env.as_object_mut(), environment) {
            obj.extend(extra);
        }
        write_json_atomic(&dir.file(ENVIRONMENT_FILE), &env)?;
        // config.json last: its presence is what marks a started run.
        write_json_atomic(&cfg_path, &want)?;
        Ok((dir, RunStart::Fresh))
    }

    /// Takes the lock of the finished run in `path` to continue it (an extension of its
    /// training, which keeps the files it replaces under new names): an error naming the path
    /// when it holds no finished run, [`Error::Busy`] when another process has it open.
    pub fn lock_finished(path: &Path) -> Result<RunDir> {
        let not_finished = || Error::File {
            path: path.join(METRICS_FILE),
            reason: "missing: only a finished run can be extended (finish its training first)".into(),
        };
        if !path.join(METRICS_FILE).exists() {
            return Err(not_finished());
        }
        let dir = RunDir { path: path.to_path_buf(), _lock: Some(DirLock::shared(path)?) };
        if !dir.is_finished() {
            return Err(not_finished());
        }
        Ok(dir)
    }

    /// A handle on an existing directory (reading logs and metrics; no lock, no checks).
    pub fn open_existing(path: &Path) -> RunDir {
        RunDir { path: path.to_path_buf(), _lock: None }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Whether the run is finished ([`METRICS_FILE`] exists).
    pub fn is_finished(&self) -> bool {
        self.file(METRICS_FILE).exists()
    }

    /// Write `config.json`.
    pub fn write_config<T: Serialize>(&self, config: &T) -> Result<()> {
        self.write_json(CONFIG_FILE, config)
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

    /// Marks a run without training metrics finished (a [`Finished`] record in
    /// [`METRICS_FILE`]); afterwards [`RunDir::create`] and [`RunDir::open`] refuse the
    /// directory.
    pub fn finish(self) -> Result<PathBuf> {
        self.finish_with_metrics(&Finished { finished: true, finished_unix_s: unix_now() })?;
        Ok(self.path)
    }

    /// Writes `metrics` to [`METRICS_FILE`] (atomically); the run is finished from then on.
    pub fn finish_with_metrics<T: Serialize>(&self, metrics: &T) -> Result<()> {
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
        atomic_write(&path, kept.as_bytes())
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

/// A table as CSV (the `csv` crate, one serde row per record, the header from the row type's
/// field names, also when there are no rows), written with [`atomic_write`]. The one CSV
/// writer of the crate; fields that need a fixed float format are `String`s in the row type.
pub fn write_csv_atomic<R: Serialize + Default>(path: &Path, rows: &[R]) -> Result<()> {
    atomic_write(path, &csv_bytes(rows).map_err(|reason| Error::File { path: path.to_path_buf(), reason })?)
}

/// The bytes [`write_csv_atomic`] writes.
pub fn csv_bytes<R: Serialize + Default>(rows: &[R]) -> std::result::Result<Vec<u8>, String> {
    let fail = |e: csv::Error| format!("cannot write CSV: {e}");
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
    if rows.is_empty() {
        // The header alone: serialise a default row and keep only its first line.
        w.serialize(R::default()).map_err(fail)?;
        let bytes = w.into_inner().map_err(|e| format!("cannot write CSV: {e}"))?;
        let end = bytes.iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| i + 1);
        return Ok(bytes[..end].to_vec());
    }
    for r in rows {
        w.serialize(r).map_err(fail)?;
    }
    w.into_inner().map_err(|e| format!("cannot write CSV: {e}"))
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

/// A path this writer created and owns until it is kept: removed when dropped (a file, or a
/// directory with everything in it), so every error path, a `?` or a panic's unwinding, leaves
/// nothing behind. The one guard of the crate's temporary files and directories.
#[derive(Debug)]
pub struct Owned {
    path: PathBuf,
    dir: bool,
    kept: bool,
}

impl Owned {
    /// A temporary file next to `dest` ([`temp_sibling`]), created empty and new (never a
    /// file another writer made).
    pub fn temp_file(dest: &Path) -> Result<(Owned, std::fs::File)> {
        let path = temp_sibling(dest);
        let file =
            std::fs::OpenOptions::new().write(true).create_new(true).open(&path).map_err(|e| Error::io(&path, e))?;
        Ok((Owned { path, dir: false, kept: false }, file))
    }

    /// A temporary name next to `dest` for a writer that creates the file itself (a plotting
    /// backend); whatever it leaves there is removed unless persisted.
    pub fn temp_name(dest: &Path) -> Owned {
        Owned { path: temp_sibling(dest), dir: false, kept: false }
    }

    /// Creates directory `path`, which must not exist (fails if another writer made it
    /// meanwhile): it and everything written in it are removed unless kept.
    pub fn new_dir(path: &Path) -> Result<Owned> {
        std::fs::create_dir(path).map_err(|e| Error::io(path, e))?;
        Ok(Owned { path: path.to_path_buf(), dir: true, kept: false })
    }

    /// The path owned.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the path (a directory written whole).
    pub fn keep(mut self) -> PathBuf {
        self.kept = true;
        std::mem::take(&mut self.path)
    }

    /// Renames the finished temporary onto `dest`; on failure it is removed and the error
    /// names `dest`.
    pub fn persist(mut self, dest: &Path) -> Result<()> {
        std::fs::rename(&self.path, dest).map_err(|e| Error::io(dest, e))?;
        self.kept = true;
        Ok(())
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if !self.kept {
            let _ = if self.dir { std::fs::remove_dir_all(&self.path) } else { std::fs::remove_file(&self.path) };
        }
    }
}

/// Write `bytes` to `path` through a temporary sibling file (unique to this writer), flushed
/// to disk, and a rename: an interrupted run never leaves a half-written file, and a failed
/// write (a full disk) leaves no temporary file. The one atomic write of the crate. Files get
/// the ordinary mode (0666 less the umask). Errors name `path`.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let (tmp, mut f) = Owned::temp_file(path).map_err(|e| renamed(e, path))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| Error::io(path, e))?;
    tmp.persist(path)
}

/// Like [`atomic_write`], but never replaces an existing `path`: the finished temporary file
/// is hard-linked into place, which fails if `path` exists (also when another writer created
/// it meanwhile), so results written this way are never overwritten.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let (tmp, mut f) = Owned::temp_file(path).map_err(|e| renamed(e, path))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| Error::io(path, e))?;
    std::fs::hard_link(tmp.path(), path).map_err(|e| Error::io(path, e))
}

/// An I/O error on a temporary sibling, named by the file the user asked for instead.
fn renamed(e: Error, path: &Path) -> Error {
    match e {
        Error::Io { error, .. } => Error::io(path, error),
        other => other,
    }
}

/// Name of the lock file of a directory with one writer.
pub const LOCK_FILE: &str = ".lock";

/// How long [`DirLock::acquire`] retries a lock whose file names this very process. A lock
/// this process released can stay held for a moment: `flock` belongs to the open file, and a
/// child that another thread of this process forked in the meantime holds a copy of it until
/// its `exec` closes it (the lab CLI tests spawn `phasekv` beside a reproduction in one test
/// process; `reproduce --jobs` runs units on threads). Two holders in this process for
/// longer are a real conflict, refused as from another process.
pub const OWN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// An advisory lock on a directory (`flock` on its `.lock` file, which records the holder's
/// pid): one writer per run directory. Released when dropped or when the process ends, even
/// by `kill -9`.
#[derive(Debug)]
pub struct DirLock {
    _file: std::fs::File,
}

impl DirLock {
    /// Creates `dir` if needed and takes its lock, or fails with [`Error::Busy`] naming the
    /// pid that holds it: at once when another process does, after [`OWN_LOCK_WAIT`] when the
    /// lock file names this process (see there).
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
        let start = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    let pid = std::fs::read_to_string(&path).unwrap_or_default();
                    let pid = pid.trim().parse::<u32>().ok();
                    if pid == Some(std::process::id()) && start.elapsed() < OWN_LOCK_WAIT {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        continue;
                    }
                    let holder = match pid {
                        Some(pid) => format!("pid {pid}"),
                        None => "another process".to_string(),
                    };
                    return Err(Error::Busy { path: dir.to_path_buf(), holder });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
            }
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

/// Name of the lock file of a reproduction output ([`OutputLock`]).
pub const OUTPUT_LOCK_FILE: &str = ".reproduce.lock";

/// The lock of a reproduction output (`flock` on its [`OUTPUT_LOCK_FILE`]): shared by every
/// `reproduce` writing into the output (shards and array tasks may share one), taken whole by
/// a report that reads or writes it, so a report never reads an output a live reproduce is
/// still writing, and no reproduce starts writing one a report is reading. The file lists its
/// holders, one `<kind> <pid>` line each (a shared taker appends its line; a whole taker,
/// which knows every earlier holder is gone, truncates first), so a refusal names them.
/// Released when dropped or when the process ends, even by `kill -9`.
#[derive(Debug)]
pub struct OutputLock {
    file: std::fs::File,
}

impl OutputLock {
    /// Takes `dir`'s lock shared, for a `reproduce` writing into it (created if needed); a
    /// report holding it is [`Error::Busy`] naming its pid.
    pub fn writer(dir: &Path) -> Result<OutputLock> {
        OutputLock::take(dir, false)
    }

    /// Takes `dir`'s lock whole, for a report (created if needed); a live reproduce or
    /// another report holding it is [`Error::Busy`] naming their pids. An input the report may
    /// not write (read-only) is locked through the existing file, and not at all when it has
    /// none: no reproduce could have taken it there either.
    pub fn reader(dir: &Path) -> Result<Option<OutputLock>> {
        match OutputLock::take(dir, true) {
            Err(Error::Io { error, .. })
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
                ) =>
            {
                let path = dir.join(OUTPUT_LOCK_FILE);
                let file = match std::fs::File::open(&path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(Error::io(&path, e)),
                };
                OutputLock::hold(dir, &path, file, true).map(Some)
            }
            other => other.map(Some),
        }
    }

    fn take(dir: &Path, whole: bool) -> Result<OutputLock> {
        use std::io::Write;
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = dir.join(OUTPUT_LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let mut lock = OutputLock::hold(dir, &path, file, whole)?;
        let me = if whole { "report" } else { "reproduce" };
        if whole {
            lock.file.set_len(0).map_err(|e| Error::io(&path, e))?;
        }
        writeln!(lock.file, "{me} {}", std::process::id()).map_err(|e| Error::io(&path, e))?;
        Ok(lock)
    }

    fn hold(dir: &Path, path: &Path, file: std::fs::File, whole: bool) -> Result<OutputLock> {
        let taken = if whole { file.try_lock() } else { file.try_lock_shared() };
        match taken {
            Ok(()) => Ok(OutputLock { file }),
            Err(std::fs::TryLockError::WouldBlock) => {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                Err(Error::Busy { path: dir.to_path_buf(), holder: live_holders(&text) })
            }
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
        }
    }
}

/// The holders an [`OutputLock`] file lists that are still alive (where `/proc` tells; every
/// one listed elsewhere), as `a reproduce (pid 1, pid 2)`, or `another process`.
fn live_holders(text: &str) -> String {
    let proc = Path::new("/proc");
    let alive = |pid: u32| !proc.join("self").exists() || proc.join(pid.to_string()).exists();
    let mut kinds: Vec<(&str, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let Some((kind, pid)) = line.split_once(' ') else { continue };
        let Ok(pid) = pid.trim().parse::<u32>() else { continue };
        if !alive(pid) {
            continue;
        }
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, pids)) if !pids.contains(&format!("pid {pid}")) => pids.push(format!("pid {pid}")),
            Some(_) => {}
            None => kinds.push((kind, vec![format!("pid {pid}")])),
        }
    }
    if kinds.is_empty() {
        return "another process".into();
    }
    kinds.iter().map(|(k, pids)| format!("a {k} ({})", pids.join(", "))).collect::<Vec<_>>().join(" and ")
}

/// Who holds the [`DirLock`] of `dir` right now, without taking or creating anything:
/// `Some("pid N")` (or `another process`) while a writer holds it, `None` when nobody does
/// (or it has no lock file). Taking the lock shared for an instant is how it looks, so a
/// writer starting in that instant may be refused once.
pub fn lock_holder(dir: &Path) -> Result<Option<String>> {
    let path = dir.join(LOCK_FILE);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(None),
        Err(std::fs::TryLockError::WouldBlock) => {
            let pid = std::fs::read_to_string(&path).unwrap_or_default();
            Ok(Some(match pid.trim().parse::<u32>() {
                Ok(pid) => format!("pid {pid}"),
                Err(_) => "another process".to_string(),
            }))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(&path, e)),
    }
}

/// The arm of a run directory's name: without a trailing `-seed<digits>` (plan units are
/// `<arm>-seed<k>`; a name without the suffix is an arm of its own). The one place that says
/// what an arm is; the report groups runs by it and the evaluation writes it on every line.
pub fn arm_of(name: &str) -> &str {
    match name.rsplit_once("-seed") {
        Some((arm, k)) if !arm.is_empty() && !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) => arm,
        _ => name,
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
    fn both_ways_of_opening_share_one_finished_marker() {
        let dir = std::env::temp_dir().join(format!("phasekv-one-marker-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let run = RunDir::create(&dir, 7, "test").unwrap();
        assert!(!run.is_finished());
        let path = run.finish().unwrap();
        assert!(path.join(METRICS_FILE).is_file() && !path.join("DONE").exists());
        let cfg = serde_json::json!({ "a": 1 });
        assert!(matches!(RunDir::open(&dir, &cfg, serde_json::json!({})), Err(Error::FinishedRun { .. })));
        assert!(matches!(RunDir::create(&dir, 7, "again"), Err(Error::FinishedRun { .. })));
        std::fs::remove_dir_all(&dir).unwrap();

        let (run, start) = RunDir::open(&dir, &cfg, serde_json::json!({})).unwrap();
        assert_eq!(start, RunStart::Fresh);
        run.finish_with_metrics(&serde_json::json!({ "loss": 0.5 })).unwrap();
        assert!(matches!(RunDir::create(&dir, 7, "again"), Err(Error::FinishedRun { .. })));
        assert!(RunDir::open_existing(&dir).is_finished());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[derive(Serialize, Default)]
    struct Row {
        name: String,
        n: usize,
        x: String,
    }

    #[test]
    fn csv_rows_have_a_header_quote_when_needed_and_end_in_newlines() {
        let rows = [
            Row { name: "w8s4".into(), n: 3, x: format!("{:.6}", 0.5) },
            Row { name: "a,b".into(), n: 0, x: "1 2".into() },
        ];
        let text = String::from_utf8(csv_bytes(&rows).unwrap()).unwrap();
        assert_eq!(text, "name,n,x\nw8s4,3,0.500000\n\"a,b\",0,1 2\n");
        assert_eq!(csv_bytes::<Row>(&[]).unwrap(), b"name,n,x\n");
        let dir = std::env::temp_dir().join(format!("phasekv-csv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        write_csv_atomic(&dir.join("t.csv"), &rows).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("t.csv")).unwrap(), text);
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
