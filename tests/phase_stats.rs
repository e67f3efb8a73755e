//! The phase statistics on synthetic profiles with a known answer: the period estimator
//! recovers periods 4, 6 and 8 and does not invent one in flat data; the chi-square and
//! permutation tests see dependence only where there is some. Every random draw (profiles and
//! the per-sample outcomes) comes from proptest strategies.

use crate::common;

use common::strategies::runner;
use phasekv::analysis::stats::{
    chi_square_independence, estimate_period, fold_by_phase, group_accuracies, max_gap_pp, permutation_test,
};
use proptest::prelude::*;

const M: usize = 24;
/// Significance used to declare a period: strict, because every test below runs many cases.
const ALPHA: f64 = 1e-4;

/// Samples `(group, correct)` with `n` per group, correct iff a drawn uniform is below the
/// group's true accuracy.
fn samples_from(acc: &[f64], n: usize, uniforms: &[f64]) -> Vec<(usize, bool)> {
    (0..M * n).map(|k| (k % M, uniforms[k] < acc[k % M])).collect()
}

/// A periodic profile whose smallest period is `p`: per-phase accuracies such that, for every
/// proper divisor `q` of `p`, some phase differs from phase `+q` by at least 0.3 (otherwise the
/// profile really has period `q`, as proptest's first counterexample showed).
fn periodic() -> impl Strategy<Value = (usize, Vec<f64>, usize, Vec<f64>)> {
    (prop::sample::select(vec![4usize, 6, 8]), 120usize..=200).prop_flat_map(|(p, n)| {
        (
            Just(p),
            prop::collection::vec(0.05f64..0.95, p).prop_filter("smallest period p, contrast >= 0.3", move |v| {
                (1..p).filter(|q| p % q == 0).all(|q| (0..p).any(|i| (v[i] - v[(i + q) % p]).abs() >= 0.3))
            }),
            Just(n),
            prop::collection::vec(0.0f64..1.0, M * n),
        )
    })
}

#[test]
fn recovers_periods_4_6_8() {
    let mut r = runner("stats-periodic", 24, Some("proptest-regressions/phase_stats.txt"));
    r.run(&periodic(), |(p, pattern, n, u)| {
        let acc: Vec<f64> = (0..M).map(|rho| pattern[rho % p]).collect();
        let groups = group_accuracies(&samples_from(&acc, n, &u), M).unwrap();
        let est = estimate_period(&groups, ALPHA).unwrap();
        prop_assert_eq!(est.period, Some(p), "candidates {:?}", &est.candidates[..3]);
        prop_assert!(est.runner_up().unwrap().p_value >= est.best().unwrap().p_value);
        let (_, df, pval) = chi_square_independence(&groups).unwrap();
        prop_assert_eq!(df, M - 1);
        prop_assert!(pval < ALPHA, "chi-square p = {pval}");
        // Folding by the true period keeps the gap; every sample is counted once.
        let folded = fold_by_phase(&groups, p).unwrap();
        prop_assert_eq!(folded.iter().map(|g| g.n).sum::<usize>(), M * n);
        prop_assert!(max_gap_pp(&folded) > 15.0);
        Ok(())
    })
    .unwrap();
}

#[test]
fn does_not_invent_a_period_in_flat_data() {
    let mut r = runner("stats-flat", 24, Some("proptest-regressions/phase_stats.txt"));
    let flat = (0.1f64..0.9, 80usize..=200)
        .prop_flat_map(|(a, n)| (Just(a), Just(n), prop::collection::vec(0.0f64..1.0, M * n)));
    r.run(&flat, |(a, n, u)| {
        let groups = group_accuracies(&samples_from(&[a; M], n, &u), M).unwrap();
        let est = estimate_period(&groups, ALPHA).unwrap();
        prop_assert_eq!(est.period, None, "best {:?}", est.best());
        let (_, _, pval) = chi_square_independence(&groups).unwrap();
        prop_assert!(pval > ALPHA, "chi-square p = {pval}");
        Ok(())
    })
    .unwrap();
}

#[test]
fn exactly_flat_and_degenerate_profiles() {
    // sample k goes to group k mod M; within each group, alternate right and wrong
    let groups =
        group_accuracies(&(0..M * 10).map(|k| (k % M, (k / M).is_multiple_of(2))).collect::<Vec<_>>(), M).unwrap();
    // every group exactly 50 %: no period, gap 0
    assert_eq!(estimate_period(&groups, 0.05).unwrap().period, None);
    assert_eq!(max_gap_pp(&groups), 0.0);
    // everything correct: independence test has nothing to test
    let all = group_accuracies(&(0..M * 5).map(|k| (k % M, true)).collect::<Vec<_>>(), M).unwrap();
    assert_eq!(chi_square_independence(&all).unwrap().2, 1.0);
    // an empty group is an error that names it
    let e = estimate_period(&group_accuracies(&[(0, true)], M).unwrap(), 0.05).unwrap_err().to_string();
    assert!(e.contains("residue group 1"), "{e}");
}

#[test]
fn permutation_test_separates_signal_from_none() {
    let mut r = runner("stats-permutation", 6, None);
    let strat = (60usize..=80).prop_flat_map(|n| (Just(n), prop::collection::vec(0.0f64..1.0, M * n)));
    r.run(&strat, |(n, u)| {
        let periodic: Vec<f64> = (0..M).map(|rho| if rho % 4 == 1 { 0.2 } else { 0.9 }).collect();
        // Under no dependence p is uniform on {1/1000, ..., 1}: P(p <= 0.001) = 0.001 per case.
        let p_sig = permutation_test(&samples_from(&periodic, n, &u), M, 999, 7).unwrap();
        prop_assert!(p_sig <= 0.001, "signal p = {p_sig}");
        let flat = permutation_test(&samples_from(&[0.6; M], n, &u), M, 999, 7).unwrap();
        prop_assert!(flat > 0.001, "flat p = {flat}");
        // Exactly equal groups: no shuffle can have a smaller gap, so p = 1.
        let exact: Vec<(usize, bool)> = (0..M * n).map(|k| (k % M, (k / M).is_multiple_of(2))).collect();
        prop_assert_eq!(permutation_test(&exact, M, 99, 7).unwrap(), 1.0);
        Ok(())
    })
    .unwrap();
}
