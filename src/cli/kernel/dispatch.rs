//! Runs one `phasekv kernel` subcommand.

use super::args::KernelCmd;
use super::{bench, check, study};
use phasekv::kernel::spec::presets;
use phasekv::kernel::KernelSpec;
use std::process::ExitCode;

pub fn run(cmd: KernelCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        KernelCmd::List { json: Some(name) } => {
            println!("{}", serde_json::to_string_pretty(&KernelSpec::named(Some(&name), None)?)?);
        }
        KernelCmd::List { json: None } => {
            for p in presets::ALL {
                println!("{:<16} {:<9} {}", p.name, p.family.name(), p.spec()?.describe());
                println!("{:<26} {}", "", p.about);
            }
            println!(
                "(any w{{W}}s{{S}} with 1 <= S <= W is accepted, with the same suffixes; dsv4-hca{{m}} and dsv41-c{{m}} too)"
            );
        }
        KernelCmd::Study(args) => return study::run(args),
        KernelCmd::Validate { dump, dtype, report } => {
            return crate::cli::validate::run(&dump, dtype.as_deref(), report.as_ref())
        }
        KernelCmd::Bench { preset, tokens, d_model, d_head, r#impl, seconds, json } => {
            bench::run(&preset, &tokens, d_model, d_head, r#impl, seconds, json)?
        }
        KernelCmd::Check {
            preset,
            spec,
            r#impl,
            dtype,
            cases,
            seed,
            mutant,
            external,
            failures,
            shrink,
            reply_timeout,
            budget,
        } => {
            let dtype = dtype.candle();
            let opts = check::Options { r#impl, dtype, cases, seed, mutant, failures, shrink, reply_timeout, budget };
            return check::run(preset, spec, external, &opts);
        }
    }
    Ok(ExitCode::SUCCESS)
}
