//! The candle implementation beyond the invariant catalogue: it must be differentiable (every
//! parameter receives a gradient, and the gradient matches finite differences), heads and
//! sequences batch without mixing, and the tensor attention agrees with the reference one.

mod common;

use candle_core::{DType, Device, Tensor, Var};
use common::strategies::{case_strategy, runner};
use phasekv::conformance::harness::tolerance::max_abs_diff;
use phasekv::kernel::attention::compressed_attention as reference_attention;
use phasekv::kernel::params::KernelParams;
use phasekv::kernel::reference;
use phasekv::kernel::tensor::{compressed_attention, TensorGate, TensorKernel, TensorParams};
use phasekv::kernel::KernelSpec;
use proptest::prelude::*;

/// Replaces every tensor of the parameters by a `Var` (same values) and returns both.
fn as_vars(p: &TensorParams) -> (TensorParams, Vec<(String, Var)>) {
    let mut vars = Vec::new();
    let mut var = |name: &str, t: &Tensor| {
        let v = Var::from_tensor(t).unwrap();
        vars.push((name.to_string(), v.clone()));
        v.as_tensor().clone()
    };
    let mut gate = |name: &str, g: &Option<TensorGate>| {
        g.as_ref().map(|g| TensorGate { z: var(&format!("{name}.z"), &g.z), b: var(&format!("{name}.b"), &g.b) })
    };
    let gate_k = gate("gate_k", &p.gate_k);
    let gate_v = gate("gate_v", &p.gate_v);
    let mut var = |name: &str, t: &Tensor| {
        let v = Var::from_tensor(t).unwrap();
        vars.push((name.to_string(), v.clone()));
        v.as_tensor().clone()
    };
    let proj_k = var("proj_k", &p.proj_k);
    let proj_v = p.proj_v.as_ref().map(|t| var("proj_v", t));
    let gamma = p.gamma.as_ref().map(|t| var("gamma", t));
    (TensorParams { gate_k, gate_v, proj_k, proj_v, gamma }, vars)
}

fn f64_tensor(a: &ndarray::Array2<f64>, dev: &Device) -> Tensor {
    let (r, c) = a.dim();
    Tensor::from_vec(a.iter().copied().collect::<Vec<_>>(), (1, r, c), dev).unwrap()
}

