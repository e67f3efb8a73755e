//! The few numeric primitives of the fast engine, on row-major `f32` slices: RMSNorm
//! forward/backward and RoPE rotation (its GEMM is [`crate::numeric::gemm`], shared with the fast
//! kernel).

/// RMSNorm of each row of `x: [rows, n]` with weight `w: [n]`: `y = w * x * r`,
/// `r = 1 / sqrt(mean(x^2) + eps)` (the order of operations of the candle decoder). Writes `y`
/// and the per-row `r`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, y: &mut [f32], r: &mut [f32]) {
    let n = w.len();
    for ((xr, yr), rr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)).zip(r.iter_mut()) {
        let ms = xr.iter().map(|v| v * v).sum::<f32>() / n as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        *rr = inv;
        for ((yv, xv), wv) in yr.iter_mut().zip(xr).zip(w) {
            *yv = xv * inv * wv;
        }
    }
}

/// Backward of [`rms_norm`]: `dx (+)= r * w * dy - x * r^3 / n * sum(w * dy * x)`, and
/// `dw += sum_rows dy * x * r` (rows in order).
pub fn rms_norm_back(x: &[f32], w: &[f32], r: &[f32], dy: &[f32], dx: &mut [f32], acc: bool, dw: &mut [f32]) {
    let n = w.len();
    for (((xr, dyr), dxr), &rr) in x.chunks_exact(n).zip(dy.chunks_exact(n)).zip(dx.chunks_exact_mut(n)).zip(r) {
        let mut dot = 0f32;
        for ((&xv, &dv), (&wv, dwv)) in xr.iter().zip(dyr).zip(w.iter().zip(dw.iter_mut())) {
            dot += wv * dv * xv;
            *dwv += dv * xv * rr;
        }
        let c = rr * rr * rr * dot / n as f32;
        for ((dxv, &xv), (&dv, &wv)) in dxr.iter_mut().zip(xr).zip(dyr.iter().zip(w)) {
            let g = rr * wv * dv - c * xv;
            if acc {
                *dxv += g;
            } else {
                *dxv = g;
            }
        }
    }
}

/// RoPE tables for positions `0..t`: `cos[p * half + k]`, `sin[..]` of
/// [`crate::kernel::post::rope_angle`], computed in f64 and rounded to f32 (as the candle path).
pub struct Rope {
    /// Rotated channels (the last `r` of each head), `2 * half`.
    pub r: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    /// Tables for `t` positions and the given inverse frequencies.
    pub fn new(inv_freq: &[f64], t: usize) -> Self {
        let half = inv_freq.len();
        let mut cos = Vec::with_capacity(t * half);
        let mut sin = Vec::with_capacity(t * half);
        for p in 0..t {
            for &f in inv_freq {
                let a = crate::kernel::post::rope_angle(p, f);
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        Rope { r: 2 * half, cos, sin }
    }

    /// Rotates one head row `u` (length `d_h`) at position `p`; `inverse` applies the
    /// transpose (the backward pass).
    pub fn apply(&self, u: &mut [f32], p: usize, inverse: bool) {
        let half = self.r / 2;
        let off = u.len() - self.r;
        let (cs, sn) = (&self.cos[p * half..(p + 1) * half], &self.sin[p * half..(p + 1) * half]);
        for k in 0..half {
            let (c, s) = (cs[k], if inverse { -sn[k] } else { sn[k] });
            let (a, b) = (u[off + 2 * k], u[off + 2 * k + 1]);
            u[off + 2 * k] = a * c - b * s;
            u[off + 2 * k + 1] = a * s + b * c;
        }
    }
}

/// Sizes `v` to `n` elements (contents unspecified: the caller overwrites them).
pub fn size(v: &mut Vec<f32>, n: usize) {
    v.resize(n, 0.0);
}

pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}
