//! The primal simplex method of Konis's LP (`separation`), with its guards against rounding.

use crate::{Error, Result};
use nalgebra::DMatrix;

/// How [`simplex_max`] guards against rounding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Guard {
    /// Any pivot above `1e-9`, the tableau updated in place (the method of the v1 and v2 runs).
    Plain,
    /// A pivot of at least [`PIVOT_REL`] of its column's largest entry, and the tableau recomputed
    /// from its basis every [`REFACTOR_EVERY`] pivots. On the v3 probe LP
    /// (`tests/fixtures/separation-lp-v3-probe.json`) the plain method broke at pivot 51; this
    /// one, and every variant tried (pivot floors 1e-9 to 1e-5 of the column, recomputation every
    /// 5 to 50 pivots or never), separate the same 177 of its 189 rows.
    Robust,
}

/// Pivots between two recomputations of the tableau from its basis ([`Guard::Robust`]).
const REFACTOR_EVERY: usize = 20;
/// The smallest pivot relative to its column's largest entry ([`Guard::Robust`]).
const PIVOT_REL: f64 = 1e-7;

/// The tableau recomputed from the basis: with `initial` the constraint rows `[A I r]` of the
/// starting tableau and `B` the basis columns of `[A I]`, the rows `B^-1 [A I r]`, the reduced
/// costs `c_B B^-1 [A I] - [c 0]` and the objective `c_B B^-1 r`.
fn refactor(t: &mut DMatrix<f64>, initial: &DMatrix<f64>, c: &[f64], basis: &[usize]) -> Result<()> {
    let (m, width) = initial.shape();
    let nv = width - m - 1;
    let mut b = DMatrix::<f64>::zeros(m, m);
    for (k, &bv) in basis.iter().enumerate() {
        b.set_column(k, &initial.column(bv));
    }
    let rows = b.lu().solve(initial).ok_or_else(|| Error::Numerical {
        what: "separation LP".into(),
        reason: "a singular basis when the tableau is recomputed".into(),
    })?;
    let cost = |j: usize| if j < nv { c[j] } else { 0.0 };
    for j in 0..width {
        let cb: f64 = basis.iter().enumerate().map(|(i, &bv)| cost(bv) * rows[(i, j)]).sum();
        t[(0, j)] = if j == width - 1 { cb } else { cb - cost(j) };
    }
    t.view_mut((1, 0), (m, width)).copy_from(&rows);
    Ok(())
}

/// The primal simplex method with Bland's rule for `max c.v` subject to `A v <= r`, `v >= 0`,
/// `r >= 0` (the slack basis is feasible). Returns an optimal `v`, or an error at the pivot
/// limit. `guard` picks the pivot floor and whether the tableau is recomputed from its basis
/// ([`refactor`]).
pub(super) fn simplex_max(a: &DMatrix<f64>, r: &[f64], c: &[f64], guard: Guard) -> Result<Vec<f64>> {
    let (m, nv) = a.shape();
    let width = nv + m + 1;
    // Row 0 holds the reduced costs (negated objective), rows 1..=m the constraints.
    let mut t = DMatrix::<f64>::zeros(m + 1, width);
    for j in 0..nv {
        t[(0, j)] = -c[j];
    }
    for i in 0..m {
        for j in 0..nv {
            t[(i + 1, j)] = a[(i, j)];
        }
        t[(i + 1, nv + i)] = 1.0;
        t[(i + 1, width - 1)] = r[i];
    }
    // The constraint rows as they start, kept for `refactor` under the robust guard.
    let initial = (guard == Guard::Robust).then(|| t.rows(1, m).into_owned());
    let mut basis: Vec<usize> = (nv..nv + m).collect();
    let eps = 1e-9;
    let limit = 50 * (m + nv) + 1000;
    // The objective is bounded (by the number of rows), so a column that would enter without a
    // positive pivot is a direction no row constrains (its reduced cost is rounding): it is left
    // out from then on.
    let mut banned = vec![false; nv + m];
    // Entering column: Dantzig's rule (the most negative reduced cost), which reaches the optimum
    // in a few times m pivots where Bland's smallest index alone needed more than `limit` on
    // the v1 data (full-seed1, prefix, S = 6 and 8: 185 LP rows); after STALL pivots without
    // progress of the objective (degenerate pivots at the origin, where every `t_i <= b_i z` row
    // is tight) Bland's rule takes over until the objective moves, so the method cannot cycle.
    const STALL: usize = 32;
    let (mut best, mut stalled) = (f64::NEG_INFINITY, 0usize);
    for pivot in 0..limit {
        if let Some(initial) = &initial {
            if pivot > 0 && pivot % REFACTOR_EVERY == 0 {
                refactor(&mut t, initial, c, &basis)?;
            }
        }
        let objective = t[(0, width - 1)];
        if objective > best + eps {
            (best, stalled) = (objective, 0);
        } else {
            stalled += 1;
        }
        let candidates = (0..nv + m).filter(|&j| !banned[j] && t[(0, j)] < -eps);
        let enter = if stalled < STALL {
            candidates.min_by(|&x, &y| t[(0, x)].total_cmp(&t[(0, y)]).then(x.cmp(&y)))
        } else {
            candidates.min()
        };
        let Some(enter) = enter else {
            let mut v = vec![0f64; nv];
            for (i, &bv) in basis.iter().enumerate() {
                if bv < nv {
                    v[bv] = t[(i + 1, width - 1)];
                }
            }
            return Ok(v);
        };
        let mut leave: Option<(usize, f64)> = None;
        let floor = match guard {
            Guard::Plain => eps,
            Guard::Robust => eps.max(PIVOT_REL * (1..=m).map(|i| t[(i, enter)].abs()).fold(0.0, f64::max)),
        };
        for i in 0..m {
            let piv = t[(i + 1, enter)];
            if piv > floor {
                let ratio = t[(i + 1, width - 1)].max(0.0) / piv;
                let better = match leave {
                    None => true,
                    Some((l, best)) => ratio < best - eps || (ratio <= best + eps && basis[i] < basis[l]),
                };
                if better {
                    leave = Some((i, ratio));
                }
            }
        }
        let Some((l, _)) = leave else {
            banned[enter] = true;
            continue;
        };
        let piv = t[(l + 1, enter)];
        for j in 0..width {
            t[(l + 1, j)] /= piv;
        }
        for i in 0..=m {
            if i != l + 1 {
                let f = t[(i, enter)];
                if f != 0.0 {
                    for j in 0..width {
                        let v = t[(l + 1, j)];
                        t[(i, j)] -= f * v;
                    }
                }
            }
        }
        basis[l] = enter;
    }
    Err(Error::Numerical { what: "separation LP".into(), reason: format!("no optimum after {limit} pivots") })
}
