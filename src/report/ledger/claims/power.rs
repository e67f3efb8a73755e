//! `phasekv analyze power` (issue 38, `theory/power.md`): from a run's per-seed effects, per
//! claim with a magnitude or a threshold, the seeds a seed-level interval needs to decide at
//! its threshold and the prompts (families) per seed beyond which more stop helping. The
//! formulas are `analysis::stats::power`'s; this module only gathers each claim's per-seed
//! values and their within-seed variances, as the claims compute them.

use super::arm::{
    arm_for, arm_is_full, evaluated, modulus, same_seeds, seed_families, seed_records, stat_seed, NO_OUTCOMES,
};
use super::gaps::seed_level_input;
use super::judge::{BASELINE_STRIDES, PRIMARY};
use crate::analysis::phase_test::adjusted_spread_within_seed;
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::{self, ratio_per_seed_var, seeds_to_decide, Components};
use crate::analysis::verdict::{
    MAGNITUDE_FRACTION, PAPER_BASELINE_GAP_PP, PAPER_COMPRESSED_GAP_PP, PAPER_WITHIN_WINDOW_PP, X1_ACCURACY_MARGIN_PP,
    X1_HALF,
};
use crate::report::ledger::collect::{arms, Arm, Collected};
use crate::Error;
use crate::Result;
use serde::{Deserialize, Serialize};

/// Stage-2 redraws per seed for the within-seed variances (a variance needs fewer than an
/// interval's tails).
pub const POWER_ROUNDS: usize = 200;

/// One line of the power table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerRow {
    /// The claim (`E4`, `E5`, `X1 <pair>`).
    pub claim: String,
    /// What is measured.
    pub quantity: String,
    /// Seeds in the run.
    pub seeds: usize,
    /// Units per seed now (prompt families, or prompts).
    pub units: usize,
    /// `families` or `prompts`.
    pub unit: String,
    /// The estimate (mean over seeds; for a ratio, the ratio of means).
    pub estimate: f64,
    /// Between-seed standard deviation of one seed's value.
    pub between_sd: f64,
    /// Within-seed standard deviation of one seed's value at `units`.
    pub within_sd: f64,
    /// The threshold the interval must exclude to decide.
    pub threshold: f64,
    /// Seeds needed (`None`: the estimate sits at the threshold, or more than `MAX_SEEDS`).
    pub seeds_needed: Option<usize>,
    /// Units per seed beyond which more stop helping (`None`: no between-seed variance seen).
    pub units_enough: Option<usize>,
}

impl PowerRow {
    #[allow(clippy::too_many_arguments)]
    fn new(
        claim: &str,
        quantity: String,
        unit: &str,
        c: &Components,
        estimate: f64,
        var: f64,
        threshold: f64,
        enough: Option<usize>,
    ) -> Self {
        PowerRow {
            claim: claim.into(),
            quantity,
            seeds: c.seeds,
            units: c.units,
            unit: unit.into(),
            estimate,
            between_sd: c.between_var.sqrt(),
            within_sd: c.within_var.sqrt(),
            threshold,
            seeds_needed: seeds_to_decide(estimate, var, threshold),
            units_enough: enough,
        }
    }
}

/// The power table of a report's data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerTable {
    /// The rows, in ledger order.
    pub rows: Vec<PowerRow>,
    /// Stage-2 redraws per seed.
    pub rounds: usize,
}

impl PowerTable {
    /// The table in Markdown.
    pub fn markdown(&self) -> String {
        let mut s = String::from("| claim | quantity | seeds | units/seed | estimate | between-seed sd | within-seed sd | threshold | seeds to decide | units/seed beyond which more stop helping |\n|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {} | {} {} | {:.2} | {:.2} | {:.2} | {} | {} | {} |\n",
                r.claim,
                r.quantity,
                r.seeds,
                r.units,
                r.unit,
                r.estimate,
                r.between_sd,
                r.within_sd,
                r.threshold,
                r.seeds_needed.map(|k| k.to_string()).unwrap_or_else(|| "never (at the threshold)".into()),
                match r.units_enough {
                    Some(n) if n <= r.units => format!("{n} (already past)"),
                    Some(n) => n.to_string(),
                    None => "none seen: no between-seed variance".into(),
                }
            );
        }
        s
    }
}

