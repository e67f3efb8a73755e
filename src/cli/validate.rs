//! `phasekv kernel validate DUMP`: a kernel dumped from elsewhere against the reference.
//! Exit status 0 when the kernel passes, 1 when it fails, 2 when the dump is unusable.

use phasekv::conformance::dump::{parse_dtype, Dump};
use phasekv::conformance::validate::{validate_with_progress, Status, Validation};
use phasekv::report::plot::{line_chart, Panel, Series};
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
    let v = validate_with_progress(&d, &mut |done, total| {
        let b = bar.get_or_insert_with(|| super::progress::Progress::new(total as u64, "validating"));
        b.set_position(done as u64);
        if done >= total {
            b.finish();
        }
    })?;
    print(&v, dump);
    if let Some(dir) = report {
        write_report(&v, dir)?;
        println!("report: {}", dir.display());
    }
    Ok(if v.passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print(v: &Validation, path: &Path) {
    let [b, t, dm, dh] = v.shape;
    println!("dump {}: {} ({})", path.display(), v.spec, v.describe);
    println!("{b} sequence(s) of {t} tokens, d = {dm}, d_h = {dh}, dtype {}", v.dtype);
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
    // Long profiles (large S) print the rows that matter: delta 0, the best, and the next best.
    let shown: Vec<&phasekv::conformance::validate::PhasePoint> = if v.phase_profile.len() <= PHASE_ROWS {
        v.phase_profile.iter().collect()
    } else {
        let mut by_error: Vec<_> = v.phase_profile.iter().filter(|p| p.entries > 0).collect();
        by_error.sort_by(|a, b| a.error.total_cmp(&b.error));
        let mut keep: Vec<_> = by_error.into_iter().take(PHASE_ROWS - 1).collect();
        keep.extend(v.phase_profile.iter().filter(|p| p.delta == 0));
        keep.sort_by_key(|p| p.delta);
        keep.dedup_by_key(|p| p.delta);
        keep
    };
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
    println!();
    if v.passed {
        println!("verdict: PASS");
    } else {
        let failed: Vec<String> =
            v.rows.iter().filter(|r| r.status == Status::Fail).map(|r| format!("{} {}", r.id, r.name)).collect();
        println!("verdict: FAIL ({})", failed.join("; "));
    }
}

fn write_report(v: &Validation, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| phasekv::Error::io(dir, e))?;
    let json = dir.join("validation.json");
    phasekv::run_dir::write_json_atomic(&json, v)?;
    let lg = |e: f64| e.max(1e-300).log10();
    let phase = Panel {
        title: format!("{}: error by phase of the window start", v.spec),
        x_label: "displacement delta of the reference windows (tokens)".into(),
        y_label: "log10 max |impl - ref|".into(),
        y_range: None,
        series: vec![Series {
            markers: true,
            ..Series::line(
                "kernel vs displaced reference",
                v.phase_profile.iter().map(|p| (p.delta as f64, lg(p.error))).collect(),
                0,
            )
        }],
    };
    line_chart(&dir.join("error_by_phase"), &phase)?;
    let n = v.window_errors.len();
    let mut series = vec![Series {
        markers: true,
        ..Series::line("kernel", v.window_errors.iter().enumerate().map(|(j, &e)| (j as f64, lg(e))).collect(), 0)
    }];
    if n > 0 && v.window_bound > 0.0 {
        series.push(Series {
            dashed: true,
            ..Series::line("tolerance (keys)", vec![(0.0, lg(v.window_bound)), ((n - 1) as f64, lg(v.window_bound))], 1)
        });
    }
    let window = Panel {
        title: format!("{}: error by window", v.spec),
        x_label: "window j".into(),
        y_label: "log10 max |impl - ref64|".into(),
        y_range: None,
        series,
    };
    line_chart(&dir.join("error_by_window"), &window)?;
    Ok(())
}
