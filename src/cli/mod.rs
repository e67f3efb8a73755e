//! Command-line parsing. Each subcommand lives in its own file and is thin: it parses options,
//! calls the library, and prints.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod kernel;
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
}

/// Entry point: one-line errors, exit status 2 for bad input.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: anyhow::Result<ExitCode> = match cli.command {
        Command::Kernel(cmd) => kernel::run(cmd),
        Command::Theory(cmd) => theory::run(cmd),
        Command::Train(args) => train::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
