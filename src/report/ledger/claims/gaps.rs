//! The magnitudes of the phase claims with their intervals (`theory/phase-lab.md` §7.4, §8.7):
//! gaps, seed-level spreads, and the corrected period scan with the period rule.

use super::arm::{modulus, seed_families, seed_records, stat_seed, NO_OUTCOMES};
use super::parts::Part;
use crate::analysis::phase_test::PhaseRecord;
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::{self, GapSummary, PeriodScan, ResampleConfig};
use crate::analysis::verdict::Verdict;
use crate::report::ledger::collect::Arm;

/// The `(residue group, correct)` pairs of every seed under `p`, pooled.
pub(super) fn pooled_pairs(a: &Arm, p: Protocol) -> Option<Vec<(usize, bool)>> {
    let m = modulus(a).max(1);
    seed_records(a, p).map(|s| s.iter().flatten().map(|r| (r.position % m, r.correct)).collect())
}

/// The resampling settings of the ledger's exploratory statistics.
pub(super) fn resample_cfg(a: &Arm) -> ResampleConfig {
    ResampleConfig { seed: stat_seed(a), ..ResampleConfig::default() }
}

/// The max gap of the arm under `p`, seeds pooled, over residue groups (`fold` `None`) or
/// folded by `fold`, with its interval and noise floor.
pub(super) fn gap(a: &Arm, p: Protocol, fold: Option<usize>) -> std::result::Result<GapSummary, String> {
    let pairs = pooled_pairs(a, p).ok_or_else(|| NO_OUTCOMES.to_string())?;
    stats::gap_summary(&pairs, modulus(a), fold, &resample_cfg(a)).map_err(|e| format!("not testable: {e}"))
}

/// Under the v2 rules (§8.7), the mean over the arm's seeds of each seed's gap under `p`
/// (folded by `fold`), with its seed-level bootstrap summary (issue 38: seeds, then prompt
/// families within each seed; read it with `Interval::of_nonneg`), and each seed's gap with its
/// training seed.
pub(super) fn seed_gap(
    a: &Arm,
    p: Protocol,
    fold: Option<usize>,
) -> std::result::Result<(stats::BootInterval, Vec<(u64, f64)>), String> {
    let m = modulus(a).max(1);
    let seeds = seed_records(a, p).ok_or_else(|| NO_OUTCOMES.to_string())?;
    // Issue 38: seeds drawn with replacement, then whole prompt families within each seed
    // (a family's shifts stay paired); prompts without families are families of one.
    let fams = seed_families(a, p);
    let prompts: Vec<Vec<(usize, usize, bool)>> = seeds
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let f = fams.as_ref().and_then(|f| f.get(i)).filter(|f| f.len() == s.len());
            s.iter().enumerate().map(|(j, r)| (f.map_or(j, |f| f[j]), r.position % m, r.correct)).collect()
        })
        .collect();
    let (b, each) = stats::family_gap_two_stage(&prompts, m, fold, stats::SEED_LEVEL_ROUNDS, stat_seed(a))
        .map_err(|e| format!("not testable: {e}"))?;
    Ok((b, a.runs.iter().map(|r| r.seed).zip(each).collect()))
}

/// The seeds of an arm as the seed-level bootstrap reads them: records and families under `p`.
pub(super) fn seed_level_input<'a>(
    recs: &'a [Vec<PhaseRecord>],
    fams: &'a Option<Vec<Vec<usize>>>,
) -> Vec<crate::analysis::phase_test::SeedRecords<'a>> {
    recs.iter()
        .enumerate()
        .map(|(i, r)| crate::analysis::phase_test::SeedRecords {
            records: r,
            families: fams.as_ref().and_then(|f| f.get(i)).map(|f| f.as_slice()).filter(|f| f.len() == r.len()),
        })
        .collect()
}

/// The seed-level mean spread of an arm over `phases` at `stride` under `p` (two-stage:
/// seeds, then families within each seed), with each seed's spread.
pub(super) fn seed_level_spread(
    a: &Arm,
    p: Protocol,
    stride: usize,
    phases: &[usize],
) -> std::result::Result<(stats::BootInterval, Vec<(u64, f64)>), String> {
    let recs = seed_records(a, p).ok_or_else(|| NO_OUTCOMES.to_string())?;
    let fams = seed_families(a, p);
    let (est, each, reps) = crate::analysis::phase_test::adjusted_spread_two_stage(
        &[seed_level_input(&recs, &fams)],
        false,
        stride,
        phases,
        stats::SEED_LEVEL_ROUNDS,
        stat_seed(a),
    )
    .map_err(|e| e.to_string())?;
    let b = stats::BootInterval::from_sorted(est[0], &stats::column_sorted(&reps, 0));
    Ok((b, a.runs.iter().map(|r| r.seed).zip(each[0].iter().copied()).collect()))
}

/// The corrected period scan of the arm under `p` on pooled seeds, with its stability.
pub(super) fn period(a: &Arm, p: Protocol) -> std::result::Result<(PeriodScan, f64), String> {
    let pairs = pooled_pairs(a, p).ok_or_else(|| NO_OUTCOMES.to_string())?;
    let (m, cfg) = (modulus(a), resample_cfg(a));
    let scan = stats::period_scan(&pairs, m, crate::analysis::phase::PERIOD_ALPHA, &cfg)
        .map_err(|e| format!("not testable: {e}"))?;
    let stability = stats::period_stability(&pairs, m, scan.best, &cfg).map_err(|e| format!("not testable: {e}"))?;
    Ok((scan, stability))
}

/// The period rule on a part whose phase effect at `s` was judged: the corrected period scan of
/// the arm (seeds pooled) must declare exactly `s`, or a reproduced part is not reproduced; a
/// scan that cannot run makes the part not run. Returns the declared period (`None`: none, or
/// no scan).
pub(super) fn require_period(part: &mut Part, a: &Arm, p: Protocol, s: usize) -> Option<Option<usize>> {
    match period(a, p) {
        Ok((scan, stability)) => {
            if scan.period != Some(s) && part.verdict == Verdict::Reproduced {
                part.verdict = Verdict::NotReproduced;
            }
            part.text += &format!(
                "; corrected period scan (seeds pooled): best {}, corrected p {}, declared {}, stability {:.0} %",
                scan.best,
                scan.corrected_p,
                scan.period.map(|p| p.to_string()).unwrap_or_else(|| "none".into()),
                100.0 * stability
            );
            Some(scan.period)
        }
        Err(e) => {
            part.verdict = Verdict::NotRun;
            part.text += &format!("; period scan: {e}");
            None
        }
    }
}
