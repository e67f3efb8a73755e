//! Knockout rows tested cell by cell against the unablated model (Newcombe intervals,
//! Bonferroni over the row), `theory/phase-lab.md` §4 and §7.

use super::config::{PhaseTestConfig, TestMethod};
use super::logistic::{chi2_p, resampled_p, LrProblem};
use crate::analysis::stats::{GroupAccuracy, PValue};
use crate::numeric::wilson95;
use crate::{Error, Result};
use nalgebra::DMatrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One cell of a knockout map with its uncertainty.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnockoutCell {
    /// Residue group.
    pub group: usize,
    /// Prompts.
    pub n: usize,
    /// Accuracy with the head knocked out, with its Wilson 95 % interval.
    pub knocked: GroupAccuracy,
    /// Clean minus knocked-out accuracy, percentage points.
    pub drop_pp: f64,
    /// Newcombe's hybrid-score 95 % interval of the drop (from the two Wilson intervals),
    /// lower end, percentage points. It treats the two accuracies as independent; on the same
    /// prompts they are positively correlated, so the interval is conservative.
    pub drop_lo_pp: f64,
    /// Upper end of that interval, percentage points.
    pub drop_hi_pp: f64,
}

/// The folded-by-`S` test of one knockout row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnockoutRowTest {
    /// Row index in the map (layer-major).
    pub row: usize,
    /// The stride folded by.
    pub stride: usize,
    /// Every cell with its intervals.
    pub cells: Vec<KnockoutCell>,
    /// Drop per phase (clean minus knocked-out, pooled over the groups of the phase), pp.
    pub phase_drop_pp: Vec<f64>,
    /// Likelihood ratio of the condition x phase interaction (does the drop depend on phase?).
    pub statistic: f64,
    /// Its degrees of freedom (`S - 1`).
    pub df: usize,
    /// How the p-value was obtained.
    pub method: TestMethod,
    /// The row's own p-value.
    pub p: PValue,
    /// Bonferroni-corrected over the rows: `min(1, p * rows)`.
    pub p_bonferroni: f64,
    /// Whether `p_bonferroni < alpha`.
    pub significant: bool,
}

/// Newcombe's hybrid-score interval of `p1 - p2` from Wilson intervals, percentage points.
pub fn newcombe_pp(k1: usize, n1: usize, k2: usize, n2: usize) -> (f64, f64) {
    let (p1, p2) = (k1 as f64 / n1 as f64, k2 as f64 / n2 as f64);
    let ((l1, u1), (l2, u2)) = (wilson95(k1, n1), wilson95(k2, n2));
    let d = p1 - p2;
    (
        100.0 * (d - ((p1 - l1).powi(2) + (u2 - p2).powi(2)).sqrt()),
        100.0 * (d + ((u1 - p1).powi(2) + (p2 - l2).powi(2)).sqrt()),
    )
}

