//! `phasekv reproduce` and `phasekv report`: thin wrappers over [`phasekv::reproduce`] and
//! [`phasekv::report::ledger`].

mod bars;
mod jobs;
mod report;
mod slurm;

pub(crate) use bars::Bars;
pub use report::{report, ReportArgs};
use slurm::emit_slurm;

use clap::Args;
use phasekv::reproduce::{self, Plan, Progress, Scale};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct ReproduceArgs {
    /// Small scale (two models, fewer steps and prompts): a smoke run in a few minutes.
    #[arg(long, conflicts_with = "plan")]
    quick: bool,
    /// A plan file (JSON: presets, arms with config overrides, a sweep over named axes, seeds,
    /// lab settings, theory and kernel units); `--print-plan` writes one to start from.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Output directory (default `reports/`, `reports-quick/` with --quick, `reports-<name>/`
    /// with --plan <name>.json). Shards and array tasks may share it.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run only part i of n (0-based), e.g. `--shard 0/4`; `slurm` takes i and n from
    /// SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT. Merge with `phasekv report`.
    #[arg(long, conflicts_with = "unit")]
    shard: Option<String>,
    /// Run only this unit (repeatable; ids from --list-units, e.g. `model:w8s4-seed0`).
    #[arg(long, value_name = "ID")]
    unit: Vec<String>,
    /// Print the plan as JSON (a plan file) and exit.
    #[arg(long)]
    print_plan: bool,
    /// Print every unit's id and estimated minutes, and exit.
    #[arg(long)]
    list_units: bool,
    /// Write a Slurm array job for the plan (array.sbatch, report.sbatch, submit.sh) into DIR
    /// and exit; `sh DIR/submit.sh` submits it.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["shard", "unit"])]
    emit_slurm: Option<PathBuf>,
    /// Array tasks of --emit-slurm (default: one per unit).
    #[arg(long, value_name = "N", requires = "emit_slurm")]
    slurm_tasks: Option<usize>,
    /// Memory per array task of --emit-slurm, as sbatch --mem takes it.
    #[arg(long, value_name = "MEM", default_value = "2G", requires = "emit_slurm")]
    slurm_mem: String,
    /// Units run at once, each on a thread of its own (training uses one core per model):
    /// 1..=256; default the machine's CPUs divided by the shard count of `--shard i/n`, and no
    /// more than 2 GiB of available memory a unit. The results are those of one unit after
    /// another.
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
}

fn load_plan(args: &ReproduceArgs) -> anyhow::Result<(Plan, String)> {
    Ok(match &args.plan {
        Some(f) => {
            let name = f.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_else(|| "plan".into());
            (Plan::from_file(f)?, name)
        }
        None if args.quick => (Plan::builtin(Scale::Quick)?, "quick".into()),
        None => (Plan::builtin(Scale::Full)?, "full".into()),
    })
}

/// The shard to run: `--shard i/n`, `--shard slurm` (the array task's), or all of it.
fn which_shard(arg: Option<&str>) -> anyhow::Result<(usize, usize)> {
    Ok(match arg {
        Some("slurm") => {
            let var = |k: &str| std::env::var(k).ok();
            reproduce::slurm_shard(
                var("SLURM_ARRAY_TASK_ID").as_deref(),
                var("SLURM_ARRAY_TASK_MIN").as_deref(),
                var("SLURM_ARRAY_TASK_COUNT").as_deref(),
            )?
        }
        Some(s) => reproduce::parse_shard(s)?,
        None => (0, 1),
    })
}

pub fn reproduce(args: ReproduceArgs) -> anyhow::Result<ExitCode> {
    let (plan, name) = load_plan(&args)?;
    if args.print_plan {
        println!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(ExitCode::SUCCESS);
    }
    let all = plan.units()?;
    if args.list_units {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        for u in &all {
            // A closed pipe (`| head`) ends the listing.
            if writeln!(stdout, "{:<40} {:>8.1} min (estimate)", u.name(), plan.estimate_seconds(u) / 60.0).is_err() {
                break;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(match (&args.plan, args.quick) {
            (Some(_), _) => format!("reports-{name}"),
            (None, true) => "reports-quick".into(),
            (None, false) => "reports".into(),
        })
    });
    if let Some(dir) = &args.emit_slurm {
        return emit_slurm(&plan, &name, &out, dir, args.slurm_tasks.unwrap_or(all.len()), &args.slurm_mem);
    }
    let (i, n) = which_shard(args.shard.as_deref())?;
    let jobs = jobs::resolve(args.jobs, n)?;
    let units = if args.unit.is_empty() { reproduce::shard(&all, i, n)? } else { plan.select(&args.unit)? };
    let whole = units.len() == all.len();
    let part = if args.unit.is_empty() { format!("shard {i}/{n}") } else { format!("{} selected units", units.len()) };
    // Every reproduce writing into `out` holds its lock shared, until its report (a report
    // refuses an output a live reproduce holds, issue 46).
    let held = phasekv::run_dir::OutputLock::writer(&out).map_err(|e| match e {
        phasekv::Error::Busy { holder, .. } => {
            phasekv::Error::invalid("--out", format!("{} is in use by {holder}; wait for it to finish", out.display()))
        }
        e => e,
    })?;
    reproduce::write_plan(&out, &plan)?;
    let names: Vec<String> = units.iter().map(|u| u.name()).collect();
    let jobs = jobs.min(units.len().max(1));
    eprintln!("reproduce ({:?}, {part}, {jobs} at once) into {}: {}", plan.scale, out.display(), names.join(", "));
    let t0 = Instant::now();
    let run = jobs::run(&out, &plan, &units, jobs)?;
    let mut bars = Bars::new();
    if run.interrupted {
        bars.message("interrupted: finished units and checkpoints are kept; rerun the same command to continue");
        return Ok(super::signals::interrupted_exit_code());
    }
    let ran = run.worked;
    let worked = !ran.is_empty();
    let (stages, model_units) = reproduce::stage_totals(&out, &ran)?;
    bars.message(&format!("all units of {part} done in {:.1} min", t0.elapsed().as_secs_f64() / 60.0));
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let timing = serde_json::json!({
        "shard": format!("{i}/{n}"),
        "units": names,
        "wall_seconds": t0.elapsed().as_secs_f64(),
        // Where the time went (issue 40): seconds per stage, summed over the units that did work.
        "stages": stages,
        "model_units_run": model_units,
        "jobs": jobs,
        "rayon_threads": std::env::var("RAYON_NUM_THREADS").ok(),
        "cpus": std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1),
        "slurm_job": std::env::var("SLURM_JOB_ID").ok(),
    });
    // Wall time of invocations that did work (a rerun that only reuses results records nothing).
    if worked {
        let tdir = out.join("timing");
        std::fs::create_dir_all(&tdir).map_err(|e| phasekv::Error::io(&tdir, e))?;
        let who = if args.unit.is_empty() { format!("shard-{i}-of-{n}") } else { "units".into() };
        phasekv::run_dir::atomic_write(
            &tdir.join(format!("{stamp}-{who}-{}.json", std::process::id())),
            format!("{}\n", serde_json::to_string_pretty(&timing)?).as_bytes(),
        )?;
    }
    if !whole {
        // Other shards may still be writing into the same output: the report waits for all.
        println!(
            "({part} done; when every part is, build the report: `phasekv report --from {} --out {}`)",
            out.display(),
            out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    drop(held);
    report::write_report(std::slice::from_ref(&out), &out, false)
}
