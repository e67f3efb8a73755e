//! `phasekv eval`, `phasekv analyze knockout|gates|upgrade|power` and `phasekv audit export|analyze`: the
//! phase lab on trained runs and on external results. Thin: parse, call [`phasekv::lab`],
//! print.

mod args;
mod audit;
mod print;

pub use audit::{audit, AuditCmd};

use super::progress::Progress;
use args::ProtocolArg;
use clap::{Args, Subcommand, ValueEnum};
use phasekv::analysis::eval::Intervention;
use phasekv::analysis::protocol::Protocol;
use phasekv::lab::{self, LabSettings};
use print::{print_profile, print_statistics};
use std::path::PathBuf;
use std::process::ExitCode;

/// A knockout intervention on the command line (`kv-head`, `window-slot`).
#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum InterventionArg {
    /// One KV head's haystack entries.
    KvHead,
    /// One window slot's gated contribution to every entry of a layer.
    WindowSlot,
}

impl From<InterventionArg> for Intervention {
    fn from(i: InterventionArg) -> Self {
        match i {
            InterventionArg::KvHead => Intervention::KvHead,
            InterventionArg::WindowSlot => Intervention::WindowSlot,
        }
    }
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A finished run directory (from `phasekv train`).
    run: PathBuf,
    /// Padding protocol.
    #[arg(long, value_enum, default_value_t = ProtocolArg::InSequence)]
    protocol: ProtocolArg,
    /// Prompts per residue group.
    #[arg(long, default_value_t = LabSettings::default().eval_per_group)]
    samples: usize,
    /// Seed of the prompts and the permutation test.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Only families whose scored target lies at depth D or deeper, as a v3 run scores them
    /// beyond its floor (theory/phase-lab.md §9.2); D may not lie in front of the run's own
    /// depth floor.
    #[arg(long, value_name = "D")]
    beyond: Option<usize>,
    /// The near-query families instead: depth in front of the run's own floor, written as
    /// `near-<protocol>.*` with no phase test (§9.2's near-query measurement).
    #[arg(long, conflicts_with = "beyond")]
    near: bool,
}

