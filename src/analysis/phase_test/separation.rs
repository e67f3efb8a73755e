//! The exact supremum of a binomial logistic likelihood under separation
//! (`theory/phase-lab.md` §8.6).
//!
//! When a set of observations can be separated (for example a (depth, phase) cell that is all
//! correct and a phase coefficient free to grow), the maximum-likelihood estimate does not
//! exist and Newton's method only approaches the likelihood's supremum; v1's fit stopped at an
//! iteration cap short of it. Here the separable observations are found first by the linear
//! program of Konis (2007): over a direction `d` and `t_i <= 1`, maximise `sum_i t_i` subject to
//! `t_i <= s_i x_i . d` and `s_i x_i . d >= 0`, with `s_i = +1` for a correct answer and `-1`
//! for a wrong one. The optimum is the number of separable observations and those with
//! `t_i = 1` are the separated set. At the supremum they contribute log-likelihood 0, and the
//! rest has a maximum-likelihood estimate on its identifiable columns, fitted by Newton's method
//! to a gradient norm below [`GRADIENT_TOL`].
//!
//! Cells pool observations with one design row. A cell with both answers (`0 < y < n`) holds
//! observations of both signs with the same row, which forces `x_i . d = 0`: such cells are
//! never separable, and `d` lives in the null space of their rows. The LP is solved there (an
//! exact reduction), usually on a handful of unknowns, and is skipped when that null space is
//! `{0}` (no separation possible).

use super::likelihood::{loglik, sigmoid};
use super::simplex::{simplex_max, Guard};
use crate::{Error, Result};
use nalgebra::{DMatrix, DVector};
use std::collections::BTreeMap;

/// Newton's method stops when the score's Euclidean norm is below this (§8.6).
pub(super) const GRADIENT_TOL: f64 = 1e-10;
/// Newton iterations allowed (§8.6: "no iteration cap short of 1 000").
const MAX_NEWTON: usize = 1000;
/// Relative tolerance of rank and sign decisions on the column-scaled design.
const RANK_TOL: f64 = 1e-9;
/// Eigenvalues of the both-answer cells' Gram matrix at or below this fraction of the largest
/// span the directions those cells leave free.
const NULL_TOL: f64 = 1e-10;

/// The supremum of the log-likelihood and the limiting fitted probabilities.
#[derive(Clone, Debug)]
pub(super) struct ExactFit {
    pub(super) loglik: f64,
    /// Per cell; exactly 0 or 1 in separated cells (the limit).
    pub(super) mu: Vec<f64>,
}

/// The design with every column scaled to unit Euclidean norm over the cells (zero columns kept
/// at 0), so that the tolerances are relative.
fn scaled(x: &DMatrix<f64>) -> DMatrix<f64> {
    let mut z = x.clone();
    for mut c in z.column_iter_mut() {
        let norm = c.norm();
        if norm > 0.0 {
            c /= norm;
        }
    }
    z
}

/// An orthonormal basis (columns) of the null space of `rows` (each a row of the scaled
/// design), `p` unknowns.
fn null_space(rows: &[DVector<f64>], p: usize) -> DMatrix<f64> {
    let mut g = DMatrix::<f64>::zeros(p, p);
    for r in rows {
        g += r * r.transpose();
    }
    let eig = g.symmetric_eigen();
    // Singular values below RANK_TOL relative to the largest one (or to 1, when there are no
    // rows): eigenvalues of the Gram matrix are their squares.
    let top = eig.eigenvalues.iter().copied().fold(1.0f64, f64::max);
    // Eigenvalues carry rounding of about 1e-16 of the largest, so the cut is on them at
    // NULL_TOL (singular values below about 1e-5 of the largest).
    let keep: Vec<usize> = (0..p).filter(|&j| eig.eigenvalues[j] <= NULL_TOL * top).collect();
    let mut basis = DMatrix::<f64>::zeros(p, keep.len());
    for (k, &j) in keep.iter().enumerate() {
        basis.set_column(k, &eig.eigenvectors.column(j));
    }
    basis
}

