//! `phasekv theory t1|t2|diagram`: parse options, call `phasekv::theory`, write a run
//! directory with config, JSON results and SVG+PNG figures, and print a short summary.

use super::progress::Progress;
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use phasekv::report::plot::{category_grid, line_panels, scatter, CategoryGrid, Panel, Series};
use phasekv::run_dir::RunDir;
use phasekv::theory::diagram::{compare_with_reference, phase_diagram, spec_grid};
use phasekv::theory::flow::{run_flow, run_seeds, summarise, ContentOptions, FlowConfig, FlowRun, Integrator};
use phasekv::theory::oracle::{theorem1, OracleOptions};
use phasekv::theory::profile::phase_profile;
use phasekv::theory::task::{OracleGates, TaskParams};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Theory-engine commands.
#[derive(Subcommand, Debug)]
pub enum TheoryCommand {
    /// Theorem 1: minimise the population loss over the oracle class (L-BFGS, many restarts).
    T1(T1Args),
    /// Theorem 2: gradient flow on static gates from small random initialisation, many seeds.
    T2(T2Args),
    /// The Theorem 1 phase diagram over (beta, gamma).
    Diagram(DiagramArgs),
}

/// Task parameters shared by every command (spec §6 defaults).
#[derive(Args, Debug, Clone)]
pub struct TaskOpts {
    /// Compression stride S.
    #[arg(long = "stride", short = 'S', default_value_t = 4)]
    stride: usize,
    /// Number of heads H (1 <= H < S).
    #[arg(long = "heads", short = 'H', default_value_t = 2)]
    heads: usize,
    /// Number of chunks L.
    #[arg(long = "chunks", short = 'L', default_value_t = 4)]
    chunks: usize,
    /// Vocabulary size N (>= L*S).
    #[arg(long = "vocab", short = 'N', default_value_t = 64)]
    vocab: usize,
    /// Attention inverse temperature beta.
    #[arg(long, default_value_t = 2.0)]
    beta: f64,
    /// Readout scale gamma.
    #[arg(long, default_value_t = 2.0)]
    gamma: f64,
    /// Common component kappa of the geometry (cancels at eps = 0).
    #[arg(long, default_value_t = 1.0)]
    kappa: f64,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output run directory (default: runs/theory/<cmd>-<params>-<unix time>).
    #[arg(long)]
    out: Option<PathBuf>,
}

impl TaskOpts {
    fn params(&self) -> TaskParams {
        TaskParams {
            stride: self.stride,
            heads: self.heads,
            chunks: self.chunks,
            vocab: self.vocab,
            beta: self.beta,
            gamma: self.gamma,
            kappa: self.kappa,
        }
    }
    fn out_dir(&self, cmd: &str) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            let t =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            PathBuf::from(format!(
                "runs/theory/{cmd}-S{}-H{}-L{}-N{}-b{}-g{}-seed{}-{t}",
                self.stride, self.heads, self.chunks, self.vocab, self.beta, self.gamma, self.seed
            ))
        })
    }
}

/// Options of `theory t1`.
#[derive(Args, Debug, Clone)]
pub struct T1Args {
    #[command(flatten)]
    task: TaskOpts,
    /// Random restarts per logit scale (scales 0.01, 0.3, 1, 3).
    #[arg(long, default_value_t = 4)]
    random_per_scale: usize,
    /// Near-vertex restarts.
    #[arg(long, default_value_t = 4)]
    near_vertex: usize,
    /// Largest pair count of the split starts.
    #[arg(long, default_value_t = 3)]
    max_split_pairs: usize,
    /// Split restarts per pair count.
    #[arg(long, default_value_t = 4)]
    split_per_pairs: usize,
    /// L-BFGS iteration cap.
    #[arg(long, default_value_t = 600)]
    max_iters: u64,
    /// Also check eps > 0: target eps of a random vocabulary (per-context minimisation).
    #[arg(long)]
    eps: Option<f64>,
    /// Monte Carlo contexts for --eps.
    #[arg(long, default_value_t = 16)]
    contexts: usize,
}

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
}

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
    /// Split restarts per pair count at each point.
    #[arg(long, default_value_t = 2)]
    split_per_pairs: usize,
}

