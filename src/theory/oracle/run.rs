//! The Theorem 1 run ([`theorem1`]): every restart minimised, the best end point classified and
//! compared with `F_1` (T-7) and the KKT conditions at the one-hot vertex (T-9), and its
//! iteration log.

use super::lbfgs::{minimise_logged, IterationRecord, Minimised, OracleProblem};
use super::options::{OracleOptions, BEATEN_TOL};
use super::starts::{gaussian, restart_plan, start_logits, StartKind};
use super::vertex::{best_one_hot, classify, vertex_kkt, BestOneHot, KktReport, Structure};
use crate::theory::critical::{classify_point, PointClass, PointLabel};
use crate::theory::task::{one_hot_loss, OracleGates, TaskParams};
use crate::{Error, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One restart's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restart {
    /// Initialisation.
    pub start: StartKind,
    /// Final loss.
    pub loss: f64,
    /// `loss - F_1`.
    pub gap: f64,
    /// L-BFGS iterations used (all runs of this restart).
    pub iters: u64,
    /// Saddle escapes that lowered the loss.
    pub escapes_used: usize,
    /// Structure of the final gates.
    pub structure: Structure,
    /// What the end point is: local minimum, saddle or not converged (T-13).
    pub label: PointLabel,
    /// The numbers behind the label (None when the classification itself failed).
    pub classification: Option<PointClass>,
    /// Why the optimiser stopped early (a non-finite loss or gradient), if it did; the end
    /// point is then the best finite point it evaluated and the label is `NotConverged`.
    pub error: Option<String>,
    /// The end point's gates.
    pub end_gates: OracleGates,
}

/// How many restarts ended with each label.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelCounts {
    /// Local minima.
    pub local_min: usize,
    /// Saddles.
    pub saddle: usize,
    /// Not converged (including failed restarts).
    pub not_converged: usize,
    /// Restarts stopped by a numerical error (counted in `not_converged` too).
    pub failed: usize,
}

/// The local refinement of the best end point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refinement {
    /// Kicks tried.
    pub kicks: usize,
    /// Kicks that lowered the loss.
    pub improved: usize,
    /// Best loss over restarts before refinement.
    pub loss_before: f64,
    /// After.
    pub loss_after: f64,
}

/// Theorem 1's verdict at one parameter point (the map symbols of spec §3). Named apart from
/// the ledger's claim verdict (`analysis::verdict::Verdict`), which it feeds through T1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PointVerdict {
    /// `+`: no restart beats `F_1` and the vertex is KKT: concentration is optimal.
    Holds,
    /// `k`: the vertex fails KKT (a head hedges), so it is beaten.
    NotKkt,
    /// `g`: the vertex is KKT but a restart finds a lower loss (e.g. a split head).
    Beaten,
}

impl PointVerdict {
    /// The map symbol: `+`, `k` or `g`.
    pub fn symbol(&self) -> char {
        match self {
            PointVerdict::Holds => '+',
            PointVerdict::NotKkt => 'k',
            PointVerdict::Beaten => 'g',
        }
    }

    /// The verdict of a map symbol (the inverse of [`PointVerdict::symbol`]).
    pub fn from_symbol(c: char) -> Option<Self> {
        [PointVerdict::Holds, PointVerdict::NotKkt, PointVerdict::Beaten].into_iter().find(|v| v.symbol() == c)
    }
}

