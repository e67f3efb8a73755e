//! The figures of the whole report (phase profiles, folded profiles, knockout maps, gates,
//! learning curves), each with its data as CSV or JSON beside it. Drawing is done by
//! [`crate::figures`]; figures that belong to one claim are drawn by that claim.

use super::collect::{Collected, RunData};
use super::write::write_json;
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

/// Whether a run trained: its held-out exact match reached [`super::banner::FAILED_ACCURACY`] (or is
/// unknown). A run that did not is drawn in a panel of its own and left out of every pooled line
/// and reference.
fn trained(r: &RunData) -> bool {
    r.metrics.as_ref().is_none_or(|m| m.final_eval.accuracy >= super::banner::FAILED_ACCURACY)
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
        // The arm's kernel's stride (each evaluation's stored stride is checked equal to it
        // when the run is loaded), marked only where a pooled seed has this protocol's
        // evaluation, as before issue 39 (an arm whose seeds were all excluded, w12s12 in the
        // committed report, has its panels drawn without marks; kept so reports/ stays
        // byte-identical).
        let stride = a.stride.filter(|_| a.runs.iter().any(|r| r.evals.contains_key(&p)));
        // Under v2 the training-success rule's excluded seeds (§8.2) are drawn apart too.
        let apart = a.runs.iter().copied().filter(|r| !trained(r)).chain(a.excluded.iter().map(|e| e.0));
        for r in apart {
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

/// Figures and their data; returns `(figure, caption)` pairs, or `None` when `stop` said
/// stop (asked before each figure).
pub fn build_figures(c: &Collected, out: &Path, stop: &dyn Fn() -> bool) -> Result<Option<Vec<(String, String)>>> {
    let mut caps = Vec::new();
    let fig = out.join("figures");
    std::fs::create_dir_all(&fig).map_err(|e| Error::io(&fig, e))?;
    for p in Protocol::ALL {
        if stop() {
            return Ok(None);
        }
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
        if panels.is_empty() {
            continue;
        }
        let name = format!("phase-{}", p.name());
        two_column_panels(
            &fig.join(&name),
            &format!(
                "Accuracy by residue group, {} padding: y range per panel, at least {:.0} pp, printed in each title",
                p.name(),
                100.0 * figures::MIN_ACCURACY_SPAN
            ),
            &panels,
            (760, 380),
        )?;
        write_csv_atomic(&out.join(format!("figures/{name}.csv")), &csv)?;
        caps.push((
            format!("figures/{name}.png"),
            format!("Per-group exact-match accuracy under {} padding, one panel per arm: each seed a thin line, the seeds pooled bold with Wilson 95 % intervals; dashed grey lines mark multiples of the stride. Each panel's y axis is fitted to its data but spans at least {:.0} pp, and its range is printed in the panel's title: compare panels by those ranges, not by the height of a curve. A seed that did not train (held-out below {:.0} %) has a panel of its own and is pooled into no line.", p.name(), 100.0 * figures::MIN_ACCURACY_SPAN, 100.0 * super::banner::FAILED_ACCURACY),
        ));
        if !fpanels.is_empty() {
            let name = format!("folded-{}", p.name());
            two_column_panels(
                &fig.join(&name),
                &format!(
                    "Accuracy folded by phase (position mod S), {} padding: y range per panel, at least {:.0} pp, in each title",
                    p.name(),
                    100.0 * figures::MIN_ACCURACY_SPAN
                ),
                &fpanels,
                (700, 340),
            )?;
            write_csv_atomic(&out.join(format!("figures/{name}.csv")), &folded)?;
            caps.push((
                format!("figures/{name}.png"),
                format!("Accuracy folded by each kernel's phase under {} padding (seeds thin, pooled bold with Wilson 95 % intervals; dashed black: full attention's trained seeds pooled and folded the same way; a seed that did not train is in no line). Each panel's y range, at least {:.0} pp, is printed in its title.", p.name(), 100.0 * figures::MIN_ACCURACY_SPAN),
            ));
        }
    }
    for r in &c.runs {
        for (p, k) in &r.knockouts {
            if stop() {
                return Ok(None);
            }
            let name = super::claims::knockout_figure(&r.label, *p);
            figures::knockout_map(
                &fig.join(&name),
                &format!("{}, {}: drop (pp), one KV head mean-replaced", r.label, p.name()),
                &k.map,
            )?;
            write_json(out, &format!("figures/{name}.json"), k)?;
            caps.push((
                format!("figures/{name}.png"),
                format!(
                    "{}, {} padding: knockout map, rows layer.head, columns residue group; the top row gives the clean accuracy (%) of each group, the other cells the drop in accuracy (pp) when that head is mean-replaced, drawn pale and bracketed where its Newcombe 95 % interval contains 0.",
                    r.label,
                    p.name()
                ),
            ));
        }
        if stop() {
            return Ok(None);
        }
        if let Some(g) = &r.gates {
            let name = format!("gates-{}", r.label);
            figures::gate_figures(&fig.join(&name), &r.label, &g.snapshots, g.window)?;
            write_json(out, &format!("figures/{name}.json"), g)?;
            caps.push((
                format!("figures/{name}-trajectory.png"),
                format!("{}: every gate's path across checkpoints (ring: first, arrow: last; value branches dashed) in the plane of static against input-dependent effective offsets read, the quantity E7 judges (the gate's own concentration where reads were not recorded); below the diagonal = more input-dependent. Axes fitted to the data.", r.label),
            ));
            caps.push((
                format!("figures/{name}-scatter.png"),
                format!("{}: every gate at the last checkpoint in the plane of static against input-dependent effective offsets read (as the trajectory figure), with the diagonal.", r.label),
            ));
            caps.push((
                format!("figures/{name}-profile.png"),
                format!("{}: per head, the key (blue) and value (vermillion) branches' average gate (solid) and read share (dotted) over window offsets at the end of training, so a value peak one offset after the key peak reads off one panel; grey: uniform 1/W.", r.label),
            ));
        }
    }
    if stop() {
        return Ok(None);
    }
    learning_curves(c, out, &fig, &mut caps)?;
    Ok(Some(caps))
}

/// Line patterns of the seeds of an arm, in seed order (solid, dashed, dotted, dash-dot-like).
const SEED_PATTERNS: [Option<(u32, u32)>; 4] = [None, Some((8, 4)), Some((2, 3)), Some((12, 3))];

/// Learning curves: colour by arm, line pattern by seed (both in one legend, arms first), and
/// each run that did not train in black with its own label, so it never shares an arm's look.
fn learning_curves(c: &Collected, out: &Path, fig: &Path, caps: &mut Vec<(String, String)>) -> Result<()> {
    let arms = super::collect::arms(c);
    let mut series = Vec::new();
    let mut csv = Vec::new();
    let mut first_step = None::<usize>;
    let mut seeds_seen = 0;
    for (ai, a) in arms.iter().enumerate() {
        let mut named = false;
        for (k, r) in a.runs.iter().enumerate() {
            let Some(m) = &r.metrics else { continue };
            let pts: Vec<(f64, f64)> = m.evals.iter().map(|e| (e.step as f64, e.accuracy)).collect();
            for e in &m.evals {
                csv.push(CurveRow { preset: r.label.clone(), step: e.step, eval_accuracy: f6(e.accuracy) });
            }
            first_step = m.evals.iter().map(|e| e.step).chain(first_step).min();
            seeds_seen = seeds_seen.max(k + 1);
            if !trained(r) {
                let name = format!("{} (did not train)", r.label);
                series.push(Series { markers: true, pattern: Some((2, 2)), ..Series::line(name, pts, plot::BLACK) });
                continue;
            }
            let name = if named { String::new() } else { a.name.clone() };
            named = true;
            let pattern = SEED_PATTERNS[k % SEED_PATTERNS.len()];
            series.push(Series { pattern, ..Series::line(name, pts, ai) });
        }
    }
    if series.is_empty() {
        return Ok(());
    }
    // The seed patterns in the legend, in grey (a legend-only series without points).
    for (k, pattern) in SEED_PATTERNS.iter().enumerate().take(seeds_seen.min(SEED_PATTERNS.len())) {
        series.push(Series { pattern: *pattern, ..Series::line(format!("seed index {k}"), vec![], plot::GREY) });
    }
    let start = first_step.unwrap_or(0);
    let note = if start == 0 {
        "curves start at step 0".to_string()
    } else {
        format!("first held-out evaluation at step {start}; none recorded at step 0")
    };
    plot::line_chart(
        &fig.join("learning-curves"),
        &Panel {
            title: format!("Held-out exact match during training ({note})"),
            x_label: "training step".into(),
            y_label: "exact-match accuracy".into(),
            y_range: Some((0.0, 1.02)),
            x_range: Some((0.0, series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(1.0, f64::max) * 1.02)),
            series,
            ..Panel::default()
        },
    )?;
    write_csv_atomic(&out.join("figures/learning-curves.csv"), &csv)?;
    caps.insert(
        0,
        (
            "figures/learning-curves.png".into(),
            format!("Learning curves of every model (held-out set of the training distribution): colour by arm, line pattern by seed (solid, dashed, dotted in seed order), a run that did not train (held-out below {:.0} %) black and dotted with its own label. The x axis starts at 0; the {note}.", 100.0 * super::banner::FAILED_ACCURACY),
        ),
    );
    Ok(())
}
