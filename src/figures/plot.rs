//! Plotting helpers on plotters: multi-series line charts (optionally several panels),
//! scatter plots, with legends in a framed strip of their own and titles fitted to the canvas
//! (category grids: [`super::grid`]). Every helper
//! writes `<stem>.svg` and `<stem>.png` (through temporary files renamed into place) and
//! returns both paths.

use crate::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::{Path, PathBuf};
use std::sync::Once;

static FONT: Once = Once::new();
static FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// Register the embedded DejaVu Sans for the `sans-serif` family (once per process).
pub fn ensure_font() {
    FONT.call_once(|| {
        // The font is embedded at compile time and known to parse; a failure would only
        // leave text undrawn, never crash.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT_BYTES);
        let _ = plotters::style::register_font("sans-serif", FontStyle::Bold, FONT_BYTES);
    });
}

pub use super::colour::{palette, BLACK, GREY, PALETTE};

/// The stroke of every legend's frame. No data mark is drawn in it, so a test finds legends in
/// an SVG by it (`tests/report_figures.rs`: no legend covers a data mark).
pub const LEGEND_FRAME: (u8, u8, u8) = (150, 150, 151);

/// The smallest font size a title is shrunk to (below it, the title is cut with an ellipsis).
const MIN_TITLE_FONT: f64 = 10.0;

/// The width in pixels of `text` in the embedded font at plotters size `size` (the size given
/// to a plotters font; an SVG states it as `size / 1.24`).
pub fn text_width(text: &str, size: f64) -> f64 {
    ensure_font();
    ("sans-serif", size)
        .into_font()
        .box_size(text)
        .map(|(w, _)| f64::from(w))
        .unwrap_or(0.6 * size * text.chars().count() as f64)
}

/// A title fitted into `width` pixels: the largest size from `size` down to
/// [`MIN_TITLE_FONT`] at which it fits, and cut with an ellipsis where none does.
pub fn fit_title(text: &str, size: f64, width: f64) -> (String, f64) {
    let mut s = size;
    while s > MIN_TITLE_FONT && text_width(text, s) > width {
        s -= 0.5;
    }
    let mut t = text.to_string();
    while text_width(&t, s) > width && t.chars().count() > 1 {
        let keep: String = t.chars().take(t.chars().count().saturating_sub(2)).collect();
        t = format!("{}…", keep.trim_end_matches('…'));
    }
    (t, s)
}

/// One named series of `(x, y)` points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Colour (palette index).
    pub color: usize,
    /// Draw markers at the points as well as the line.
    pub markers: bool,
    /// Draw as a dashed reference line.
    pub dashed: bool,
    /// Connect the points with a line (false: markers only).
    pub line: bool,
    /// An interval `(lo, hi)` per point, drawn as a vertical error bar with caps (empty: none).
    pub errors: Vec<(f64, f64)>,
    /// Draw the line thin and light (one seed beside the pooled line).
    pub thin: bool,
    /// A dash pattern `(dash, gap)` in pixels for the line (None: solid, or `dashed`'s).
    pub pattern: Option<(u32, u32)>,
    /// An arrowhead at the last point, pointing along the last segment (direction of a path).
    pub arrow: bool,
    /// An open ring at the first point (start of a path).
    pub start_ring: bool,
}

impl Series {
    /// Markers only, no connecting line.
    pub fn markers(name: impl Into<String>, points: Vec<(f64, f64)>, color: usize) -> Self {
        Series {
            name: name.into(),
            points,
            color,
            markers: true,
            dashed: false,
            line: false,
            errors: Vec::new(),
            thin: false,
            pattern: None,
            arrow: false,
            start_ring: false,
        }
    }

    /// A plain line series.
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>, color: usize) -> Self {
        Series {
            name: name.into(),
            points,
            color,
            markers: false,
            dashed: false,
            line: true,
            errors: Vec::new(),
            thin: false,
            pattern: None,
            arrow: false,
            start_ring: false,
        }
    }

    /// A dashed reference line.
    pub fn reference(name: impl Into<String>, points: Vec<(f64, f64)>, color: usize) -> Self {
        Series { dashed: true, ..Series::line(name, points, color) }
    }
}

