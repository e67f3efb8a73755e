//! Theorem 2 (theory/induction-model.md §4) and the phase profile (§5): gradient flow on
//! static gates from small random initialisation converges head by head to
//! `pK_h(r_h) -> 1`, `pV_h(r_h + 1) -> 1`; RK4 agrees with Euler at a smaller step; the
//! content term stays at its initial size; the converged model retrieves exactly at the
//! offsets some head chose.

use phasekv::theory::flow::*;
use phasekv::theory::oracle::classify;
use phasekv::theory::profile::{phase_profile, phase_profile_mc};
use phasekv::theory::task::*;
use phasekv::theory::vocab::Vocabulary;
use proptest::prelude::*;

use crate::common;

fn check_structure(p: &TaskParams, r: &FlowRun) -> Result<(), TestCaseError> {
    let s = p.stride;
    prop_assert_eq!(r.key_offsets.len(), p.heads);
    for (h, o) in r.key_offsets.iter().enumerate() {
        let o = o.expect("converged run has an offset for every head");
        prop_assert!((1..s).contains(&o), "offset {} outside 1..S-1", o);
        prop_assert!(
            r.key[h * s + o - 1] > 0.99 && r.value[h * s + o] > 0.99,
            "head {} gates {:?} {:?}",
            h,
            r.key,
            r.value
        );
    }
    // Loss at a distinct configuration is F_1; at a collision it is strictly higher.
    let f1 = one_hot_loss(p).unwrap();
    if r.heads_coincide {
        prop_assert!(r.final_loss > f1 + 1e-3, "collision loss {} vs F_1 {}", r.final_loss, f1);
    } else {
        prop_assert!((r.final_loss - f1).abs() < 0.05 * f1, "distinct loss {} vs F_1 {}", r.final_loss, f1);
    }
    Ok(())
}

/// Runs `f` on `CASES` values drawn from `strategy` through the project's configured runner:
/// a fixed seed (so CI is reproducible), `PHASEKV_TEST_SEED` to explore, failures saved in
/// `proptest-regressions/theorem2.txt`.
fn cases<S: Strategy>(label: &str, strategy: S, f: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let mut r = common::strategies::runner(label, CASES, Some("proptest-regressions/theorem2.txt"));
    if let Err(e) = r.run(&strategy, f) {
        panic!("{e}");
    }
}

/// Draws per statistical test (each draw is a block of 32 seeds); the test fails if any draw
/// misses its threshold. Binomial power of the convergence test (a draw passes when at least
/// 31 of 32 seeds, >= 95 %, converge): a flow whose seeds converge with probability 0.95 passes
/// one draw with probability 0.520, so 6 draws catch it with probability 1 - 0.520^6 = 98.0 %
/// (2 draws: 73.0 %); at 0.90 one draw passes with 0.156 and 6 draws catch it with > 99.99 %.
/// The coincidence test (< 60 %: at most 19 of 32 runs with both heads at one offset) passes a draw with probability
/// 0.9993 at the expected rate 1/3 (S - 1 = 3 offsets) and with 0.133 at 0.7, so 6 draws catch a
/// flow whose heads coincide 70 % of the time with > 99.99 %. Committed run: 64/64 converged,
/// 12.5 % coincide.
const CASES: u32 = 6;

/// At the primary defaults (spec §6) at least 95 % of 32 seeds converge, every head of a
/// converged run has the structure above, every offset 1..S-1 gets chosen, both distinct
/// and (with 32 seeds) all-distinct runs occur.
#[test]
fn converges_for_95_percent_of_32_seeds_at_defaults() {
    cases("theorem2-converges_for_95_percent_of_32_seeds_at_defaults", 0u64..1_000_000_000, |base| {
        let cfg = FlowConfig::default();
        let p = cfg.params;
        let seeds: Vec<u64> = (base..base + 32).collect();
        let runs = run_seeds(&cfg, &seeds, || {}).unwrap();
        let sum = summarise(&p, &runs);
        prop_assert!(sum.converged_fraction >= 0.95, "{:?}", sum);
        for r in runs.iter().filter(|r| r.converged) {
            check_structure(&p, r)?;
            let t = r.t_conv.unwrap();
            prop_assert!(t > 0.0 && t <= cfg.t_max);
        }
        prop_assert!(sum.offset_counts.iter().all(|&c| c > 0), "offsets chosen {:?}", sum.offset_counts);
        prop_assert!(sum.coincide_fraction < 0.6, "{:?}", sum);
        let (lo, hi) = sum.t_conv_range.unwrap();
        prop_assert!(lo > 100.0 && hi < cfg.t_max, "convergence times {lo}..{hi}");
        Ok(())
    });
}

