//! `phasekv train`: train one model on the retrieval task and print its accuracy. Without
//! `--config` it trains [`RunConfig::recommended`] (the committed reproduction's task, on the
//! default engine [`Engine::default`], fast; `--engine candle` chooses the autodiff reference).

use super::progress::Progress as Bar;
use clap::{Args, ValueEnum};
use phasekv::model::train::{Observer, Outcome};
use phasekv::model::{Engine, EvalReport, RunConfig, StepReport};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// Kernel preset of the attention layers (`full`, `w8s4`, `w8s4-norope`, `dsv4-csa`, ...).
    #[arg(long, conflicts_with = "spec")]
    preset: Option<String>,
    /// A kernel spec file (the JSON `kernel list --json NAME` prints, `kernel check --spec`
    /// reads) for the attention layers: any spec both accept, preset or not. The run's
    /// `config.json` keeps it, under its `name`.
    #[arg(long)]
    spec: Option<PathBuf>,
    /// JSON config (sections `task`, `model`, `train`; missing fields take the serde defaults,
    /// `train.engine` fast among them). Without it: the committed reproduction's task
    /// (`plans/full.json`) on the fast engine (`--print-config` shows it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Optimiser steps (overrides the config).
    #[arg(long)]
    steps: Option<usize>,
    /// Seed of initialisation and batches (overrides the config).
    #[arg(long)]
    seed: Option<u64>,
    /// Peak learning rate (overrides the config).
    #[arg(long)]
    lr: Option<f64>,
    /// Engine of the forward and backward pass and of the evaluations (overrides the config):
    /// `fast` (the default, with or without a config: hand-derived f32 CPU path, 3-4x candle's
    /// step, every preset `kernel list` shows; see `theory/training.md` §5b) or `candle`
    /// (autodiff, the reference the fast engine's gradients are tested against, every preset).
    /// Recorded in the run's config and metrics.
    #[arg(long, value_enum)]
    engine: Option<EngineArg>,
    /// Run directory (default `runs/<preset>-seed<seed>`); an unfinished run there with the
    /// same config is resumed, a finished one is never overwritten.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the effective config as JSON and exit.
    #[arg(long)]
    print_config: bool,
    /// Time this many training steps (after 5 untimed) instead of training; prints one JSON
    /// line with step time, tokens/s and peak memory. Writes no run directory.
    #[arg(long)]
    bench: Option<usize>,
    /// No progress bar (log lines only).
    #[arg(long)]
    quiet: bool,
}

/// A training engine on the command line (`fast`, `candle`).
#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum EngineArg {
    /// The hand-derived f32 CPU path (the default).
    Fast,
    /// candle autodiff, the reference.
    Candle,
}

impl From<EngineArg> for Engine {
    fn from(e: EngineArg) -> Self {
        match e {
            EngineArg::Fast => Engine::Fast,
            EngineArg::Candle => Engine::Candle,
        }
    }
}

struct Progress {
    bar: Option<Bar>,
    quiet: bool,
}

impl Observer for Progress {
    fn on_start(&mut self, start_step: usize, total: usize) {
        if start_step > 0 {
            eprintln!("resuming at step {start_step} of {total}");
        }
        if !self.quiet {
            let bar = Bar::new(total as u64, "training");
            bar.set_position(start_step as u64);
            self.bar = Some(bar);
        }
    }

    fn on_step(&mut self, r: &StepReport) -> ControlFlow<()> {
        if let Some(bar) = &self.bar {
            bar.set_position(r.step as u64);
            bar.set_message(format!("loss {:.3} acc {:.3} lr {:.2e}", r.loss, r.accuracy, r.lr));
        }
        if super::signals::interrupted() {
            eprintln!("signal received: stopping after step {} with a checkpoint (send it again to quit now)", r.step);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn on_eval(&mut self, e: &EvalReport) {
        let line = format!(
            "eval step {:>6}: loss {:.4}  exact-match {:.2} %  token {:.2} %",
            e.step,
            e.loss,
            100.0 * e.accuracy,
            100.0 * e.token_accuracy
        );
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }
}

pub fn run(args: TrainArgs) -> anyhow::Result<ExitCode> {
    let mut config = match &args.config {
        Some(path) => RunConfig::from_file(path)?,
        None => RunConfig::recommended(),
    };
    if let Some(p) = &args.preset {
        config.model.preset = p.clone();
        config.model.spec = None;
    }
    if let Some(path) = &args.spec {
        config.model.set_kernel(phasekv::kernel::KernelSpec::from_file(path)?);
        // The spec's own errors (its name) name the spec file, not the config.
        config.model.kernel().map_err(|e| phasekv::Error::File { path: path.clone(), reason: e.to_string() })?;
    }
    if let Some(s) = args.steps {
        config.train.steps = s;
    }
    if let Some(s) = args.seed {
        config.train.seed = s;
    }
    if let Some(lr) = args.lr {
        config.train.lr = lr;
    }
    if let Some(e) = args.engine {
        config.train.engine = e.into();
    }
    match (&args.config, phasekv::model::validate(&config)) {
        (_, Ok(())) => {}
        (Some(path), Err(e)) => return Err(phasekv::Error::File { path: path.clone(), reason: e.to_string() }.into()),
        (None, Err(e)) => return Err(e.into()),
    }
    if args.print_config {
        println!("{}", serde_json::to_string_pretty(&config)?);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(steps) = args.bench {
        let b = phasekv::model::bench_steps(&config, 5, steps)?;
        let mut v = serde_json::to_value(&b)?;
        v["impl"] = format!("{}-f32", b.engine).into();
        v["peak_rss_mib"] = peak_rss_mib().map(Into::into).unwrap_or(serde_json::Value::Null);
        v["threads"] = std::env::var("RAYON_NUM_THREADS").ok().into();
        println!("{v}");
        return Ok(ExitCode::SUCCESS);
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("runs/{}-seed{}", config.model.preset, config.train.seed)));
    let mut progress = Progress { bar: None, quiet: args.quiet };
    let env = serde_json::json!({ "command": std::env::args().collect::<Vec<_>>() });
    // A diverged run is an error that main() turns into exit status 1, nothing marked finished.
    let outcome = phasekv::model::train(&config, &out, env, &mut progress)?;
    if let Some(bar) = &progress.bar {
        bar.finish();
    }
    match outcome {
        Outcome::Finished(m) => {
            println!(
                "{}: exact-match accuracy {:.2} % after {} steps (best {:.2} %, chance in context {:.2} %), {:.1} min, {:.0} tokens/s; run in {}",
                m.preset,
                100.0 * m.final_eval.accuracy,
                m.steps,
                100.0 * m.best_accuracy,
                100.0 * m.chance_in_context,
                m.train_seconds / 60.0,
                m.tokens_per_second,
                out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Interrupted { step } => {
            println!("stopped after {step} steps with a checkpoint; rerun the same command to resume");
            Ok(super::signals::interrupted_exit_code())
        }
    }
}

/// Peak resident memory of this process (Linux `VmHWM`), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
