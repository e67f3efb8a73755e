//! How often a meaning-preserving shift changes a model's answer (issue 42, item 4): the flip
//! rate of `theory/flip-rate.md`, per seed and per arm with its seed-level interval, and the
//! curve of how often two members of a family `k` tokens apart answer differently.

use super::stats::{column_sorted, difference_replicates, two_stage, BootInterval, SeedCount};
use crate::{Error, Result};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One scored prompt as the flip rate reads it: its phase family, its target's source-key
/// position, and the model's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The prompt's phase family.
    pub family: usize,
    /// The target's source-key position.
    pub position: usize,
    /// The model's answer (`Outcome::predicted`).
    pub predicted: String,
}

/// The flip rate's share at one distance `k` between two members of a family.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShiftFlips {
    /// Distance in tokens between the two members' targets.
    pub shift: usize,
    /// Pairs at this distance, over every seed.
    pub pairs: usize,
    /// Of them, pairs whose answers differ.
    pub differ: usize,
    /// The mean over the seeds with pairs at this distance of each seed's share of differing
    /// pairs.
    pub rate: f64,
}

/// An arm's flip rate (`theory/flip-rate.md`): fractions in `[0, 1]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlipRate {
    /// Each seed's flip rate (mean flip fraction over its families), in the order given.
    pub per_seed: Vec<f64>,
    /// Bias-corrected mean over seeds and its seed-level 95 % interval, clamped to `[0, 1]`:
    /// `(estimate, lo, hi)`.
    pub interval: (f64, f64, f64),
    /// How many seeds the interval rests on.
    pub seed_count: SeedCount,
    /// Families per seed.
    pub families: Vec<usize>,
    /// The shift curve, by increasing distance.
    pub curve: Vec<ShiftFlips>,
}

/// The members of each family of one seed, by family id.
fn by_family(answers: &[Answer]) -> BTreeMap<usize, Vec<&Answer>> {
    let mut by: BTreeMap<usize, Vec<&Answer>> = BTreeMap::new();
    for a in answers {
        by.entry(a.family).or_default().push(a);
    }
    by
}

/// A family's flip fraction `(m - c) / m`, `c` the count of its most frequent answer.
pub fn flip_fraction(members: &[&str]) -> f64 {
    if members.is_empty() {
        return 0.0;
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in members {
        *counts.entry(m).or_default() += 1;
    }
    let c = counts.values().copied().max().unwrap_or(0);
    (members.len() - c) as f64 / members.len() as f64
}

/// Each family's flip fraction, in family order.
fn fractions(answers: &[Answer]) -> Vec<f64> {
    by_family(answers)
        .values()
        .map(|f| flip_fraction(&f.iter().map(|a| a.predicted.as_str()).collect::<Vec<_>>()))
        .collect()
}

/// One seed's `(pairs, differing pairs)` by distance.
fn pair_counts(answers: &[Answer]) -> BTreeMap<usize, (usize, usize)> {
    let mut out: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    for members in by_family(answers).values() {
        for (i, a) in members.iter().enumerate() {
            for b in &members[i + 1..] {
                let e = out.entry(a.position.abs_diff(b.position)).or_default();
                e.0 += 1;
                e.1 += usize::from(a.predicted != b.predicted);
            }
        }
    }
    out
}

/// An arm's flip rate from its seeds' answers (`seeds[i]`: seed `i`'s prompts), with `rounds`
/// two-stage replicates seeded by `seed`. Every seed needs at least one prompt.
pub fn flip_rate(seeds: &[Vec<Answer>], rounds: usize, seed: u64) -> Result<FlipRate> {
    if seeds.is_empty() || seeds.iter().any(Vec::is_empty) {
        return Err(Error::invalid("flip rate", "every seed needs at least one answered prompt"));
    }
    let fracs: Vec<Vec<f64>> = seeds.iter().map(|s| fractions(s)).collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let per_seed: Vec<f64> = fracs.iter().map(|f| mean(f)).collect();
    // Stage 2 draws the seed's families with replacement (a family's shifts stay together).
    let reps = two_stage(&[seeds.len()], false, rounds, seed, |_, i, rng| {
        let f = &fracs[i];
        Ok((0..f.len()).map(|_| f[rng.random_range(0..f.len())]).sum::<f64>() / f.len() as f64)
    })?;
    let (m, lo, hi) = BootInterval::from_sorted(mean(&per_seed), &column_sorted(&reps, 0)).corrected();
    let mut curve: BTreeMap<usize, (usize, usize, f64, usize)> = BTreeMap::new();
    for s in seeds {
        for (k, (pairs, differ)) in pair_counts(s) {
            let e = curve.entry(k).or_default();
            e.0 += pairs;
            e.1 += differ;
            e.2 += differ as f64 / pairs as f64;
            e.3 += 1;
        }
    }
    Ok(FlipRate {
        per_seed,
        interval: (m.clamp(0.0, 1.0), lo.clamp(0.0, 1.0), hi.clamp(0.0, 1.0)),
        seed_count: SeedCount { seeds: seeds.len() },
        families: fracs.iter().map(Vec::len).collect(),
        curve: curve
            .into_iter()
            .map(|(shift, (pairs, differ, sum, n))| ShiftFlips { shift, pairs, differ, rate: sum / n as f64 })
            .collect(),
    })
}

/// Two arms' flip rates and their difference (`arm` minus `base`), fractions, each with its
/// seed-level replicates summarised (read bias-corrected, [`BootInterval::corrected`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlipDifference {
    /// The arm's flip rate.
    pub arm: BootInterval,
    /// The base arm's (full attention's).
    pub base: BootInterval,
    /// The difference.
    pub difference: BootInterval,
}

