//! Command-line parsing. Each subcommand lives in its own file and is thin: it parses options,
//! calls the library, and prints.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the first Ctrl-C: long runs stop after the current step, with a checkpoint, and the
/// same command resumes them. A second Ctrl-C exits at once.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether Ctrl-C was pressed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Exit status of a run stopped by Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

fn install_interrupt_handler() {
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            std::process::exit(EXIT_INTERRUPTED as i32);
        }
        eprintln!("\ninterrupt: stopping after the current step with a checkpoint (Ctrl-C again to quit now)");
    });
}

mod kernel;
mod lab;
mod reproduce;
mod theory;
mod train;
mod validate;

/// phasekv: phase sensitivity in chunked KV-cache compression.
#[derive(Parser, Debug)]
#[command(name = "phasekv", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Compression kernels: list presets, check invariants, validate dumps.
    #[command(subcommand)]
    Kernel(kernel::KernelCmd),
    /// The theory engine: Theorem 1 (oracle), Theorem 2 (gradient flow), phase diagram.
    #[command(subcommand)]
    Theory(theory::TheoryCommand),
    /// Train a small decoder with a kernel preset on the retrieval task.
    Train(train::TrainArgs),
    /// Evaluate a trained run under a padding protocol: per-group accuracy and phase statistics.
    Eval(lab::EvalArgs),
    /// Mechanistic analyses of a trained run: knockout maps, gate preferences.
    #[command(subcommand)]
    Analyze(lab::AnalyzeCmd),
    /// Phase audit of a model that lives elsewhere: export prompts, analyze its results.
    #[command(subcommand)]
    Audit(lab::AuditCmd),
    /// Reproduce the paper's claims: theory, kernels, training, phase lab, then the report.
    Reproduce(reproduce::ReproduceArgs),
    /// Rebuild reports/ (ledger, figures) from existing run data only.
    Report(reproduce::ReportArgs),
}

/// Entry point: one-line errors, exit status 2 for bad input.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    install_interrupt_handler();
    let result: anyhow::Result<ExitCode> = match cli.command {
        Command::Kernel(cmd) => kernel::run(cmd),
        Command::Theory(cmd) => theory::run(cmd),
        Command::Train(args) => train::run(args),
        Command::Eval(args) => lab::eval(args),
        Command::Analyze(cmd) => lab::analyze(cmd),
        Command::Audit(cmd) => lab::audit(cmd),
        Command::Reproduce(args) => reproduce::reproduce(args),
        Command::Report(args) => reproduce::report(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
