//! Shared proptest strategies and runners for the integration tests.
//!
//! Kernel cases: the strategies live in the library (`phasekv::conformance::harness::strategies`,
//! re-exported here) because `phasekv kernel check` draws from the same ones; this module adds
//! what only tests need (a deterministic, overridable seed, committed regression files, a loop
//! over every preset). Theory: task parameters, probability vectors and gates.
#![allow(dead_code)]

use phasekv::conformance::harness::{run_invariant, Invariant, InvariantReport, KernelUnderTest};
use phasekv::kernel::spec::preset_names;
use phasekv::kernel::KernelSpec;
use proptest::test_runner::{Config, FileFailurePersistence, RngAlgorithm, RngSeed, TestRng, TestRunner};

pub use phasekv::conformance::harness::strategies::*;

/// The seed for a test: `PHASEKV_TEST_SEED` if set (to explore), else a fixed value (so CI is
/// reproducible); mixed with a label so tests draw different cases.
pub fn seed_for(label: &str) -> [u8; 32] {
    let base: u64 = std::env::var("PHASEKV_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5EED_0001);
    let mut h: u64 = 0xcbf29ce484222325 ^ base;
    for b in label.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&h.to_le_bytes());
    bytes[8..16].copy_from_slice(&base.to_le_bytes());
    bytes
}

/// A runner for `cases` cases whose failures are saved in `regressions` (a file under
/// `proptest-regressions/`), or not saved when it is `None` (mutants, whose failures are expected).
pub fn runner(label: &str, cases: u32, regressions: Option<&'static str>) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: regressions.map(|f| Box::new(FileFailurePersistence::Direct(f)) as _),
        max_shrink_iters: 512,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed_for(label)))
}

/// The config for a `proptest!` block: the same seed as [`runner`] (fixed, or from
/// `PHASEKV_TEST_SEED`, mixed with `label`), `cases` cases, failures saved in `regressions`.
/// Blocks written with the macro use this, so no property test draws a fresh random seed.
pub fn macro_config(label: &str, cases: u32, regressions: &'static str) -> Config {
    let seed = seed_for(label);
    Config {
        cases,
        rng_seed: RngSeed::Fixed(u64::from_le_bytes(seed[..8].try_into().expect("8 bytes"))),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        max_shrink_iters: 512,
        ..Config::default()
    }
}

/// Every preset, as specs; a staggered preset as one kernel per grid its heads sit on in the
/// default model shape ([`KernelSpec::head_kernels`], labelled `name@o{offset}`).
pub fn all_presets() -> Vec<KernelSpec> {
    let m = phasekv::model::config::ModelConfig::default();
    preset_names()
        .iter()
        .flat_map(|n| {
            KernelSpec::preset(n).expect("listed preset").head_kernels(m.n_layer, m.n_kv_head).expect("grids")
        })
        .collect()
}

/// Runs `invariant` on every preset with `make(spec)`; returns the reports. Panics listing every
/// preset on which it failed, with the shrunk failure.
pub fn check_every_preset(
    invariant: Invariant,
    cases: u32,
    make: &dyn Fn(&KernelSpec) -> Box<dyn KernelUnderTest>,
) -> Vec<(String, InvariantReport)> {
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for spec in all_presets() {
        let subject = make(&spec);
        let label = format!("{}-{}-{}", invariant.id(), subject.label(), spec.grid_label());
        let mut r = runner(&label, cases, Some("proptest-regressions/kernel_invariants.txt"));
        let report = run_invariant(subject.as_ref(), invariant, &mut r);
        if let Some(f) = &report.failure {
            failures.push(format!("{} on {} ({}): {f}", invariant.id(), spec.grid_label(), subject.label()));
        }
        reports.push((spec.grid_label(), report));
    }
    assert!(failures.is_empty(), "invariant failures:\n{}", failures.join("\n"));
    reports
}

// ---- theory ----

use phasekv::theory::task::{OracleGates, TaskParams};
use proptest::prelude::*;

prop_compose! {
    /// Small valid task parameters (1 <= H < S, L >= 2, N >= L S).
    pub fn task_params()(stride in 2usize..=5, chunks in 2usize..=4)
        (heads in 1usize..stride, stride in Just(stride), chunks in Just(chunks),
         extra in 0usize..24, beta in 0.2f64..6.0, gamma in 0.2f64..6.0, kappa in 0.1f64..3.0)
        -> TaskParams {
        TaskParams { stride, heads, chunks, vocab: chunks * stride + extra, beta, gamma, kappa }
    }
}

prop_compose! {
    /// A probability vector of length `n` with entries bounded away from 0.
    pub fn prob_vec(n: usize)(raw in proptest::collection::vec(0.02f64..1.0, n)) -> Vec<f64> {
        let s: f64 = raw.iter().sum();
        raw.into_iter().map(|x| x / s).collect()
    }
}

/// `count` probability vectors of length `s`, concatenated.
pub fn prob_blocks(count: usize, s: usize) -> impl Strategy<Value = Vec<f64>> {
    proptest::collection::vec(prob_vec(s), count).prop_map(|v| v.concat())
}

/// Parameters together with random oracle gates for them.
pub fn params_and_gates() -> impl Strategy<Value = (TaskParams, OracleGates)> {
    task_params().prop_flat_map(|p| {
        let n = p.heads * p.chunks;
        (Just(p), prob_blocks(n, p.stride), prob_blocks(n, p.stride)).prop_map(|(p, key, value)| {
            let g = OracleGates { heads: p.heads, chunks: p.chunks, stride: p.stride, key, value };
            (p, g)
        })
    })
}

/// Parameters together with random static gates (`H x S` each).
pub fn params_and_static() -> impl Strategy<Value = (TaskParams, Vec<f64>, Vec<f64>)> {
    task_params().prop_flat_map(|p| (Just(p), prob_blocks(p.heads, p.stride), prob_blocks(p.heads, p.stride)))
}

/// Relative error `|a - b| / max(|a|, |b|, floor)`.
pub fn rel_err(a: f64, b: f64, floor: f64) -> f64 {
    (a - b).abs() / a.abs().max(b.abs()).max(floor)
}
