//! The phase lab's figures, built from result data only (so `phasekv report` redraws them
//! without a model): phase profiles with Wilson bands and the stride marked, knockout maps,
//! and gate-preference plots.

use super::grid::{category_grid, CategoryGrid};
use super::plot::{self, Panel, Series};
use crate::analysis::eval::KnockoutMap;
use crate::analysis::gates::{Branch, GateSnapshot, GateStats};
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
            Series::reference(name, vec![(x as f64, y0), (x as f64, y1)], plot::GREY)
        })
        .collect()
}

/// Accuracy per group (x = group index) with its Wilson 95 % interval as error bars.
pub fn accuracy_series(groups: &[GroupAccuracy], color: usize) -> Vec<Series> {
    let pts = groups.iter().map(|g| (g.group as f64, g.accuracy)).collect();
    let errors = groups.iter().map(|g| (g.wilson_lo, g.wilson_hi)).collect();
    vec![Series { markers: true, errors, ..Series::line("accuracy (bars: Wilson 95 %)", pts, color) }]
}

/// The smallest span of an accuracy axis (10 pp): a panel's range is fitted to its data (a
/// range fixed at 0-1 flattens the high-accuracy models) but never narrower, so a ripple of a
/// fraction of a point cannot fill a panel and look like a dip of tens of points.
pub const MIN_ACCURACY_SPAN: f64 = 0.10;

/// The y range that shows every group's Wilson interval, padded, within `[0, 1.02]`, at least
/// [`MIN_ACCURACY_SPAN`] wide (widened downward from the top, or upward from 0).
pub fn accuracy_range(groups: &[GroupAccuracy]) -> (f64, f64) {
    let lo = groups.iter().map(|g| g.wilson_lo).fold(1.0, f64::min);
    let hi = groups.iter().map(|g| g.wilson_hi).fold(0.0, f64::max);
    let pad = 0.05 * (hi - lo).max(0.02);
    let (mut y0, mut y1) = ((lo - pad).max(0.0), (hi + pad).min(1.02));
    if y1 - y0 < MIN_ACCURACY_SPAN {
        y0 = (y1 - MIN_ACCURACY_SPAN).max(0.0);
        y1 = y0 + MIN_ACCURACY_SPAN;
    }
    (y0, y1)
}

/// The y range as a panel title states it: `y 90-100 %`.
pub fn range_label((y0, y1): (f64, f64)) -> String {
    format!("y {:.0}-{:.0} %", 100.0 * y0, (100.0 * y1).min(100.0))
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
            "{title}: gap {:.1} pp, {period}, chi2 p = {:.1e} [{}]",
            profile.max_gap_pp,
            profile.chi_square.p_value,
            range_label((y0, y1))
        ),
        x_label: format!("residue group (source-key position mod {})", profile.modulus),
        y_label: "exact-match accuracy".into(),
        y_range: Some((y0, y1)),
        series,
        ..Panel::default()
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
        series.push(Series::reference(name, r.iter().map(|g| (g.group as f64, g.accuracy)).collect(), plot::BLACK));
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
    Panel {
        title: format!("{title} [{}]", range_label((y0, y1))),
        x_label,
        y_label: "exact-match accuracy".into(),
        y_range: Some((y0, y1)),
        series,
        ..Panel::default()
    }
}

/// One y range for every panel of a figure of accuracies (issue 43: per-panel ranges of 10 to
/// 50 pp made a 2 pp dip in one panel look like a 20 pp one in the next): the union of the
/// panels' ranges is set on each, its stride marks (dashed verticals) are stretched to it, and
/// the per-panel range ([`range_label`], as [`seeds_panel`] and [`phase_panel`] print it) is
/// taken out of each title. Returns the shared range (`None`: no panel had one).
pub fn share_y_range(panels: &mut [Panel]) -> Option<(f64, f64)> {
    let shared = panels
        .iter()
        .filter_map(|p| p.y_range)
        .fold(None, |m: Option<(f64, f64)>, (a, b)| Some(m.map_or((a, b), |(lo, hi)| (lo.min(a), hi.max(b)))))?;
    for p in panels.iter_mut() {
        if let Some(own) = p.y_range {
            p.title = p.title.replace(&format!(" [{}]", range_label(own)), "");
        }
        p.y_range = Some(shared);
        for s in p.series.iter_mut().filter(|s| s.dashed && s.points.len() == 2 && s.points[0].0 == s.points[1].0) {
            s.points[0].1 = shared.0;
            s.points[1].1 = shared.1;
        }
    }
    Some(shared)
}

