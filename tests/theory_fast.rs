//! The gradient flow's fast kernel (theory/induction-model.md §8) against the reference:
//! `exp_poly` against `f64::exp`, the fast static loss and logit gradient against
//! `static_loss_grad` plus the softmax pullback (T-6, T-6g, T-8), and whole runs of the flow.

use crate::common;

use phasekv::theory::fast::{exp_poly, FastStatic, Isa};
use phasekv::theory::flow::{
    run_flow_with, run_seeds, run_seeds_on, run_seeds_with, FlowConfig, FlowKernel, FlowRun, Integrator,
};
use phasekv::theory::task::{softmax_pullback, static_loss_grad, StaticWorkspace, TaskParams};
use proptest::prelude::*;

/// Fast and reference loss and gradient agree to this (relative, floor 1e-9).
const FAST_VS_REFERENCE: f64 = 1e-12;

#[test]
fn exp_poly_matches_std_exp_and_keeps_nan() {
    let mut worst: f64 = 0.0;
    let mut x = -707.9;
    while x < 709.0 {
        let (a, b) = (exp_poly(x), x.exp());
        worst = worst.max((a - b).abs() / b);
        x += 0.0137;
    }
    for x in [-1e-300, 0.0, 1e-12, -0.3465, 0.3466, 1.0, -1.0, 88.0, -88.0] {
        let (a, b) = (exp_poly(x), f64::exp(x));
        worst = worst.max((a - b).abs() / b);
    }
    assert!(worst < 1e-15, "worst relative error {worst:e}");
    assert!(exp_poly(f64::NAN).is_nan());
    assert_eq!(exp_poly(0.0), 1.0);
    // Clamped tails: tiny but positive below, finite above.
    assert!(exp_poly(-1e6) > 0.0 && exp_poly(-1e6) < 1e-300);
    assert!(exp_poly(1e6).is_finite());
}

#[test]
fn fast_static_kernel_matches_reference() {
    let mut runner = common::runner("theory-fast-kernel", 64, None);
    runner
        .run(&common::params_and_static(), |(p, key, value)| {
            let (hh, ss) = (p.heads, p.stride);
            let hs = hh * ss;
            // Logits whose softmax is the drawn gates, plus a per-block shift (softmax ignores it).
            let mut theta: Vec<f64> = key.iter().chain(&value).map(|x| x.ln()).collect();
            for (i, t) in theta.iter_mut().enumerate() {
                *t += (i / ss) as f64 * 0.37;
            }
            let mut fast = FastStatic::new(hh, ss);
            let mut out = vec![0.0; 2 * hs];
            let f = fast.eval(&p, &theta, &mut out);
            let mut ws = StaticWorkspace::new(hh, ss);
            let (mut gk, mut gv) = (vec![0.0; hs], vec![0.0; hs]);
            let f_ref = static_loss_grad(&p, &key, &value, &mut ws, Some((&mut gk, &mut gv)));
            for h in 0..hh {
                softmax_pullback(&key[h * ss..(h + 1) * ss], &mut gk[h * ss..(h + 1) * ss]);
                softmax_pullback(&value[h * ss..(h + 1) * ss], &mut gv[h * ss..(h + 1) * ss]);
            }
            prop_assert!(common::rel_err(f, f_ref, 1e-9) < FAST_VS_REFERENCE, "loss {} vs {}", f, f_ref);
            for (i, (a, b)) in out.iter().zip(gk.iter().chain(&gv)).enumerate() {
                prop_assert!((a - b).abs() < FAST_VS_REFERENCE * b.abs().max(1e-3), "grad {}: {} vs {}", i, a, b);
            }
            for (a, b) in fast.key().iter().zip(&key).chain(fast.value().iter().zip(&value)) {
                prop_assert!((a - b).abs() < 1e-14);
            }
            Ok(())
        })
        .unwrap();
}

/// Whole runs: the fast kernel reaches the same offsets at the same time as the reference, at
/// the primary and the secondary defaults.
#[test]
fn flow_runs_agree_with_the_reference_kernel() {
    for (cfg, seeds) in [
        (FlowConfig::default(), 0u64..4),
        (FlowConfig { params: TaskParams::secondary(), t_max: 10_000.0, ..FlowConfig::default() }, 0..2),
    ] {
        for seed in seeds {
            let a = run_flow_with(&cfg, seed, true, FlowKernel::Fast).unwrap();
            let b = run_flow_with(&cfg, seed, true, FlowKernel::Reference).unwrap();
            assert!(a.converged && b.converged, "seed {seed}");
            assert_eq!(a.key_offsets, b.key_offsets, "seed {seed}");
            assert_eq!(a.t_conv, b.t_conv, "seed {seed}");
            for (x, y) in a.key.iter().zip(&b.key).chain(a.value.iter().zip(&b.value)) {
                assert!((x - y).abs() < 1e-9, "seed {seed}: gates {x} vs {y}");
            }
            assert!((a.final_loss - b.final_loss).abs() < 1e-11);
        }
    }
}

