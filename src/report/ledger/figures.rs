//! The figures of the whole report (phase profiles, folded profiles, knockout maps, gates,
//! learning curves), each with its data as CSV or JSON beside it. Drawing is done by
//! [`crate::figures`]; figures that belong to one claim are drawn by that claim.

use super::collect::{Collected, RunData};
use super::write_json;
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::GroupAccuracy;
use crate::figures::lab as figures;
use crate::figures::plot::{self, Panel, Series};
use crate::lab::EvalResult;
use crate::run_dir::write_csv_atomic;
use crate::{Error, Result};
use serde::Serialize;
use std::path::Path;

/// A float as the committed tables print it (six decimals).
fn f6(x: f64) -> String {
    format!("{x:.6}")
}

/// One row of `figures/phase-<protocol>.csv`.
#[derive(Serialize, Default)]
struct GroupRow {
    preset: String,
    group: usize,
    n: usize,
    correct: usize,
    accuracy: String,
    wilson_lo: String,
    wilson_hi: String,
}

/// One row of `figures/folded-<protocol>.csv`.
#[derive(Serialize, Default)]
struct FoldedRow {
    preset: String,
    stride: usize,
    phase: usize,
    n: usize,
    correct: usize,
    accuracy: String,
    wilson_lo: String,
    wilson_hi: String,
}

/// One row of `figures/learning-curves.csv`.
#[derive(Serialize, Default)]
struct CurveRow {
    preset: String,
    step: usize,
    eval_accuracy: String,
}

/// Panels in (at most) two columns, each `cell` pixels, under one title.
fn two_column_panels(stem: &Path, title: &str, panels: &[Panel], cell: (u32, u32)) -> Result<()> {
    let cols = 2.min(panels.len()).max(1);
    let rows = panels.len().div_ceil(cols) as u32;
    plot::line_panels(stem, title, panels, cols, (cell.0 * cols as u32, 60 + cell.1 * rows))?;
    Ok(())
}

/// Whether a run trained: its held-out exact match reached [`super::FAILED_ACCURACY`] (or is
/// unknown). A run that did not is drawn in a panel of its own and left out of every pooled line
/// and reference.
fn trained(r: &RunData) -> bool {
    r.metrics.as_ref().is_none_or(|m| m.final_eval.accuracy >= super::FAILED_ACCURACY)
}

/// One panel per arm under protocol `p` (each seed thin, the seeds pooled bold with Wilson
/// intervals), and per compressed arm one folded by its stride with full attention's pooled
/// accuracy folded the same way as a dashed reference.
fn arm_panels(c: &Collected, p: Protocol, panels: &mut Vec<Panel>, fpanels: &mut Vec<Panel>) {
    let arms = super::collect::arms(c);
    // A seed that did not train is drawn apart, never pooled into a line (issue 31).
    let groups_of = |a: &super::collect::Arm| -> Vec<Vec<GroupAccuracy>> {
        a.runs.iter().filter(|r| trained(r)).filter_map(|r| r.evals.get(&p)).map(|e| e.profile.groups.clone()).collect()
    };
    let full: Option<Vec<GroupAccuracy>> = arms
        .iter()
        .find(|a| a.runs.iter().any(|r| r.config.model.is_full()))
        .map(&groups_of)
        .filter(|g| !g.is_empty())
        .map(|g| figures::pool_groups(&g.iter().map(Vec::as_slice).collect::<Vec<_>>()));
    for (i, a) in arms.iter().enumerate() {
        let stride = a.runs.iter().filter_map(|r| r.evals.get(&p)).find_map(|e| e.stride);
        for r in a.runs.iter().filter(|r| !trained(r)) {
            if let Some(e) = r.evals.get(&p) {
                panels.push(figures::seeds_panel(
                    format!("{}: did not train (not pooled)", r.label),
                    format!("residue group (source-key position mod {})", e.profile.groups.len()),
                    &[e.profile.groups.as_slice()],
                    None,
                    stride,
                    i,
                ));
            }
        }
        let seeds = groups_of(a);
        if seeds.is_empty() {
            continue;
        }
        let m = seeds[0].len();
        let slices: Vec<&[GroupAccuracy]> = seeds.iter().map(Vec::as_slice).collect();
        let n = seeds.len();
        panels.push(figures::seeds_panel(
            format!("{} ({n} seed{})", a.name, if n == 1 { "" } else { "s" }),
            format!("residue group (source-key position mod {m})"),
            &slices,
            None,
            stride,
            i,
        ));
        let Some(s) = stride.filter(|&s| s > 1 && m % s == 0) else { continue };
        let fold = |g: &[GroupAccuracy]| crate::analysis::stats::fold_by_phase(g, s).ok();
        let folded: Vec<Vec<GroupAccuracy>> = seeds.iter().filter_map(|g| fold(g)).collect();
        let reference = full.as_deref().and_then(fold);
        let fslices: Vec<&[GroupAccuracy]> = folded.iter().map(Vec::as_slice).collect();
        fpanels.push(figures::seeds_panel(
            format!("{} (S = {s})", a.name),
            format!("phase (source-key position mod {s})"),
            &fslices,
            reference.as_deref().map(|r| ("full attention (trained seeds), folded alike", r)),
            None,
            i,
        ));
    }
}

