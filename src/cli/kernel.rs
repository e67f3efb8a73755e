//! `phasekv kernel ...`: list presets, run the invariant harness.

use anyhow::bail;
use candle_core::{DType, Device};
use clap::{Subcommand, ValueEnum};
use phasekv::kernel::harness::external::ExternalKernel;
use phasekv::kernel::harness::subjects::{ReferenceSubject, TensorSubject};
use phasekv::kernel::harness::{
    run_invariant, seeded_runner, seeded_runner_shrinking, Invariant, InvariantReport, KernelUnderTest,
};
use phasekv::kernel::reference::Mutation;
use phasekv::kernel::spec::preset_names;
use phasekv::kernel::KernelSpec;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Subcommand, Debug)]
pub enum KernelCmd {
    /// List the presets with their knobs.
    List {
        /// Print one preset's full spec as JSON instead (the form `--spec` files and dumps use).
        #[arg(long, value_name = "PRESET")]
        json: Option<String>,
    },
    /// Run the invariant harness (K1-K13) on a preset or a JSON spec, for the f64 reference and
    /// the candle implementation. Exit status 0 when every invariant holds, 1 otherwise.
    Check {
        /// Preset name (see `phasekv kernel list`).
        #[arg(long, required_unless_present_any = ["spec", "external"], conflicts_with = "spec")]
        preset: Option<String>,
        /// A JSON spec file (any spec `kernel validate` accepts; `kernel list --json PRESET`
        /// prints one to start from; format in theory/dump-format.md).
        #[arg(long, value_name = "FILE.json")]
        spec: Option<std::path::PathBuf>,
        /// Which implementation(s) to check.
        #[arg(long, value_enum, default_value_t = Impl::Both)]
        r#impl: Impl,
        /// dtype of the candle implementation.
        #[arg(long, value_enum, default_value_t = Dtype::F32)]
        dtype: Dtype,
        /// Property-test cases per invariant.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        cases: u32,
        /// Seed of the case generator (the same seed draws the same cases).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Check a deliberately broken reference instead (harness self-test).
        #[arg(long, hide = true)]
        mutant: Option<String>,
        /// Check a kernel served by another process instead, e.g.
        /// "python3 python/serve_kernel.py --kernel triton-w8s4" (protocol in
        /// theory/dump-format.md). The process names its spec; --preset/--spec, if given, must agree.
        #[arg(long, value_name = "CMD", conflicts_with_all = ["mutant", "impl"])]
        external: Option<String>,
        /// With --external: where the shrunk counterexample of each failed invariant is written,
        /// as a dump `phasekv kernel validate` replays.
        #[arg(long, value_name = "DIR", default_value = "kernel-check-failures", requires = "external")]
        failures: std::path::PathBuf,
        /// With --external: proptest shrinking steps per failed invariant (each costs a round trip
        /// to the process); the sequence is then cut to the shortest prefix that still fails.
        #[arg(long, default_value_t = 64, requires = "external")]
        shrink: u32,
        /// With --external: seconds to wait for each reply before giving up.
        #[arg(long, default_value_t = 600.0, requires = "external", value_parser = parse_timeout)]
        reply_timeout: f64,
    },
    /// Time one forward pass of the reference and the candle kernel side by side, with the
    /// sgemm throughput of this machine measured in the same run.
    Bench {
        /// Preset name.
        #[arg(long, default_value = "w8s4")]
        preset: String,
        /// Sequence lengths (comma separated).
        #[arg(long, value_delimiter = ',', default_values_t = vec![4096usize, 65536])]
        tokens: Vec<usize>,
        /// Hidden width `d`.
        #[arg(long, default_value_t = 128)]
        d_model: usize,
        /// Head width `d_h`.
        #[arg(long, default_value_t = 64)]
        d_head: usize,
        /// Which implementation(s) to time.
        #[arg(long, value_enum, default_value_t = Impl::Both)]
        r#impl: Impl,
        /// Seconds of timed runs per row (after one warm-up run).
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Print the rows as JSON lines too.
        #[arg(long)]
        json: bool,
    },
    /// Validate a kernel dumped from elsewhere (safetensors file or .npy folder, see
    /// theory/dump-format.md) against the reference. Exit status 0 when the kernel passes,
    /// 1 when it fails, 2 when the dump is unusable.
    Validate {
        /// The dump: a .safetensors file or a folder of .npy files with metadata.json.
        dump: std::path::PathBuf,
        /// The dtype the kernel computed in (default: the dump's metadata, else its storage).
        #[arg(long)]
        dtype: Option<String>,
        /// Write validation.json and the error-by-phase / error-by-window plots here.
        #[arg(long)]
        report: Option<std::path::PathBuf>,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Impl {
    Reference,
    Candle,
    Both,
    /// The fast CPU f32 forward (`phasekv::kernel::fast`).
    Fast,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
    F64,
}

impl Dtype {
    fn candle(self) -> DType {
        match self {
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::F16,
            Dtype::Bf16 => DType::BF16,
            Dtype::F64 => DType::F64,
        }
    }
}

/// The best available device: CUDA when built with the feature and a GPU answers, else CPU.
pub fn device() -> Device {
    #[cfg(feature = "cuda")]
    if let Ok(d) = Device::new_cuda(0) {
        return d;
    }
    Device::Cpu
}

pub fn run(cmd: KernelCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        KernelCmd::List { json: Some(name) } => {
            println!("{}", serde_json::to_string_pretty(&KernelSpec::preset(&name)?)?);
            Ok(ExitCode::SUCCESS)
        }
        KernelCmd::List { json: None } => {
            for name in preset_names() {
                let spec = KernelSpec::preset(&name)?;
                println!("{name:<16} {}", spec.describe());
            }
            println!("(any w{{W}}s{{S}} with 1 <= S <= W is accepted, with the same suffixes)");
            Ok(ExitCode::SUCCESS)
        }
        KernelCmd::Validate { dump, dtype, report } => super::validate::run(&dump, dtype.as_deref(), report.as_ref()),
        KernelCmd::Bench { preset, tokens, d_model, d_head, r#impl, seconds, json } => {
            bench(&preset, &tokens, d_model, d_head, r#impl, seconds, json)
        }
        KernelCmd::Check {
            preset,
            spec,
            r#impl,
            dtype,
            cases,
            seed,
            mutant,
            external,
            failures,
            shrink,
            reply_timeout,
        } => {
            let given = match (preset, spec) {
                (Some(name), _) => Some(KernelSpec::preset(&name)?),
                (None, Some(path)) => {
                    let text = phasekv::limits::read_text(&path, phasekv::limits::MAX_JSON_BYTES)?;
                    Some(KernelSpec::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?)
                }
                (None, None) => None,
            };
            if let Some(cmd) = external {
                return check_external(&cmd, given.as_ref(), cases, seed, shrink, reply_timeout, &failures);
            }
            let Some(spec) = given else { bail!("give --preset NAME, --spec FILE.json or --external CMD") };
            let preset = spec.name.clone();
            let w = spec.geometry.window();
            if w > phasekv::limits::MAX_CHECK_WINDOW {
                bail!(
                    "invalid --preset: window W = {w} of {preset} is above the harness's limit of {} (cases hold up to 2W + 2S + 3 tokens)",
                    phasekv::limits::MAX_CHECK_WINDOW
                );
            }
            let mut subjects: Vec<Box<dyn KernelUnderTest>> = Vec::new();
            if let Some(name) = mutant {
                subjects.push(Box::new(ReferenceSubject::mutant(&spec, Mutation::from_name(&name)?)));
            } else {
                if matches!(r#impl, Impl::Reference | Impl::Both) {
                    subjects.push(Box::new(ReferenceSubject::new(&spec)));
                }
                if matches!(r#impl, Impl::Candle | Impl::Both) {
                    subjects.push(Box::new(TensorSubject::new(&spec, dtype.candle(), &device())));
                }
                if matches!(r#impl, Impl::Fast) {
                    if !matches!(dtype, Dtype::F32) {
                        bail!("invalid --dtype: the fast kernel computes in f32 only, got {dtype:?}");
                    }
                    subjects.push(Box::new(phasekv::kernel::fast::subject::FastSubject::new(&spec)));
                }
            }
            if subjects.is_empty() {
                bail!("nothing to check");
            }
            println!("preset {preset}: {}", spec.describe());
            println!("{cases} cases per invariant, seed {seed}");
            let mut all_ok = true;
            for subject in &subjects {
                println!();
                println!("== {} ==", subject.label());
                println!(
                    "{:<4} {:<20} {:<5} {:>7} {:>5} {:>11} {:>11}  note",
                    "id", "invariant", "", "passed", "n/a", "max error", "bound"
                );
                for inv in Invariant::ALL {
                    let start = Instant::now();
                    let r = run_invariant(subject.as_ref(), inv, &mut seeded_runner(cases, seed));
                    all_ok &= r.status != "fail";
                    print_row(&r, start.elapsed().as_secs_f64());
                }
            }
            println!();
            if all_ok {
                println!("verdict: every invariant holds");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("verdict: FAILED");
                Ok(ExitCode::from(1))
            }
        }
    }
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.001..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!("must be a number of seconds in 0.001..=86400, got '{s}'")),
    }
}

