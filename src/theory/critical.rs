//! Classification of an end point of the oracle search in probability space, on the product
//! of simplices (theory/induction-model.md §3.2, eq. T-13).
//!
//! L-BFGS runs in logit space (T-8), where the gradient `p (.) (g - <p, g>)` also vanishes
//! where a softmax saturates, so an end point need not be a critical point of `F` on the
//! simplices. Per block (one `pK_{h,l}` or `pV_{h,l}`) with gradient `g = dF/dp` and multiplier
//! `lambda = <p, g>`, the support is `{r : p_r > SUPPORT_TOL}` and:
//!
//! * stationarity on the face: `max_{r in support} |g_r - lambda|` (0 at a critical point);
//! * KKT margins: `g_r - lambda` for `r` off the support (`< 0`: moving mass onto `r` lowers
//!   `F` at first order);
//! * second order: the smallest eigenvalue of the Hessian of `F` restricted to the tangent space
//!   of the face (directions on the support summing to zero in every block), from central
//!   differences of the exact gradient (T-5) along an orthonormal (Helmert) basis, symmetrised,
//!   eigenvalues by nalgebra.
//!
//! Label: [`PointLabel::NotConverged`] if stationarity exceeds [`STATIONARY_TOL`];
//! [`PointLabel::Saddle`] if some KKT margin is below `-KKT_CLASS_TOL` or the smallest tangent
//! eigenvalue is below `-EIG_TOL`; [`PointLabel::LocalMin`] otherwise.

use super::task::{population_loss_grad, OracleGates, TaskParams};
use crate::{Error, Result};
use nalgebra::{DMatrix, SymmetricEigen};
use serde::{Deserialize, Serialize};

/// Entries above this belong to the support of their block.
pub const SUPPORT_TOL: f64 = 1e-3;
/// Largest `|g_r - lambda|` on the support of a critical point.
pub const STATIONARY_TOL: f64 = 1e-5;
/// A KKT margin below `-KKT_CLASS_TOL` is a first-order descent direction.
pub const KKT_CLASS_TOL: f64 = 1e-6;
/// A tangent eigenvalue below `-EIG_TOL` is a second-order descent direction.
pub const EIG_TOL: f64 = 1e-6;
/// Largest tangent dimension whose Hessian is formed (larger: no second-order test, and a
/// first-order critical point is labelled by its margins alone, with `min_eigenvalue: None`).
pub const MAX_TANGENT_DIM: usize = 600;
/// Step of the central differences of the gradient.
const FD_STEP: f64 = 1e-5;

/// What an end point is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PointLabel {
    /// Critical on its face, every KKT margin `>= 0`, tangent Hessian positive semidefinite.
    LocalMin,
    /// Critical on its face, but mass can move to lower `F` (a negative KKT margin or a negative
    /// tangent eigenvalue).
    Saddle,
    /// Not critical on its face (the optimiser stopped early, or failed).
    NotConverged,
}

/// The classification of one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointClass {
    /// The label.
    pub label: PointLabel,
    /// `max |g_r - lambda|` over support entries.
    pub stationarity: f64,
    /// `min (g_r - lambda)` over off-support entries (None: every entry is in the support).
    pub kkt_margin: Option<f64>,
    /// The off-support move that attains the margin, in words (1-based).
    pub worst_move: String,
    /// Dimension of the tangent space of the face.
    pub tangent_dim: usize,
    /// Smallest eigenvalue of the tangent Hessian (None: dimension 0 or above
    /// [`MAX_TANGENT_DIM`]).
    pub min_eigenvalue: Option<f64>,
}

fn flat_grad(p: &TaskParams, x: &[f64], n: usize, scratch: &mut OracleGates) -> Result<Vec<f64>> {
    scratch.key.copy_from_slice(&x[..n]);
    scratch.value.copy_from_slice(&x[n..]);
    let (_, mut gk, gv) = population_loss_grad(p, scratch)?;
    gk.extend_from_slice(&gv);
    if gk.iter().any(|v| !v.is_finite()) {
        return Err(Error::Numerical { what: "classification".into(), reason: "non-finite gradient".into() });
    }
    Ok(gk)
}

