//! The claims of the ledger: one module per claim, each a [`LedgerClaim`] registered in
//! [`LEDGER`]. A claim computes its verdict from the [`Collected`] data with the criterion it
//! states, and may draw figures of its own. Adding a claim is one module here, one line in
//! [`LEDGER`] and a test (`tests/report_ledger.rs`). The criteria and their thresholds are
//! documented in `theory/phase-lab.md`.

mod e1;
mod e2;
mod e3;
mod e4;
mod e5;
mod e6;
mod e7;
mod k;
mod pooled;
mod t1;
mod t2;

pub(super) use super::collect::{arms, Arm, Collected, RunData};
pub(super) use crate::analysis::protocol::Protocol;
pub(super) use crate::analysis::stats::{self, GroupAccuracy};
pub(super) use crate::lab::{stride_of, EvalResult, KnockoutResult};
pub(super) use crate::Result;
use serde::{Deserialize, Serialize};
pub(super) use std::path::Path;

/// The stem of a run's knockout figure under `protocol` (in `figures/`).
pub fn knockout_figure(label: &str, protocol: Protocol) -> String {
    format!("knockout-{label}-{}", protocol.name())
}

/// Significance level of every test in the ledger: the pre-registered one.
pub use crate::analysis::phase_test::ALPHA;
/// T2: the smallest fraction of seeds that must converge to one-hot gates.
pub const T2_MIN_CONVERGED: f64 = 0.95;

/// A claim's verdict, computed from data (one type for the ledger and the analysis).
pub use crate::analysis::verdict::Verdict;

/// One line of the ledger.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// `T1`, `T2`, `E1`..`E7`, `K`.
    pub id: String,
    /// The paper's claim.
    pub claim: String,
    /// What was measured, with the numbers.
    pub measured: String,
    /// The criterion the verdict applies.
    pub criterion: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Figures (relative to the report directory).
    pub figures: Vec<String>,
    /// Data files (relative to the report directory).
    pub data: Vec<String>,
}

/// One claim of the ledger.
pub trait LedgerClaim: Sync {
    /// The claim's line: numbers and verdict from the data.
    fn check(&self, c: &Collected) -> Claim;
    /// Draws the figures only this claim links into `out` (the report directory); returns
    /// `(figure, caption)` pairs, figures relative to `out`. Most claims link figures drawn
    /// for the whole report and draw none.
    fn draw(&self, _c: &Collected, _out: &Path) -> Result<Vec<(String, String)>> {
        Ok(vec![])
    }
}

/// Every claim, in ledger order.
pub const LEDGER: &[&dyn LedgerClaim] =
    &[&t1::T1, &t2::T2, &e1::E1, &e2::E2, &e3::E3, &e4::E4, &e5::E5, &e6::E6, &e7::E7, &k::K];

/// The claims, verdicts from data.
pub fn claims(c: &Collected) -> Vec<Claim> {
    LEDGER.iter().map(|l| l.check(c)).collect()
}

/// The figures every claim draws for itself, with captions.
pub fn draw_claim_figures(c: &Collected, out: &Path) -> Result<Vec<(String, String)>> {
    let mut caps = Vec::new();
    for l in LEDGER {
        caps.extend(l.draw(c, out)?);
    }
    Ok(caps)
}

/// Whether a run is the full-attention baseline (the model config's one predicate).
pub(super) fn is_full(r: &RunData) -> bool {
    r.config.model.is_full()
}

/// A p-value as the ledger writes it.
pub(super) fn fmt_p(p: f64) -> String {
    if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

/// The estimated period, or `none`.
pub(super) fn period_word(e: &EvalResult) -> String {
    e.profile.period().map(|p| p.to_string()).unwrap_or_else(|| "none".into())
}

/// The phase-profile figure of a protocol.
pub(super) fn phase_fig(p: Protocol) -> String {
    format!("figures/phase-{}.png", p.name())
}

/// The phase-profile data of a protocol.
pub(super) fn phase_data(p: Protocol) -> String {
    format!("figures/phase-{}.csv", p.name())
}

fn both_figs() -> Vec<String> {
    Protocol::ALL.iter().map(|&p| phase_fig(p)).collect()
}

fn both_data() -> Vec<String> {
    Protocol::ALL.iter().map(|&p| phase_data(p)).collect()
}

fn not_run(id: &str, claim: &str, data: Vec<String>) -> Claim {
    Claim {
        id: id.into(),
        claim: claim.into(),
        measured: "the data this claim needs are not in the run set".into(),
        criterion: "-".into(),
        verdict: Verdict::NotRun,
        figures: vec![],
        data,
    }
}
