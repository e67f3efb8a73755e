//! The Theorem 1 phase diagram over `(beta, gamma)` (theory/induction-model.md §3.3): at each
//! grid point, [`super::oracle::theorem1`] decides `+` (concentration optimal), `k` (vertex not
//! KKT) or `g` (vertex KKT but beaten). Points run in parallel (rayon).

use super::oracle::{theorem1, LabelCounts, OracleOptions, PointVerdict, Structure};
use super::task::TaskParams;
use crate::{Error, Result};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// One grid point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagramPoint {
    /// `beta`.
    pub beta: f64,
    /// `gamma`.
    pub gamma: f64,
    /// PointVerdict.
    pub verdict: PointVerdict,
    /// `F_1`.
    pub f1: f64,
    /// Best loss found: an upper bound on the minimum (restarts, split starts over every
    /// subset of heads, local refinement).
    pub best_loss: f64,
    /// Loss of the best chunk-uniform one-hot configuration (enumerated; None if too many).
    pub best_one_hot_loss: Option<f64>,
    /// Whether that configuration is distinct with value = key + 1.
    pub best_one_hot_is_distinct_vertex: Option<bool>,
    /// KKT margin of the vertex.
    pub kkt_margin: f64,
    /// Structure of the best minimiser.
    pub best_structure: Structure,
    /// Restarts by label (local minimum, saddle, not converged).
    #[serde(default)]
    pub labels: LabelCounts,
}

/// A phase diagram (rows: beta, columns: gamma).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseDiagram {
    /// Base parameters (beta and gamma are overridden per point).
    pub params: TaskParams,
    /// Row values.
    pub betas: Vec<f64>,
    /// Column values.
    pub gammas: Vec<f64>,
    /// Row-major points.
    pub points: Vec<DiagramPoint>,
}

impl PhaseDiagram {
    /// The map as text, in the spec's layout (`+`, `k`, `g`).
    pub fn to_text(&self) -> String {
        let mut s = String::from("beta\\gamma");
        for g in &self.gammas {
            s.push_str(&format!(" {g:>4}"));
        }
        s.push('\n');
        for (i, b) in self.betas.iter().enumerate() {
            s.push_str(&format!("{b:>10}"));
            for j in 0..self.gammas.len() {
                s.push_str(&format!(" {:>4}", self.points[i * self.gammas.len() + j].verdict.symbol()));
            }
            s.push('\n');
        }
        s
    }
}

/// A phase diagram's verdict map without the per-point detail: what the text layout of
/// [`PhaseDiagram::to_text`] holds, and what a reproduction keeps (`theory.json`'s `diagram`).
#[derive(Debug, Clone, PartialEq)]
pub struct DiagramMap {
    /// Row labels (beta), as written.
    pub betas: Vec<String>,
    /// Column labels (gamma), as written.
    pub gammas: Vec<String>,
    /// Row-major verdicts.
    pub verdicts: Vec<Vec<PointVerdict>>,
}

impl DiagramMap {
    /// Reads the text layout of [`PhaseDiagram::to_text`] back (the inverse of that layout).
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: String| Error::invalid("diagram", why);
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let head = lines.next().ok_or_else(|| bad("empty diagram text".into()))?;
        let mut cols = head.split_whitespace();
        if cols.next() != Some("beta\\gamma") {
            return Err(bad(format!("header {head:?} does not start with beta\\gamma")));
        }
        let gammas: Vec<String> = cols.map(str::to_string).collect();
        let (mut betas, mut verdicts) = (Vec::new(), Vec::new());
        for line in lines {
            let mut f = line.split_whitespace();
            let beta = f.next().ok_or_else(|| bad("empty row".into()))?;
            let row: Vec<PointVerdict> = f
                .map(|s| {
                    let mut ch = s.chars();
                    match (ch.next().and_then(PointVerdict::from_symbol), ch.next()) {
                        (Some(v), None) => Ok(v),
                        _ => Err(bad(format!("cell {s:?} in row {beta} is not one of + k g"))),
                    }
                })
                .collect::<Result<_>>()?;
            if row.len() != gammas.len() {
                return Err(bad(format!("row {beta} has {} cells, the header {}", row.len(), gammas.len())));
            }
            betas.push(beta.to_string());
            verdicts.push(row);
        }
        Ok(DiagramMap { betas, gammas, verdicts })
    }
}

