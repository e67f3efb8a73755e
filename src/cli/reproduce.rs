//! `phasekv reproduce` and `phasekv report`: thin wrappers over [`phasekv::reproduce`] and
//! [`phasekv::report::ledger`].

use super::progress::Progress as Bar;
use clap::Args;
use phasekv::model::train::Observer;
use phasekv::model::{EvalReport, StepReport};
use phasekv::report::ledger;
use phasekv::reproduce::{self, Plan, Progress, Scale};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct ReproduceArgs {
    /// Small scale (two models, fewer steps and prompts): a smoke run in a few minutes.
    #[arg(long)]
    quick: bool,
    /// Output directory (default `reports/`, or `reports-quick/` with --quick).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run only part i of n (0-based), e.g. `--shard 0/4` in an array job; merge with
    /// `phasekv report --from DIR --from DIR ...`.
    #[arg(long)]
    shard: Option<String>,
    /// Print the plan as JSON and exit.
    #[arg(long)]
    print_plan: bool,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Reproduction outputs to read (repeatable; shards merge). Default: the --out directory.
    #[arg(long)]
    from: Vec<PathBuf>,
    /// Where to write README.md, ledger.json and figures/.
    #[arg(long, default_value = "reports")]
    out: PathBuf,
}

struct Bars {
    bar: Option<Bar>,
    stage: String,
}

impl Bars {
    fn bar(&mut self, stage: &str, total: usize) -> &Bar {
        if self.stage != stage || self.bar.is_none() {
            if let Some(b) = self.bar.take() {
                b.finish();
            }
            self.stage = stage.to_string();
        }
        self.bar.get_or_insert_with(|| Bar::new(total as u64, stage))
    }
}

impl Observer for Bars {
    fn on_start(&mut self, start: usize, total: usize) {
        self.bar("training", total).set_position(start as u64);
    }
    fn on_step(&mut self, r: &StepReport) -> ControlFlow<()> {
        let b = self.bar("training", r.total);
        b.set_position(r.step as u64);
        if super::interrupted() {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
    fn on_eval(&mut self, e: &EvalReport) {
        let line = format!("  eval step {:>5}: exact match {:.1} %", e.step, 100.0 * e.accuracy);
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }
}

impl Progress for Bars {
    fn message(&mut self, msg: &str) {
        if let Some(b) = self.bar.take() {
            b.finish();
        }
        eprintln!("{msg}");
    }
    fn trainer(&mut self) -> &mut dyn Observer {
        self
    }
    fn step(&mut self, stage: &str, done: usize, total: usize) {
        self.bar(stage, total).set_position(done as u64);
    }
}

pub fn reproduce(args: ReproduceArgs) -> anyhow::Result<ExitCode> {
    let scale = if args.quick { Scale::Quick } else { Scale::Full };
    let plan = Plan::new(scale);
    if args.print_plan {
        println!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(ExitCode::SUCCESS);
    }
    let out = args.out.unwrap_or_else(|| PathBuf::from(if args.quick { "reports-quick" } else { "reports" }));
    let (i, n) = match &args.shard {
        Some(s) => reproduce::parse_shard(s)?,
        None => (0, 1),
    };
    reproduce::write_plan(&out, &plan)?;
    let units = reproduce::shard(&plan.units(), i, n);
    let names: Vec<String> = units.iter().map(|u| u.name()).collect();
    eprintln!("reproduce ({scale:?}, shard {i}/{n}) into {}: {}", out.display(), names.join(", "));
    let t0 = Instant::now();
    let mut bars = Bars { bar: None, stage: String::new() };
    let mut worked = false;
    for u in &units {
        let done = reproduce::run_unit(&out, &plan, u, &mut bars);
        if super::interrupted() {
            bars.message("interrupted: finished units and checkpoints are kept; rerun the same command to continue");
            return Ok(super::interrupted_exit_code());
        }
        worked |= done?;
    }
    bars.message(&format!("all units of shard {i}/{n} done in {:.1} min", t0.elapsed().as_secs_f64() / 60.0));
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let timing = serde_json::json!({
        "shard": format!("{i}/{n}"),
        "units": names,
        "wall_seconds": t0.elapsed().as_secs_f64(),
        "rayon_threads": std::env::var("RAYON_NUM_THREADS").ok(),
        "cpus": std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1),
    });
    // Wall time of invocations that did work (a rerun that only reuses results records nothing).
    if worked {
        let tdir = out.join("timing");
        std::fs::create_dir_all(&tdir)?;
        phasekv::run_dir::atomic_write(
            &tdir.join(format!("{stamp}-shard-{i}-of-{n}.json")),
            format!("{}\n", serde_json::to_string_pretty(&timing)?).as_bytes(),
        )?;
    }
    let claims = ledger::build_report(std::slice::from_ref(&out), &out)?;
    print_claims(&claims);
    println!("report: {}", out.join("README.md").display());
    if n > 1 {
        println!("(shard {i}/{n}: merge all shards with `phasekv report --from DIR --from DIR ... --out reports`)");
    }
    Ok(ExitCode::SUCCESS)
}

fn print_claims(claims: &[ledger::Claim]) {
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
