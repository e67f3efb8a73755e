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
    let mut cos_sin = Vec::with_capacity(inv_freq.len());
    rope_table(inv_freq, pos, &mut cos_sin);
    rotate(u, &cos_sin);
}

/// `(cos, sin)` of each rotated pair's angle at `pos`, into `out` (cleared first).
pub fn rope_table<F: Float>(inv_freq: &[f64], pos: usize, out: &mut Vec<(F, F)>) {
    out.clear();
    out.extend(inv_freq.iter().map(|&f| {
        let angle = rope_angle(pos, f);
        (F::from(angle.cos()).expect("cos"), F::from(angle.sin()).expect("sin"))
    }));
}

/// Rotates the last `2 * cos_sin.len()` channels of `u` pair by pair.
pub fn rotate<F: Float>(u: &mut [F], cos_sin: &[(F, F)]) {
    let off = u.len() - 2 * cos_sin.len();
    for (k, &(c, s)) in cos_sin.iter().enumerate() {
        let (a, b) = (u[off + 2 * k], u[off + 2 * k + 1]);
        u[off + 2 * k] = a * c - b * s;
        u[off + 2 * k + 1] = a * s + b * c;
    }
}

/// Applies the spec's post-processing to one pooled entry carrying position `pos`.
pub fn apply<F: Float>(spec: &KernelSpec, u: &mut [F], gamma: Option<&[F]>, pos: usize) {
    let cos_sin = spec.rope.as_ref().map(|rs| {
        let mut t = Vec::new();
        rope_table(&rs.inv_frequencies(rs.rotated_channels(u.len())), pos, &mut t);
        t
    });
    apply_with(spec, u, gamma, cos_sin.as_deref());
}

/// [`apply`] with the RoPE table ([`rope_table`] of `inv_frequencies(rotated_channels(u.len()))`
/// at the entry's position; `None` without RoPE) computed by the caller, which can then share it
/// between an entry's key and value.
pub fn apply_with<F: Float>(spec: &KernelSpec, u: &mut [F], gamma: Option<&[F]>, cos_sin: Option<&[(F, F)]>) {
    if let (true, Some(gamma)) = (spec.rms_norm, gamma) {
        rms_norm(u, gamma, spec.rms_norm_eps);
    }
    if let Some(cs) = cos_sin {
        rotate(u, cs);
    }
}