/// Result of the Theorem 1 check at one parameter point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Theorem1Report {
    /// Parameters.
    pub params: TaskParams,
    /// `F_1` (T-7).
    pub f1: f64,
    /// Best loss found (restarts, then local refinement): an upper bound on the minimum of `F`
    /// over the oracle class, not a certified minimum.
    pub best_loss: f64,
    /// Structure of the best minimiser.
    pub best_structure: Structure,
    /// The best minimiser's gates.
    pub best_gates: OracleGates,
    /// Classification of the best point (T-13).
    pub best_classification: Option<PointClass>,
    /// The local refinement of the best restart.
    pub refinement: Refinement,
    /// KKT at the canonical distinct vertex.
    pub kkt: KktReport,
    /// The best chunk-uniform one-hot configuration (always computed; an `Option` for the
    /// JSON of older runs).
    pub best_one_hot: Option<BestOneHot>,
    /// PointVerdict.
    pub verdict: PointVerdict,
    /// Number of restarts that went below `F_1 - BEATEN_TOL`.
    pub restarts_below_f1: usize,
    /// Restarts by label.
    pub labels: LabelCounts,
    /// Every restart.
    pub restarts: Vec<Restart>,
}

fn label_of(class: &Result<PointClass>, error: &Option<String>) -> PointLabel {
    match (class, error) {
        (Ok(c), None) => c.label,
        _ => PointLabel::NotConverged,
    }
}

/// Check Theorem 1 at one parameter point (eps = 0). `progress` is called after every restart
/// and every refinement kick ([`planned_steps`](super::starts::planned_steps) in all).
pub fn theorem1(p: &TaskParams, opts: &OracleOptions, progress: impl FnMut()) -> Result<Theorem1Report> {
    theorem1_impl(p, opts, false, progress).map(|(report, _)| report)
}

/// One line of Theorem 1's iteration log (`iterations.jsonl` of `phasekv theory t1`): one
/// iteration of one L-BFGS run. The runs are keyed by `(refine, restart, run)`; the cost is
/// non-increasing along each run (see [`IterationRecord`]), not across runs, since every kick
/// starts from a perturbed point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IterationLine {
    /// Whether the run is a kick of the final local refinement (else part of a restart).
    pub refine: bool,
    /// Index of the restart in the plan, or of the refinement kick when `refine`.
    pub restart: usize,
    /// Within a restart: 0 for the minimisation from its start, `k` for its `k`-th
    /// saddle-escape kick (always 0 for a refinement kick).
    pub run: usize,
    /// The iteration, as argmin's observer saw it.
    #[serde(flatten)]
    pub record: IterationRecord,
}

/// [`theorem1`], also returning the iteration log of every L-BFGS run, recorded by an argmin
/// observer. The report is the one [`theorem1`] returns.
pub fn theorem1_logged(
    p: &TaskParams,
    opts: &OracleOptions,
    progress: impl FnMut(),
) -> Result<(Theorem1Report, Vec<IterationLine>)> {
    theorem1_impl(p, opts, true, progress)
}