/// Per-row tests of a knockout map: `clean` and each row of `rows` are per-residue-group
/// accuracies on the same prompts (clean, and with one head knocked out). Each row is folded by
/// `stride` and tested for a condition x phase interaction in a logistic model (does the drop
/// depend on the phase?), by likelihood ratio with `S - 1` degrees of freedom, resampled from
/// the fitted null when a cell expects fewer than `cfg.min_expected` correct or wrong answers.
/// The resampling uses at least `10 rows / alpha` rounds so that a Bonferroni-corrected p can
/// fall below `alpha`. Rows are significant when `min(1, p rows) < cfg.alpha`.
pub fn knockout_row_tests(
    clean: &[GroupAccuracy],
    rows: &[Vec<GroupAccuracy>],
    stride: usize,
    cfg: &PhaseTestConfig,
) -> Result<Vec<KnockoutRowTest>> {
    cfg.check()?;
    let m = clean.len();
    if stride < 2 || m == 0 || !m.is_multiple_of(stride) {
        return Err(Error::invalid("stride", format!("must be at least 2 and divide M = {m}, got {stride}")));
    }
    let rounds = cfg.mc_rounds.max((10.0 * rows.len() as f64 / cfg.alpha).ceil() as usize);
    let mut out = Vec::with_capacity(rows.len());
    for (ri, row) in rows.iter().enumerate() {
        if row.len() != m || row.iter().zip(clean).any(|(a, b)| a.n != b.n) {
            return Err(Error::invalid(
                "knockout row",
                format!("row {ri} must have the clean map's {m} groups with the same prompt counts"),
            ));
        }
        let cells: Vec<KnockoutCell> = clean
            .iter()
            .zip(row)
            .map(|(c, k)| {
                let (lo, hi) = if c.n > 0 { newcombe_pp(c.correct, c.n, k.correct, k.n) } else { (-100.0, 100.0) };
                KnockoutCell {
                    group: c.group,
                    n: c.n,
                    knocked: k.clone(),
                    drop_pp: 100.0 * (c.accuracy - k.accuracy),
                    drop_lo_pp: lo,
                    drop_hi_pp: hi,
                }
            })
            .collect();
        let fold = |g: &[GroupAccuracy]| {
            let mut n = vec![0f64; stride];
            let mut k = vec![0f64; stride];
            for x in g {
                n[x.group % stride] += x.n as f64;
                k[x.group % stride] += x.correct as f64;
            }
            (n, k)
        };
        let ((nc, kc), (nk, kk)) = (fold(clean), fold(row));
        if nc.contains(&0.0) {
            return Err(Error::invalid("knockout map", format!("a phase mod {stride} has no prompts")));
        }
        let phase_drop_pp: Vec<f64> = (0..stride).map(|f| 100.0 * (kc[f] / nc[f] - kk[f] / nk[f])).collect();
        // Cells: (condition, phase); columns: intercept, knocked, phases 1.., knocked x phases 1..
        let cols = 2 * stride;
        let mut x = DMatrix::<f64>::zeros(2 * stride, cols);
        let (mut n, mut y, mut class) = (Vec::new(), Vec::new(), Vec::new());
        for cond in 0..2 {
            for f in 0..stride {
                let i = cond * stride + f;
                x[(i, 0)] = 1.0;
                x[(i, 1)] = cond as f64;
                if f > 0 {
                    x[(i, 1 + f)] = 1.0;
                    x[(i, stride + f)] = cond as f64;
                }
                let (ni, yi) = if cond == 0 { (nc[f], kc[f]) } else { (nk[f], kk[f]) };
                n.push(ni);
                y.push(yi);
                class.push(i);
            }
        }
        let x_null = x.columns(0, stride + 1).into_owned();
        let problem = LrProblem { x_full: x, x_null, n, y, class, classes: 2 * stride };
        let fits = problem.fits()?;
        let (p, method) = if fits.min_expected < cfg.min_expected {
            let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
            rng.set_stream(ri as u64);
            let reps = problem.bootstrap(&fits, rounds, &mut rng, &crate::stop::Stop::never())?;
            (resampled_p(fits.statistic, &reps, fits.tie_tolerance()), TestMethod::ParametricBootstrap)
        } else {
            (chi2_p(fits.statistic, problem.df())?, TestMethod::Asymptotic)
        };
        let p_bonferroni = (p.value * rows.len() as f64).min(1.0);
        out.push(KnockoutRowTest {
            row: ri,
            stride,
            cells,
            phase_drop_pp,
            statistic: fits.statistic,
            df: problem.df(),
            method,
            p,
            p_bonferroni,
            significant: p_bonferroni < cfg.alpha,
        });
    }
    Ok(out)
}

/// The drop-scale test of one knockout row (`theory/phase-lab.md` §8.9), for a map whose clean
/// accuracy is saturated (every clean cell at or above the ceiling), where the condition x
/// phase interaction of [`knockout_row_tests`] is not identifiable on the logit scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DropScaleTest {
    /// Row index in the map (layer-major).
    pub row: usize,
    /// The stride folded by.
    pub stride: usize,
    /// The knocked row's accuracy per folded phase.
    pub phase_accuracy: Vec<f64>,
    /// The G statistic of the knocked correct/wrong counts by folded phase (homogeneity).
    pub statistic: f64,
    /// Its p-value from permutations of the knocked outcomes within each phase family.
    pub p: PValue,
    /// Bonferroni-corrected over the rows: `min(1, p * rows)`.
    pub p_bonferroni: f64,
    /// Whether `p_bonferroni < alpha`.
    pub significant: bool,
}

