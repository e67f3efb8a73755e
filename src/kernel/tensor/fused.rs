//! A fused CPU forward of the tensor kernel, for f32 inference (no gradient).
//!
//! The primitive-op path ([`super`]) gathers window slots and then runs about thirty
//! elementwise passes over `[W, B*n, H*d_h]` tensors; on a 2-core CPU those passes, not the
//! matmuls, take most of the time. Here:
//!
//! 1. the input is padded with `W` zero rows in front and `S` behind, so that slot `i` of
//!    window `j` is row `base_i + jS` with `base_i = start(0) + i + W` (the one geometry formula
//!    `Geometry::start`); the rows of slot `i` over all windows of all sequences are a strided
//!    view and **one matmul per offset** projects them with every branch's weights at once
//!    (`[C^K | Z^K | C^V | Z^V]` of group `g(i)`), with no gather;
//! 2. one pass per (sequence, window) does the softmax over the valid slots, the weighted sums
//!    and the post-processing ([`post::apply`], the same code as the reference), in
//!    parallel with rayon once the work is large enough to pay for waking the pool.
//!
//! The result is the same [`TensorCompressed`]; the harness checks this path like any other
//! (`tests/kernel_invariants.rs` runs both the fused and the primitive f32 path).

use super::params::{TensorCompressed, TensorParams};
use crate::kernel::post;
use crate::kernel::spec::{GateKind, KernelSpec};
use crate::{Error, Result};
use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use rayon::prelude::*;

/// Column blocks of the concatenated projection `[C^K | Z^K | C^V | Z^V]` (offsets and widths).
#[derive(Clone, Copy, Debug)]
struct Blocks {
    ck: usize,
    zk: Option<usize>,
    cv: Option<usize>,
    zv: Option<usize>,
    width: usize,
}

