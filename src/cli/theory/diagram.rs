//! `phasekv theory diagram`: the Theorem 1 phase diagram over (beta, gamma).

use super::opts::bar;
use super::opts::stop_if_interrupted;
use super::opts::TaskOpts;
use anyhow::{Context, Result};
use clap::Args;
use phasekv::figures::theory as figures;
use phasekv::run_dir::RunDir;
use phasekv::theory::diagram::check_grid;
use phasekv::theory::diagram::compare_with_reference;
use phasekv::theory::diagram::phase_diagram;
use phasekv::theory::diagram::spec_grid;
use phasekv::theory::limits;
use phasekv::theory::oracle::plan_len;
use phasekv::theory::oracle::OracleOptions;
use phasekv::theory::task::TaskParams;
use serde::Serialize;
use std::process::ExitCode;
use std::time::Instant;

/// Options of `theory diagram`.
#[derive(Args, Debug, Clone)]
pub struct DiagramArgs {
    #[command(flatten)]
    task: TaskOpts,
    /// Rows (comma separated); default 0.25,1,2,4,8,16.
    #[arg(long, value_delimiter = ',')]
    betas: Option<Vec<f64>>,
    /// Columns (comma separated); default 0.5,1,2,3,4,5,6,7.
    #[arg(long, value_delimiter = ',')]
    gammas: Option<Vec<f64>>,
    /// Random restarts per logit scale at each point.
    #[arg(long, default_value_t = 2)]
    random_per_scale: usize,
    /// Split restarts per (pair count, subset of split heads) at each point.
    #[arg(long, default_value_t = 2)]
    split_per_pairs: usize,
    /// Near-vertex restarts at each point.
    #[arg(long, default_value_t = 2)]
    near_vertex: usize,
    /// Largest pair count of the split starts.
    #[arg(long, default_value_t = 3)]
    max_split_pairs: usize,
    /// L-BFGS iteration cap.
    #[arg(long, default_value_t = 600)]
    max_iters: u64,
    /// Kicks of the local refinement of the best end point at each point.
    #[arg(long, default_value_t = 4)]
    refine_kicks: usize,
}

#[derive(Serialize)]
struct DiagramConfig {
    params: TaskParams,
    betas: Vec<f64>,
    gammas: Vec<f64>,
    options: OracleOptions,
}

pub(super) fn diagram(a: DiagramArgs) -> Result<ExitCode> {
    let start = Instant::now();
    let p = a.task.params()?;
    let (db, dg) = spec_grid();
    let betas = a.betas.clone().unwrap_or(db);
    let gammas = a.gammas.clone().unwrap_or(dg);
    check_grid(&betas, &gammas)?;
    let opts = OracleOptions {
        random_per_scale: a.random_per_scale,
        split_per_pairs: a.split_per_pairs,
        near_vertex: a.near_vertex,
        max_split_pairs: a.max_split_pairs,
        max_iters: a.max_iters,
        refine_kicks: a.refine_kicks,
        seed: a.task.seed,
        ..OracleOptions::default()
    };
    let restarts = plan_len(&p, &opts);
    limits::check_oracle(&p, restarts, opts.max_iters)?;
    limits::at_most("refine_kicks", opts.refine_kicks, limits::MAX_RESTARTS)?;
    limits::at_most(
        "grid cells x restarts",
        (betas.len() * gammas.len()).saturating_mul(restarts + opts.refine_kicks),
        limits::MAX_RESTARTS * 10,
    )?;
    let dir = RunDir::create(a.task.out_dir("diagram"), a.task.seed, "phasekv theory diagram")?;
    dir.write_config(&DiagramConfig {
        params: p,
        betas: betas.clone(),
        gammas: gammas.clone(),
        options: opts.clone(),
    })?;
    let pb = bar((betas.len() * gammas.len()) as u64, "grid points");
    let d = phase_diagram(&p, &betas, &gammas, &opts, || {
        pb.inc(1);
        stop_if_interrupted();
    })
    .context("phase diagram")?;
    pb.finish();
    dir.write_json("diagram.json", &d)?;
    let text = d.to_text();
    dir.write_bytes("diagram.txt", text.as_bytes())?;
    figures::phase_diagram(&dir.file("phase-diagram"), &d)?;
    let cmp = compare_with_reference(&d);
    if let Some(diff) = &cmp {
        dir.write_json("reference-comparison.json", diff)?;
    }
    let path = dir.finish()?;
    println!("Theorem 1 phase diagram ('+' holds, 'k' vertex not KKT, 'g' KKT but beaten):");
    print!("{text}");
    match cmp {
        Some(diff) if diff.is_empty() => {
            println!("  agrees with the spec's reference map in every cell")
        }
        Some(diff) => {
            println!("  differs from the spec's reference map in {} cells:", diff.len());
            for (b, g, got, want) in diff {
                println!("    beta={b} gamma={g}: computed '{got}', reference '{want}'");
            }
        }
        None => println!("  (not the spec's grid/parameters: no reference comparison)"),
    }
    println!("  wrote {} in {:.2} s", path.display(), start.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}
