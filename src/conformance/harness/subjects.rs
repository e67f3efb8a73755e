//! The kernels the harness checks: the reference (optionally mutated) and the candle
//! implementation in a chosen dtype and device.

use super::subject::KernelUnderTest;
use crate::conformance::mutants::{self, Mutant};
use crate::kernel::attention::{compressed_attention, AttentionInputs, AttentionOut};
use crate::kernel::params::KernelParams;
use crate::kernel::reference;
use crate::kernel::spec::{KernelDims, KernelSpec};
use crate::kernel::tensor::{self, TensorKernel, TensorParams, TensorStream};
use crate::kernel::Compressed;
use crate::Result;
use candle_core::{DType, Device, Tensor};
use ndarray::{Array2, ArrayView2};

/// The f64 reference, or one of its deliberate mutants.
#[derive(Clone, Debug)]
pub struct ReferenceSubject {
    spec: KernelSpec,
    mutant: Option<Mutant>,
}

impl ReferenceSubject {
    /// The correct reference for a spec.
    pub fn new(spec: &KernelSpec) -> Self {
        ReferenceSubject { spec: spec.clone(), mutant: None }
    }

    /// A deliberately broken reference (harness self-test).
    #[doc(hidden)]
    pub fn mutant(spec: &KernelSpec, mutant: Mutant) -> Self {
        ReferenceSubject { spec: spec.clone(), mutant: Some(mutant) }
    }
}

impl KernelUnderTest for ReferenceSubject {
    fn label(&self) -> String {
        match self.mutant {
            Some(m) => format!("mutant:{}", m.name()),
            None => "reference-f64".into(),
        }
    }

    fn spec(&self) -> &KernelSpec {
        &self.spec
    }

    fn dtype(&self) -> DType {
        DType::F64
    }

    fn is_reference(&self) -> bool {
        self.mutant.is_none()
    }

    fn with_spec(&self, spec: KernelSpec) -> Box<dyn KernelUnderTest> {
        Box::new(ReferenceSubject { spec, mutant: self.mutant })
    }

    fn compress_many(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        xs: &[Array2<f64>],
    ) -> Result<Vec<Compressed<f64>>> {
        xs.iter().map(|x| mutants::compress(self.mutant, &self.spec, dims, params, x.view())).collect()
    }

    fn stream(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        seqs: &[(ArrayView2<f64>, Vec<usize>)],
    ) -> Result<Vec<Compressed<f64>>> {
        if self.mutant.is_none() {
            let mut stream = reference::ReferenceStream::new(&self.spec, dims, params)?;
            let mut all = Vec::new();
            for (x, chunks) in seqs {
                stream.reset();
                let mut outs = Vec::new();
                for (a, b) in chunk_bounds(x.nrows(), chunks) {
                    outs.extend(stream.push(x.slice(ndarray::s![a..b, ..]))?);
                }
                all.push(reference::assemble(&self.spec, dims, outs));
            }
            return Ok(all);
        }
        // A mutant has no streaming path of its own.
        stream_by_prefixes(self, dims, params, seqs)
    }

    fn attend(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        x: ArrayView2<f64>,
        inputs: &AttentionInputs<f64>,
    ) -> Result<AttentionOut<f64>> {
        match self.mutant {
            Some(m) => m.attend(&self.spec, dims, params, x, inputs),
            None => {
                let c = self.compress(dims, params, x)?;
                compressed_attention(&self.spec.geometry, self.spec.visibility, c.keys.view(), c.values.view(), inputs)
            }
        }
    }
}

/// Streams a kernel that has no streaming path of its own the way a caller without state
/// would: recompute each prefix (up to the end of every chunk) and keep the entries it newly
/// completes (what [`KernelUnderTest::stream`] returns, for mutants and external kernels).
pub fn stream_by_prefixes(
    subject: &dyn KernelUnderTest,
    dims: KernelDims,
    params: &KernelParams<f64>,
    seqs: &[(ArrayView2<f64>, Vec<usize>)],
) -> Result<Vec<Compressed<f64>>> {
    seqs.iter()
        .map(|(x, chunks)| {
            let mut done: Option<Compressed<f64>> = None;
            let mut parts: Vec<Compressed<f64>> = Vec::new();
            for (_, b) in chunk_bounds(x.nrows(), chunks) {
                let c = subject.compress(dims, params, x.slice(ndarray::s![..b, ..]))?;
                let have = done.as_ref().map_or(0, |d| d.len());
                parts.push(c.slice(have.min(c.len()), c.len()));
                done = Some(c);
            }
            Ok(concat_entries(subject.spec(), dims, &parts))
        })
        .collect()
}

/// `[start, end)` of each chunk of a `t_len`-token sequence (the last chunk takes the rest).
pub fn chunk_bounds(t_len: usize, chunks: &[usize]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut sizes = chunks.iter().copied().filter(|&c| c > 0);
    while at < t_len {
        let c = sizes.next().unwrap_or(t_len - at).min(t_len - at);
        out.push((at, at + c));
        at += c;
    }
    out
}

