//! The statistics of the second pre-registration (`theory/phase-lab.md` §8): the fit's exact
//! supremum under separation on tables whose G is known in closed form, the tie-aware bootstrap
//! p, the continuous (teacher-forced NLL) test's calibration and power, the training-success
//! rule on a constructed failing run, and the constants §8 quotes.

use crate::common;

use common::strategies::runner;
use phasekv::analysis::phase_test::{
    continuous_test, nll, phase_test, pooled_continuous_test, window_sharing_phases, NllRecord, PhaseRecord,
    PhaseTestConfig, TestMethod, ALPHA, CONT_MAX_FALSE_POSITIVE, LR_PRECISION, MC_ROUNDS, PROB_FLOOR,
};
use phasekv::analysis::training::{
    seed_outcome, training_status, SeedOutcome, TrainingStatus, EXTENSION_LR_FRACTION, MAX_EXTENSIONS, SUCCESS_ACCURACY,
};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Records at one depth (so the model is phase only): phase `f` has `n[f]` prompts of which
/// `k[f]` are correct, at positions `f`, `f + S`, ... in turn.
fn table(k: &[usize], n: &[usize]) -> Vec<PhaseRecord> {
    let s = k.len();
    let mut out = Vec::new();
    for f in 0..s {
        for j in 0..n[f] {
            out.push(PhaseRecord { position: f + s * (j % 5), depth: 30, correct: j < k[f] });
        }
    }
    out
}

/// The G-test of a 2 x S table, `2 sum O ln(O / E)` with `0 ln 0 = 0`: the supremum of the
/// phase-only likelihood ratio (§8.6).
fn g_test(k: &[usize], n: &[usize]) -> f64 {
    let (tk, tn) = (k.iter().sum::<usize>() as f64, n.iter().sum::<usize>() as f64);
    let term = |o: f64, e: f64| if o > 0.0 { o * (o / e).ln() } else { 0.0 };
    2.0 * k
        .iter()
        .zip(n)
        .map(|(&k, &n)| {
            let (k, n) = (k as f64, n as f64);
            term(k, n * tk / tn) + term(n - k, n * (tn - tk) / tn)
        })
        .sum::<f64>()
}

#[test]
fn separated_tables_give_the_closed_form_supremum() {
    // One phase all correct, one all wrong, two mixed: v1's capped fit stopped short here.
    for (k, n) in [
        (vec![50, 100, 30, 80], vec![100; 4]),
        (vec![40, 0, 100, 99], vec![100; 4]),
        (vec![20, 20, 20, 19], vec![20; 4]),
        (vec![7, 9, 9, 9, 9, 9], vec![9; 6]),
    ] {
        let t = phase_test(&table(&k, &n), k.len(), &PhaseTestConfig::default()).unwrap();
        let g = g_test(&k, &n);
        assert!((t.statistic - g).abs() <= 1e-8 * (1.0 + g), "{k:?}: G {} against {g}", t.statistic);
    }
    // Random tables with empty and full phases (the cases a Newton fit only approaches).
    let mut r = runner("v2-separated-tables", 48, None);
    let strat = (2usize..=8).prop_flat_map(|s| (proptest::collection::vec((5usize..60, 0usize..=4), s), Just(s)));
    r.run(&strat, |(cells, s)| {
        // Second component: 0 all wrong, 4 all right, otherwise a fraction in quarters.
        let n: Vec<usize> = cells.iter().map(|c| c.0).collect();
        let k: Vec<usize> = cells.iter().map(|&(n, q)| n * q / 4).collect();
        prop_assume!(k.iter().sum::<usize>() > 0 && k.iter().zip(&n).any(|(k, n)| k < n));
        let t = phase_test(&table(&k, &n), s, &PhaseTestConfig { mc_rounds: 19, ..Default::default() }).unwrap();
        let g = g_test(&k, &n);
        prop_assert!((t.statistic - g).abs() <= 1e-8 * (1.0 + g), "{:?} {:?}: G {} vs {}", k, n, t.statistic, g);
        Ok(())
    })
    .unwrap();
    // Negative control: the closed form tells tables apart (a fit that ignored the full phase
    // would give the G of the table without it).
    let (k, n) = (vec![50, 100, 30, 80], vec![100; 4]);
    let t = phase_test(&table(&k, &n), 4, &PhaseTestConfig::default()).unwrap();
    assert!((t.statistic - g_test(&[50, 99, 30, 80], &n)).abs() > 1.0);
}

