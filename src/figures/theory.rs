//! The theory figures (Theorem 1 and 2), drawn from result data only: the CLI draws them for a
//! fresh `phasekv theory` run, and `phasekv report` draws the ledger's T1 and T2 figures from a
//! reproduction's `theory.json`. The mathematics is in `theory/induction-model.md`.

use super::grid::{category_grid, CategoryGrid};
use super::plot::{line_panels, scatter, Panel, Series, GREY};
use crate::theory::critical::PointLabel;
use crate::theory::diagram::{DiagramMap, PhaseDiagram, REGIME_BETA};
use crate::theory::flow::{ConvergenceCurve, FlowRun, FlowSummary, Integrator, Trajectory};
use crate::theory::oracle::{PointVerdict, Theorem1Report};
use crate::theory::profile::PhaseProfile;
use crate::theory::task::TaskParams;
use crate::Result;
use std::path::{Path, PathBuf};

/// Every restart's gap to `F_1`, by the class of its end point.
pub fn t1_restarts(stem: &Path, p: &TaskParams, report: &Theorem1Report) -> Result<Vec<PathBuf>> {
    let mut series = vec![
        Series::markers("one-hot, distinct, value = key + 1", vec![], 2),
        Series::markers("one-hot, colliding heads", vec![], 4),
        Series::markers("one-hot, crossed (value != key + 1)", vec![], 0),
        Series::markers("not concentrated, local minimum", vec![], 1),
        Series::markers("saddle (any structure)", vec![], 3),
        Series::markers("not converged", vec![], 5),
    ];
    for (i, r) in report.restarts.iter().enumerate() {
        let k = match r.label {
            PointLabel::Saddle => 4,
            PointLabel::NotConverged => 5,
            PointLabel::LocalMin if !r.structure.one_hot => 3,
            PointLabel::LocalMin if !r.structure.value_follows_key => 2,
            PointLabel::LocalMin if r.structure.distinct_heads => 0,
            PointLabel::LocalMin => 1,
        };
        if r.gap.is_finite() {
            series[k].points.push((i as f64 + 1.0, r.gap));
        }
    }
    series.retain(|s| !s.points.is_empty());
    let (lo, hi) = report
        .restarts
        .iter()
        .filter(|r| r.gap.is_finite())
        .fold((0.0f64, 0.0f64), |(a, b), r| (a.min(r.gap), b.max(r.gap)));
    let span = (hi - lo).max(1e-6);
    let panel = Panel {
        title: format!(
            "Theorem 1 restarts (beta={}, gamma={}): verdict '{}'",
            p.beta,
            p.gamma,
            report.verdict.symbol()
        ),
        x_label: "restart".into(),
        y_label: "loss - F_1".into(),
        y_range: Some((lo - 0.05 * span, hi + 0.45 * span)),
        series,
        ..Panel::default()
    };
    scatter(stem, &panel)
}

/// The category of a verdict in [`phase_diagram_map`].
fn verdict_category(v: PointVerdict) -> usize {
    match v {
        PointVerdict::Holds => 0,
        PointVerdict::NotKkt => 1,
        PointVerdict::Beaten => 2,
    }
}

/// The verdict colours of the phase diagram: sky blue, vermillion and yellow (Okabe-Ito), no
/// red/green pair and lightness apart (`colour::sequential_problems` checks them in a test).
pub const VERDICT_COLOURS: [(u8, u8, u8); 3] = [(86, 180, 233), (213, 94, 0), (240, 228, 66)];

/// The Theorem 1 phase diagram as a category grid (rows beta, columns gamma), with optional
/// text in each cell (the verdict's code by default): the codes explained in the legend, beta
/// and gamma defined under it, and the cells of the theorem's stated regime outlined.
pub fn phase_diagram_map(
    stem: &Path,
    title: &str,
    map: &DiagramMap,
    cell_text: Option<Vec<Vec<String>>>,
) -> Result<Vec<PathBuf>> {
    // The outline and the cells' classes come from one map and one rule
    // (`theory::diagram::in_regime`): the stated regime ends where the vertex stops being KKT.
    let outlined = map.regime();
    let cell_text = cell_text.unwrap_or_else(|| {
        map.verdicts.iter().map(|row| row.iter().map(|v| v.symbol().to_string()).collect()).collect()
    });
    let grid = CategoryGrid {
        title: title.into(),
        x_label: "gamma (readout scale: logits z_y = gamma y . o)".into(),
        y_label: "beta (attention sharpness: softmax(beta q . k))".into(),
        columns: map.gammas.clone(),
        rows: map.betas.clone(),
        cells: map.verdicts.iter().map(|row| row.iter().map(|&v| verdict_category(v)).collect()).collect(),
        cell_text: Some(cell_text),
        categories: vec![
            ("+ one-hot vertex optimal".into(), VERDICT_COLOURS[0]),
            ("k vertex not KKT (heads hedge)".into(), VERDICT_COLOURS[1]),
            ("g KKT but beaten (split head)".into(), VERDICT_COLOURS[2]),
        ],
        note: vec![
            "outlined: the theorem's regime,".into(),
            format!("beta {}-{}, gamma < gamma_c(beta):", REGIME_BETA.0, REGIME_BETA.1),
            "left of the row's first k (the".into(),
            "vertex stops being KKT; 6.5 at".into(),
            "beta = 2; induction-model.md 3)".into(),
            "beta: scale of the attention logits".into(),
            "gamma: scale of the readout logits".into(),
        ],
        muted: Vec::new(),
        outlined,
    };
    category_grid(stem, &grid)
}