fn concat_entries(spec: &KernelSpec, dims: KernelDims, parts: &[Compressed<f64>]) -> Compressed<f64> {
    use ndarray::{concatenate, Axis};
    let c = spec.gate_width(dims.d_head).max(1);
    let w = spec.geometry.window();
    let cat2 = |f: &dyn Fn(&Compressed<f64>) -> ndarray::ArrayView2<f64>| {
        let views: Vec<_> = parts.iter().map(f).collect();
        if views.is_empty() {
            Array2::zeros((0, dims.d_head))
        } else {
            concatenate(Axis(0), &views).expect("same widths")
        }
    };
    let cat3 = |f: &dyn Fn(&Compressed<f64>) -> ndarray::ArrayView3<f64>| {
        let views: Vec<_> = parts.iter().map(f).collect();
        if views.is_empty() {
            ndarray::Array3::zeros((0, w, c))
        } else {
            concatenate(Axis(0), &views).expect("same widths")
        }
    };
    Compressed {
        keys: cat2(&|p| p.keys.view()),
        values: cat2(&|p| p.values.view()),
        pooled_k: cat2(&|p| p.pooled_k.view()),
        pooled_v: cat2(&|p| p.pooled_v.view()),
        gate_k: cat3(&|p| p.gate_k.view()),
        gate_v: cat3(&|p| p.gate_v.view()),
        positions: parts.iter().flat_map(|p| p.positions.iter().copied()).collect(),
    }
}

/// The candle implementation in one dtype on one device: its differentiable primitive-op path
/// (the one training differentiates through), on every device and dtype. The fused CPU forward
/// is another subject ([`super::fast_subject::FastSubject`]).
#[derive(Clone, Debug)]
pub struct TensorSubject {
    spec: KernelSpec,
    dtype: DType,
    device: Device,
}

impl TensorSubject {
    /// The candle kernel for a spec, in `dtype` on `device`.
    pub fn new(spec: &KernelSpec, dtype: DType, device: &Device) -> Self {
        TensorSubject { spec: spec.clone(), dtype, device: device.clone() }
    }

    fn kernel(&self, dims: KernelDims, params: &KernelParams<f64>) -> Result<(TensorKernel, TensorParams)> {
        let k = TensorKernel::new(&self.spec, dims, 1, &self.device, self.dtype)?;
        let p = TensorParams::from_heads(&self.spec, dims, std::slice::from_ref(params), &self.device, self.dtype)?;
        Ok((k, p))
    }

    fn tensor(&self, xs: &[ArrayView2<f64>], d: usize) -> Result<Tensor> {
        let t = xs.first().map_or(0, |x| x.nrows());
        let v: Vec<f64> = xs.iter().flat_map(|x| x.iter().copied()).collect();
        Ok(Tensor::from_vec(v, (xs.len(), t, d), &self.device)?.to_dtype(self.dtype)?)
    }

    fn tensor2(&self, a: &Array2<f64>) -> Result<Tensor> {
        let (r, c) = a.dim();
        Ok(Tensor::from_vec(a.iter().copied().collect::<Vec<_>>(), (1, 1, r, c), &self.device)?.to_dtype(self.dtype)?)
    }
}

fn tensor_to_array2(t: &Tensor) -> Result<Array2<f64>> {
    let t = t.to_dtype(DType::F64)?;
    let (r, c) = t.dims2()?;
    Ok(Array2::from_shape_vec((r, c), t.flatten_all()?.to_vec1::<f64>()?).expect("shape"))
}

impl KernelUnderTest for TensorSubject {
    fn label(&self) -> String {
        let dtype = format!("{:?}", self.dtype).to_lowercase();
        let device = if self.device.is_cpu() { "cpu" } else { "gpu" };
        format!("candle-autodiff-{dtype}-{device}")
    }

    fn spec(&self) -> &KernelSpec {
        &self.spec
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn with_spec(&self, spec: KernelSpec) -> Box<dyn KernelUnderTest> {
        Box::new(TensorSubject { spec, dtype: self.dtype, device: self.device.clone() })
    }

    fn compress_many(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        xs: &[Array2<f64>],
    ) -> Result<Vec<Compressed<f64>>> {
        reference::check_input(dims, xs.first().map(|x| x.view()).unwrap_or(Array2::zeros((0, dims.d_model)).view()))?;
        let (k, p) = self.kernel(dims, params)?;
        let views: Vec<_> = xs.iter().map(|x| x.view()).collect();
        let out = k.compress(&p, &self.tensor(&views, dims.d_model)?)?;
        (0..xs.len()).map(|b| out.to_compressed(b, 0)).collect()
    }

    fn stream(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        seqs: &[(ArrayView2<f64>, Vec<usize>)],
    ) -> Result<Vec<Compressed<f64>>> {
        let (k, p) = self.kernel(dims, params)?;
        let mut stream = TensorStream::new(&k, &p);
        let mut all = Vec::new();
        for (x, chunks) in seqs {
            stream.reset();
            let xt = self.tensor(&[*x], dims.d_model)?;
            let mut parts = vec![];
            for (a, b) in chunk_bounds(x.nrows(), chunks) {
                parts.push(stream.push(&xt.narrow(1, a, b - a)?)?);
            }
            let mut outs = Vec::new();
            for part in &parts {
                outs.push(part.to_compressed(0, 0)?);
            }
            all.push(concat_entries(&self.spec, dims, &outs));
        }
        Ok(all)
    }

    fn attend(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        x: ArrayView2<f64>,
        inputs: &AttentionInputs<f64>,
    ) -> Result<AttentionOut<f64>> {
        let (k, p) = self.kernel(dims, params)?;
        let c = k.compress(&p, &self.tensor(&[x], dims.d_model)?)?;
        let att = tensor::compressed_attention(
            &self.spec.geometry,
            self.spec.visibility,
            inputs.local_window,
            &self.tensor2(&inputs.queries)?,
            &self.tensor2(&inputs.raw_keys)?,
            &self.tensor2(&inputs.raw_values)?,
            &c.keys,
            &c.values,
        )?;
        Ok(AttentionOut {
            output: tensor_to_array2(&att.output.get(0)?.get(0)?)?,
            entry_weights: tensor_to_array2(&att.entry_weights.get(0)?.get(0)?)?,
        })
    }
}
