//! The candle implementation beyond the invariant catalogue: it must be differentiable (every
//! parameter tensor receives a gradient that matches f64 finite differences) and heads and
//! sequences batch without mixing, on every available device (`test_device!`), and the tensor
//! attention agrees with the reference one.

use crate::common;

use candle_core::{DType, Device, Tensor, Var};
use common::strategies::{case_strategy, runner};
use common::test_device;
use phasekv::conformance::harness::tolerance::max_abs_diff;
use phasekv::kernel::attention::compressed_attention as reference_attention;
use phasekv::kernel::params::KernelParams;
use phasekv::kernel::reference;
use phasekv::kernel::tensor::{compressed_attention, TensorGate, TensorKernel, TensorParams};
use phasekv::kernel::KernelSpec;
use proptest::prelude::*;

/// Where the runners of this file save and replay their failures.
const REGRESSIONS: &str = "proptest-regressions/kernel_tensor.txt";

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

/// The entry of `p` that flat index `flat` of the tensor-layout parameter `pname` (shape
/// `shape`, one head) holds: projections and gate weights are stored `[G, d, a]` in the tensor
/// layout and `[G, a, d]` in `KernelParams`; biases `[W, a]` and `gamma` `[1, d_h]` match.
fn param_entry<'a>(p: &'a mut KernelParams<f64>, pname: &str, shape: &[usize], flat: usize) -> &'a mut f64 {
    match pname {
        "gamma" => &mut p.gamma.as_mut().unwrap()[flat],
        "gate_k.b" | "gate_v.b" => {
            let a = shape[1];
            let gate = if pname == "gate_k.b" { p.gate_k.as_mut() } else { p.gate_v.as_mut() };
            &mut gate.unwrap().b[[flat / a, flat % a]]
        }
        _ => {
            let (d, a) = (shape[1], shape[2]);
            let (g, k, r) = (flat / (d * a), (flat / a) % d, flat % a);
            let arr = match pname {
                "proj_k" => &mut p.proj_k,
                "proj_v" => p.proj_v.as_mut().unwrap(),
                "gate_k.z" => &mut p.gate_k.as_mut().unwrap().z,
                "gate_v.z" => &mut p.gate_v.as_mut().unwrap().z,
                other => panic!("unknown parameter {other}"),
            };
            &mut arr[[g, r, k]]
        }
    }
}