/// `kernel check --external CMD`: every invariant against the process, one start; each failure's
/// shrunk case written as a dump under `failures`.
fn check_external(
    cmd: &str,
    given: Option<&KernelSpec>,
    cases: u32,
    seed: u64,
    shrink: u32,
    reply_timeout: f64,
    failures: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let kernel = ExternalKernel::start(cmd, std::time::Duration::from_secs_f64(reply_timeout))?;
    let spec = kernel.spec().clone();
    if let Some(g) = given {
        if *g != spec {
            bail!(
                "invalid --external: the process serves {} ({}) but --preset/--spec gives {} ({})",
                spec.name,
                spec.describe(),
                g.name,
                g.describe()
            );
        }
    }
    println!("preset {}: {}", spec.name, spec.describe());
    println!("{cases} cases per invariant, seed {seed}");
    println!();
    println!("== {} ({:?}, one process: {cmd}) ==", kernel.label(), kernel.dtype());
    println!(
        "{:<4} {:<20} {:<5} {:>7} {:>5} {:>11} {:>11}  note",
        "id", "invariant", "", "passed", "n/a", "max error", "bound"
    );
    let mut failed = Vec::new();
    for inv in Invariant::ALL {
        let start = Instant::now();
        let mut r = run_invariant(&kernel, inv, &mut seeded_runner_shrinking(cases, seed, shrink));
        print_row(&r, start.elapsed().as_secs_f64());
        if let Some(case) = r.counterexample.take() {
            failed.push((inv, case));
        }
    }
    println!();
    if failed.is_empty() {
        println!("verdict: every invariant holds");
        return Ok(ExitCode::SUCCESS);
    }
    std::fs::create_dir_all(failures).map_err(|e| phasekv::Error::io(failures, e))?;
    for (inv, case) in &failed {
        let path = failures.join(format!("{}.safetensors", inv.id()));
        let windows = spec.geometry.num_windows(case.x.nrows());
        println!(
            "counterexample {} ({}): T = {}, d = {}, d_h = {}, {windows} window(s)",
            inv.id(),
            inv.name(),
            case.x.nrows(),
            case.dims.d_model,
            case.dims.d_head
        );
        match kernel.save_counterexample(case, &path) {
            Ok(()) => println!("  replay: phasekv kernel validate {}", path.display()),
            Err(e) => println!("  (no dump written: {e})"),
        }
    }
    println!();
    println!("verdict: FAILED");
    Ok(ExitCode::from(1))
}

