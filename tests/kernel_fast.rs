//! The fast CPU kernel (`phasekv::kernel::tensor::fast`): the invariant catalogue K1-K14 on every
//! preset, long sequences that span several chunks (against the f64 reference with the
//! two-references rule, and against the candle kernel with several sequences and heads),
//! thread-count independence, refusals, and `phasekv kernel check --impl fast` from the CLI.

use crate::common;

use candle_core::{DType, Device, Tensor};
use common::invariants::assert_exercised;
use common::strategies::check_every_preset;
use phasekv::conformance::harness::fast_subject::FastSubject;
use phasekv::conformance::harness::tolerance::{max_abs, max_abs_diff, reassociation, two_reference_bound};
use phasekv::conformance::harness::KernelUnderTest;
use phasekv::kernel::spec::preset_names;
use phasekv::kernel::tensor::fast::{chunk_windows, FastKernel};
use phasekv::kernel::tensor::{TensorKernel, TensorParams};
use phasekv::kernel::{random_input, reference, Compressed, KernelDims, KernelParams, KernelSpec};
use std::process::Command;

const CASES: u32 = 12;

fn fast(spec: &KernelSpec) -> Box<dyn KernelUnderTest> {
    Box::new(FastSubject::new(spec))
}

/// The catalogue on every preset, one test per invariant, from the list
/// `kernel_invariants.rs` runs ([`common::for_each_invariant!`]).
macro_rules! invariant_tests {
    ($($test:ident => $inv:expr),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                assert_exercised($inv, &check_every_preset($inv, CASES, &fast));
            }
        )*
    };
}

common::for_each_invariant!(invariant_tests);

fn f32_tensor(xs: &[ndarray::Array2<f64>]) -> Tensor {
    let (t, d) = xs[0].dim();
    let v: Vec<f32> = xs.iter().flat_map(|x| x.iter().map(|&a| a as f32)).collect();
    Tensor::from_vec(v, (xs.len(), t, d), &Device::Cpu).unwrap()
}

