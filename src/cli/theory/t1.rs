//! `phasekv theory t1`: Theorem 1 at one parameter point (and at eps > 0 with `--eps`).

use super::opts::bar;
use super::opts::stop_if_interrupted;
use super::opts::TaskOpts;
use anyhow::Result;
use clap::Args;
use phasekv::figures::theory as figures;
use phasekv::run_dir::RunDir;
use phasekv::theory::limits;
use phasekv::theory::oracle::iteration_log_jsonl;
use phasekv::theory::oracle::plan_len;
use phasekv::theory::oracle::planned_steps;
use phasekv::theory::oracle::theorem1_logged;
use phasekv::theory::oracle::OracleOptions;
use phasekv::theory::task::TaskParams;
use serde::Serialize;
use std::process::ExitCode;
use std::time::Instant;

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

#[derive(Serialize)]
struct T1Config {
    params: TaskParams,
    options: OracleOptions,
}

pub(super) fn t1(a: T1Args) -> Result<ExitCode> {
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
    let (report, log) = theorem1_logged(&p, &opts, || {
        pb.inc(1);
        stop_if_interrupted();
    })?;
    pb.finish();
    dir.write_json("theorem1.json", &report)?;
    dir.write_bytes("iterations.jsonl", &iteration_log_jsonl(&log)?)?;
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
        "  best minimiser: smallest block peak {:.4}, one-hot {}, value = key + 1 {}, distinct heads {}, key offsets {:?}",
        s.min_peak, s.one_hot, s.value_follows_key, s.distinct_heads, s.key_offsets
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