/// Secondary defaults (S=8, H=3, L=4, N=256, T_max=10000): the same, with 16 seeds.
#[test]
fn converges_at_secondary_defaults() {
    cases("theorem2-converges_at_secondary_defaults", 0u64..1_000_000_000, |base| {
        let cfg = FlowConfig { params: TaskParams::secondary(), t_max: 10_000.0, ..FlowConfig::default() };
        let seeds: Vec<u64> = (base..base + 16).collect();
        let runs = run_seeds(&cfg, &seeds, || {}).unwrap();
        let sum = summarise(&cfg.params, &runs);
        prop_assert!(sum.converged_fraction >= 0.9, "{:?}", sum);
        for r in runs.iter().filter(|r| r.converged) {
            check_structure(&cfg.params, r)?;
        }
        Ok(())
    });
}

/// RK4 at dt = 2 against Euler at dt = 1 and against RK4 at dt = 1 over 64 consecutive
/// seeds (spec §6: step halving gives the same chosen offsets and |dt_conv| / t_conv <
/// 0.02). Not for every seed: about 1 seed in 512 picks different offsets under Euler
/// (seed 230, §4), so the check asks for at least 62 of 64; where the offsets agree,
/// |dt_conv| / t_conv < 0.02 for all but at most 2 seeds (at seeds 0..511: 510 of 511 below
/// 0.02, the largest 0.0264; a random block near seed 872877404 holds one at 0.089, so no
/// per-seed bound is claimed).
#[test]
fn rk4_matches_euler_at_half_step() {
    cases("theorem2-rk4_matches_euler_at_half_step", 0u64..1_000_000_000, |base| {
        for other in [
            FlowConfig { integrator: Integrator::Euler, dt: 1.0, ..FlowConfig::default() },
            FlowConfig { dt: 1.0, ..FlowConfig::default() },
        ] {
            let seeds: Vec<u64> = (base..base + 64).collect();
            let rk = run_seeds(&FlowConfig::default(), &seeds, || {}).unwrap();
            let o = run_seeds(&other, &seeds, || {}).unwrap();
            let (mut same, mut close) = (0, 0);
            for (a, b) in rk.iter().zip(&o) {
                prop_assert!(a.converged && b.converged, "seed {}", a.seed);
                if a.key_offsets == b.key_offsets {
                    same += 1;
                    let (ta, tb) = (a.t_conv.unwrap(), b.t_conv.unwrap());
                    let rel = (ta - tb).abs() / ta;
                    close += usize::from(rel < 0.02);
                }
            }
            prop_assert!(same >= 62, "same offsets in only {}/64 ({:?})", same, other.integrator);
            prop_assert!(
                close + 2 >= same,
                "|dt_conv|/t_conv >= 0.02 in {} runs ({:?})",
                same - close,
                other.integrator
            );
        }
        Ok(())
    });
}