/// Figures and their data; returns `(figure, caption)` pairs.
pub fn build_figures(c: &Collected, out: &Path) -> Result<Vec<(String, String)>> {
    let mut caps = Vec::new();
    let fig = out.join("figures");
    std::fs::create_dir_all(&fig).map_err(|e| Error::io(&fig, e))?;
    for p in Protocol::ALL {
        let runs: Vec<(&RunData, &EvalResult)> =
            c.runs.iter().filter_map(|r| r.evals.get(&p).map(|e| (r, e))).collect();
        if runs.is_empty() {
            continue;
        }
        let mut csv = Vec::new();
        let mut folded = Vec::new();
        let mut panels = Vec::new();
        let mut fpanels = Vec::new();
        for (r, e) in &runs {
            for g in &e.profile.groups {
                csv.push(GroupRow {
                    preset: r.label.clone(),
                    group: g.group,
                    n: g.n,
                    correct: g.correct,
                    accuracy: f6(g.accuracy),
                    wilson_lo: f6(g.wilson_lo),
                    wilson_hi: f6(g.wilson_hi),
                });
            }
            if let Some(f) = &e.profile.folded {
                for g in &f.phases {
                    folded.push(FoldedRow {
                        preset: r.label.clone(),
                        stride: f.stride,
                        phase: g.group,
                        n: g.n,
                        correct: g.correct,
                        accuracy: f6(g.accuracy),
                        wilson_lo: f6(g.wilson_lo),
                        wilson_hi: f6(g.wilson_hi),
                    });
                }
            }
        }
        arm_panels(c, p, &mut panels, &mut fpanels);
        let name = format!("phase-{}", p.name());
        two_column_panels(
            &fig.join(&name),
            &format!("Accuracy by residue group, {} padding (balanced target depth)", p.name()),
            &panels,
            (760, 380),
        )?;
        write_csv_atomic(&out.join(format!("figures/{name}.csv")), &csv)?;
        caps.push((
            format!("figures/{name}.png"),
            format!("Per-group exact-match accuracy under {} padding, one panel per arm: each seed a thin line, the seeds pooled bold with Wilson 95 % intervals; dashed grey lines mark multiples of the stride. A seed that did not train (held-out below {:.0} %) has a panel of its own and is pooled into no line.", p.name(), 100.0 * super::FAILED_ACCURACY),
        ));
        if !fpanels.is_empty() {
            let name = format!("folded-{}", p.name());
            two_column_panels(
                &fig.join(&name),
                &format!("Accuracy folded by phase (position mod S), {} padding", p.name()),
                &fpanels,
                (700, 340),
            )?;
            write_csv_atomic(&out.join(format!("figures/{name}.csv")), &folded)?;
            caps.push((
                format!("figures/{name}.png"),
                format!("Accuracy folded by each kernel's phase under {} padding (seeds thin, pooled bold with Wilson 95 % intervals; dashed: full attention's trained seeds pooled and folded the same way).", p.name()),
            ));
        }
    }
    for r in &c.runs {
        for (p, k) in &r.knockouts {
            let name = super::claims::knockout_figure(&r.label, *p);
            figures::knockout_map(
                &fig.join(&name),
                &format!("{}, {} padding: accuracy drop (pp) when one KV head is mean-replaced", r.label, p.name()),
                &k.map,
            )?;
            write_json(out, &format!("figures/{name}.json"), k)?;
            caps.push((
                format!("figures/{name}.png"),
                format!(
                    "{}, {} padding: knockout map, rows layer.head, columns residue group; cells give the drop in accuracy (pp), bracketed where its 95 % interval contains 0.",
                    r.label,
                    p.name()
                ),
            ));
        }
        if let Some(g) = &r.gates {
            let name = format!("gates-{}", r.label);
            figures::gate_figures(&fig.join(&name), &r.label, &g.snapshots, g.window)?;
            write_json(out, &format!("figures/{name}.json"), g)?;
            caps.push((
                format!("figures/{name}-trajectory.png"),
                format!("{}: every gate's (static, input-dependent) concentration across checkpoints; below the diagonal = more input-dependent.", r.label),
            ));
            caps.push((
                format!("figures/{name}-scatter.png"),
                format!("{}: every gate at the last checkpoint in the (static, input-dependent) concentration plane, with the diagonal.", r.label),
            ));
            caps.push((
                format!("figures/{name}-profile.png"),
                format!("{}: each gate's average weight over window offsets at the end of training.", r.label),
            ));
        }
    }
    // Learning curves.
    let mut series = Vec::new();
    let mut csv = Vec::new();
    for (i, r) in c.runs.iter().enumerate() {
        if let Some(m) = &r.metrics {
            let pts: Vec<(f64, f64)> = m.evals.iter().map(|e| (e.step as f64, e.accuracy)).collect();
            for e in &m.evals {
                csv.push(CurveRow { preset: r.label.clone(), step: e.step, eval_accuracy: f6(e.accuracy) });
            }
            series.push(Series { markers: true, ..Series::line(r.label.clone(), pts, i) });
        }
    }
    if !series.is_empty() {
        plot::line_chart(
            &fig.join("learning-curves"),
            &Panel {
                title: "Held-out exact-match accuracy during training".into(),
                x_label: "training step".into(),
                y_label: "exact-match accuracy".into(),
                y_range: Some((0.0, 1.02)),
                series,
            },
        )?;
        write_csv_atomic(&out.join("figures/learning-curves.csv"), &csv)?;
        caps.insert(
            0,
            (
                "figures/learning-curves.png".into(),
                "Learning curves of every model (held-out set of the training distribution).".into(),
            ),
        );
    }
    Ok(caps)
}