/// Runs `f` once to warm up, then repeatedly for at least `seconds` (at least 3 times unless a
/// single run takes longer than `seconds`); returns the median seconds per run.
fn time_median(seconds: f64, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    f()?;
    let mut runs = Vec::new();
    let start = Instant::now();
    while runs.len() < 3 || start.elapsed().as_secs_f64() < seconds {
        let t = Instant::now();
        f()?;
        runs.push(t.elapsed().as_secs_f64());
        if start.elapsed().as_secs_f64() > seconds && !runs.is_empty() && runs[0] > seconds {
            break;
        }
    }
    runs.sort_by(|a, b| a.total_cmp(b));
    Ok(runs[runs.len() / 2])
}

/// Best sgemm FLOP/s of candle (f32, CPU) over shapes like the kernel's and a square one.
fn sgemm_flops(seconds: f64) -> anyhow::Result<f64> {
    let dev = Device::Cpu;
    let mut best = 0f64;
    for (m, k, n) in [(4096usize, 128usize, 512usize), (1024, 1024, 1024)] {
        let a = candle_core::Tensor::randn(0f32, 1.0, (m, k), &dev)?;
        let b = candle_core::Tensor::randn(0f32, 1.0, (k, n), &dev)?;
        let secs = time_median(seconds / 2.0, || {
            a.matmul(&b)?;
            Ok(())
        })?;
        best = best.max(2.0 * (m * k * n) as f64 / secs);
    }
    Ok(best)
}

/// Best sgemm FLOP/s of faer (f32, one thread, AVX-512 when the CPU has it), same shapes.
fn faer_sgemm_flops(seconds: f64) -> anyhow::Result<f64> {
    let mut best = 0f64;
    for (m, k, n) in [(4096usize, 128usize, 512usize), (1024, 1024, 1024)] {
        let a: Vec<f32> = (0..m * k).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i % 13) as f32 - 6.0) / 6.0).collect();
        let mut out = vec![0f32; m * n];
        let secs = time_median(seconds / 2.0, || {
            phasekv::kernel::fast::sgemm(&a, &b, &mut out, m, k, n);
            Ok(())
        })?;
        best = best.max(2.0 * (m * k * n) as f64 / secs);
    }
    Ok(best)
}

