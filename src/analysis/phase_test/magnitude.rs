//! The magnitude of a phase effect over seeds: the depth-adjusted phase spread with a bootstrap
//! interval (E4 of `theory/phase-lab.md` §7.5).

use super::*;
use crate::analysis::stats::{BootInterval, Magnitude};

/// The mean of the seeds' depth-adjusted phase spreads ([`PhaseTest::adjusted_gap_pp`]: max
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
