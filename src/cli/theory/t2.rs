//! `phasekv theory t2`: Theorem 2, gradient flow over seeds, with the Euler check.

use super::opts::bar;
use super::opts::num;
use super::opts::rate;
use super::opts::stop_if_interrupted;
use super::opts::TaskOpts;
use anyhow::Result;
use clap::Args;
use clap::ValueEnum;
use phasekv::figures::theory as figures;
use phasekv::run_dir::RunDir;
use phasekv::theory::flow::run_seeds;
use phasekv::theory::flow::summarise;
use phasekv::theory::flow::ContentOptions;
use phasekv::theory::flow::FlowConfig;
use phasekv::theory::flow::Integrator;
use phasekv::theory::limits;
use phasekv::theory::theorem2;
use phasekv::theory::theorem2::T2Results;
use serde::Serialize;
use std::process::ExitCode;
use std::time::Instant;

/// Integrator choice on the command line.
#[derive(ValueEnum, Debug, Clone, Copy)]
enum IntegratorArg {
    Rk4,
    Euler,
}

/// Options of `theory t2`.
#[derive(Args, Debug, Clone)]
pub struct T2Args {
    #[command(flatten)]
    task: TaskOpts,
    /// Initial logit standard deviation sigma.
    #[arg(long, default_value_t = 0.01)]
    sigma: f64,
    /// Step size.
    #[arg(long, default_value_t = 2.0)]
    dt: f64,
    /// Time horizon.
    #[arg(long, default_value_t = 3000.0)]
    t_max: f64,
    /// Integrator.
    #[arg(long, value_enum, default_value_t = IntegratorArg::Rk4)]
    integrator: IntegratorArg,
    /// Number of seeds (seed, seed+1, ...), run in parallel.
    #[arg(long, default_value_t = 32)]
    seeds: u64,
    /// Add the content term w (per-token biases; population = cyclically symmetrised sample).
    #[arg(long)]
    content: bool,
    /// Base contexts of the content sample (times N relabellings).
    #[arg(long, default_value_t = 1)]
    content_contexts: usize,
    /// Initial size (per-token standard deviation) of the content weights.
    #[arg(long, default_value_t = 0.01)]
    content_scale: f64,
    /// Skip the check against Euler at half the step.
    #[arg(long)]
    no_euler_check: bool,
    /// Convergence threshold on pK_h(r_h) and pV_h(r_h + 1), in (0.5, 1).
    #[arg(long, default_value_t = 0.99)]
    threshold: f64,
}

#[derive(Serialize)]
struct T2Config {
    flow: FlowConfig,
    seeds: Vec<u64>,
    euler_check: bool,
}

pub(super) fn t2(a: T2Args) -> Result<ExitCode> {
    let start = Instant::now();
    let p = a.task.params()?;
    let cfg = FlowConfig {
        params: p,
        sigma: a.sigma,
        dt: a.dt,
        t_max: a.t_max,
        integrator: match a.integrator {
            IntegratorArg::Rk4 => Integrator::Rk4,
            IntegratorArg::Euler => Integrator::Euler,
        },
        threshold: a.threshold,
        record_every: 0,
        content: a.content.then_some(ContentOptions { base_contexts: a.content_contexts, init_scale: a.content_scale }),
    };
    cfg.validate()?;
    limits::check_flow(&p, a.task.seed, a.seeds, cfg.t_max, cfg.dt)?;
    // check_flow guarantees seed + seeds - 1 does not overflow.
    let seeds: Vec<u64> = (a.task.seed..=a.task.seed + (a.seeds - 1)).collect();
    let dir = RunDir::create(a.task.out_dir("t2"), a.task.seed, "phasekv theory t2")?;
    dir.write_config(&T2Config { flow: cfg, seeds: seeds.clone(), euler_check: !a.no_euler_check })?;
    let pb = bar(seeds.len() as u64, "seeds");
    let t_seeds = Instant::now();
    let runs = run_seeds(&cfg, &seeds, || {
        pb.inc(1);
        stop_if_interrupted();
    })?;
    let wall_seeds = t_seeds.elapsed().as_secs_f64();
    pb.finish();
    let summary = summarise(&p, &runs);
    let euler_check = if a.no_euler_check {
        None
    } else {
        let pb = bar(seeds.len() as u64, "euler dt/2");
        let e = theorem2::euler_check(&cfg, &seeds, &runs, || {
            pb.inc(1);
            stop_if_interrupted();
        })?;
        pb.finish();
        Some(e)
    };
    // Trajectory of the first seed, recorded to a little after its convergence.
    let traj_run = theorem2::recorded_trajectory(&cfg, &runs[0])?;
    dir.write_json("trajectory-seed.json", &traj_run)?;
    if let Some(tr) = &traj_run.trajectory {
        figures::t2_gate_trajectories(&dir.file("t2-gate-trajectories"), &p, seeds[0], cfg.integrator, tr)?;
    }
    // Phase profile of the first converged run.
    if let Some((conv, prof)) = theorem2::converged_profile(&cfg, &runs)? {
        dir.write_json("phase-profile.json", &prof)?;
        figures::t2_phase_profile(&dir.file("t2-phase-profile"), &p, conv, &prof)?;
    }
    let results = T2Results { summary: summary.clone(), euler_check, wall_seconds_seeds: wall_seeds, runs };
    dir.write_json("theorem2.json", &results)?;
    let path = dir.finish()?;
    println!(
        "Theorem 2 at S={} H={} L={} N={} beta={} gamma={} sigma={} ({:?}, dt={})",
        p.stride, p.heads, p.chunks, p.vocab, p.beta, p.gamma, cfg.sigma, cfg.integrator, cfg.dt
    );
    let n_conv = results.runs.iter().filter(|r| r.converged).count();
    let n_coinc = results.runs.iter().filter(|r| r.converged && r.heads_coincide).count();
    println!(
        "  converged: {}   median t_conv = {}   range {}",
        rate(n_conv, summary.runs),
        num(summary.median_t_conv),
        summary.t_conv_range.map(|(a, b)| format!("{a}..{b}")).unwrap_or_else(|| "-".into())
    );
    println!(
        "  heads coincide in {} of converged runs; chosen offsets (1..S-1): {}",
        rate(n_coinc, n_conv),
        summary.offset_counts.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" ")
    );
    if cfg.content.is_some() {
        let init = results.runs.iter().map(|r| r.content_norm_init).fold(0.0, f64::max);
        println!("  content weights: max |w| initially {:.3e}, finally {:.3e}", init, summary.max_content_norm);
    }
    if let Some(e) = &results.euler_check {
        let same = e.both_converged - e.different_offsets_seeds.len();
        println!(
            "  Euler at dt={}: same offsets in {}, max |dt_conv|/t_conv = {:.4} ({:.4} where the offsets agree){}",
            e.dt,
            rate(same, e.both_converged),
            e.max_rel_t_conv_diff,
            e.max_rel_t_conv_diff_same_offsets,
            if e.different_offsets_seeds.is_empty() {
                String::new()
            } else {
                format!("; different offsets at seeds {:?}", e.different_offsets_seeds)
            }
        );
    }
    println!(
        "  {} seeds in {:.2} s; wrote {} in {:.2} s",
        seeds.len(),
        wall_seeds,
        path.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
