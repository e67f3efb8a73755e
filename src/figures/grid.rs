//! Category grids (heatmaps of discrete classes) with a legend: knockout maps and Theorem 1's
//! phase diagram. Cells can be muted (drawn pale: an effect not told apart from none) or
//! outlined (a region, such as where a theorem's hypotheses hold), and the legend strip can
//! carry note lines that explain the codes.

use super::plot::{fit_title, text_width, write_both, Figure, LEGEND_FRAME};
use crate::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// How much of its colour a muted cell keeps.
pub const MUTED_KEEP: f64 = 0.3;

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
    /// Cells drawn pale (`muted[row][col]`; empty: none), keeping [`MUTED_KEEP`] of the colour.
    pub muted: Vec<Vec<bool>>,
    /// Cells outlined in black (`outlined[row][col]`; empty: none).
    pub outlined: Vec<Vec<bool>>,
}

struct GridFig<'a>(&'a CategoryGrid);

impl Figure for GridFig<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> std::result::Result<(), String> {
        draw_grid(root, self.0)
    }
}

fn flag(m: &[Vec<bool>], r: usize, c: usize) -> bool {
    m.get(r).and_then(|row| row.get(c)).copied().unwrap_or(false)
}

fn draw_grid<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, g: &CategoryGrid) -> std::result::Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (w, _) = root.dim_in_pixel();
    let widest = g
        .categories
        .iter()
        .map(|c| 40.0 + text_width(&c.0, 14.0))
        .chain(g.note.iter().map(|n| 10.0 + text_width(n, 12.0)))
        .fold(200.0, f64::max);
    let legend_w = (widest as u32 + 12).min(w / 3);
    let (main, legend) = root.split_horizontally(w - legend_w);
    let (nr, nc) = (g.rows.len(), g.columns.len());
    let (title, size) = fit_title(&g.title, 20.0, f64::from(w - legend_w) - 20.0);
    let mut chart = ChartBuilder::on(&main)
        .caption(&title, ("sans-serif", size))
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
            let mut rgb = g.categories.get(cat).map(|c| c.1).unwrap_or((200, 200, 200));
            if flag(&g.muted, ri, ci) {
                rgb = super::colour::muted(rgb, MUTED_KEEP);
            }
            let (r, gg, b) = rgb;
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
            if flag(&g.outlined, ri, ci) {
                let inset = 0.04;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x + inset, y + inset), (x + 1.0 - inset, y + 1.0 - inset)],
                        BLACK.stroke_width(3),
                    )))
                    .map_err(|e| e.to_string())?;
            }
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
    let (lw, _) = legend.dim_in_pixel();
    let frame = RGBColor(LEGEND_FRAME.0, LEGEND_FRAME.1, LEGEND_FRAME.2);
    let bottom = 60 + 30 * g.categories.len() as i32 + 18 * g.note.len() as i32 + 14;
    legend
        .draw(&Rectangle::new([(2, 50), (lw as i32 - 4, bottom)], frame.stroke_width(1)))
        .map_err(|e| e.to_string())?;
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
        let (text, size) = fit_title(line, 12.0, f64::from(lw) - 16.0);
        legend
            .draw(&Text::new(text, (10, below + 18 * i as i32), ("sans-serif", size).into_font()))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A category grid (discrete heatmap) with a legend. Writes `<stem>.svg` and `<stem>.png`.
pub fn category_grid(stem: &Path, grid: &CategoryGrid) -> Result<Vec<PathBuf>> {
    let bad = |m: &[Vec<bool>]| {
        !m.is_empty() && (m.len() != grid.rows.len() || m.iter().any(|r| r.len() != grid.columns.len()))
    };
    if grid.cells.len() != grid.rows.len()
        || grid.cells.iter().any(|r| r.len() != grid.columns.len())
        || bad(&grid.muted)
        || bad(&grid.outlined)
    {
        return Err(Error::shape(
            "category grid cells",
            format!("[{}][{}]", grid.rows.len(), grid.columns.len()),
            format!("[{}][..]", grid.cells.len()),
        ));
    }
    write_both(stem, (1000, 560), &GridFig(grid))
}
