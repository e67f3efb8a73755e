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
/// accuracy folded the same way as a dashed reference; the panels of each kind on one y range.
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
    // One y range across the panels of each figure (issue 43), so the same pp is the same height.
    figures::share_y_range(panels);
    figures::share_y_range(fpanels);
}

/// The y range the panels share ([`figures::share_y_range`]) as a title states it.
fn shared_range(panels: &[Panel]) -> String {
    panels.first().and_then(|p| p.y_range).map(figures::range_label).unwrap_or_else(|| "no data".into())
}

/// A figure title's words for its one y range.
fn shared_words(panels: &[Panel]) -> String {
    format!("one y range for every panel, {}", shared_range(panels))
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
            &format!("Accuracy by residue group, {} padding: {}", p.name(), shared_words(&panels)),
            &panels,
            (760, 380),
        )?;
        write_csv_atomic(&out.join(format!("figures/{name}.csv")), &csv)?;
        caps.push((
            format!("figures/{name}.png"),
            format!("Per-group exact-match accuracy under {} padding, one panel per arm: each seed a thin line, the seeds pooled bold with Wilson 95 % intervals; dashed grey lines mark multiples of the stride. Every panel has the same y range ({}, printed in the title), fitted to the data of all of them, so the same pp is the same height in every panel. A seed {} has a panel of its own and is pooled into no line.", p.name(), shared_range(&panels), apart_words(c)),
        ));
        if !fpanels.is_empty() {
            let name = format!("folded-{}", p.name());
            two_column_panels(
                &fig.join(&name),
                &format!("Accuracy folded by phase (position mod S), {} padding: {}", p.name(), shared_words(&fpanels)),
                &fpanels,
                (700, 340),
            )?;
            write_csv_atomic(&out.join(format!("figures/{name}.csv")), &folded)?;
            caps.push((
                format!("figures/{name}.png"),
                format!("Accuracy folded by each kernel's phase under {} padding (seeds thin, pooled bold with Wilson 95 % intervals; dashed black: full attention's trained seeds pooled and folded the same way; a seed that did not train is in no line). Every panel has the same y range ({}), so the same pp is the same height in every panel.", p.name(), shared_range(&fpanels)),
            ));
        }
    }
    for r in &c.runs {
        for (p, k) in &r.knockouts {
            if stop() {
                return Ok(None);
            }
            let name = super::claims::knockout_figure(&r.label, *p);
            // What a row knocks out, and the prompts behind each cell (issue 43).
            let (rows, what) = match k.map.intervention {
                crate::analysis::eval::Intervention::KvHead => ("layer.head", "one KV head"),
                crate::analysis::eval::Intervention::WindowSlot => ("layer.window slot", "one window slot"),
            };
            let n: Vec<usize> = k.map.rows.iter().flat_map(|r| r.groups.iter().map(|g| g.n)).collect();
            let prompts = match (n.iter().min(), n.iter().max()) {
                (Some(lo), Some(hi)) if lo == hi => format!("{lo} prompts per cell"),
                (Some(lo), Some(hi)) => format!("{lo}-{hi} prompts per cell"),
                _ => "no prompts".into(),
            };
            figures::knockout_map(
                &fig.join(&name),
                &format!("{}, {}: drop (pp), {what} mean-replaced per row, {prompts}", r.label, p.name()),
                &k.map,
            )?;
            write_json(out, &format!("figures/{name}.json"), k)?;
            caps.push((
                format!("figures/{name}.png"),
                format!(
                    "{}, {} padding: knockout map, rows {rows} ({what} mean-replaced per row), columns residue group, {prompts}; the top row (blue) gives the clean accuracy (%) of each group, the other cells the drop in accuracy (pp) when that row is mean-replaced, drawn pale and bracketed where its Newcombe 95 % interval contains 0.",
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
                format!("{}: every gate's path across checkpoints (ring: first, arrow: last; value branches dashed) in the plane of static against input-dependent effective offsets read, the quantity E7 judges (the gate's own concentration where reads were not recorded); below the diagonal = more input-dependent. Both axes span 1 (one offset) to W (uniform), so a gate near uniform reads as such.", r.label),
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

/// The held-out exact match below which a seed is drawn apart: the v2 training-success
/// threshold (§8.2) under v2 rules, [`super::banner::FAILED_ACCURACY`] under v1.
fn apart_below(c: &Collected) -> f64 {
    match super::collect::rules(c) {
        crate::analysis::verdict::Rules::V1 => super::banner::FAILED_ACCURACY,
        _ => super::banner::SUCCESS_ACCURACY,
    }
}

/// The rule that draws a seed apart, in the captions' words.
fn apart_words(c: &Collected) -> String {
    match super::collect::rules(c) {
        crate::analysis::verdict::Rules::V1 => {
            format!("that did not train (held-out below {:.0} %)", 100.0 * super::banner::FAILED_ACCURACY)
        }
        _ => format!(
            "excluded by the training-success rule (held-out below {:.0} %, theory/phase-lab.md {})",
            100.0 * super::banner::SUCCESS_ACCURACY,
            super::collect::rules(c).training_section()
        ),
    }
}

/// Learning curves as small multiples (issue 43): one panel per arm on one y range, each seed
/// its own line pattern, a seed the rule draws apart (v2: excluded; v1: did not train) black and
/// dotted with its held-out accuracy in its label, and the rule's threshold dashed.
fn learning_curves(c: &Collected, out: &Path, fig: &Path, caps: &mut Vec<(String, String)>) -> Result<()> {
    let arms = super::collect::arms(c);
    let below = apart_below(c);
    let mut panels = Vec::new();
    let mut csv = Vec::new();
    let mut first_step = None::<usize>;
    let mut last_step = 1usize;
    for a in &arms {
        let mut runs: Vec<(&RunData, bool)> = a.runs.iter().map(|r| (*r, !trained(r))).collect();
        runs.extend(a.excluded.iter().map(|e| (e.0, true)));
        runs.sort_by_key(|(r, _)| r.seed);
        let mut series = Vec::new();
        for (r, apart) in &runs {
            let Some(m) = &r.metrics else { continue };
            // Thousands of steps, so the axis is labelled at readable intervals.
            let pts: Vec<(f64, f64)> = m.evals.iter().map(|e| (e.step as f64 / 1000.0, e.accuracy)).collect();
            for e in &m.evals {
                csv.push(CurveRow { preset: r.label.clone(), step: e.step, eval_accuracy: f6(e.accuracy) });
            }
            first_step = m.evals.iter().map(|e| e.step).chain(first_step).min();
            last_step = m.evals.iter().map(|e| e.step).fold(last_step, usize::max);
            let k = usize::try_from(r.seed).unwrap_or(0) % SEED_PATTERNS.len();
            if *apart {
                let name = format!("seed {} ({:.1} %, drawn apart)", r.seed, 100.0 * m.final_eval.accuracy);
                series.push(Series { markers: true, pattern: Some((2, 2)), ..Series::line(name, pts, plot::BLACK) });
            } else {
                series.push(Series { pattern: SEED_PATTERNS[k], ..Series::line(format!("seed {}", r.seed), pts, 0) });
            }
        }
        if series.is_empty() {
            continue;
        }
        let n_apart = runs.iter().filter(|r| r.1).count();
        panels.push(Panel {
            title: if n_apart == 0 {
                a.name.clone()
            } else {
                format!("{}: {n_apart} of {} seeds drawn apart", a.name, runs.len())
            },
            x_label: "training step (thousands)".into(),
            y_label: "held-out exact match".into(),
            y_range: Some((0.0, 1.02)),
            series,
            ..Panel::default()
        });
    }
    if panels.is_empty() {
        return Ok(());
    }
    let last = last_step as f64 / 1000.0;
    let x_range = Some((0.0, last * 1.02));
    for p in &mut panels {
        p.x_range = x_range;
        p.series.push(Series::reference(
            format!("{:.0} % rule", 100.0 * below),
            vec![(0.0, below), (last, below)],
            plot::GREY,
        ));
    }
    let start = first_step.unwrap_or(0);
    let note = if start == 0 {
        "curves start at step 0".to_string()
    } else {
        format!("first held-out evaluation at step {start}; none recorded at step 0")
    };
    let cols = 4.min(panels.len());
    let rows = panels.len().div_ceil(cols) as u32;
    plot::line_panels(
        &fig.join("learning-curves"),
        &format!("Held-out exact match during training, one panel per arm, one y range ({note})"),
        &panels,
        cols,
        (420 * cols as u32, 60 + 300 * rows),
    )?;
    write_csv_atomic(&out.join("figures/learning-curves.csv"), &csv)?;
    caps.insert(
        0,
        (
            "figures/learning-curves.png".into(),
            format!("Learning curves of every model (held-out set of the training distribution), one panel per arm on the same 0-100 % range: line pattern by seed (solid, dashed, dotted in seed order); a seed {} black and dotted, its final accuracy in its label; dashed grey: the {:.0} % threshold. The x axis starts at 0; the {note}.", apart_words(c), 100.0 * below),
        ),
    );
    Ok(())
}

/// One row of `figures/summary-forest.csv`.
#[derive(Serialize, Default)]
struct ForestCsv {
    arm: String,
    claim: String,
    what: String,
    estimate_pp: String,
    lo_pp: String,
    hi_pp: String,
    per_seed_pp: String,
}

/// The summary figure (issue 43): each arm's seed-level magnitude of the claim the paper gives
/// numbers for (E5's folded prefix gap, mean over seeds) with its seed-level interval and each
/// seed's value, the paper's two numbers and full attention's estimate as horizontal lines.
/// Returns its caption, `None` when the ledger has no such claim.
pub fn summary_forest(l: &super::banner::Ledger, out: &Path) -> Result<Option<(String, String)>> {
    use super::paper::{paper_baseline, paper_value};
    use super::screen::{forest_claim, forest_rows, FOREST_FIGURE};
    let rows = forest_rows(l);
    let Some(c) = forest_claim(l) else { return Ok(None) };
    let (Some(pc), Some(pb)) = (paper_value(&c.id), paper_baseline(&c.id)) else { return Ok(None) };
    if rows.is_empty() {
        return Ok(None);
    }
    let x = |i: usize| i as f64;
    let mut series = vec![
        Series {
            errors: rows.iter().map(|r| (r.lo, r.hi)).collect(),
            ..Series::markers(
                "mean over seeds [seed-level 95 % interval]",
                rows.iter().enumerate().map(|(i, r)| (x(i), r.pp)).collect(),
                0,
            )
        },
        Series::markers(
            "one seed",
            rows.iter().enumerate().flat_map(|(i, r)| r.per_seed.iter().map(move |s| (x(i) + 0.18, s.1))).collect(),
            plot::GREY,
        ),
    ];
    let span = (-0.5, rows.len() as f64 - 0.5);
    let hline = |y: f64| vec![(span.0, y), (span.1, y)];
    // Short legend words: the long ones ran past the canvas (the clipped-text test).
    series.push(Series::reference(format!("paper's {}: {:.0} pp", pc.kind.short(), pc.pp), hline(pc.pp), 1));
    series.push(Series::reference(format!("paper's {}: {:.1} pp", pb.kind.short(), pb.pp), hline(pb.pp), 2));
    if let Some(full) = rows.iter().find(|r| r.arm == "full") {
        series.push(Series {
            pattern: Some((2, 3)),
            ..Series::line(format!("full attention (ours): {:.1} pp", full.pp), hline(full.pp), plot::BLACK)
        });
    }
    let top = rows.iter().map(|r| r.hi).fold(pc.pp, f64::max);
    let fig = out.join("figures");
    plot::line_panels(
        &fig.join("summary-forest"),
        "",
        &[Panel {
            title: format!(
                "{}: folded prefix gap per arm, mean over seeds; largest {:.1} pp ({}) against the paper's {:.0} pp maximum",
                c.id,
                rows.iter().filter(|r| r.arm != "full").map(|r| r.pp).fold(f64::NEG_INFINITY, f64::max),
                rows.iter().filter(|r| r.arm != "full").max_by(|a, b| a.pp.total_cmp(&b.pp)).map(|r| r.arm.as_str()).unwrap_or("-"),
                pc.pp
            ),
            x_label: "arm".into(),
            y_label: "folded prefix gap (pp)".into(),
            y_range: Some((0.0, (top * 1.05).ceil())),
            x_range: Some(span),
            x_ticks: rows.iter().map(|r| r.arm.clone()).collect(),
            series,
            ..Panel::default()
        }],
        1,
        (2500, 640),
    )?;
    let csv: Vec<ForestCsv> = rows
        .iter()
        .map(|r| ForestCsv {
            arm: r.arm.clone(),
            claim: r.claim.clone(),
            what: r.what.clone(),
            estimate_pp: f6(r.pp),
            lo_pp: f6(r.lo),
            hi_pp: f6(r.hi),
            per_seed_pp: r.per_seed.iter().map(|s| format!("{}:{}", s.0, f6(s.1))).collect::<Vec<_>>().join(" "),
        })
        .collect();
    write_csv_atomic(&out.join("figures/summary-forest.csv"), &csv)?;
    Ok(Some((
        FOREST_FIGURE.into(),
        format!(
            "Summary: each arm's {} (bias-corrected, with its seed-level 95 % interval: seeds, then prompt families), grey dots its seeds; dashed: the paper's {:.0} pp ({}) and {:.1} pp for baselines ({}); dotted black: our full attention. Data: summary-forest.csv.",
            rows[0].what.split(" (").next().unwrap_or("magnitude"),
            pc.pp,
            pc.kind.words(),
            pb.pp,
            pb.kind.words()
        ),
    )))
}

/// The per-claim crops of the phase figures ([`super::screen::crop_of`]): for each claim whose
/// first figure is a whole-report phase figure, the panels of its arms only (every panel where
/// none matches, so the link always resolves). Returns `(figure, caption)` pairs.
pub fn claim_crops(c: &Collected, l: &super::banner::Ledger, out: &Path) -> Result<Vec<(String, String)>> {
    let mut caps = Vec::new();
    let fig = out.join("figures");
    for p in Protocol::ALL {
        let claims: Vec<(&super::claims::Claim, String)> = l
            .claims
            .iter()
            .filter_map(|cl| super::screen::crop_of(cl).map(|f| (cl, f)))
            .filter(|(cl, _)| cl.figures.first().is_some_and(|f| *f == format!("figures/phase-{}.png", p.name())))
            .collect();
        if claims.is_empty() {
            continue;
        }
        let (mut panels, mut fpanels) = (Vec::new(), Vec::new());
        arm_panels(c, p, &mut panels, &mut fpanels);
        for (cl, file) in claims {
            // A panel is an arm's (`<arm> (n seeds)`) or one excluded seed's (`<arm>-seed<k>: ...`).
            let of = |t: &str| {
                cl.arms
                    .iter()
                    .any(|a| t.starts_with(&format!("{} (", a.arm)) || t.starts_with(&format!("{}-seed", a.arm)))
            };
            let mine: Vec<Panel> = panels.iter().filter(|q| of(&q.title)).cloned().collect();
            let shown = if mine.is_empty() { panels.clone() } else { mine };
            if shown.is_empty() {
                continue;
            }
            two_column_panels(
                &fig.join(file.trim_start_matches("figures/").trim_end_matches(".png")),
                &format!(
                    "{}: accuracy by residue group of its arms, {} padding: {}",
                    cl.id,
                    p.name(),
                    shared_words(&shown)
                ),
                &shown,
                (560, 300),
            )?;
            caps.push((
                file.clone(),
                format!("{}'s arms cut from figures/phase-{}.png (the same panels on that figure's one y range, data in its CSV).", cl.id, p.name()),
            ));
        }
    }
    Ok(caps)
}