/// Classify the gates `g` (probability vectors) as a point of the oracle problem at eps = 0.
pub fn classify_point(p: &TaskParams, g: &OracleGates) -> Result<PointClass> {
    let n = g.key.len();
    let s = p.stride;
    let mut x = g.key.clone();
    x.extend_from_slice(&g.value);
    if x.iter().any(|v| !v.is_finite()) {
        return Err(Error::Numerical { what: "classification".into(), reason: "non-finite gates".into() });
    }
    let mut scratch = g.clone();
    let grad = flat_grad(p, &x, n, &mut scratch)?;
    let mut stationarity: f64 = 0.0;
    let mut margin: Option<f64> = None;
    let mut worst = String::new();
    // Helmert basis of each block's tangent space: (block start, support indices).
    let mut supports: Vec<Vec<usize>> = Vec::new();
    for b in 0..2 * n / s {
        let lo = b * s;
        let blk = &x[lo..lo + s];
        let gb = &grad[lo..lo + s];
        let lambda: f64 = blk.iter().zip(gb).map(|(a, c)| a * c).sum::<f64>() / blk.iter().sum::<f64>();
        let mut support = Vec::new();
        for r in 0..s {
            let d = gb[r] - lambda;
            if blk[r] > SUPPORT_TOL {
                support.push(lo + r);
                stationarity = stationarity.max(d.abs());
            } else if margin.is_none_or(|m| d < m) {
                margin = Some(d);
                let (which, bb) = if lo < n { ("key", b) } else { ("value", b - n / s) };
                let (h, l) = (bb / p.chunks, bb % p.chunks);
                worst = format!("head {} chunk {}: {which} mass onto offset {}", h + 1, l + 1, r + 1);
            }
        }
        supports.push(support);
    }
    let tangent_dim: usize = supports.iter().map(|t| t.len().saturating_sub(1)).sum();
    let first_order_ok = stationarity <= STATIONARY_TOL;
    let mut min_eigenvalue = None;
    if first_order_ok && tangent_dim > 0 && tangent_dim <= MAX_TANGENT_DIM {
        let basis: Vec<Vec<(usize, f64)>> = supports
            .iter()
            .flat_map(|t| {
                (1..t.len()).map(move |j| {
                    let c = 1.0 / ((j * (j + 1)) as f64).sqrt();
                    let mut v: Vec<(usize, f64)> = t[..j].iter().map(|&i| (i, c)).collect();
                    v.push((t[j], -(j as f64) * c));
                    v
                })
            })
            .collect();
        let k = basis.len();
        let mut m = DMatrix::<f64>::zeros(k, k);
        let mut xp = x.clone();
        for (j, q) in basis.iter().enumerate() {
            q.iter().for_each(|&(i, c)| xp[i] = x[i] + FD_STEP * c);
            let gp = flat_grad(p, &xp, n, &mut scratch)?;
            q.iter().for_each(|&(i, c)| xp[i] = x[i] - FD_STEP * c);
            let gm = flat_grad(p, &xp, n, &mut scratch)?;
            q.iter().for_each(|&(i, _)| xp[i] = x[i]);
            for (i, qi) in basis.iter().enumerate() {
                m[(i, j)] = qi.iter().map(|&(idx, c)| c * (gp[idx] - gm[idx])).sum::<f64>() / (2.0 * FD_STEP);
            }
        }
        let sym = (&m + m.transpose()) * 0.5;
        let eig = SymmetricEigen::new(sym);
        min_eigenvalue = eig.eigenvalues.iter().cloned().reduce(f64::min);
    }
    let label = if !first_order_ok {
        PointLabel::NotConverged
    } else if margin.is_some_and(|m| m < -KKT_CLASS_TOL) || min_eigenvalue.is_some_and(|e| e < -EIG_TOL) {
        PointLabel::Saddle
    } else {
        PointLabel::LocalMin
    };
    Ok(PointClass { label, stationarity, kkt_margin: margin, worst_move: worst, tangent_dim, min_eigenvalue })
}
