//! The candle implementation: batched over sequences and heads, device-generic, in f32, f16 or
//! bf16, built only from differentiable primitives (candle-nn's fused softmax, RMSNorm and RoPE
//! drop gradients silently; see `theory/kernels.md`, "Implementations").
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

pub mod fast;
pub mod ops;
pub mod params;

pub use ops::{compressed_attention, repeat_kv, rms_norm, rope_tensor, softmax, softmax_last, TensorAttention};
pub use params::{TensorCompressed, TensorGate, TensorParams};

use crate::kernel::spec::{GateKind, KernelDims, KernelSpec};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};

/// A kernel spec bound to dims, a head count, a device and a dtype.
#[derive(Clone, Debug)]
pub struct TensorKernel {
    spec: KernelSpec,
    dims: KernelDims,
    heads: usize,
    device: Device,
    dtype: DType,
    group_index: Tensor,
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
        Ok(TensorKernel { spec: spec.clone(), dims, heads, device: device.clone(), dtype, group_index })
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

    /// Compresses `x: [B, T, d]` one-shot, always through candle's differentiable primitive ops
    /// (the path training differentiates, on any device and dtype). The fused no-gradient CPU
    /// forward is [`fast::FastKernel`], which a caller that wants it builds: nothing switches
    /// paths behind the caller's back.
    pub fn compress(&self, params: &TensorParams, x: &Tensor) -> Result<TensorCompressed> {
        let (_, t_len, _) = self.check_x(x)?;
        let g = &self.spec.geometry;
        let n = g.num_windows(t_len);
        let slots = g.slot_tokens(t_len);
        let positions = (0..n).map(|j| self.spec.entry_position(j)).collect();
        self.compress_slots(params, x, &slots, positions)
    }

    /// [`TensorKernel::compress`] with one window slot's gated contribution replaced
    /// (`knock`, `theory/phase-lab.md` §8.9's offset knockout) and, when `capture`, every
    /// slot's contributions returned. Without `knock` the entries equal `compress`'s exactly.
    pub fn compress_probe(
        &self,
        params: &TensorParams,
        x: &Tensor,
        knock: Option<&SlotKnock>,
        capture: bool,
    ) -> Result<(TensorCompressed, Option<SlotContributions>)> {
        let (_, t_len, _) = self.check_x(x)?;
        let g = &self.spec.geometry;
        let n = g.num_windows(t_len);
        let slots = g.slot_tokens(t_len);
        let positions = (0..n).map(|j| self.spec.entry_position(j)).collect();
        if knock.is_none() && !capture {
            return Ok((self.compress_slots(params, x, &slots, positions)?, None));
        }
        self.compress_slots_probe(params, x, &slots, positions, knock, capture)
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
        Ok(self.compress_slots_probe(params, x, slots, positions, None, false)?.0)
    }

