//! The arguments of `phasekv kernel ...`, and the device and dtype they select.

use super::study;
use candle_core::{DType, Device};
use clap::{Subcommand, ValueEnum};

#[derive(Subcommand, Debug)]
pub enum KernelCmd {
    /// List the presets with their knobs.
    List {
        /// Print one preset's full spec as JSON instead (the form `--spec` files and dumps use).
        #[arg(long, value_name = "PRESET")]
        json: Option<String>,
    },
    /// Run the invariant harness (K1-K14) on a preset or a JSON spec, for the f64 reference and
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
        #[arg(long, default_value_t = 64,
              value_parser = clap::value_parser!(u32).range(1..=phasekv::limits::MAX_CHECK_CASES as i64))]
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
        /// as a dump `phasekv kernel validate` replays (refused when it exists and is not empty,
        /// so two runs' dumps never mix).
        #[arg(long, value_name = "DIR", default_value = "kernel-check-failures", requires = "external")]
        failures: std::path::PathBuf,
        /// With --external: proptest shrinking steps per failed invariant (each costs a round trip
        /// to the process); the sequence is then cut to the shortest prefix that still fails.
        #[arg(long, default_value_t = 64, requires = "external")]
        shrink: u32,
        /// With --external: seconds to wait for each reply before giving up (the run then ends,
        /// exit status 2).
        #[arg(long, default_value_t = 600.0, requires = "external", value_parser = parse_timeout)]
        reply_timeout: f64,
        /// With --external: seconds the whole run may take, shrinking included (the run then
        /// ends, exit status 2).
        #[arg(long, default_value_t = 600.0, requires = "external", value_parser = parse_timeout)]
        budget: f64,
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
    /// Study a kernel against a baseline: train N seeds of each, evaluate both padding
    /// protocols, and write a one-page report (phase sensitive? at which period, how much,
    /// next to the baseline, at what accuracy cost; theory/study.md). Resumes when run again.
    Study(study::StudyArgs),
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
    /// The fast CPU f32 forward (`phasekv::kernel::tensor::fast`).
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
    pub(super) fn candle(self) -> DType {
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

impl Impl {
    pub(super) fn reference(self) -> bool {
        matches!(self, Impl::Reference | Impl::Both)
    }

    pub(super) fn candle(self) -> bool {
        matches!(self, Impl::Candle | Impl::Both)
    }

    pub(super) fn fast(self) -> bool {
        matches!(self, Impl::Fast)
    }
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.001..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!("must be a number of seconds in 0.001..=86400, got '{s}'")),
    }
}
