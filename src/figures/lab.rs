//! The phase lab's figures, built from result data only (so `phasekv report` redraws them
//! without a model): phase profiles with Wilson bands and the stride marked, knockout maps,
//! and gate-preference plots.

use super::plot::{self, CategoryGrid, Panel, Series};
use crate::analysis::eval::KnockoutMap;
use crate::analysis::gates::{Branch, GateSnapshot};
use crate::analysis::phase::PhaseProfile;
use crate::analysis::phase_test::newcombe_pp;
use crate::analysis::stats::GroupAccuracy;
use crate::Result;
use std::path::{Path, PathBuf};

/// Dashed vertical marks at multiples of `stride` over `0..m` (from y0 to y1).
fn stride_marks(stride: Option<usize>, m: usize, y0: f64, y1: f64) -> Vec<Series> {
    let Some(s) = stride.filter(|&s| s > 1 && s < m) else { return Vec::new() };
    (0..m)
        .step_by(s)
        .enumerate()
        .map(|(i, x)| {
            let name = if i == 0 { format!("multiples of S = {s}") } else { String::new() };
            Series::reference(name, vec![(x as f64, y0), (x as f64, y1)], 6)
        })
        .collect()
}

/// Accuracy per group (x = group index) with its Wilson 95 % interval as error bars.
pub fn accuracy_series(groups: &[GroupAccuracy], color: usize) -> Vec<Series> {
    let pts = groups.iter().map(|g| (g.group as f64, g.accuracy)).collect();
    let errors = groups.iter().map(|g| (g.wilson_lo, g.wilson_hi)).collect();
    vec![Series { markers: true, errors, ..Series::line("accuracy (bars: Wilson 95 %)", pts, color) }]
}

/// The y range that shows every group's Wilson interval, padded, within `[0, 1.02]` (a range
/// fixed at 0-1 flattens the high-accuracy models).
pub fn accuracy_range(groups: &[GroupAccuracy]) -> (f64, f64) {
    let lo = groups.iter().map(|g| g.wilson_lo).fold(1.0, f64::min);
    let hi = groups.iter().map(|g| g.wilson_hi).fold(0.0, f64::max);
    let pad = 0.05 * (hi - lo).max(0.02);
    ((lo - pad).max(0.0), (hi + pad).min(1.02))
}

/// The panel of one phase profile: accuracy per residue group with its Wilson 95 % interval.
pub fn phase_panel(title: &str, profile: &PhaseProfile, stride: Option<usize>, color: usize) -> Panel {
    let (y0, y1) = accuracy_range(&profile.groups);
    let mut series = stride_marks(stride, profile.modulus, y0, y1);
    series.extend(accuracy_series(&profile.groups, color));
    let period = match profile.period() {
        Some(p) => format!("period {p}"),
        None => "no period".into(),
    };
    Panel {
        title: format!(
            "{title}: gap {:.1} pp, {period}, chi2 p = {:.1e}",
            profile.max_gap_pp, profile.chi_square.p_value
        ),
        x_label: format!("residue group (source-key position mod {})", profile.modulus),
        y_label: "exact-match accuracy".into(),
        y_range: Some((y0, y1)),
        series,
    }
}

/// Group accuracies pooled over seeds (counts summed per group).
pub fn pool_groups(seeds: &[&[GroupAccuracy]]) -> Vec<GroupAccuracy> {
    let m = seeds.iter().map(|g| g.len()).max().unwrap_or(0);
    (0..m)
        .map(|g| {
            let (k, n) = seeds.iter().filter_map(|s| s.get(g)).fold((0, 0), |(k, n), a| (k + a.correct, n + a.n));
            GroupAccuracy::new(g, k, n)
        })
        .collect()
}