/// The converged model's phase profile (T-10): accuracy 1 at query offsets chosen by some
/// head, 0 elsewhere, target probability below chance there, the same in every chunk;
/// the literal vector model at eps = 0 measures the same profile.
#[test]
fn phase_profile_of_converged_model() {
    cases("theorem2-phase_profile_of_converged_model", any::<u64>(), |seed| {
        let p = TaskParams::secondary();
        let cfg = FlowConfig { params: p, t_max: 10_000.0, ..FlowConfig::default() };
        let r = run_flow(&cfg, seed, true).unwrap();
        prop_assume!(r.converged);
        let g = OracleGates::from_static(&p, &r.key, &r.value);
        let prof = phase_profile(&p, &g).unwrap();
        let chosen: Vec<usize> = r.key_offsets.iter().flatten().copied().collect();
        for s in &prof.positions {
            if chosen.contains(&s.offset) {
                prop_assert_eq!(s.accuracy, 1.0, "chosen offset {} missed", s.offset);
                prop_assert!(s.target_prob > prof.chance);
            } else {
                prop_assert_eq!(s.accuracy, 0.0, "unchosen offset {} retrieved", s.offset);
                prop_assert!(s.target_prob < prof.chance, "p = {} vs chance {}", s.target_prob, prof.chance);
            }
        }
        let v = Vocabulary::exact(p.vocab, p.kappa, None).unwrap();
        let mc = phase_profile_mc(&p, &v, &g, 2, seed).unwrap();
        for (a, b) in prof.positions.iter().zip(&mc.positions) {
            prop_assert_eq!(a.accuracy, b.accuracy);
            prop_assert!((a.target_prob - b.target_prob).abs() < 1e-10);
        }
        Ok(())
    });
}

/// The counterexample to "Euler at dt = 1 picks the same offsets as RK4" (1 seed in 512 at the
/// primary defaults, `phasekv theory t2 --seeds 512`): at seed 230, RK4 (dt = 2) chooses
/// offsets 3 and 1, Euler (dt = 1) lets both heads collide on 3.
#[test]
fn euler_and_rk4_disagree_at_seed_230() {
    let rk = run_flow(&FlowConfig::default(), 230, true).unwrap();
    let eu =
        run_flow(&FlowConfig { integrator: Integrator::Euler, dt: 1.0, ..FlowConfig::default() }, 230, true).unwrap();
    assert_eq!(rk.key_offsets, vec![Some(3), Some(1)]);
    assert_eq!(eu.key_offsets, vec![Some(3), Some(3)]);
}

/// Escape time grows like log(1/sigma): each factor 100 in sigma adds about the same time.
#[test]
fn escape_time_grows_like_log_inverse_sigma() {
    let median = |sigma: f64| {
        let cfg = FlowConfig { sigma, ..FlowConfig::default() };
        let runs = run_seeds(&cfg, &(100..116).collect::<Vec<u64>>(), || {}).unwrap();
        summarise(&cfg.params, &runs).median_t_conv.unwrap()
    };
    let (a, b, c) = (median(1e-2), median(1e-4), median(1e-6));
    assert!(a < b && b < c, "{a} {b} {c}");
    let (d1, d2) = (b - a, c - b);
    assert!((d1 - d2).abs() < 0.3 * d1.max(d2), "increments {d1} {d2} not ~ equal");
}

/// The content term (T-11) stays at its initial size (grad_w F = 0 at w = 0), and the flow
/// still converges to the same kind of vertex.
#[test]
fn content_weights_stay_small() {
    let p = TaskParams { vocab: 24, ..TaskParams::default() };
    let cfg = FlowConfig {
        params: p,
        content: Some(ContentOptions { base_contexts: 1, init_scale: 0.01 }),
        ..FlowConfig::default()
    };
    for seed in [3u64, 4] {
        let r = run_flow(&cfg, seed, true).unwrap();
        assert!(r.converged, "seed {seed}");
        assert!(r.content_norm_init > 0.0);
        assert!(
            r.content_norm < 2.0 * r.content_norm_init,
            "|w| grew from {} to {}",
            r.content_norm_init,
            r.content_norm
        );
    }
}

/// Where Theorem 2 fails as posed: at S=8, H=3, gamma=4 a collision of two heads hedges
/// (gamma_c / 2 < 4), so some seeds stall with colliding value gates short of 0.99.
#[test]
fn collisions_stall_at_large_gamma() {
    let cfg = FlowConfig {
        params: TaskParams { gamma: 4.0, ..TaskParams::secondary() },
        t_max: 10_000.0,
        ..FlowConfig::default()
    };
    let runs = run_seeds(&cfg, &(0..32).collect::<Vec<u64>>(), || {}).unwrap();
    let stalled: Vec<&FlowRun> = runs.iter().filter(|r| !r.converged).collect();
    assert!(!stalled.is_empty(), "expected some stalled seeds");
    for r in stalled {
        let g = OracleGates::from_static(&cfg.params, &r.key, &r.value);
        let st = classify(&g);
        assert!(!st.distinct_heads, "a stalled run should be a collision: {:?}", st.key_offsets);
        assert!(st.min_peak > 0.9 && st.min_peak < 0.99, "stalls near but short of the vertex: {}", st.min_peak);
    }
}

