//! [`check`]: one invariant checked on one case, by the function of its check.

use super::super::invariant::{CheckVerdict, Invariant};
use super::super::strategies::Case;
use super::super::subject::KernelUnderTest;
use super::agreement::{k11_streaming, k12_causality, k13_reference};
use super::gates::{
    k10_tied_scalar, k5_normalisation, k6_convexity, k7_uniform_limit, k8_one_hot_limit, k9_permutation,
};
use super::geometry::{k14_grid_shift, k1_count, k2_locality, k3_stride_shift, k4_phase_not_window};
use crate::Result;

/// Runs one invariant on one case.
pub fn check(inv: Invariant, s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    match inv {
        Invariant::K1Count => k1_count(s, case),
        Invariant::K2Locality => k2_locality(s, case),
        Invariant::K3StrideShift => k3_stride_shift(s, case),
        Invariant::K4PhaseNotWindow => k4_phase_not_window(s, case),
        Invariant::K5Normalisation => k5_normalisation(s, case),
        Invariant::K6Convexity => k6_convexity(s, case),
        Invariant::K7UniformLimit => k7_uniform_limit(s, case),
        Invariant::K8OneHotLimit => k8_one_hot_limit(s, case),
        Invariant::K9Permutation => k9_permutation(s, case),
        Invariant::K10TiedScalar => k10_tied_scalar(s, case),
        Invariant::K11Streaming => k11_streaming(s, case),
        Invariant::K12Causality => k12_causality(s, case),
        Invariant::K13ReferenceAgreement => k13_reference(s, case),
        Invariant::K14GridShift => k14_grid_shift(s, case),
    }
}