/// The `beta` range of the regime in which Theorem 1 is stated (`theory/induction-model.md`
/// §3: moderate beta, about 0.5 to 4 at `L = 4`).
pub const REGIME_BETA: (f64, f64) = (0.5, 4.0);

/// The one rule for the theorem's stated regime (§3): `beta` within [`REGIME_BETA`] and `gamma`
/// below `gamma_c(beta)`, the gamma at which the one-hot vertex stops being a KKT point (§6.1:
/// the `k` cells). `gamma_c` is `None` where no gamma of the grid reaches it.
pub fn in_regime(beta: f64, gamma: f64, gamma_c: Option<f64>) -> bool {
    (REGIME_BETA.0..=REGIME_BETA.1).contains(&beta) && gamma_c.is_none_or(|c| gamma < c)
}

impl DiagramMap {
    /// `gamma_c(beta)` of row `row` as the grid brackets it: the smallest gamma whose cell is `k`
    /// (the vertex not KKT); `None` where no cell of the row is (or the row does not exist).
    pub fn gamma_c(&self, row: usize) -> Option<f64> {
        let cells = self.verdicts.get(row)?;
        self.gammas
            .iter()
            .zip(cells)
            .filter(|(_, v)| **v == PointVerdict::NotKkt)
            .map(|(g, _)| label_value(g))
            .fold(None, |m: Option<f64>, g| Some(m.map_or(g, |m| m.min(g))))
    }

    /// The cells of the stated regime (`regime[row][col]`), by [`in_regime`] with each row's
    /// [`DiagramMap::gamma_c`]: the region a figure outlines. A label that is not a number is
    /// outside it.
    pub fn regime(&self) -> Vec<Vec<bool>> {
        (0..self.betas.len())
            .map(|i| {
                let (beta, c) = (label_value(&self.betas[i]), self.gamma_c(i));
                self.gammas.iter().map(|g| in_regime(beta, label_value(g), c)).collect()
            })
            .collect()
    }

    /// Every cell where `outlined` disagrees with [`DiagramMap::regime`], one line each naming
    /// the cell and its verdict (a `k` cell inside an outline is one): empty when they agree.
    pub fn outline_problems(&self, outlined: &[Vec<bool>]) -> Vec<String> {
        let regime = self.regime();
        let mut out = Vec::new();
        for (i, row) in regime.iter().enumerate() {
            for (j, &want) in row.iter().enumerate() {
                let got = outlined.get(i).and_then(|r| r.get(j)).copied().unwrap_or(false);
                if got != want {
                    out.push(format!(
                        "cell beta {} gamma {} ('{}') is {} but {} the stated regime",
                        self.betas[i],
                        self.gammas[j],
                        self.verdicts[i][j].symbol(),
                        if got { "outlined" } else { "not outlined" },
                        if want { "inside" } else { "outside" }
                    ));
                }
            }
        }
        out
    }
}

/// A row or column label as a number (NaN where it is not one).
fn label_value(s: &str) -> f64 {
    s.trim().parse().unwrap_or(f64::NAN)
}

impl PhaseDiagram {
    /// The verdict map (labels formatted as in [`PhaseDiagram::to_text`]).
    pub fn map(&self) -> DiagramMap {
        let n = self.gammas.len();
        DiagramMap {
            betas: self.betas.iter().map(|b| format!("{b}")).collect(),
            gammas: self.gammas.iter().map(|g| format!("{g}")).collect(),
            verdicts: (0..self.betas.len()).map(|i| (0..n).map(|j| self.points[i * n + j].verdict).collect()).collect(),
        }
    }
}

