//! Parameters and outputs of the tensor kernel in the tensor layout (heads stacked on the last
//! axis), shared by the primitive-op path ([`super`]) and the fast CPU forward
//! ([`super::fast`]).

use crate::kernel::params::{GateParams, KernelParams};
use crate::kernel::spec::{KernelDims, KernelSpec};
use crate::kernel::Compressed;
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use ndarray::{Array2, Array3};

/// Gate parameters of one branch for `H` heads: `z: [G, d, H*d_g]`, `b: [W, H*d_g]`.
#[derive(Clone, Debug)]
pub struct TensorGate {
    /// Content weights, transposed and heads concatenated on the last axis.
    pub z: Tensor,
    /// Per-offset biases; a constant zero tensor (no parameter) when the spec has none
    /// (`gate_bias: false`), so that adding it to a logit is exact.
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
    /// `gate_k.b`, `gate_v.z`, `gate_v.b`, `proj_k`, `proj_v`, `gamma`: the pieces of
    /// [`crate::kernel::params::ParamLayout`]): projections and gate weights `N(0, 1/d)`, biases
    /// 0 (every offset starts equal), RMSNorm weights 1. A spec without gate biases
    /// (`gate_bias: false`) registers no `.b`: its biases are constant zeros, not trained.
    pub fn init(spec: &KernelSpec, dims: KernelDims, heads: usize, vb: &candle_nn::VarBuilder) -> Result<Self> {
        use candle_nn::Init;
        spec.validate_for(dims.d_head)?;
        let (g, w) = (spec.num_groups(), spec.geometry.window());
        let (d, dh) = (dims.d_model, dims.d_head);
        let dg = spec.gate_width(dh);
        let weights = Init::Randn { mean: 0.0, stdev: 1.0 / (d as f64).sqrt() };
        let gate = |name: &str| -> Result<TensorGate> {
            let b = if spec.has_gate_bias() {
                vb.get_with_hints((w, heads * dg), &format!("{name}.b"), Init::Const(0.0))?
            } else {
                Tensor::zeros((w, heads * dg), vb.dtype(), vb.device())?
            };
            Ok(TensorGate { z: vb.get_with_hints((g, d, heads * dg), &format!("{name}.z"), weights)?, b })
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
        let gate = |pick: &dyn Fn(&KernelParams<f64>) -> Option<&GateParams<f64>>| -> Result<Option<TensorGate>> {
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

impl TensorParams {
    /// The parameters of head `h` of `heads` stacked ones, as a one-head [`TensorParams`]
    /// (contiguous copies of the head's columns: gradients flow back to the stacked tensors).
    /// What a model whose KV heads sit on different grids compresses each head with.
    pub fn head(&self, h: usize, heads: usize) -> Result<Self> {
        if h >= heads {
            return Err(Error::invalid("head", format!("must be below the head count ({heads}), got {h}")));
        }
        let last = |t: &Tensor| -> Result<Tensor> {
            let axis = t.rank() - 1;
            let width = t.dim(axis)? / heads;
            Ok(t.narrow(axis, h * width, width)?.contiguous()?)
        };
        let gate = |g: &Option<TensorGate>| -> Result<Option<TensorGate>> {
            g.as_ref().map(|g| Ok(TensorGate { z: last(&g.z)?, b: last(&g.b)? })).transpose()
        };
        Ok(TensorParams {
            gate_k: gate(&self.gate_k)?,
            gate_v: gate(&self.gate_v)?,
            proj_k: last(&self.proj_k)?,
            proj_v: self.proj_v.as_ref().map(last).transpose()?,
            gamma: self.gamma.as_ref().map(|g| Ok::<_, Error>(g.narrow(0, h, 1)?.contiguous()?)).transpose()?,
        })
    }

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
}