/// Under the fitted null of `k` / `n` (two phases), the exact probability that a replicate's G
/// reaches the observed one less the tie tolerance: the enumeration of both binomials.
fn exact_tie_aware_p(k: [usize; 2], n: [usize; 2], tolerance: f64) -> (f64, f64) {
    let g_obs = g_test(&k, &n);
    let rate = (k[0] + k[1]) as f64 / (n[0] + n[1]) as f64;
    let binom = |n: usize, j: usize| -> f64 {
        let c: f64 = (0..j).map(|i| (n - i) as f64 / (i + 1) as f64).product();
        c * rate.powi(j as i32) * (1.0 - rate).powi((n - j) as i32)
    };
    let (mut at_least, mut above) = (0.0, 0.0);
    for a in 0..=n[0] {
        for b in 0..=n[1] {
            let g = g_test(&[a, b], &n);
            let pr = binom(n[0], a) * binom(n[1], b);
            if g >= g_obs - tolerance {
                at_least += pr;
            }
            if g > g_obs + tolerance {
                above += pr;
            }
        }
    }
    (at_least, above)
}

#[test]
fn the_bootstrap_p_counts_ties_with_the_stated_tolerance() {
    // 10/10 against 9/10: under the null (95 %), the replicates (10, 9) and (9, 10) give the
    // observed G exactly (about 38 % of them); a p that drops ties comes out far too small.
    let (k, n) = ([10, 9], [10, 10]);
    let t = phase_test(&table(&k, &n), 2, &PhaseTestConfig::default()).unwrap();
    assert_eq!(t.method, TestMethod::ParametricBootstrap);
    let tol = LR_PRECISION * 10.0;
    let (p_ties, p_strict) = exact_tie_aware_p(k, n, tol);
    let sd = (p_ties * (1.0 - p_ties) / MC_ROUNDS as f64).sqrt();
    assert!((t.p.value - p_ties).abs() < 4.0 * sd, "p {} against exact {p_ties} (ties dropped: {p_strict})", t.p.value);
    assert!(p_ties - p_strict > 0.3, "the control must separate: {p_ties} vs {p_strict}");
    // Every replicate ties: all correct, every replicate all correct, G = 0 each time, p = 1.
    let all = phase_test(&table(&[20, 20, 20, 20], &[20; 4]), 4, &PhaseTestConfig::default()).unwrap();
    assert_eq!((all.statistic, all.p.value), (0.0, 1.0));
}

/// Families of `m` members (one per residue group, positions `base + g`), the family's depth
/// fixed; NLL from `draw(rng, depth, phase)`.
fn families(
    count: usize,
    m: usize,
    stride: usize,
    rng: &mut ChaCha8Rng,
    draw: impl Fn(&mut ChaCha8Rng, usize, usize) -> f64,
) -> Vec<NllRecord> {
    let mut out = Vec::with_capacity(count * m);
    for family in 0..count {
        let depth = 8 + rng.random_range(0..60);
        let base = 24 * (1 + family % 2);
        for g in 0..m {
            let position = base + g;
            let y: f64 = draw(rng, depth, position % stride);
            out.push(NllRecord { family, position, prob: (-y).exp() });
        }
    }
    out
}

/// Heavy-tailed NLL: mostly small (exponential with mean `small`), with a rare wrong answer
/// (probability `wrong`, NLL 1 + exponential(1)).
fn heavy(rng: &mut ChaCha8Rng, small: f64, wrong: f64) -> f64 {
    let e = |rng: &mut ChaCha8Rng| -(1.0 - rng.random::<f64>()).ln();
    if rng.random::<f64>() < wrong {
        1.0 + e(rng)
    } else {
        small * e(rng)
    }
}