/// One panel of a line chart.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Panel {
    /// Panel title.
    pub title: String,
    /// x-axis label.
    pub x_label: String,
    /// y-axis label.
    pub y_label: String,
    /// Fixed y range (None: from the data).
    pub y_range: Option<(f64, f64)>,
    /// The series.
    pub series: Vec<Series>,
    /// Draw no legend (a figure whose panels share one legend shows it in one panel only).
    pub hide_legend: bool,
    /// Label the y axis at integers only (counts).
    pub integer_y: bool,
    /// Fixed x range (None: from the data).
    pub x_range: Option<(f64, f64)>,
    /// Names of the integer x positions 0, 1, ... (a categorical axis; empty: numbers).
    pub x_ticks: Vec<String>,
}

fn plot_err(stem: &Path, e: impl std::fmt::Display) -> Error {
    Error::File { path: stem.to_path_buf(), reason: format!("plotting failed: {e}") }
}

/// Whether every finite x of the data series (not the dashed references) is an integer: a
/// discrete axis, labelled at integers only.
fn integer_x(series: &[Series]) -> bool {
    let mut xs =
        series.iter().filter(|s| !s.dashed).flat_map(|s| s.points.iter().map(|p| p.0)).filter(|x| x.is_finite());
    xs.all(|x| (x - x.round()).abs() < 1e-9) && series.iter().any(|s| !s.dashed && !s.points.is_empty())
}

fn bounds(series: &[Series], y_range: Option<(f64, f64)>, x_range: Option<(f64, f64)>) -> ((f64, f64), (f64, f64)) {
    let bars = series.iter().flat_map(|s| s.points.iter().zip(&s.errors).flat_map(|(p, e)| [(p.0, e.0), (p.0, e.1)]));
    let pts =
        series.iter().flat_map(|s| s.points.iter().copied()).chain(bars).filter(|p| p.0.is_finite() && p.1.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
    for (x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let xpad = 0.02 * (x1 - x0);
    (x0, x1) = x_range.unwrap_or((x0 - xpad, x1 + xpad));
    if let Some(r) = y_range {
        (y0, y1) = r;
    } else {
        let pad = 0.05 * (y1 - y0).abs().max(1e-9);
        y0 -= pad;
        y1 += pad;
    }
    ((x0, x1), (y0, y1))
}

/// Something drawable on any plotters backend.
pub(super) trait Figure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String>;
}

struct PanelsFig<'a> {
    title: &'a str,
    panels: &'a [Panel],
    cols: usize,
    scatter: bool,
}

impl Figure for PanelsFig<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String> {
        draw_panels(root, self.title, self.panels, self.cols, self.scatter)
    }
}

/// Write one figure twice (SVG and PNG).
pub(super) fn write_both(stem: &Path, size: (u32, u32), fig: &impl Figure) -> Result<Vec<PathBuf>> {
    ensure_font();
    if let Some(dir) = stem.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let name = stem.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "figure".into());
    let svg = stem.with_file_name(format!("{name}.svg"));
    let png = stem.with_file_name(format!("{name}.png"));
    // Removed on every error path (a full disk) unless persisted.
    let svg_tmp = crate::run_dir::Owned::temp_name(&svg);
    let png_tmp = crate::run_dir::Owned::temp_name(&png);
    {
        let root = SVGBackend::new(svg_tmp.path(), size).into_drawing_area();
        fig.draw(&root).map_err(|e| plot_err(stem, e))?;
        root.present().map_err(|e| plot_err(stem, e))?;
    }
    {
        let root = BitMapBackend::new(png_tmp.path(), size).into_drawing_area();
        fig.draw(&root).map_err(|e| plot_err(stem, e))?;
        root.present().map_err(|e| plot_err(stem, e))?;
    }
    svg_tmp.persist(&svg)?;
    png_tmp.persist(&png)?;
    Ok(vec![svg, png])
}