fn bar(len: u64, label: &str) -> Progress {
    Progress::new(len, label)
}

/// Run a theory command.
pub fn run(cmd: TheoryCommand) -> Result<ExitCode> {
    match cmd {
        TheoryCommand::T1(a) => t1(a),
        TheoryCommand::T2(a) => t2(a),
        TheoryCommand::Diagram(a) => diagram(a),
    }
}

#[derive(Serialize)]
struct T1Config {
    params: TaskParams,
    options: OracleOptions,
}

fn t1(a: T1Args) -> Result<ExitCode> {
    let start = Instant::now();
    let p = a.task.params();
    p.validate()?;
    let opts = OracleOptions {
        random_per_scale: a.random_per_scale,
        near_vertex: a.near_vertex,
        max_split_pairs: a.max_split_pairs,
        split_per_pairs: a.split_per_pairs,
        max_iters: a.max_iters,
        seed: a.task.seed,
        ..OracleOptions::default()
    };
    let dir = RunDir::create(a.task.out_dir("t1"), a.task.seed, "phasekv theory t1")?;
    dir.write_config(&T1Config { params: p, options: opts.clone() })?;
    let n = phasekv::theory::oracle::restart_plan(&p, &opts).len() as u64;
    let pb = bar(n, "restarts");
    let report = theorem1(&p, &opts, || pb.inc(1))?;
    pb.finish();
    dir.write_json("theorem1.json", &report)?;
    // Figure: every restart's gap to F_1, by class of its end point.
    let mut series = vec![
        Series::markers("one-hot, distinct, value = key + 1", vec![], 2),
        Series::markers("one-hot, colliding heads", vec![], 4),
        Series::markers("one-hot, crossed (value != key + 1)", vec![], 0),
        Series::markers("not concentrated", vec![], 1),
    ];
    for (i, r) in report.restarts.iter().enumerate() {
        let k = if !r.structure.one_hot {
            3
        } else if !r.structure.value_follows_key {
            2
        } else if r.structure.distinct_heads {
            0
        } else {
            1
        };
        series[k].points.push((i as f64 + 1.0, r.gap));
    }
    series.retain(|s| !s.points.is_empty());
    let panel = Panel {
        title: format!(
            "Theorem 1 restarts (beta={}, gamma={}): verdict '{}'",
            p.beta,
            p.gamma,
            report.verdict.symbol()
        ),
        x_label: "restart".into(),
        y_label: "loss - F_1".into(),
        y_range: {
            let (lo, hi) = report.restarts.iter().fold((0.0f64, 0.0f64), |(a, b), r| (a.min(r.gap), b.max(r.gap)));
            let span = (hi - lo).max(1e-6);
            Some((lo - 0.05 * span, hi + 0.45 * span))
        },
        series,
    };
    scatter(&dir.file("t1-restarts"), &panel)?;
    let noisy = match a.eps {
        Some(eps) => {
            let vocab = phasekv::theory::vocab::Vocabulary::random_for_eps(p.vocab, p.kappa, eps, a.task.seed)?;
            let small = OracleOptions {
                random_per_scale: 1,
                near_vertex: 1,
                split_per_pairs: 1,
                max_split_pairs: 2,
                ..opts.clone()
            };
            let pb = bar(a.contexts as u64, "contexts");
            let r = phasekv::theory::noisy::theorem1_eps(&p, &vocab, a.contexts, &small, || pb.inc(1))?;
            pb.finish();
            dir.write_json("theorem1-eps.json", &r)?;
            Some(r)
        }
        None => None,
    };
    let path = dir.finish()?;
    println!(
        "Theorem 1 at S={} H={} L={} N={} beta={} gamma={}",
        p.stride, p.heads, p.chunks, p.vocab, p.beta, p.gamma
    );
    println!(
        "  F_1 = {:.12}   best loss = {:.12}   (best - F_1 = {:.3e})",
        report.f1,
        report.best_loss,
        report.best_loss - report.f1
    );
    println!(
        "  vertex KKT margin = {:.3e} ({}), worst move: {}",
        report.kkt.min_margin,
        if report.kkt.holds { "KKT" } else { "not KKT" },
        report.kkt.worst_move
    );
    if let Some(b) = &report.best_one_hot {
        println!(
            "  best one-hot configuration ({} enumerated): loss {:.12}, key offsets {:?}, value offsets {:?}, KKT margin {:.3e}",
            b.enumerated, b.loss, b.key_offsets, b.value_offsets, b.kkt.min_margin
        );
    }
    let s = &report.best_structure;
    println!(
        "  best minimiser: concentration {:.4}, one-hot {}, value = key + 1 {}, distinct heads {}, key offsets {:?}",
        s.concentration, s.one_hot, s.value_follows_key, s.distinct_heads, s.key_offsets
    );
    println!(
        "  restarts below F_1: {}/{}   verdict: '{}' ({:?})",
        report.restarts_below_f1,
        report.restarts.len(),
        report.verdict.symbol(),
        report.verdict
    );
    if let Some(r) = noisy {
        println!(
            "  eps > 0: achieved eps {:.3} (d = {}), {} contexts: minimiser concentrated in {:.0} %, distinct in {:.0} %, some point beats every distinct vertex in {:.0} %",
            r.eps, r.dim, r.contexts.len(), 100.0 * r.concentrated_fraction, 100.0 * r.distinct_fraction, 100.0 * r.beaten_fraction
        );
    }
    println!("  wrote {} in {:.2} s", path.display(), start.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct T2Config {
    flow: FlowConfig,
    seeds: Vec<u64>,
    euler_check: bool,
}

#[derive(Serialize)]
struct EulerCheck {
    dt: f64,
    same_offsets_fraction: f64,
    max_rel_t_conv_diff: f64,
    both_converged: usize,
}

#[derive(Serialize)]
struct T2Results {
    summary: phasekv::theory::flow::FlowSummary,
    euler_check: Option<EulerCheck>,
    wall_seconds_seeds: f64,
    runs: Vec<FlowRun>,
}

fn t2(a: T2Args) -> Result<ExitCode> {
    let start = Instant::now();
    let p = a.task.params();
    let cfg = FlowConfig {
        params: p,
        sigma: a.sigma,
        dt: a.dt,
        t_max: a.t_max,
        integrator: match a.integrator {
            IntegratorArg::Rk4 => Integrator::Rk4,
            IntegratorArg::Euler => Integrator::Euler,
        },
        threshold: 0.99,
        record_every: 0,
        content: a.content.then_some(ContentOptions { base_contexts: a.content_contexts, init_scale: a.content_scale }),
    };
    cfg.validate()?;
    if a.seeds == 0 {
        anyhow::bail!("invalid seeds: need at least 1");
    }
    let seeds: Vec<u64> = (a.task.seed..a.task.seed + a.seeds).collect();
    let dir = RunDir::create(a.task.out_dir("t2"), a.task.seed, "phasekv theory t2")?;
    dir.write_config(&T2Config { flow: cfg, seeds: seeds.clone(), euler_check: !a.no_euler_check })?;
    let pb = bar(seeds.len() as u64, "seeds");
    let t_seeds = Instant::now();
    let runs = run_seeds(&cfg, &seeds, || pb.inc(1))?;
    let wall_seeds = t_seeds.elapsed().as_secs_f64();
    pb.finish();
    let summary = summarise(&p, &runs);
    let euler_check = if a.no_euler_check {
        None
    } else {
        let ecfg = FlowConfig { integrator: Integrator::Euler, dt: cfg.dt / 2.0, ..cfg };
        let pb = bar(seeds.len() as u64, "euler dt/2");
        let eruns = run_seeds(&ecfg, &seeds, || pb.inc(1))?;
        pb.finish();
        let mut same = 0;
        let mut both = 0;
        let mut worst: f64 = 0.0;
        for (r, e) in runs.iter().zip(&eruns) {
            if let (Some(t1), Some(t2)) = (r.t_conv, e.t_conv) {
                both += 1;
                worst = worst.max((t1 - t2).abs() / t1);
                if r.key_offsets == e.key_offsets {
                    same += 1;
                }
            }
        }
        Some(EulerCheck {
            dt: ecfg.dt,
            same_offsets_fraction: if both > 0 { same as f64 / both as f64 } else { 0.0 },
            max_rel_t_conv_diff: worst,
            both_converged: both,
        })
    };
    // Trajectory of the first seed, recorded to a little after its convergence.
    let first = &runs[0];
    let t_end = first.t_conv.map(|t| (1.3 * t + 50.0).min(cfg.t_max)).unwrap_or(cfg.t_max);
    let steps = (t_end / cfg.dt).round().max(1.0) as usize;
    let tcfg = FlowConfig { t_max: steps as f64 * cfg.dt, record_every: (steps / 400).max(1), ..cfg };
    let traj_run = run_flow(&tcfg, seeds[0], false)?;
    dir.write_json("trajectory-seed.json", &traj_run)?;
    if let Some(tr) = &traj_run.trajectory {
        let s = p.stride;
        let mut panels = Vec::new();
        for h in 0..p.heads {
            for (which, data) in [("pK", &tr.key), ("pV", &tr.value)] {
                let series = (0..s)
                    .map(|r| {
                        Series::line(
                            format!("r={}", r + 1),
                            tr.times.iter().zip(data.iter()).map(|(&t, g)| (t, g[h * s + r])).collect(),
                            r,
                        )
                    })
                    .collect();
                panels.push(Panel {
                    title: format!("head {} {which}", h + 1),
                    x_label: "time t".into(),
                    y_label: format!("{which}_{}(r)", h + 1),
                    y_range: Some((0.0, 1.0)),
                    series,
                });
            }
        }
        let rows = p.heads as u32;
        line_panels(
            &dir.file("t2-gate-trajectories"),
            &format!("Gradient flow, seed {} (static gates, {:?})", seeds[0], cfg.integrator),
            &panels,
            2,
            (1100, 60 + 300 * rows),
        )?;
    }
    // Phase profile of the first converged run.
    if let Some(conv) = runs.iter().find(|r| r.converged) {
        let g = OracleGates::from_static(&p, &conv.key, &conv.value);
        let prof = phase_profile(&p, &g)?;
        dir.write_json("phase-profile.json", &prof)?;
        let acc: Vec<(f64, f64)> = prof.positions.iter().map(|s| (s.position as f64, s.accuracy)).collect();
        let prob: Vec<(f64, f64)> = prof.positions.iter().map(|s| (s.position as f64, s.target_prob)).collect();
        let last = (p.chunks * p.stride) as f64;
        let panels = vec![
            Panel {
                title: format!(
                    "retrieval accuracy by query position (heads chose offsets {:?})",
                    conv.key_offsets.iter().flatten().collect::<Vec<_>>()
                ),
                x_label: "query position in context (chunk boundary every S)".into(),
                y_label: "accuracy".into(),
                y_range: Some((-0.05, 1.05)),
                series: vec![Series::markers("accuracy", acc, 0)],
            },
            Panel {
                title: "target probability by query position".into(),
                x_label: "query position in context".into(),
                y_label: "p(target)".into(),
                y_range: None,
                series: vec![
                    Series::markers("p(target)", prob, 1),
                    Series {
                        name: "chance 1/N".into(),
                        points: vec![(1.0, prof.chance), (last, prof.chance)],
                        color: 6,
                        markers: false,
                        dashed: true,
                        line: true,
                    },
                ],
            },
        ];
        line_panels(
            &dir.file("t2-phase-profile"),
            &format!("Phase profile of the converged model (seed {})", conv.seed),
            &panels,
            1,
            (1000, 700),
        )?;
    }
    let results = T2Results { summary: summary.clone(), euler_check, wall_seconds_seeds: wall_seeds, runs };
    dir.write_json("theorem2.json", &results)?;
    let path = dir.finish()?;
    println!(
        "Theorem 2 at S={} H={} L={} N={} beta={} gamma={} sigma={} ({:?}, dt={})",
        p.stride, p.heads, p.chunks, p.vocab, p.beta, p.gamma, cfg.sigma, cfg.integrator, cfg.dt
    );
    println!(
        "  converged: {:.1} % of {} seeds   median t_conv = {:?}   range {:?}",
        100.0 * summary.converged_fraction,
        summary.runs,
        summary.median_t_conv,
        summary.t_conv_range
    );
    println!(
        "  heads coincide in {:.1} % of converged runs; chosen offsets (1..S-1): {:?}",
        100.0 * summary.coincide_fraction,
        summary.offset_counts
    );
    if cfg.content.is_some() {
        let init = results.runs.iter().map(|r| r.content_norm_init).fold(0.0, f64::max);
        println!("  content weights: max |w| initially {:.3e}, finally {:.3e}", init, summary.max_content_norm);
    }
    if let Some(e) = &results.euler_check {
        println!(
            "  Euler at dt={}: same offsets in {:.1} % of {} runs, max |dt_conv|/t_conv = {:.4}",
            e.dt,
            100.0 * e.same_offsets_fraction,
            e.both_converged,
            e.max_rel_t_conv_diff
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

#[derive(Serialize)]
struct DiagramConfig {
    params: TaskParams,
    betas: Vec<f64>,
    gammas: Vec<f64>,
    options: OracleOptions,
}

fn diagram(a: DiagramArgs) -> Result<ExitCode> {
    let start = Instant::now();
    let p = a.task.params();
    p.validate()?;
    let (db, dg) = spec_grid();
    let betas = a.betas.clone().unwrap_or(db);
    let gammas = a.gammas.clone().unwrap_or(dg);
    let opts = OracleOptions {
        random_per_scale: a.random_per_scale,
        split_per_pairs: a.split_per_pairs,
        seed: a.task.seed,
        ..OracleOptions::default()
    };
    let dir = RunDir::create(a.task.out_dir("diagram"), a.task.seed, "phasekv theory diagram")?;
    dir.write_config(&DiagramConfig {
        params: p,
        betas: betas.clone(),
        gammas: gammas.clone(),
        options: opts.clone(),
    })?;
    let pb = bar((betas.len() * gammas.len()) as u64, "grid points");
    let d = phase_diagram(&p, &betas, &gammas, &opts, || pb.inc(1)).context("phase diagram")?;
    pb.finish();
    dir.write_json("diagram.json", &d)?;
    let text = d.to_text();
    dir.write_bytes("diagram.txt", text.as_bytes())?;
    let cells: Vec<Vec<usize>> = (0..betas.len())
        .map(|i| {
            (0..gammas.len())
                .map(|j| match d.points[i * gammas.len() + j].verdict.symbol() {
                    '+' => 0,
                    'k' => 1,
                    _ => 2,
                })
                .collect()
        })
        .collect();
    let cell_text = (0..betas.len())
        .map(|i| {
            (0..gammas.len())
                .map(|j| {
                    let pt = &d.points[i * gammas.len() + j];
                    format!("{} {:+.0e}", pt.verdict.symbol(), pt.best_loss - pt.f1)
                })
                .collect()
        })
        .collect();
    let grid = CategoryGrid {
        title: format!("Theorem 1 phase diagram (S={}, H={}, L={}, N={})", p.stride, p.heads, p.chunks, p.vocab),
        x_label: "gamma".into(),
        y_label: "beta".into(),
        columns: gammas.iter().map(|g| format!("{g}")).collect(),
        rows: betas.iter().map(|b| format!("{b}")).collect(),
        cells,
        cell_text: Some(cell_text),
        categories: vec![
            ("+ one-hot optimal".into(), (120, 200, 120)),
            ("k vertex not KKT (hedging)".into(), (230, 120, 100)),
            ("g KKT but beaten (split head)".into(), (240, 200, 90)),
        ],
    };
    category_grid(&dir.file("phase-diagram"), &grid)?;
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
