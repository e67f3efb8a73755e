//! The fast CPU kernel as a kernel under test of the invariant harness.

use super::subject::KernelUnderTest;
use super::subjects::stream_by_prefixes;
use crate::kernel::attention::{AttentionInputs, AttentionOut};
use crate::kernel::params::KernelParams;
use crate::kernel::reference;
use crate::kernel::spec::{KernelDims, KernelSpec};
use crate::kernel::tensor::fast::FastKernel;
use crate::kernel::tensor::{self, TensorParams};
use crate::kernel::Compressed;
use crate::Result;
use candle_core::{DType, Device, Tensor};
use ndarray::{Array2, ArrayView2};

/// [`FastKernel`], f32 on the CPU, one head. It has no streaming state of its own: the harness
/// streams it by recomputing prefixes ([`stream_by_prefixes`]), as it does external kernels.
#[derive(Clone, Debug)]
pub struct FastSubject {
    spec: KernelSpec,
}

impl FastSubject {
    /// The fast kernel for a spec.
    pub fn new(spec: &KernelSpec) -> Self {
        FastSubject { spec: spec.clone() }
    }

    fn params(&self, dims: KernelDims, params: &KernelParams<f64>) -> Result<TensorParams> {
        TensorParams::from_heads(&self.spec, dims, std::slice::from_ref(params), &Device::Cpu, DType::F32)
    }
}

fn to_f32(xs: &[ArrayView2<f64>], shape: (usize, usize, usize)) -> Result<Tensor> {
    let v: Vec<f32> = xs.iter().flat_map(|x| x.iter().map(|&a| a as f32)).collect();
    Ok(Tensor::from_vec(v, shape, &Device::Cpu)?)
}

fn to_array2(t: &Tensor) -> Result<Array2<f64>> {
    let t = t.to_dtype(DType::F64)?;
    let (r, c) = t.dims2()?;
    Ok(Array2::from_shape_vec((r, c), t.flatten_all()?.to_vec1::<f64>()?).expect("shape"))
}

impl KernelUnderTest for FastSubject {
    fn label(&self) -> String {
        "fast-f32-cpu".into()
    }

    fn spec(&self) -> &KernelSpec {
        &self.spec
    }

    fn dtype(&self) -> DType {
        DType::F32
    }

    fn with_spec(&self, spec: KernelSpec) -> Box<dyn KernelUnderTest> {
        Box::new(FastSubject { spec })
    }

    fn compress_many(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        xs: &[Array2<f64>],
    ) -> Result<Vec<Compressed<f64>>> {
        let t = xs.first().map_or(0, |x| x.nrows());
        reference::check_input(dims, xs.first().map(|x| x.view()).unwrap_or(Array2::zeros((0, dims.d_model)).view()))?;
        let kernel = FastKernel::new(&self.spec, dims, 1)?;
        let views: Vec<_> = xs.iter().map(|x| x.view()).collect();
        let out = kernel.compress(&self.params(dims, params)?, &to_f32(&views, (xs.len(), t, dims.d_model))?)?;
        (0..xs.len()).map(|b| out.to_compressed(b, 0)).collect()
    }

    fn stream(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        seqs: &[(ArrayView2<f64>, Vec<usize>)],
    ) -> Result<Vec<Compressed<f64>>> {
        stream_by_prefixes(self, dims, params, seqs)
    }

    fn attend(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        x: ArrayView2<f64>,
        inputs: &AttentionInputs<f64>,
    ) -> Result<AttentionOut<f64>> {
        let kernel = FastKernel::new(&self.spec, dims, 1)?;
        let c = kernel.compress(&self.params(dims, params)?, &to_f32(&[x], (1, x.nrows(), dims.d_model))?)?;
        let four =
            |a: &Array2<f64>| -> Result<Tensor> { Ok(to_f32(&[a.view()], (1, a.nrows(), a.ncols()))?.unsqueeze(0)?) };
        let att = tensor::compressed_attention(
            &self.spec.geometry,
            self.spec.visibility,
            inputs.local_window,
            &four(&inputs.queries)?,
            &four(&inputs.raw_keys)?,
            &four(&inputs.raw_values)?,
            &c.keys,
            &c.values,
        )?;
        Ok(AttentionOut {
            output: to_array2(&att.output.get(0)?.get(0)?)?,
            entry_weights: to_array2(&att.entry_weights.get(0)?.get(0)?)?,
        })
    }
}