/// G of the `2 x S` table of correct (`k`) and wrong (`n - k`) counts by phase: `2 sum O ln(O / E)`
/// over the non-empty cells, `E` from the pooled accuracy.
fn homogeneity_g(k: &[usize], n: &[usize]) -> f64 {
    let (kt, nt) = (k.iter().sum::<usize>() as f64, n.iter().sum::<usize>() as f64);
    if nt == 0.0 || kt == 0.0 || kt == nt {
        return 0.0;
    }
    let term = |o: f64, e: f64| if o > 0.0 { o * (o / e).ln() } else { 0.0 };
    2.0 * k
        .iter()
        .zip(n)
        .filter(|(_, &n)| n > 0)
        .map(|(&k, &n)| {
            let (k, n) = (k as f64, n as f64);
            term(k, n * kt / nt) + term(n - k, n * (nt - kt) / nt)
        })
        .sum::<f64>()
}

/// Drop-scale tests of every row of a knockout map (§8.9): prompt `i` has id `ids[i]` (its
/// family is `id mod per_group`; a family holds one prompt per residue group at one depth) and
/// residue group `groups[i]`; each row is its knocked outcomes in that order (`1` correct, `0`
/// wrong). A row's statistic is the G of its knocked counts by phase `group mod stride`; its
/// p-value counts the permutations (at least `cfg.mc_rounds` and `10 rows / alpha`, seed
/// `cfg.seed`, stream = row) of the knocked outcomes among each family's prompts whose G
/// reaches the observed one (ties within `1e-9` relative count). Rows are significant when
/// `min(1, p rows) < cfg.alpha`.
pub fn drop_scale_tests(
    ids: &[usize],
    groups: &[usize],
    rows: &[&str],
    per_group: usize,
    stride: usize,
    cfg: &PhaseTestConfig,
) -> Result<Vec<DropScaleTest>> {
    cfg.check()?;
    let n = ids.len();
    if stride < 2 || per_group == 0 || n == 0 || groups.len() != n {
        return Err(Error::invalid(
            "drop-scale test",
            format!(
                "needs stride >= 2 (got {stride}), per_group >= 1 (got {per_group}) and one group per prompt ({} ids, {} groups)",
                n,
                groups.len()
            ),
        ));
    }
    let mut families: std::collections::BTreeMap<usize, Vec<usize>> = std::collections::BTreeMap::new();
    for (i, &id) in ids.iter().enumerate() {
        families.entry(id % per_group).or_default().push(i);
    }
    let families: Vec<Vec<usize>> = families.into_values().collect();
    let mut n_phase = vec![0usize; stride];
    for &g in groups {
        n_phase[g % stride] += 1;
    }
    let rounds = cfg.mc_rounds.max((10.0 * rows.len() as f64 / cfg.alpha).ceil() as usize);
    let mut out = Vec::with_capacity(rows.len());
    for (ri, row) in rows.iter().enumerate() {
        let bits: Vec<bool> = row
            .chars()
            .map(|c| match c {
                '1' => Ok(true),
                '0' => Ok(false),
                _ => Err(Error::invalid("knocked outcomes", format!("row {ri} holds '{c}', not 0 or 1"))),
            })
            .collect::<Result<_>>()?;
        if bits.len() != n {
            return Err(Error::invalid(
                "knocked outcomes",
                format!("row {ri} has {} outcomes for {n} prompts", bits.len()),
            ));
        }
        let count = |bits: &[bool]| {
            let mut k = vec![0usize; stride];
            for (b, &g) in bits.iter().zip(groups) {
                k[g % stride] += usize::from(*b);
            }
            k
        };
        let k = count(&bits);
        let statistic = homogeneity_g(&k, &n_phase);
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        rng.set_stream(ri as u64);
        let mut perm = bits.clone();
        let tol = 1e-9 * statistic.abs().max(1e-12);
        let mut exceed = 0usize;
        for _ in 0..rounds {
            for f in &families {
                // Fisher-Yates over the family's members, in place.
                for a in (1..f.len()).rev() {
                    let b = rng.random_range(0..=a);
                    perm.swap(f[a], f[b]);
                }
            }
            if homogeneity_g(&count(&perm), &n_phase) >= statistic - tol {
                exceed += 1;
            }
        }
        let p = PValue::resampled(exceed, rounds);
        let p_bonferroni = (p.value * rows.len() as f64).min(1.0);
        out.push(DropScaleTest {
            row: ri,
            stride,
            phase_accuracy: k.iter().zip(&n_phase).map(|(&k, &n)| k as f64 / n.max(1) as f64).collect(),
            statistic,
            p,
            p_bonferroni,
            significant: p_bonferroni < cfg.alpha,
        });
    }
    Ok(out)
}
