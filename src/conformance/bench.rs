//! `phasekv kernel bench`: one forward pass of the reference, the candle kernel and the fast CPU
//! kernel timed side by side, with this machine's sgemm throughput (candle's, and the `gemm` crate's on one thread through
//! [`crate::numeric::gemm`], the GEMM of the fast paths) measured
//! in the same run (so that the kernel's FLOP rate reads as a fraction of what the machine does).

use crate::kernel::tensor::fast::FastKernel;
use crate::kernel::tensor::{TensorKernel, TensorParams};
use crate::kernel::{forward_flops, random_input, reference, KernelDims, KernelParams, KernelSpec};
use crate::limits::{check_range, MAX_BENCH_SECONDS, MAX_BENCH_TOKENS, MAX_BENCH_WIDTH};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use serde::Serialize;
use std::time::Instant;

/// One timed implementation at one sequence length.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// `reference-f64`, `candle-f32` or `fast-f32`.
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    /// Preset name.
    pub preset: String,
    /// Sequence length.
    pub tokens: usize,
    /// Hidden width.
    pub d_model: usize,
    /// Head width.
    pub d_head: usize,
    /// Median seconds per forward pass.
    pub seconds: f64,
    /// Tokens per second.
    pub tokens_per_s: f64,
    /// Kernel FLOP rate ([`forward_flops`] per second), in GFLOP/s.
    pub gflops: f64,
    /// [`forward_flops`] of one forward pass.
    pub flops: f64,
    /// The best sgemm rate measured in the same run (candle's or the one-thread `gemm` crate's), in GFLOP/s.
    pub sgemm_gflops: f64,
    /// candle's sgemm rate measured in the same run, in GFLOP/s.
    pub candle_sgemm_gflops: f64,
    /// The `gemm` crate's sgemm rate through [`crate::numeric::gemm`] (one thread, AVX-512 when
    /// the CPU has it), in GFLOP/s.
    pub gemm_sgemm_gflops: f64,
    /// rayon threads.
    pub threads: usize,
}

/// Which implementations to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Which {
    /// The f64 reference.
    pub reference: bool,
    /// The candle f32 kernel's primitive-op path (candle's own ops, what training runs).
    pub candle: bool,
    /// The fast CPU f32 kernel ([`crate::kernel::tensor::fast`]).
    pub fast: bool,
}

/// The sgemm rates of one run, in FLOP/s.
#[derive(Clone, Copy, Debug)]
pub struct Sgemm {
    /// candle's.
    pub candle: f64,
    /// [`crate::numeric::gemm`]'s, one thread.
    pub gemm: f64,
}

impl Sgemm {
    /// Measures both.
    pub fn measure(seconds: f64) -> Result<Self> {
        Ok(Sgemm { candle: sgemm_flops(seconds)?, gemm: gemm_sgemm_flops(seconds)? })
    }

    /// The better of the two.
    pub fn best(&self) -> f64 {
        self.candle.max(self.gemm)
    }
}

/// Checks the bench's inputs against [`crate::limits`] (one-line errors naming the flag).
pub fn check_inputs(tokens: &[usize], d_model: usize, d_head: usize, seconds: f64) -> Result<KernelDims> {
    check_range("--d-model", d_model, 1, MAX_BENCH_WIDTH)?;
    check_range("--d-head", d_head, 1, MAX_BENCH_WIDTH)?;
    for &t in tokens {
        check_range("--tokens", t, 1, MAX_BENCH_TOKENS)?;
    }
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= MAX_BENCH_SECONDS) {
        return Err(Error::invalid(
            "--seconds",
            format!("must be a finite number in (0, {MAX_BENCH_SECONDS}], got {seconds}"),
        ));
    }
    KernelDims::new(d_model, d_head)
}

/// Runs `f` once to warm up, then repeatedly for at least `seconds` (at least 3 times unless a
/// single run takes longer than `seconds`); returns the median seconds per run.
pub fn time_median(seconds: f64, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut runs = Vec::new();
    let start = Instant::now();
    while runs.len() < 3 || start.elapsed().as_secs_f64() < seconds {
        let t = Instant::now();
        f()?;
        runs.push(t.elapsed().as_secs_f64());
        if start.elapsed().as_secs_f64() > seconds && runs[0] > seconds {
            break;
        }
    }
    runs.sort_by(|a, b| a.total_cmp(b));
    Ok(runs[runs.len() / 2])
}

/// Best sgemm FLOP/s of candle (f32, CPU) over shapes like the kernel's and a square one.
pub fn sgemm_flops(seconds: f64) -> Result<f64> {
    let dev = Device::Cpu;
    let mut best = 0f64;
    for (m, k, n) in [(4096usize, 128usize, 512usize), (1024, 1024, 1024)] {
        let a = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
        let b = Tensor::randn(0f32, 1.0, (k, n), &dev)?;
        let secs = time_median(seconds / 2.0, || {
            a.matmul(&b)?;
            Ok(())
        })?;
        best = best.max(2.0 * (m * k * n) as f64 / secs);
    }
    Ok(best)
}