fn bench(
    preset: &str,
    tokens: &[usize],
    d_model: usize,
    d_head: usize,
    which: Impl,
    seconds: f64,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use phasekv::kernel::tensor::{TensorKernel, TensorParams};
    use phasekv::kernel::{forward_flops, random_input, KernelDims, KernelParams};
    use phasekv::limits::{check_range, MAX_BENCH_SECONDS, MAX_BENCH_TOKENS, MAX_BENCH_WIDTH};
    let spec = KernelSpec::preset(preset)?;
    check_range("--d-model", d_model, 1, MAX_BENCH_WIDTH)?;
    check_range("--d-head", d_head, 1, MAX_BENCH_WIDTH)?;
    let dims = KernelDims::new(d_model, d_head)?;
    for &t in tokens {
        check_range("--tokens", t, 1, MAX_BENCH_TOKENS)?;
    }
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= MAX_BENCH_SECONDS) {
        bail!("invalid --seconds: must be a finite number in (0, {MAX_BENCH_SECONDS}], got {seconds}");
    }
    let threads = rayon::current_num_threads();
    let (candle_peak, faer_peak) = (sgemm_flops(seconds)?, faer_sgemm_flops(seconds)?);
    let peak = candle_peak.max(faer_peak);
    println!("preset {preset}: {}", spec.describe());
    println!(
        "d = {d_model}, d_h = {d_head}, f32, {threads} thread(s); sgemm on this machine: candle {:.1}, faer (1 thread) {:.1} GFLOP/s",
        candle_peak / 1e9,
        faer_peak / 1e9
    );
    println!("{:<14} {:>8} {:>11} {:>13} {:>9} {:>8}", "impl", "T", "ms/forward", "tokens/s", "GFLOP/s", "% sgemm");
    let params = KernelParams::random(&spec, dims, 0);
    let dev = Device::Cpu;
    for &t in tokens {
        let x = random_input(t, d_model, 1);
        let flops = forward_flops(&spec, dims, t);
        let mut rows: Vec<(&str, f64)> = Vec::new();
        if matches!(which, Impl::Reference | Impl::Both) {
            let secs = time_median(seconds, || {
                phasekv::kernel::reference::compress(&spec, dims, &params, x.view())?;
                Ok(())
            })?;
            rows.push(("reference-f64", secs));
        }
        if matches!(which, Impl::Candle | Impl::Both) {
            let kernel = TensorKernel::new(&spec, dims, 1, &dev, DType::F32)?;
            let tp = TensorParams::from_heads(&spec, dims, std::slice::from_ref(&params), &dev, DType::F32)?;
            let xt =
                candle_core::Tensor::from_vec(x.iter().map(|&v| v as f32).collect::<Vec<_>>(), (1, t, d_model), &dev)?;
            let secs = time_median(seconds, || {
                kernel.compress(&tp, &xt)?;
                Ok(())
            })?;
            rows.push(("candle-f32", secs));
        }
        if matches!(which, Impl::Fast) {
            let kernel = phasekv::kernel::fast::FastKernel::new(&spec, dims, 1)?;
            let tp = TensorParams::from_heads(&spec, dims, std::slice::from_ref(&params), &dev, DType::F32)?;
            let xt =
                candle_core::Tensor::from_vec(x.iter().map(|&v| v as f32).collect::<Vec<_>>(), (1, t, d_model), &dev)?;
            let secs = time_median(seconds, || {
                kernel.compress(&tp, &xt)?;
                Ok(())
            })?;
            rows.push(("fast-f32", secs));
        }
        for (name, secs) in rows {
            let gflops = flops / secs / 1e9;
            println!(
                "{name:<14} {t:>8} {:>11.3} {:>13.0} {gflops:>9.2} {:>7.1}%",
                secs * 1e3,
                t as f64 / secs,
                100.0 * flops / secs / peak
            );
            if json {
                println!(
                    "{}",
                    serde_json::json!({"impl": name, "preset": preset, "tokens": t, "d_model": d_model, "d_head": d_head,
                        "seconds": secs, "tokens_per_s": t as f64 / secs, "gflops": gflops, "flops": flops, "sgemm_gflops": peak / 1e9,
                        "candle_sgemm_gflops": candle_peak / 1e9, "faer_sgemm_gflops": faer_peak / 1e9, "threads": threads})
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_row(r: &InvariantReport, secs: f64) {
    let status = r.status.to_uppercase();
    let note = match &r.failure {
        Some(f) => f.clone(),
        None if r.status == "n/a" => "not applicable to this kernel".to_string(),
        None => format!("{secs:.2}s"),
    };
    println!(
        "{:<4} {:<20} {:<5} {:>7} {:>5} {:>11.3e} {:>11.3e}  {note}",
        r.invariant.id(),
        r.invariant.name(),
        status,
        r.cases_passed,
        r.cases_not_applicable,
        r.worst_error,
        r.bound_at_worst
    );
}
