//! Shared strategies and runners for the integration tests. The case strategies themselves live
//! in the library (`phasekv::kernel::harness::strategies`) because `phasekv kernel check` draws
//! from the same ones; this module adds what only tests need: a deterministic, overridable seed,
//! committed regression files, and a loop over every preset.

use phasekv::kernel::harness::{run_invariant, Invariant, InvariantReport, KernelUnderTest};
use phasekv::kernel::spec::preset_names;
use phasekv::kernel::KernelSpec;
use proptest::test_runner::{Config, FileFailurePersistence, RngAlgorithm, TestRng, TestRunner};

pub use phasekv::kernel::harness::strategies::*;

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

/// Every preset, as specs.
pub fn all_presets() -> Vec<KernelSpec> {
    preset_names().iter().map(|n| KernelSpec::preset(n).expect("listed preset")).collect()
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
        let label = format!("{}-{}-{}", invariant.id(), subject.label(), spec.name);
        let mut r = runner(&label, cases, Some("proptest-regressions/kernel_invariants.txt"));
        let report = run_invariant(subject.as_ref(), invariant, &mut r);
        if let Some(f) = &report.failure {
            failures.push(format!("{} on {} ({}): {f}", invariant.id(), spec.name, subject.label()));
        }
        reports.push((spec.name.clone(), report));
    }
    assert!(failures.is_empty(), "invariant failures:\n{}", failures.join("\n"));
    reports
}
