//! The ledger's records of the pooled tests and magnitudes ([`TestRecord`], [`Measure`]).

use super::arm::modulus;
use super::claim::{Interval, Measure, SeedTest, TestRecord};
use crate::analysis::phase_test::{PooledContinuousTest, PooledPhaseTest, TestMethod};
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::GapSummary;
use crate::report::ledger::collect::Arm;

/// A pooled test as the ledger records it; `a`'s runs are its seeds, in order.
pub(super) fn record(a: &Arm, p: Protocol, t: &PooledPhaseTest, decides: bool) -> TestRecord {
    TestRecord {
        arm: a.name.clone(),
        protocol: p.name().into(),
        decides,
        stride: t.stride,
        alpha: t.agreement.alpha,
        statistic: t.statistic,
        df: t.df,
        method: method_word(t.method).into(),
        p: t.p,
        seeds: t
            .seeds
            .iter()
            .zip(&a.runs)
            .map(|(s, r)| SeedTest { seed: r.seed, p: s.p, adjusted_gap_pp: s.adjusted_gap_pp })
            .collect(),
        significant_seeds: t.agreement.significant_seeds,
        required_seeds: t.agreement.required,
        pooled_significant: t.agreement.pooled_significant,
    }
}

pub(super) fn method_word(m: TestMethod) -> &'static str {
    match m {
        TestMethod::Asymptotic => "chi-square",
        TestMethod::ParametricBootstrap => "bootstrap",
    }
}

/// A pooled continuous test as the ledger records it (`df`: the seeds' numerator degrees of
/// freedom; each seed's depth-adjusted spread is the binary test's, `binary`).
pub(super) fn record_nll(
    a: &Arm,
    p: Protocol,
    t: &PooledContinuousTest,
    binary: &PooledPhaseTest,
    decides: bool,
) -> TestRecord {
    TestRecord {
        arm: a.name.clone(),
        protocol: p.name().into(),
        decides,
        stride: t.stride,
        alpha: t.agreement.alpha,
        statistic: t.statistic,
        df: t.seeds.iter().map(|s| s.df1).sum(),
        method: "NLL permutation F".into(),
        p: t.p,
        seeds: t
            .seeds
            .iter()
            .zip(&binary.seeds)
            .zip(&a.runs)
            .map(|((s, b), r)| SeedTest { seed: r.seed, p: s.p, adjusted_gap_pp: b.adjusted_gap_pp })
            .collect(),
        significant_seeds: t.agreement.significant_seeds,
        required_seeds: t.agreement.required,
        pooled_significant: t.agreement.pooled_significant,
    }
}

/// A gap as the ledger records it.
pub(super) fn gap_measure(
    a: &Arm,
    p: Protocol,
    g: &GapSummary,
    paper_pp: Option<f64>,
    decides: bool,
) -> Option<Measure> {
    let b = g.boot()?;
    let what = if g.groups == modulus(a) { format!("{}-group gap", g.groups) } else { "folded gap".to_string() };
    Some(Measure {
        arm: a.name.clone(),
        protocol: p.name().into(),
        what,
        groups: g.groups,
        value: Interval::of_nonneg(&b),
        noise_floor_pp: Some(g.noise_floor_pp),
        p: Some(g.p),
        paper_pp,
        decides,
        seeds: None,
        per_seed_pp: Vec::new(),
    })
}
