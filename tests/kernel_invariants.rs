//! The invariant catalogue K1-K13 (`theory/kernels.md`, "The catalogue and the tests") on every preset, for the f64 reference
//! and for the candle implementation on every available device (CPU always; CUDA with the
//! `cuda` feature and a GPU). K13 runs the candle kernel in f32, f16 and bf16.

use crate::common;

use candle_core::{DType, Device};
use common::strategies::check_every_preset;
use phasekv::conformance::harness::subjects::{ReferenceSubject, TensorSubject};
use phasekv::conformance::harness::{Invariant, KernelUnderTest};
use phasekv::kernel::GateKind;

/// Cases per preset and invariant (each test covers every listed preset).
const REFERENCE_CASES: u32 = 48;
const TENSOR_CASES: u32 = 16;

/// Runs a test body on every available device (candle's habit): CPU always, CUDA when built
/// with `--features cuda` and a GPU is present.
macro_rules! test_device {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn cpu() {
                ($body)(&Device::Cpu)
            }
            #[cfg(feature = "cuda")]
            #[test]
            fn cuda() {
                match Device::new_cuda(0) {
                    Ok(dev) => ($body)(&dev),
                    // A GPU run sets PHASEKV_REQUIRE_CUDA=1, so a missing device fails there.
                    Err(e) if std::env::var("PHASEKV_REQUIRE_CUDA").is_ok_and(|v| v == "1") => {
                        panic!("PHASEKV_REQUIRE_CUDA=1 but no CUDA device: {e}")
                    }
                    Err(e) => eprintln!("no CUDA device, skipping: {e}"),
                }
            }
        }
    };
}

fn reference(spec: &phasekv::kernel::KernelSpec) -> Box<dyn KernelUnderTest> {
    Box::new(ReferenceSubject::new(spec))
}

/// Asserts the invariant was really exercised (not vacuous) on most presets.
fn assert_exercised(inv: Invariant, reports: &[(String, phasekv::conformance::harness::InvariantReport)]) {
    let exercised = reports.iter().filter(|(_, r)| r.cases_passed > 0).count();
    let applicable = match inv {
        // presets without gate biases (DeepSeek-V4.1's `gate_bias: false`) have no one-hot limit
        Invariant::K8OneHotLimit => reports
            .iter()
            .filter(|(name, _)| phasekv::kernel::KernelSpec::preset(name).unwrap().has_gate_bias())
            .count(),
        // presets without a learned gate (uniform pooling, `full`) have nothing for these
        Invariant::K7UniformLimit | Invariant::K10TiedScalar => reports
            .iter()
            .filter(|(name, _)| phasekv::kernel::KernelSpec::preset(name).unwrap().gate != GateKind::Uniform)
            .count(),
        _ => reports.len(),
    };
    assert!(exercised >= applicable, "{}: only {exercised} of {applicable} presets exercised: {reports:#?}", inv.id());
}

macro_rules! invariant_tests {
    ($($test:ident => $inv:expr),* $(,)?) => {
        $(
            mod $test {
                use super::*;
                #[test]
                fn reference_f64() {
                    let reports = check_every_preset($inv, REFERENCE_CASES, &reference);
                    if $inv == Invariant::K13ReferenceAgreement {
                        // Agreement with the reference is no test of the reference itself.
                        assert!(reports.iter().all(|(_, r)| r.cases_passed == 0 && r.status == phasekv::conformance::harness::InvariantStatus::NotApplicable), "{reports:#?}");
                    } else {
                        assert_exercised($inv, &reports);
                    }
                }
                test_device!(candle_f32, |dev: &Device| {
                    let dev = dev.clone();
                    let reports = check_every_preset($inv, TENSOR_CASES, &move |spec| Box::new(TensorSubject::new(spec, DType::F32, &dev)));
                    assert_exercised($inv, &reports);
                });
                // The primitive-op path (the one training differentiates through); on the CPU
                // the default f32 path above is the fast forward (`kernel::tensor::fast`).
                test_device!(candle_f32_primitive, |dev: &Device| {
                    let dev = dev.clone();
                    let reports = check_every_preset($inv, TENSOR_CASES, &move |spec| Box::new(TensorSubject::new(spec, DType::F32, &dev).primitive()));
                    assert_exercised($inv, &reports);
                });
            }
        )*
    };
}

invariant_tests! {
    k01_count => Invariant::K1Count,
    k02_locality => Invariant::K2Locality,
    k03_stride_shift => Invariant::K3StrideShift,
    k04_phase_not_window => Invariant::K4PhaseNotWindow,
    k05_normalisation => Invariant::K5Normalisation,
    k06_convexity => Invariant::K6Convexity,
    k07_uniform_limit => Invariant::K7UniformLimit,
    k08_one_hot_limit => Invariant::K8OneHotLimit,
    k09_permutation => Invariant::K9Permutation,
    k10_tied_scalar => Invariant::K10TiedScalar,
    k11_streaming => Invariant::K11Streaming,
    k12_causality => Invariant::K12Causality,
    k13_reference_agreement => Invariant::K13ReferenceAgreement,
}

mod k13_low_precision {
    use super::*;
    test_device!(candle_f16, |dev: &Device| {
        let dev = dev.clone();
        check_every_preset(Invariant::K13ReferenceAgreement, TENSOR_CASES, &move |spec| {
            Box::new(TensorSubject::new(spec, DType::F16, &dev))
        });
    });
    test_device!(candle_bf16, |dev: &Device| {
        let dev = dev.clone();
        check_every_preset(Invariant::K13ReferenceAgreement, TENSOR_CASES, &move |spec| {
            Box::new(TensorSubject::new(spec, DType::BF16, &dev))
        });
    });
}
