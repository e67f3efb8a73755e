//! Reading a result back, and the one cache, lock, re-check sequence every lab result goes
//! through (a result with other settings is never overwritten).

use crate::run_dir::DirLock;
use crate::{Error, Result};
use serde::de::DeserializeOwned;
use std::path::Path;

/// Reads a JSON result file.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text = crate::limits::read_text(path, crate::limits::MAX_JSON_BYTES)?;
    serde_json::from_str(&text)
        .map_err(|e| Error::File { path: path.to_path_buf(), reason: format!("unreadable result: {e}") })
}

/// An existing result with the same settings (reused), or `None` when there is none; a
/// result with other settings is an error (never overwritten).
pub(super) fn existing<T: DeserializeOwned>(path: &Path, same: impl Fn(&T) -> bool) -> Result<Option<T>> {
    if !path.exists() {
        return Ok(None);
    }
    let have: T = read_json(path)?;
    if same(&have) {
        Ok(Some(have))
    } else {
        Err(Error::File {
            path: path.to_path_buf(),
            reason: "holds a result with other settings; move it away to recompute (results are never overwritten)"
                .into(),
        })
    }
}

/// What [`reuse_or_lock`] found: a cached result, or the run's shared lock to compute it under.
pub(super) enum Cached<T> {
    /// An existing result with the same settings.
    Reuse(T),
    /// None yet: the lock, held while the result is computed and written.
    Compute(std::sync::Arc<DirLock>),
}

/// The one cache, lock, re-check sequence of every lab result: a cached result is read without
/// the lock; computing one takes the run's shared lock and looks again, in case another writer
/// just finished the same result. A result with other settings is an error ([`existing`]).
pub(super) fn reuse_or_lock<T: DeserializeOwned>(
    run: &Path,
    json: &Path,
    same: impl Fn(&T) -> bool,
) -> Result<Cached<T>> {
    if let Some(r) = existing(json, &same)? {
        return Ok(Cached::Reuse(r));
    }
    let lock = DirLock::shared(run)?;
    Ok(match existing(json, &same)? {
        Some(r) => Cached::Reuse(r),
        None => Cached::Compute(lock),
    })
}

/// A run directory must exist and hold `config.json`.
pub(super) fn check_run(run: &Path) -> Result<()> {
    if !run.join(crate::run_dir::CONFIG_FILE).is_file() {
        return Err(Error::File {
            path: run.to_path_buf(),
            reason: "not a run directory (no config.json; train one with `phasekv train`)".into(),
        });
    }
    Ok(())
}
