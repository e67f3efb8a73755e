//! `phasekv report`: the claims ledger rebuilt from run data ([`phasekv::report::ledger`]).

use clap::Args;
use phasekv::report::ledger;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Reproduction outputs to read (repeatable; shards merge). Default: the --out directory.
    #[arg(long)]
    from: Vec<PathBuf>,
    /// Where to write README.md, ledger.json and figures/.
    #[arg(long, default_value = "reports")]
    out: PathBuf,
    /// Accept unfinished runs (no metrics.json), refused otherwise; the report is marked
    /// partial in its banner and in ledger.json.
    #[arg(long)]
    partial: bool,
}

pub(super) fn print_claims(claims: &[ledger::Claim]) {
    for c in claims {
        println!("{:<3} {:<15} {}", c.id, c.verdict.word(), c.claim);
    }
}

/// Builds the report (the library's one way), stopping at the first SIGINT, SIGTERM or SIGHUP
/// with the old report left as it was; prints the claims.
pub(super) fn write_report(from: &[PathBuf], out: &Path, partial: bool) -> anyhow::Result<ExitCode> {
    let stop = crate::cli::signals::interrupted;
    match ledger::build_report_with(from, out, &ledger::ReportOptions { partial, stop: &stop })? {
        ledger::ReportOutcome::Written(claims) => {
            print_claims(&claims);
            println!("report: {}", out.join("README.md").display());
            Ok(ExitCode::SUCCESS)
        }
        ledger::ReportOutcome::Stopped => {
            eprintln!("{}: report stopped; {} is as it was", crate::cli::signals::interrupted_by().0, out.display());
            Ok(crate::cli::signals::interrupted_exit_code())
        }
    }
}

pub fn report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let from = if args.from.is_empty() { vec![args.out.clone()] } else { args.from.clone() };
    write_report(&from, &args.out, args.partial)
}
