//! The invariant catalogue K1-K14 (`theory/kernels.md`, "The catalogue and the tests") on every preset, for the f64 reference
//! and for the candle implementation on every available device (CPU always; CUDA with the
//! `cuda` feature and a GPU). K13 runs the candle kernel in f32, f16 and bf16.

use crate::common;

use candle_core::{DType, Device};
use common::invariants::assert_exercised;
use common::strategies::check_every_preset;
use common::test_device;
use phasekv::conformance::harness::subjects::{ReferenceSubject, TensorSubject};
use phasekv::conformance::harness::{Invariant, KernelUnderTest};

/// Cases per preset and invariant (each test covers every listed preset).
const REFERENCE_CASES: u32 = 48;
const TENSOR_CASES: u32 = 16;

fn reference(spec: &phasekv::kernel::KernelSpec) -> Box<dyn KernelUnderTest> {
    Box::new(ReferenceSubject::new(spec))
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
                // candle's differentiable primitive ops (the path training differentiates
                // through); the fused CPU forward has its own tests (`kernel_fast.rs`).
                test_device!(candle_f32, |dev: &Device| {
                    let dev = dev.clone();
                    let reports = check_every_preset($inv, TENSOR_CASES, &move |spec| Box::new(TensorSubject::new(spec, DType::F32, &dev)));
                    assert_exercised($inv, &reports);
                });
            }
        )*
    };
}

common::for_each_invariant!(invariant_tests);

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
