//! `phasekv kernel study`: train and judge a kernel against a baseline
//! ([`phasekv::report::study`]); prints the report's first lines and where it is.

use crate::cli::reproduce::Bars;
use clap::Args;
use phasekv::kernel::KernelSpec;
use phasekv::model::RunConfig;
use phasekv::report::study::{run_study, StudySettings};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct StudyArgs {
    /// The candidate kernel as a spec file (edit one knob of `kernel list --json w8s8`, give
    /// it a name of its own).
    #[arg(long, value_name = "FILE.json", required_unless_present = "preset", conflicts_with = "preset")]
    spec: Option<PathBuf>,
    /// The candidate kernel as a preset name instead.
    #[arg(long)]
    preset: Option<String>,
    /// The kernel it is compared with (a preset name).
    #[arg(long, default_value = "w8s8")]
    baseline: String,
    /// Seeds of each kernel (seeds 0..N).
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Optimiser steps of every model (default: the recommended recipe's 3 000).
    #[arg(long)]
    steps: Option<usize>,
    /// JSON run config (task, model sizes, recipe); default: what `phasekv train` trains.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Prompts per residue group and protocol in the evaluations.
    #[arg(long, default_value_t = 96)]
    samples: usize,
    /// Seed of the evaluation prompts and of the bootstrap.
    #[arg(long, default_value_t = 0)]
    eval_seed: u64,
    /// Output folder (default `studies/<kernel>-vs-<baseline>`); the same command resumes it.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: StudyArgs) -> anyhow::Result<ExitCode> {
    let base = match &args.config {
        Some(path) => RunConfig::from_file(path)?,
        None => RunConfig::recommended(),
    };
    let mut candidate = base.clone();
    match (&args.spec, &args.preset) {
        (Some(path), _) => {
            candidate.model.set_kernel(KernelSpec::from_file(path)?);
            candidate.model.kernel().map_err(|e| phasekv::Error::File { path: path.clone(), reason: e.to_string() })?;
        }
        (None, Some(name)) => {
            candidate.model.preset = name.clone();
            candidate.model.spec = None;
        }
        (None, None) => unreachable!("clap requires --spec or --preset"),
    }
    let mut baseline = base;
    baseline.model.preset = args.baseline.clone();
    baseline.model.spec = None;
    for c in [&mut candidate, &mut baseline] {
        if let Some(s) = args.steps {
            c.train.steps = s;
        }
    }
    phasekv::limits::check_range("--seeds", args.seeds as usize, 1, 64)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("studies/{}-vs-{}", candidate.model.preset, baseline.model.preset)));
    let settings = StudySettings {
        candidate,
        baseline,
        seeds: (0..args.seeds).collect(),
        per_group: args.samples,
        eval_seed: args.eval_seed,
    };
    let mut bars = Bars::new();
    let result = run_study(&settings, &out, &mut bars)?;
    bars.finish();
    let Some(result) = result else {
        println!("stopped with a checkpoint; rerun the same command to resume");
        return Ok(crate::cli::signals::interrupted_exit_code());
    };
    let page = phasekv::report::study::render(&result);
    for line in page.lines().skip(2).take_while(|l| l.starts_with("- ")) {
        println!("{line}");
    }
    println!("report: {}", out.join("study.md").display());
    Ok(ExitCode::SUCCESS)
}