/// One phase profile as a figure.
pub fn phase_profile(stem: &Path, title: &str, profile: &PhaseProfile, stride: Option<usize>) -> Result<Vec<PathBuf>> {
    plot::line_chart(stem, &phase_panel(title, profile, stride, 0))
}

/// Knockout drop bins (percentage points) and their colours, up to a total loss: a gain in
/// blue, then a sequential scale (after ColorBrewer's YlOrBr, darkest last) whose lightness falls by
/// at least `colour::MIN_LIGHTNESS_STEP` per bin, so the top bins stay apart.
pub const DROP_BINS: [(f64, &str, (u8, u8, u8)); 8] = [
    (f64::NEG_INFINITY, "gain (< -2 pp)", (116, 173, 209)),
    (-2.0, "-2..5 pp", (245, 245, 245)),
    (5.0, "5..15 pp", (254, 196, 79)),
    (15.0, "15..30 pp", (254, 153, 41)),
    (30.0, "30..50 pp", (236, 112, 20)),
    (50.0, "50..75 pp", (204, 76, 2)),
    (75.0, "75..90 pp", (153, 52, 4)),
    (90.0, ">= 90 pp", (60, 22, 4)),
];

/// The colour of the clean-accuracy row of a knockout map (a category of its own, not a drop):
/// periwinkle, at least `colour::MIN_DELTA_E` from every drop bin, the gain blue and their pale
/// (not significant) versions, under normal and red-green-deficient vision (issue 43: the old
/// pale grey-blue read as a pale cell).
pub const CLEAN_ROW: (u8, u8, u8) = (140, 150, 250);

/// The knockout map (rows layer x head, columns residue group) as a binned heatmap with the
/// drop written in each cell, under a first row with the clean accuracy (%) of each group (a
/// map at 100 % clean accuracy cannot show gains). A drop whose Newcombe 95 % interval contains
/// 0 (not told apart from no effect) is drawn pale and written in brackets.
pub fn knockout_map(stem: &Path, title: &str, map: &KnockoutMap) -> Result<Vec<PathBuf>> {
    let bin = |d: f64| DROP_BINS.iter().rposition(|b| d >= b.0).unwrap_or(1);
    let null = |clean: &GroupAccuracy, knocked: &GroupAccuracy| {
        let (lo, hi) = newcombe_pp(clean.correct, clean.n, knocked.correct, knocked.n);
        clean.n == 0 || knocked.n == 0 || (lo <= 0.0 && hi >= 0.0)
    };
    let text = |null: bool, d: f64| if null { format!("({d:.0})") } else { format!("{d:.0}") };
    let clean_cat = DROP_BINS.len();
    let mut rows = vec!["clean %".to_string()];
    rows.extend(map.rows.iter().map(|r| r.label()));
    let mut cells = vec![vec![clean_cat; map.modulus]];
    cells.extend(map.rows.iter().map(|r| r.drop_pp.iter().map(|&d| bin(d)).collect()));
    let mut muted = vec![vec![false; map.modulus]];
    muted.extend(map.rows.iter().map(|r| r.groups.iter().zip(&map.clean).map(|(k, c)| null(c, k)).collect()));
    let mut cell_text = vec![map.clean.iter().map(|c| format!("{:.0}", 100.0 * c.accuracy)).collect::<Vec<_>>()];
    cell_text.extend(
        map.rows.iter().zip(&muted[1..]).map(|(r, m)| r.drop_pp.iter().zip(m).map(|(&d, &n)| text(n, d)).collect()),
    );
    let mut categories: Vec<(String, (u8, u8, u8))> = DROP_BINS.iter().map(|b| (b.1.to_string(), b.2)).collect();
    categories.push(("clean accuracy (%), top row".into(), CLEAN_ROW));
    let grid = CategoryGrid {
        title: title.into(),
        x_label: format!("residue group (mod {})", map.modulus),
        y_label: match map.intervention {
            crate::analysis::eval::Intervention::KvHead => "layer.head".into(),
            crate::analysis::eval::Intervention::WindowSlot => "layer.window slot".into(),
        },
        columns: (0..map.modulus).map(|g| g.to_string()).collect(),
        rows,
        cells,
        cell_text: Some(cell_text),
        categories,
        note: vec![
            "cells: drop in accuracy (pp)".into(),
            "pale, (d): its Newcombe 95 %".into(),
            "interval contains 0".into(),
        ],
        muted,
        outlined: Vec::new(),
    };
    category_grid(stem, &grid)
}

