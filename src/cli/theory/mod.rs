//! `phasekv theory t1|t2|diagram|loss`: parse options, check every size against
//! `phasekv::theory::limits` before anything is written, call `phasekv::theory`, write a run
//! directory with config, JSON results and SVG+PNG figures, and print a short summary
//! (`loss` only prints).

mod diagram;
mod loss;
mod t1;
mod t2;

pub use diagram::DiagramArgs;
pub use loss::LossArgs;
pub use t1::T1Args;
pub use t2::T2Args;

use super::progress::Progress;
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use phasekv::figures::theory as figures;
use phasekv::numeric::wilson95;
use phasekv::run_dir::RunDir;
use phasekv::theory::diagram::check_grid;
use phasekv::theory::diagram::{compare_with_reference, phase_diagram, spec_grid};
use phasekv::theory::flow::{run_seeds, summarise, ContentOptions, FlowConfig, Integrator};
use phasekv::theory::limits;
use phasekv::theory::oracle::{iteration_log_jsonl, plan_len, planned_steps, theorem1_logged, OracleOptions};
use phasekv::theory::task::TaskParams;
use phasekv::theory::theorem2::{self, T2Results};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Theory-engine commands.
#[derive(Subcommand, Debug)]
pub enum TheoryCommand {
    /// Theorem 1: minimise the population loss over the oracle class (L-BFGS, many restarts).
    T1(T1Args),
    /// Theorem 2: gradient flow on static gates from small random initialisation, many seeds.
    T2(T2Args),
    /// The Theorem 1 phase diagram over (beta, gamma).
    Diagram(DiagramArgs),
    /// Evaluate F (T-4), its gradient (T-5) and the point's classification at gates from a file.
    Loss(LossArgs),
}

/// Task parameters shared by every command (spec §6 defaults).
#[derive(Args, Debug, Clone)]
pub struct ParamOpts {
    /// Compression stride S.
    #[arg(long = "stride", short = 'S', default_value_t = 4)]
    stride: usize,
    /// Number of heads H (1 <= H < S).
    #[arg(long = "heads", short = 'H', default_value_t = 2)]
    heads: usize,
    /// Number of chunks L.
    #[arg(long = "chunks", short = 'L', default_value_t = 4)]
    chunks: usize,
    /// Vocabulary size N (>= L*S).
    #[arg(long = "vocab", short = 'N', default_value_t = 64)]
    vocab: usize,
    /// Attention inverse temperature beta.
    #[arg(long, default_value_t = 2.0)]
    beta: f64,
    /// Readout scale gamma.
    #[arg(long, default_value_t = 2.0)]
    gamma: f64,
    /// Common component kappa of the geometry (cancels at eps = 0).
    #[arg(long, default_value_t = 1.0)]
    kappa: f64,
}

impl ParamOpts {
    /// The parameters, checked against the limits (theory/induction-model.md §9).
    fn params(&self) -> Result<TaskParams> {
        let p = TaskParams {
            stride: self.stride,
            heads: self.heads,
            chunks: self.chunks,
            vocab: self.vocab,
            beta: self.beta,
            gamma: self.gamma,
            kappa: self.kappa,
        };
        limits::check_task(&p)?;
        Ok(p)
    }
}

/// Task parameters, seed and output directory of the commands that write a run.
#[derive(Args, Debug, Clone)]
pub struct TaskOpts {
    #[command(flatten)]
    params: ParamOpts,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output run directory (default: runs/theory/<cmd>-<params>-<unix time>).
    #[arg(long)]
    out: Option<PathBuf>,
}

impl TaskOpts {
    fn params(&self) -> Result<TaskParams> {
        self.params.params()
    }
    fn out_dir(&self, cmd: &str) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            let t =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            PathBuf::from(format!(
                "runs/theory/{cmd}-S{}-H{}-L{}-N{}-b{}-g{}-seed{}-{t}",
                self.params.stride,
                self.params.heads,
                self.params.chunks,
                self.params.vocab,
                self.params.beta,
                self.params.gamma,
                self.seed
            ))
        })
    }
}

fn bar(len: u64, label: &str) -> Progress {
    Progress::new(len, label)
}

/// Called from every progress callback: after SIGINT, SIGTERM or SIGHUP (the handler installed
/// in `cli::main` only sets a flag) a theory command stops at its next unit of work, leaving its
/// run directory unfinished (no DONE), with exit status 130, 143 or 129.
fn stop_if_interrupted() {
    if super::interrupted() {
        let code = i32::from(super::interrupted_by().1);
        eprintln!("interrupted: stopped; the run directory is left unfinished (no DONE)");
        std::process::exit(code);
    }
}

/// Run a theory command.
pub fn run(cmd: TheoryCommand) -> Result<ExitCode> {
    match cmd {
        TheoryCommand::T1(a) => t1::t1(a),
        TheoryCommand::T2(a) => t2::t2(a),
        TheoryCommand::Diagram(a) => diagram::diagram(a),
        TheoryCommand::Loss(a) => loss::loss(a),
    }
}

/// `x` as a plain number (no `Some(..)`), `-` for none.
fn num(x: Option<f64>) -> String {
    x.map(|v| format!("{v}")).unwrap_or_else(|| "-".into())
}

/// `k/n = pct % (95 % Wilson interval lo-hi %)`.
fn rate(k: usize, n: usize) -> String {
    let (lo, hi) = wilson95(k, n);
    let pct = if n > 0 { 100.0 * k as f64 / n as f64 } else { 0.0 };
    format!("{k}/{n} = {pct:.1} % (95 % Wilson {:.1}-{:.1} %)", 100.0 * lo, 100.0 * hi)
}