#[test]
fn the_continuous_test_keeps_its_level_on_depth_only_data_and_finds_a_planted_effect() {
    let mut rng = ChaCha8Rng::seed_from_u64(32);
    // Depth only: NLL and its tail grow steeply with depth, no phase effect.
    let sims = 600;
    let cfg = PhaseTestConfig { mc_rounds: 999, ..Default::default() };
    let mut rejected = 0;
    for i in 0..sims {
        let s = [4, 6, 8][i % 3];
        let recs = families(20, 24, s, &mut rng, |r, d, _| heavy(r, 0.01 + 0.002 * d as f64, 0.001 * d as f64));
        let t = continuous_test(&recs, s, &PhaseTestConfig { seed: i as u64, ..cfg }).unwrap();
        rejected += usize::from(t.p.below(ALPHA));
    }
    let rate = rejected as f64 / sims as f64;
    println!("continuous test, depth only: {rejected}/{sims} = {:.2} % rejected at {ALPHA}", 100.0 * rate);
    assert!(rate <= CONT_MAX_FALSE_POSITIVE, "false-positive rate {rate}");
    // Power: one phase's NLL raised by 0.05 nats at mean NLL 0.05 (S = 4), each test at
    // ALPHA / 2 as §8.3 runs it.
    let planted = |r: &mut ChaCha8Rng, _d: usize, ph: usize| heavy(r, 0.03, 0.01) + if ph == 1 { 0.05 } else { 0.0 };
    for (per_family_count, min_power) in [(48, 0.3), (240, 0.9)] {
        let (mut hits, sims) = (0, 40);
        for i in 0..sims {
            let recs = families(per_family_count, 24, 4, &mut rng, planted);
            let c = PhaseTestConfig { mc_rounds: 399, alpha: ALPHA / 2.0, seed: i, ..Default::default() };
            hits += usize::from(continuous_test(&recs, 4, &c).unwrap().p.below(ALPHA / 2.0));
        }
        let power = hits as f64 / sims as f64;
        println!("continuous test, +0.05 nats at one phase, {per_family_count} families: power {:.0} %", 100.0 * power);
        assert!(power >= min_power, "{per_family_count} families: power {power}");
    }
}

#[test]
fn the_continuous_test_is_the_block_anova_f_and_pools_over_seeds() {
    // Two families of 4 (S = 2, M = 4): balanced, so the phase sum of squares is
    // sum_phase n (mean_phase - mean)^2 and the error is what the family and phase leave.
    let y: [[f64; 4]; 2] = [[0.1, 0.5, 0.2, 0.6], [1.0, 1.3, 1.1, 1.6]];
    let recs: Vec<NllRecord> = (0..2)
        .flat_map(|f| (0..4).map(move |g| NllRecord { family: f, position: g, prob: (-y[f][g]).exp() }))
        .collect();
    let t = continuous_test(&recs, 2, &PhaseTestConfig { mc_rounds: 99, ..Default::default() }).unwrap();
    let all: Vec<f64> = y.iter().flatten().copied().collect();
    let grand = all.iter().sum::<f64>() / 8.0;
    let phase_mean =
        |p: usize| (0..2).flat_map(|f| (0..4).filter(move |g| g % 2 == p).map(move |g| y[f][g])).sum::<f64>() / 4.0;
    let fam_mean = |f: usize| y[f].iter().sum::<f64>() / 4.0;
    let ss_phase: f64 = (0..2).map(|p| 4.0 * (phase_mean(p) - grand).powi(2)).sum();
    let ss_within: f64 = (0..2).map(|f| y[f].iter().map(|v| (v - fam_mean(f)).powi(2)).sum::<f64>()).sum();
    let f = ss_phase / ((ss_within - ss_phase) / 5.0);
    assert!((t.statistic - f).abs() < 1e-9 * f, "F {} against {f}", t.statistic);
    assert_eq!((t.df1, t.df2), (1, 5));
    // NLL with the floor.
    assert_eq!(nll(0.0), -PROB_FLOOR.ln());
    assert!((nll(0.5) - std::f64::consts::LN_2).abs() < 1e-15);
    // Pooled: the sum of the seeds' F, seeded.
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let seeds: Vec<Vec<NllRecord>> =
        (0..3).map(|_| families(10, 8, 4, &mut rng, |r, _, _| heavy(r, 0.05, 0.0))).collect();
    let cfg = PhaseTestConfig { mc_rounds: 199, ..Default::default() };
    let p = pooled_continuous_test(&seeds, 4, &cfg).unwrap();
    assert!((p.statistic - p.seeds.iter().map(|s| s.statistic).sum::<f64>()).abs() < 1e-12);
    assert_eq!(p, pooled_continuous_test(&seeds, 4, &cfg).unwrap(), "seeded");
    // Bad input: one error naming the field.
    let mut bad = seeds[0].clone();
    bad[3].prob = 1.5;
    assert!(continuous_test(&bad, 4, &cfg).unwrap_err().to_string().contains("prob"));
    let one: Vec<NllRecord> = seeds[0].iter().map(|r| NllRecord { family: r.position, ..*r }).collect();
    assert!(continuous_test(&one, 4, &cfg).is_err(), "one prompt per family leaves nothing to permute");
}