#[derive(Subcommand, Debug)]
pub enum AnalyzeCmd {
    /// Knockouts by mean replacement: accuracy drop per (layer, KV head) and residue group.
    Knockout {
        /// A finished run directory.
        run: PathBuf,
        /// Prompts per residue group.
        #[arg(long, default_value_t = LabSettings::default().knockout_per_group)]
        samples: usize,
        /// Padding protocol of the prompts.
        #[arg(long, value_enum, default_value_t = ProtocolArg::InSequence)]
        protocol: ProtocolArg,
        /// Same-layout reference prompts per prompt for the mean.
        #[arg(long, default_value_t = LabSettings::default().knockout_reference)]
        reference: usize,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// What a row replaces: kv-head (one KV head's haystack entries) or window-slot (one
        /// window slot's gated contribution to every entry of a layer, theory/phase-lab.md §8.9).
        #[arg(long, value_enum, default_value_t = InterventionArg::KvHead)]
        intervention: InterventionArg,
        /// Only families whose scored target lies at depth D or deeper (not in front of the
        /// run's own depth floor; theory/phase-lab.md §9.2).
        #[arg(long, value_name = "D")]
        beyond: Option<usize>,
    },
    /// Gate cycling (theory/gate-cycling.md): the KV heads of one layer get their per-offset
    /// compressor parameters moved by k offsets; the phase profile of each k beside the uncycled one.
    Cycle {
        /// A finished run directory.
        run: PathBuf,
        /// The layer whose heads are cycled.
        #[arg(long)]
        layer: usize,
        /// Cycle only this KV head (default: every KV head of the layer together).
        #[arg(long)]
        head: Option<usize>,
        /// Cycle amounts, comma-separated (default: 1 to W - 1).
        #[arg(long, value_delimiter = ',')]
        k: Vec<usize>,
        /// Prompts per residue group.
        #[arg(long, default_value_t = LabSettings::default().knockout_per_group)]
        samples: usize,
        /// Padding protocol of the prompts.
        #[arg(long, value_enum, default_value_t = ProtocolArg::InSequence)]
        protocol: ProtocolArg,
        /// Seed of the prompts.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Only families whose scored target lies at depth D or deeper (not in front of the
        /// run's own depth floor; theory/phase-lab.md §9.2).
        #[arg(long, value_name = "D")]
        beyond: Option<usize>,
    },
    /// Gate preferences (static vs input-dependent concentration) at every saved checkpoint.
    Gates {
        /// A finished run directory.
        run: PathBuf,
        /// Sequences whose windows are averaged over.
        #[arg(long, default_value_t = LabSettings::default().gate_samples)]
        samples: usize,
        /// Seed of the sequences.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Add the per-line columns (arm, preset, training seed, protocol, family, phase) to the
    /// outcome files of runs evaluated before they were written, and name the evaluation JSON's
    /// seed `eval_seed`, from each run's own metadata (no model needed; idempotent).
    Upgrade {
        /// Run directories.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
    },
    /// Write the provenance manifest (`manifest.json`: every result file's hash, size and line
    /// count) of run directories that have none (hand-made, or written before manifests), after
    /// checking their data as `report` does; a run whose data or manifest is inconsistent is
    /// refused and nothing is written.
    Manifest {
        /// Run directories.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
    },
    /// Power from a run's per-seed effects (issue 38, theory/power.md): per claim with a
    /// magnitude or threshold (E4, E5, X1), the seeds a seed-level interval needs to decide and
    /// the prompts per seed beyond which more stop helping. Prints a Markdown table.
    Power {
        /// Reproduction outputs to read (repeatable; shards merge), e.g. `reports`.
        #[arg(long, required = true)]
        from: Vec<PathBuf>,
        /// Stage-2 redraws per seed for the within-seed variances.
        #[arg(long, default_value_t = phasekv::report::ledger::POWER_ROUNDS)]
        rounds: usize,
    },
}

fn bar(label: &str) -> impl FnMut(usize, usize) {
    let mut bar: Option<Progress> = None;
    let label = label.to_string();
    move |done, total| {
        let b = bar.get_or_insert_with(|| Progress::new(total as u64, &label));
        b.set_position(done as u64);
        if done >= total {
            b.finish();
        }
    }
}

pub fn eval(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let protocol = Protocol::from(args.protocol);
    let scope = lab::Scope::from_args(&args.run, args.beyond, args.near)?;
    let r =
        lab::eval_run(&args.run, protocol, args.samples, args.seed, scope, &mut bar("eval"), &super::signals::stop())?;
    print_profile(
        &format!("{} ({}), {} padding, {} prompts", r.preset, args.run.display(), protocol.name(), r.profile.n),
        Some(&r.balance),
        &r.profile,
    );
    if let Some(gap) = r.balance.depth_cdf_gap {
        println!("  depth distribution: largest CDF difference between a group and the pool {gap:.3}");
    }
    if let Some(e) = r.elimination_baseline {
        println!("  elimination-only baseline {:.1} %", 100.0 * e);
    }
    if let Some(st) = &r.statistics {
        print_statistics(st);
    }
    println!("  written: {}/{}.{{json,csv,svg,png}}", args.run.display(), scope.eval_stem(protocol));
    Ok(ExitCode::SUCCESS)
}

pub fn analyze(cmd: AnalyzeCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        AnalyzeCmd::Power { from, rounds } => {
            let c = phasekv::report::ledger::collect(&from)?;
            let t = phasekv::report::ledger::power_table(&c, rounds)?;
            println!("{}", t.markdown());
            return Ok(ExitCode::SUCCESS);
        }
        AnalyzeCmd::Knockout { run, samples, protocol, reference, seed, intervention, beyond } => {
            let protocol = Protocol::from(protocol);
            let scope = lab::Scope::from_args(&run, beyond, false)?;
            let intervention = Intervention::from(intervention);
            let (bar, stop) = (&mut bar("knockout"), &super::signals::stop());
            let r = lab::knockout_run(&run, protocol, samples, reference, seed, intervention, scope, bar, stop)?;
            println!(
                "{}: {} knockouts, {} prompts per group, {} references each",
                r.preset,
                intervention.name(),
                samples,
                reference
            );
            for row in &r.map.rows {
                let d: Vec<String> = row.drop_pp.iter().map(|d| format!("{d:.0}")).collect();
                let entries = row.replaced_entries.unwrap_or(r.map.replaced_entries);
                println!(
                    "  {} ({entries} entries) mean drop {:5.1} pp | {}",
                    row.label(),
                    row.mean_drop_pp,
                    d.join(" ")
                );
            }
            println!("  written: {}/{}.{{json,csv,svg,png}}", run.display(), lab::knockout_stem(protocol));
        }
        AnalyzeCmd::Cycle { run, layer, head, k, samples, protocol, seed, beyond } => {
            let protocol = Protocol::from(protocol);
            let ks = if k.is_empty() { (1..lab::run_window(&run, layer)?).collect() } else { k };
            let (bar, stop) = (&mut bar("cycle"), &super::signals::stop());
            let scope = lab::Scope::from_args(&run, beyond, false)?;
            let r = lab::cycle_run(&run, protocol, samples, seed, layer, head, &ks, scope, bar, stop)?;
            let c = &r.cycle;
            println!(
                "{}: layer {} heads {:?} cycled, W {} S {}, {} prompts per group; uncycled weakest phase {}",
                r.preset, c.layer, c.heads, c.window, c.stride, samples, c.weakest_phase
            );
            for row in &c.rows {
                let p: Vec<String> = row.phases.iter().map(|p| format!("{:.0}", 100.0 * p.accuracy)).collect();
                let lag = row.lag.map(|l| l.to_string()).unwrap_or_else(|| "-".into());
                println!(
                    "  k {:>3}: phases (%) {} | lag {lag} (k mod S = {}) | weakest phase {:.1} % vs others {:.1} %",
                    row.k,
                    p.join(" "),
                    row.k % c.stride,
                    100.0 * row.weakest_accuracy,
                    100.0 * row.others_mean
                );
            }
            println!("  written: {}/{}.{{json,csv}}", run.display(), lab::cycle_stem(protocol, layer));
        }
        AnalyzeCmd::Upgrade { runs } => {
            let report = lab::outcomes::upgrade_runs(&runs, &crate::cli::signals::interrupted)?;
            for (run, u) in &report.runs {
                if u.files.is_empty() {
                    println!("{}: already upgraded", run.display());
                } else {
                    println!(
                        "{}: {} outcome lines given columns; rewritten: {}",
                        run.display(),
                        u.lines,
                        u.files.join(", ")
                    );
                }
            }
            if report.stale_removed > 0 {
                println!("removed {} stale temporary file(s) of killed writers", report.stale_removed);
            }
            if report.stopped {
                let (name, _) = crate::cli::signals::interrupted_by();
                eprintln!("stopped by {name}: every file is old or new; run the same command again to finish");
                return Ok(crate::cli::signals::interrupted_exit_code());
            }
        }
        AnalyzeCmd::Manifest { runs } => {
            for run in &runs {
                match phasekv::reproduce::write_manifest(run)? {
                    None => println!("{}: manifest.json already there and verified", run.display()),
                    Some(n) => println!("{}: manifest.json written ({n} result files)", run.display()),
                }
            }
        }
        AnalyzeCmd::Gates { run, samples, seed } => {
            match lab::gates_run(&run, samples, seed, &mut bar("gates"), &super::signals::stop())? {
                None => println!("{}: full attention has no gates", run.display()),
                Some(r) => {
                    println!(
                        "{}: gate preferences over {} checkpoints (W = {})",
                        r.preset,
                        r.snapshots.len(),
                        r.window
                    );
                    if let (Some(first), Some(last)) = (r.snapshots.first(), r.snapshots.last()) {
                        for g in &last.gates {
                            let g0 = first
                                .gates
                                .iter()
                                .find(|x| x.layer == g.layer && x.head == g.head && x.branch == g.branch);
                            let peak = g
                                .profile
                                .iter()
                                .enumerate()
                                .max_by(|a, b| a.1.total_cmp(b.1))
                                .map(|p| p.0)
                                .unwrap_or(0);
                            println!(
                            "  L{}.H{} {:?}: static {:.2} (step {}: {:.2}), input-dependent {:.2}, peak offset {peak}",
                            g.layer,
                            g.head,
                            g.branch,
                            g.static_concentration,
                            first.step,
                            g0.map(|x| x.static_concentration).unwrap_or(f64::NAN),
                            g.input_concentration
                        );
                        }
                    }
                    println!(
                        "  written: {}/gates.{{json,csv}}, gates-{{scatter,trajectory,profile}}.{{svg,png}}",
                        run.display()
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
