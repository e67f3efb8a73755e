//! The candle implementation: batched over sequences and heads, device-generic, in f32, f16 or
//! bf16, built only from differentiable primitives (candle-nn's fused softmax, RMSNorm and RoPE
//! drop gradients silently; see `reference/rust-stack-notes.md`).
//!
//! Layout. For `B` sequences of `T` tokens, `H` heads, `n` windows of `W` slots:
//!
//! 1. gather the window slots of the input, `xw: [W, B*n, d]` (empty slots read a zero row);
//! 2. per offset `i`, project with the group's matrices: one batched matmul over `W`,
//!    `xw @ C_{g(i)}: [W, B*n, H*d_h]` and `xw @ Z_{g(i)} + b_i: [W, B*n, H*d_g]`;
//! 3. softmax over the slot axis (empty slots get `-inf`), weighted sum over it;
//! 4. RMSNorm and interleaved partial RoPE at the entry positions.
//!
//! Streaming ([`TensorStream`]) carries the last `W` input rows and runs the same code on the
//! windows each chunk completes.

use super::params::KernelParams;
use super::post::rope_angle;
use super::spec::{GateKind, KernelDims, KernelSpec};
use super::Compressed;
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor, D};
use ndarray::{Array2, Array3};

/// Gate parameters of one branch for `H` heads: `z: [G, d, H*d_g]`, `b: [W, H*d_g]`.
#[derive(Clone, Debug)]
pub struct TensorGate {
    /// Content weights, transposed and heads concatenated on the last axis.
    pub z: Tensor,
    /// Per-offset biases.
    pub b: Tensor,
}

/// Parameters of `H` heads of one kernel, in the tensor layout.
#[derive(Clone, Debug)]
pub struct TensorParams {
    /// Key gate.
    pub gate_k: Option<TensorGate>,
    /// Value gate.
    pub gate_v: Option<TensorGate>,
    /// `C^K`: `[G, d, H*d_h]`.
    pub proj_k: Tensor,
    /// `C^V`: `[G, d, H*d_h]`.
    pub proj_v: Option<Tensor>,
    /// RMSNorm weights `[H, d_h]`.
    pub gamma: Option<Tensor>,
}

/// `[G, a, d]` per head -> `[G, d, H*a]`.
fn stack_heads(per_head: &[&Array3<f64>], device: &Device, dtype: DType) -> Result<Tensor> {
    let (g, a, d) = per_head[0].dim();
    let h = per_head.len();
    let mut v = vec![0f64; g * d * h * a];
    for (hh, p) in per_head.iter().enumerate() {
        for gg in 0..g {
            for r in 0..a {
                for k in 0..d {
                    v[(gg * d + k) * h * a + hh * a + r] = p[[gg, r, k]];
                }
            }
        }
    }
    Ok(Tensor::from_vec(v, (g, d, h * a), device)?.to_dtype(dtype)?)
}

/// `[W, a]` per head -> `[W, H*a]`.
fn stack_bias(per_head: &[&Array2<f64>], device: &Device, dtype: DType) -> Result<Tensor> {
    let (w, a) = per_head[0].dim();
    let h = per_head.len();
    let mut v = vec![0f64; w * h * a];
    for (hh, p) in per_head.iter().enumerate() {
        for i in 0..w {
            for r in 0..a {
                v[i * h * a + hh * a + r] = p[[i, r]];
            }
        }
    }
    Ok(Tensor::from_vec(v, (w, h * a), device)?.to_dtype(dtype)?)
}

