//! Seed-level inference (issue 38, `theory/phase-lab.md` §8.11 and `theory/power.md`): the
//! one two-stage bootstrap of every magnitude and every comparison of arms.
//!
//! A magnitude of the v2 ledger is a mean over seeds of a per-seed statistic (§8.7). Resampling
//! prompts within each seed describes the trained models, not the training process: seeds
//! differ far more than prompts (w8s8's spread is 5 / 26 / 37 pp by seed). The two-stage
//! bootstrap draws, per replicate, the arm's seeds with replacement (stage 1), then within each
//! drawn seed its resampling units with replacement (stage 2: prompt *families* where the
//! prompts come in families, the unit that keeps a prompt's shifts paired, else prompts within
//! their stratum), and averages the drawn seeds' statistics. Two arms that share their seed
//! numbers are compared *paired*: the same seed indices are drawn for both.
//!
//! With `n` seeds stage 1 has only `C(2n - 1, n)` distinct draws (3 for 2 seeds, 10 for 3):
//! the interval is coarse and every report says how many seeds it rests on ([`SeedCount`]).
//! Each seed draws its stage-2 units from its own stream (seeded by the replicate and the
//! seed's index), so the same seed gives the same numbers.

use super::difference::check_arm_counts;
use super::groups::{check_seeds, fold_period};
use super::interval::BootInterval;
use super::power::sample_variance;
use super::resample::{bootstrap_draw, gap_of, BOOTSTRAP_ROUNDS};
use crate::{Error, Result};
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The seed-level rounds of the ledger (as the prompt-level bootstrap's).
pub const SEED_LEVEL_ROUNDS: usize = BOOTSTRAP_ROUNDS;

/// How few seeds an interval rests on: `n` seeds, and the word the ledger prints beside it
/// (`2 seeds: coarse` for fewer than 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedCount {
    /// Seeds of the arm (of the smaller arm in a comparison).
    pub seeds: usize,
}

impl SeedCount {
    /// The words: `n seeds`, with `only` and `coarse` below 3 seeds (stage 1 has at most 3
    /// distinct draws there) and `one seed: no between-seed variance` for 1.
    pub fn words(&self) -> String {
        match self.seeds {
            0 => "no seeds".into(),
            1 => "1 seed: no between-seed variance, prompt-level only".into(),
            2 => "only 2 seeds: coarse (3 distinct seed draws)".into(),
            n => format!("{n} seeds"),
        }
    }
}

/// How one seed's data are redrawn in stage 2: indices into the seed's records.
#[derive(Clone, Debug, PartialEq)]
pub enum Within {
    /// Whole families (each a list of record indices) drawn with replacement: the unit that
    /// keeps a prompt's shifts together.
    Families(Vec<Vec<usize>>),
    /// Within each stratum (e.g. a phase), its records drawn with replacement.
    Strata(Vec<Vec<usize>>),
}

impl Within {
    /// Families from each record's family id (`families[i]` is record `i`'s).
    pub fn families(families: &[usize]) -> Self {
        let mut by: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for (i, &f) in families.iter().enumerate() {
            by.entry(f).or_default().push(i);
        }
        Within::Families(by.into_values().collect())
    }

    /// Strata from each record's stratum (`strata[i]` is record `i`'s).
    pub fn strata(strata: &[usize]) -> Self {
        match Within::families(strata) {
            Within::Families(v) | Within::Strata(v) => Within::Strata(v),
        }
    }

    /// The number of units resampled (families, or records).
    pub fn units(&self) -> usize {
        match self {
            Within::Families(f) => f.len(),
            Within::Strata(s) => s.iter().map(|x| x.len()).sum(),
        }
    }

    /// One stage-2 draw: the record indices of a resample, into `out` (cleared first).
    pub fn draw(&self, rng: &mut ChaCha8Rng, out: &mut Vec<usize>) {
        out.clear();
        match self {
            Within::Families(f) => {
                for _ in 0..f.len() {
                    out.extend_from_slice(&f[rng.random_range(0..f.len())]);
                }
            }
            Within::Strata(s) => {
                for st in s.iter().filter(|x| !x.is_empty()) {
                    for _ in 0..st.len() {
                        out.push(st[rng.random_range(0..st.len())]);
                    }
                }
            }
        }
    }
}

