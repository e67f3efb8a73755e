//! Power from per-seed effects (issue 38, `theory/power.md`): how many seeds a seed-level
//! interval needs to decide at a threshold, and the prompts per seed beyond which more prompts
//! stop helping.
//!
//! A magnitude is a mean over `k` seeds of per-seed values `x_i`. Each `x_i` varies between
//! seeds (variance `sb2`, the training process) and within its seed (variance `sw2` at the run's
//! `n0` prompts or families per seed, from the seed's own stage-2 bootstrap; it scales as
//! `n0 / n` with `n` units). By the method of moments `sb2 = max(0, s2 - mean(v_i))`, with `s2`
//! the sample variance of the `x_i` and `v_i` each seed's bootstrap variance. The seed mean's
//! variance with `k` seeds and `n` units each is `(sb2 + sw2 n0 / n) / k`.
//!
//! * **Seeds to decide**: the smallest `k >= 2` whose interval `x +- t_{k-1} sqrt(v / k)`
//!   excludes the threshold `T`, with `v` the per-seed variance at `n0` and the estimate held at
//!   its observed value (a planning figure, not a guarantee: with 2 or 3 seeds `sb2` itself is
//!   uncertain by a factor of several).
//! * **Units enough**: more units per seed stop helping once the within-seed share of a seed's
//!   variance is at most [`WITHIN_SHARE`]: `n* = n0 sw2 (1 - share) / (share sb2)`; beyond it,
//!   doubling the prompts narrows the interval by less than 5 %. With no between-seed variance
//!   detected (`sb2 = 0`) prompts keep helping (`None`).
//! * A ratio `R = A / B` of two arms' means (X1) takes the delta method's per-seed variance
//!   `R^2 (vA / A^2 + vB / B^2)`.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use statrs::distribution::ContinuousCDF;
use statrs::distribution::StudentsT;

/// The within-seed share of a seed's variance below which more prompts stop helping.
pub const WITHIN_SHARE: f64 = 0.1;
/// The most seeds the search for [`seeds_to_decide`] tries.
pub const MAX_SEEDS: usize = 10_000;

/// The sample variance (`n - 1` denominator); 0 for fewer than 2 values.
pub fn sample_variance(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64
}

/// The between- and within-seed variance of a per-seed statistic.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Components {
    /// Seeds.
    pub seeds: usize,
    /// The mean over seeds.
    pub mean: f64,
    /// Between-seed variance `sb2` (method of moments, at least 0).
    pub between_var: f64,
    /// Within-seed variance `sw2` of one seed's value at `units` units (mean over seeds).
    pub within_var: f64,
    /// Units (prompts or families) per seed now, `n0`.
    pub units: usize,
}

impl Components {
    /// From each seed's value and its within-seed (bootstrap) variance at `units` units.
    pub fn of(values: &[f64], within_var: &[f64], units: usize) -> Result<Self> {
        if values.is_empty() || values.len() != within_var.len() || units == 0 {
            return Err(Error::invalid(
                "per-seed effects",
                format!(
                    "need one within-seed variance per seed and at least 1 unit, got {} values, {} variances, {units} units",
                    values.len(),
                    within_var.len()
                ),
            ));
        }
        if values.iter().chain(within_var).any(|x| !x.is_finite()) || within_var.iter().any(|&v| v < 0.0) {
            return Err(Error::invalid("per-seed effects", "must be finite, variances at least 0"));
        }
        let n = values.len() as f64;
        let within = within_var.iter().sum::<f64>() / n;
        Ok(Components {
            seeds: values.len(),
            mean: values.iter().sum::<f64>() / n,
            between_var: (sample_variance(values) - within).max(0.0),
            within_var: within,
            units,
        })
    }

    /// A seed's variance at the run's units, `sb2 + sw2`.
    pub fn per_seed_var(&self) -> f64 {
        self.between_var + self.within_var
    }

