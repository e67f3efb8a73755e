//! `phasekv theory loss`: F, its gradient and the classification at gates from a file (prints only).

use super::opts::num;
use super::opts::ParamOpts;
use anyhow::Result;
use clap::Args;
use phasekv::theory::limits;
use phasekv::theory::point;
use std::path::PathBuf;
use std::process::ExitCode;

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

pub(super) fn loss(a: LossArgs) -> Result<ExitCode> {
    let p = a.params.params()?;
    limits::check_oracle(&p, 1, 1)?;
    let g = point::read_gates(&a.gates, &p)?;
    let out = point::evaluate(&p, &g)?;
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