/// One arm's per-seed spreads over `phases` at `stride` (in-sequence) with their within-seed
/// variances, and the units per seed.
fn spread_components(a: &Arm, stride: usize, phases: &[usize], rounds: usize) -> Result<(Components, &'static str)> {
    let recs =
        seed_records(a, PRIMARY).ok_or_else(|| Error::invalid("outcomes", format!("{}: {NO_OUTCOMES}", a.name)))?;
    let fams = seed_families(a, PRIMARY);
    let input = seed_level_input(&recs, &fams);
    let (mut v, mut w) = (Vec::new(), Vec::new());
    for (i, s) in input.iter().enumerate() {
        let (x, var) = adjusted_spread_within_seed(*s, stride, phases, rounds, stat_seed(a) ^ i as u64)?;
        v.push(x);
        w.push(var);
    }
    let (units, unit) = match input.first().and_then(|s| s.families) {
        Some(f) => (f.iter().collect::<std::collections::BTreeSet<_>>().len(), "families"),
        None => (input.first().map_or(0, |s| s.records.len()), "prompts"),
    };
    Ok((Components::of(&v, &w, units.max(1))?, unit))
}

/// One arm's per-seed folded prefix gaps with their within-seed (family) variances.
fn gap_components(a: &Arm, fold: usize, rounds: usize) -> Result<Components> {
    let p = Protocol::Prefix;
    let m = modulus(a).max(1);
    let recs = seed_records(a, p).ok_or_else(|| Error::invalid("outcomes", format!("{}: {NO_OUTCOMES}", a.name)))?;
    let fams = seed_families(a, p);
    let (mut v, mut w, mut units) = (Vec::new(), Vec::new(), 1);
    for (i, r) in recs.iter().enumerate() {
        let f = fams.as_ref().and_then(|f| f.get(i)).filter(|f| f.len() == r.len());
        let prompts: Vec<(usize, usize, bool)> =
            r.iter().enumerate().map(|(j, x)| (f.map_or(j, |f| f[j]), x.position % m, x.correct)).collect();
        let (x, var, n) = stats::family_gap_within_seed(&prompts, m, Some(fold), rounds, stat_seed(a) ^ i as u64)?;
        v.push(x);
        w.push(var);
        units = n;
    }
    Components::of(&v, &w, units)
}

/// Per-seed accuracies (pp) of an arm with their binomial variances, held-out or under `p`.
fn accuracies(a: &Arm, p: Option<Protocol>) -> Option<Vec<(f64, f64, usize)>> {
    a.runs
        .iter()
        .map(|r| {
            let (k, n) = match p {
                Some(p) => r.records.get(&p).map(|rs| (rs.iter().filter(|x| x.correct).count(), rs.len()))?,
                None => r.metrics.as_ref().map(|m| {
                    let n = m.final_eval.queries;
                    ((m.final_eval.accuracy * n as f64).round() as usize, n)
                })?,
            };
            let q = k as f64 / n.max(1) as f64;
            Some((100.0 * q, 1e4 * q * (1.0 - q) / n.max(1) as f64, n))
        })
        .collect()
}

fn e4_rows(arms: &[Arm], rounds: usize, rows: &mut Vec<PowerRow>) -> Result<()> {
    let Some(a) = arm_for(arms, "w8s8", false) else { return Ok(()) };
    let ph = super::e4::sharing_phases(a).map_err(|e| Error::invalid("E4", e))?;
    let (c, unit) = spread_components(a, 8, &ph, rounds)?;
    let t = MAGNITUDE_FRACTION * PAPER_WITHIN_WINDOW_PP;
    let q = format!("{} spread over window-sharing phases {}-{} (pp)", a.name, ph[0], ph[ph.len() - 1]);
    rows.push(PowerRow::new("E4", q, unit, &c, c.mean, c.per_seed_var(), t, c.units_enough()));
    Ok(())
}

fn e5_rows(arms: &[Arm], rounds: usize, rows: &mut Vec<PowerRow>) -> Result<()> {
    let has = |a: &&Arm| a.runs.iter().all(|r| r.records.contains_key(&Protocol::Prefix)) && !a.runs.is_empty();
    let mut best: Option<(String, usize, Components)> = None;
    for a in arms.iter().filter(|a| !arm_is_full(a)).filter(has) {
        let Some(s) = a.stride else { continue };
        let c = gap_components(a, s, rounds)?;
        if best.as_ref().is_none_or(|b| c.mean > b.2.mean) {
            best = Some((a.name.clone(), s, c));
        }
    }
    if let Some((name, s, c)) = best {
        let t = MAGNITUDE_FRACTION * PAPER_COMPRESSED_GAP_PP;
        let q = format!("{name} prefix gap folded by {s} (largest compressed; pp)");
        rows.push(PowerRow::new("E5", q, "families", &c, c.mean, c.per_seed_var(), t, c.units_enough()));
    }
    for a in arms.iter().filter(|a| arm_is_full(a)).filter(has) {
        for s in BASELINE_STRIDES {
            let c = gap_components(a, s, rounds)?;
            let q = format!("{} prefix gap folded by {s} (pp)", a.name);
            rows.push(PowerRow::new(
                "E5",
                q,
                "families",
                &c,
                c.mean,
                c.per_seed_var(),
                PAPER_BASELINE_GAP_PP,
                c.units_enough(),
            ));
        }
    }
    Ok(())
}

