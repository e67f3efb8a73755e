//! The invariant catalogue as test input, shared by every kernel that runs it
//! (`kernel_invariants.rs`: the reference and candle; `kernel_fast.rs`: the fast kernel), and
//! `test_device!`, one test body on every available device.
//!
//! A new invariant is added to [`for_each_invariant!`] once and every kernel's tests pick it up;
//! [`the_list_is_the_catalogue`] fails while the list and [`Invariant::ALL`] differ.

use phasekv::conformance::harness::{Invariant, InvariantReport};
use phasekv::kernel::{GateKind, KernelSpec};

/// Calls `$callback! { test_name => Invariant::X, ... }` with every invariant of the catalogue,
/// in catalogue order.
macro_rules! for_each_invariant {
    ($callback:ident) => {
        $callback! {
            k01_count => phasekv::conformance::harness::Invariant::K1Count,
            k02_locality => phasekv::conformance::harness::Invariant::K2Locality,
            k03_stride_shift => phasekv::conformance::harness::Invariant::K3StrideShift,
            k04_phase_not_window => phasekv::conformance::harness::Invariant::K4PhaseNotWindow,
            k05_normalisation => phasekv::conformance::harness::Invariant::K5Normalisation,
            k06_convexity => phasekv::conformance::harness::Invariant::K6Convexity,
            k07_uniform_limit => phasekv::conformance::harness::Invariant::K7UniformLimit,
            k08_one_hot_limit => phasekv::conformance::harness::Invariant::K8OneHotLimit,
            k09_permutation => phasekv::conformance::harness::Invariant::K9Permutation,
            k10_tied_scalar => phasekv::conformance::harness::Invariant::K10TiedScalar,
            k11_streaming => phasekv::conformance::harness::Invariant::K11Streaming,
            k12_causality => phasekv::conformance::harness::Invariant::K12Causality,
            k13_reference_agreement => phasekv::conformance::harness::Invariant::K13ReferenceAgreement,
            k14_grid_shift => phasekv::conformance::harness::Invariant::K14GridShift,
        }
    };
}
pub(crate) use for_each_invariant;

/// Runs a test body (a closure taking `&Device`) on every available device, candle's habit:
/// `mod $name { fn cpu(), fn cuda() }`; CPU always, CUDA when built with `--features cuda` and
/// a GPU is present (with `PHASEKV_REQUIRE_CUDA=1` a missing GPU fails instead of skipping).
macro_rules! test_device {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn cpu() {
                ($body)(&candle_core::Device::Cpu)
            }
            #[cfg(feature = "cuda")]
            #[test]
            fn cuda() {
                match candle_core::Device::new_cuda(0) {
                    Ok(dev) => ($body)(&dev),
                    Err(e) if std::env::var("PHASEKV_REQUIRE_CUDA").is_ok_and(|v| v == "1") => {
                        panic!("PHASEKV_REQUIRE_CUDA=1 but no CUDA device: {e}")
                    }
                    Err(e) => eprintln!("no CUDA device, skipping: {e}"),
                }
            }
        }
    };
}
pub(crate) use test_device;

/// Presets on which `inv` has something to check: every preset, except that presets without a
/// learned gate (uniform pooling, `full`, `dsv41-c1`) have nothing for K7 and K10, and presets
/// without gate biases (those, and DeepSeek-V4.1's `gate_bias: false`) no one-hot limit (K8).
/// A staggered preset's head grid is labelled `name@o{offset}`; K14 (grid shift) applies to
/// grids with an offset above 0 only.
pub fn applicable(inv: Invariant, preset: &str) -> bool {
    let (name, offset) = match preset.split_once("@o") {
        Some((n, o)) => (n, o.parse::<usize>().expect("offset label")),
        None => (preset, 0),
    };
    let spec = KernelSpec::preset(name).expect("listed preset");
    match inv {
        Invariant::K14GridShift => offset > 0,
        Invariant::K8OneHotLimit => spec.has_gate_bias(),
        Invariant::K7UniformLimit | Invariant::K10TiedScalar => spec.gate != GateKind::Uniform,
        _ => true,
    }
}

/// Asserts the invariant was really exercised (not vacuous) on every preset it applies to.
pub fn assert_exercised(inv: Invariant, reports: &[(String, InvariantReport)]) {
    let exercised = reports.iter().filter(|(_, r)| r.cases_passed > 0).count();
    let applicable = reports.iter().filter(|(name, _)| applicable(inv, name)).count();
    assert!(exercised >= applicable, "{}: only {exercised} of {applicable} presets exercised: {reports:#?}", inv.id());
}

macro_rules! collect_invariants {
    ($($test:ident => $inv:expr),* $(,)?) => {
        vec![$($inv),*]
    };
}

#[test]
fn the_list_is_the_catalogue() {
    let listed: Vec<Invariant> = for_each_invariant!(collect_invariants);
    assert_eq!(listed, Invariant::ALL.to_vec());
}
