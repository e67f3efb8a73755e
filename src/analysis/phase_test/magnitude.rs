//! The magnitude of a phase effect over seeds: the depth-adjusted phase spread with a bootstrap
//! interval (E4 of `theory/phase-lab.md` §7.5).

use super::config::PhaseRecord;
use super::one_seed::adjusted_phase_accuracies;
use crate::analysis::stats::{BootInterval, Magnitude, Within};
use crate::{Error, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The mean of the seeds' depth-adjusted phase spreads ([`PhaseTest::adjusted_gap_pp`](super::PhaseTest::adjusted_gap_pp): max
/// minus min of the full model's phase accuracies at every prompt's depth) at `stride`, with a
/// 95 % percentile interval from `rounds` stratified bootstrap resamples: each seed's records
/// are resampled with replacement within each phase and the model is refitted. Seeded by `seed`.
pub fn adjusted_gap_interval(seeds: &[Vec<PhaseRecord>], stride: usize, rounds: usize, seed: u64) -> Result<Magnitude> {
    let b = adjusted_gap_bootstrap(seeds, stride, rounds, seed)?;
    Ok(Magnitude { pp: b.estimate, lo_pp: b.lo, hi_pp: b.hi })
}

/// [`adjusted_gap_interval`] with the replicates' mean kept, for the bias-corrected estimate and
/// interval ([`BootInterval::corrected`], `theory/phase-lab.md` §8.7). The same replicates.
pub fn adjusted_gap_bootstrap(
    seeds: &[Vec<PhaseRecord>],
    stride: usize,
    rounds: usize,
    seed: u64,
) -> Result<BootInterval> {
    let all: Vec<usize> = (0..stride).collect();
    adjusted_gap_bootstrap_over(seeds, stride, &all, rounds, seed)
}

/// The spread (max minus min), in percentage points, of depth-adjusted phase accuracies
/// `adjusted` over `phases` only.
pub fn spread_pp(adjusted: &[f64], phases: &[usize]) -> f64 {
    let (lo, hi) = phases
        .iter()
        .filter_map(|&p| adjusted.get(p))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    100.0 * (hi - lo)
}

/// The phases whose key-value pair shares a window (E4 of `theory/phase-lab.md` §8.8): phases
/// `p < stride` of the key's first token with `p + key_len + val_len - 1 <= window - 1`, so
/// the key and its whole value lie in the window that starts at the key's phase 0 (W8/S8 with
/// one-token keys and values: phases 0-6; two-token values: 0-5).
pub fn window_sharing_phases(window: usize, stride: usize, key_len: usize, val_len: usize) -> Vec<usize> {
    (0..stride).filter(|&p| p + key_len + val_len < window + 1).collect()
}

/// [`adjusted_gap_bootstrap`] with the spread taken over `phases` only (E4 of §8.8: the phases
/// whose key-value pair shares a window). Each seed's spread, then their mean (§8.7); the
/// replicates resample every phase's records (all `stride` strata), as the test's data.
pub fn adjusted_gap_bootstrap_over(
    seeds: &[Vec<PhaseRecord>],
    stride: usize,
    phases: &[usize],
    rounds: usize,
    seed: u64,
) -> Result<BootInterval> {
    let (pp, mut boot) = adjusted_gap_replicates(seeds, stride, phases, rounds, seed)?;
    boot.sort_by(f64::total_cmp);
    Ok(BootInterval::from_sorted(pp, &boot))
}

/// The statistic of [`adjusted_gap_bootstrap_over`] and its `rounds` replicates, in the order
/// drawn (so that two arms' replicates can be paired for a difference, §8.8's E8-E9).
pub fn adjusted_gap_replicates(
    seeds: &[Vec<PhaseRecord>],
    stride: usize,
    phases: &[usize],
    rounds: usize,
    seed: u64,
) -> Result<(f64, Vec<f64>)> {
    if seeds.is_empty() {
        return Err(Error::invalid("seeds", "no seeds to pool"));
    }
    if rounds == 0 {
        return Err(Error::invalid("bootstrap rounds", "must be at least 1, got 0"));
    }
    if phases.len() < 2 || phases.iter().any(|&p| p >= stride) {
        return Err(Error::invalid(
            "phases",
            format!("need at least 2 phases below the stride {stride}, got {phases:?}"),
        ));
    }
    let gap = |set: &[Vec<PhaseRecord>]| -> Result<f64> {
        let mut sum = 0.0;
        for r in set {
            sum += spread_pp(&adjusted_phase_accuracies(r, stride)?, phases);
        }
        Ok(sum / set.len() as f64)
    };
    let pp = gap(seeds)?;
    let strata: Vec<Vec<Vec<usize>>> = seeds
        .iter()
        .map(|r| {
            let mut s = vec![Vec::new(); stride];
            for (i, x) in r.iter().enumerate() {
                s[x.position % stride].push(i);
            }
            s
        })
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x00AD_6A95);
    let mut set: Vec<Vec<PhaseRecord>> = seeds.iter().map(|r| Vec::with_capacity(r.len())).collect();
    let mut boot = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        for ((out, r), st) in set.iter_mut().zip(seeds).zip(&strata) {
            out.clear();
            for idx in st.iter().filter(|idx| !idx.is_empty()) {
                for _ in 0..idx.len() {
                    out.push(r[idx[rng.random_range(0..idx.len())]]);
                }
            }
        }
        boot.push(gap(&set)?);
    }
    Ok((pp, boot))
}