impl TensorParams {
    /// Trainable parameters for `heads` heads from a candle-nn `VarBuilder` (names `gate_k.z`,
    /// `gate_k.b`, `gate_v.z`, `gate_v.b`, `proj_k`, `proj_v`, `gamma`): projections and gate
    /// weights `N(0, 1/d)`, biases 0 (every offset starts equal), RMSNorm weights 1.
    pub fn init(spec: &KernelSpec, dims: KernelDims, heads: usize, vb: &candle_nn::VarBuilder) -> Result<Self> {
        use candle_nn::Init;
        spec.validate_for(dims.d_head)?;
        let (g, w) = (spec.num_groups(), spec.geometry.window());
        let (d, dh) = (dims.d_model, dims.d_head);
        let dg = spec.gate_width(dh);
        let weights = Init::Randn { mean: 0.0, stdev: 1.0 / (d as f64).sqrt() };
        let gate = |name: &str| -> Result<TensorGate> {
            Ok(TensorGate {
                z: vb.get_with_hints((g, d, heads * dg), &format!("{name}.z"), weights)?,
                b: vb.get_with_hints((w, heads * dg), &format!("{name}.b"), Init::Const(0.0))?,
            })
        };
        Ok(TensorParams {
            gate_k: if dg > 0 { Some(gate("gate_k")?) } else { None },
            gate_v: if spec.has_value_gate() { Some(gate("gate_v")?) } else { None },
            proj_k: vb.get_with_hints((g, d, heads * dh), "proj_k", weights)?,
            proj_v: if spec.shared_kv {
                None
            } else {
                Some(vb.get_with_hints((g, d, heads * dh), "proj_v", weights)?)
            },
            gamma: if spec.rms_norm { Some(vb.get_with_hints((heads, dh), "gamma", Init::Const(1.0))?) } else { None },
        })
    }

    /// Stacks per-head f64 parameters (all validated against the same spec and dims).
    pub fn from_heads(
        spec: &KernelSpec,
        dims: KernelDims,
        heads: &[KernelParams<f64>],
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        if heads.is_empty() {
            return Err(Error::invalid("heads", "need at least one head"));
        }
        for p in heads {
            p.validate(spec, dims)?;
        }
        let gate =
            |pick: &dyn Fn(&KernelParams<f64>) -> Option<&super::GateParams<f64>>| -> Result<Option<TensorGate>> {
                if pick(&heads[0]).is_none() {
                    return Ok(None);
                }
                let zs: Vec<&Array3<f64>> = heads.iter().map(|p| &pick(p).expect("validated").z).collect();
                let bs: Vec<&Array2<f64>> = heads.iter().map(|p| &pick(p).expect("validated").b).collect();
                Ok(Some(TensorGate { z: stack_heads(&zs, device, dtype)?, b: stack_bias(&bs, device, dtype)? }))
            };
        let proj_k = stack_heads(&heads.iter().map(|p| &p.proj_k).collect::<Vec<_>>(), device, dtype)?;
        let proj_v = match &heads[0].proj_v {
            None => None,
            Some(_) => Some(stack_heads(
                &heads.iter().map(|p| p.proj_v.as_ref().expect("validated")).collect::<Vec<_>>(),
                device,
                dtype,
            )?),
        };
        let gamma = match &heads[0].gamma {
            None => None,
            Some(_) => {
                let v: Vec<f64> =
                    heads.iter().flat_map(|p| p.gamma.as_ref().expect("validated").iter().copied()).collect();
                Some(Tensor::from_vec(v, (heads.len(), dims.d_head), device)?.to_dtype(dtype)?)
            }
        };
        Ok(TensorParams {
            gate_k: gate(&|p| p.gate_k.as_ref())?,
            gate_v: gate(&|p| p.gate_v.as_ref())?,
            proj_k,
            proj_v,
            gamma,
        })
    }
}

/// Output of the tensor kernel for `B` sequences and `H` heads.
#[derive(Clone, Debug)]
pub struct TensorCompressed {
    /// Keys `[B, H, n, d_h]`.
    pub keys: Tensor,
    /// Values `[B, H, n, d_h]`.
    pub values: Tensor,
    /// Pooled keys before post-processing `[B, H, n, d_h]`.
    pub pooled_k: Tensor,
    /// Pooled values `[B, H, n, d_h]`.
    pub pooled_v: Tensor,
    /// Key gate weights `[B, H, n, W, c]`.
    pub gate_k: Tensor,
    /// Value gate weights `[B, H, n, W, c]`.
    pub gate_v: Tensor,
    /// Entry positions.
    pub positions: Vec<usize>,
}

