//! The binary's entry point: the command line parsed by clap, each subcommand run, errors as
//! one line.

use super::signals::{install_interrupt_handler, interrupted_by, interrupted_exit_code};
use super::{kernel, lab, reproduce, theory, train};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

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

/// Whether a panic's payload is `print!`'s on a closed stdout (`phasekv ... | head -1`).
fn is_closed_stdout(payload: &(dyn std::any::Any + Send)) -> bool {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    text.starts_with("failed printing to stdout") && text.contains("Broken pipe")
}

/// Entry point: one-line errors, exit status 2 for bad input. A closed stdout (the reader of a
/// pipe went away) is a quiet exit 141, as a shell reports SIGPIPE: the print's panic is caught
/// silently after unwinding, so every destructor (kernel processes, temporary files) still runs.
pub fn main() -> ExitCode {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_closed_stdout(info.payload()) {
            default_hook(info)
        }
    }));
    match std::panic::catch_unwind(run) {
        Ok(code) => code,
        Err(payload) if is_closed_stdout(payload.as_ref()) => ExitCode::from(141),
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

/// The command line parsed by clap; help and version print as clap prints them, and a usage
/// error is one line (its message and the allowed values, without clap's usage block), exit 2.
fn parse() -> Result<Cli, ExitCode> {
    Cli::try_parse().map_err(|e| {
        if !e.use_stderr() {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        let text = e.render().to_string();
        let line: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information"))
            .collect();
        eprintln!("{}", line.join(" "));
        ExitCode::from(2)
    })
}

fn run() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
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
        Err(err)
            if err
                .chain()
                .any(|e| matches!(e.downcast_ref::<phasekv::Error>(), Some(phasekv::Error::Interrupted { .. }))) =>
        {
            eprintln!("interrupted by {}: {err:#}", interrupted_by().0);
            interrupted_exit_code()
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            // A run that diverged is a failed run (exit 1), not bad input (exit 2), whichever
            // command (train, reproduce) was training it.
            let diverged = err
                .chain()
                .any(|e| matches!(e.downcast_ref::<phasekv::Error>(), Some(phasekv::Error::Diverged { .. })));
            ExitCode::from(if diverged { 1 } else { 2 })
        }
    }
}