/// The two-stage bootstrap of one or more arms' means over seeds. `seeds[a]` is arm `a`'s seed
/// count; `stat(a, i, rng)` is seed `i` of arm `a`'s statistic on one stage-2 redraw made with
/// `rng` (a stream of its own for that replicate, arm and seed index). Returns, per replicate,
/// each arm's mean over its drawn seeds. `paired`: every arm has the same seed count and the
/// same seed indices are drawn for all (the caller orders the arms' seeds by seed number).
/// `within = false` skips stage 2 (`stat` is then called with a stream it should not use and
/// must return the seed's own statistic): the seeds-only bootstrap.
pub fn two_stage<F>(seeds: &[usize], paired: bool, rounds: usize, seed: u64, mut stat: F) -> Result<Vec<Vec<f64>>>
where
    F: FnMut(usize, usize, &mut ChaCha8Rng) -> Result<f64>,
{
    if rounds == 0 {
        return Err(Error::invalid("seed-level rounds", "must be at least 1, got 0"));
    }
    if seeds.is_empty() || seeds.contains(&0) {
        return Err(Error::invalid("seeds", format!("every arm needs at least 1 seed, got {seeds:?}")));
    }
    if paired && seeds.iter().any(|&n| n != seeds[0]) {
        return Err(Error::invalid("seeds", format!("a paired comparison needs equal seed counts, got {seeds:?}")));
    }
    let mut outer = ChaCha8Rng::seed_from_u64(seed ^ 0x5EED_1E7E);
    let mut out = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let shared: Vec<usize> = (0..seeds[0]).map(|_| outer.random_range(0..seeds[0])).collect();
        let mut means = Vec::with_capacity(seeds.len());
        for (a, &n) in seeds.iter().enumerate() {
            let drawn: Vec<usize> =
                if paired { shared.clone() } else { (0..n).map(|_| outer.random_range(0..n)).collect() };
            let mut sum = 0.0;
            for (slot, &i) in drawn.iter().enumerate() {
                let stream = seed ^ ((round as u64) << 24) ^ ((a as u64) << 16) ^ ((slot as u64) << 8) ^ i as u64;
                let mut rng = ChaCha8Rng::seed_from_u64(stream.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                sum += stat(a, i, &mut rng)?;
            }
            means.push(sum / n as f64);
        }
        out.push(means);
    }
    Ok(out)
}

/// Column `a` of [`two_stage`]'s replicates, sorted.
pub fn column_sorted(reps: &[Vec<f64>], a: usize) -> Vec<f64> {
    let mut v: Vec<f64> = reps.iter().map(|r| r[a]).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The ratio `num / den` of two arms' replicate means (replicates whose denominator is not
/// positive are dropped), sorted; `None` when more than half are dropped.
pub fn ratio_replicates(reps: &[Vec<f64>], num: usize, den: usize) -> Option<Vec<f64>> {
    let mut v: Vec<f64> = reps.iter().filter(|r| r[den] > 0.0).map(|r| r[num] / r[den]).collect();
    if v.len() * 2 < reps.len() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v)
}

