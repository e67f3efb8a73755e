//! `phasekv theory t1|t2|diagram|loss`: parse options, check every size against
//! `phasekv::theory::limits` before anything is written, call `phasekv::theory`, write a run
//! directory with config, JSON results and SVG+PNG figures, and print a short summary
//! (`loss` only prints).

use super::progress::Progress;
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use phasekv::analysis::stats::wilson95;
use phasekv::figures::theory as figures;
use phasekv::run_dir::RunDir;
use phasekv::theory::critical::classify_point;
use phasekv::theory::diagram::check_grid;
use phasekv::theory::diagram::{compare_with_reference, phase_diagram, spec_grid};
use phasekv::theory::flow::{run_seeds, summarise, ContentOptions, FlowConfig, Integrator};
use phasekv::theory::limits;
use phasekv::theory::oracle::{plan_len, planned_steps, theorem1, OracleOptions};
use phasekv::theory::task::{one_hot_loss, population_loss_grad};
use phasekv::theory::task::{OracleGates, TaskParams};
use phasekv::theory::theorem2::{self, T2Results};
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
    /// Evaluate F (T-4), its gradient (T-5) and the point's classification at gates from a file.
    Loss(LossArgs),
}

/// Task parameters shared by every command (spec §6 defaults).
#[derive(Args, Debug, Clone)]
pub struct ParamOpts {
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
}

impl ParamOpts {
    /// The parameters, checked against the limits (theory/induction-model.md §9).
    fn params(&self) -> Result<TaskParams> {
        let p = TaskParams {
            stride: self.stride,
            heads: self.heads,
            chunks: self.chunks,
            vocab: self.vocab,
            beta: self.beta,
            gamma: self.gamma,
            kappa: self.kappa,
        };
        limits::check_task(&p)?;
        Ok(p)
    }
}

/// Task parameters, seed and output directory of the commands that write a run.
#[derive(Args, Debug, Clone)]
pub struct TaskOpts {
    #[command(flatten)]
    params: ParamOpts,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output run directory (default: runs/theory/<cmd>-<params>-<unix time>).
    #[arg(long)]
    out: Option<PathBuf>,
}