#[test]
fn a_seed_that_does_not_train_is_extended_once_then_failed() {
    let recipe = phasekv::model::TrainConfig { steps: 3000, warmup_steps: 300, ..Default::default() };
    // The v1 failure as a constructed record: 35.6 % after the recipe's steps.
    match training_status(0.356, 0, &recipe).unwrap() {
        TrainingStatus::Extend(x) => {
            assert_eq!((x.index, x.start, x.end, x.warmup_steps), (1, 3000, 6000, 300));
            assert!((x.peak_lr - EXTENSION_LR_FRACTION * recipe.lr).abs() < 1e-15);
            // Warm-up to the peak, then cosine down to the recipe's final rate.
            assert!(x.lr_at(3000) < x.lr_at(3299));
            assert!((x.lr_at(3299) - x.peak_lr).abs() < 1e-15);
            assert!((x.lr_at(5999) - recipe.lr * recipe.min_lr_ratio).abs() < 1e-6 * recipe.lr);
            assert!(x.lr_at(4000) > x.lr_at(5000));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(training_status(0.356, MAX_EXTENSIONS, &recipe).unwrap(), TrainingStatus::Failed);
    assert_eq!(training_status(SUCCESS_ACCURACY, 0, &recipe).unwrap(), TrainingStatus::Succeeded);
    assert_eq!(training_status(0.97, 1, &recipe).unwrap(), TrainingStatus::Succeeded);
    assert_eq!(seed_outcome(0.356, 0).unwrap(), SeedOutcome::Unextended);
    assert_eq!(seed_outcome(0.356, 1).unwrap(), SeedOutcome::Failed);
    assert_eq!(seed_outcome(0.92, 1).unwrap(), SeedOutcome::Succeeded);
    // Negative control just below the threshold.
    assert_eq!(seed_outcome(SUCCESS_ACCURACY - 1e-9, 1).unwrap(), SeedOutcome::Failed);
    // Bad input names its field.
    assert!(training_status(1.5, 0, &recipe).unwrap_err().to_string().contains("accuracy"));
    assert!(training_status(0.5, 2, &recipe).unwrap_err().to_string().contains("extensions"));
    assert!(seed_outcome(0.5, 2).unwrap_err().to_string().contains("extensions"));
    assert!(seed_outcome(f64::NAN, 0).unwrap_err().to_string().contains("accuracy"));
}

#[test]
fn e4s_phases_are_those_whose_key_value_pair_shares_a_window() {
    assert_eq!(window_sharing_phases(8, 8, 1, 1), (0..7).collect::<Vec<_>>());
    assert_eq!(window_sharing_phases(8, 8, 1, 2), (0..6).collect::<Vec<_>>());
    assert_eq!(window_sharing_phases(12, 12, 1, 1), (0..11).collect::<Vec<_>>());
}

/// Every value `section` quotes for `name` (`` `NAME` (value) `` or `` `NAME` = value ``).
pub(crate) fn quoted_in(section: &str, name: &str) -> Vec<f64> {
    let key = format!("`{name}`");
    section
        .match_indices(&key)
        .filter_map(|(i, _)| {
            let rest = section[i + key.len()..].trim_start_matches([' ', '(', '=']);
            let num: String = rest.chars().take_while(|c| c.is_ascii_digit() || ".e-".contains(*c)).collect();
            num.parse::<f64>().ok()
        })
        .collect()
}

pub(crate) fn phase_lab_section(from: &str, to: &str) -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/theory/phase-lab.md")).unwrap();
    let section = doc.split(from).nth(1).unwrap_or_else(|| panic!("{from}"));
    section.split(to).next().unwrap().to_string()
}

pub(crate) fn check_quotes(label: &str, section: &str, rows: &[(&str, f64)]) {
    for &(name, value) in rows {
        let q = quoted_in(section, name);
        assert!(!q.is_empty(), "{label} should quote `{name}` with its value");
        assert!(q.iter().all(|&x| x == value), "{label} quotes `{name}` as {q:?}, the code has {value}");
    }
}

/// §8 quotes every constant it names with the code's value (`NAME` (value) or `NAME` = value).
#[test]
fn preregistration_v2_quotes_the_constants_of_the_code() {
    use phasekv::analysis::verdict as v;
    let section = phase_lab_section("## 8. Pre-registration v2", "\n## 9.");
    let rows: Vec<(&str, f64)> = vec![
        ("SUCCESS_ACCURACY", SUCCESS_ACCURACY),
        ("EXTENSION_LR_FRACTION", EXTENSION_LR_FRACTION),
        ("MAX_EXTENSIONS", MAX_EXTENSIONS as f64),
        ("PROB_FLOOR", PROB_FLOOR),
        ("CONT_MAX_FALSE_POSITIVE", CONT_MAX_FALSE_POSITIVE),
        ("CEILING_ACCURACY", v::CEILING_ACCURACY),
        ("PROB_CEILING", v::PROB_CEILING),
    ];
    check_quotes("§8", &section, &rows);
}

/// §9 (v3) quotes the budget's constants with the code's values; negative control: §8's
/// budget is not the v3 one.
#[test]
fn preregistration_v3_quotes_the_budget_of_the_code() {
    use phasekv::analysis::training::MAX_EXTENSIONS_V3;
    let section = phase_lab_section("## 9. Pre-registration v3", "\n## 10.");
    check_quotes(
        "§9",
        &section,
        &[("SUCCESS_ACCURACY", SUCCESS_ACCURACY), ("MAX_EXTENSIONS_V3", MAX_EXTENSIONS_V3 as f64)],
    );
    assert_ne!(MAX_EXTENSIONS_V3, MAX_EXTENSIONS);
    assert_eq!(quoted_in(&section, "MAX_EXTENSIONS"), Vec::<f64>::new(), "§9 must not quote v2's budget as its own");
}

/// §9.7 quotes E12's thresholds with the code's values (`analysis::claims_v3`, their one
/// place); negative control: a threshold the section does not name is not found.
#[test]
fn preregistration_v3_quotes_the_thresholds_of_its_new_claims() {
    use phasekv::analysis::claims_v3::{E12_HCA_SHARE, E12_MIN_CSA_DROP_PP};
    let section = phase_lab_section("### 9.7 Claims and criteria (v3)", "\n### 9.8");
    check_quotes("§9.7", &section, &[("E12_HCA_SHARE", E12_HCA_SHARE), ("E12_MIN_CSA_DROP_PP", E12_MIN_CSA_DROP_PP)]);
    assert_eq!(quoted_in(&section, "E12_HCA_SHARES"), Vec::<f64>::new());
    assert_ne!(quoted_in(&section, "E12_HCA_SHARE"), vec![E12_HCA_SHARE + 0.1], "a wrong value would be caught");
}
