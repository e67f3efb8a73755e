//! The exact population loss at `eps = 0` for oracle gates (T-4, T-5) and `F_1` at a one-hot vertex (T-7).

use super::oracle_gates::OracleGates;
use super::params::TaskParams;
use crate::{Error, Result};

/// `log(sum_i w_i e^{x_i} + c)` helper state: returns (shift m) so that all exponents are <= 0.
#[inline]
fn shift_for(max_logit: f64) -> f64 {
    max_logit.max(0.0)
}

/// Exact population loss at `eps = 0` for oracle gates, eq. (T-4). Gates must be
/// probability vectors (not checked here, for speed; see [`OracleGates`]).
pub fn population_loss(p: &TaskParams, g: &OracleGates) -> Result<f64> {
    population_loss_impl(p, g, None)
}

/// Exact population loss (T-4) and its gradient with respect to `pK` and `pV` (T-5), in the
/// layout of [`OracleGates`]. Returns `(F, dF/dpK, dF/dpV)`.
pub fn population_loss_grad(p: &TaskParams, g: &OracleGates) -> Result<(f64, Vec<f64>, Vec<f64>)> {
    let n = g.key.len();
    let mut gk = vec![0.0; n];
    let mut gv = vec![0.0; n];
    let f = population_loss_impl(p, g, Some((&mut gk, &mut gv)))?;
    Ok((f, gk, gv))
}

fn population_loss_impl(
    p: &TaskParams,
    g: &OracleGates,
    mut grad: Option<(&mut Vec<f64>, &mut Vec<f64>)>,
) -> Result<f64> {
    p.validate()?;
    g.check(p)?;
    let (hh, ll, ss) = (p.heads, p.chunks, p.stride);
    let lm1 = (ll - 1) as f64;
    let mut a_on = vec![0.0; hh];
    let mut a_off = vec![0.0; hh];
    let mut u = vec![0.0; ll * ss];
    let mut gmat = vec![0.0; ll * ss];
    let mut s = vec![0.0; hh * ll];
    let mut total = 0.0;
    for lq in 0..ll {
        for rq in 0..ss - 1 {
            // (T-4a) attention: a_{h,l} = [e^{beta c_h} 1{l=l*} + 1{l!=l*}] / (e^{beta c_h} + L - 1)
            for h in 0..hh {
                let c = g.key[g.idx(h, lq, rq)];
                let e = (p.beta * (c - 1.0)).exp(); // scaled by e^{-beta}: e^{beta c}/e^{beta}
                let off = (-p.beta).exp();
                let den = e + lm1 * off;
                a_on[h] = e / den;
                a_off[h] = off / den;
            }
            // (T-4b) U_{l,r} = sum_h a_{h,l} pV_{h,l}(r)
            let mut umax = f64::NEG_INFINITY;
            for l in 0..ll {
                for r in 0..ss {
                    let mut acc = 0.0;
                    for h in 0..hh {
                        let a = if l == lq { a_on[h] } else { a_off[h] };
                        acc += a * g.value[g.idx(h, l, r)];
                    }
                    u[l * ss + r] = acc;
                    umax = umax.max(acc);
                }
            }
            // (T-4c) loss = -gamma U_target + log(sum e^{gamma U} + N - L S)
            let m = shift_for(p.gamma * umax);
            let mut z = p.distractors() * (-m).exp();
            for (gm, &uv) in gmat.iter_mut().zip(u.iter()) {
                let e = (p.gamma * uv - m).exp();
                *gm = e;
                z += e;
            }
            let target = lq * ss + rq + 1;
            total += -p.gamma * u[target] + m + z.ln();
            if let Some((gk, gv)) = grad.as_mut() {
                // (T-5) G_{l,r} = gamma (pi_{l,r} - 1{target})
                for gm in gmat.iter_mut() {
                    *gm = p.gamma * *gm / z;
                }
                gmat[target] -= p.gamma;
                for h in 0..hh {
                    let mut sbar = 0.0;
                    for l in 0..ll {
                        let a = if l == lq { a_on[h] } else { a_off[h] };
                        let mut sh = 0.0;
                        for r in 0..ss {
                            let i = g.idx(h, l, r);
                            sh += gmat[l * ss + r] * g.value[i];
                            gv[i] += a * gmat[l * ss + r];
                        }
                        s[h * ll + l] = sh;
                        sbar += a * sh;
                    }
                    let i = g.idx(h, lq, rq);
                    gk[i] += p.beta * a_on[h] * (s[h * ll + lq] - sbar);
                }
            }
        }
    }
    let nq = (ll * (ss - 1)) as f64;
    if let Some((gk, gv)) = grad {
        gk.iter_mut().for_each(|x| *x /= nq);
        gv.iter_mut().for_each(|x| *x /= nq);
    }
    let f = total / nq;
    if !f.is_finite() {
        return Err(Error::Numerical { what: "population loss".into(), reason: format!("non-finite value {f}") });
    }
    Ok(f)
}

/// `F_1`, the loss of any one-hot distinct configuration, eq. (T-7).
pub fn one_hot_loss(p: &TaskParams) -> Result<f64> {
    p.validate()?;
    let (h, l, s) = (p.heads as f64, p.chunks as f64, p.stride as f64);
    let eb = p.beta.exp();
    let a = eb / (eb + l - 1.0);
    let b = 1.0 / (eb + l - 1.0);
    let g = p.gamma;
    let rest = p.vocab as f64 - l * h;
    let loss_cov = -g * a + ((g * a).exp() + (l - 1.0) * (g * b).exp() + (h - 1.0) * l * (g / l).exp() + rest).ln();
    let loss_unc = (l * h * (g / l).exp() + rest).ln();
    Ok((h * loss_cov + (s - 1.0 - h) * loss_unc) / (s - 1.0))
}
