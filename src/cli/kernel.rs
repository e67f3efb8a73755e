//! `phasekv kernel ...`
use clap::Subcommand;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum KernelCmd {
    /// List the presets with their knobs.
    List,
}

pub fn run(cmd: KernelCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        KernelCmd::List => {
            for name in phasekv::kernel::spec::preset_names() {
                let spec = phasekv::kernel::KernelSpec::preset(&name)?;
                println!("{name:<18} {}", spec.describe());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