// Every parameter tensor of every preset family, gates included, receives a gradient from the
// f32 tensor kernel that matches a central finite difference of the f64 reference on a few
// entries of each tensor drawn by the seeded runner.
//
// Tolerance. Each gradient entry is a sum of products over at most `N = W max(d, d_h)` terms
// (the harness's summation length) chained through softmax, RMSNorm and RoPE; in f32 such a sum
// carries a relative error up to `gamma_N ~ N u` with `u = 2^-24` (Higham, ch. 3), once in the
// forward and once in the backward pass, on top of the rounding of the parameters and inputs to
// f32 (relative `u`). Measured against the scale of the terms, which the tensor's largest
// gradient bounds from below, the f32 gradient is within `4 N u max(1, max|G|)`; we allow twice
// that, `8 N u max(1, max|G|)`. The f64 difference quotient (step `h = 1e-6`) is exact to
// `O(h^2 + u_64 / h) ~ 1e-10` relative, negligible. A wrong gradient (a dropped gate path, a
// mis-indexed bias) is off by O(1) of `max|G|`, far above the bound.
test_device!(every_parameter_receives_a_correct_gradient, |dev: &Device| {
    let dev = dev.clone();
    for name in ["w8s4", "w8s6-scalar", "w8s4-tied", "w8s4-uniform", "w4s4-norope", "dsv4-csa", "full"] {
        let spec = KernelSpec::preset(name).unwrap();
        let mut r = runner(&format!("grad-{name}"), 4, Some(REGRESSIONS));
        let entries = proptest::collection::vec(any::<proptest::sample::Index>(), 3);
        r.run(&(case_strategy(&spec), entries), |(case, picks)| {
                prop_assume!(case.x.nrows() >= spec.geometry.window() + spec.geometry.stride());
                let kernel = TensorKernel::new(&spec, case.dims, 1, &dev, DType::F32).unwrap();
                let base = TensorParams::from_heads(&spec, case.dims, std::slice::from_ref(&case.params), &dev, DType::F32)
                    .unwrap();
                let (params, vars) = as_vars(&base);
                let x = f64_tensor(&case.x, &dev).to_dtype(DType::F32).unwrap();
                let out = kernel.compress(&params, &x).unwrap();
                // loss = sum(keys * w) + sum(values * w'), fixed weights so no gradient cancels.
                let wk = Tensor::arange(0f64, out.keys.elem_count() as f64, &dev)
                    .unwrap()
                    .reshape(out.keys.shape())
                    .unwrap()
                    .sin()
                    .unwrap();
                let wv = wk.cos().unwrap();
                let (wk, wv) = (wk.to_dtype(DType::F32).unwrap(), wv.to_dtype(DType::F32).unwrap());
                let loss = ((&out.keys * &wk).unwrap().sum_all().unwrap()
                    + (&out.values * &wv).unwrap().sum_all().unwrap())
                .unwrap();
                let grads = loss.backward().unwrap();
                let loss_of = |p: &KernelParams<f64>| -> f64 {
                    let c = reference::compress(&spec, case.dims, p, case.x.view()).unwrap();
                    let wk: Vec<f64> = (0..c.keys.len()).map(|k| (k as f64).sin()).collect();
                    let wv: Vec<f64> = (0..c.values.len()).map(|k| (k as f64).sin().cos()).collect();
                    c.keys.iter().zip(&wk).map(|(a, b)| a * b).sum::<f64>()
                        + c.values.iter().zip(&wv).map(|(a, b)| a * b).sum::<f64>()
                };
                let g = spec.geometry;
                let n_terms = (g.window() * case.dims.d_model.max(case.dims.d_head)) as f64;
                let u32_roundoff = f32::EPSILON as f64 / 2.0;
                for (pname, v) in &vars {
                    let grad = grads.get(v.as_tensor()).unwrap_or_else(|| panic!("{name}: no gradient reaches {pname}"));
                    let grad: Vec<f64> =
                        grad.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap();
                    let scale = grad.iter().fold(0f64, |m, g| m.max(g.abs()));
                    prop_assert!(scale > 0.0 && scale.is_finite(), "{name}: gradient of {pname} has max {scale}");
                    let tol = 8.0 * n_terms * u32_roundoff * scale.max(1.0);
                    let shape = v.as_tensor().dims().to_vec();
                    for pick in &picks {
                        let flat = pick.index(grad.len());
                        let h = 1e-6;
                        let mut plus = case.params.clone();
                        *param_entry(&mut plus, pname, &shape, flat) += h;
                        let mut minus = case.params.clone();
                        *param_entry(&mut minus, pname, &shape, flat) -= h;
                        let fd = (loss_of(&plus) - loss_of(&minus)) / (2.0 * h);
                        prop_assert!(
                            (fd - grad[flat]).abs() <= tol,
                            "{name}: d loss / d {pname}[{flat}]: f32 gradient {}, f64 finite difference {fd}, tolerance {tol:.3e}",
                            grad[flat]
                        );
                    }
                }
                Ok(())
            })
            .unwrap();
    }
});

test_device!(heads_and_sequences_batch_without_mixing, |dev: &Device| {
    let dev = dev.clone();
    for name in ["w8s4", "dsv4-csa", "w8s6-scalar"] {
        let spec = KernelSpec::preset(name).unwrap();
        let mut r = runner(&format!("batch-{name}"), 8, Some(REGRESSIONS));
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
});

/// Grouped-query tensor attention equals the reference attention per query head.
#[test]
fn tensor_attention_matches_reference() {
    let dev = Device::Cpu;
    for name in ["w8s4", "dsv4-csa", "w4s4"] {
        let spec = KernelSpec::preset(name).unwrap();
        let mut r = runner(&format!("attn-{name}"), 8, Some(REGRESSIONS));
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
    // dsv41-c4: a gate without biases registers no `.b` (its zero bias is not trained); it
    // rotates 64 channels, so its heads are 64 wide.
    for name in ["w8s4", "w8s4-tied", "w8s4-uniform", "dsv4-csa", "dsv41-c4", "full"] {
        let spec = KernelSpec::preset(name).unwrap();
        let dh = (4..).find(|&dh| spec.validate_for(dh).is_ok()).unwrap();
        let dims = phasekv::kernel::KernelDims::new(6, dh).unwrap();
        let map = VarMap::new();
        let vb = VarBuilder::from_varmap(&map, DType::F32, &dev);
        let p = TensorParams::init(&spec, dims, 2, &vb).unwrap();
        let n_params = phasekv::kernel::ParamLayout::of(&spec, dims).len() * 2;
        let n_vars: usize = map.all_vars().iter().map(|v| v.elem_count()).sum();
        assert_eq!(n_vars, n_params, "{name}");
        let kernel = TensorKernel::new(&spec, dims, 2, &dev, DType::F32).unwrap();
        let x = Tensor::randn(0f32, 1.0, (1, 20, 6), &dev).unwrap();
        let out = kernel.compress(&p, &x).unwrap();
        assert_eq!(out.keys.dims(), &[1, 2, spec.geometry.num_windows(20), dh]);
    }
}