    /// The compressor on explicit window slots; with a probe (`knock` or `capture`) the pooled
    /// sums are formed from the per-slot contributions `a_i * (C_i x_i)`, otherwise directly
    /// (the ops of training and of every kernel check, unchanged).
    fn compress_slots_probe(
        &self,
        params: &TensorParams,
        x: &Tensor,
        slots: &[Option<usize>],
        positions: Vec<usize>,
        knock: Option<&SlotKnock>,
        capture: bool,
    ) -> Result<(TensorCompressed, Option<SlotContributions>)> {
        let (b, l, d) = x.dims3()?;
        let (w, h, dh) = (self.spec.geometry.window(), self.heads, self.dims.d_head);
        let n = slots.len() / w;
        let c = self.spec.gate_width(dh).max(1);
        let dev = &self.device;
        if n == 0 {
            let e4 = Tensor::zeros((b, h, 0, dh), self.dtype, dev)?;
            let e5 = Tensor::zeros((b, h, 0, w, c), self.dtype, dev)?;
            let contributions = capture.then(|| {
                let e = Tensor::zeros((w, b, 0, h * dh), self.dtype, dev)?;
                Ok::<_, crate::Error>(SlotContributions { keys: e.clone(), values: e })
            });
            let compressed = TensorCompressed {
                keys: e4.clone(),
                values: e4.clone(),
                pooled_k: e4.clone(),
                pooled_v: e4,
                gate_k: e5.clone(),
                gate_v: e5,
                positions,
            };
            return Ok((compressed, contributions.transpose()?));
        }
        if let Some(k) = knock {
            k.check(w, (b, n, h * dh), params.proj_v.is_some())?;
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
        // Row `k = (i B + b) n + j` is slot `i` of window `j` of sequence `b`.
        let valid: Vec<f32> =
            (0..w * b * n).map(|k| f32::from(u8::from(slots[k % n * w + k / (b * n)].is_some()))).collect();
        let counts: Vec<f32> = slots.chunks(w).map(|win| win.iter().flatten().count() as f32).collect();
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
            softmax(&s, 0)
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
        // Slot i's gated contribution `a_i * (C_i x_i)`, `[W, B*n, H*dh]`, with the knocked
        // slot's replaced by `by: [B, n, H*dh]`.
        let contribution = |proj: &Tensor, a: &Tensor, by: Option<&Tensor>| -> Result<Tensor> {
            let p = proj.index_select(&self.group_index, 0)?;
            let vals = xw.matmul(&p)?;
            let c = match self.spec.gate {
                GateKind::Vector => (a * vals)?,
                _ => a.reshape((w, b * n, h, 1))?.broadcast_mul(&vals.reshape((w, b * n, h, dh))?)?.reshape((
                    w,
                    b * n,
                    h * dh,
                ))?,
            };
            let (Some(k), Some(by)) = (knock, by) else { return Ok(c) };
            let by = by.to_dtype(self.dtype)?.reshape((1, b * n, h * dh))?;
            let mut parts = Vec::with_capacity(3);
            if k.slot > 0 {
                parts.push(c.narrow(0, 0, k.slot)?);
            }
            parts.push(by);
            if k.slot + 1 < w {
                parts.push(c.narrow(0, k.slot + 1, w - k.slot - 1)?);
            }
            Ok(Tensor::cat(&parts, 0)?)
        };
        let summed = |c: &Tensor| -> Result<Tensor> {
            Ok(c.sum(0)?.reshape((b, n, h, dh))?.permute((0, 2, 1, 3))?.contiguous()?)
        };
        let (pooled_k, pooled_v, contributions) = if knock.is_none() && !capture {
            let pooled_k = pool(&params.proj_k, &gate_k)?;
            let pooled_v = match &params.proj_v {
                Some(pv) => pool(pv, &gate_v)?,
                None => pooled_k.clone(),
            };
            (pooled_k, pooled_v, None)
        } else {
            let ck = contribution(&params.proj_k, &gate_k, knock.map(|k| &k.keys))?;
            let cv = match &params.proj_v {
                Some(pv) => Some(contribution(pv, &gate_v, knock.and_then(|k| k.values.as_ref()))?),
                None => None,
            };
            let pooled_k = summed(&ck)?;
            let pooled_v = match &cv {
                Some(cv) => summed(cv)?,
                None => pooled_k.clone(),
            };
            let slot_layout = |c: &Tensor| -> Result<Tensor> { Ok(c.reshape((w, b, n, h * dh))?) };
            let contributions = if capture {
                let keys = slot_layout(&ck)?;
                let values = match &cv {
                    Some(cv) => slot_layout(cv)?,
                    None => keys.clone(),
                };
                Some(SlotContributions { keys, values })
            } else {
                None
            };
            (pooled_k, pooled_v, contributions)
        };
        let keys = self.post(params, &pooled_k, &positions)?;
        let values = if self.spec.shared_kv { keys.clone() } else { self.post(params, &pooled_v, &positions)? };
        let gates_out =
            |a: &Tensor| -> Result<Tensor> { Ok(a.reshape((w, b, n, h, c))?.permute((1, 3, 2, 0, 4))?.contiguous()?) };
        let compressed = TensorCompressed {
            keys,
            values,
            pooled_k,
            pooled_v,
            gate_k: gates_out(&gate_k)?,
            gate_v: gates_out(&gate_v)?,
            positions,
        };
        Ok((compressed, contributions))
    }

    /// RMSNorm then partial RoPE on `u: [B, H, n, d_h]`.
    fn post(&self, params: &TensorParams, u: &Tensor, positions: &[usize]) -> Result<Tensor> {
        let (_, h, _, dh) = u.dims4()?;
        let mut u = u.clone();
        if let (true, Some(gamma)) = (self.spec.rms_norm, &params.gamma) {
            u = rms_norm(&u, &gamma.reshape((1, h, 1, dh))?, self.spec.rms_norm_eps)?;
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

/// Every window slot's gated contribution to the pooled sums of one compression
/// ([`TensorKernel::compress_probe`]): `[W, B, n, H*d_h]`, slot-major; the pooled key of entry
/// `j` of head `h` is the sum over slots of `keys[i, b, j, h*d_h..(h+1)*d_h]` (before the
/// kernel's norm and RoPE).
#[derive(Clone, Debug)]
pub struct SlotContributions {
    /// Key contributions.
    pub keys: Tensor,
    /// Value contributions (the key contributions when the kernel has no value projection).
    pub values: Tensor,
}

/// One window slot's contribution replaced in every entry (`theory/phase-lab.md` §8.9).
#[derive(Clone, Debug)]
pub struct SlotKnock {
    /// The slot, `0..W`.
    pub slot: usize,
    /// What replaces its key contribution, `[B, n, H*d_h]`.
    pub keys: Tensor,
    /// What replaces its value contribution, `[B, n, H*d_h]` (required when the kernel has a
    /// value projection; ignored otherwise, where values are the pooled keys).
    pub values: Option<Tensor>,
}

impl SlotKnock {
    fn check(&self, window: usize, dims: (usize, usize, usize), has_values: bool) -> Result<()> {
        if self.slot >= window {
            return Err(Error::invalid("slot knockout", format!("slot {} is outside 0..{window}", self.slot)));
        }
        let want = format!("[{}, {}, {}]", dims.0, dims.1, dims.2);
        for (name, t) in [("slot knockout keys", Some(&self.keys)), ("slot knockout values", self.values.as_ref())] {
            match t {
                Some(t) if t.dims3().ok() != Some(dims) => {
                    return Err(Error::shape(name, want.clone(), format!("{:?}", t.dims())))
                }
                None if has_values => return Err(Error::invalid(name, "missing for a kernel with a value projection")),
                _ => {}
            }
        }
        Ok(())
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
            positions.push(self.kernel.spec.entry_position(j));
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
}
