//! `manifest.json`: the provenance of a run directory's result files (issue 44). It lists every
//! result file of the directory (every `*.json` and `*.jsonl` at its top level except itself,
//! the training log `log.jsonl`, the checkpoint index `checkpoint.json` and hidden
//! temporaries) with its content hash
//! ([`crate::limits::content_hash`]), its size and, for JSONL, its line count, and the name of
//! the directory it was written in. The writers record each result file as they write it,
//! under the run's lock (`phasekv train`, `eval`, `analyze`, `reproduce`, `analyze upgrade`);
//! `phasekv analyze manifest` writes it for hand-made or older directories after checking
//! their data. `phasekv report` verifies it before reading anything else ([`verify`]): a file
//! edited, missing, added or copied from another run is refused in one line naming the file.

use super::atomic_write;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The manifest's name in a run directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The manifest format this code writes and reads.
pub const MANIFEST_FORMAT: u32 = 1;
/// The largest result file hashed (the JSONL cap, [`crate::limits::MAX_JSONL_BYTES`]).
const MAX_RESULT_BYTES: u64 = crate::limits::MAX_JSONL_BYTES;

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: u32,
    /// The name of the run directory it was written in: a directory copied under another name
    /// (another seed's) is refused.
    pub run: String,
    /// Every result file, by name.
    pub files: BTreeMap<String, FileEntry>,
}

/// One result file of a [`Manifest`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// [`crate::limits::content_hash`] of its bytes.
    pub hash: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its lines (newline-terminated, blank ones included), for JSONL files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<u64>,
}

/// The checkpoint index of a training run (`model::checkpoint::CHECKPOINT_INDEX`): training
/// state, checksummed by itself, rewritten while a run trains, not a result.
const CHECKPOINT_INDEX: &str = "checkpoint.json";

/// Whether `name` is a result file the manifest covers: a `*.json` or `*.jsonl` that is not
/// the manifest, the training log, the checkpoint index or a hidden file (temporaries, the
/// lock).
pub fn is_result_file(name: &str) -> bool {
    !name.starts_with('.')
        && name != MANIFEST_FILE
        && name != super::LOG_FILE
        && name != CHECKPOINT_INDEX
        && (name.ends_with(".json") || name.ends_with(".jsonl"))
}

fn dir_name(dir: &Path) -> String {
    let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    canonical.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default()
}

/// The entry of the regular file `path` (symlinks followed; a FIFO, a device or a file above
/// the JSONL cap is an error naming it), hashed as it streams (memory stays small).
pub fn file_entry(path: &Path) -> Result<FileEntry> {
    let check = |meta: &std::fs::Metadata| -> Result<()> {
        if !meta.is_file() {
            return Err(Error::File { path: path.to_path_buf(), reason: "is not a regular file".into() });
        }
        if meta.len() > MAX_RESULT_BYTES {
            return Err(Error::File {
                path: path.to_path_buf(),
                reason: format!("is {} bytes, above the limit of {MAX_RESULT_BYTES} bytes", meta.len()),
            });
        }
        Ok(())
    };
    check(&std::fs::metadata(path).map_err(|e| Error::io(path, e))?)?;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    check(&file.metadata().map_err(|e| Error::io(path, e))?)?;
    let mut hasher = crate::limits::ContentHasher::new();
    let (mut bytes, mut lines) = (0u64, 0u64);
    let mut reader = file.take(MAX_RESULT_BYTES + 1);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = reader.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
    }
    if bytes > MAX_RESULT_BYTES {
        return Err(Error::File {
            path: path.to_path_buf(),
            reason: format!("grew above the limit of {MAX_RESULT_BYTES} bytes"),
        });
    }
    let jsonl = path.extension().is_some_and(|x| x == "jsonl");
    Ok(FileEntry { hash: hasher.finish(), bytes, lines: jsonl.then_some(lines) })
}

