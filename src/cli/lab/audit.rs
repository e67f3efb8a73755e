//! `phasekv audit export|analyze`: the phase audit of a model that lives elsewhere.

use super::args::ProtocolArg;
use super::print::{print_profile, print_statistics};
use clap::Subcommand;
use phasekv::analysis::audit::{export_jsonl, TextTemplate};
use phasekv::analysis::protocol::{self, Protocol};
use phasekv::lab::{self, LabSettings};
use phasekv::model::RunConfig;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum AuditCmd {
    /// Write a protocol's prompts as JSONL (token ids, text, group, positions, answer).
    Export {
        /// Padding protocol.
        #[arg(long, value_enum, default_value_t = ProtocolArg::InSequence)]
        protocol: ProtocolArg,
        /// Prompts per residue group.
        #[arg(long, default_value_t = LabSettings::default().eval_per_group)]
        samples: usize,
        /// Seed of the prompts.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// JSON config whose `task` section defines the task (default: the default task).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Filler word of the text rendering.
        #[arg(long, default_value = "the")]
        filler: String,
        /// Record template of the text rendering ({key}, {value}).
        #[arg(long, default_value = "{key}:{value}")]
        record: String,
        /// Query template of the text rendering ({key}).
        #[arg(long, default_value = "{key}?")]
        query: String,
        /// Output JSONL file (never overwritten).
        #[arg(long)]
        out: PathBuf,
        /// Only families whose scored target lies at this depth or deeper (the families a v3
        /// run scores beyond its floor `D`, theory/phase-lab.md §9.2; needs
        /// `task.query_placement` "after_records").
        #[arg(long, value_name = "D")]
        beyond: Option<usize>,
    },
    /// Phase statistics and plot of per-sample results (JSONL with group and correct or prob).
    Analyze {
        /// Results JSONL.
        results: PathBuf,
        /// Residue modulus M of the groups.
        #[arg(long, default_value_t = 24)]
        modulus: usize,
        /// Stride to fold phases by (optional).
        #[arg(long)]
        stride: Option<usize>,
        /// Output directory (default: next to the results, `<name>.audit/`); must not exist.
        #[arg(long)]
        out: Option<PathBuf>,
        /// The prompts JSONL that `audit export` wrote: every result's id must be one of its
        /// ids, with its group.
        #[arg(long)]
        export: Option<PathBuf>,
        /// Seed of the permutation test.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

pub fn audit(cmd: AuditCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        AuditCmd::Export { protocol, samples, seed, config, filler, record, query, out, beyond } => {
            let protocol = Protocol::from(protocol);
            let task = match &config {
                Some(path) => {
                    let task = RunConfig::from_file(path)?.task;
                    task.validate().map_err(|e| phasekv::Error::File { path: path.clone(), reason: e.to_string() })?;
                    task
                }
                None => RunConfig::default().task,
            };
            lab::check_samples("--samples", samples, task.residue_modulus, task.seq_len())?;
            if out.exists() {
                anyhow::bail!("{}: exists; results are never overwritten (choose another --out)", out.display());
            }
            let depths = beyond.map_or(protocol::Depths::ALL, protocol::Depths::beyond);
            let prompts = protocol::generate_in(&task, protocol, samples, seed, depths)?;
            let tpl = TextTemplate { filler, record, query };
            let text = export_jsonl(&task, protocol, &prompts, &tpl)?;
            phasekv::run_dir::write_new(&out, text.as_bytes())?;
            let b = protocol::balance(&prompts, task.residue_modulus);
            println!(
                "wrote {} {} prompts ({} per group, M = {}) to {}; target-position balance: mean spread {:.2} tokens, std spread {:.1} %",
                prompts.len(),
                protocol.name(),
                samples,
                task.residue_modulus,
                out.display(),
                b.mean_spread,
                100.0 * b.std_spread
            );
        }
        AuditCmd::Analyze { results, modulus, stride, out, export, seed } => {
            let out = out.unwrap_or_else(|| results.with_extension("audit"));
            let a = lab::audit_analyze(
                &results,
                modulus,
                stride,
                seed,
                &out,
                export.as_deref(),
                &crate::cli::signals::stop(),
            )?;
            print_profile(&format!("audit of {}", results.display()), None, &a.profile);
            match &a.statistics {
                Some(st) => print_statistics(st),
                None => {
                    println!("  (give --export and --stride for the depth-controlled phase test: positions come from the export)")
                }
            }
            let extra = if a.statistics.is_some() { ",statistics.json" } else { "" };
            println!("  written: {}/{{profile.json{extra},groups.csv,phase.svg,phase.png}}", out.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