/// The difference of the flip rates of `arm` and `base` (each `seeds[i]`: seed `i`'s prompts)
/// with the two-stage bootstrap of `theory/flip-rate.md`, each arm's seeds drawn independently
/// (the arms' seeds are different models even where their numbers agree), `rounds` replicates
/// seeded by `seed` (`theory/phase-lab.md` §9.7, E14).
pub fn flip_difference(arm: &[Vec<Answer>], base: &[Vec<Answer>], rounds: usize, seed: u64) -> Result<FlipDifference> {
    if [arm, base].iter().any(|s| s.is_empty() || s.iter().any(Vec::is_empty)) {
        return Err(Error::invalid("flip rate", "every seed of both arms needs at least one answered prompt"));
    }
    let fracs: [Vec<Vec<f64>>; 2] = [arm, base].map(|s| s.iter().map(|x| fractions(x)).collect());
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let est: Vec<f64> = fracs.iter().map(|f| mean(&f.iter().map(|x| mean(x)).collect::<Vec<f64>>())).collect();
    let reps = two_stage(&[arm.len(), base.len()], false, rounds, seed, |a, i, rng| {
        let f = &fracs[a][i];
        Ok((0..f.len()).map(|_| f[rng.random_range(0..f.len())]).sum::<f64>() / f.len() as f64)
    })?;
    Ok(FlipDifference {
        arm: BootInterval::from_sorted(est[0], &column_sorted(&reps, 0)),
        base: BootInterval::from_sorted(est[1], &column_sorted(&reps, 1)),
        difference: BootInterval::from_sorted(est[0] - est[1], &difference_replicates(&reps, 0, 1)),
    })
}

#[cfg(test)]
mod tests {
    use super::{flip_difference, flip_fraction, flip_rate, Answer};

