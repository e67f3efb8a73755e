//! `phasekv kernel validate DUMP`: a kernel dumped from elsewhere against the reference.
//! Exit status 0 when the kernel passes, 1 when it fails, 2 when the dump is unusable.

use phasekv::conformance::dump::{parse_dtype, Dump};
use phasekv::conformance::validate::{validate_with_progress, Status, Validation};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Most rows of the phase profile printed (the rest are in `validation.json`).
const PHASE_ROWS: usize = 15;

/// Loads, validates, prints; writes `validation.json` and the two plots under `report`.
pub fn run(dump: &Path, dtype: Option<&str>, report: Option<&PathBuf>) -> anyhow::Result<ExitCode> {
    let dtype = match dtype {
        Some(s) => Some(
            parse_dtype(s)
                .ok_or_else(|| phasekv::Error::invalid("--dtype", format!("'{s}' is not f64, f32, f16 or bf16")))?,
        ),
        None => None,
    };
    let d = Dump::load(dump, dtype)?;
    let mut bar: Option<super::progress::Progress> = None;
    let v = validate_with_progress(
        &d,
        &mut |done, total| {
            let b = bar.get_or_insert_with(|| super::progress::Progress::new(total as u64, "validating"));
            b.set_position(done as u64);
            if done >= total {
                b.finish();
            }
        },
        &super::signals::stop(),
    )?;
    print(&v, dump);
    if let Some(dir) = report {
        phasekv::figures::validation::write_report(&v, dir)?;
        println!("report: {}", dir.display());
    }
    Ok(if v.passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print(v: &Validation, path: &Path) {
    let [b, t, dm, dh] = v.shape;
    println!("dump {}: {} ({})", path.display(), v.spec, v.describe);
    println!("{b} sequence(s) of {t} tokens, d = {dm}, d_h = {dh}, dtype {}", v.dtype);
    if let Some(f) = &v.cache_format {
        println!("cache format: {f} (keys and values compared with the reference encoded the same way)");
    }
    println!();
    println!("{:<4} {:<46} {:<13} {:>11} {:>11}  note", "id", "check", "status", "error", "bound");
    for r in &v.rows {
        let status = match r.status {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::NotCheckable => "not checkable",
        };
        println!("{:<4} {:<46} {:<13} {:>11.3e} {:>11.3e}  {}", r.id, r.name, status, r.error, r.bound, r.note);
    }
    println!();
    println!("error by phase of the window start (reference windows displaced by delta tokens):");
    println!("{:>6} {:>6} {:>11} {:>8}", "delta", "phase", "max error", "entries");
    let shown = v.phase_rows(PHASE_ROWS);
    for p in &shown {
        let mark = if p.delta == v.best_delta { "  <- best" } else { "" };
        println!("{:>6} {:>6} {:>11.3e} {:>8}{mark}", p.delta, p.phase, p.error, p.entries);
    }
    if shown.len() < v.phase_profile.len() {
        println!(
            "  ({} of {} displacements shown: delta 0 and the smallest errors; all in validation.json)",
            shown.len(),
            v.phase_profile.len()
        );
    }
    println!();
    let line: Vec<String> = v.window_errors.iter().map(|e| format!("{e:.1e}")).collect();
    println!("error by window j (max |impl - ref64| over keys and values): {}", line.join(" "));
    if let Some(diag) = &v.diagnosis {
        println!("diagnosis: {diag}");
    }
    if !v.rope_pair_errors.is_empty() && !v.hints.is_empty() {
        let line: Vec<String> = v.rope_pair_errors.iter().map(|e| format!("{e:.1e}")).collect();
        println!("error by rotated channel pair k (keys): {}", line.join(" "));
    }
    for h in &v.hints {
        println!("hint: {h}");
    }
    for w in &v.warnings {
        println!("warning: {w}");
    }
    println!();
    if v.passed {
        println!("verdict: PASS");
    } else {
        let failed: Vec<String> =
            v.rows.iter().filter(|r| r.status == Status::Fail).map(|r| format!("{} {}", r.id, r.name)).collect();
        println!("verdict: FAIL ({})", failed.join("; "));
    }
}