/// One seed's records for the seed-level bootstrap, with each record's prompt family where the
/// prompts come in families (stage 2 then draws whole families; otherwise records within their
/// phase, as [`adjusted_gap_replicates`]).
#[derive(Clone, Copy, Debug)]
pub struct SeedRecords<'a> {
    /// The seed's records.
    pub records: &'a [PhaseRecord],
    /// `families[i]`: record `i`'s family (`None`: no families).
    pub families: Option<&'a [usize]>,
}

/// Each arm's estimate, each seed's spread per arm, and the replicates (one mean per arm each).
pub type SeedLevelSpreads = (Vec<f64>, Vec<Vec<f64>>, Vec<Vec<f64>>);

/// The depth-adjusted spread over `phases` of each arm (`arms[a]`: its seeds), as a mean over
/// its seeds, with the seed-level replicates of [`crate::analysis::stats::two_stage`] (seeds
/// drawn with replacement, then families or records within each drawn seed; `paired`: the arms
/// share their seed numbers, in the same order). Returns each arm's estimate, each seed's
/// spread and the replicates (per replicate, one mean per arm).
pub fn adjusted_spread_two_stage(
    arms: &[Vec<SeedRecords>],
    paired: bool,
    stride: usize,
    phases: &[usize],
    rounds: usize,
    seed: u64,
) -> Result<SeedLevelSpreads> {
    if phases.len() < 2 || phases.iter().any(|&p| p >= stride) {
        return Err(Error::invalid(
            "phases",
            format!("need at least 2 phases below the stride {stride}, got {phases:?}"),
        ));
    }
    let mut within = Vec::new();
    let mut each = Vec::new();
    for arm in arms {
        let mut w = Vec::new();
        let mut e = Vec::new();
        for s in arm {
            if let Some(f) = s.families.filter(|f| f.len() != s.records.len()) {
                return Err(Error::invalid(
                    "families",
                    format!("{} families for {} records: one per record", f.len(), s.records.len()),
                ));
            }
            w.push(match s.families {
                Some(f) => Within::families(f),
                None => Within::strata(&s.records.iter().map(|r| r.position % stride).collect::<Vec<_>>()),
            });
            e.push(spread_pp(&adjusted_phase_accuracies(s.records, stride)?, phases));
        }
        within.push(w);
        each.push(e);
    }
    let counts: Vec<usize> = arms.iter().map(|a| a.len()).collect();
    let (mut idx, mut set) = (Vec::new(), Vec::new());
    let reps = crate::analysis::stats::two_stage(&counts, paired, rounds, seed, |a, i, rng| {
        within[a][i].draw(rng, &mut idx);
        set.clear();
        set.extend(idx.iter().map(|&j| arms[a][i].records[j]));
        Ok(spread_pp(&adjusted_phase_accuracies(&set, stride)?, phases))
    })?;
    let means = each.iter().map(|e| e.iter().sum::<f64>() / e.len() as f64).collect();
    Ok((means, each, reps))
}

/// One seed's depth-adjusted spread over `phases` and its within-seed variance from `rounds`
/// stage-2 redraws (families, or records within their phase): the power analysis's `v_i`.
pub fn adjusted_spread_within_seed(
    s: SeedRecords,
    stride: usize,
    phases: &[usize],
    rounds: usize,
    seed: u64,
) -> Result<(f64, f64)> {
    let (_, each, reps) = adjusted_spread_two_stage(&[vec![s]], false, stride, phases, rounds, seed)?;
    Ok((each[0][0], crate::analysis::stats::sample_variance(&crate::analysis::stats::column_sorted(&reps, 0))))
}

/// Where an interval's variance comes from: prompts within each seed (the seeds fixed: what
/// v2's ledger printed) or the two-stage bootstrap (seeds, then prompts or families).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// Prompts resampled within each seed, the seeds fixed.
    Prompts,
    /// Seeds drawn with replacement, then prompts (or families) within each drawn seed.
    Seeds,
}