fn gate_label(layer: usize, head: usize, branch: Branch) -> String {
    let b = match branch {
        Branch::Key => "K",
        Branch::Value => "V",
    };
    format!("L{layer}.H{head}.{b}")
}

/// The point of a gate in the concentration plane: what the head reads (static and
/// input-dependent effective read offsets, what E7 judges) where every snapshot recorded reads,
/// else the gate's own concentrations.
fn plane_point(g: &GateStats, reads: bool) -> (f64, f64) {
    match (&g.reads, reads) {
        (Some(r), true) => (r.static_offsets, r.input_offsets),
        _ => (g.static_concentration, g.input_concentration),
    }
}

/// The square range that shows every point, padded (at least 0.2 offsets wide).
fn plane_range(pts: impl Iterator<Item = (f64, f64)>) -> (f64, f64) {
    let (lo, hi) =
        pts.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (x, y)| (lo.min(x).min(y), hi.max(x).max(y)));
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = (0.06 * (hi - lo)).max(0.1);
    (lo - pad, hi + pad)
}

/// Gate preferences at the last snapshot: one point per gate in the (static, input-dependent)
/// plane, with the diagonal; every gate's path across snapshots (a ring at the first snapshot,
/// an arrowhead at the last; value gates dashed; a gate that never moved is a single marker);
/// and per head one panel with its key and value branches: the average gate over offsets and
/// what the head reads from each offset, with the uniform `1/W` marked (one legend, first
/// panel). Where reads were recorded, the plane shows them (E7's quantity), else the gates.
pub fn gate_figures(stem: &Path, title: &str, snapshots: &[GateSnapshot], window: usize) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let Some(last) = snapshots.last() else { return Ok(files) };
    let w = window as f64;
    let reads = snapshots.iter().all(|s| s.gates.iter().all(|g| g.reads.is_some()));
    let heads: Vec<(usize, usize)> = last.gates.iter().fold(Vec::new(), |mut v, g| {
        if !v.contains(&(g.layer, g.head)) {
            v.push((g.layer, g.head));
        }
        v
    });
    let color = |l: usize, h: usize| heads.iter().position(|&x| x == (l, h)).unwrap_or(0);
    let paths: Vec<(&GateStats, Vec<(f64, f64)>)> = last
        .gates
        .iter()
        .map(|g| {
            let pts = snapshots
                .iter()
                .filter_map(|s| s.gates.iter().find(|x| (x.layer, x.head, x.branch) == (g.layer, g.head, g.branch)))
                .map(|x| plane_point(x, reads))
                .collect();
            (g, pts)
        })
        .collect();
    // The whole range of effective offsets, 1 (one offset) to W (uniform), so that a head
    // that drifted to near uniform reads as such (issue 43: axes fitted to the data started
    // near 3 and hid it); wider only if a point lies outside.
    let (lo, hi) = plane_range(paths.iter().flat_map(|(_, p)| p.iter().copied()));
    let (lo, hi) = (lo.min(0.9), hi.max(w + 0.1));
    let diag = Series::reference("diagonal (static = input-dependent)", vec![(lo, lo), (hi, hi)], plot::GREY);
    let mut traj = vec![diag.clone()];
    for (g, pts) in &paths {
        let c = color(g.layer, g.head);
        let label = gate_label(g.layer, g.head, g.branch);
        let moved = pts.iter().any(|p| (p.0 - pts[0].0).abs() + (p.1 - pts[0].1).abs() > 1e-9);
        if !moved {
            traj.push(Series::markers(format!("{label} (constant)"), pts[..1].to_vec(), c));
            continue;
        }
        let dashed = g.branch == Branch::Value;
        traj.push(Series { dashed, arrow: true, start_ring: true, ..Series::line(label, pts.clone(), c) });
    }
    let mut scatter = vec![diag];
    for (g, pts) in &paths {
        let last_pt = pts.last().copied().into_iter().collect();
        scatter.push(Series::markers(gate_label(g.layer, g.head, g.branch), last_pt, color(g.layer, g.head)));
    }
    let what = if reads { "read offsets" } else { "gate offsets" };
    let axes = |t: String, series: Vec<Series>| Panel {
        title: t,
        x_label: format!("static effective {what} exp(H(E[a])) (1 = one, W = {window} = uniform)"),
        y_label: format!("input-dependent E[exp(H(a))] ({what})"),
        y_range: Some((lo, hi)),
        x_range: Some((lo, hi)),
        series,
        ..Panel::default()
    };
    let name =
        |s: &str| stem.with_file_name(format!("{}-{s}", stem.file_name().and_then(|n| n.to_str()).unwrap_or("gates")));
    files.extend(plot::line_chart(&name("scatter"), &axes(format!("{title}: {what} at step {}", last.step), scatter))?);
    let first = snapshots.first().map_or(0, |s| s.step);
    files.extend(plot::line_chart(
        &name("trajectory"),
        &axes(format!("{title}: {what}, steps {first} (ring) to {} (arrow)", last.step), traj),
    )?);
    let offsets = |v: &[f64]| v.iter().enumerate().map(|(i, &a)| (i as f64, a)).collect::<Vec<_>>();
    let panels: Vec<Panel> = heads
        .iter()
        .enumerate()
        .map(|(k, &(l, h))| {
            let mut series =
                vec![Series::reference("uniform 1/W", vec![(0.0, 1.0 / w), (w - 1.0, 1.0 / w)], plot::GREY)];
            for (branch, c) in [(Branch::Key, 0), (Branch::Value, 1)] {
                let Some(g) = last.gates.iter().find(|g| (g.layer, g.head, g.branch) == (l, h, branch)) else {
                    continue;
                };
                let b = if branch == Branch::Key { "K" } else { "V" };
                series.push(Series { markers: true, ..Series::line(format!("{b} gate"), offsets(&g.profile), c) });
                if let Some(r) = &g.reads {
                    series.push(Series {
                        markers: true,
                        pattern: Some((3, 3)),
                        ..Series::line(format!("{b} read share"), offsets(&r.profile), c)
                    });
                }
            }
            let top = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max);
            Panel {
                title: format!("L{l}.H{h}: key and value"),
                x_label: "offset in window".into(),
                y_label: "mean weight".into(),
                y_range: Some((0.0, (1.15 * top).min(1.0))),
                series,
                hide_legend: k > 0,
                ..Panel::default()
            }
        })
        .collect();
    if !panels.is_empty() {
        let cols = 2.min(panels.len());
        let rows = panels.len().div_ceil(cols) as u32;
        files.extend(plot::line_panels(
            &name("profile"),
            &format!("{title}: gate and read share over offsets, K and V of each head (step {})", last.step),
            &panels,
            cols,
            (560 * cols as u32, 60 + 280 * rows),
        )?);
    }
    Ok(files)
}