fn x1_rows(arms: &[Arm], rounds: usize, rows: &mut Vec<PowerRow>) -> Result<()> {
    for &(stag, twin_name, _) in &super::x1::PAIRS {
        let find = |n: &str| arms.iter().find(|a| a.name == n && evaluated(a));
        let (Some(a), Some(b)) = (find(stag), find(twin_name)) else { continue };
        let Some(s) = b.stride.filter(|&s| s >= 2) else { continue };
        let claim = format!("X1 {stag} vs {twin_name}");
        let phases: Vec<usize> = (0..s).collect();
        let ((ca, unit), (cb, _)) =
            (spread_components(a, s, &phases, rounds)?, spread_components(b, s, &phases, rounds)?);
        if cb.mean > 0.0 {
            let r = ca.mean / cb.mean;
            let var = ratio_per_seed_var(&ca, &cb);
            let enough = ca.units_enough().max(cb.units_enough());
            let small = if ca.seeds <= cb.seeds { &ca } else { &cb };
            for t in [X1_HALF, 1.0] {
                let q = format!("ratio R of spreads at S = {s}");
                let mut row = PowerRow::new(&claim, q, unit, small, r, var, t, enough);
                row.between_sd =
                    (ca.between_var / (ca.mean * ca.mean) + cb.between_var / (cb.mean * cb.mean)).sqrt() * r;
                row.within_sd = (ca.within_var / (ca.mean * ca.mean) + cb.within_var / (cb.mean * cb.mean)).sqrt() * r;
                rows.push(row);
            }
        }
        let paired = same_seeds(a, b);
        for (what, p) in
            [("held-out", None), ("prefix", Some(Protocol::Prefix)), ("in-sequence", Some(Protocol::InSequence))]
        {
            let (Some(xa), Some(xb)) = (accuracies(a, p), accuracies(b, p)) else { continue };
            let units = xa.iter().chain(&xb).map(|x| x.2).min().unwrap_or(1);
            let q = format!(
                "{what} accuracy difference, staggered minus twin (pp; {})",
                if paired { "paired" } else { "unpaired" }
            );
            let t = -X1_ACCURACY_MARGIN_PP;
            if paired {
                let d: Vec<f64> = xa.iter().zip(&xb).map(|(x, y)| x.0 - y.0).collect();
                let w: Vec<f64> = xa.iter().zip(&xb).map(|(x, y)| x.1 + y.1).collect();
                let c = Components::of(&d, &w, units)?;
                rows.push(PowerRow::new(&claim, q, "prompts", &c, c.mean, c.per_seed_var(), t, c.units_enough()));
            } else {
                let split = |x: &[(f64, f64, usize)]| -> Result<Components> {
                    Components::of(
                        &x.iter().map(|v| v.0).collect::<Vec<_>>(),
                        &x.iter().map(|v| v.1).collect::<Vec<_>>(),
                        units,
                    )
                };
                let (pa, pb) = (split(&xa)?, split(&xb)?);
                let c = Components {
                    seeds: pa.seeds.min(pb.seeds),
                    mean: pa.mean - pb.mean,
                    between_var: pa.between_var + pb.between_var,
                    within_var: pa.within_var + pb.within_var,
                    units,
                };
                rows.push(PowerRow::new(&claim, q, "prompts", &c, c.mean, c.per_seed_var(), t, c.units_enough()));
            }
        }
    }
    Ok(())
}

/// The power table of the report data `c` (E4, E5, X1), with `rounds` stage-2 redraws per seed
/// for the within-seed variances. An error names what is missing or malformed.
pub fn power_table(c: &Collected, rounds: usize) -> Result<PowerTable> {
    if rounds < 2 {
        return Err(Error::invalid("--rounds", format!("must be at least 2, got {rounds}")));
    }
    let arms = arms(c);
    let mut rows = Vec::new();
    e4_rows(&arms, rounds, &mut rows)?;
    e5_rows(&arms, rounds, &mut rows)?;
    x1_rows(&arms, rounds, &mut rows)?;
    if rows.is_empty() {
        return Err(Error::invalid(
            "--from",
            "no arm of E4, E5 or X1 with per-prompt outcomes in these outputs (train and evaluate a plan first)",
        ));
    }
    Ok(PowerTable { rows, rounds })
}