/// Every beta and gamma finite, in `(0, MAX_TEMPERATURE]`, and at most `MAX_GRID_CELLS` cells.
pub fn check_grid(betas: &[f64], gammas: &[f64]) -> Result<()> {
    use super::limits::{MAX_GRID_CELLS, MAX_TEMPERATURE};
    for (field, list) in [("betas", betas), ("gammas", gammas)] {
        if list.is_empty() {
            return Err(Error::invalid(field, "empty list; give at least one value"));
        }
        if let Some(v) = list.iter().find(|v| !(v.is_finite() && **v > 0.0 && **v <= MAX_TEMPERATURE)) {
            return Err(Error::invalid(field, format!("{v} outside the allowed range (0, {MAX_TEMPERATURE}]")));
        }
    }
    let cells = betas.len().saturating_mul(gammas.len());
    super::limits::at_most("grid cells (betas x gammas)", cells, MAX_GRID_CELLS)
}

/// The spec's grid: betas `0.25, 1, 2, 4, 8, 16`, gammas `0.5, 1, 2, ..., 7`.
pub fn spec_grid() -> (Vec<f64>, Vec<f64>) {
    (vec![0.25, 1.0, 2.0, 4.0, 8.0, 16.0], vec![0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
}

/// Compute the diagram; `progress` is called once per finished point (from worker threads).
pub fn phase_diagram(
    base: &TaskParams,
    betas: &[f64],
    gammas: &[f64],
    opts: &OracleOptions,
    progress: impl Fn() + Sync,
) -> Result<PhaseDiagram> {
    base.validate()?;
    if betas.is_empty() || gammas.is_empty() {
        return Err(Error::invalid("grid", "need at least one beta and one gamma"));
    }
    check_grid(betas, gammas)?;
    let cells: Vec<(f64, f64)> = betas.iter().flat_map(|&b| gammas.iter().map(move |&g| (b, g))).collect();
    let points = cells
        .par_iter()
        .map(|&(beta, gamma)| {
            let p = TaskParams { beta, gamma, ..*base };
            let r = theorem1(&p, opts, || {})?;
            progress();
            Ok(DiagramPoint {
                beta,
                gamma,
                verdict: r.verdict,
                f1: r.f1,
                best_loss: r.best_loss,
                best_one_hot_loss: r.best_one_hot.as_ref().map(|b| b.loss),
                best_one_hot_is_distinct_vertex: r.best_one_hot.as_ref().map(|b| {
                    let mut k = b.key_offsets.clone();
                    k.sort_unstable();
                    k.dedup();
                    k.len() == b.key_offsets.len()
                        && b.key_offsets.iter().zip(&b.value_offsets).all(|(a, v)| *v == a + 1)
                }),
                kkt_margin: r.kkt.min_margin,
                best_structure: r.best_structure,
                labels: r.labels,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(PhaseDiagram { params: *base, betas: betas.to_vec(), gammas: gammas.to_vec(), points })
}

/// The spec's *reference* map (spec §3; from an independent prototype) for `H=2, L=4, S=4,
/// N=64` on [`spec_grid`]: rows beta, columns gamma. Used only to compare a computed map with
/// it ([`compare_with_reference`]); never copied into results.
pub const SPEC_REFERENCE_MAP: [&str; 6] = ["++++kkkk", "++++++++", "+++++++k", "++++++kk", "++++ggkk", "ggggggkk"];

/// Cells where a computed diagram on the spec grid differs from [`SPEC_REFERENCE_MAP`]:
/// `(beta, gamma, computed, reference)`. `None` if the diagram is not on the spec grid.
pub fn compare_with_reference(d: &PhaseDiagram) -> Option<Vec<(f64, f64, char, char)>> {
    let (betas, gammas) = spec_grid();
    let base = TaskParams { beta: d.params.beta, gamma: d.params.gamma, ..TaskParams::default() };
    if d.betas != betas || d.gammas != gammas || d.params != base {
        return None;
    }
    let mut diff = Vec::new();
    for (i, row) in SPEC_REFERENCE_MAP.iter().enumerate() {
        for (j, want) in row.chars().enumerate() {
            let got = d.points[i * gammas.len() + j].verdict.symbol();
            if got != want {
                diff.push((betas[i], gammas[j], got, want));
            }
        }
    }
    Some(diff)
}