/// Which cells are separated (Konis's LP, see the module doc). `x` has one row per cell.
pub(super) fn separated_cells(x: &DMatrix<f64>, n: &[f64], y: &[f64]) -> Result<Vec<bool>> {
    let z = scaled(x);
    let p = z.ncols();
    let row = |i: usize| -> DVector<f64> { z.row(i).transpose() };
    let mixed: Vec<DVector<f64>> = (0..z.nrows()).filter(|&i| y[i] > 0.0 && y[i] < n[i]).map(row).collect();
    let mut out = vec![false; z.nrows()];
    let basis = null_space(&mixed, p);
    if basis.ncols() == 0 {
        return Ok(out);
    }
    // Pure cells projected onto the null space: b_i = s_i x_i N. Rows that vanish are never
    // separable; identical rows share one LP row (their t is the same at the optimum).
    let mut lp_rows: Vec<DVector<f64>> = Vec::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut index: BTreeMap<Vec<i64>, usize> = BTreeMap::new();
    for i in 0..z.nrows() {
        if n[i] <= 0.0 || (y[i] > 0.0 && y[i] < n[i]) {
            continue;
        }
        let s = if y[i] >= n[i] { 1.0 } else { -1.0 };
        let b = (basis.transpose() * row(i)) * s;
        let norm = b.norm();
        if norm <= RANK_TOL {
            continue;
        }
        // Scaling a row by a positive factor leaves the separable set as it is, and rows of
        // unit norm keep the simplex tableau well conditioned.
        let b = b / norm;
        let key: Vec<i64> = b.iter().map(|v| (v / RANK_TOL).round() as i64).collect();
        let slot = *index.entry(key).or_insert_with(|| {
            lp_rows.push(b.clone());
            members.push(Vec::new());
            lp_rows.len() - 1
        });
        members[slot].push(i);
    }
    if lp_rows.is_empty() {
        return Ok(out);
    }
    // A witness first: when the sum of the rows is non-negative on every row and positive on
    // each, every row is separable and the LP's optimum is all of them (the common case near
    // the ceiling, where almost every cell is right). Otherwise the LP decides.
    let sum = lp_rows.iter().fold(DVector::<f64>::zeros(basis.ncols()), |acc, b| acc + b);
    let t =
        if all_positive_witness(&lp_rows, sum) { vec![1.0; lp_rows.len()] } else { konis_lp(&lp_rows, basis.ncols())? };
    for (slot, cells) in members.iter().enumerate() {
        if t[slot] > 0.5 {
            for &i in cells {
                out[i] = true;
            }
        }
    }
    Ok(out)
}

/// Perceptron rounds [`all_positive_witness`] tries before the LP decides.
const WITNESS_ROUNDS: usize = 64;

/// Whether a direction `d` with `b_i . d > 0` on every row (unit norm) is found, starting from
/// `d` and adding the rows that are not yet positive on it, at most [`WITNESS_ROUNDS`] times (the
/// perceptron). Such a `d` proves every row separable, so the LP's optimum is all of them; when
/// none is found the LP decides (some rows may not be separable). Cheap (rows times unknowns per
/// round) where the LP is not: a parametric bootstrap solves one per replicate.
fn all_positive_witness(rows: &[DVector<f64>], mut d: DVector<f64>) -> bool {
    for _ in 0..WITNESS_ROUNDS {
        let cut = RANK_TOL * d.norm();
        let mut step = DVector::<f64>::zeros(d.len());
        let mut bad = 0;
        for b in rows.iter().filter(|b| b.dot(&d) <= cut) {
            step += b;
            bad += 1;
        }
        if bad == 0 {
            return true;
        }
        d += step;
    }
    false
}