    /// E14's comparison: an arm whose families flip against a base whose answers never change
    /// reads an interval above 0; the base against itself (a shift-invariant arm) reads 0 and an
    /// interval that does not lie above 0 (the negative control).
    #[test]
    fn the_difference_to_full_attention_is_above_zero_only_when_the_arm_flips() {
        let stable: Vec<Answer> = (0..12).flat_map(|f| family(f, &["a", "a", "a", "a"])).collect();
        let flips: Vec<Answer> = (0..12)
            .flat_map(|f| family(f, if f % 2 == 0 { &["a", "b", "a", "a"] } else { &["a", "a", "a", "a"] }))
            .collect();
        let d = flip_difference(&vec![flips.clone(); 4], &vec![stable.clone(); 4], 400, 5).unwrap();
        assert!((d.difference.estimate - 0.125).abs() < 1e-9 && d.difference.corrected().1 > 0.0, "{d:?}");
        assert_eq!(d.base.estimate, 0.0);
        let same = flip_difference(&vec![stable.clone(); 4], &vec![stable.clone(); 3], 400, 5).unwrap();
        assert_eq!(same.difference.corrected(), (0.0, 0.0, 0.0));
        assert!(!(same.difference.corrected().1 > 0.0));
        assert!(flip_difference(&[], &[stable], 10, 0).is_err());
    }

    fn family(f: usize, answers: &[&str]) -> Vec<Answer> {
        answers
            .iter()
            .enumerate()
            .map(|(g, a)| Answer { family: f, position: 100 + g, predicted: a.to_string() })
            .collect()
    }

    #[test]
    fn a_family_flips_by_its_minority_share_and_agreement_is_zero_right_or_wrong() {
        assert_eq!(flip_fraction(&["8", "8", "8", "8"]), 0.0);
        assert_eq!(flip_fraction(&["8", "32", "8", "8"]), 0.25);
        assert_eq!(flip_fraction(&["8", "32", "8", "32"]), 0.5);
        assert_eq!(flip_fraction(&["a", "b", "c", "d"]), 0.75);
    }

    #[test]
    fn the_rate_averages_families_then_seeds_and_the_curve_counts_pairs_by_distance() {
        // Seed 0: one stable family, one that flips at one member; seed 1: every family stable.
        let s0 = [family(0, &["8", "8", "8", "8"]), family(1, &["8", "32", "8", "8"])].concat();
        let s1 = [family(0, &["1", "1", "1", "1"]), family(1, &["2", "2", "2", "2"])].concat();
        let r = flip_rate(&[s0.clone(), s1], 500, 7).unwrap();
        assert_eq!(r.per_seed, vec![0.125, 0.0]);
        assert!((r.interval.0 - 0.0625).abs() < 0.03, "{:?}", r.interval);
        assert!(r.interval.1 <= r.interval.0 && r.interval.0 <= r.interval.2, "{:?}", r.interval);
        // Distances 1, 2, 3 between 4 members: 3, 2 and 1 pairs per family; member 1 differs from
        // members 0 and 2 (distance 1) and 3 (distance 2), never at distance 3.
        let shifts: Vec<(usize, usize, usize)> = r.curve.iter().map(|c| (c.shift, c.pairs, c.differ)).collect();
        assert_eq!(shifts, vec![(1, 12, 2), (2, 8, 1), (3, 4, 0)]);
        // The same seed gives the same numbers; another gives another draw.
        assert_eq!(
            flip_rate(&[s0.clone(), family(0, &["x", "x"])], 200, 3).unwrap(),
            flip_rate(&[s0.clone(), family(0, &["x", "x"])], 200, 3).unwrap()
        );
        assert!(flip_rate(&[vec![]], 10, 0).is_err());
        // The order of the prompts, and of the seeds' prompts among themselves, changes nothing;
        // relabelling every answer alike changes nothing; one planted flip raises the rate.
        let mut shuffled = s0.clone();
        shuffled.reverse();
        assert_eq!(
            flip_rate(&[shuffled], 100, 1).unwrap().per_seed,
            flip_rate(std::slice::from_ref(&s0), 100, 1).unwrap().per_seed
        );
        let renamed: Vec<Answer> =
            s0.iter().map(|a| Answer { predicted: format!("x{}", a.predicted), ..a.clone() }).collect();
        assert_eq!(flip_rate(&[renamed], 100, 1).unwrap().per_seed, vec![0.125]);
        let mut planted = s0.clone();
        planted[0].predicted = "99".into();
        assert_eq!(flip_rate(&[planted], 100, 1).unwrap().per_seed, vec![0.25]);
    }
}
