//! The tensor formulas, each once, from differentiable primitives: softmax over an axis,
//! RMSNorm, interleaved partial RoPE, masks, grouped-query head repetition and compressed
//! attention. The kernel ([`super::TensorKernel`]) and the model's decoder both use these.

use crate::kernel::post::rope_angle;
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor, D};

/// Softmax over axis `dim` from primitives (differentiable; the max is detached, which leaves
/// the value and the gradient unchanged). `-inf` entries get weight 0.
pub fn softmax(s: &Tensor, dim: usize) -> Result<Tensor> {
    let m = s.max_keepdim(dim)?.detach();
    let e = s.broadcast_sub(&m)?.exp()?;
    Ok(e.broadcast_div(&e.sum_keepdim(dim)?)?)
}

/// Softmax over the last axis ([`softmax`]).
pub fn softmax_last(s: &Tensor) -> Result<Tensor> {
    softmax(s, s.rank() - 1)
}

/// RMSNorm over the last axis, `x * weight / sqrt(mean(x^2) + eps)`, from primitives. The
/// kernel passes its spec's `rms_norm_eps`; the decoder passes the same default
/// ([`crate::kernel::spec::RMS_NORM_EPS`]).
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    let inv = (ms + eps)?.sqrt()?.recip()?;
    Ok(x.broadcast_mul(&inv)?.broadcast_mul(weight)?)
}

/// Interleaved-pair RoPE on the last `r = 2 * inv_freq.len()` channels of
/// `u: [B, H, n, d_h]`, entry `j` at `positions[j]` (angles from [`rope_angle`]).
pub fn rope_tensor(u: &Tensor, inv_freq: &[f64], positions: &[usize], device: &Device) -> Result<Tensor> {
    let (b, h, n, dh) = u.dims4()?;
    let half = inv_freq.len();
    let r = 2 * half;
    let mut cos = Vec::with_capacity(n * half);
    let mut sin = Vec::with_capacity(n * half);
    for &p in positions {
        for &f in inv_freq {
            let a = rope_angle(p, f);
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    let cos = Tensor::from_vec(cos, (1, 1, n, half, 1), device)?.to_dtype(u.dtype())?;
    let sin = Tensor::from_vec(sin, (1, 1, n, half, 1), device)?.to_dtype(u.dtype())?;
    let rot = u.narrow(3, dh - r, r)?.reshape((b, h, n, half, 2))?;
    let x0 = rot.narrow(4, 0, 1)?;
    let x1 = rot.narrow(4, 1, 1)?;
    let y0 = (x0.broadcast_mul(&cos)? - x1.broadcast_mul(&sin)?)?;
    let y1 = (x0.broadcast_mul(&sin)? + x1.broadcast_mul(&cos)?)?;
    let rotated = Tensor::cat(&[y0, y1], 4)?.reshape((b, h, n, r))?;
    if r == dh {
        Ok(rotated)
    } else {
        Ok(Tensor::cat(&[u.narrow(3, 0, dh - r)?, rotated], 3)?)
    }
}

/// Additive mask: 0 where allowed, `-inf` elsewhere, as `[rows, cols]` in `dtype`.
fn additive_mask(
    rows: usize,
    cols: usize,
    allowed: impl Fn(usize, usize) -> bool,
    device: &Device,
    dtype: DType,
) -> Result<Tensor> {
    let v: Vec<f32> =
        (0..rows * cols).map(|k| if allowed(k / cols, k % cols) { 0.0 } else { f32::NEG_INFINITY }).collect();
    Ok(Tensor::from_vec(v, (rows, cols), device)?.to_dtype(dtype)?)
}

/// Repeats KV heads for grouped-query attention: `[B, Hkv, L, d] -> [B, Hkv*g, L, d]`.
pub fn repeat_kv(x: &Tensor, groups: usize) -> Result<Tensor> {
    if groups == 1 {
        return Ok(x.clone());
    }
    let (b, h, l, d) = x.dims4()?;
    Ok(x.unsqueeze(2)?.broadcast_as((b, h, groups, l, d))?.contiguous()?.reshape((b, h * groups, l, d))?)
}

/// Output of [`compressed_attention`]: `[B, Hq, T, d_h]` and entry weights `[B, Hq, T, n]`.
#[derive(Clone, Debug)]
pub struct TensorAttention {
    /// Attention output.
    pub output: Tensor,
    /// Weight of each compressed entry for each query (0 where not visible).
    pub entry_weights: Tensor,
}

/// Compressed attention in one softmax over the local raw window (`max(0,q-L+1) ..= q`) and
/// the visible entries, with grouped-query heads. `q: [B, Hq, T, d_h]`, raw keys/values
/// `[B, Hkv, T, d_h]`, entries `[B, Hkv, n, d_h]`; `Hq` must be a multiple of `Hkv`. The tensor
/// twin of [`crate::kernel::attention::compressed_attention`].
#[allow(clippy::too_many_arguments)]
pub fn compressed_attention(
    geometry: &crate::geometry::Geometry,
    visibility: crate::geometry::Visibility,
    local_window: usize,
    q: &Tensor,
    raw_k: &Tensor,
    raw_v: &Tensor,
    entry_k: &Tensor,
    entry_v: &Tensor,
) -> Result<TensorAttention> {
    let (_, hq, t_len, dh) = q.dims4()?;
    let (_, hkv, _, _) = raw_k.dims4()?;
    let n = entry_k.dim(2)?;
    if local_window == 0 {
        return Err(Error::invalid("local_window", "must be at least 1 (the query's own token), got 0"));
    }
    if hkv == 0 || hq % hkv != 0 {
        return Err(Error::invalid("heads", format!("query heads ({hq}) must be a multiple of KV heads ({hkv})")));
    }
    let groups = hq / hkv;
    let (dev, dtype) = (q.device(), q.dtype());
    let scale = 1.0 / (dh as f64).sqrt();
    let k = repeat_kv(raw_k, groups)?;
    let v = repeat_kv(raw_v, groups)?;
    let start = |qq| crate::geometry::local_window_start(qq, local_window);
    let local = additive_mask(t_len, t_len, |qq, t| t <= qq && t >= start(qq), dev, dtype)?;
    let s_raw = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&local)?;
    if n == 0 {
        let w = softmax_last(&s_raw)?;
        let (b, _, _, _) = q.dims4()?;
        return Ok(TensorAttention {
            output: w.matmul(&v)?,
            entry_weights: Tensor::zeros((b, hq, t_len, 0), dtype, dev)?,
        });
    }
    let ek = repeat_kv(entry_k, groups)?;
    let ev = repeat_kv(entry_v, groups)?;
    let vis = additive_mask(t_len, n, |qq, j| geometry.is_visible(j, qq, visibility), dev, dtype)?;
    let s_ent = (q.matmul(&ek.t()?)? * scale)?.broadcast_add(&vis)?;
    let w = softmax_last(&Tensor::cat(&[&s_raw, &s_ent], 3)?)?;
    let w_raw = w.narrow(3, 0, t_len)?;
    let w_ent = w.narrow(3, t_len, n)?;
    let output = (w_raw.matmul(&v)? + w_ent.matmul(&ev)?)?;
    Ok(TensorAttention { output, entry_weights: w_ent })
}