/// The largest coordinate of the LP's direction `z` (on the unit-norm rows, in the null space's
/// orthonormal basis): `1 / RANK_TOL`. A row reaches `t_i = 1` only with a margin `b_i . z` of at
/// least `RANK_TOL` of `|z|` (about), the tolerance every other rank and sign decision here
/// uses. Without the bound, `z` is free to grow until rounding error decides: two rows that are
/// exact negatives of each other (a pure cell and one whose row differs from it by the
/// difference of two both-answer cells' rows) come out of the projection about 1e-12 apart, and
/// an unbounded `z` of norm about 1e12 "separated" both (issue 38: `w8s4-tied-seed1`,
/// in-sequence, S = 4 gave the saturated model's likelihood and G 286.12 above its supremum
/// 241.87). With it such a pair sums to `t_1 + t_2 <= 1e-12 |z| <= 1e-3`, and neither is
/// separated.
const MAX_DIRECTION: f64 = 1.0 / RANK_TOL;

/// Konis's LP on rows `b_i` (already signed, unit norm) in `k` unknowns: the optimal `t`.
/// Standard form `max c.v, A v <= r, v >= 0` with `v = (z+, z-, t)`; rows: `t_i - b_i z <= 0`,
/// `t_i <= 1` and `z+_j, z-_j <= MAX_DIRECTION`. Konis's `b_i z >= 0` needs no row of its own:
/// `t_i >= 0` and `t_i <= b_i z` imply it. The origin is feasible, so one phase of the simplex
/// method ([`simplex_max`]) reaches the optimum.
fn konis_lp(rows: &[DVector<f64>], k: usize) -> Result<Vec<f64>> {
    Ok(konis_lp_by(rows, k)?.0)
}

/// Which method of [`konis_lp`] gave its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// The bounded primal, [`Guard::Plain`] (the method of the v1 and v2 runs).
    Plain,
    /// [`dual_separable`].
    Dual,
    /// The bounded primal under [`Guard::Robust`].
    GuardedPrimal,
}