/// The phase diagram of a fresh run: each cell shows its verdict and `best loss - F_1`.
pub fn phase_diagram(stem: &Path, d: &PhaseDiagram) -> Result<Vec<PathBuf>> {
    let p = &d.params;
    let n = d.gammas.len();
    let cell_text = (0..d.betas.len())
        .map(|i| {
            (0..n)
                .map(|j| {
                    let pt = &d.points[i * n + j];
                    format!("{} {:+.0e}", pt.verdict.symbol(), pt.best_loss - pt.f1)
                })
                .collect()
        })
        .collect();
    let title = format!("Theorem 1 phase diagram (S={}, H={}, L={}, N={})", p.stride, p.heads, p.chunks, p.vocab);
    phase_diagram_map(stem, &title, &d.map(), Some(cell_text))
}

/// Every head's key and value gates over time (one panel per head and branch).
pub fn t2_gate_trajectories(
    stem: &Path,
    p: &TaskParams,
    seed: u64,
    integrator: Integrator,
    tr: &Trajectory,
) -> Result<Vec<PathBuf>> {
    let s = p.stride;
    let mut panels = Vec::new();
    for h in 0..p.heads {
        for (which, data) in [("pK", &tr.key), ("pV", &tr.value)] {
            let series = (0..s)
                .map(|r| {
                    Series::line(
                        format!("r={}", r + 1),
                        tr.times.iter().zip(data.iter()).map(|(&t, g)| (t, g[h * s + r])).collect(),
                        r,
                    )
                })
                .collect();
            panels.push(Panel {
                title: format!("head {} {which}", h + 1),
                x_label: "time t".into(),
                y_label: format!("{which}_{}(r)", h + 1),
                y_range: Some((0.0, 1.0)),
                series,
                ..Panel::default()
            });
        }
    }
    let rows = p.heads as u32;
    line_panels(
        stem,
        &format!("Gradient flow, seed {seed} (static gates, {integrator:?})"),
        &panels,
        2,
        (1100, 60 + 300 * rows),
    )
}

/// Retrieval accuracy and target probability by query position of a converged run.
pub fn t2_phase_profile(stem: &Path, p: &TaskParams, conv: &FlowRun, prof: &PhaseProfile) -> Result<Vec<PathBuf>> {
    let acc: Vec<(f64, f64)> = prof.positions.iter().map(|s| (s.position as f64, s.accuracy)).collect();
    let prob: Vec<(f64, f64)> = prof.positions.iter().map(|s| (s.position as f64, s.target_prob)).collect();
    let last = (p.chunks * p.stride) as f64;
    let panels = vec![
        Panel {
            title: format!(
                "retrieval accuracy by query position (heads chose offsets {:?})",
                conv.key_offsets.iter().flatten().collect::<Vec<_>>()
            ),
            x_label: "query position in context (chunk boundary every S)".into(),
            y_label: "accuracy".into(),
            y_range: Some((-0.05, 1.05)),
            series: vec![Series::markers("accuracy", acc, 0)],
            ..Panel::default()
        },
        Panel {
            title: "target probability by query position".into(),
            x_label: "query position in context".into(),
            y_label: "p(target)".into(),
            y_range: None,
            series: vec![
                Series::markers("p(target)", prob, 1),
                Series::reference("chance 1/N", vec![(1.0, prof.chance), (last, prof.chance)], GREY),
            ],
            ..Panel::default()
        },
    ];
    line_panels(stem, &format!("Phase profile of the converged model (seed {})", conv.seed), &panels, 1, (1000, 700))
}