/// Every parameter of every gated preset family receives a nonzero gradient, and the gradient
/// of one coordinate matches a central finite difference of the f64 reference.
#[test]
fn every_parameter_receives_a_correct_gradient() {
    let dev = Device::Cpu;
    for name in ["w8s4", "w8s6-scalar", "w8s4-tied", "w8s4-uniform", "w4s4-norope", "dsv4-csa", "full"] {
        let spec = KernelSpec::preset(name).unwrap();
        let mut r = runner(&format!("grad-{name}"), 4, None);
        r.run(&case_strategy(&spec), |case| {
            prop_assume!(case.x.nrows() >= spec.geometry.window() + spec.geometry.stride());
            let kernel = TensorKernel::new(&spec, case.dims, 1, &dev, DType::F64).unwrap();
            let base = TensorParams::from_heads(&spec, case.dims, std::slice::from_ref(&case.params), &dev, DType::F64)
                .unwrap();
            let (params, vars) = as_vars(&base);
            let x = f64_tensor(&case.x, &dev);
            let out = kernel.compress(&params, &x).unwrap();
            // loss = sum(keys * w) + sum(values * w'), fixed weights so no gradient cancels.
            let wk = Tensor::arange(0f64, out.keys.elem_count() as f64, &dev)
                .unwrap()
                .reshape(out.keys.shape())
                .unwrap()
                .sin()
                .unwrap();
            let wv = wk.cos().unwrap();
            let loss = ((&out.keys * &wk).unwrap().sum_all().unwrap()
                + (&out.values * &wv).unwrap().sum_all().unwrap())
            .unwrap();
            let grads = loss.backward().unwrap();
            for (pname, v) in &vars {
                let g = grads.get(v.as_tensor()).unwrap_or_else(|| panic!("{name}: no gradient reaches {pname}"));
                let norm = g.sqr().unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap();
                prop_assert!(norm > 0.0 && norm.is_finite(), "{name}: gradient of {pname} has norm {norm}");
            }
            // Finite difference on the first coordinate of proj_k, through the f64 reference.
            let loss_of = |p: &KernelParams<f64>| -> f64 {
                let c = reference::compress(&spec, case.dims, p, case.x.view()).unwrap();
                let wk: Vec<f64> = (0..c.keys.len()).map(|k| (k as f64).sin()).collect();
                let wv: Vec<f64> = (0..c.values.len()).map(|k| (k as f64).sin().cos()).collect();
                c.keys.iter().zip(&wk).map(|(a, b)| a * b).sum::<f64>()
                    + c.values.iter().zip(&wv).map(|(a, b)| a * b).sum::<f64>()
            };
            let h = 1e-6;
            let mut plus = case.params.clone();
            plus.proj_k[[0, 0, 0]] += h;
            let mut minus = case.params.clone();
            minus.proj_k[[0, 0, 0]] -= h;
            let fd = (loss_of(&plus) - loss_of(&minus)) / (2.0 * h);
            let (_, proj_k) = vars.iter().find(|(n, _)| n == "proj_k").unwrap();
            let analytic = grads
                .get(proj_k.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap()
                .get(0)
                .unwrap()
                .to_scalar::<f64>()
                .unwrap();
            prop_assert!(
                (fd - analytic).abs() <= 1e-6 * (1.0 + fd.abs()),
                "{name}: d loss / d proj_k[0,0,0]: analytic {analytic}, finite difference {fd}"
            );
            Ok(())
        })
        .unwrap();
    }
}

/// Three heads and two sequences in one call give exactly what each (head, sequence) gives alone.
#[test]
fn heads_and_sequences_batch_without_mixing() {
    let dev = Device::Cpu;
    for name in ["w8s4", "dsv4-csa", "w8s6-scalar"] {
        let spec = KernelSpec::preset(name).unwrap();
        let mut r = runner(&format!("batch-{name}"), 8, None);
        let strat = (case_strategy(&spec), case_strategy(&spec), case_strategy(&spec));
        r.run(&strat, |(a, b, c)| {
            // Use a's dims and sequence length for all three heads/sequences.
            let dims = a.dims;
            let layout_len = phasekv::kernel::ParamLayout::of(&spec, dims).len();
            let heads: Vec<KernelParams<f64>> = [&a, &b, &c]
                .iter()
                .map(|k| {
                    let flat: Vec<f64> = k.params.to_flat().iter().copied().cycle().take(layout_len).collect();
                    KernelParams::from_flat(&spec, dims, &flat).unwrap()
                })
                .collect();
            let seqs = [a.x.clone(), a.other.clone()];
            let kernel = TensorKernel::new(&spec, dims, 3, &dev, DType::F64).unwrap();
            let params = TensorParams::from_heads(&spec, dims, &heads, &dev, DType::F64).unwrap();
            let x = Tensor::from_vec(
                seqs.iter().flat_map(|s| s.iter().copied()).collect::<Vec<_>>(),
                (2, a.x.nrows(), dims.d_model),
                &dev,
            )
            .unwrap();
            let out = kernel.compress(&params, &x).unwrap();
            for (h, hp) in heads.iter().enumerate() {
                for (bi, s) in seqs.iter().enumerate() {
                    let want = reference::compress(&spec, dims, hp, s.view()).unwrap();
                    let got = out.to_compressed(bi, h).unwrap();
                    let d = max_abs_diff(&got.keys, &want.keys).max(max_abs_diff(&got.values, &want.values));
                    prop_assert!(d <= 1e-12, "{name}: head {h}, sequence {bi} differs by {d}");
                }
            }
            Ok(())
        })
        .unwrap();
    }
}

/// Grouped-query tensor attention equals the reference attention per query head.
#[test]
fn tensor_attention_matches_reference() {
    let dev = Device::Cpu;
    for name in ["w8s4", "dsv4-csa", "w4s4"] {
        let spec = KernelSpec::preset(name).unwrap();
        let mut r = runner(&format!("attn-{name}"), 8, None);
        r.run(&(case_strategy(&spec), case_strategy(&spec)), |(a, b)| {
            prop_assume!(a.x.nrows() > 0);
            let t = a.x.nrows();
            let dh = a.dims.d_head;
            let c = reference::compress(&spec, a.dims, &a.params, a.x.view()).unwrap();
            // Two query heads share the one KV head (GQA group of 2); the second head's queries
            // come from case b (cycled to the right shape).
            let q2: Vec<f64> = b.x.iter().copied().chain(std::iter::repeat(0.3)).take(t * dh).collect();
            let q2 = ndarray::Array2::from_shape_vec((t, dh), q2).unwrap();
            let to4 = |arrs: &[&ndarray::Array2<f64>]| {
                let (r, cc) = arrs[0].dim();
                Tensor::from_vec(
                    arrs.iter().flat_map(|a| a.iter().copied()).collect::<Vec<_>>(),
                    (1, arrs.len(), r, cc),
                    &dev,
                )
                .unwrap()
            };
            let out = compressed_attention(
                &spec.geometry,
                spec.visibility,
                a.attention.local_window,
                &to4(&[&a.attention.queries, &q2]),
                &to4(&[&a.attention.raw_keys]),
                &to4(&[&a.attention.raw_values]),
                &to4(&[&c.keys]),
                &to4(&[&c.values]),
            )
            .unwrap();
            for (h, q) in [&a.attention.queries, &q2].into_iter().enumerate() {
                let mut inputs = a.attention.clone();
                inputs.queries = q.clone();
                let want =
                    reference_attention(&spec.geometry, spec.visibility, c.keys.view(), c.values.view(), &inputs)
                        .unwrap();
                let got = out.output.get(0).unwrap().get(h).unwrap();
                let got =
                    ndarray::Array2::from_shape_vec((t, dh), got.flatten_all().unwrap().to_vec1::<f64>().unwrap())
                        .unwrap();
                let d = max_abs_diff(&got, &want.output);
                prop_assert!(d <= 1e-12, "{name}: query head {h} differs by {d}");
            }
            Ok(())
        })
        .unwrap();
    }
}

/// Parameters created through a `VarBuilder` are all registered as trainable variables with the
/// layout `from_heads` produces.
#[test]
fn varbuilder_init_registers_every_parameter() {
    use candle_nn::{VarBuilder, VarMap};
    let dev = Device::Cpu;
    for name in ["w8s4", "w8s4-tied", "w8s4-uniform", "dsv4-csa", "full"] {
        let spec = KernelSpec::preset(name).unwrap();
        let dims = phasekv::kernel::KernelDims::new(6, 4).unwrap();
        let map = VarMap::new();
        let vb = VarBuilder::from_varmap(&map, DType::F32, &dev);
        let p = TensorParams::init(&spec, dims, 2, &vb).unwrap();
        let n_params = phasekv::kernel::ParamLayout::of(&spec, dims).len() * 2;
        let n_vars: usize = map.all_vars().iter().map(|v| v.elem_count()).sum();
        assert_eq!(n_vars, n_params, "{name}");
        let kernel = TensorKernel::new(&spec, dims, 2, &dev, DType::F32).unwrap();
        let x = Tensor::randn(0f32, 1.0, (1, 20, 6), &dev).unwrap();
        let out = kernel.compress(&p, &x).unwrap();
        assert_eq!(out.keys.dims(), &[1, 2, spec.geometry.num_windows(20), 4]);
    }
}