/// Configurations for the batched runner: both defaults, Euler, and a horizon short enough that
/// some runs end unconverged.
fn batch_configs() -> Vec<FlowConfig> {
    let secondary = FlowConfig { params: TaskParams::secondary(), t_max: 10_000.0, ..FlowConfig::default() };
    vec![
        FlowConfig::default(),
        secondary,
        FlowConfig { integrator: Integrator::Euler, dt: 1.0, ..FlowConfig::default() },
        FlowConfig { t_max: 500.0, ..FlowConfig::default() },
        FlowConfig {
            params: TaskParams { gamma: 4.0, ..TaskParams::secondary() },
            t_max: 3_000.0,
            ..FlowConfig::default()
        },
    ]
}

/// A run's numbers as bits: convergence time, gates, final loss, steps, offsets.
type RunBits = (Option<u64>, Vec<u64>, Vec<u64>, u64, usize, Vec<Option<usize>>);

fn bits(runs: &[FlowRun]) -> Vec<RunBits> {
    runs.iter()
        .map(|r| {
            (
                r.t_conv.map(f64::to_bits),
                r.key.iter().map(|x| x.to_bits()).collect(),
                r.value.iter().map(|x| x.to_bits()).collect(),
                r.final_loss.to_bits(),
                r.steps,
                r.key_offsets.clone(),
            )
        })
        .collect()
}

/// Seeds batched in vector lanes (with lanes refilled as runs end, 19 seeds over 8 lanes) give
/// exactly, bit for bit, the one-seed runs of the fast kernel, on every instruction set the CPU
/// has: converged, unconverged (short horizon, collisions at gamma = 4) and Euler runs alike.
#[test]
fn batched_runs_equal_one_seed_runs_bit_for_bit() {
    let seeds: Vec<u64> = (100..119).collect();
    for cfg in batch_configs() {
        let single: Vec<FlowRun> =
            seeds.iter().map(|&s| run_flow_with(&cfg, s, true, FlowKernel::Fast).unwrap()).collect();
        assert!(single.iter().any(|r| r.converged), "{cfg:?}");
        for isa in [Isa::Avx512, Isa::Avx2, Isa::Generic].into_iter().filter(|i| i.available()) {
            let batched = run_seeds_on(&cfg, &seeds, isa, || {}).unwrap();
            assert_eq!(batched, single, "{isa:?} {cfg:?}");
            assert_eq!(bits(&batched), bits(&single), "{isa:?} {cfg:?}");
        }
    }
    // The short horizon leaves some runs unconverged (the batched path's other exit).
    let short = &batch_configs()[3];
    assert!(seeds.iter().any(|&s| !run_flow_with(short, s, true, FlowKernel::Fast).unwrap().converged));
}

/// Same seeds, same numbers: `run_seeds` on 1 and on 2 threads, and the seed list in another
/// order (so that every seed lands in another lane at another time).
#[test]
fn batched_runs_are_deterministic_across_threads_and_lanes() {
    let cfg = FlowConfig { params: TaskParams::secondary(), t_max: 10_000.0, ..FlowConfig::default() };
    let seeds: Vec<u64> = (0..24).collect();
    let on = |threads: usize, seeds: &[u64]| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| run_seeds(&cfg, seeds, || {}).unwrap())
    };
    let one = on(1, &seeds);
    let two = on(2, &seeds);
    assert_eq!(bits(&one), bits(&two));
    let reversed: Vec<u64> = seeds.iter().rev().copied().collect();
    let mut back = on(2, &reversed);
    back.reverse();
    assert_eq!(bits(&one), bits(&back));
}

/// 64 seeds at the secondary defaults: the batched fast runs choose the same offsets at the
/// same time as the reference kernel, gates within 1e-9, final loss within 1e-11 (the bench
/// `theory_flow` checks the same on 512 seeds).
#[test]
fn batched_fast_runs_agree_with_the_reference_on_64_seeds() {
    let cfg = FlowConfig { params: TaskParams::secondary(), t_max: 10_000.0, ..FlowConfig::default() };
    let seeds: Vec<u64> = (0..64).collect();
    let fast = run_seeds_with(&cfg, &seeds, FlowKernel::Fast, || {}).unwrap();
    let reference = run_seeds_with(&cfg, &seeds, FlowKernel::Reference, || {}).unwrap();
    for (a, b) in fast.iter().zip(&reference) {
        let seed = a.seed;
        assert_eq!(a.seed, b.seed);
        assert_eq!((a.converged, &a.key_offsets, a.t_conv), (b.converged, &b.key_offsets, b.t_conv), "seed {seed}");
        for (x, y) in a.key.iter().zip(&b.key).chain(a.value.iter().zip(&b.value)) {
            assert!((x - y).abs() < 1e-9, "seed {seed}: gates {x} vs {y}");
        }
        assert!((a.final_loss - b.final_loss).abs() < 1e-11, "seed {seed}");
    }
    assert!(fast.iter().filter(|r| r.converged).count() >= 60);
}
