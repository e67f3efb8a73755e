//! Staggered chunk grids in the idealized induction model (`src/theory/stagger.rs`,
//! `theory/induction-model.md` §10): the per-head-grid loss reduces to (T-6) on the unstaggered
//! grid, its gradient matches finite differences, it is invariant under a common shift of every
//! grid, and what it predicts: with fewer heads than phases (`H < S`) a stagger leaves the best
//! loss and the number of weak phases unchanged and only frees the boundary phase; with `H >= S`
//! it covers every phase and beats every unstaggered configuration.

use crate::common;

use common::*;
use phasekv::theory::stagger::*;
use phasekv::theory::task::{static_loss_grad, StaticWorkspace, TaskParams};
use proptest::prelude::*;

/// (T-6) against the staggered form at zero offsets: the same sums in another order.
const SAME_FORM: f64 = 1e-12;
const FD_STEP: f64 = 1e-6;
const FD_REL: f64 = 1e-4;
/// A search end point is "at" a one-hot loss within this.
const AT_OPTIMUM: f64 = 1e-9;

fn params(stride: usize, heads: usize) -> TaskParams {
    TaskParams { stride, heads, chunks: 4, vocab: 64, beta: 2.0, gamma: 2.0, kappa: 1.0 }
}

/// Parameters, one grid offset per head, and static gates.
fn staggered_case() -> impl Strategy<Value = (TaskParams, Vec<usize>, Vec<f64>, Vec<f64>)> {
    task_params().prop_flat_map(|p| {
        (
            Just(p),
            proptest::collection::vec(0..p.stride, p.heads),
            prob_blocks(p.heads, p.stride),
            prob_blocks(p.heads, p.stride),
        )
    })
}

proptest! {
    #![proptest_config(macro_config("theory-stagger", 24, "proptest-regressions/theory_stagger.txt"))]

    /// Every grid at offset 0 and the paper's queries: the staggered loss and gradient are (T-6)
    /// and (T-6g).
    #[test]
    fn zero_offsets_and_paper_queries_give_the_static_closed_form((p, _o, key, value) in staggered_case()) {
        let task = StaggeredTask::unstaggered(p).unwrap();
        let n = p.heads * p.stride;
        let (mut gk, mut gv) = (vec![0.0; n], vec![0.0; n]);
        let f = stagger_loss_grad(&task, Phases::WithinChunk, &key, &value, Some((&mut gk, &mut gv)));
        let mut ws = StaticWorkspace::new(p.heads, p.stride);
        let (mut sk, mut sv) = (vec![0.0; n], vec![0.0; n]);
        let fs = static_loss_grad(&p, &key, &value, &mut ws, Some((&mut sk, &mut sv)));
        prop_assert!((f - fs).abs() < SAME_FORM, "staggered {} vs (T-6) {}", f, fs);
        for i in 0..n {
            prop_assert!(rel_err(gk[i], sk[i], 1e-8) < 1e-9, "pK grad {}: {} vs {}", i, gk[i], sk[i]);
            prop_assert!(rel_err(gv[i], sv[i], 1e-8) < 1e-9, "pV grad {}: {} vs {}", i, gv[i], sv[i]);
        }
    }

    /// The gradient on staggered grids, every phase, against central differences.
    #[test]
    fn staggered_gradient_matches_finite_differences((p, o, key, value) in staggered_case()) {
        let task = StaggeredTask::new(p, o).unwrap();
        let n = p.heads * p.stride;
        let (mut gk, mut gv) = (vec![0.0; n], vec![0.0; n]);
        stagger_loss_grad(&task, Phases::All, &key, &value, Some((&mut gk, &mut gv)));
        for i in 0..n {
            for which in 0..2 {
                let (mut kp, mut km, mut vp, mut vm) = (key.clone(), key.clone(), value.clone(), value.clone());
                if which == 0 { kp[i] += FD_STEP; km[i] -= FD_STEP; } else { vp[i] += FD_STEP; vm[i] -= FD_STEP; }
                let fd = (stagger_loss_grad(&task, Phases::All, &kp, &vp, None)
                    - stagger_loss_grad(&task, Phases::All, &km, &vm, None)) / (2.0 * FD_STEP);
                let an = if which == 0 { gk[i] } else { gv[i] };
                prop_assert!(rel_err(an, fd, 1e-3) < FD_REL, "entry {} ({}): analytic {} fd {}", i, which, an, fd);
            }
        }
    }

    /// Shifting every grid by the same amount rotates the circle: the loss over every phase is
    /// unchanged, and the phase profile rotates with it.
    #[test]
    fn a_common_shift_of_every_grid_rotates_the_profile((p, o, key, value) in staggered_case(), shift in 1usize..8) {
        let task = StaggeredTask::new(p, o.clone()).unwrap();
        let shifted = StaggeredTask::new(p, o.iter().map(|x| (x + shift) % p.stride).collect()).unwrap();
        let a = phase_profile(&task, &key, &value);
        let b = phase_profile(&shifted, &key, &value);
        for ph in 0..p.stride {
            let moved = b[(ph + shift) % p.stride];
            prop_assert!((a[ph] - moved).abs() < SAME_FORM, "phase {}: {} vs shifted {}", ph, a[ph], moved);
        }
    }
}

#[test]
fn bad_offsets_are_refused_naming_the_field() {
    let p = params(4, 2);
    for offsets in [vec![0], vec![0, 4], vec![0, 1, 2]] {
        let e = StaggeredTask::new(p, offsets.clone()).unwrap_err().to_string();
        assert!(e.contains("offsets"), "{offsets:?}: {e}");
    }
    let e = StaggeredTask::new(TaskParams { chunks: 1, ..p }, vec![0, 0]).unwrap_err().to_string();
    assert!(e.contains("chunks"), "{e}");
}

