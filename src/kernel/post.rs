//! Post-processing of a pooled entry: RMSNorm, then partial RoPE at the entry position.
//! The angle formula lives here once; the reference and the tensor implementation both use it.

use super::spec::{KernelSpec, RMS_NORM_EPS};
use num_traits::Float;

/// Rotation angle of channel pair `k` (of `r / 2`) at position `pos`: `pos * theta^(-2k/r)`.
pub fn rope_angle(pos: usize, k: usize, r: usize, theta: f64) -> f64 {
    pos as f64 * theta.powf(-(2.0 * k as f64) / r as f64)
}

/// RMSNorm in place: `u <- gamma * u / sqrt(mean(u^2) + eps)`.
pub fn rms_norm<F: Float>(u: &mut [F], gamma: &[F]) {
    let n = F::from(u.len()).expect("len");
    let eps = F::from(RMS_NORM_EPS).expect("eps");
    let ms = u.iter().fold(F::zero(), |acc, &v| acc + v * v) / n;
    let scale = F::one() / (ms + eps).sqrt();
    for (v, &g) in u.iter_mut().zip(gamma) {
        *v = g * (*v * scale);
    }
}

/// Interleaved-pair RoPE on the last `r` channels of `u` at position `pos`.
pub fn rope<F: Float>(u: &mut [F], r: usize, pos: usize, theta: f64) {
    let off = u.len() - r;
    for k in 0..r / 2 {
        let angle = rope_angle(pos, k, r, theta);
        let (c, s) = (F::from(angle.cos()).expect("cos"), F::from(angle.sin()).expect("sin"));
        let (a, b) = (u[off + 2 * k], u[off + 2 * k + 1]);
        u[off + 2 * k] = a * c - b * s;
        u[off + 2 * k + 1] = a * s + b * c;
    }
}

/// Applies the spec's post-processing to one pooled entry carrying position `pos`.
pub fn apply<F: Float>(spec: &KernelSpec, u: &mut [F], gamma: Option<&[F]>, pos: usize) {
    if let (true, Some(gamma)) = (spec.rms_norm, gamma) {
        rms_norm(u, gamma);
    }
    if let Some(rs) = &spec.rope {
        let r = rs.rotated_channels(u.len());
        rope(u, r, pos, rs.theta);
    }
}
