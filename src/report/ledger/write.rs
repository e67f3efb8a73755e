//! Writing one report file under the output, atomically, creating its directory.

use crate::run_dir::{atomic_write, write_json_atomic};
use crate::{Error, Result};
use serde::Serialize;
use std::path::Path;

pub(super) fn write(out: &Path, rel: &str, text: &str) -> Result<()> {
    let path = out.join(rel);
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
    }
    atomic_write(&path, text.as_bytes())
}

/// Writes `value` as JSON at `rel` under `out`, creating its directory.
pub(super) fn write_json(out: &Path, rel: &str, value: &impl Serialize) -> Result<()> {
    let path = out.join(rel);
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
    }
    write_json_atomic(&path, value)
}