impl TensorCompressed {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The entries of sequence `b`, head `h`, converted to f64 arrays.
    pub fn to_compressed(&self, b: usize, h: usize) -> Result<Compressed<f64>> {
        let two = |t: &Tensor| -> Result<Array2<f64>> {
            let t = t.get(b)?.get(h)?.to_dtype(DType::F64)?;
            let (n, c) = t.dims2()?;
            Ok(Array2::from_shape_vec((n, c), t.flatten_all()?.to_vec1::<f64>()?).expect("shape"))
        };
        let three = |t: &Tensor| -> Result<Array3<f64>> {
            let t = t.get(b)?.get(h)?.to_dtype(DType::F64)?;
            let (n, w, c) = t.dims3()?;
            Ok(Array3::from_shape_vec((n, w, c), t.flatten_all()?.to_vec1::<f64>()?).expect("shape"))
        };
        Ok(Compressed {
            keys: two(&self.keys)?,
            values: two(&self.values)?,
            pooled_k: two(&self.pooled_k)?,
            pooled_v: two(&self.pooled_v)?,
            gate_k: three(&self.gate_k)?,
            gate_v: three(&self.gate_v)?,
            positions: self.positions.clone(),
        })
    }

    fn cat(parts: &[TensorCompressed]) -> Result<TensorCompressed> {
        let cat = |f: &dyn Fn(&TensorCompressed) -> &Tensor| -> Result<Tensor> {
            Ok(Tensor::cat(&parts.iter().map(f).collect::<Vec<_>>(), 2)?)
        };
        Ok(TensorCompressed {
            keys: cat(&|p| &p.keys)?,
            values: cat(&|p| &p.values)?,
            pooled_k: cat(&|p| &p.pooled_k)?,
            pooled_v: cat(&|p| &p.pooled_v)?,
            gate_k: cat(&|p| &p.gate_k)?,
            gate_v: cat(&|p| &p.gate_v)?,
            positions: parts.iter().flat_map(|p| p.positions.iter().copied()).collect(),
        })
    }
}

/// A kernel spec bound to dims, a head count, a device and a dtype.
#[derive(Clone, Debug)]
pub struct TensorKernel {
    spec: KernelSpec,
    dims: KernelDims,
    heads: usize,
    device: Device,
    dtype: DType,
    group_index: Tensor,
    fused: bool,
}

impl TensorParams {
    /// Whether any parameter takes part in automatic differentiation.
    pub fn requires_grad(&self) -> bool {
        let gate = |g: &Option<TensorGate>| g.as_ref().is_some_and(|g| g.z.track_op() || g.b.track_op());
        gate(&self.gate_k)
            || gate(&self.gate_v)
            || self.proj_k.track_op()
            || self.proj_v.as_ref().is_some_and(|t| t.track_op())
            || self.gamma.as_ref().is_some_and(|t| t.track_op())
    }
}

