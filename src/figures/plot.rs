//! Plotting helpers on plotters: multi-series line charts (optionally several panels),
//! scatter plots and category grids (heatmaps of discrete classes) with legends. Every helper
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

/// A fixed palette: Okabe-Ito's colour-blind-friendly eight (black last), then four more
/// distinct hues, so that up to eleven series never share a colour.
pub const PALETTE: [(u8, u8, u8); 12] = [
    (0, 114, 178),
    (213, 94, 0),
    (0, 158, 115),
    (204, 121, 167),
    (230, 159, 0),
    (86, 180, 233),
    (120, 120, 120),
    (180, 160, 0),
    (140, 86, 75),
    (0, 0, 0),
    (106, 61, 154),
    (31, 120, 60),
];

/// The `i`-th palette colour (wrapping).
pub fn palette(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
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
        }
    }

    /// A dashed reference line.
    pub fn reference(name: impl Into<String>, points: Vec<(f64, f64)>, color: usize) -> Self {
        Series { dashed: true, ..Series::line(name, points, color) }
    }
}

/// One panel of a line chart.
#[derive(Debug, Clone, PartialEq)]
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

fn bounds(series: &[Series], y_range: Option<(f64, f64)>) -> ((f64, f64), (f64, f64)) {
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
    (x0, x1) = (x0 - xpad, x1 + xpad);
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
trait Figure {
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

struct GridFig<'a>(&'a CategoryGrid);

impl Figure for GridFig<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String> {
        draw_grid(root, self.0)
    }
}