/// The difference `a - b` of two arms' replicate means, sorted.
pub fn difference_replicates(reps: &[Vec<f64>], a: usize, b: usize) -> Vec<f64> {
    let mut v: Vec<f64> = reps.iter().map(|r| r[a] - r[b]).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// One seed's `(family, residue group, correct)` prompts' max gap over residue groups (or over
/// phases `group mod s`), pp, on the prompts `idx` (all when `None`).
fn family_gap(prompts: &[(usize, usize, bool)], idx: Option<&[usize]>, m: usize, s: usize) -> f64 {
    let (mut n, mut k) = (vec![0usize; s], vec![0usize; s]);
    let mut add = |p: &(usize, usize, bool)| {
        n[(p.1 % m) % s] += 1;
        k[(p.1 % m) % s] += p.2 as usize;
    };
    match idx {
        Some(idx) => idx.iter().for_each(|&i| add(&prompts[i])),
        None => prompts.iter().for_each(&mut add),
    }
    gap_of(&n, &k)
}

/// The mean over seeds of each seed's max gap (over `m` residue groups, or folded by `fold`),
/// with its seed-level interval: [`two_stage`] with stage 2 drawing whole prompt *families*
/// (`seeds[i]` holds seed `i`'s prompts as `(family, group, correct)`), so a family scoring the
/// same at every shift adds nothing to any replicate (issue 38: resampling prompts within groups
/// breaks that pairing). Returns the summary and each seed's own gap. Every replicate is a max
/// minus min, so it is never below 0; read it with [`BootInterval::corrected_nonneg`].
pub fn family_gap_two_stage(
    seeds: &[Vec<(usize, usize, bool)>],
    m: usize,
    fold: Option<usize>,
    rounds: usize,
    seed: u64,
) -> Result<(BootInterval, Vec<f64>)> {
    check_seeds(seeds)?;
    let s = fold_period(m, fold)?;
    if let Some((i, p)) = seeds.iter().flatten().enumerate().find(|(_, p)| p.1 >= m) {
        return Err(Error::invalid("group", format!("prompt {i} has group {}, allowed 0..{m}", p.1)));
    }
    let within: Vec<Within> =
        seeds.iter().map(|x| Within::families(&x.iter().map(|p| p.0).collect::<Vec<_>>())).collect();
    let each: Vec<f64> = seeds.iter().map(|x| family_gap(x, None, m, s)).collect();
    let mut idx = Vec::new();
    let reps = two_stage(&[seeds.len()], false, rounds, seed, |_, i, rng| {
        within[i].draw(rng, &mut idx);
        Ok(family_gap(&seeds[i], Some(&idx), m, s))
    })?;
    let mean = each.iter().sum::<f64>() / each.len() as f64;
    Ok((BootInterval::from_sorted(mean, &column_sorted(&reps, 0)), each))
}

/// One seed's max gap (as [`family_gap_two_stage`]) and its within-seed variance from `rounds`
/// family redraws (the power analysis's `v_i`), with the number of families.
pub fn family_gap_within_seed(
    prompts: &[(usize, usize, bool)],
    m: usize,
    fold: Option<usize>,
    rounds: usize,
    seed: u64,
) -> Result<(f64, f64, usize)> {
    // The same checks and stage 2 as the seed-level gap, on one seed (stage 1 draws it always).
    let (_, each) = family_gap_two_stage(&[prompts.to_vec()], m, fold, 1, seed)?;
    let families = prompts.iter().map(|p| p.0).collect::<std::collections::BTreeSet<_>>().len();
    let s = fold.unwrap_or(m);
    let within = Within::families(&prompts.iter().map(|p| p.0).collect::<Vec<_>>());
    let mut idx = Vec::new();
    let reps = two_stage(&[1], false, rounds, seed, |_, _, rng| {
        within.draw(rng, &mut idx);
        Ok(family_gap(prompts, Some(&idx), m, s))
    })?;
    Ok((each[0], sample_variance(&column_sorted(&reps, 0)), families))
}

/// The difference `a - b` of two arms' mean accuracies over seeds, pp, with its seed-level
/// interval: `a[i]` and `b[i]` are seed `i`'s `(correct, n)`; stage 2 redraws a seed's prompts
/// (binomially, as [`accuracy_difference`](super::accuracy_difference)). `paired`: the arms share their seed numbers in this
/// order, and the same seeds are drawn for both.
pub fn accuracy_difference_two_stage(
    a: &[(usize, usize)],
    b: &[(usize, usize)],
    paired: bool,
    rounds: usize,
    seed: u64,
) -> Result<BootInterval> {
    check_arm_counts(a, b)?;
    let arms = [a, b];
    let acc = |c: &[(usize, usize)]| 100.0 * c.iter().map(|&(k, n)| k as f64 / n as f64).sum::<f64>() / c.len() as f64;
    let estimate = acc(a) - acc(b);
    let mut one = [0usize];
    let reps = two_stage(&[a.len(), b.len()], paired, rounds, seed, |x, i, rng| {
        let (k, n) = arms[x][i];
        bootstrap_draw(&[n], &[k], rng, &mut one);
        Ok(100.0 * one[0] as f64 / n as f64)
    })?;
    Ok(BootInterval::from_sorted(estimate, &difference_replicates(&reps, 0, 1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stats::accuracy_difference;

    #[test]
    fn stage_one_draws_seeds_with_replacement_and_pairs_when_asked() {
        // A seed's statistic is its index: replicates are means of drawn indices.
        let reps = two_stage(&[3, 3], true, 400, 5, |_, i, _| Ok(i as f64)).unwrap();
        assert!(reps.iter().all(|r| r[0] == r[1]), "paired draws are the same for both arms");
        let col = column_sorted(&reps, 0);
        assert!(col[0] == 0.0 && col[col.len() - 1] == 2.0, "every draw reachable: {:?}", (col[0], col.last()));
        let unpaired = two_stage(&[3, 3], false, 400, 5, |_, i, _| Ok(i as f64)).unwrap();
        assert!(unpaired.iter().any(|r| r[0] != r[1]), "unpaired draws differ");
        assert_eq!(two_stage(&[3, 3], false, 400, 5, |_, i, _| Ok(i as f64)).unwrap(), unpaired, "seeded");
        assert!(two_stage(&[3, 2], true, 10, 0, |_, _, _| Ok(0.0)).is_err());
        assert!(two_stage(&[0], false, 10, 0, |_, _, _| Ok(0.0)).is_err());
        assert!(two_stage(&[2], false, 0, 0, |_, _, _| Ok(0.0)).is_err());
    }

    /// Seeds that disagree widen the seed-level cost interval past what prompts alone give.
    #[test]
    fn seed_level_cost_carries_the_between_seed_variance() {
        let a = [(4_500, 5_000), (4_950, 5_000), (4_600, 5_000)];
        let b = [(4_800, 5_000), (4_800, 5_000), (4_800, 5_000)];
        let prompts = accuracy_difference(&a, &b, 1000, 3).unwrap().corrected();
        let seeds = accuracy_difference_two_stage(&a, &b, true, 1000, 3).unwrap().corrected();
        assert!((seeds.0 - prompts.0).abs() < 0.5, "{prompts:?} {seeds:?}");
        assert!(seeds.2 - seeds.1 > 2.0 * (prompts.2 - prompts.1), "{prompts:?} {seeds:?}");
        assert!(prompts.1 > -4.0 && seeds.1 < -4.0, "{prompts:?} {seeds:?}");
    }

    #[test]
    fn seed_counts_are_worded() {
        assert!(SeedCount { seeds: 2 }.words().contains("only 2 seeds"));
        assert_eq!(SeedCount { seeds: 3 }.words(), "3 seeds");
    }
}
