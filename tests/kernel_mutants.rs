//! The harness must catch real bugs: each deliberately broken kernel (a mutant of the
//! reference) must fail at least the invariant that targets its bug. The table of which
//! invariants caught which mutant is printed (`cargo test --test kernel_mutants -- --nocapture`).

use crate::common;

use common::strategies::runner;
use phasekv::conformance::harness::subjects::ReferenceSubject;
use phasekv::conformance::harness::{run_invariant, Invariant};
use phasekv::conformance::mutants::Mutant;
use phasekv::kernel::KernelSpec;

const CASES: u32 = 32;

/// Runs every invariant on a mutant and returns the ids that failed.
fn caught_by(mutation: Option<Mutant>, preset: &str) -> Vec<Invariant> {
    let spec = KernelSpec::preset(preset).unwrap();
    let subject = match mutation {
        Some(m) => ReferenceSubject::mutant(&spec, m),
        None => ReferenceSubject::new(&spec),
    };
    // The runner's label (its seed) names the mutant as it always has: `None` or the variant.
    let mutation = mutation.map_or("None".to_string(), |m| format!("{m:?}"));
    let mut caught = Vec::new();
    for inv in Invariant::ALL {
        // Mutant failures are expected: no regression file, or every run would replay them.
        let mut r = runner(&format!("mutant-{mutation}-{preset}-{}", inv.id()), CASES, None);
        let report = run_invariant(&subject, inv, &mut r);
        if let Some(failure) = &report.failure {
            println!("{preset:<10} {mutation:<24} {:<4} {failure}", inv.id());
            caught.push(inv);
        }
    }
    caught
}

fn assert_caught(mutation: Mutant, preset: &str, expected: &[Invariant]) {
    let caught = caught_by(Some(mutation), preset);
    let ids: Vec<_> = caught.iter().map(|i| i.id()).collect();
    println!("{mutation:?} on {preset}: caught by {}", ids.join(", "));
    for inv in expected {
        assert!(caught.contains(inv), "{mutation:?} on {preset}: expected {} to fail, caught by {ids:?}", inv.id());
    }
}

#[test]
fn correct_reference_is_not_flagged() {
    for preset in ["w8s4", "dsv4-csa"] {
        assert!(caught_by(None, preset).is_empty(), "{preset}");
    }
}

#[test]
fn off_by_one_window_start() {
    assert_caught(
        Mutant::WindowStartOffByOne,
        "w8s4",
        &[Invariant::K2Locality, Invariant::K11Streaming, Invariant::K13ReferenceAgreement],
    );
    assert_caught(Mutant::WindowStartOffByOne, "dsv4-csa", &[Invariant::K2Locality, Invariant::K13ReferenceAgreement]);
}

#[test]
fn softmax_over_channels() {
    assert_caught(Mutant::SoftmaxOverChannels, "w8s4", &[Invariant::K5Normalisation, Invariant::K6Convexity]);
}

#[test]
fn bias_indexed_by_window() {
    assert_caught(Mutant::BiasByWindow, "w8s4", &[Invariant::K3StrideShift, Invariant::K13ReferenceAgreement]);
}

#[test]
fn padded_slots_keep_weight() {
    assert_caught(Mutant::PaddedSlotsKeepWeight, "dsv4-csa", &[Invariant::K5Normalisation]);
}

#[test]
fn stride_used_for_window() {
    assert_caught(Mutant::StrideForWindow, "w8s4", &[Invariant::K4PhaseNotWindow]);
    assert_caught(Mutant::StrideForWindow, "w8s6", &[Invariant::K4PhaseNotWindow]);
}

#[test]
fn missing_causal_mask() {
    assert_caught(Mutant::AttentionLookAhead, "w8s4", &[Invariant::K12Causality]);
    assert_caught(Mutant::AttentionLookAhead, "dsv4-csa", &[Invariant::K12Causality]);
}

/// Staggered grids (issue 30): each head's kernel on its own grid, `preset@o{k}`.
const STAGGERED_HEADS: [&str; 3] = ["w8s8-stagger-heads@o4", "w8s4-stagger-layers@o2", "w8s8-stagger-heads"];

#[test]
fn correct_reference_on_staggered_grids_is_not_flagged() {
    for preset in STAGGERED_HEADS {
        assert!(caught_by(None, preset).is_empty(), "{preset}");
    }
}

#[test]
fn grid_offset_ignored() {
    // Windows back on the unshifted grid: the locality of every entry and the grid shift break.
    assert_caught(Mutant::IgnoreOffset, "w8s8-stagger-heads@o4", &[Invariant::K2Locality, Invariant::K14GridShift]);
    assert_caught(Mutant::IgnoreOffset, "w8s4-stagger-layers@o2", &[Invariant::K2Locality, Invariant::K14GridShift]);
}

#[test]
fn grid_offset_of_the_other_head() {
    // Head 1's kernel on head 0's grid and head 0's on head 1's: the count and locality break.
    assert_caught(Mutant::OtherHeadOffset, "w8s8-stagger-heads@o4", &[Invariant::K1Count, Invariant::K2Locality]);
    assert_caught(Mutant::OtherHeadOffset, "w8s8-stagger-heads", &[Invariant::K1Count, Invariant::K2Locality]);
    assert_caught(Mutant::OtherHeadOffset, "w8s4-stagger-layers@o2", &[Invariant::K2Locality]);
}