/// The panel of one arm over seeds: each seed's accuracy as a thin line, the pooled accuracy
/// with its Wilson 95 % interval bold over them, an optional dashed reference (full attention,
/// pooled), and the stride marked. `x_label` names the axis (residue group or phase).
pub fn seeds_panel(
    title: String,
    x_label: String,
    seeds: &[&[GroupAccuracy]],
    reference: Option<(&str, &[GroupAccuracy])>,
    stride: Option<usize>,
    color: usize,
) -> Panel {
    let pooled = pool_groups(seeds);
    let mut all: Vec<GroupAccuracy> = pooled.clone();
    all.extend(seeds.iter().flat_map(|s| s.iter().cloned()));
    if let Some((_, r)) = reference {
        all.extend(r.iter().cloned());
    }
    let shown: Vec<GroupAccuracy> = all.into_iter().filter(|g| g.n > 0).collect();
    let (y0, y1) = accuracy_range(&shown);
    let mut series = stride_marks(stride, pooled.len(), y0, y1);
    if let Some((name, r)) = reference {
        series.push(Series::reference(name, r.iter().map(|g| (g.group as f64, g.accuracy)).collect(), 6));
    }
    if seeds.len() > 1 {
        for (k, s) in seeds.iter().enumerate() {
            let name = if k == 0 { "each seed".to_string() } else { String::new() };
            series.push(Series {
                thin: true,
                ..Series::line(name, s.iter().map(|g| (g.group as f64, g.accuracy)).collect(), color)
            });
        }
    }
    let label = if seeds.len() > 1 { format!("{} seeds pooled", seeds.len()) } else { "accuracy".to_string() };
    let mut acc = accuracy_series(&pooled, color);
    acc[0].name = format!("{label} (bars: Wilson 95 %)");
    series.extend(acc);
    Panel { title, x_label, y_label: "exact-match accuracy".into(), y_range: Some((y0, y1)), series }
}

/// One phase profile as a figure.
pub fn phase_profile(stem: &Path, title: &str, profile: &PhaseProfile, stride: Option<usize>) -> Result<Vec<PathBuf>> {
    plot::line_chart(stem, &phase_panel(title, profile, stride, 0))
}

/// Knockout drop bins (percentage points) and their colours, up to a total loss.
const DROP_BINS: [(f64, &str, (u8, u8, u8)); 8] = [
    (f64::NEG_INFINITY, "gain (< -2 pp)", (170, 200, 235)),
    (-2.0, "-2..5 pp", (245, 245, 245)),
    (5.0, "5..15 pp", (253, 219, 160)),
    (15.0, "15..30 pp", (250, 170, 100)),
    (30.0, "30..50 pp", (230, 100, 60)),
    (50.0, "50..75 pp", (190, 45, 40)),
    (75.0, "75..90 pp", (140, 20, 30)),
    (90.0, ">= 90 pp", (80, 0, 20)),
];

/// The knockout map (rows layer x head, columns residue group) as a binned heatmap with the
/// drop written in each cell; a drop whose Newcombe 95 % interval contains 0 (not
/// distinguishable from no effect) is written in brackets.
pub fn knockout_map(stem: &Path, title: &str, map: &KnockoutMap) -> Result<Vec<PathBuf>> {
    let bin = |d: f64| DROP_BINS.iter().rposition(|b| d >= b.0).unwrap_or(1);
    let text = |clean: &GroupAccuracy, knocked: &GroupAccuracy, d: f64| {
        let (lo, hi) = newcombe_pp(clean.correct, clean.n, knocked.correct, knocked.n);
        if clean.n == 0 || knocked.n == 0 || (lo <= 0.0 && hi >= 0.0) {
            format!("({d:.0})")
        } else {
            format!("{d:.0}")
        }
    };
    let grid = CategoryGrid {
        title: title.into(),
        x_label: format!("residue group (mod {})", map.modulus),
        y_label: "layer.head".into(),
        columns: (0..map.modulus).map(|g| g.to_string()).collect(),
        rows: map.rows.iter().map(|r| format!("L{}.H{}", r.layer, r.head)).collect(),
        cells: map.rows.iter().map(|r| r.drop_pp.iter().map(|&d| bin(d)).collect()).collect(),
        cell_text: Some(
            map.rows
                .iter()
                .map(|r| r.groups.iter().zip(&map.clean).zip(&r.drop_pp).map(|((k, c), &d)| text(c, k, d)).collect())
                .collect(),
        ),
        categories: DROP_BINS.iter().map(|b| (b.1.to_string(), b.2)).collect(),
        note: vec!["(d): the drop's Newcombe 95 %".into(), "interval contains 0".into()],
    };
    plot::category_grid(stem, &grid)
}

/// Palette index of the diagonal and the 1/W line (black); gates take the other colours.
const DIAGONAL: usize = 9;