/// With fewer heads than phases, the best one-hot loss over every phase is the same on every
/// grid assignment, each head serves one phase, and `S - H` phases stay weak whatever the
/// stagger; on the unstaggered grid the boundary phase `S - 1` is always among them, on a
/// staggered grid it can be served. A multi-start search over all static gates finds nothing
/// below that one-hot optimum (Theorem 1's concentration survives head-specific grids).
#[test]
fn fewer_heads_than_phases_a_stagger_moves_the_weak_phases_but_removes_none() {
    for (s, h, staggers) in [
        (4, 2, vec![vec![0, 2], vec![0, 1], vec![1, 3]]),
        (4, 3, vec![vec![0, 1, 2], vec![0, 2, 2]]),
        (6, 2, vec![vec![0, 3]]),
    ] {
        let p = params(s, h);
        let flat = StaggeredTask::unstaggered(p).unwrap();
        let base = best_one_hot(&flat, Phases::All).unwrap();
        assert!(!base.served_phases.contains(&(s - 1)), "S={s} H={h}: the boundary phase is served unstaggered");
        let mut served = base.served_phases.clone();
        served.sort();
        served.dedup();
        assert_eq!(served.len(), h, "S={s} H={h}: heads serve distinct phases: {:?}", base.served_phases);
        for offsets in staggers {
            let task = StaggeredTask::new(p, offsets.clone()).unwrap();
            let best = best_one_hot(&task, Phases::All).unwrap();
            assert!(
                (best.loss - base.loss).abs() < 1e-12,
                "S={s} H={h} offsets {offsets:?}: one-hot optimum {} vs unstaggered {}",
                best.loss,
                base.loss
            );
            // The boundary phase can be served once head 0's grid does not end there: head 0 on
            // phase S - 1, every other head on the smallest free phase its grid can serve (head
            // i cannot serve (o_i - 1) mod S, the last position of its chunks). That
            // configuration is optimal too, and its weak phases are S - H others.
            if offsets[0] != 0 {
                let mut used = vec![s - 1];
                for &o in &offsets[1..] {
                    let free = (0..s).find(|ph| !used.contains(ph) && *ph != (o + s - 1) % s).unwrap();
                    used.push(free);
                }
                let keys: Vec<usize> = used.iter().zip(&offsets).map(|(&ph, &o)| (ph + s - o) % s).collect();
                let values: Vec<usize> = keys.iter().map(|k| k + 1).collect();
                let (key, value) = one_hot_gates(&task, &keys, &values);
                let f = stagger_loss_grad(&task, Phases::All, &key, &value, None);
                assert!(
                    (f - base.loss).abs() < 1e-12,
                    "S={s} H={h} {offsets:?}: serving the boundary costs {f} vs {}",
                    base.loss
                );
                let profile = phase_profile(&task, &key, &value);
                let strong = profile.iter().cloned().fold(f64::INFINITY, f64::min);
                let weak: Vec<usize> = (0..s).filter(|&ph| profile[ph] > strong + 1e-9).collect();
                assert_eq!(weak.len(), s - h, "S={s} H={h} {offsets:?}: weak phases {weak:?} of {profile:?}");
                assert!(!weak.contains(&(s - 1)), "S={s} H={h} {offsets:?}: the boundary phase stayed weak");
            }
            let found = search(&task, Phases::All, 9, 400, 7).unwrap();
            assert!(
                found.loss > base.loss - AT_OPTIMUM,
                "S={s} H={h} {offsets:?}: static gates at {} beat the one-hot optimum {}",
                found.loss,
                base.loss
            );
            println!(
                "S={s} H={h} offsets {offsets:?}: one-hot optimum {:.12} (unstaggered {:.12}); search best {:.12}, smallest gate peak {:.3}",
                best.loss, base.loss, found.loss, found.min_peak
            );
        }
    }
}

/// With as many heads as phases, distinct grid offsets let the heads serve every phase, which
/// no unstaggered configuration can (its boundary phase is never served): the stagger lowers
/// the loss, and the boundary phase is then as strong as any other.
#[test]
fn as_many_heads_as_phases_a_stagger_covers_every_phase_and_lowers_the_loss() {
    for s in [3, 4] {
        let p = params(s, s);
        let flat = best_one_hot(&StaggeredTask::unstaggered(p).unwrap(), Phases::All).unwrap();
        let task = StaggeredTask::new(p, (0..s).collect()).unwrap();
        let best = best_one_hot(&task, Phases::All).unwrap();
        let mut served = best.served_phases.clone();
        served.sort();
        assert_eq!(served, (0..s).collect::<Vec<_>>(), "S=H={s}: staggered optimum serves {:?}", best.served_phases);
        assert!(best.loss < flat.loss - 1e-3, "S=H={s}: staggered {} not below unstaggered {}", best.loss, flat.loss);
        let (key, value) = one_hot_gates(&task, &best.keys, &best.values);
        let profile = phase_profile(&task, &key, &value);
        let spread = profile.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
            - profile.iter().cloned().fold(f64::INFINITY, f64::min);
        assert!(spread < 1e-12, "S=H={s}: staggered optimum's phase profile is not flat: {profile:?}");
        println!("S=H={s}: staggered one-hot optimum {:.12}, unstaggered {:.12}, profile flat", best.loss, flat.loss);
    }
}