/// Bad configurations are clear errors.
#[test]
fn invalid_flow_config_is_rejected() {
    for (cfg, field) in [
        (FlowConfig { dt: 0.0, ..FlowConfig::default() }, "dt"),
        (FlowConfig { sigma: -1.0, ..FlowConfig::default() }, "sigma"),
        (FlowConfig { params: TaskParams { heads: 4, ..TaskParams::default() }, ..FlowConfig::default() }, "heads"),
    ] {
        let err = run_flow(&cfg, 0, true).unwrap_err();
        assert!(err.to_string().contains(field), "{err}");
    }
}

/// Large beta (8) makes escapes from the split saddle very slow (spec §4): the median
/// convergence time is more than ten times the one at beta = 2.
#[test]
fn large_beta_escapes_slowly() {
    let median = |beta: f64| {
        let cfg = FlowConfig {
            params: TaskParams { beta, ..TaskParams::default() },
            t_max: 20_000.0,
            ..FlowConfig::default()
        };
        let runs = run_seeds(&cfg, &(200..208).collect::<Vec<u64>>(), || {}).unwrap();
        summarise(&cfg.params, &runs).median_t_conv.unwrap_or(f64::INFINITY)
    };
    let (slow, fast) = (median(8.0), median(2.0));
    assert!(slow > 10.0 * fast, "beta=8 median {slow} vs beta=2 median {fast}");
}

/// A convergence curve agrees with the summary's run of its seed: the same `t_conv`, the least
/// concentrated head at or below the threshold at every record before it and above it at every
/// record after it (concentration stays), for random blocks of seeds at the primary defaults.
/// Negative control: the concentration of a head whose value gate follows the wrong offset
/// (`pV(r)` instead of `pV(r + 1)`) stays near 0, and so does that of a uniform head.
#[test]
fn convergence_curves_follow_the_convergence_criterion() {
    cases("theorem2-convergence_curves_follow_the_convergence_criterion", 0u64..1_000_000_000, |base| {
        let cfg = FlowConfig::default();
        let seeds: Vec<u64> = (base..base + 4).collect();
        let runs = run_seeds(&cfg, &seeds, || {}).unwrap();
        let curves = convergence_curves(&cfg, &seeds, 10).unwrap();
        for (r, c) in runs.iter().zip(&curves) {
            prop_assert_eq!(r.seed, c.seed);
            prop_assert_eq!(r.t_conv, c.t_conv);
            prop_assert_eq!(r.heads_coincide, c.heads_coincide);
            prop_assert_eq!(c.times.len(), c.concentration.len());
            prop_assert!(c.concentration.iter().all(|&x| (0.0..=1.0).contains(&x)));
            if let Some(t) = c.t_conv {
                for (&time, &y) in c.times.iter().zip(&c.concentration) {
                    if time < t {
                        prop_assert!(y <= cfg.threshold, "seed {} at t {time}: {y} before t_conv {t}", c.seed);
                    } else {
                        prop_assert!(y > cfg.threshold, "seed {} at t {time}: {y} after t_conv {t}", c.seed);
                    }
                }
            }
        }
        Ok(())
    });
    let s = 4;
    let one_hot = |r: usize| (0..s).map(|i| if i == r { 0.999 } else { 0.001 / 3.0 }).collect::<Vec<f64>>();
    let (r, c) = concentration(&one_hot(1), &one_hot(2));
    assert_eq!(r, 1);
    assert!(c > 0.99);
    let (_, crossed) = concentration(&one_hot(1), &one_hot(1));
    assert!(crossed < 0.01, "a value gate on the key's own offset is not concentration: {crossed}");
    let uniform = vec![0.25; s];
    assert_eq!(concentration(&uniform, &uniform).1, 0.25);
    assert!(convergence_curves(&FlowConfig::default(), &[0], 0).is_err(), "no curve without records");
}
