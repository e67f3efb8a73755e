//! Accuracy per residue group (with its Wilson 95 % interval), the max phase gap, accuracy
//! folded by phase, and the checks of a fold and of seed-level samples.

use crate::numeric::wilson95;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// z for a two-sided 95 % interval.
/// Accuracy of one residue group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupAccuracy {
    /// Residue group `rho = position mod M`.
    pub group: usize,
    /// Samples in the group.
    pub n: usize,
    /// Correct samples.
    pub correct: usize,
    /// `correct / n` (NaN for an empty group).
    pub accuracy: f64,
    /// Wilson 95 % interval, lower end.
    pub wilson_lo: f64,
    /// Wilson 95 % interval, upper end.
    pub wilson_hi: f64,
}

impl GroupAccuracy {
    /// The accuracy of `group` from `correct` of `n` samples, with its Wilson interval.
    pub fn new(group: usize, correct: usize, n: usize) -> Self {
        let (wilson_lo, wilson_hi) = wilson95(correct, n);
        let accuracy = if n > 0 { correct as f64 / n as f64 } else { f64::NAN };
        GroupAccuracy { group, n, correct, accuracy, wilson_lo, wilson_hi }
    }
}

/// Per-group accuracies from `(group, correct)` samples; groups must lie in `0..m`.
pub fn group_accuracies(samples: &[(usize, bool)], m: usize) -> Result<Vec<GroupAccuracy>> {
    if m == 0 {
        return Err(Error::invalid("residue modulus M", "must be at least 1, got 0"));
    }
    let mut n = vec![0usize; m];
    let mut k = vec![0usize; m];
    for (i, &(g, ok)) in samples.iter().enumerate() {
        if g >= m {
            return Err(Error::invalid("group", format!("sample {i} has group {g}, allowed 0..{m}")));
        }
        n[g] += 1;
        k[g] += ok as usize;
    }
    Ok((0..m).map(|g| GroupAccuracy::new(g, k[g], n[g])).collect())
}

/// Max minus min accuracy over non-empty groups, in percentage points.
pub fn max_gap_pp(groups: &[GroupAccuracy]) -> f64 {
    let accs: Vec<f64> = groups.iter().filter(|g| g.n > 0).map(|g| g.accuracy).collect();
    if accs.is_empty() {
        return f64::NAN;
    }
    let (lo, hi) = accs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    100.0 * (hi - lo)
}

/// The period a gap folds to: `fold`'s stride when it divides `m` (else the one `stride` error),
/// or `m` itself (no fold). The one check of a fold for every gap in this module.
pub(super) fn fold_period(m: usize, fold: Option<usize>) -> Result<usize> {
    match fold {
        Some(s) if s == 0 || !m.is_multiple_of(s) => {
            Err(Error::invalid("stride", format!("must divide M = {m}, got {s}")))
        }
        Some(s) => Ok(s),
        None => Ok(m),
    }
}

/// Every seed of a seed-level statistic needs at least one sample.
pub(super) fn check_seeds<T>(seeds: &[Vec<T>]) -> Result<()> {
    if seeds.is_empty() || seeds.iter().any(|s| s.is_empty()) {
        return Err(Error::invalid("samples", "every seed needs samples"));
    }
    Ok(())
}

/// Accuracy folded by phase `rho mod s` (pooling the samples of the groups of each phase).
pub fn fold_by_phase(groups: &[GroupAccuracy], s: usize) -> Result<Vec<GroupAccuracy>> {
    fold_period(groups.len(), Some(s))?;
    let mut n = vec![0usize; s];
    let mut k = vec![0usize; s];
    for g in groups {
        n[g.group % s] += g.n;
        k[g.group % s] += g.correct;
    }
    Ok((0..s).map(|p| GroupAccuracy::new(p, k[p], n[p])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_known_values() {
        // 8 of 10: Wilson 95 % interval (0.4902, 0.9433) (standard tables).
        let (lo, hi) = wilson95(8, 10);
        assert!((lo - 0.4902).abs() < 1e-4 && (hi - 0.9433).abs() < 1e-4, "{lo} {hi}");
        assert_eq!(wilson95(0, 0), (0.0, 1.0));
        let (lo, hi) = wilson95(0, 20);
        assert_eq!(lo, 0.0);
        assert!(hi > 0.1 && hi < 0.2);
    }

    #[test]
    fn bad_groups_are_named() {
        let e = group_accuracies(&[(0, true), (30, false)], 24).unwrap_err().to_string();
        assert!(e.contains("sample 1") && e.contains("group 30"), "{e}");
        assert!(fold_by_phase(&group_accuracies(&[], 24).unwrap(), 5).is_err());
    }
}