/// The manifest of `dir`, `None` when it has none (a manifest that cannot be read is an error
/// naming it).
pub fn read(dir: &Path) -> Result<Option<Manifest>> {
    let path = dir.join(MANIFEST_FILE);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    let text = crate::limits::read_text(&path, crate::limits::MAX_JSON_BYTES)?;
    let m: Manifest = serde_json::from_str(&text)
        .map_err(|e| Error::File { path: path.clone(), reason: format!("not a manifest: {e}") })?;
    if m.format != MANIFEST_FORMAT {
        return Err(Error::File {
            path,
            reason: format!("format {} is not this version's ({MANIFEST_FORMAT})", m.format),
        });
    }
    Ok(Some(m))
}

fn write(dir: &Path, m: &Manifest) -> Result<()> {
    let text = serde_json::to_string_pretty(m).map_err(|e| Error::invalid("manifest", e.to_string()))?;
    atomic_write(&dir.join(MANIFEST_FILE), format!("{text}\n").as_bytes())
}

/// Records the result files `names` of `dir` as they are now (each hashed; an absent one is
/// removed from the manifest), keeping the other entries: called by each writer right after it
/// wrote them, holding the run's lock. Creates the manifest where there is none.
pub fn record(dir: &Path, names: &[String]) -> Result<()> {
    let mut m =
        read(dir)?.unwrap_or_else(|| Manifest { format: MANIFEST_FORMAT, run: dir_name(dir), files: BTreeMap::new() });
    for name in names.iter().filter(|n| is_result_file(n)) {
        let path = dir.join(name);
        if std::fs::symlink_metadata(&path).is_err() {
            m.files.remove(name);
        } else {
            m.files.insert(name.clone(), file_entry(&path)?);
        }
    }
    write(dir, &m)
}

/// The names of the result files at the top of `dir` ([`is_result_file`]), sorted.
pub fn result_files(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let name = e.file_name().to_string_lossy().to_string();
        if is_result_file(&name) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Writes the manifest of every result file now in `dir`, replacing any (the migration of
/// `phasekv analyze manifest`, run after the data were checked). Returns it.
pub fn write_all(dir: &Path) -> Result<Manifest> {
    let mut m = Manifest { format: MANIFEST_FORMAT, run: dir_name(dir), files: BTreeMap::new() };
    for name in result_files(dir)? {
        let entry = file_entry(&dir.join(&name))?;
        m.files.insert(name, entry);
    }
    write(dir, &m)?;
    Ok(m)
}

/// Checks `dir` against its manifest: present, written in a directory of this name, every file
/// listed present with its hash, size and line count, and no result file that it does not
/// list. Each refusal is one error naming the file.
pub fn verify(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    let m = read(dir)?.ok_or_else(|| Error::File {
        path: path.clone(),
        reason: "missing: the run's result files carry no provenance; after checking them, write one with \
                 `phasekv analyze manifest DIR`"
            .into(),
    })?;
    let name = dir_name(dir);
    if m.run != name {
        return Err(Error::File {
            path,
            reason: format!("run: written for run {:?}, found in {name:?}: copied from another run", m.run),
        });
    }
    for (file, want) in &m.files {
        let p: PathBuf = dir.join(file);
        if std::fs::symlink_metadata(&p).is_err() {
            return Err(Error::File { path: p, reason: "listed in manifest.json but missing".into() });
        }
        let have = file_entry(&p)?;
        if have.hash != want.hash || have.bytes != want.bytes {
            return Err(Error::File {
                path: p,
                reason: format!(
                    "hash: {} ({} bytes) differs from manifest.json's {} ({} bytes): edited after the run wrote it",
                    have.hash, have.bytes, want.hash, want.bytes
                ),
            });
        }
        if have.lines != want.lines {
            return Err(Error::File {
                path: p,
                reason: format!("lines: {:?}, manifest.json says {:?}", have.lines, want.lines),
            });
        }
    }
    for file in result_files(dir)? {
        if !m.files.contains_key(&file) {
            return Err(Error::File {
                path: dir.join(&file),
                reason: "not in manifest.json: added after the run wrote its results".into(),
            });
        }
    }
    Ok(m)
}