impl TensorKernel {
    /// A kernel for `heads` heads on `device` in `dtype` (f32, f16, bf16 or f64).
    pub fn new(spec: &KernelSpec, dims: KernelDims, heads: usize, device: &Device, dtype: DType) -> Result<Self> {
        spec.validate()?;
        if heads == 0 {
            return Err(Error::invalid("heads", "must be at least 1, got 0"));
        }
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
            return Err(Error::invalid("dtype", format!("must be f32, f16, bf16 or f64, got {dtype:?}")));
        }
        let w = spec.geometry.window();
        let gi: Vec<u32> = (0..w).map(|i| spec.group_of(i) as u32).collect();
        let group_index = Tensor::from_vec(gi, w, device)?;
        Ok(TensorKernel { spec: spec.clone(), dims, heads, device: device.clone(), dtype, group_index, fused: true })
    }

    /// Enables or disables the fused CPU forward ([`super::fused`]), used by default for f32
    /// on the CPU when nothing requires a gradient. Disabling it forces the primitive-op path.
    pub fn with_fused(mut self, fused: bool) -> Self {
        self.fused = fused;
        self
    }

    /// Whether a call with these inputs takes the fused CPU path.
    pub fn uses_fused(&self, params: &TensorParams, x: &Tensor) -> bool {
        self.fused && self.device.is_cpu() && self.dtype == DType::F32 && !x.track_op() && !params.requires_grad()
    }

    /// The spec.
    pub fn spec(&self) -> &KernelSpec {
        &self.spec
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Compresses `x: [B, T, d]` one-shot.
    pub fn compress(&self, params: &TensorParams, x: &Tensor) -> Result<TensorCompressed> {
        let (_, t_len, _) = self.check_x(x)?;
        let g = &self.spec.geometry;
        let n = g.num_windows(t_len);
        let slots = g.slot_tokens(t_len);
        let positions = (0..n).map(|j| self.entry_position(j)).collect();
        if self.uses_fused(params, x) {
            return super::fused::compress(&self.spec, self.heads, self.dims.d_head, params, x, positions);
        }
        self.compress_slots(params, x, &slots, positions)
    }

    fn entry_position(&self, j: usize) -> usize {
        self.spec.entry_position(j)
    }

    fn check_x(&self, x: &Tensor) -> Result<(usize, usize, usize)> {
        let (b, t, d) = x.dims3().map_err(|_| Error::shape("kernel input", "[B, T, d]", format!("{:?}", x.dims())))?;
        if d != self.dims.d_model {
            return Err(Error::shape(
                "kernel input",
                format!("[B, T, {}]", self.dims.d_model),
                format!("{:?}", x.dims()),
            ));
        }
        if x.dtype() != self.dtype {
            return Err(Error::invalid(
                "kernel input dtype",
                format!("expected {:?}, got {:?}", self.dtype, x.dtype()),
            ));
        }
        Ok((b, t, d))
    }

    /// The core: compress the windows whose slots index rows of `x` (`None` = empty slot).
    fn compress_slots(
        &self,
        params: &TensorParams,
        x: &Tensor,
        slots: &[Option<usize>],
        positions: Vec<usize>,
    ) -> Result<TensorCompressed> {
        let (b, l, d) = x.dims3()?;
        let (w, h, dh) = (self.spec.geometry.window(), self.heads, self.dims.d_head);
        let n = slots.len() / w;
        let c = self.spec.gate_width(dh).max(1);
        let dev = &self.device;
        if n == 0 {
            let e4 = Tensor::zeros((b, h, 0, dh), self.dtype, dev)?;
            let e5 = Tensor::zeros((b, h, 0, w, c), self.dtype, dev)?;
            return Ok(TensorCompressed {
                keys: e4.clone(),
                values: e4.clone(),
                pooled_k: e4.clone(),
                pooled_v: e4,
                gate_k: e5.clone(),
                gate_v: e5,
                positions,
            });
        }
        // 1. gather slots: [W, B*n, d]
        let xp = Tensor::cat(&[x, &Tensor::zeros((b, 1, d), self.dtype, dev)?], 1)?;
        let idx: Vec<u32> = slots.iter().map(|s| s.unwrap_or(l) as u32).collect();
        let idx = Tensor::from_vec(idx, n * w, dev)?;
        let xw = xp.index_select(&idx, 1)?.reshape((b, n, w, d))?.permute((2, 0, 1, 3))?.contiguous()?.reshape((
            w,
            b * n,
            d,
        ))?;
        // Validity per (slot, window), replicated over the batch: [W, B*n, 1].
        let mut valid = vec![0f32; w * b * n];
        let mut counts = vec![0f32; n];
        for j in 0..n {
            for i in 0..w {
                if slots[j * w + i].is_some() {
                    counts[j] += 1.0;
                }
            }
        }
        for i in 0..w {
            for bb in 0..b {
                for j in 0..n {
                    if slots[j * w + i].is_some() {
                        valid[(i * b + bb) * n + j] = 1.0;
                    }
                }
            }
        }
        let valid_t = Tensor::from_vec(valid.clone(), (w, b * n, 1), dev)?;
        // 2-3. gates
        let uniform = || -> Result<Tensor> {
            let u: Vec<f32> = (0..w * b * n).map(|k| if valid[k] > 0.0 { 1.0 / counts[k % n] } else { 0.0 }).collect();
            Ok(Tensor::from_vec(u, (w, b * n, 1), dev)?
                .to_dtype(self.dtype)?
                .broadcast_as((w, b * n, h))?
                .contiguous()?)
        };
        let softmax_gate = |gate: &TensorGate| -> Result<Tensor> {
            let z = gate.z.index_select(&self.group_index, 0)?; // [W, d, H*dg]
            let s = xw.matmul(&z)?.broadcast_add(&gate.b.unsqueeze(1)?)?;
            // -inf on empty slots: log(valid) in f32, then cast.
            let mask = valid_t.log()?.to_dtype(self.dtype)?;
            let s = s.broadcast_add(&mask)?;
            let m = s.max_keepdim(0)?.detach();
            let e = s.broadcast_sub(&m)?.exp()?;
            Ok(e.broadcast_div(&e.sum_keepdim(0)?)?)
        };
        let gate_k = match (&self.spec.gate, &params.gate_k) {
            (GateKind::Uniform, _) | (_, None) => uniform()?,
            (_, Some(g)) => softmax_gate(g)?,
        };
        let gate_v = match (&self.spec.gate, &params.gate_v) {
            (GateKind::Uniform, _) => gate_k.clone(),
            (_, Some(g)) if self.spec.has_value_gate() => softmax_gate(g)?,
            _ => gate_k.clone(),
        };
        let pool = |proj: &Tensor, a: &Tensor| -> Result<Tensor> {
            let p = proj.index_select(&self.group_index, 0)?; // [W, d, H*dh]
            let vals = xw.matmul(&p)?; // [W, B*n, H*dh]
            let pooled = match self.spec.gate {
                GateKind::Vector => (a * vals)?.sum(0)?,
                _ => a.reshape((w, b * n, h, 1))?.broadcast_mul(&vals.reshape((w, b * n, h, dh))?)?.sum(0)?,
            };
            Ok(pooled.reshape((b, n, h, dh))?.permute((0, 2, 1, 3))?.contiguous()?)
        };
        let pooled_k = pool(&params.proj_k, &gate_k)?;
        let pooled_v = match &params.proj_v {
            Some(pv) => pool(pv, &gate_v)?,
            None => pooled_k.clone(),
        };
        let keys = self.post(params, &pooled_k, &positions)?;
        let values = if self.spec.shared_kv { keys.clone() } else { self.post(params, &pooled_v, &positions)? };
        let gates_out =
            |a: &Tensor| -> Result<Tensor> { Ok(a.reshape((w, b, n, h, c))?.permute((1, 3, 2, 0, 4))?.contiguous()?) };
        Ok(TensorCompressed {
            keys,
            values,
            pooled_k,
            pooled_v,
            gate_k: gates_out(&gate_k)?,
            gate_v: gates_out(&gate_v)?,
            positions,
        })
    }

    /// RMSNorm then partial RoPE on `u: [B, H, n, d_h]`.
    fn post(&self, params: &TensorParams, u: &Tensor, positions: &[usize]) -> Result<Tensor> {
        let (_, h, _, dh) = u.dims4()?;
        let mut u = u.clone();
        if let (true, Some(gamma)) = (self.spec.rms_norm, &params.gamma) {
            let ms = u.sqr()?.mean_keepdim(D::Minus1)?;
            let inv = (ms + self.spec.rms_norm_eps)?.sqrt()?.recip()?;
            u = u.broadcast_mul(&inv)?.broadcast_mul(&gamma.reshape((1, h, 1, dh))?)?;
        }
        if let Some(rs) = &self.spec.rope {
            let r = rs.rotated_channels(dh);
            if r > 0 {
                u = rope_tensor(&u, &rs.inv_frequencies(r), positions, &self.device)?;
            }
        }
        Ok(u)
    }
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

/// Chunked tensor compression with carried state (the last `W` input rows); entries for a
/// prefix never change when tokens are appended. [`TensorStream::reset`] starts a new sequence.
#[derive(Debug)]
pub struct TensorStream<'a> {
    kernel: &'a TensorKernel,
    params: &'a TensorParams,
    buffer: Option<Tensor>,
    buffer_start: usize,
    next_pos: usize,
    next_window: usize,
}