/// Write one figure twice (SVG and PNG).
fn write_both(stem: &Path, size: (u32, u32), fig: &impl Figure) -> Result<Vec<PathBuf>> {
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

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    scatter: bool,
) -> std::result::Result<(), String> {
    // The legend gets a strip of its own to the right, so it never covers data.
    let named: Vec<&Series> = panel.series.iter().filter(|s| !s.name.is_empty()).collect();
    let (w, _) = area.dim_in_pixel();
    let longest = named.iter().map(|s| s.name.chars().count()).max().unwrap_or(0) as u32;
    let legend_w = if named.is_empty() { 0 } else { (40 + 7 * longest).clamp(110, w / 3) };
    let (plot_area, legend) = area.split_horizontally(w - legend_w);
    let ((x0, x1), (y0, y1)) = bounds(&panel.series, panel.y_range);
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(38)
        .y_label_area_size(52)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| e.to_string())?;
    let discrete = integer_x(&panel.series);
    let span = (x1 - x0).ceil().max(1.0) as usize;
    let int_label = |x: &f64| if (x - x.round()).abs() < 1e-9 { format!("{:.0}", x) } else { String::new() };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(panel.x_label.as_str())
        .y_desc(panel.y_label.as_str())
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(WHITE.mix(0.0));
    if discrete {
        mesh.x_labels((span + 1).min(13)).x_label_formatter(&int_label);
    }
    mesh.draw().map_err(|e| e.to_string())?;
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
        if s.dashed {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style)).map_err(|e| e.to_string())?;
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style)).map_err(|e| e.to_string())?;
        }
        if s.markers {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(|e| e.to_string())?;
        }
    }
    for (i, s) in named.iter().enumerate() {
        let color = palette(s.color);
        let y = 40 + 22 * i as i32;
        if scatter || !s.line {
            legend.draw(&Circle::new((14, y), 4, color.filled())).map_err(|e| e.to_string())?;
        } else if s.dashed {
            for x in [4, 14] {
                legend
                    .draw(&PathElement::new(vec![(x, y), (x + 6, y)], color.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
            }
        } else {
            let style = if s.thin { color.mix(0.45).stroke_width(1) } else { color.stroke_width(2) };
            legend.draw(&PathElement::new(vec![(4, y), (24, y)], style)).map_err(|e| e.to_string())?;
        }
        if !s.errors.is_empty() {
            legend
                .draw(&PathElement::new(vec![(14, y - 6), (14, y + 6)], color.mix(0.7)))
                .map_err(|e| e.to_string())?;
        }
        legend
            .draw(&Text::new(s.name.clone(), (30, y - 7), ("sans-serif", 12).into_font()))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
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
        root.titled(title, ("sans-serif", 22)).map_err(|e| e.to_string())?
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

/// A category grid (heatmap of discrete classes).
#[derive(Debug, Clone, PartialEq)]
pub struct CategoryGrid {
    /// Title.
    pub title: String,
    /// x-axis label (columns).
    pub x_label: String,
    /// y-axis label (rows).
    pub y_label: String,
    /// Column tick labels.
    pub columns: Vec<String>,
    /// Row tick labels (row 0 is drawn at the top).
    pub rows: Vec<String>,
    /// Category index per cell, `cells[row][col]`.
    pub cells: Vec<Vec<usize>>,
    /// Optional text per cell.
    pub cell_text: Option<Vec<Vec<String>>>,
    /// Category names and palette colours, for the legend.
    pub categories: Vec<(String, (u8, u8, u8))>,
    /// Lines written under the legend (how to read the cells); may be empty.
    pub note: Vec<String>,
}

fn draw_grid<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, g: &CategoryGrid) -> std::result::Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (w, _) = root.dim_in_pixel();
    let legend_w = 260.min(w / 3);
    let (main, legend) = root.split_horizontally(w - legend_w);
    let (nr, nc) = (g.rows.len(), g.columns.len());
    let mut chart = ChartBuilder::on(&main)
        .caption(&g.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..nc as f64, 0.0..nr as f64)
        .map_err(|e| e.to_string())?;
    let cols = g.columns.clone();
    let rows = g.rows.clone();
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(g.x_label.as_str())
        .y_desc(g.y_label.as_str())
        .x_labels(nc * 2 + 1)
        .y_labels(nr * 2 + 1)
        .x_label_formatter(&|x| {
            let i = (x - 0.5).round();
            if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < cols.len() {
                cols[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| {
            let i = (y - 0.5).round();
            if (y - 0.5 - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < rows.len() {
                rows[rows.len() - 1 - i as usize].clone()
            } else {
                String::new()
            }
        })
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    for (ri, row) in g.cells.iter().enumerate() {
        for (ci, &cat) in row.iter().enumerate() {
            let (r, gg, b) = g.categories.get(cat).map(|c| c.1).unwrap_or((200, 200, 200));
            // White text on dark cells (relative luminance below one half).
            let dark = (0.2126 * f64::from(r) + 0.7152 * f64::from(gg) + 0.0722 * f64::from(b)) < 128.0;
            let y = (nr - 1 - ri) as f64;
            let x = ci as f64;
            chart
                .draw_series(std::iter::once(Rectangle::new([(x, y), (x + 1.0, y + 1.0)], RGBColor(r, gg, b).filled())))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(std::iter::once(Rectangle::new([(x, y), (x + 1.0, y + 1.0)], WHITE.stroke_width(2))))
                .map_err(|e| e.to_string())?;
            if let Some(text) = g.cell_text.as_ref().and_then(|t| t.get(ri)).and_then(|r| r.get(ci)) {
                chart
                    .draw_series(std::iter::once(Text::new(
                        text.clone(),
                        (x + 0.5, y + 0.5),
                        ("sans-serif", 14).into_font().color(if dark { &WHITE } else { &BLACK }).pos(
                            plotters::style::text_anchor::Pos::new(
                                plotters::style::text_anchor::HPos::Center,
                                plotters::style::text_anchor::VPos::Center,
                            ),
                        ),
                    )))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    for (i, (name, (r, gg, b))) in g.categories.iter().enumerate() {
        let y = 60 + 30 * i as i32;
        legend
            .draw(&Rectangle::new([(10, y), (32, y + 20)], RGBColor(*r, *gg, *b).filled()))
            .map_err(|e| e.to_string())?;
        legend
            .draw(&Text::new(name.clone(), (40, y + 3), ("sans-serif", 14).into_font()))
            .map_err(|e| e.to_string())?;
    }
    let below = 60 + 30 * g.categories.len() as i32 + 10;
    for (i, line) in g.note.iter().enumerate() {
        legend
            .draw(&Text::new(line.clone(), (10, below + 18 * i as i32), ("sans-serif", 12).into_font()))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A category grid (discrete heatmap) with a legend. Writes `<stem>.svg` and `<stem>.png`.
pub fn category_grid(stem: &Path, grid: &CategoryGrid) -> Result<Vec<PathBuf>> {
    if grid.cells.len() != grid.rows.len() || grid.cells.iter().any(|r| r.len() != grid.columns.len()) {
        return Err(Error::shape(
            "category grid cells",
            format!("[{}][{}]", grid.rows.len(), grid.columns.len()),
            format!("[{}][..]", grid.cells.len()),
        ));
    }
    write_both(stem, (1000, 560), &GridFig(grid))
}