fn theorem1_impl(
    p: &TaskParams,
    opts: &OracleOptions,
    log: bool,
    mut progress: impl FnMut(),
) -> Result<(Theorem1Report, Vec<IterationLine>)> {
    let mut lines = Vec::new();
    let mut keep = |refine: bool, restart: usize, run: usize, m: &Minimised| {
        lines.extend(m.log.iter().map(|&record| IterationLine { refine, restart, run, record }));
    };
    let problem = OracleProblem::new(*p)?;
    if opts.random_scales.iter().any(|s| !(s.is_finite() && *s >= 0.0)) {
        return Err(Error::invalid("random_scales", "scales must be finite and >= 0"));
    }
    let f1 = one_hot_loss(p)?;
    let kkt = vertex_kkt(p)?;
    let best_one_hot = best_one_hot(p)?;
    let plan = restart_plan(p, opts);
    if plan.is_empty() {
        return Err(Error::invalid("restarts", "the restart plan is empty; ask for at least one restart"));
    }
    let mut restarts = Vec::with_capacity(plan.len());
    let mut best: Option<(f64, Vec<f64>)> = None;
    let mut labels = LabelCounts::default();
    for (i, kind) in plan.into_iter().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed.wrapping_mul(1_000_003).wrapping_add(i as u64));
        let init = start_logits(p, &kind, &mut rng);
        let m = minimise_logged(&problem, init, opts.max_iters, log);
        keep(false, i, 0, &m);
        let (mut theta, mut loss, mut iters, error) = (m.theta, m.loss, m.iters, m.error);
        let mut structure = classify(&problem.gates(&theta));
        let mut escapes_used = 0;
        for escape in 1..=opts.saddle_escapes {
            if structure.one_hot || error.is_some() {
                break;
            }
            let kicked: Vec<f64> = theta.iter().map(|t| t + 0.3 * gaussian(&mut rng)).collect();
            let k = minimise_logged(&problem, kicked, opts.max_iters, log);
            keep(false, i, escape, &k);
            iters += k.iters;
            if k.error.is_none() && k.loss < loss - BEATEN_TOL {
                (theta, loss) = (k.theta, k.loss);
                structure = classify(&problem.gates(&theta));
                escapes_used += 1;
            }
        }
        if loss.is_finite() && best.as_ref().is_none_or(|(b, _)| loss < *b) {
            best = Some((loss, theta.clone()));
        }
        let end_gates = problem.gates(&theta);
        let class = classify_point(p, &end_gates);
        let label = label_of(&class, &error);
        match label {
            PointLabel::LocalMin => labels.local_min += 1,
            PointLabel::Saddle => labels.saddle += 1,
            PointLabel::NotConverged => labels.not_converged += 1,
        }
        labels.failed += usize::from(error.is_some());
        restarts.push(Restart {
            start: kind,
            loss,
            gap: loss - f1,
            iters,
            escapes_used,
            structure,
            label,
            classification: class.ok(),
            error,
            end_gates,
        });
        progress();
    }
    let (loss_before, mut best_theta) = best.ok_or_else(|| Error::Numerical {
        what: "Theorem 1 search".into(),
        reason: "every restart failed with a non-finite loss".into(),
    })?;
    // Local refinement: kick the best point and re-minimise, keeping improvements.
    let mut best_loss = loss_before;
    let mut improved = 0;
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x5EF1_0E00);
    for k in 0..opts.refine_kicks {
        let scale = if k % 2 == 0 { 0.3 } else { 1.0 };
        let kicked: Vec<f64> = best_theta.iter().map(|t| t + scale * gaussian(&mut rng)).collect();
        let m = minimise_logged(&problem, kicked, opts.max_iters, log);
        keep(true, k, 0, &m);
        if m.error.is_none() && m.loss < best_loss - BEATEN_TOL {
            (best_theta, best_loss) = (m.theta, m.loss);
            improved += 1;
        }
        progress();
    }
    let best_gates = problem.gates(&best_theta);
    let best_structure = classify(&best_gates);
    let best_classification = classify_point(p, &best_gates).ok();
    let restarts_below_f1 = restarts.iter().filter(|r| r.loss < f1 - BEATEN_TOL).count();
    let verdict = if !kkt.holds {
        PointVerdict::NotKkt
    } else if best_loss < f1 - BEATEN_TOL {
        PointVerdict::Beaten
    } else {
        PointVerdict::Holds
    };
    let report = Theorem1Report {
        params: *p,
        f1,
        best_loss,
        best_structure,
        best_gates,
        best_classification,
        refinement: Refinement { kicks: opts.refine_kicks, improved, loss_before, loss_after: best_loss },
        kkt,
        best_one_hot: Some(best_one_hot),
        verdict,
        restarts_below_f1,
        labels,
        restarts,
    };
    Ok((report, lines))
}

/// The iteration log as JSON Lines, one [`IterationLine`] a line.
pub fn iteration_log_jsonl(lines: &[IterationLine]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for line in lines {
        serde_json::to_writer(&mut out, line)
            .map_err(|e| Error::Numerical { what: "iteration log".into(), reason: format!("cannot serialise: {e}") })?;
        out.push(b'\n');
    }
    Ok(out)
}
