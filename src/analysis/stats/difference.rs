//! The difference of two arms' mean accuracies with its stratified bootstrap interval (X1's
//! accuracy cost), and the check of the counts it takes.

use super::interval::BootInterval;
use super::resample::bootstrap_draw;
use crate::{Error, Result};
use rand::SeedableRng;

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