/// The legend strip of a panel: a frame in [`LEGEND_FRAME`] and one entry per named series
/// (spacing and font shrunk to fit the strip's height, names to its width).
fn draw_legend<DB: DrawingBackend>(
    legend: &DrawingArea<DB, Shift>,
    named: &[&Series],
    scatter: bool,
) -> std::result::Result<(), String> {
    if named.is_empty() {
        return Ok(());
    }
    let (w, h) = legend.dim_in_pixel();
    let step = (22.0f64).min((f64::from(h) - 50.0) / named.len() as f64).max(9.0);
    let font = (step * 12.0 / 22.0).clamp(8.0, 12.0);
    let top = 36;
    let bottom = top + (step * named.len() as f64).ceil() as i32;
    let frame = RGBColor(LEGEND_FRAME.0, LEGEND_FRAME.1, LEGEND_FRAME.2);
    legend
        .draw(&Rectangle::new([(1, top - 12), (w as i32 - 3, bottom - 4)], frame.stroke_width(1)))
        .map_err(|e| e.to_string())?;
    for (i, s) in named.iter().enumerate() {
        let color = palette(s.color);
        let y = top + (step * i as f64) as i32;
        if scatter || !s.line {
            legend.draw(&Circle::new((14, y), 4, color.filled())).map_err(|e| e.to_string())?;
        } else {
            let style = if s.thin { color.mix(0.45).stroke_width(1) } else { color.stroke_width(2) };
            let (dash, gap) = s.pattern.unwrap_or(if s.dashed { (6, 4) } else { (20, 0) });
            let mut x = 4;
            while x < 24 {
                let end = (x + dash as i32).min(24);
                legend.draw(&PathElement::new(vec![(x, y), (end, y)], style)).map_err(|e| e.to_string())?;
                x = end + gap.max(1) as i32;
            }
        }
        if !s.errors.is_empty() {
            legend
                .draw(&PathElement::new(vec![(14, y - 6), (14, y + 6)], color.mix(0.7)))
                .map_err(|e| e.to_string())?;
        }
        let (name, size) = fit_title(&s.name, font, f64::from(w) - 36.0);
        legend
            .draw(&Text::new(name, (30, y - (size * 0.55) as i32), ("sans-serif", size).into_font()))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// An arrowhead at `tip` pointing away from `from` (data coordinates; `scale` pixels per data
/// unit on each axis), 10 pixels long.
fn arrowhead(from: (f64, f64), tip: (f64, f64), scale: (f64, f64)) -> Option<Vec<(f64, f64)>> {
    let (dx, dy) = ((tip.0 - from.0) * scale.0, (tip.1 - from.1) * scale.1);
    let len = dx.hypot(dy);
    if len < 1.0 {
        return None;
    }
    let (ux, uy) = (dx / len, dy / len);
    let base = (-10.0 * ux, -10.0 * uy);
    let corner =
        |side: f64| (tip.0 + (base.0 - side * 4.5 * uy) / scale.0, tip.1 + (base.1 + side * 4.5 * ux) / scale.1);
    Some(vec![tip, corner(1.0), corner(-1.0)])
}

/// The sharpest join plotters' raster backend strokes without a spike: the cosine of the
/// angle between the two segments at a vertex (seen from it) may be at most this. Its stroke
/// polygon (`plotters_backend::rasterizer::polygonize`) puts the inner corner of a join where
/// the two offset edges meet, `(w / 2) / sin(theta / 2)` from the vertex with no limit, so a
/// path that nearly turns back (theta near 0) throws that corner far off, and the fill draws a
/// stray line to it, across the axes, which the SVG (stroked by the viewer, with a miter limit)
/// lacks. Its own limit on the outer corner is 4 half-widths (`sin(theta / 2) >= 1/4`, that is
/// `cos theta <= 7/8`); the inner corner is held to the same.
pub const SHARPEST_JOIN_COS: f64 = 7.0 / 8.0;

/// A polyline split into pieces (sharing their end points) that have no join sharper than
/// [`SHARPEST_JOIN_COS`], judged in the backend's integer pixels (`to_px`, as plotters rounds,
/// repeated pixels skipped as it skips them): each piece is stroked on its own, so a sharp turn
/// is two overlapping line ends instead of a join.
pub fn stroke_pieces(pts: &[(f64, f64)], to_px: impl Fn(&(f64, f64)) -> (i32, i32)) -> Vec<Vec<(f64, f64)>> {
    let mut pieces = Vec::new();
    let mut piece: Vec<(f64, f64)> = Vec::new();
    // The last two distinct pixels of the current piece.
    let mut before: Option<(i32, i32)> = None;
    let mut last = before;
    for p in pts {
        let q = to_px(p);
        if last == Some(q) {
            piece.push(*p);
            continue;
        }
        if let (Some(a), Some(b)) = (before, last) {
            let u = (f64::from(a.0 - b.0), f64::from(a.1 - b.1));
            let v = (f64::from(q.0 - b.0), f64::from(q.1 - b.1));
            let cos = (u.0 * v.0 + u.1 * v.1) / (u.0.hypot(u.1) * v.0.hypot(v.1));
            if cos > SHARPEST_JOIN_COS {
                let joint = *piece.last().unwrap_or(p);
                pieces.push(std::mem::take(&mut piece));
                piece.push(joint);
            }
        }
        piece.push(*p);
        (before, last) = (last, Some(q));
    }
    if !piece.is_empty() {
        pieces.push(piece);
    }
    pieces
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    scatter: bool,
) -> std::result::Result<(), String> {
    // The legend gets a strip of its own to the right, so it never covers data.
    let named: Vec<&Series> =
        if panel.hide_legend { Vec::new() } else { panel.series.iter().filter(|s| !s.name.is_empty()).collect() };
    let (w, _) = area.dim_in_pixel();
    let longest = named.iter().map(|s| text_width(&s.name, 12.0)).fold(0.0, f64::max);
    let legend_w = if named.is_empty() { 0 } else { ((40.0 + longest) as u32).clamp(110, w / 3) };
    let (plot_area, legend) = area.split_horizontally(w - legend_w);
    let ((x0, x1), (y0, y1)) = bounds(&panel.series, panel.y_range, panel.x_range);
    let (title, size) = fit_title(&panel.title, 16.0, f64::from(w - legend_w) - 16.0);
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(&title, ("sans-serif", size))
        .margin(8)
        .x_label_area_size(38)
        .y_label_area_size(52)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| e.to_string())?;
    let discrete = integer_x(&panel.series);
    let span = (x1 - x0).ceil().max(1.0) as usize;
    let yspan = (y1 - y0).ceil().max(1.0) as usize;
    let int_label = |x: &f64| if (x - x.round()).abs() < 1e-9 { format!("{:.0}", x) } else { String::new() };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(panel.x_label.as_str())
        .y_desc(panel.y_label.as_str())
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(WHITE.mix(0.0));
    let tick_label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-9 && i >= 0.0 {
            panel.x_ticks.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    if !panel.x_ticks.is_empty() {
        mesh.x_labels(span + 1).x_label_formatter(&tick_label);
    } else if discrete {
        mesh.x_labels((span + 1).min(13)).x_label_formatter(&int_label);
    }
    if panel.integer_y {
        mesh.y_labels((yspan + 1).min(11)).y_label_formatter(&int_label);
    }
    mesh.draw().map_err(|e| e.to_string())?;
    let (pw, ph) = chart.plotting_area().dim_in_pixel();
    let scale = (f64::from(pw) / (x1 - x0), f64::from(ph) / (y1 - y0));
    for s in &panel.series {
        let color = palette(s.color);
        let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite()).collect();
        let cap = 0.12 * (x1 - x0) / (pts.len().max(8) as f64);
        for (&(x, _), &(lo, hi)) in s.points.iter().zip(&s.errors).filter(|(p, e)| p.0.is_finite() && e.0 <= e.1) {
            let style = color.mix(0.7).stroke_width(1);
            let bar = [vec![(x, lo), (x, hi)], vec![(x - cap, lo), (x + cap, lo)], vec![(x - cap, hi), (x + cap, hi)]];
            chart.draw_series(bar.into_iter().map(|v| PathElement::new(v, style))).map_err(|e| e.to_string())?;
        }
        if scatter || !s.line {
            let r = if scatter { 3 } else { 4 };
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, r, color.filled()))).map_err(|e| e.to_string())?;
            continue;
        }
        let style = if s.thin { color.mix(0.45).stroke_width(1) } else { color.stroke_width(2) };
        // A stroke wider than 1 px is drawn in pieces that meet at no sharp join (issue 43).
        let pieces =
            if style.stroke_width > 1 { stroke_pieces(&pts, |p| chart.backend_coord(p)) } else { vec![pts.clone()] };
        for piece in pieces {
            match s.pattern.or(if s.dashed { Some((6, 4)) } else { None }) {
                Some((dash, gap)) => {
                    chart.draw_series(DashedLineSeries::new(piece, dash, gap, style)).map_err(|e| e.to_string())?;
                }
                None => {
                    chart.draw_series(LineSeries::new(piece, style)).map_err(|e| e.to_string())?;
                }
            }
        }
        if s.markers {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(|e| e.to_string())?;
        }
        if s.start_ring {
            if let Some(&p) = pts.first() {
                chart
                    .draw_series(std::iter::once(Circle::new(p, 5, color.stroke_width(2))))
                    .map_err(|e| e.to_string())?;
            }
        }
        if s.arrow && pts.len() >= 2 {
            let tip = pts[pts.len() - 1];
            // The last point far enough back to give the arrow a direction.
            let from =
                pts.iter().rev().skip(1).find(|p| ((p.0 - tip.0) * scale.0).hypot((p.1 - tip.1) * scale.1) >= 1.0);
            if let Some(head) = from.and_then(|&f| arrowhead(f, tip, scale)) {
                chart.draw_series(std::iter::once(Polygon::new(head, color.filled()))).map_err(|e| e.to_string())?;
            }
        }
    }
    draw_legend(&legend, &named, scatter)
}

