//! `phasekv kernel ...`: list presets, run the invariant harness.

use anyhow::bail;
use candle_core::{DType, Device};
use clap::{Subcommand, ValueEnum};
use phasekv::kernel::harness::subjects::{ReferenceSubject, TensorSubject};
use phasekv::kernel::harness::{
    run_invariant, seeded_runner, Invariant, InvariantReport, KernelUnderTest,
};
use phasekv::kernel::reference::Mutation;
use phasekv::kernel::spec::preset_names;
use phasekv::kernel::KernelSpec;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Subcommand, Debug)]
pub enum KernelCmd {
    /// List the presets with their knobs.
    List,
    /// Run the invariant harness (K1-K13) on a preset, for the f64 reference and the candle
    /// implementation. Exit status 0 when every invariant holds, 1 otherwise.
    Check {
        /// Preset name (see `phasekv kernel list`).
        #[arg(long)]
        preset: String,
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
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Impl {
    Reference,
    Candle,
    Both,
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
        KernelCmd::List => {
            for name in preset_names() {
                let spec = KernelSpec::preset(&name)?;
                println!("{name:<16} {}", spec.describe());
            }
            println!("(any w{{W}}s{{S}} with 1 <= S <= W is accepted, with the same suffixes)");
            Ok(ExitCode::SUCCESS)
        }
        KernelCmd::Check {
            preset,
            r#impl,
            dtype,
            cases,
            seed,
            mutant,
        } => {
            let spec = KernelSpec::preset(&preset)?;
            let mut subjects: Vec<Box<dyn KernelUnderTest>> = Vec::new();
            if let Some(name) = mutant {
                subjects.push(Box::new(ReferenceSubject::mutant(
                    &spec,
                    Mutation::from_name(&name)?,
                )));
            } else {
                if matches!(r#impl, Impl::Reference | Impl::Both) {
                    subjects.push(Box::new(ReferenceSubject::new(&spec)));
                }
                if matches!(r#impl, Impl::Candle | Impl::Both) {
                    subjects.push(Box::new(TensorSubject::new(
                        &spec,
                        dtype.candle(),
                        &device(),
                    )));
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