/// Runs the fused forward. `x: [B, T, d]` f32 on the CPU; parameters must not require grad.
pub(crate) fn compress(
    spec: &KernelSpec,
    heads: usize,
    d_head: usize,
    params: &TensorParams,
    x: &Tensor,
    positions: Vec<usize>,
) -> Result<TensorCompressed> {
    let (b, t_len, d) = x.dims3()?;
    let g = &spec.geometry;
    let (w, s) = (g.window(), g.stride());
    let n = g.num_windows(t_len);
    let (h, dh) = (heads, d_head);
    let dg = spec.gate_width(dh);
    let c = dg.max(1);
    let dev = Device::Cpu;

    // [C^K | Z^K | C^V | Z^V] per group: [G, d, width]
    let mut parts = vec![params.proj_k.clone()];
    let mut width = h * dh;
    let zk = params.gate_k.as_ref().filter(|_| spec.gate != GateKind::Uniform).map(|gt| {
        parts.push(gt.z.clone());
        width += h * dg;
        width - h * dg
    });
    let cv = params.proj_v.as_ref().map(|pv| {
        parts.push(pv.clone());
        width += h * dh;
        width - h * dh
    });
    let zv = params.gate_v.as_ref().filter(|_| spec.has_value_gate()).map(|gt| {
        parts.push(gt.z.clone());
        width += h * dg;
        width - h * dg
    });
    let blocks = Blocks { ck: 0, zk, cv, zv, width };
    let wcat = Tensor::cat(&parts, 2)?; // [G, d, width]
    let bias_k: Option<Vec<f32>> = match (zk, &params.gate_k) {
        (Some(_), Some(gt)) => Some(gt.b.flatten_all()?.to_vec1::<f32>()?),
        _ => None,
    };
    let bias_v: Option<Vec<f32>> = match (zv, &params.gate_v) {
        (Some(_), Some(gt)) => Some(gt.b.flatten_all()?.to_vec1::<f32>()?),
        _ => None,
    };
    let gamma: Option<Vec<f32>> = match (&params.gamma, spec.rms_norm) {
        (Some(gm), true) => Some(gm.flatten_all()?.to_vec1::<f32>()?),
        _ => None,
    };

    let mut keys = vec![0f32; b * h * n * dh];
    let mut values = vec![0f32; b * h * n * dh];
    let mut pooled_k = vec![0f32; b * h * n * dh];
    let mut pooled_v = vec![0f32; b * h * n * dh];
    let mut gate_k = vec![0f32; b * h * n * w * c];
    let mut gate_v = vec![0f32; b * h * n * w * c];
    if n > 0 {
        let start0 = g.start(0); // may be negative (pad_left)
        let xp = Tensor::cat(
            &[Tensor::zeros((b, w, d), DType::F32, &dev)?, x.clone(), Tensor::zeros((b, s, d), DType::F32, &dev)?],
            1,
        )?;
        // proj[i]: [B*n, width] for every offset, all sequences in one matmul (row bb*n + j).
        let mut proj_t = Vec::with_capacity(w);
        for i in 0..w {
            let base = (start0 + (i + w) as i64) as usize;
            let rows = xp.narrow(1, base, n * s)?.reshape((b, n, s, d))?.narrow(2, 0, 1)?.reshape((b * n, d))?;
            let wi = wcat.get(spec.group_of(i))?;
            proj_t.push(rows.matmul(&wi)?);
        }
        let guards: Vec<_> = proj_t.iter().map(|t| t.storage_and_layout()).collect();
        let mut proj: Vec<&[f32]> = Vec::with_capacity(w);
        for (storage, layout) in &guards {
            match (&**storage, layout.contiguous_offsets()) {
                (Storage::Cpu(CpuStorage::F32(v)), Some((a, b))) => proj.push(&v[a..b]),
                _ => {
                    return Err(Error::Numerical {
                        what: "fused kernel".into(),
                        reason: "matmul output is not contiguous f32 on the CPU".into(),
                    })
                }
            }
        }
        // One task per (sequence, window); each writes its own rows. Small problems run on this
        // thread: waking a pool for microseconds of work costs more than the work, and far more
        // when the machine is busy.
        let pass = |r: usize| {
            let j = r % n;
            window_pass(
                spec,
                j,
                r,
                h,
                dh,
                c,
                &blocks,
                &proj,
                bias_k.as_deref(),
                bias_v.as_deref(),
                gamma.as_deref(),
                positions[j],
            )
        };
        let work = b * n * w * blocks.width;
        let per_window: Vec<Vec<f32>> = if work >= PARALLEL_WORK {
            (0..b * n).into_par_iter().map(pass).collect()
        } else {
            (0..b * n).map(pass).collect()
        };
        for (r, buf) in per_window.into_iter().enumerate() {
            let (bb, j) = (r / n, r % n);
            let out_at = |head: usize| (bb * h + head) * n;
            // buf layout per head: key, value, pooled_k, pooled_v (dh each), gate_k, gate_v (w*c each)
            let stride = 4 * dh + 2 * w * c;
            for head in 0..h {
                let o = &buf[head * stride..(head + 1) * stride];
                let row = (out_at(head) + j) * dh;
                keys[row..row + dh].copy_from_slice(&o[0..dh]);
                values[row..row + dh].copy_from_slice(&o[dh..2 * dh]);
                pooled_k[row..row + dh].copy_from_slice(&o[2 * dh..3 * dh]);
                pooled_v[row..row + dh].copy_from_slice(&o[3 * dh..4 * dh]);
                let gr = (out_at(head) + j) * w * c;
                gate_k[gr..gr + w * c].copy_from_slice(&o[4 * dh..4 * dh + w * c]);
                gate_v[gr..gr + w * c].copy_from_slice(&o[4 * dh + w * c..]);
            }
        }
    }
    let t4 = |v: Vec<f32>| Tensor::from_vec(v, (b, h, n, dh), &dev);
    let t5 = |v: Vec<f32>| Tensor::from_vec(v, (b, h, n, w, c), &dev);
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

/// Below this many multiply-adds of window work (`B n W width`), the window passes run on the
/// calling thread.
const PARALLEL_WORK: usize = 1 << 20;

/// Softmax, pooling and post-processing of window `j` (projection row `row`) for every head.
#[allow(clippy::too_many_arguments)]
fn window_pass(
    spec: &KernelSpec,
    j: usize,
    row: usize,
    h: usize,
    dh: usize,
    c: usize,
    blocks: &Blocks,
    proj: &[&[f32]],
    bias_k: Option<&[f32]>,
    bias_v: Option<&[f32]>,
    gamma: Option<&[f32]>,
    position: usize,
) -> Vec<f32> {
    let w = proj.len();
    let first = spec.geometry.first_valid_offset(j);
    let valid = w - first;
    let width = blocks.width;
    let stride = 4 * dh + 2 * w * c;
    let mut out = vec![0f32; h * stride];
    let mut logits = vec![0f32; w * c];
    let mut column = vec![0f32; valid];
    for head in 0..h {
        let o = &mut out[head * stride..(head + 1) * stride];
        // gate weights [w, c] for one branch, written into `dst`
        let mut gate = |zoff: Option<usize>, bias: Option<&[f32]>, dst: &mut [f32]| match (zoff, bias) {
            (Some(zoff), Some(bias)) => {
                let hd = c; // gate width per head (d_g)
                for i in first..w {
                    let row = &proj[i][row * width + zoff + head * hd..row * width + zoff + (head + 1) * hd];
                    let brow = &bias[i * h * hd + head * hd..i * h * hd + (head + 1) * hd];
                    for ch in 0..c {
                        logits[i * c + ch] = row[ch] + brow[ch];
                    }
                }
                for ch in 0..c {
                    for i in first..w {
                        column[i - first] = logits[i * c + ch];
                    }
                    crate::numeric::softmax_in_place(&mut column);
                    for i in first..w {
                        dst[i * c + ch] = column[i - first];
                    }
                }
            }
            _ => {
                let u = 1.0 / valid as f32;
                for i in first..w {
                    dst[i * c] = u;
                }
            }
        };
        let (pre, gates) = o.split_at_mut(4 * dh);
        let (gk, gv) = gates.split_at_mut(w * c);
        gate(blocks.zk, bias_k, gk);
        if blocks.zv.is_some() {
            gate(blocks.zv, bias_v, gv);
        } else {
            gv.copy_from_slice(gk);
        }
        let vector = spec.gate == GateKind::Vector;
        let (keyval, pooled) = pre.split_at_mut(2 * dh);
        let (pk, pv) = pooled.split_at_mut(dh);
        let pool = |coff: usize, a: &[f32], dst: &mut [f32]| {
            for i in first..w {
                let row = &proj[i][row * width + coff + head * dh..row * width + coff + (head + 1) * dh];
                if vector {
                    let ai = &a[i * c..i * c + dh];
                    for e in 0..dh {
                        dst[e] += ai[e] * row[e];
                    }
                } else {
                    let ai = a[i * c];
                    for e in 0..dh {
                        dst[e] += ai * row[e];
                    }
                }
            }
        };
        pool(blocks.ck, gk, pk);
        match blocks.cv {
            Some(cv) => pool(cv, gv, pv),
            None => pv.copy_from_slice(pk),
        }
        let (key, value) = keyval.split_at_mut(dh);
        key.copy_from_slice(pk);
        let gm = gamma.map(|gm| &gm[head * dh..(head + 1) * dh]);
        post::apply(spec, key, gm, position);
        if spec.shared_kv {
            value.copy_from_slice(key);
        } else {
            value.copy_from_slice(pv);
            post::apply(spec, value, gm, position);
        }
    }
    out
}
