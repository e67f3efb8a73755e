//! `phasekv theory t1|t2|diagram|loss`: parse options, check every size against
//! `phasekv::theory::limits` before anything is written, call `phasekv::theory`, write a run
//! directory with config, JSON results and SVG+PNG figures, and print a short summary
//! (`loss` only prints).

mod diagram;
mod loss;
mod opts;
mod t1;
mod t2;

pub use diagram::DiagramArgs;
pub use loss::LossArgs;
pub use t1::T1Args;
pub use t2::T2Args;

use anyhow::Result;
use clap::Subcommand;
use std::process::ExitCode;

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

/// Run a theory command.
pub fn run(cmd: TheoryCommand) -> Result<ExitCode> {
    match cmd {
        TheoryCommand::T1(a) => t1::t1(a),
        TheoryCommand::T2(a) => t2::t2(a),
        TheoryCommand::Diagram(a) => diagram::diagram(a),
        TheoryCommand::Loss(a) => loss::loss(a),
    }
}