    /// The units per seed beyond which more stop helping (see the module doc); `None` with no
    /// between-seed variance detected.
    pub fn units_enough(&self) -> Option<usize> {
        if self.between_var <= 0.0 {
            return None;
        }
        let n = self.units as f64 * self.within_var * (1.0 - WITHIN_SHARE) / (WITHIN_SHARE * self.between_var);
        Some(n.ceil().max(1.0) as usize)
    }
}

/// The delta method's per-seed variance of the ratio of `a`'s mean to `b`'s.
pub fn ratio_per_seed_var(a: &Components, b: &Components) -> f64 {
    let r = a.mean / b.mean;
    r * r * (a.per_seed_var() / (a.mean * a.mean) + b.per_seed_var() / (b.mean * b.mean))
}

/// The smallest number of seeds `k >= 2` whose 95 % t interval `estimate +- t_{k-1} sqrt(v / k)`
/// excludes `threshold`, for a per-seed variance `v`; `None` when the estimate sits at the
/// threshold or more than [`MAX_SEEDS`] would be needed.
pub fn seeds_to_decide(estimate: f64, per_seed_var: f64, threshold: f64) -> Option<usize> {
    let d = (estimate - threshold).abs();
    if d.is_nan() || d <= 0.0 || !per_seed_var.is_finite() {
        return None;
    }
    if per_seed_var <= 0.0 {
        return Some(2);
    }
    // t_{k-1} falls with k, so the condition is monotone: bisect.
    let ok = |k: usize| -> bool {
        let t = StudentsT::new(0.0, 1.0, (k - 1) as f64).map(|d| d.inverse_cdf(0.975)).unwrap_or(f64::INFINITY);
        t * (per_seed_var / k as f64).sqrt() < d
    };
    if !ok(MAX_SEEDS) {
        return None;
    }
    let (mut lo, mut hi) = (2usize, MAX_SEEDS);
    if ok(lo) {
        return Some(lo);
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_split_the_variance_and_seeds_follow() {
        // Seeds 10 / 20 / 30 (sample variance 100), each with within variance 4: sb2 = 96.
        let c = Components::of(&[10.0, 20.0, 30.0], &[4.0, 4.0, 4.0], 240).unwrap();
        assert!((c.between_var - 96.0).abs() < 1e-9 && (c.within_var - 4.0).abs() < 1e-9, "{c:?}");
        // n* = 240 * 4 * 0.9 / (0.1 * 96) = 90 units.
        assert_eq!(c.units_enough(), Some(90));
        // Mean 20 against 25: t_{k-1}^2 * 100 / k < 25 first holds at k = 18 (t_17 = 2.110).
        assert_eq!(seeds_to_decide(20.0, c.per_seed_var(), 25.0), Some(18));
        // Control: a threshold further away needs fewer seeds; at the estimate, never.
        assert!(seeds_to_decide(20.0, c.per_seed_var(), 40.0).unwrap() < 5);
        assert_eq!(seeds_to_decide(20.0, 100.0, 20.0), None);
        // No between-seed variance: prompts keep helping.
        let flat = Components::of(&[20.0, 20.0, 20.0], &[4.0, 4.0, 4.0], 240).unwrap();
        assert_eq!(flat.units_enough(), None);
        assert!(Components::of(&[1.0], &[], 10).is_err());
        assert!(Components::of(&[1.0], &[-1.0], 10).is_err());
    }

    #[test]
    fn a_ratio_takes_the_delta_method() {
        let a = Components { seeds: 3, mean: 10.0, between_var: 4.0, within_var: 0.0, units: 1 };
        let b = Components { seeds: 3, mean: 20.0, between_var: 16.0, within_var: 0.0, units: 1 };
        // R = 0.5; var = 0.25 * (4 / 100 + 16 / 400) = 0.02.
        assert!((ratio_per_seed_var(&a, &b) - 0.02).abs() < 1e-12);
    }
}