impl TaskOpts {
    fn params(&self) -> Result<TaskParams> {
        self.params.params()
    }
    fn out_dir(&self, cmd: &str) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            let t =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            PathBuf::from(format!(
                "runs/theory/{cmd}-S{}-H{}-L{}-N{}-b{}-g{}-seed{}-{t}",
                self.params.stride,
                self.params.heads,
                self.params.chunks,
                self.params.vocab,
                self.params.beta,
                self.params.gamma,
                self.seed
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
    /// Kicks of the local refinement of the best end point.
    #[arg(long, default_value_t = 4)]
    refine_kicks: usize,
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
    /// Convergence threshold on pK_h(r_h) and pV_h(r_h + 1), in (0.5, 1).
    #[arg(long, default_value_t = 0.99)]
    threshold: f64,
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

/// Options of `theory loss`.
#[derive(Args, Debug, Clone)]
pub struct LossArgs {
    #[command(flatten)]
    params: ParamOpts,
    /// JSON file with the gates: {"key": .., "value": ..} as nested arrays [H][S] (static gates,
    /// the same in every chunk) or [H][L][S], or an oracle-gates object as written in
    /// theorem1.json (`best_gates`, `restarts[i].end_gates`).
    #[arg(long)]
    gates: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn bar(len: u64, label: &str) -> Progress {
    Progress::new(len, label)
}

/// Called from every progress callback: after SIGINT or SIGTERM (the handler installed in
/// `cli::main` only sets a flag) a theory command stops at its next unit of work, leaving its
/// run directory unfinished (no DONE), with exit status 130 or 143.
fn stop_if_interrupted() {
    if super::interrupted() {
        let code = if super::interrupted_exit_code() == ExitCode::from(143) { 143 } else { 130 };
        eprintln!("interrupted: stopped; the run directory is left unfinished (no DONE)");
        std::process::exit(code);
    }
}

/// Run a theory command.
pub fn run(cmd: TheoryCommand) -> Result<ExitCode> {
    match cmd {
        TheoryCommand::T1(a) => t1(a),
        TheoryCommand::T2(a) => t2(a),
        TheoryCommand::Diagram(a) => diagram(a),
        TheoryCommand::Loss(a) => loss(a),
    }
}

/// `x` as a plain number (no `Some(..)`), `-` for none.
fn num(x: Option<f64>) -> String {
    x.map(|v| format!("{v}")).unwrap_or_else(|| "-".into())
}

/// `k/n = pct % (95 % Wilson interval lo-hi %)`.
fn rate(k: usize, n: usize) -> String {
    let (lo, hi) = wilson95(k, n);
    let pct = if n > 0 { 100.0 * k as f64 / n as f64 } else { 0.0 };
    format!("{k}/{n} = {pct:.1} % (95 % Wilson {:.1}-{:.1} %)", 100.0 * lo, 100.0 * hi)
}

#[derive(Serialize)]
struct T1Config {
    params: TaskParams,
    options: OracleOptions,
}

fn t1(a: T1Args) -> Result<ExitCode> {
    let start = Instant::now();
    let p = a.task.params()?;
    let opts = OracleOptions {
        random_per_scale: a.random_per_scale,
        near_vertex: a.near_vertex,
        max_split_pairs: a.max_split_pairs,
        split_per_pairs: a.split_per_pairs,
        max_iters: a.max_iters,
        seed: a.task.seed,
        refine_kicks: a.refine_kicks,
        ..OracleOptions::default()
    };
    limits::check_oracle(&p, plan_len(&p, &opts), opts.max_iters)?;
    limits::at_most("refine_kicks", opts.refine_kicks, limits::MAX_RESTARTS)?;
    if let Some(eps) = a.eps {
        limits::check_eps(&p, eps, a.contexts)?;
    }
    let dir = RunDir::create(a.task.out_dir("t1"), a.task.seed, "phasekv theory t1")?;
    dir.write_config(&T1Config { params: p, options: opts.clone() })?;
    let pb = bar(planned_steps(&p, &opts) as u64, "restarts");
    let report = theorem1(&p, &opts, || {
        pb.inc(1);
        stop_if_interrupted();
    })?;
    pb.finish();
    dir.write_json("theorem1.json", &report)?;
    figures::t1_restarts(&dir.file("t1-restarts"), &p, &report)?;
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
            let r = phasekv::theory::noisy::theorem1_eps(&p, &vocab, a.contexts, &small, || {
                pb.inc(1);
                stop_if_interrupted();
            })?;
            pb.finish();
            let failed: usize = r.contexts.iter().map(|c| c.failed_restarts).sum();
            if failed > 0 {
                eprintln!(
                    "note: {failed} L-BFGS runs stopped at a non-finite loss (recorded as failed in theorem1-eps.json)"
                );
            }
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
        "  F_1 = {:.12}   best found = {:.12} (an upper bound on the minimum; best - F_1 = {:.4e})",
        report.f1,
        report.best_loss,
        report.best_loss - report.f1
    );
    println!(
        "  local refinement: {} of {} kicks improved ({:.12} -> {:.12})",
        report.refinement.improved,
        report.refinement.kicks,
        report.refinement.loss_before,
        report.refinement.loss_after
    );
    println!(
        "  vertex KKT margin = {:.3e} ({}), worst move: {}",
        report.kkt.min_margin,
        if report.kkt.holds { "KKT" } else { "not KKT" },
        report.kkt.worst_move
    );
    if let Some(b) = &report.best_one_hot {
        println!(
            "  best one-hot configuration ({} {}): loss {:.12}, key offsets {:?}, value offsets {:?}, KKT margin {:.3e}",
            b.enumerated,
            if b.exact { "head multisets enumerated, exact" } else { "evaluated by local search, an upper bound" },
            b.loss,
            b.key_offsets,
            b.value_offsets,
            b.kkt.min_margin
        );
    }
    let s = &report.best_structure;
    println!(
        "  best minimiser: concentration {:.4}, one-hot {}, value = key + 1 {}, distinct heads {}, key offsets {:?}",
        s.concentration, s.one_hot, s.value_follows_key, s.distinct_heads, s.key_offsets
    );
    let l = &report.labels;
    println!(
        "  restart end points: {} local minima, {} saddles, {} not converged ({} stopped by a non-finite value)",
        l.local_min, l.saddle, l.not_converged, l.failed
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

fn t2(a: T2Args) -> Result<ExitCode> {
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

#[derive(Serialize)]
struct DiagramConfig {
    params: TaskParams,
    betas: Vec<f64>,
    gammas: Vec<f64>,
    options: OracleOptions,
}

fn diagram(a: DiagramArgs) -> Result<ExitCode> {
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

/// Largest gates file `theory loss` reads.
const MAX_GATES_FILE: u64 = 64 << 20;

/// Read gates for `p` from a JSON file (see [`LossArgs::gates`]); every block must be a
/// probability vector (finite, `>= 0`, summing to 1 within 1e-9).
fn read_gates(path: &std::path::Path, p: &TaskParams) -> Result<OracleGates> {
    let meta = std::fs::metadata(path).with_context(|| format!("gates file {}", path.display()))?;
    if !meta.is_file() {
        anyhow::bail!("invalid gates: {} is not a regular file", path.display());
    }
    if meta.len() > MAX_GATES_FILE {
        anyhow::bail!("invalid gates: {} has {} bytes, above the limit {MAX_GATES_FILE}", path.display(), meta.len());
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("gates file {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("invalid gates: {}: {e}", path.display()))?;
    let (hh, ll, ss) = (p.heads, p.chunks, p.stride);
    let mut g = OracleGates::uniform(p);
    let flat = |x: &serde_json::Value, field: &str| -> Result<Vec<f64>> {
        // Depth 1 (oracle layout, flat), 2 ([H][S]) or 3 ([H][L][S]).
        fn collect(x: &serde_json::Value, out: &mut Vec<f64>, shape: &mut Vec<usize>, depth: usize) -> bool {
            match x {
                serde_json::Value::Array(a) => {
                    if shape.len() <= depth {
                        shape.push(a.len());
                    } else if shape[depth] != a.len() {
                        return false;
                    }
                    a.iter().all(|y| collect(y, out, shape, depth + 1))
                }
                serde_json::Value::Number(n) => n.as_f64().map(|f| out.push(f)).is_some() && shape.len() == depth,
                _ => false,
            }
        }
        let mut out = Vec::new();
        let mut shape = Vec::new();
        if !collect(x, &mut out, &mut shape, 0) {
            anyhow::bail!("invalid gates {field}: not a rectangular array of numbers");
        }
        let want_static = vec![hh, ss];
        let want_oracle = vec![hh, ll, ss];
        if shape == want_static {
            Ok((0..hh)
                .flat_map(|h| (0..ll).flat_map(move |_| (0..ss).map(move |r| (h, r))))
                .map(|(h, r)| out[h * ss + r])
                .collect())
        } else if shape == want_oracle || shape == vec![hh * ll * ss] {
            Ok(out)
        } else {
            anyhow::bail!(
                "invalid gates {field}: shape {shape:?}, expected [H={hh}][S={ss}], [H][L={ll}][S] or a flat array of H*L*S = {}",
                hh * ll * ss
            )
        }
    };
    let key = v.get("key").ok_or_else(|| anyhow::anyhow!("invalid gates: {} has no \"key\"", path.display()))?;
    let value = v.get("value").ok_or_else(|| anyhow::anyhow!("invalid gates: {} has no \"value\"", path.display()))?;
    g.key = flat(key, "key")?;
    g.value = flat(value, "value")?;
    for (field, data) in [("key", &g.key), ("value", &g.value)] {
        for h in 0..hh {
            for l in 0..ll {
                let blk = &data[(h * ll + l) * ss..(h * ll + l + 1) * ss];
                let sum: f64 = blk.iter().sum();
                if blk.iter().any(|x| !x.is_finite() || *x < 0.0) || (sum - 1.0).abs() > 1e-9 {
                    anyhow::bail!(
                        "invalid gates {field}[head {}][chunk {}]: {blk:?} is not a probability vector (entries >= 0, sum 1 within 1e-9; sum is {sum})",
                        h + 1,
                        l + 1
                    );
                }
            }
        }
    }
    Ok(g)
}

#[derive(Serialize)]
struct LossOutput {
    params: TaskParams,
    loss: f64,
    f1: f64,
    loss_minus_f1: f64,
    /// dF/dpK in the oracle layout `(h * L + l) * S + r`.
    grad_key: Vec<f64>,
    /// dF/dpV, same layout.
    grad_value: Vec<f64>,
    classification: phasekv::theory::critical::PointClass,
}

fn loss(a: LossArgs) -> Result<ExitCode> {
    let p = a.params.params()?;
    limits::check_oracle(&p, 1, 1)?;
    let g = read_gates(&a.gates, &p)?;
    let (f, gk, gv) = population_loss_grad(&p, &g)?;
    let f1 = one_hot_loss(&p)?;
    let class = classify_point(&p, &g)?;
    let out = LossOutput {
        params: p,
        loss: f,
        f1,
        loss_minus_f1: f - f1,
        grad_key: gk,
        grad_value: gv,
        classification: class,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("F = {}   F_1 = {}   F - F_1 = {:.6e}", out.loss, out.f1, out.loss_minus_f1);
    let c = &out.classification;
    println!(
        "point: {:?} (stationarity {:.3e}, KKT margin {}, tangent dimension {}, smallest tangent eigenvalue {}){}",
        c.label,
        c.stationarity,
        num(c.kkt_margin),
        c.tangent_dim,
        num(c.min_eigenvalue),
        if c.worst_move.is_empty() { String::new() } else { format!("; worst move: {}", c.worst_move) }
    );
    let (ll, ss) = (p.chunks, p.stride);
    for (name, grad) in [("dF/dpK", &out.grad_key), ("dF/dpV", &out.grad_value)] {
        for h in 0..p.heads {
            for l in 0..ll {
                let i = (h * ll + l) * ss;
                let row: Vec<String> = grad[i..i + ss].iter().map(|x| format!("{x:.9}")).collect();
                println!("{name} head {} chunk {}: {}", h + 1, l + 1, row.join(" "));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
