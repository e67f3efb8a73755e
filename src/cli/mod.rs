//! Command-line parsing. Each subcommand lives in its own file and is thin: it parses options,
//! calls the library, and prints.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// The signals that stop a run: SIGINT (Ctrl-C), SIGTERM (what Slurm and most schedulers send
/// at a time limit or on preemption) and SIGHUP (the terminal or ssh session went away), each
/// with its name and exit status (128 + its number). The first sets its flag: long runs stop
/// after the current step, with a checkpoint, and the same command resumes them;
/// `kernel check --external` stops at once. A second signal of the same kind exits at once.
const STOP_SIGNALS: [(i32, &str, u8); 3] = [
    (signal_hook::consts::SIGTERM, "SIGTERM", 143),
    (signal_hook::consts::SIGHUP, "SIGHUP", 129),
    (signal_hook::consts::SIGINT, "SIGINT", 130),
];

/// One flag per entry of [`STOP_SIGNALS`].
static SIGNALS: OnceLock<[Arc<AtomicBool>; 3]> = OnceLock::new();

fn signal_flags() -> &'static [Arc<AtomicBool>; 3] {
    SIGNALS.get_or_init(|| std::array::from_fn(|_| Arc::new(AtomicBool::new(false))))
}

/// Whether SIGINT, SIGTERM or SIGHUP was received.
pub fn interrupted() -> bool {
    signal_flags().iter().any(|f| f.load(Ordering::SeqCst))
}

/// The signal that stopped a run, by name, and the exit status to end with: 128 + its number
/// (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP; SIGTERM, then SIGHUP, winning when several
/// came). SIGINT's when none came.
pub fn interrupted_by() -> (&'static str, u8) {
    let flags = signal_flags();
    let i = (0..STOP_SIGNALS.len()).find(|&i| flags[i].load(Ordering::SeqCst)).unwrap_or(2);
    (STOP_SIGNALS[i].1, STOP_SIGNALS[i].2)
}

/// The stop check long library work polls ([`phasekv::stop::Stop`]): requested once a first
/// SIGINT, SIGTERM or SIGHUP came. The work then ends with `Error::Interrupted`, which [`run`]
/// turns into the signal's exit status.
pub fn stop() -> phasekv::stop::Stop {
    phasekv::stop::Stop::when(interrupted)
}

/// Exit status of a run stopped by a signal ([`interrupted_by`]).
pub fn interrupted_exit_code() -> ExitCode {
    ExitCode::from(interrupted_by().1)
}

fn install_interrupt_handler() {
    for ((sig, _, code), flag) in STOP_SIGNALS.iter().zip(signal_flags()) {
        // Order matters: the conditional shutdown sees the flag a first signal set and exits.
        let _ = signal_hook::flag::register_conditional_shutdown(*sig, *code as i32, Arc::clone(flag));
        let _ = signal_hook::flag::register(*sig, Arc::clone(flag));
    }
}

mod kernel;
mod lab;
mod progress;
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