/// The ratio `R` of two arms' mean depth-adjusted spreads (X1 of `theory/phase-lab.md` §8.8:
/// the ratio of the bias-corrected means, with the basic bootstrap interval of the replicate
/// ratios, clamped at 0 since no ratio of spreads is negative), and both spreads.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpreadRatio {
    /// `R`.
    pub r: f64,
    /// Its interval's lower end.
    pub lo: f64,
    /// Its interval's upper end.
    pub hi: f64,
    /// The numerator arm's spread.
    pub a: BootInterval,
    /// The denominator arm's spread.
    pub b: BootInterval,
    /// The level of the interval.
    pub level: Level,
    /// Seeds of the smaller arm.
    pub seeds: usize,
    /// Whether the seeds were drawn paired (seed-level only).
    pub paired: bool,
}

/// The ratio of `a`'s mean spread over `phases` to `b`'s at `stride` ([`SpreadRatio`]), at
/// `level`: prompts within seeds (each arm's replicates of [`adjusted_gap_replicates`], paired by
/// index) or seeds ([`adjusted_spread_two_stage`], paired by seed when `paired`).
#[allow(clippy::too_many_arguments)]
pub fn spread_ratio(
    a: &[SeedRecords],
    b: &[SeedRecords],
    paired: bool,
    stride: usize,
    phases: &[usize],
    level: Level,
    rounds: usize,
    seed: u64,
) -> Result<SpreadRatio> {
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let (va, vb, ra, rb, paired) = match level {
        Level::Prompts => {
            let recs = |x: &[SeedRecords]| x.iter().map(|s| s.records.to_vec()).collect::<Vec<_>>();
            let (va, ra) = adjusted_gap_replicates(&recs(a), stride, phases, rounds, seed)?;
            let (vb, rb) = adjusted_gap_replicates(&recs(b), stride, phases, rounds, seed)?;
            (va, vb, ra, rb, false)
        }
        Level::Seeds => {
            let (v, _, reps) =
                adjusted_spread_two_stage(&[a.to_vec(), b.to_vec()], paired, stride, phases, rounds, seed)?;
            let (ra, rb) = reps.iter().map(|r| (r[0], r[1])).unzip();
            (v[0], v[1], ra, rb, paired)
        }
    };
    let (ia, ib) =
        (BootInterval::from_sorted(va, &sorted(ra.clone())), BootInterval::from_sorted(vb, &sorted(rb.clone())));
    let (ca, cb) = (ia.corrected_nonneg().0, ib.corrected().0);
    if cb <= 0.0 || vb <= 0.0 {
        return Err(Error::invalid(
            "ratio",
            format!("the denominator's spread is {cb:.2} pp (bias-corrected): no ratio"),
        ));
    }
    let reps = sorted(ra.iter().zip(&rb).filter(|(_, y)| **y > 0.0).map(|(x, y)| x / y).collect());
    if reps.len() < ra.len() / 2 {
        return Err(Error::invalid("ratio", "most of the denominator's replicate spreads are 0: no ratio interval"));
    }
    let (_, lo, hi) = BootInterval::from_sorted(va / vb, &reps).corrected_nonneg();
    Ok(SpreadRatio { r: ca / cb, lo, hi, a: ia, b: ib, level, seeds: a.len().min(b.len()), paired })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records at every (position, depth) cell with exact accuracy `acc(position)`.
    fn grid(acc: impl Fn(usize) -> f64) -> Vec<PhaseRecord> {
        let mut out = Vec::new();
        for position in 24..72 {
            for depth in (8..40).step_by(4) {
                let k = (acc(position) * 10.0).round() as usize;
                out.extend((0..10).map(|j| PhaseRecord { position, depth, correct: j < k }));
            }
        }
        out
    }

    #[test]
    fn the_adjusted_spread_is_the_planted_one_with_an_interval_around_it() {
        let planted = grid(|p| if p % 4 == 0 { 0.6 } else { 0.9 });
        let m = adjusted_gap_interval(&[planted.clone(), planted], 4, 200, 7).unwrap();
        assert!((m.pp - 30.0).abs() < 0.5, "{m:?}");
        assert!(m.lo_pp < m.pp && m.pp < m.hi_pp && m.lo_pp > 20.0 && m.hi_pp < 40.0, "{m:?}");
        let flat = adjusted_gap_interval(&[grid(|_| 0.8)], 4, 200, 7).unwrap();
        assert!(flat.pp < 0.5 && flat.hi_pp < 10.0, "{flat:?}");
        assert_eq!(adjusted_gap_interval(&[grid(|_| 0.8)], 4, 200, 7).unwrap(), flat, "seeded");
        assert!(adjusted_gap_interval(&[], 4, 10, 0).is_err());
    }
}
