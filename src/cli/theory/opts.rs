//! The options and helpers every `phasekv theory` command shares: the task parameters (checked
//! against the limits), the run directory, progress bars, the interrupt check and number words.

use super::super::progress::Progress;
use anyhow::Result;
use clap::Args;
use phasekv::numeric::wilson95;
use phasekv::theory::limits;
use phasekv::theory::task::TaskParams;
use std::path::PathBuf;

/// Task parameters shared by every command (spec §6 defaults).
#[derive(Args, Debug, Clone)]
pub struct ParamOpts {
    /// Compression stride S.
    #[arg(long = "stride", short = 'S', default_value_t = 4)]
    pub(super) stride: usize,
    /// Number of heads H (1 <= H < S).
    #[arg(long = "heads", short = 'H', default_value_t = 2)]
    pub(super) heads: usize,
    /// Number of chunks L.
    #[arg(long = "chunks", short = 'L', default_value_t = 4)]
    pub(super) chunks: usize,
    /// Vocabulary size N (>= L*S).
    #[arg(long = "vocab", short = 'N', default_value_t = 64)]
    pub(super) vocab: usize,
    /// Attention inverse temperature beta.
    #[arg(long, default_value_t = 2.0)]
    pub(super) beta: f64,
    /// Readout scale gamma.
    #[arg(long, default_value_t = 2.0)]
    pub(super) gamma: f64,
    /// Common component kappa of the geometry (cancels at eps = 0).
    #[arg(long, default_value_t = 1.0)]
    pub(super) kappa: f64,
}

impl ParamOpts {
    /// The parameters, checked against the limits (theory/induction-model.md §9).
    pub(super) fn params(&self) -> Result<TaskParams> {
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
    pub(super) params: ParamOpts,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 0)]
    pub(super) seed: u64,
    /// Output run directory (default: runs/theory/<cmd>-<params>-<unix time>).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
}

impl TaskOpts {
    pub(super) fn params(&self) -> Result<TaskParams> {
        self.params.params()
    }
    pub(super) fn out_dir(&self, cmd: &str) -> PathBuf {
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

pub(super) fn bar(len: u64, label: &str) -> Progress {
    Progress::new(len, label)
}

/// Called from every progress callback: after SIGINT, SIGTERM or SIGHUP (the handler installed
/// in `cli::main` only sets a flag) a theory command stops at its next unit of work, leaving its
/// run directory unfinished (no DONE), with exit status 130, 143 or 129.
pub(super) fn stop_if_interrupted() {
    if crate::cli::signals::interrupted() {
        let code = i32::from(crate::cli::signals::interrupted_by().1);
        eprintln!("interrupted: stopped; the run directory is left unfinished (no DONE)");
        std::process::exit(code);
    }
}

/// `x` as a plain number (no `Some(..)`), `-` for none.
pub(super) fn num(x: Option<f64>) -> String {
    x.map(|v| format!("{v}")).unwrap_or_else(|| "-".into())
}

/// `k/n = pct % (95 % Wilson interval lo-hi %)`.
pub(super) fn rate(k: usize, n: usize) -> String {
    let (lo, hi) = wilson95(k, n);
    let pct = if n > 0 { 100.0 * k as f64 / n as f64 } else { 0.0 };
    format!("{k}/{n} = {pct:.1} % (95 % Wilson {:.1}-{:.1} %)", 100.0 * lo, 100.0 * hi)
}