fn outputs(c: &Compressed<f64>) -> [(&'static str, Vec<f64>); 6] {
    let v2 = |a: &ndarray::Array2<f64>| a.iter().copied().collect::<Vec<_>>();
    let v3 = |a: &ndarray::Array3<f64>| a.iter().copied().collect::<Vec<_>>();
    [
        ("keys", v2(&c.keys)),
        ("values", v2(&c.values)),
        ("pooled_k", v2(&c.pooled_k)),
        ("pooled_v", v2(&c.pooled_v)),
        ("gate_k", v3(&c.gate_k)),
        ("gate_v", v3(&c.gate_v)),
    ]
}

/// Every preset at a length of more than two chunks (so chunk boundaries, the `pad_left`
/// gather and the strided views all run): within the two-references rule of the f64 reference,
/// with `reference::<f32>` as the low reference.
#[test]
fn long_sequences_span_chunks_and_agree_with_the_reference() {
    for name in preset_names() {
        let spec = KernelSpec::preset(&name).unwrap();
        // d_h = 8, or the narrowest width the spec holds (DeepSeek-V4.1 rotates 64 channels).
        let dh = phasekv::conformance::harness::strategies::head_widths(&spec, 8)[0];
        let dims = KernelDims::new(16, dh).unwrap();
        let g = spec.geometry;
        let params = KernelParams::random(&spec, dims, 7);
        let width = 4 * dims.d_head; // an upper bound: [C^K | Z^K | C^V | Z^V]
        let cw = chunk_windows(g.window(), width);
        let t_len = (2 * cw + 3) * g.stride() + g.window();
        let x = random_input(t_len, dims.d_model, 3);
        let ref64 = reference::compress(&spec, dims, &params, x.view()).unwrap();
        assert!(ref64.len() > 2 * cw, "{name}: {} windows", ref64.len());
        let low = reference::compress(&spec, dims, &params.cast::<f32>(), x.mapv(|v| v as f32).view()).unwrap();
        let low = Compressed {
            keys: low.keys.mapv(f64::from),
            values: low.values.mapv(f64::from),
            pooled_k: low.pooled_k.mapv(f64::from),
            pooled_v: low.pooled_v.mapv(f64::from),
            gate_k: low.gate_k.mapv(f64::from),
            gate_v: low.gate_v.mapv(f64::from),
            positions: low.positions,
        };
        let got = FastSubject::new(&spec).compress(dims, &params, x.view()).unwrap();
        assert_eq!(got.positions, ref64.positions, "{name}");
        let terms = g.window() * dims.d_model;
        for (((what, a), (_, r)), (_, l)) in outputs(&got).iter().zip(outputs(&ref64).iter()).zip(outputs(&low).iter())
        {
            let arr = |v: &Vec<f64>| ndarray::Array1::from(v.clone());
            let (a, r, l) = (arr(a), arr(r), arr(l));
            let err = max_abs_diff(&a, &r);
            let bound = two_reference_bound(max_abs_diff(&l, &r), DType::F32, max_abs(&r), terms);
            assert!(err <= bound, "{name} {what}: T = {t_len}, error {err:e} > bound {bound:e}");
        }
    }
}

/// Several sequences and heads at once, against the candle kernel (which the harness checks with
/// the same rules): the same entries up to reassociation.
#[test]
fn batches_and_heads_agree_with_the_candle_kernel() {
    let dims = KernelDims::new(32, 16).unwrap();
    let dev = Device::Cpu;
    for name in ["w8s4", "dsv4-csa", "w4s4-uniform", "w8s4-tied"] {
        let Ok(spec) = KernelSpec::preset(name) else { continue };
        let heads: Vec<_> = (0..3).map(|s| KernelParams::random(&spec, dims, 11 + s)).collect();
        let tp = TensorParams::from_heads(&spec, dims, &heads, &dev, DType::F32).unwrap();
        let xs: Vec<_> = (0..2).map(|s| random_input(1500, dims.d_model, 20 + s)).collect();
        let x = f32_tensor(&xs);
        let want = TensorKernel::new(&spec, dims, 3, &dev, DType::F32).unwrap().compress(&tp, &x).unwrap();
        let got = FastKernel::new(&spec, dims, 3).unwrap().compress(&tp, &x).unwrap();
        assert_eq!(got.positions, want.positions);
        let bound = reassociation(DType::F32, spec.geometry.window() * dims.d_model, 1.0);
        for (what, a, b) in [
            ("keys", &got.keys, &want.keys),
            ("values", &got.values, &want.values),
            ("pooled_k", &got.pooled_k, &want.pooled_k),
            ("pooled_v", &got.pooled_v, &want.pooled_v),
            ("gate_k", &got.gate_k, &want.gate_k),
            ("gate_v", &got.gate_v, &want.gate_v),
        ] {
            assert_eq!(a.dims(), b.dims(), "{name} {what}");
            let err =
                (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            let mag = b.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap() as f64;
            assert!((err as f64) <= bound * mag.max(1.0), "{name} {what}: {err:e} > {bound:e}");
        }
    }
}

/// The bench's size (w8s4, d = 128, d_h = 64, 4 096 tokens): the same bits on 1 and 2 threads.
#[test]
fn results_do_not_depend_on_the_thread_count() {
    let spec = KernelSpec::preset("w8s4").unwrap();
    let dims = KernelDims::new(128, 64).unwrap();
    let params = KernelParams::random(&spec, dims, 0);
    let tp = TensorParams::from_heads(&spec, dims, std::slice::from_ref(&params), &Device::Cpu, DType::F32).unwrap();
    let x = f32_tensor(&[random_input(4096, 128, 1)]);
    let kernel = FastKernel::new(&spec, dims, 1).unwrap();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let out = pool.install(|| kernel.compress(&tp, &x).unwrap());
        [out.keys, out.values, out.gate_k, out.gate_v]
            .map(|t| t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>())
    };
    let (one, two) = (run(1), run(2));
    assert!(one[0].len() > 1000 * 64);
    assert_eq!(one, two);
}

#[test]
fn refuses_what_it_cannot_do_with_a_clear_error() {
    let spec = KernelSpec::preset("w8s4").unwrap();
    let dims = KernelDims::new(16, 8).unwrap();
    let params = KernelParams::random(&spec, dims, 0);
    let dev = Device::Cpu;
    let kernel = FastKernel::new(&spec, dims, 1).unwrap();
    let tp = TensorParams::from_heads(&spec, dims, std::slice::from_ref(&params), &dev, DType::F32).unwrap();
    let x = f32_tensor(&[random_input(40, 16, 0)]);
    let e = kernel.compress(&tp, &x.to_dtype(DType::F64).unwrap()).unwrap_err().to_string();
    assert!(e.contains("f32") && e.contains("F64"), "{e}");
    let e = kernel.compress(&tp, &f32_tensor(&[random_input(40, 12, 0)])).unwrap_err().to_string();
    assert!(e.contains("[B, T, 16]"), "{e}");
    let var = candle_core::Var::from_tensor(&x).unwrap();
    let e = kernel.compress(&tp, var.as_tensor()).unwrap_err().to_string();
    assert!(e.contains("forward-only"), "{e}");
    assert!(FastKernel::new(&spec, dims, 0).unwrap_err().to_string().contains("heads"));
}

fn phasekv(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_phasekv")).args(args).output().expect("run phasekv");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn cli_check_passes_for_the_fast_kernel() {
    for preset in ["w8s4", "dsv4-csa", "full"] {
        let (code, out, err) = phasekv(&["kernel", "check", "--impl", "fast", "--preset", preset, "--cases", "8"]);
        assert_eq!(code, 0, "{preset}:\n{out}\n{err}");
        assert!(out.contains("== fast-f32-cpu ==") && out.contains("verdict: every invariant holds"), "{out}");
        assert!(out.lines().any(|l| l.starts_with("K13 ") && l.contains("PASS")), "{out}");
    }
    let (code, _, err) = phasekv(&["kernel", "check", "--impl", "fast", "--preset", "w8s4", "--dtype", "f16"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--dtype") && err.contains("f32"), "{err}");
}