/// Best sgemm FLOP/s of [`crate::numeric::gemm`] (f32, one thread, AVX-512 when the CPU has it),
/// same shapes as [`sgemm_flops`].
pub fn gemm_sgemm_flops(seconds: f64) -> Result<f64> {
    let mut best = 0f64;
    for (m, k, n) in [(4096usize, 128usize, 512usize), (1024, 1024, 1024)] {
        let a: Vec<f32> = (0..m * k).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i % 13) as f32 - 6.0) / 6.0).collect();
        let mut out = vec![0f32; m * n];
        let secs = time_median(seconds / 2.0, || {
            sgemm(&a, &b, &mut out, m, k, n);
            Ok(())
        })?;
        best = best.max(2.0 * (m * k * n) as f64 / secs);
    }
    Ok(best)
}

/// Times the chosen implementations at every length, then measures the sgemm rates
/// ([`Sgemm::measure`]) and hands every row to `on_row`; returns the rates.
///
/// The sgemm rates are measured *after* the kernels on purpose: measured first, a one-thread
/// sgemm (then faer's) left candle's CPU forward about 10x slower on one thread for the rest of the process
/// (w8s4, T = 4096: 25 ms before, 250-290 ms after; measured 2026-12-01 on this machine), so
/// the yardstick would have bent the measurement.
#[allow(clippy::too_many_arguments)]
pub fn run(
    spec: &KernelSpec,
    dims: KernelDims,
    tokens: &[usize],
    which: Which,
    seconds: f64,
    on_row: &mut dyn FnMut(&BenchRow),
) -> Result<Sgemm> {
    let mut measured: Vec<(usize, f64, &'static str, f64)> = Vec::new();
    let params = KernelParams::random(spec, dims, 0);
    let dev = Device::Cpu;
    let threads = rayon::current_num_threads();
    for &t in tokens {
        let x = random_input(t, dims.d_model, 1);
        let flops = forward_flops(spec, dims, t);
        let mut timed: Vec<(&'static str, f64)> = Vec::new();
        if which.reference {
            let secs = time_median(seconds, || reference::compress(spec, dims, &params, x.view()).map(|_| ()))?;
            timed.push(("reference-f64", secs));
        }
        if which.candle {
            let kernel = TensorKernel::new(spec, dims, 1, &dev, DType::F32)?;
            let tp = TensorParams::from_heads(spec, dims, std::slice::from_ref(&params), &dev, DType::F32)?;
            let xt = Tensor::from_vec(x.iter().map(|&v| v as f32).collect::<Vec<_>>(), (1, t, dims.d_model), &dev)?;
            let secs = time_median(seconds, || kernel.compress(&tp, &xt).map(|_| ()))?;
            timed.push(("candle-f32", secs));
        }
        if which.fast {
            let kernel = FastKernel::new(spec, dims, 1)?;
            let tp = TensorParams::from_heads(spec, dims, std::slice::from_ref(&params), &dev, DType::F32)?;
            let xt = Tensor::from_vec(x.iter().map(|&v| v as f32).collect::<Vec<_>>(), (1, t, dims.d_model), &dev)?;
            let secs = time_median(seconds, || kernel.compress(&tp, &xt).map(|_| ()))?;
            timed.push(("fast-f32", secs));
        }
        measured.extend(timed.into_iter().map(|(name, secs)| (t, flops, name, secs)));
    }
    let sgemm = Sgemm::measure(seconds)?;
    for (t, flops, implementation, secs) in measured {
        on_row(&BenchRow {
            implementation,
            preset: spec.name.clone(),
            tokens: t,
            d_model: dims.d_model,
            d_head: dims.d_head,
            seconds: secs,
            tokens_per_s: t as f64 / secs,
            gflops: flops / secs / 1e9,
            flops,
            sgemm_gflops: sgemm.best() / 1e9,
            candle_sgemm_gflops: sgemm.candle / 1e9,
            gemm_sgemm_gflops: sgemm.gemm / 1e9,
            threads,
        });
    }
    Ok(sgemm)
}

/// `out = a b` for row-major `a: [m, k]`, `b: [k, n]` on one thread through
/// [`crate::numeric::gemm`] (the bench's yardstick for "achieved FLOP/s").
pub fn sgemm(a: &[f32], b: &[f32], out: &mut [f32], m: usize, k: usize, n: usize) {
    use crate::numeric::{gemm, View};
    gemm(m, n, k, out, n, false, View::rows(a, k), View::rows(b, n));
}
