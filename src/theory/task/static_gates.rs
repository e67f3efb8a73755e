//! The static-gate closed form (T-6), its exact gradient (T-6g) and the softmax pullback (T-8): the hot loop of the gradient flow.

use super::params::TaskParams;

/// Preallocated buffers for [`static_loss_grad`], so that the gradient-flow loop allocates
/// nothing.
#[derive(Debug, Clone)]
pub struct StaticWorkspace {
    a_on: Vec<f64>,
    b_off: Vec<f64>,
    u_on: Vec<f64>,
    u_off: Vec<f64>,
    g_on: Vec<f64>,
    g_off: Vec<f64>,
}

impl StaticWorkspace {
    /// Buffers for `H` heads and stride `S`.
    pub fn new(heads: usize, stride: usize) -> Self {
        StaticWorkspace {
            a_on: vec![0.0; heads],
            b_off: vec![0.0; heads],
            u_on: vec![0.0; stride],
            u_off: vec![0.0; stride],
            g_on: vec![0.0; stride],
            g_off: vec![0.0; stride],
        }
    }
}

/// Static-gate closed form (T-6) and, if `grad` is given, its exact gradient (T-6g) with
/// respect to `pK_h(r)` and `pV_h(r)` (layout `h * S + r`, written, not accumulated).
/// Parameters are assumed valid (call [`TaskParams::validate`] once outside the hot loop).
pub fn static_loss_grad(
    p: &TaskParams,
    key: &[f64],
    value: &[f64],
    ws: &mut StaticWorkspace,
    grad: Option<(&mut [f64], &mut [f64])>,
) -> f64 {
    let (hh, ll, ss) = (p.heads, p.chunks, p.stride);
    let lm1 = (ll - 1) as f64;
    let rr = ss - 1;
    let gamma = p.gamma;
    let dist = p.distractors();
    let off = (-p.beta).exp();
    let mut total = 0.0;
    let mut grad = grad;
    if let Some((gk, gv)) = grad.as_mut() {
        gk.iter_mut().for_each(|x| *x = 0.0);
        gv.iter_mut().for_each(|x| *x = 0.0);
    }
    for rq in 0..rr {
        // A_h = e^{beta pK_h(r*)} / (e^{beta pK_h(r*)} + L - 1), B_h = (1 - A_h)/(L - 1)
        for h in 0..hh {
            let e = (p.beta * (key[h * ss + rq] - 1.0)).exp();
            let den = e + lm1 * off;
            ws.a_on[h] = e / den;
            ws.b_off[h] = off / den;
        }
        let mut umax = 0.0f64;
        for r in 0..ss {
            let (mut on, mut of) = (0.0, 0.0);
            for h in 0..hh {
                let v = value[h * ss + r];
                on += ws.a_on[h] * v;
                of += ws.b_off[h] * v;
            }
            ws.u_on[r] = on;
            ws.u_off[r] = of;
            umax = umax.max(on).max(of);
        }
        let m = gamma * umax;
        let mut z = dist * (-m).exp();
        for r in 0..ss {
            let eon = (gamma * ws.u_on[r] - m).exp();
            let eoff = (gamma * ws.u_off[r] - m).exp();
            ws.g_on[r] = eon;
            ws.g_off[r] = eoff;
            z += eon + lm1 * eoff;
        }
        total += -gamma * ws.u_on[rq + 1] + m + z.ln();
        if let Some((gk, gv)) = grad.as_mut() {
            let inv = gamma / z;
            for r in 0..ss {
                ws.g_on[r] *= inv; // gamma pi_on(r)
                ws.g_off[r] *= inv * lm1; // gamma (L-1) pi_off(r)
            }
            ws.g_on[rq + 1] -= gamma;
            for h in 0..hh {
                let (a, b) = (ws.a_on[h], ws.b_off[h]);
                let (mut son, mut soff) = (0.0, 0.0);
                let base = h * ss;
                for r in 0..ss {
                    let v = value[base + r];
                    son += ws.g_on[r] * v;
                    soff += ws.g_off[r] * v;
                    gv[base + r] += a * ws.g_on[r] + b * ws.g_off[r];
                }
                gk[base + rq] += p.beta * a * (1.0 - a) * (son - soff / lm1);
            }
        }
    }
    let inv_r = 1.0 / rr as f64;
    if let Some((gk, gv)) = grad {
        gk.iter_mut().for_each(|x| *x *= inv_r);
        gv.iter_mut().for_each(|x| *x *= inv_r);
    }
    total * inv_r
}

/// Softmax of `logits` into `out` (same length): the one softmax of the crate.
pub use crate::numeric::softmax_into;

/// Pull a gradient `g` with respect to `p = softmax(theta)` back to `theta` in place:
/// `d/dtheta = p (.) (g - <p, g>)` (T-8).
#[inline]
pub fn softmax_pullback(p: &[f64], g: &mut [f64]) {
    let dot: f64 = p.iter().zip(g.iter()).map(|(a, b)| a * b).sum();
    for (gi, &pi) in g.iter_mut().zip(p) {
        *gi = pi * (*gi - dot);
    }
}
