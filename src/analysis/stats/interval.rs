//! Intervals: quantiles of sorted data, a magnitude with its 95 % interval, the bootstrap
//! percentile and bias-corrected intervals, and the accuracy difference of two arms.

use super::resample::bootstrap_draw;
use crate::{Error, Result};
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

/// Two arms' `(correct, n)` per seed, as every accuracy difference takes them.
pub(super) fn check_arm_counts(a: &[(usize, usize)], b: &[(usize, usize)]) -> Result<()> {
    if a.is_empty() || b.is_empty() || a.iter().chain(b).any(|&(k, n)| n == 0 || k > n) {
        return Err(Error::invalid(
            "accuracy difference",
            "needs at least one seed per arm, each with 1 or more prompts and at most n correct",
        ));
    }
    Ok(())
}

/// The `q` quantile (`0 <= q <= 1`) of sorted data by linear interpolation between order
/// statistics (Hyndman-Fan type 7, R's default); NaN for no data.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let h = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// A measured magnitude (percentage points) with its 95 % interval: what a phase claim's
/// verdict ([`crate::analysis::verdict::verdict`]) weighs against the paper's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Magnitude {
    /// Point estimate.
    pub pp: f64,
    /// Interval, lower end.
    pub lo_pp: f64,
    /// Interval, upper end.
    pub hi_pp: f64,
}

/// A statistic with its bootstrap replicates summarised: the 95 % percentile interval and the
/// replicates' mean. A max-minus-min statistic is biased upward under resampling (the percentile
/// interval of a gap near 0 can lie wholly above it), so [`BootInterval::corrected`] gives the
/// bias-corrected estimate `2 m - mean(m*)` with the basic (reverse-percentile) bootstrap
/// interval `[2 m - q_97.5, 2 m - q_2.5]`: it contains its estimate whenever the replicates'
/// mean lies inside their own 95 % range. (The percentile interval shifted by the bias, as
/// `theory/phase-lab.md` §8.7 words it, contains the estimate only when `m` itself lies in the
/// percentile interval, which is exactly what fails for these gaps; see §7.9.)
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BootInterval {
    /// The statistic on the data.
    pub estimate: f64,
    /// The replicates' 2.5 % quantile.
    pub lo: f64,
    /// The replicates' 97.5 % quantile.
    pub hi: f64,
    /// The replicates' mean.
    pub boot_mean: f64,
}

impl BootInterval {
    /// From the statistic on the data and its replicates, sorted ascending.
    pub fn from_sorted(estimate: f64, sorted: &[f64]) -> Self {
        let boot_mean = if sorted.is_empty() { f64::NAN } else { sorted.iter().sum::<f64>() / sorted.len() as f64 };
        BootInterval { estimate, lo: quantile_sorted(sorted, 0.025), hi: quantile_sorted(sorted, 0.975), boot_mean }
    }

    /// The bootstrap bias `mean(m*) - m`.
    pub fn bias(&self) -> f64 {
        self.boot_mean - self.estimate
    }

    /// The bias-corrected estimate and its basic bootstrap interval `(estimate, lo, hi)`.
    pub fn corrected(&self) -> (f64, f64, f64) {
        let m = self.estimate;
        (m - self.bias(), 2.0 * m - self.hi, 2.0 * m - self.lo)
    }

    /// [`BootInterval::corrected`] of a statistic that cannot be negative (a max minus min, a
    /// ratio of spreads), each end clamped at 0 (issue 38): the bias correction `2 m - mean(m*)`
    /// and the basic interval's `2 m - q_97.5` can fall below 0 when most replicates sit above a
    /// small `m`, a value the statistic cannot take.
    pub fn corrected_nonneg(&self) -> (f64, f64, f64) {
        let (m, lo, hi) = self.corrected();
        (m.max(0.0), lo.max(0.0), hi.max(0.0))
    }
}

/// The difference `a - b` of two arms' mean accuracies, pp: each arm's mean over its seeds of
/// the seed's accuracy (`(correct, n)` per seed), with `rounds` stratified bootstrap replicates
/// that redraw each seed's prompts with replacement (`theory/phase-lab.md` §8.8, X1's accuracy
/// cost). Every seed needs at least one prompt.
pub fn accuracy_difference(
    a: &[(usize, usize)],
    b: &[(usize, usize)],
    rounds: usize,
    seed: u64,
) -> Result<BootInterval> {
    check_arm_counts(a, b)?;
    let mean = |counts: &[(usize, usize)], k: &[usize]| {
        100.0 * counts.iter().zip(k).map(|(&(_, n), &k)| k as f64 / n as f64).sum::<f64>() / counts.len() as f64
    };
    let split = |c: &[(usize, usize)]| -> (Vec<usize>, Vec<usize>) { c.iter().map(|&(k, n)| (n, k)).unzip() };
    let ((na, ka), (nb, kb)) = (split(a), split(b));
    let estimate = mean(a, &ka) - mean(b, &kb);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (mut ra, mut rb) = (vec![0usize; a.len()], vec![0usize; b.len()]);
    let mut reps: Vec<f64> = (0..rounds)
        .map(|_| {
            bootstrap_draw(&na, &ka, &mut rng, &mut ra);
            bootstrap_draw(&nb, &kb, &mut rng, &mut rb);
            mean(a, &ra) - mean(b, &rb)
        })
        .collect();
    reps.sort_by(f64::total_cmp);
    Ok(BootInterval::from_sorted(estimate, &reps))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// X1's accuracy cost: the estimate is the difference of the seed-mean accuracies; equal
    /// arms give an interval around 0; a 5 pp worse arm at 5 000 prompts per seed gives an
    /// interval excluding -1 pp (the control: the margin's test must see a real cost); bad
    /// counts are refused.
    #[test]
    fn accuracy_differences_and_their_intervals() {
        let same = [(4_800, 5_000), (4_900, 5_000), (4_850, 5_000)];
        let d = accuracy_difference(&same, &same, 1000, 7).unwrap();
        assert_eq!(d.estimate, 0.0);
        let (_, lo, hi) = d.corrected();
        assert!(lo < 0.0 && hi > 0.0 && hi - lo < 2.0, "{lo} {hi}");
        let worse = [(4_550, 5_000), (4_650, 5_000), (4_600, 5_000)];
        let d = accuracy_difference(&worse, &same, 1000, 7).unwrap();
        assert!((d.estimate + 5.0).abs() < 1e-9, "{}", d.estimate);
        let (_, lo, hi) = d.corrected();
        assert!(hi < -1.0 && lo > -7.0, "{lo} {hi}");
        assert_eq!(accuracy_difference(&worse, &same, 1000, 7).unwrap(), d, "same seed, same numbers");
        assert!(accuracy_difference(&[], &same, 10, 0).is_err());
        assert!(accuracy_difference(&[(1, 0)], &same, 10, 0).is_err());
        assert!(accuracy_difference(&[(3, 2)], &same, 10, 0).is_err());
    }
}
