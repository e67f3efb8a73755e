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
    if seeds.is_empty() {
        return Err(Error::invalid("seeds", "no seeds to pool"));
    }
    if rounds == 0 {
        return Err(Error::invalid("bootstrap rounds", "must be at least 1, got 0"));
    }
    let cfg = PhaseTestConfig { seed, ..PhaseTestConfig::default() };
    let gap = |set: &[Vec<PhaseRecord>]| -> Result<f64> {
        let mut sum = 0.0;
        for r in set {
            let prep = prepare(r, stride, &cfg)?;
            sum += prep.summary(stride, r, PValue::asymptotic(1.0), TestMethod::Asymptotic).adjusted_gap_pp;
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
    boot.sort_by(f64::total_cmp);
    Ok(BootInterval::from_sorted(pp, &boot))
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
