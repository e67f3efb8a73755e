//! The report of `phasekv kernel validate --report DIR`: `validation.json` (written atomically
//! through [`crate::run_dir::write_json_atomic`]) and two plots, error by phase of the window
//! start and error by window (formats in `theory/dump-format.md`).

use super::plot::{line_chart, Panel, Series};
use crate::conformance::validate::Validation;
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// Writes `validation.json`, `error_by_phase.{svg,png}` and `error_by_window.{svg,png}` under
/// `dir` (created if needed); returns the files written.
pub fn write_report(v: &Validation, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let json = dir.join("validation.json");
    crate::run_dir::write_json_atomic(&json, v)?;
    let mut written = vec![json];
    written.extend(line_chart(&dir.join("error_by_phase"), &phase_panel(v))?);
    written.extend(line_chart(&dir.join("error_by_window"), &window_panel(v))?);
    Ok(written)
}

/// log10 of an error, floored so that an exact 0 still plots.
fn lg(e: f64) -> f64 {
    e.max(1e-300).log10()
}

fn phase_panel(v: &Validation) -> Panel {
    Panel {
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
        ..Panel::default()
    }
}

fn window_panel(v: &Validation) -> Panel {
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
    Panel {
        title: format!("{}: error by window", v.spec),
        x_label: "window j".into(),
        y_label: "log10 max |impl - ref64|".into(),
        y_range: None,
        series,
        ..Panel::default()
    }
}
