//! Post-processing of a pooled entry: RMSNorm, then partial RoPE at the entry position.
//! The angle formula lives here once; the reference and the tensor implementation both use it.

use super::spec::KernelSpec;
use num_traits::Float;

/// Rotation angle of channel pair `k` at position `pos`: `pos * inv_freq[k]` (frequencies from
/// [`super::spec::RopeSpec::inv_frequencies`]).
pub fn rope_angle(pos: usize, inv_freq: f64) -> f64 {
    pos as f64 * inv_freq
}

/// RMSNorm in place: `u <- gamma * u / sqrt(mean(u^2) + eps)`.
pub fn rms_norm<F: Float>(u: &mut [F], gamma: &[F], eps: f64) {
    let n = F::from(u.len()).expect("len");
    let eps = F::from(eps).expect("eps");
    let ms = u.iter().fold(F::zero(), |acc, &v| acc + v * v) / n;
    let scale = F::one() / (ms + eps).sqrt();
    for (v, &g) in u.iter_mut().zip(gamma) {
        *v = g * (*v * scale);
    }
}

/// Interleaved-pair RoPE on the last `2 * inv_freq.len()` channels of `u` at position `pos`.
pub fn rope<F: Float>(u: &mut [F], inv_freq: &[f64], pos: usize) {
    let off = u.len() - 2 * inv_freq.len();
    for (k, &f) in inv_freq.iter().enumerate() {
        let angle = rope_angle(pos, f);
        let (c, s) = (F::from(angle.cos()).expect("cos"), F::from(angle.sin()).expect("sin"));
        let (a, b) = (u[off + 2 * k], u[off + 2 * k + 1]);
        u[off + 2 * k] = a * c - b * s;
        u[off + 2 * k + 1] = a * s + b * c;
    }
}

/// Applies the spec's post-processing to one pooled entry carrying position `pos`.
pub fn apply<F: Float>(spec: &KernelSpec, u: &mut [F], gamma: Option<&[F]>, pos: usize) {
    let inv_freq = spec.rope.as_ref().map(|rs| rs.inv_frequencies(rs.rotated_channels(u.len())));
    apply_with(spec, u, gamma, pos, inv_freq.as_deref());
}

/// [`apply`] with the RoPE frequencies (`inv_frequencies(rotated_channels(u.len()))`, `None`
/// without RoPE) computed once by a caller that post-processes many entries.
pub fn apply_with<F: Float>(spec: &KernelSpec, u: &mut [F], gamma: Option<&[F]>, pos: usize, inv_freq: Option<&[f64]>) {
    if let (true, Some(gamma)) = (spec.rms_norm, gamma) {
        rms_norm(u, gamma, spec.rms_norm_eps);
    }
    if let Some(f) = inv_freq {
        rope(u, f, pos);
    }
}