impl<'a> TensorStream<'a> {
    /// A stream at the start of a sequence.
    pub fn new(kernel: &'a TensorKernel, params: &'a TensorParams) -> Self {
        TensorStream { kernel, params, buffer: None, buffer_start: 0, next_pos: 0, next_window: 0 }
    }

    /// Starts a new sequence.
    pub fn reset(&mut self) {
        self.buffer = None;
        self.buffer_start = 0;
        self.next_pos = 0;
        self.next_window = 0;
    }

    /// Appends `x: [B, c, d]` and returns the entries it completes (possibly none).
    pub fn push(&mut self, x: &Tensor) -> Result<TensorCompressed> {
        let (_, c, _) = self.kernel.check_x(x)?;
        let ext = match &self.buffer {
            Some(buf) => Tensor::cat(&[buf, x], 1)?,
            None => x.clone(),
        };
        let g = self.kernel.spec.geometry;
        let end_pos = self.next_pos + c; // exclusive
        let mut slots = Vec::new();
        let mut positions = Vec::new();
        while g.end(self.next_window) < end_pos {
            let j = self.next_window;
            for i in 0..g.window() {
                slots.push(g.token_at(j, i).map(|t| t - self.buffer_start));
            }
            positions.push(self.kernel.entry_position(j));
            self.next_window += 1;
        }
        let out = self.kernel.compress_slots(self.params, &ext, &slots, positions)?;
        self.next_pos = end_pos;
        let keep_from = (g.start(self.next_window).max(0) as usize).min(end_pos);
        let drop = keep_from - self.buffer_start;
        self.buffer = Some(ext.narrow(1, drop, end_pos - keep_from)?);
        self.buffer_start = keep_from;
        Ok(out)
    }

    /// Streams `x: [B, T, d]` in chunks of the given sizes (the last chunk takes the rest).
    pub fn run(mut self, x: &Tensor, chunks: &[usize]) -> Result<TensorCompressed> {
        let (_, t_len, _) = self.kernel.check_x(x)?;
        let mut parts = vec![self.kernel.compress_slots(self.params, x, &[], Vec::new())?];
        let mut at = 0;
        let mut sizes = chunks.iter().copied().filter(|&c| c > 0);
        while at < t_len {
            let c = sizes.next().unwrap_or(t_len - at).min(t_len - at);
            parts.push(self.push(&x.narrow(1, at, c)?)?);
            at += c;
        }
        TensorCompressed::cat(&parts)
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

/// Softmax over the last axis from primitives (differentiable; the max is detached, which
/// leaves the value and the gradient unchanged).
pub fn softmax_last(s: &Tensor) -> Result<Tensor> {
    let m = s.max_keepdim(D::Minus1)?.detach();
    let e = s.broadcast_sub(&m)?.exp()?;
    Ok(e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?)
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
/// twin of [`super::attention::compressed_attention`].
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
    let local = additive_mask(t_len, t_len, |qq, t| t <= qq && t + local_window > qq, dev, dtype)?;
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
