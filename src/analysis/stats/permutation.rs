//! The seeded permutation test of phase dependence and how p-values print ([`PValue`]).

use super::groups::{group_accuracies, max_gap_pp};
use crate::{Error, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

/// Permutation test of phase dependence: shuffles correctness across samples (keeping group
/// sizes) `rounds` times with a seeded RNG and returns the p-value `(1 + #{gap >= observed}) /
/// (1 + rounds)` for the max phase gap. Exact under the null of no dependence, whatever the
/// counts, so it is the test to trust when groups are small.
pub fn permutation_test(samples: &[(usize, bool)], m: usize, rounds: usize, seed: u64) -> Result<f64> {
    permutation_test_stopping(samples, m, rounds, seed, &crate::stop::Stop::never())
}

/// [`permutation_test`] with `stop` polled every round (a round shuffles every sample: on a
/// million samples, tens of milliseconds).
pub fn permutation_test_stopping(
    samples: &[(usize, bool)],
    m: usize,
    rounds: usize,
    seed: u64,
    stop: &crate::stop::Stop,
) -> Result<f64> {
    if rounds == 0 {
        return Err(Error::invalid("rounds", "must be at least 1"));
    }
    let observed = max_gap_pp(&group_accuracies(samples, m)?);
    let groups: Vec<usize> = samples.iter().map(|s| s.0).collect();
    let mut labels: Vec<bool> = samples.iter().map(|s| s.1).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut at_least = 0usize;
    for _ in 0..rounds {
        stop.check("the permutation test")?;
        labels.shuffle(&mut rng);
        let shuffled: Vec<(usize, bool)> = groups.iter().copied().zip(labels.iter().copied()).collect();
        if max_gap_pp(&group_accuracies(&shuffled, m)?) >= observed - 1e-12 {
            at_least += 1;
        }
    }
    Ok((1 + at_least) as f64 / (1 + rounds) as f64)
}

/// How a p-value is printed everywhere: below `1e-3` as `1.2e-5`, otherwise with three
/// decimals (`0.042`).
pub fn format_p(p: f64) -> String {
    if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

/// A p-value and how it was obtained: asymptotic (`rounds` is `None`) or by resampling
/// (`rounds` simulated or permuted data sets, `p = (1 + #{as extreme}) / (1 + rounds)`).
/// A resampled p-value at its floor `1 / (rounds + 1)` only says the true p-value is at most
/// that, so it prints as `< 1/(rounds+1)` (e.g. `< 5.0e-4` for 1 999 rounds).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PValue {
    /// The p-value.
    pub value: f64,
    /// Resampling rounds, when resampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<usize>,
}

impl PValue {
    /// An asymptotic (or exact, closed-form) p-value.
    pub fn asymptotic(value: f64) -> Self {
        PValue { value, rounds: None }
    }

    /// The resampled p-value `(1 + exceed) / (1 + rounds)`.
    pub fn resampled(exceed: usize, rounds: usize) -> Self {
        PValue { value: (1 + exceed.min(rounds)) as f64 / (1 + rounds) as f64, rounds: Some(rounds) }
    }

    /// The smallest value resampling can give, `1 / (rounds + 1)` (`None` when asymptotic).
    pub fn floor(&self) -> Option<f64> {
        self.rounds.map(|r| 1.0 / (r + 1) as f64)
    }

    /// Whether a resampled p-value sits at its floor.
    pub fn at_floor(&self) -> bool {
        self.floor().is_some_and(|f| self.value <= f * (1.0 + 1e-9))
    }

    /// Whether the p-value is below `alpha`.
    pub fn below(&self, alpha: f64) -> bool {
        self.value < alpha
    }
}

impl std::fmt::Display for PValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.floor() {
            Some(floor) if self.at_floor() => write!(f, "< {}", format_p(floor)),
            _ => write!(f, "{}", format_p(self.value)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The permutation test stops when asked (polled every round: `audit analyze` on a million
    /// outcomes stopped 6 s after SIGTERM before, 0.03 s now) and gives the same p as the
    /// unstoppable form when never asked.
    #[test]
    fn the_permutation_test_stops_when_asked_and_otherwise_changes_nothing() {
        let samples: Vec<(usize, bool)> = (0..4000).map(|i| (i % 8, i % 3 == 0)).collect();
        let never = crate::stop::Stop::never();
        let p = permutation_test(&samples, 8, 99, 5).unwrap();
        assert_eq!(permutation_test_stopping(&samples, 8, 99, 5, &never).unwrap(), p);
        let rounds = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = std::sync::Arc::clone(&rounds);
        let stop = crate::stop::Stop::when(move || seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 10);
        let e = permutation_test_stopping(&samples, 8, 99, 5, &stop).unwrap_err();
        assert!(matches!(e, Error::Interrupted { .. }) && e.to_string().contains("permutation test"), "{e}");
        assert_eq!(rounds.load(std::sync::atomic::Ordering::SeqCst), 11, "polled once per round until asked");
    }
}