/// How often gradient flow chose each key offset (over every head of the converged seeds), as
/// stems with a marker (counts are discrete), against the uniform level `total / (S - 1)`. The
/// stride `S` and head count `H` are read from the data: one count per offset `1..S-1`, and
/// `H = total / converged seeds`.
pub fn t2_offset_counts(stem: &Path, summary: &FlowSummary) -> Result<Vec<PathBuf>> {
    let counts = &summary.offset_counts;
    let s = counts.len() + 1;
    let total: usize = counts.iter().sum();
    let converged = (summary.converged_fraction * summary.runs as f64).round() as usize;
    let heads =
        if converged > 0 && total.is_multiple_of(converged) { (total / converged).to_string() } else { "?".into() };
    let top = counts.iter().copied().max().unwrap_or(0).max(1) as f64;
    let uniform = total as f64 / counts.len().max(1) as f64;
    let mut series: Vec<Series> = counts
        .iter()
        .enumerate()
        .map(|(i, &c)| Series::line("", vec![((i + 1) as f64, 0.0), ((i + 1) as f64, c as f64)], 0))
        .collect();
    series.push(Series::markers(
        "heads choosing r",
        counts.iter().enumerate().map(|(i, &c)| ((i + 1) as f64, c as f64)).collect(),
        0,
    ));
    series.push(Series::reference(
        format!("uniform: {total} / {} = {uniform:.1}", counts.len()),
        vec![(0.6, uniform), (counts.len() as f64 + 0.4, uniform)],
        GREY,
    ));
    line_panels(
        stem,
        "",
        &[Panel {
            title: format!(
                "Theorem 2: key offsets chosen (S = {s}, H = {heads}; {} of {} seeds converged)",
                converged, summary.runs
            ),
            x_label: format!("key offset r (1..S-1 = 1..{})", s - 1),
            y_label: "heads choosing r".into(),
            y_range: Some((0.0, 1.15 * top)),
            x_range: Some((0.5, counts.len() as f64 + 0.5)),
            integer_y: true,
            series,
            ..Panel::default()
        }],
        1,
        (900, 560),
    )
}

/// Theorem 2's convergence over time, one line per recorded seed: (left) the least
/// concentrated head's concentration (`max_r min(pK(r), pV(r + 1))`, converged above
/// `threshold`), with each seed's convergence time marked; (right) `log10(loss - f1)`, the gap to
/// Theorem 1's optimum `F_1` (records where it is not positive are left out, and counted in the
/// title). The title states what the data show: how many seeds converged, by when, and whether
/// each stayed above the threshold after its convergence time.
pub fn t2_convergence(stem: &Path, curves: &[ConvergenceCurve], threshold: f64, f1: f64) -> Result<Vec<PathBuf>> {
    let verdict = t2_convergence_verdict(curves, threshold);
    let t_end = curves.iter().flat_map(|c| c.times.last().copied()).fold(0.0, f64::max);
    let mut left = Vec::new();
    let mut right = Vec::new();
    let mut dropped = 0;
    for (i, c) in curves.iter().enumerate() {
        let name =
            if c.heads_coincide { format!("seed {} (heads coincide)", c.seed) } else { format!("seed {}", c.seed) };
        left.push(Series::line(
            name.clone(),
            c.times.iter().copied().zip(c.concentration.iter().copied()).collect(),
            i,
        ));
        let gap: Vec<(f64, f64)> =
            c.times.iter().zip(&c.loss).filter_map(|(&t, &l)| (l - f1 > 0.0).then(|| (t, (l - f1).log10()))).collect();
        dropped += c.loss.len() - gap.len();
        right.push(Series::line(name, gap, i));
    }
    left.push(Series::markers(
        "convergence time",
        curves.iter().filter_map(|c| c.t_conv.map(|t| (t, threshold))).collect(),
        curves.len(),
    ));
    left.push(Series::reference(format!("threshold {threshold}"), vec![(0.0, threshold), (t_end, threshold)], GREY));
    line_panels(
        stem,
        &format!("Theorem 2, gradient flow from a small random start: {verdict}"),
        &[
            Panel {
                title: "least concentrated head".into(),
                x_label: "time t".into(),
                y_label: "max_r min(pK(r), pV(r+1))".into(),
                y_range: Some((0.0, 1.05)),
                series: left,
                ..Panel::default()
            },
            Panel {
                title: if dropped > 0 {
                    format!("loss above Theorem 1's optimum F_1 ({dropped} records at or below it left out)")
                } else {
                    "loss above Theorem 1's optimum F_1".into()
                },
                x_label: "time t".into(),
                y_label: "log10(loss - F_1)".into(),
                series: right,
                hide_legend: true,
                ..Panel::default()
            },
        ],
        2,
        (1400, 560),
    )
}

/// What [`t2_convergence`]'s curves show, in its title's words: every seed concentrates (its
/// convergence time set) by the latest such time and stays above `threshold` at every record
/// after it, or how many concentrate and whether one falls back.
pub fn t2_convergence_verdict(curves: &[ConvergenceCurve], threshold: f64) -> String {
    let converged: Vec<f64> = curves.iter().filter_map(|c| c.t_conv).collect();
    let latest = converged.iter().copied().fold(f64::NAN, f64::max);
    let stays = curves
        .iter()
        .filter_map(|c| c.t_conv.map(|t| (c, t)))
        .all(|(c, t)| c.times.iter().zip(&c.concentration).filter(|(&x, _)| x >= t).all(|(_, &y)| y > threshold));
    match (converged.len() == curves.len() && !curves.is_empty(), stays) {
        (true, true) => format!("all {} seeds concentrate by t = {latest:.0} and stay", curves.len()),
        (_, stays) => format!(
            "{} of {} seeds concentrate{}",
            converged.len(),
            curves.len(),
            if stays { "" } else { "; one falls back below the threshold" }
        ),
    }
}