fn draw_panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    panels: &[Panel],
    cols: usize,
    scatter: bool,
) -> std::result::Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let body = if title.is_empty() {
        root.clone()
    } else {
        let (w, _) = root.dim_in_pixel();
        let (t, size) = fit_title(title, 22.0, f64::from(w) - 20.0);
        root.titled(&t, ("sans-serif", size)).map_err(|e| e.to_string())?
    };
    let cols = cols.max(1);
    let rows = panels.len().div_ceil(cols).max(1);
    let areas = body.split_evenly((rows, cols));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        draw_panel(area, panel, scatter)?;
    }
    Ok(())
}

/// A line chart: several panels in a grid of `cols` columns under one title. Writes
/// `<stem>.svg` and `<stem>.png`; returns both paths.
pub fn line_panels(stem: &Path, title: &str, panels: &[Panel], cols: usize, size: (u32, u32)) -> Result<Vec<PathBuf>> {
    if panels.is_empty() {
        return Err(Error::invalid("panels", "a chart needs at least one panel"));
    }
    write_both(stem, size, &PanelsFig { title, panels, cols, scatter: false })
}

/// A single-panel line chart with several series, axis labels, title and legend.
pub fn line_chart(stem: &Path, panel: &Panel) -> Result<Vec<PathBuf>> {
    line_panels(stem, "", std::slice::from_ref(panel), 1, (900, 560))
}

/// A scatter plot (one marker colour per series) with axis labels, title and legend.
pub fn scatter(stem: &Path, panel: &Panel) -> Result<Vec<PathBuf>> {
    write_both(stem, (900, 560), &PanelsFig { title: "", panels: std::slice::from_ref(panel), cols: 1, scatter: true })
}
