//! `phasekv audit analyze`: the phase lab on results of a model that lives elsewhere.

use super::rows::group_rows;
use crate::analysis::phase::{self, PhaseProfile};
use crate::figures::lab as figures;
use crate::run_dir::{write_csv_atomic, write_json_atomic};
use crate::stop::Stop;
use crate::{Error, Result};
use std::path::Path;

/// `phasekv audit analyze`: the phase profile of external results, written into `out`
/// (`profile.json`, `groups.csv`, `phase.svg`/`.png`), which must not exist yet (results are
/// never overwritten). `m` is checked against [`crate::limits::MAX_MODULUS`]; a `stride` must
/// be at least 2 and divide `m` (else folding would be silently skipped); `export`, the JSONL
/// that `audit export` wrote, makes every result's id and group checked against it. `stop` is
/// polled between stages; a requested stop ends it with [`Error::Interrupted`] before `out` is
/// made.
pub fn audit_analyze(
    results: &Path,
    m: usize,
    stride: Option<usize>,
    seed: u64,
    out: &Path,
    export: Option<&Path>,
    stop: &Stop,
) -> Result<AuditAnalysis> {
    crate::limits::check_range("--modulus", m, 2, crate::limits::MAX_MODULUS)?;
    if let Some(s) = stride {
        if s < 2 || s > m || !m.is_multiple_of(s) {
            return Err(Error::invalid(
                "--stride",
                format!("must be at least 2 and divide --modulus ({m}) to fold phases, got {s}"),
            ));
        }
    }
    if out.exists() {
        return Err(Error::File {
            path: out.to_path_buf(),
            reason: "exists; results are never overwritten (choose another --out)".into(),
        });
    }
    let manifest = match export {
        Some(p) => {
            let text = crate::limits::read_text(p, crate::limits::MAX_JSONL_BYTES)?;
            Some(
                crate::analysis::audit::parse_manifest(&text)
                    .map_err(|e| Error::File { path: p.to_path_buf(), reason: e.to_string() })?,
            )
        }
        None => None,
    };
    stop.check("audit analyze")?;
    let outcomes = read_results_file(results, m, manifest.as_ref(), stop).map_err(|e| e.during("audit analyze"))?;
    let profile = phase::profile_stopping(&outcomes, m, stride, seed, stop).map_err(|e| e.during("audit analyze"))?;
    stop.check("audit analyze")?;
    // The pre-registered statistics need each prompt's depth: positions from the export, else
    // from the results themselves where every line carries them (the suite's outcome files).
    let records = match manifest.as_ref() {
        Some(mf) => crate::analysis::audit::phase_records(mf, &outcomes),
        None => crate::analysis::audit::own_records(&outcomes),
    };
    let statistics = match records {
        Some(r) => Some(phase::statistics_stopping(&r, m, stride, seed, stop).map_err(|e| e.during("audit analyze"))?),
        None => None,
    };
    stop.check("audit analyze")?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    // A new directory (fails if another process made it meanwhile), removed with what was
    // written in it on any error (a full disk): never a half-written audit.
    let dir = crate::run_dir::Owned::new_dir(out)?;
    write_json_atomic(&out.join("profile.json"), &profile)?;
    if let Some(st) = &statistics {
        write_json_atomic(&out.join("statistics.json"), st)?;
    }
    write_csv_atomic(&out.join("groups.csv"), &group_rows(&profile.groups))?;
    let name = results.file_name().and_then(|n| n.to_str()).unwrap_or("results");
    figures::phase_profile(&out.join("phase"), &format!("audit of {name}"), &profile, stride)?;
    dir.keep();
    Ok(AuditAnalysis { profile, statistics })
}

/// The results in `path`, streamed (memory: the outcomes, never the text): its lines are
/// counted first and more than [`crate::limits::MAX_RESULT_LINES`] is refused before any is
/// parsed (the work bound); then every line is read through
/// [`crate::analysis::audit::read_results`].
fn read_results_file(
    path: &Path,
    m: usize,
    manifest: Option<&crate::analysis::audit::Manifest>,
    stop: &crate::stop::Stop,
) -> Result<Vec<crate::analysis::phase::Outcome>> {
    use std::io::{BufRead, Read, Seek};
    let max = crate::limits::MAX_RESULT_LINES;
    let cap = crate::limits::MAX_JSONL_BYTES;
    let (mut file, _) = crate::limits::open_regular(path, cap)?;
    let mut lines = 0u64;
    {
        let mut reader = std::io::BufReader::with_capacity(1 << 16, (&mut file).take(cap + 1));
        loop {
            let buf = reader.fill_buf().map_err(|e| Error::io(path, e))?;
            if buf.is_empty() {
                break;
            }
            lines += buf.iter().filter(|&&b| b == b'\n').count() as u64;
            let n = buf.len();
            reader.consume(n);
        }
    }
    if lines > max {
        return Err(Error::File {
            path: path.to_path_buf(),
            reason: format!(
                "lines: about {lines} result lines, above the limit of {max} (MAX_RESULT_LINES: the permutation test's work); analyse a sample or split the results"
            ),
        });
    }
    file.rewind().map_err(|e| Error::io(path, e))?;
    let reader = std::io::BufReader::with_capacity(1 << 16, file.take(cap + 1));
    crate::analysis::audit::read_results(reader, m, manifest, max + 1, lines, stop).map_err(|e| match e {
        Error::Interrupted { .. } => e,
        e => Error::File { path: path.to_path_buf(), reason: e.to_string() },
    })
}

/// What `audit analyze` found: the per-group profile, and with an export that carries
/// positions (or results whose every line carries `position` and `depth`), the pre-registered
/// statistics (the depth-controlled phase test at the stride,
/// the corrected period scan, gaps with their noise floors).
#[derive(Clone, Debug)]
pub struct AuditAnalysis {
    /// Per-group accuracy and the exploratory statistics of [`phase::profile`].
    pub profile: PhaseProfile,
    /// [`phase::statistics`] from the export's positions or the results' own (`None` without
    /// either).
    pub statistics: Option<phase::PhaseStatistics>,
}
