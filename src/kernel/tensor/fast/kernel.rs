//! [`FastKernel`]: the parameters prepared once, then the chunks of windows run (on rayon when
//! the work is large enough), and the outputs assembled as tensors.

use super::chunk::{Blocks, Ctx, Item, Prepared, Scratch};
use super::windows::{run_chunk, Isa};
use crate::kernel::spec::{GateKind, KernelDims, KernelSpec};
use crate::kernel::tensor::params::{TensorCompressed, TensorParams};
use crate::{Error, Result};
use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use rayon::prelude::*;

/// Bytes of one chunk's projection buffer (`W x cw x width` f32) aimed at: half of a 2 MiB L2.
const CHUNK_BYTES: usize = 1 << 20;
/// Bounds on the windows per chunk (`cw`).
const MIN_CHUNK_WINDOWS: usize = 16;
const MAX_CHUNK_WINDOWS: usize = 256;
/// Below this many multiply-adds (`B n W d width`), chunks run on the calling thread: waking
/// the pool costs more than the work.
const PARALLEL_WORK: usize = 1 << 22;

/// Windows per chunk for a window of `w` slots and `width` projected columns.
pub fn chunk_windows(w: usize, width: usize) -> usize {
    (CHUNK_BYTES / (4 * w * width.max(1))).clamp(MIN_CHUNK_WINDOWS, MAX_CHUNK_WINDOWS)
}

/// The fast CPU kernel for a spec, dims and head count.
#[derive(Clone, Debug)]
pub struct FastKernel {
    spec: KernelSpec,
    dims: KernelDims,
    heads: usize,
}

impl FastKernel {
    /// A kernel for `heads` heads. Every spec the candle kernel accepts is supported.
    pub fn new(spec: &KernelSpec, dims: KernelDims, heads: usize) -> Result<Self> {
        spec.validate_for(dims.d_head)?;
        if heads == 0 {
            return Err(Error::invalid("heads", "must be at least 1, got 0"));
        }
        if spec.gate == GateKind::Vector && spec.gate_width(dims.d_head) != dims.d_head {
            return Err(Error::invalid(
                "gate",
                format!(
                    "the fast kernel needs vector gates as wide as d_h = {}, got {}",
                    dims.d_head,
                    spec.gate_width(dims.d_head)
                ),
            ));
        }
        Ok(FastKernel { spec: spec.clone(), dims, heads })
    }

    /// The spec.
    pub fn spec(&self) -> &KernelSpec {
        &self.spec
    }

