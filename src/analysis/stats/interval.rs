//! Intervals: quantiles of sorted data, a magnitude with its 95 % interval, the bootstrap
//! percentile and bias-corrected intervals.

use serde::{Deserialize, Serialize};

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
