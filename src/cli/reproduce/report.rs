//! `phasekv report`: the claims ledger rebuilt from run data ([`phasekv::report::ledger`]).

use super::*;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Reproduction outputs to read (repeatable; shards merge). Default: the --out directory.
    #[arg(long)]
    from: Vec<PathBuf>,
    /// Where to write README.md, ledger.json and figures/.
    #[arg(long, default_value = "reports")]
    out: PathBuf,
}

pub(super) fn print_claims(claims: &[ledger::Claim]) {
    for c in claims {
        println!("{:<3} {:<15} {}", c.id, c.verdict.word(), c.claim);
    }
}

pub fn report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let from = if args.from.is_empty() { vec![args.out.clone()] } else { args.from.clone() };
    let claims = ledger::build_report(&from, &args.out)?;
    print_claims(&claims);
    println!("report: {}", args.out.join("README.md").display());
    Ok(ExitCode::SUCCESS)
}
