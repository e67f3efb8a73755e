//! Dumps made from the reference itself: the test suite's known-good dump and its known-bad
//! ones (another spec's outputs, or a mutant's, labelled as the claimed kernel). They sit above
//! both the dump format ([`super::dump`]) and the harness whose low-precision reference computes
//! them ([`super::harness`]), so neither of those imports the other's users.

use super::dump::{round_to, Dump, Run};
use super::harness::checks::low_reference_mutated;
use super::harness::tolerance::accumulator;
use super::mutants::Mutant;
use crate::kernel::params::KernelParams;
use crate::kernel::spec::{KernelDims, KernelSpec};
use crate::{Error, Result};
use candle_core::DType;
use ndarray::{Array2, Array3};

/// A dump of the reference itself as a correct kernel in `dtype` computes it: on inputs and
/// parameters rounded to `dtype`, with fp32 accumulators (the reference in f32, or f64 for f64
/// dumps), every output rounded to `dtype`: the test suite's known-good dump. `x` is
/// `[B, T, d]`; with `extras`, the shifted run (S tokens prepended, `prepend` gives them) and a
/// perturbed run (token `perturb`, replaced by `prepend`'s first row) are included.
pub fn reference_dump(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<f64>,
    x: &Array3<f64>,
    dtype: DType,
    extras: Option<(&Array2<f64>, usize)>,
) -> Result<Dump> {
    mutant_dump(spec, spec, None, dims, params, x, dtype, extras)
}

/// A known-bad dump for the test suite: the outputs computed by the reference under `computed`
/// (another spec, e.g. the wrong RoPE base) with the planted bug `mutation`, labelled as the
/// kernel `claimed`. `validate` must fail it; [`reference_dump`] is the case `claimed ==
/// computed`, no mutation.
#[allow(clippy::too_many_arguments)]
pub fn mutant_dump(
    claimed: &KernelSpec,
    computed: &KernelSpec,
    mutation: Option<Mutant>,
    dims: KernelDims,
    params: &KernelParams<f64>,
    x: &Array3<f64>,
    dtype: DType,
    extras: Option<(&Array2<f64>, usize)>,
) -> Result<Dump> {
    let spec = computed;
    let params = params_rounded(params, dtype);
    let round3 = |a: &Array3<f64>| a.mapv(|v| round_to(dtype, v));
    let x = round3(x);
    let run = |x: &Array3<f64>| -> Result<Run> {
        let (b, _, _) = x.dim();
        let mut outs = Vec::new();
        for s in 0..b {
            let xs = x.index_axis(ndarray::Axis(0), s).to_owned();
            let acc = accumulator(dtype);
            let mut c = low_reference_mutated(acc, spec, dims, &params, &xs, mutation)?
                .ok_or_else(|| Error::invalid("dtype", format!("no reference in {dtype:?}")))?;
            let r = |v: f64| round_to(dtype, v);
            for a in [&mut c.keys, &mut c.values, &mut c.pooled_k, &mut c.pooled_v] {
                a.mapv_inplace(r);
            }
            for a in [&mut c.gate_k, &mut c.gate_v] {
                a.mapv_inplace(r);
            }
            outs.push(c);
        }
        let stack2 = |f: &dyn Fn(&crate::kernel::Compressed<f64>) -> &Array2<f64>| {
            let views: Vec<_> = outs.iter().map(|c| f(c).view()).collect();
            ndarray::stack(ndarray::Axis(0), &views).expect("same shapes")
        };
        let stack3 = |f: &dyn Fn(&crate::kernel::Compressed<f64>) -> &Array3<f64>| {
            let views: Vec<_> = outs.iter().map(|c| f(c).view()).collect();
            ndarray::stack(ndarray::Axis(0), &views).expect("same shapes")
        };
        Ok(Run {
            input: x.clone(),
            keys: stack2(&|c| &c.keys),
            values: (!spec.shared_kv).then(|| stack2(&|c| &c.values)),
            pooled_keys: Some(stack2(&|c| &c.pooled_k)),
            pooled_values: Some(stack2(&|c| &c.pooled_v)),
            gate_k: Some(stack3(&|c| &c.gate_k)),
            gate_v: Some(stack3(&|c| &c.gate_v)),
        })
    };
    let main = run(&x)?;
    let (mut shifted, mut perturbed) = (None, None);
    if let Some((pre, t)) = extras {
        let s = spec.geometry.stride();
        let (b, t_len, d) = x.dim();
        let mut xs = Array3::zeros((b, t_len + s, d));
        for k in 0..b {
            for u in 0..s {
                xs.slice_mut(ndarray::s![k, u, ..]).assign(&pre.row(u % pre.nrows()));
            }
        }
        xs.slice_mut(ndarray::s![.., s.., ..]).assign(&x);
        shifted = Some(run(&round3(&xs))?);
        if t < t_len {
            let mut xp = x.clone();
            for k in 0..b {
                xp.slice_mut(ndarray::s![k, t, ..]).assign(&pre.row(0));
            }
            perturbed = Some((run(&round3(&xp))?, t));
        }
    }
    Ok(Dump {
        spec: claimed.clone(),
        dims,
        dtype,
        deterministic: true,
        params,
        main,
        shifted,
        perturbed,
        batched: true,
        cache_format: None,
    })
}

fn params_rounded(p: &KernelParams<f64>, dtype: DType) -> KernelParams<f64> {
    let mut q = p.clone();
    for g in [&mut q.gate_k, &mut q.gate_v].into_iter().flatten() {
        g.z.mapv_inplace(|v| round_to(dtype, v));
        g.b.mapv_inplace(|v| round_to(dtype, v));
    }
    q.proj_k.mapv_inplace(|v| round_to(dtype, v));
    if let Some(p) = &mut q.proj_v {
        p.mapv_inplace(|v| round_to(dtype, v));
    }
    if let Some(g) = &mut q.gamma {
        g.mapv_inplace(|v| round_to(dtype, v));
    }
    q
}