    /// Compresses `x: [B, T, d]` (f32 on the CPU) one-shot; the same output as
    /// [`crate::kernel::tensor::TensorKernel::compress`] (candle's primitive ops) to f32 rounding. Refuses inputs or parameters that take part in
    /// automatic differentiation (this path has no backward).
    pub fn compress(&self, params: &TensorParams, x: &Tensor) -> Result<TensorCompressed> {
        let (b, t_len, d) =
            x.dims3().map_err(|_| Error::shape("kernel input", "[B, T, d]", format!("{:?}", x.dims())))?;
        if d != self.dims.d_model {
            return Err(Error::shape(
                "kernel input",
                format!("[B, T, {}]", self.dims.d_model),
                format!("{:?}", x.dims()),
            ));
        }
        if x.dtype() != DType::F32 || !x.device().is_cpu() {
            return Err(Error::invalid(
                "kernel input",
                format!("the fast kernel takes f32 on the CPU, got {:?} on {:?}", x.dtype(), x.device().location()),
            ));
        }
        if x.track_op() || params.requires_grad() {
            return Err(Error::invalid(
                "kernel input",
                "the fast kernel is forward-only, but the input or a parameter requires a gradient (use the candle kernel)",
            ));
        }
        let g = &self.spec.geometry;
        let (w, h, dh) = (g.window(), self.heads, self.dims.d_head);
        let n = g.num_windows(t_len);
        let dg = self.spec.gate_width(dh);
        let c = dg.max(1);
        let positions: Vec<usize> = (0..n).map(|j| self.spec.entry_position(j)).collect();
        let prepared = self.prepare(params)?;

        let mut keys = vec![0f32; b * n * h * dh];
        let mut values = vec![0f32; b * n * h * dh];
        let mut pooled_k = vec![0f32; b * n * h * dh];
        let mut pooled_v = vec![0f32; b * n * h * dh];
        let mut gate_k = vec![0f32; b * n * h * w * c];
        let mut gate_v = vec![0f32; b * n * h * w * c];
        if n > 0 {
            let x = x.contiguous()?;
            let (storage, layout) = x.storage_and_layout();
            let xs: &[f32] = match (&*storage, layout.contiguous_offsets()) {
                (Storage::Cpu(CpuStorage::F32(v)), Some((a, e))) => &v[a..e],
                _ => {
                    return Err(Error::Numerical {
                        what: "fast kernel".into(),
                        reason: "input is not contiguous f32 on the CPU".into(),
                    })
                }
            };
            let ctx = Ctx { spec: &self.spec, x: xs, t_len, d, h, dh, c, dg, p: &prepared };
            let cw = chunk_windows(w, prepared.blocks.width);
            // Chunks in (sequence, window) order own consecutive output rows.
            let mut items = Vec::new();
            let (mut rk, mut rv, mut rpk, mut rpv) =
                (&mut keys[..], &mut values[..], &mut pooled_k[..], &mut pooled_v[..]);
            let (mut rgk, mut rgv) = (&mut gate_k[..], &mut gate_v[..]);
            for bb in 0..b {
                for j0 in (0..n).step_by(cw) {
                    let j1 = (j0 + cw).min(n);
                    let (e, gsz) = ((j1 - j0) * h * dh, (j1 - j0) * h * w * c);
                    let (k0, k1) = std::mem::take(&mut rk).split_at_mut(e);
                    let (v0, v1) = std::mem::take(&mut rv).split_at_mut(e);
                    let (pk0, pk1) = std::mem::take(&mut rpk).split_at_mut(e);
                    let (pv0, pv1) = std::mem::take(&mut rpv).split_at_mut(e);
                    let (gk0, gk1) = std::mem::take(&mut rgk).split_at_mut(gsz);
                    let (gv0, gv1) = std::mem::take(&mut rgv).split_at_mut(gsz);
                    (rk, rv, rpk, rpv, rgk, rgv) = (k1, v1, pk1, pv1, gk1, gv1);
                    items.push(Item {
                        b: bb,
                        j0,
                        j1,
                        keys: k0,
                        values: v0,
                        pooled_k: pk0,
                        pooled_v: pv0,
                        gate_k: gk0,
                        gate_v: gv0,
                    });
                }
            }
            let isa = Isa::detect();
            let work = b * n * w * d * prepared.blocks.width;
            if items.len() > 1 && work >= PARALLEL_WORK {
                items
                    .into_par_iter()
                    .for_each_init(Scratch::default, |scratch, item| run_chunk(&ctx, item, scratch, isa));
            } else {
                let mut scratch = Scratch::default();
                for item in items {
                    run_chunk(&ctx, item, &mut scratch, isa);
                }
            }
        }
        let dev = Device::Cpu;
        // Internal layout [B, n, H, ...]; the API's is [B, H, n, ...].
        let t4 = |v: Vec<f32>| -> Result<Tensor> {
            let t = Tensor::from_vec(v, (b, n, h, dh), &dev)?;
            Ok(if h == 1 { t.reshape((b, 1, n, dh))? } else { t.permute((0, 2, 1, 3))?.contiguous()? })
        };
        let t5 = |v: Vec<f32>| -> Result<Tensor> {
            let t = Tensor::from_vec(v, (b, n, h, w, c), &dev)?;
            Ok(if h == 1 { t.reshape((b, 1, n, w, c))? } else { t.permute((0, 2, 1, 3, 4))?.contiguous()? })
        };
        Ok(TensorCompressed {
            keys: t4(keys)?,
            values: t4(values)?,
            pooled_k: t4(pooled_k)?,
            pooled_v: t4(pooled_v)?,
            gate_k: t5(gate_k)?,
            gate_v: t5(gate_v)?,
            positions,
        })
    }