/// [`konis_lp`] with the method that answered.
fn konis_lp_by(rows: &[DVector<f64>], k: usize) -> Result<(Vec<f64>, Method)> {
    let (a, r, c) = konis_tableau(rows, k);
    // When the plain method runs out of pivots (on a v3 probe model, 189 rows in 9 unknowns:
    // pivots of about 1e-9 against the `MAX_DIRECTION` bounds broke its tableau, whose objective
    // `sum t_i` left `[0, 189]` at pivot 51 and reached 1e35), the separable rows are found by
    // the dual LP ([`dual_separable`]), whose coefficients are all of order 1, and when that runs
    // out too (its `lambda` has no scale), by the bounded primal under [`Guard::Robust`]. A solve
    // that ends takes the first path unchanged, so no earlier result moves: objectives that leave
    // `[0, m]` for a while and come back occur on sound data too (the suite's tables), so they
    // are not taken as failures.
    match simplex_max(&a, &r, &c, Guard::Plain) {
        Ok(v) => Ok((v[2 * k..].to_vec(), Method::Plain)),
        Err(Error::Numerical { .. }) => match dual_separable(rows, k) {
            Ok(t) => Ok((t, Method::Dual)),
            Err(Error::Numerical { .. }) => {
                Ok((simplex_max(&a, &r, &c, Guard::Robust)?[2 * k..].to_vec(), Method::GuardedPrimal))
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// The separable rows from the dual side, as `t` (1 separable, 0 not): a row is *not* separable
/// exactly when some `lambda >= 0` with `lambda_i > 0` has `sum_j lambda_j b_j = 0` (it is an
/// implicit equality of the cone `b_j . z >= 0`; Gordan's alternative), and one LP finds every
/// such row at once: maximise `sum s_i` subject to `sum_j lambda_j b_j = 0`, `s_i <= lambda_i`,
/// `s_i <= 1`, `lambda, s >= 0`. It is the limit of [`konis_lp`]'s dual as `MAX_DIRECTION`
/// grows (that dual is `min sum_i max(0, 1 - y_i) + MAX_DIRECTION |sum_i y_i b_i|_1`), with the
/// simplex's tolerance in place of `1 / MAX_DIRECTION`: every coefficient is of order 1.
/// Solved with [`Guard::Robust`]. On the probe LP it finds the 177 separable rows of 189 that
/// the guarded primal finds, with `|sum lambda_j b_j|` about 1e-13.
fn dual_separable(rows: &[DVector<f64>], k: usize) -> Result<Vec<f64>> {
    let m = rows.len();
    let nv = 2 * m;
    let mut a = DMatrix::<f64>::zeros(2 * k + 2 * m, nv);
    let mut r = vec![0f64; 2 * k + 2 * m];
    for (i, b) in rows.iter().enumerate() {
        for j in 0..k {
            a[(j, i)] = b[j];
            a[(k + j, i)] = -b[j];
        }
        a[(2 * k + i, m + i)] = 1.0;
        a[(2 * k + i, i)] = -1.0;
        a[(2 * k + m + i, m + i)] = 1.0;
        r[2 * k + m + i] = 1.0;
    }
    let mut c = vec![0f64; nv];
    c[m..].iter_mut().for_each(|v| *v = 1.0);
    let v = simplex_max(&a, &r, &c, Guard::Robust)?;
    Ok(v[m..].iter().map(|&s| if s > 0.5 { 0.0 } else { 1.0 }).collect())
}

/// Konis's LP of [`konis_lp`] in standard form: `(A, r, c)`.
fn konis_tableau(rows: &[DVector<f64>], k: usize) -> (DMatrix<f64>, Vec<f64>, Vec<f64>) {
    let m = rows.len();
    let nv = 2 * k + m;
    let mut a = DMatrix::<f64>::zeros(2 * m + 2 * k, nv);
    let mut r = vec![0f64; 2 * m + 2 * k];
    for (i, b) in rows.iter().enumerate() {
        for j in 0..k {
            a[(i, j)] = -b[j];
            a[(i, k + j)] = b[j];
        }
        a[(i, 2 * k + i)] = 1.0;
        a[(m + i, 2 * k + i)] = 1.0;
        r[m + i] = 1.0;
    }
    for j in 0..2 * k {
        a[(2 * m + j, j)] = 1.0;
        r[2 * m + j] = MAX_DIRECTION;
    }
    let mut c = vec![0f64; nv];
    c[2 * k..].iter_mut().for_each(|v| *v = 1.0);
    (a, r, c)
}

/// The columns of `x` (restricted to `rows`) that are not aliased on earlier ones: greedy
/// Gram-Schmidt on the column-scaled design, a column dropped when its residual norm is below
/// `RANK_TOL` of its norm.
fn identifiable_columns(x: &DMatrix<f64>, rows: &[usize]) -> Vec<usize> {
    let mut q: Vec<DVector<f64>> = Vec::new();
    let mut keep = Vec::new();
    for j in 0..x.ncols() {
        let col = DVector::from_iterator(rows.len(), rows.iter().map(|&i| x[(i, j)]));
        let norm = col.norm();
        if norm == 0.0 {
            continue;
        }
        let mut v = col / norm;
        for _ in 0..2 {
            for b in &q {
                let d = b.dot(&v);
                v -= b * d;
            }
        }
        let res = v.norm();
        if res > RANK_TOL {
            q.push(v / res);
            keep.push(j);
        }
    }
    keep
}

/// The supremum of the binomial log-likelihood of cells `(x, n, y)` (§8.6): separated cells
/// found by the LP contribute 0; the rest is fitted on its identifiable columns by Newton's
/// method until the score's norm is below [`GRADIENT_TOL`] (or no step gains, at the floating
/// point floor), at most 1 000 iterations.
pub(super) fn exact_fit(x: &DMatrix<f64>, n: &[f64], y: &[f64]) -> Result<ExactFit> {
    let separated = separated_cells(x, n, y)?;
    let rest: Vec<usize> = (0..x.nrows()).filter(|&i| !separated[i] && n[i] > 0.0).collect();
    let mut mu: Vec<f64> = (0..x.nrows()).map(|i| if y[i] > 0.0 { 1.0 } else { 0.0 }).collect();
    if rest.is_empty() {
        return Ok(ExactFit { loglik: 0.0, mu });
    }
    let cols = identifiable_columns(x, &rest);
    let xr = DMatrix::from_fn(rest.len(), cols.len(), |i, j| x[(rest[i], cols[j])]);
    let nr: Vec<f64> = rest.iter().map(|&i| n[i]).collect();
    let yr: Vec<f64> = rest.iter().map(|&i| y[i]).collect();
    let (ll, eta) = newton(&xr, &nr, &yr)?;
    for (k, &i) in rest.iter().enumerate() {
        mu[i] = sigmoid(eta[k]);
    }
    Ok(ExactFit { loglik: ll, mu })
}

/// Newton's method with step halving on a problem whose maximum-likelihood estimate exists.
fn newton(x: &DMatrix<f64>, n: &[f64], y: &[f64]) -> Result<(f64, DVector<f64>)> {
    let p = x.ncols();
    let (tn, ty): (f64, f64) = (n.iter().sum(), y.iter().sum());
    let rate = ((ty + 0.5) / (tn + 1.0)).clamp(1e-6, 1.0 - 1e-6);
    let mut beta = DVector::zeros(p);
    if p > 0 {
        // The intercept, when present, is the first column kept.
        beta[0] = if x.column(0).iter().all(|&v| v == 1.0) { (rate / (1.0 - rate)).ln() } else { 0.0 };
    }
    let (mut ll, mut eta) = loglik(x, &beta, n, y);
    for _ in 0..MAX_NEWTON {
        let mut h = DMatrix::<f64>::zeros(p, p);
        let mut score = DVector::<f64>::zeros(p);
        for i in 0..x.nrows() {
            let m = sigmoid(eta[i]);
            let w = n[i] * m * (1.0 - m);
            let r = y[i] - n[i] * m;
            let xi = x.row(i);
            score += xi.transpose() * r;
            h += xi.transpose() * xi * w;
        }
        if score.norm() < GRADIENT_TOL {
            break;
        }
        // A ridge far below the curvature keeps the system solvable where fitted probabilities
        // round to 0 or 1 (a separation the LP's tolerances let through); it does not move the
        // optimum. Should the system still be singular, the fit stops where it is, below the
        // supremum by at most what the last step would have gained.
        let top = (0..p).map(|a| h[(a, a)]).fold(0.0f64, f64::max);
        for a in 0..p {
            h[(a, a)] += 1e-12 * (1.0 + top);
        }
        let delta = match h.clone().cholesky() {
            Some(c) => c.solve(&score),
            None => match h.lu().solve(&score) {
                Some(d) => d,
                None => break,
            },
        };
        let mut step = 1.0;
        let mut accepted = None;
        while step > 1e-12 {
            let cand = &beta + &delta * step;
            let (ll_new, eta_new) = loglik(x, &cand, n, y);
            if ll_new.is_finite() && ll_new >= ll {
                accepted = Some((cand, ll_new, eta_new));
                break;
            }
            step *= 0.5;
        }
        // No step gains: the floating-point floor of the likelihood has been reached.
        let Some((b, ll_new, eta_new)) = accepted else { break };
        let stalled = ll_new == ll;
        beta = b;
        ll = ll_new;
        eta = eta_new;
        if stalled {
            break;
        }
    }
    Ok((ll, eta))
}

/// Konis's LP, for the unit tests of `phase_test`.
#[cfg(test)]
pub(super) fn konis_lp_for_tests(rows: &[DVector<f64>], k: usize) -> Result<Vec<f64>> {
    konis_lp(rows, k)
}

#[cfg(test)]
pub(super) fn witness_for_tests(rows: &[DVector<f64>]) -> bool {
    let sum = rows.iter().fold(DVector::<f64>::zeros(rows[0].len()), |acc, b| acc + b);
    all_positive_witness(rows, sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separation_reaches_the_supremum_exactly() {
        // Group 1 always right: its coefficient diverges; the supremum is group 0's alone.
        let mut x = DMatrix::zeros(2, 2);
        x[(0, 0)] = 1.0;
        x[(1, 0)] = 1.0;
        x[(1, 1)] = 1.0;
        let f = exact_fit(&x, &[100.0, 100.0], &[50.0, 100.0]).unwrap();
        let sup = 100.0 * 0.5f64.ln(); // 50 ln .5 + 50 ln .5
        assert!((f.loglik - sup).abs() < 1e-12, "{} vs {sup}", f.loglik);
        assert!((f.mu[0] - 0.5).abs() < 1e-12 && f.mu[1] == 1.0, "{:?}", f.mu);
        // Negative control: nothing separable when every cell has both answers.
        let g = exact_fit(&x, &[100.0, 100.0], &[50.0, 99.0]).unwrap();
        assert!((g.mu[1] - 0.99).abs() < 1e-9, "{:?}", g.mu);
    }

    #[test]
    fn the_lp_finds_separation_the_witness_cannot() {
        // Rows b = (1, 0), (-1, 1), (0, -1) in R^2 leave only z = 0 (b1 + b2 + b3 = 0): nothing
        // separable. Rows (1, 0), (0, 1), (-1, 1) cone: z = (1, 2) separates all three, but
        // their sum (0, 2) is 0 on the first row, so the LP must decide.
        let rows = |v: &[[f64; 2]]| v.iter().map(|r| DVector::from_column_slice(r)).collect::<Vec<_>>();
        let none = konis_lp_for_tests(&rows(&[[1.0, 0.0], [-1.0, 1.0], [0.0, -1.0]]), 2).unwrap();
        assert!(none.iter().all(|&t| t < 0.5), "{none:?}");
        let all = konis_lp_for_tests(&rows(&[[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]]), 2).unwrap();
        assert!(all.iter().all(|&t| t > 0.5), "{all:?}");
        let some = konis_lp_for_tests(&rows(&[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]]), 2).unwrap();
        assert_eq!(some.iter().map(|&t| t > 0.5).collect::<Vec<_>>(), vec![false, false, true]);
    }

    #[test]
    fn the_perceptron_witness_proves_only_full_separation() {
        let rows = |v: &[[f64; 2]]| v.iter().map(|r| DVector::from_column_slice(r)).collect::<Vec<_>>();
        // The sum (0, 2) is 0 on the first row; one perceptron round gives (1, 2), positive on all.
        assert!(witness_for_tests(&rows(&[[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]])));
        // Negative controls: rows that force z = 0, and a pair b, -b.
        assert!(!witness_for_tests(&rows(&[[1.0, 0.0], [-1.0, 1.0], [0.0, -1.0]])));
        assert!(!witness_for_tests(&rows(&[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])));
    }

    /// At the size of the v1 data's hardest case (185 LP rows: full-seed1, prefix, S = 6 and 8;
    /// the data itself is `report_committed::the_separation_fit_decides_full_attention_at_strides_6_and_8`):
    /// 180 rows positive on a direction `d0` and 10 pairs `v, -v` orthogonal to it, which only
    /// `z . v = 0` satisfies. The LP must finish and separate exactly the first 180.
    #[test]
    fn the_lp_decides_at_the_size_of_the_data() {
        let k = 6;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut uniform = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        let d0 = DVector::from_fn(k, |j, _| if j == 0 { 1.0 } else { 0.0 });
        let mut rows = Vec::new();
        while rows.len() < 180 {
            let mut b = DVector::from_fn(k, |_, _| uniform());
            b[0] = b[0].abs() + 0.05;
            rows.push(b.normalize());
        }
        for _ in 0..10 {
            let mut v = DVector::from_fn(k, |_, _| uniform());
            v[0] = 0.0;
            let v = v.normalize();
            rows.push(-v.clone());
            rows.push(v);
        }
        assert!(rows.iter().take(180).all(|b| b.dot(&d0) > 0.0));
        assert!(!witness_for_tests(&rows), "the pairs leave no direction positive on all");
        let t = konis_lp_for_tests(&rows, k).unwrap();
        let separated: Vec<bool> = t.iter().map(|&t| t > 0.5).collect();
        assert_eq!(separated, (0..200).map(|i| i < 180).collect::<Vec<_>>());
        let by_dual: Vec<bool> = dual_separable(&rows, k).unwrap().iter().map(|&t| t > 0.5).collect();
        assert_eq!(by_dual, separated, "the dual finds the same rows");
    }

    /// The LP of a v3 probe model (w8s8, seed 100, candidate T2, `theory/phase-lab.md` §9.3) on
    /// which the plain simplex broke: its signed, projected rows, unit norm.
    fn probe_lp() -> (Vec<DVector<f64>>, usize) {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/separation-lp-v3-probe.json");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let k = v["k"].as_u64().unwrap() as usize;
        let rows: Vec<DVector<f64>> = v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| DVector::from_iterator(k, r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap())))
            .collect();
        (rows, k)
    }

    #[test]
    fn a_solve_that_runs_out_of_pivots_is_answered_by_the_dual() {
        let (rows, k) = probe_lp();
        assert_eq!((rows.len(), k), (189, 9));
        let (a, r, c) = konis_tableau(&rows, k);
        // Negative control: the plain method runs out of pivots on it (31 150, the slow part of
        // this test, run once), so the dual answers.
        let (t, method) = konis_lp_by(&rows, k).unwrap();
        assert_eq!(method, Method::Dual);
        let separated: Vec<usize> = (0..t.len()).filter(|&i| t[i] > 0.5).collect();
        // 177: the same set as the guarded primal here, and as every variant of it tried in an
        // independent NumPy tableau (pivot floors 1e-9 to 1e-5 of the column, recomputation
        // every 5 to 50 pivots or never).
        assert_eq!(separated.len(), 177);
        let primal = simplex_max(&a, &r, &c, Guard::Robust).unwrap();
        let by_primal: Vec<usize> = (0..t.len()).filter(|&i| primal[2 * k + i] > 0.5).collect();
        assert_eq!(by_primal, separated);
        // The non-separable rows are what the dual says: a non-negative combination of them
        // (with every one in it) vanishes. Negative control: adding a separable row to them
        // leaves none (its sign decides the combination's projection on a separating direction).
        let stuck: Vec<&DVector<f64>> = (0..t.len()).filter(|&i| t[i] < 0.5).map(|i| &rows[i]).collect();
        assert_eq!(stuck.len(), 12);
        assert!(!dual_separable(&stuck.iter().map(|&b| b.clone()).collect::<Vec<_>>(), k)
            .unwrap()
            .iter()
            .any(|&t| t > 0.5));
        let mut more: Vec<DVector<f64>> = stuck.iter().map(|&b| b.clone()).collect();
        more.push(rows[separated[0]].clone());
        let t_more = dual_separable(&more, k).unwrap();
        assert_eq!(t_more.iter().filter(|&&t| t > 0.5).count(), 1, "{t_more:?}");
    }

    #[test]
    fn a_sound_solve_takes_the_plain_path_unchanged() {
        // The committed runs' LPs never broke: on a generated LP at the data's size both guards
        // reach the same optimum, and the plain path is what konis_lp returns.
        let k = 4;
        let rows: Vec<DVector<f64>> = (0..40)
            .map(|i| {
                let x = i as f64;
                DVector::from_vec(vec![1.0, (x * 0.7).sin(), (x * 1.3).cos(), if i % 5 == 0 { -2.0 } else { 0.1 }])
                    .normalize()
            })
            .collect();
        let (a, r, c) = konis_tableau(&rows, k);
        let plain = simplex_max(&a, &r, &c, Guard::Plain).unwrap();
        assert_eq!(konis_lp_by(&rows, k).unwrap(), (plain[2 * k..].to_vec(), Method::Plain));
        let by_dual = dual_separable(&rows, k).unwrap();
        let set = |t: &[f64]| t.iter().map(|&t| t > 0.5).collect::<Vec<_>>();
        assert_eq!(set(&plain[2 * k..]), set(&by_dual));
    }
}