/// Distinct palette colours for gates (no grey, no black).
const GATE_COLORS: [usize; 10] = [0, 1, 2, 3, 4, 5, 7, 8, 10, 11];

fn gate_color(i: usize) -> usize {
    GATE_COLORS[i % GATE_COLORS.len()]
}

fn gate_label(layer: usize, head: usize, branch: Branch) -> String {
    let b = match branch {
        Branch::Key => "K",
        Branch::Value => "V",
    };
    format!("L{layer}.H{head}.{b}")
}

/// Gate preferences at the last snapshot: one point per gate in the (static, input-dependent)
/// plane, with the diagonal; trajectories of every gate across snapshots (a dot at the first
/// snapshot, so the direction shows; value gates dashed); and per gate the average gate over
/// offsets beside what the head reads from each offset, with the uniform `1/W` marked.
pub fn gate_figures(stem: &Path, title: &str, snapshots: &[GateSnapshot], window: usize) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let Some(last) = snapshots.last() else { return Ok(files) };
    let w = window as f64;
    let diag = Series::reference("diagonal", vec![(1.0, 1.0), (w, w)], DIAGONAL);
    let mut traj = vec![diag.clone()];
    for (i, g) in last.gates.iter().enumerate() {
        let pts: Vec<(f64, f64)> = snapshots
            .iter()
            .filter_map(|s| {
                s.gates
                    .iter()
                    .find(|x| x.layer == g.layer && x.head == g.head && x.branch == g.branch)
                    .map(|x| (x.static_concentration, x.input_concentration))
            })
            .collect();
        let start = pts.first().copied().into_iter().collect();
        let dashed = g.branch == Branch::Value;
        traj.push(Series { dashed, ..Series::line(gate_label(g.layer, g.head, g.branch), pts, gate_color(i)) });
        traj.push(Series::markers("", start, gate_color(i)));
    }
    let mut scatter = vec![diag];
    for (i, g) in last.gates.iter().enumerate() {
        scatter.push(Series::markers(
            gate_label(g.layer, g.head, g.branch),
            vec![(g.static_concentration, g.input_concentration)],
            gate_color(i),
        ));
    }
    let axes = |t: String, series: Vec<Series>| Panel {
        title: t,
        x_label: "static concentration exp(H(E[a])) (effective offsets)".into(),
        y_label: "input-dependent E[exp(H(a))]".into(),
        y_range: Some((0.9, w + 0.1)),
        series,
    };
    let name =
        |s: &str| stem.with_file_name(format!("{}-{s}", stem.file_name().and_then(|n| n.to_str()).unwrap_or("gates")));
    files.extend(plot::line_chart(&name("scatter"), &axes(format!("{title}: gates at step {}", last.step), scatter))?);
    files.extend(plot::line_chart(
        &name("trajectory"),
        &axes(format!("{title}: gate trajectories over {} snapshots (dot = first)", snapshots.len()), traj),
    )?);
    let offsets = |v: &[f64]| v.iter().enumerate().map(|(i, &a)| (i as f64, a)).collect::<Vec<_>>();
    let panels: Vec<Panel> = last
        .gates
        .iter()
        .map(|g| {
            let mut series = vec![
                Series::reference("uniform 1/W", vec![(0.0, 1.0 / w), (w - 1.0, 1.0 / w)], DIAGONAL),
                Series { markers: true, ..Series::line("gate", offsets(&g.profile), 0) },
            ];
            if let Some(r) = &g.reads {
                series.push(Series { markers: true, ..Series::line("read share", offsets(&r.profile), 1) });
            }
            let top = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max);
            Panel {
                title: gate_label(g.layer, g.head, g.branch),
                x_label: "offset in window".into(),
                y_label: "mean weight".into(),
                y_range: Some((0.0, (1.15 * top).min(1.0))),
                series,
            }
        })
        .collect();
    if !panels.is_empty() {
        let cols = 4.min(panels.len());
        let rows = panels.len().div_ceil(cols) as u32;
        files.extend(plot::line_panels(
            &name("profile"),
            &format!("{title}: average gate and read share over offsets (step {})", last.step),
            &panels,
            cols,
            (360 * cols as u32, 60 + 240 * rows),
        )?);
    }
    Ok(files)
}
