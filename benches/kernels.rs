//! Forward pass of the compression kernels at d = 128, d_h = 64, one head, f32: the f64
//! reference, the fast CPU path for inference (`kernel::tensor::fast::FastKernel`: the `gemm`
//! crate's AVX-512 sgemm, streaming softmax-pool) and candle's primitive-op path (the one
//! training differentiates through), for w8s4 and dsv4-csa at T = 4 096 and 65 536; plus candle's
//! and the one-thread `gemm` crate's sgemm on this machine in the same run, as the yardstick for "achieved FLOP/s".
//!
//! Throughput is reported in tokens; GFLOP/s = `phasekv::kernel::forward_flops` / time
//! (printed once per configuration). `phasekv kernel bench` prints the same table directly,
//! and `benches/compare_pytorch.sh` runs it beside the PyTorch-eager twin.
//!
//! `cargo bench --bench kernels` (the reference at 65 536 tokens takes ~5 s per iteration).

use candle_core::{DType, Device, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use phasekv::kernel::tensor::fast::FastKernel;
use phasekv::kernel::tensor::{TensorKernel, TensorParams};
use phasekv::kernel::{forward_flops, random_input, reference, KernelDims, KernelParams, KernelSpec};
use std::hint::black_box;

fn kernels(c: &mut Criterion) {
    let dev = Device::Cpu;
    let dims = KernelDims::new(128, 64).unwrap();
    let mut sg = c.benchmark_group("sgemm");
    sg.sample_size(20);
    for (m, k, n) in [(4096usize, 128usize, 512usize), (1024, 1024, 1024)] {
        let a = Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap();
        let b = Tensor::randn(0f32, 1.0, (k, n), &dev).unwrap();
        sg.throughput(Throughput::Elements((2 * m * k * n) as u64));
        sg.bench_function(BenchmarkId::new("candle-f32 flops", format!("{m}x{k}x{n}")), |bch| {
            bch.iter(|| black_box(a.matmul(&b).unwrap()))
        });
        let (av, bv) =
            (a.flatten_all().unwrap().to_vec1::<f32>().unwrap(), b.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        let mut out = vec![0f32; m * n];
        sg.bench_function(BenchmarkId::new("gemm-f32-1thread flops", format!("{m}x{k}x{n}")), |bch| {
            bch.iter(|| phasekv::conformance::bench::sgemm(&av, &bv, black_box(&mut out), m, k, n))
        });
    }
    sg.finish();
    for preset in ["w8s4", "dsv4-csa"] {
        let spec = KernelSpec::preset(preset).unwrap();
        let params = KernelParams::random(&spec, dims, 0);
        let mut g = c.benchmark_group(format!("forward/{preset}"));
        g.sample_size(10);
        for t in [4096usize, 65536] {
            let flops = forward_flops(&spec, dims, t);
            eprintln!("{preset} T={t}: {:.3} GFLOP per forward", flops / 1e9);
            let x = random_input(t, dims.d_model, 1);
            g.throughput(Throughput::Elements(t as u64));
            g.bench_function(BenchmarkId::new("reference-f64", t), |b| {
                b.iter(|| black_box(reference::compress(&spec, dims, &params, x.view()).unwrap()))
            });
            let tp = TensorParams::from_heads(&spec, dims, std::slice::from_ref(&params), &dev, DType::F32).unwrap();
            let xt =
                Tensor::from_vec(x.iter().map(|&v| v as f32).collect::<Vec<_>>(), (1, t, dims.d_model), &dev).unwrap();
            let k = TensorKernel::new(&spec, dims, 1, &dev, DType::F32).unwrap();
            g.bench_function(BenchmarkId::new("candle-autodiff-f32", t), |b| {
                b.iter(|| black_box(k.compress(&tp, &xt).unwrap()))
            });
            let k = FastKernel::new(&spec, dims, 1).unwrap();
            g.bench_function(BenchmarkId::new("fast-f32", t), |b| b.iter(|| black_box(k.compress(&tp, &xt).unwrap())));
        }
        g.finish();
    }
}

criterion_group!(benches, kernels);
criterion_main!(benches);