    /// Concatenates the projections per group and reads the biases, gains and frequencies.
    fn prepare(&self, params: &TensorParams) -> Result<Prepared> {
        let spec = &self.spec;
        let (h, d, dh) = (self.heads, self.dims.d_model, self.dims.d_head);
        let dg = spec.gate_width(dh);
        let groups = spec.num_groups();
        let flat = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?) };
        // (flattened [G, d, cols], cols) per block, in column order
        let mut parts: Vec<(Vec<f32>, usize)> = vec![(flat(&params.proj_k)?, h * dh)];
        let mut width = h * dh;
        let mut push = |t: &Tensor, cols: usize, parts: &mut Vec<(Vec<f32>, usize)>| -> Result<usize> {
            parts.push((flat(t)?, cols));
            width += cols;
            Ok(width - cols)
        };
        let zk = match params.gate_k.as_ref().filter(|_| spec.gate != GateKind::Uniform) {
            Some(gt) => Some(push(&gt.z, h * dg, &mut parts)?),
            None => None,
        };
        let cv = match &params.proj_v {
            Some(pv) => Some(push(pv, h * dh, &mut parts)?),
            None => None,
        };
        let zv = match params.gate_v.as_ref().filter(|_| spec.has_value_gate()) {
            Some(gt) => Some(push(&gt.z, h * dg, &mut parts)?),
            None => None,
        };
        for (v, cols) in &parts {
            if v.len() != groups * d * cols {
                return Err(Error::shape(
                    "fast kernel parameters",
                    format!("[{groups}, {d}, {cols}]"),
                    format!("{} values", v.len()),
                ));
            }
        }
        let mut wcat = vec![vec![0f32; d * width]; groups];
        for (gi, wg) in wcat.iter_mut().enumerate() {
            let mut col = 0;
            for (v, cols) in &parts {
                for k in 0..d {
                    let src = &v[(gi * d + k) * cols..(gi * d + k + 1) * cols];
                    wg[k * width + col..k * width + col + cols].copy_from_slice(src);
                }
                col += cols;
            }
        }
        let bias_k = match (zk, &params.gate_k) {
            (Some(_), Some(gt)) => Some(flat(&gt.b)?),
            _ => None,
        };
        let bias_v = match (zv, &params.gate_v) {
            (Some(_), Some(gt)) => Some(flat(&gt.b)?),
            _ => None,
        };
        let gamma = match (&params.gamma, spec.rms_norm) {
            (Some(gm), true) => Some(flat(gm)?),
            _ => None,
        };
        let inv_freq = spec.rope.as_ref().map(|rs| rs.inv_frequencies(rs.rotated_channels(dh)));
        Ok(Prepared { wcat, blocks: Blocks { zk, cv, zv, width }, bias_k, bias_v, gamma, inv_freq })
    }
}

#[cfg(test)]
mod tests {
    use super::super::windows::exp_nonpositive;

    #[test]
    fn exp_within_three_ulp_on_the_softmax_range() {
        let mut worst = 0f64;
        let mut x = 0f32;
        while x > -87.0 {
            let want = (x as f64).exp();
            let got = exp_nonpositive(x) as f64;
            worst = worst.max(((got - want) / want).abs());
            x -= 0.001_37;
        }
        assert!(worst < 3.0 * f32::EPSILON as f64, "worst relative error {worst:e}");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert!(exp_nonpositive(f32::NAN).is_nan());
        assert!(exp_nonpositive(-1e30) < 2e-38);
    }
}
