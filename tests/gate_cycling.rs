//! Gate cycling (issue 42, item 1; `theory/gate-cycling.md`): a head's per-offset parameters
//! moved cyclically by `k` make the head compute, at every window, exactly what the uncycled
//! head computes on that window's slots rotated by `k` (slot `i` reading the token of slot
//! `(i + k) mod W`). `k = 0` and `k = W` are the identity; a map that moves only the content
//! weights `Z` (or only the biases) is caught by the same check.

use crate::common::strategies::{case_strategy, runner};
use ndarray::ArrayView1;
use phasekv::kernel::cycle::{cycle_params, source_offset};
use phasekv::kernel::reference::compress_window;
use phasekv::kernel::{KernelParams, KernelSpec};
use proptest::prelude::*;

/// The presets a cycle applies to (per-offset or shared groups, learned gates), at the widths
/// users train: vector and scalar gates, tied, without RoPE, RMSNorm and partial RoPE
/// (`dsv4-hca`, shared groups), W not a multiple of S.
const CYCLABLE: &[&str] = &["w8s4", "w8s6", "w4s4", "w12s12", "w8s4-scalar", "w8s4-tied", "w8s4-norope", "dsv4-hca8"];

/// The largest difference, over every window of the case, between the cycled head's output and
/// the hand-computed one (the uncycled head on the rotated slots): keys, values, pooled entries.
fn worst_gap(
    spec: &KernelSpec,
    case: &phasekv::conformance::harness::Case,
    cycled: &KernelParams<f64>,
    k: usize,
) -> f64 {
    let g = spec.geometry;
    let w = g.window();
    let t = case.x.nrows();
    let mut worst = 0.0f64;
    for j in 0..g.num_windows(t) {
        let rows: Vec<Option<ArrayView1<f64>>> = (0..w).map(|i| g.token_at(j, i).map(|r| case.x.row(r))).collect();
        let rotated: Vec<Option<ArrayView1<f64>>> = (0..w).map(|i| rows[(i + k) % w]).collect();
        let got = compress_window(spec, case.dims, cycled, j, &rows);
        let want = compress_window(spec, case.dims, &case.params, j, &rotated);
        for (a, b) in [
            (&got.key, &want.key),
            (&got.value, &want.value),
            (&got.pooled_k, &want.pooled_k),
            (&got.pooled_v, &want.pooled_v),
        ] {
            for (x, y) in a.iter().zip(b.iter()) {
                worst = worst.max((x - y).abs() / (1.0 + y.abs()));
            }
        }
    }
    worst
}

#[test]
fn a_cycled_head_computes_the_rotated_window_and_k_0_and_w_are_the_identity() {
    for name in CYCLABLE {
        let spec = KernelSpec::preset(name).unwrap();
        let w = spec.geometry.window();
        let mut run = runner(&format!("gate_cycling::{name}"), 24, None);
        run.run(&(case_strategy(&spec), 0..3 * w), |(case, k)| {
            for identity in [0, w, 2 * w] {
                prop_assert_eq!(&cycle_params(&spec, &case.params, identity).unwrap(), &case.params);
            }
            let cycled = cycle_params(&spec, &case.params, k).unwrap();
            let gap = worst_gap(&spec, &case, &cycled, k);
            prop_assert!(gap <= 1e-12, "{}: k {} gap {:e}", name, k, gap);
            Ok(())
        })
        .unwrap();
    }
}

/// The negative controls: moving only `Z`, only the biases, or everything by the wrong amount is
/// not the rotated window, so the check above rejects it on the cases users run (per-offset
/// presets, every k not a multiple of W).
#[test]
fn a_map_that_moves_only_part_of_the_head_is_rejected() {
    for name in ["w8s4", "w8s8", "w12s12", "w8s4-tied"] {
        let spec = KernelSpec::preset(name).unwrap();
        let w = spec.geometry.window();
        let mut run = runner(&format!("gate_cycling::wrong::{name}"), 16, None);
        run.run(&(case_strategy(&spec), 1..w), |(case, k)| {
            let right = cycle_params(&spec, &case.params, k).unwrap();
            let only_z = {
                let mut p = case.params.clone();
                for (g, r) in [(&mut p.gate_k, &right.gate_k), (&mut p.gate_v, &right.gate_v)] {
                    if let (Some(g), Some(r)) = (g.as_mut(), r.as_ref()) {
                        g.z = r.z.clone();
                    }
                }
                p
            };
            let only_b = {
                let mut p = case.params.clone();
                for (g, r) in [(&mut p.gate_k, &right.gate_k), (&mut p.gate_v, &right.gate_v)] {
                    if let (Some(g), Some(r)) = (g.as_mut(), r.as_ref()) {
                        g.b = r.b.clone();
                    }
                }
                p
            };
            let off_by_one = cycle_params(&spec, &case.params, k + 1).unwrap();
            // a case whose windows carry no information (all-zero tokens) cannot tell maps apart
            if spec.geometry.num_windows(case.x.nrows()) == 0 || case.x.iter().all(|v| v.abs() < 1e-9) {
                return Ok(());
            }
            for (label, wrong) in [("only Z", &only_z), ("only b", &only_b), ("k + 1", &off_by_one)] {
                let gap = worst_gap(&spec, &case, wrong, k);
                prop_assert!(gap > 1e-9, "{}: the map moving {} passed at k {} (gap {:e})", name, label, k, gap);
            }
            Ok(())
        })
        .unwrap();
    }
    // the source offsets: slot i takes offset (i - k) mod W
    assert_eq!(source_offset(0, 1, 8), 7);
}

#[test]
fn a_group_map_or_uniform_gates_are_refused_naming_the_field() {
    let p = |name: &str| {
        let spec = KernelSpec::preset(name).unwrap();
        let dims = phasekv::kernel::KernelDims::new(4, 8).unwrap();
        cycle_params(&spec, &KernelParams::random(&spec, dims, 1), 3).unwrap_err().to_string()
    };
    assert!(p("dsv4-csa").contains("groups"), "{}", p("dsv4-csa"));
    assert!(p("w8s4-uniform").contains("gate"), "{}", p("w8s4-uniform"));
}

/// The model-level intervention ([`phasekv::model::Model::cycle_head`]) moves exactly the
/// cycled head's per-offset pieces of one layer, by the same source offsets, and the inverse
/// cycle restores every parameter bit for bit; `cycle_profiles` leaves the model as given.
#[test]
fn a_model_s_head_is_cycled_in_place_alone_and_restored_exactly() {
    use phasekv::analysis::protocol::{self, Protocol};
    use phasekv::model::Model;
    use phasekv::stop::Stop;
    let mut cfg = crate::common::configs::tiny_config("w4s4");
    cfg.model.n_kv_head = 2;
    cfg.task.residue_modulus = 4;
    let model = Model::new(&cfg, &candle_core::Device::Cpu).unwrap();
    let snapshot = |m: &Model| -> Vec<(String, Vec<f32>)> {
        let mut v: Vec<(String, Vec<f32>)> = m
            .store
            .vars()
            .into_iter()
            .map(|(n, t)| (n, t.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let before = snapshot(&model);
    let (w, k, head) = (4usize, 3usize, 1usize);
    model.cycle_head(0, head, k).unwrap();
    let after = snapshot(&model);
    for ((name, old), (_, new)) in before.iter().zip(&after) {
        let moved = name.starts_with("layer0.attn.kernel.") && !name.ends_with("gamma");
        if !moved {
            assert_eq!(old, new, "{name} changed");
            continue;
        }
        // [W, ..., H * width]: head 1's columns take the rows of offset (i - k) mod W
        let cols = if name.ends_with(".b") { old.len() / w } else { old.len() / w / cfg.model.d_model };
        let inner = old.len() / w / cols;
        let width = cols / 2;
        for i in 0..w {
            let src = source_offset(i, k, w);
            for m in 0..inner {
                for c in 0..cols {
                    let want = if c / width == head {
                        old[(src * inner + m) * cols + c]
                    } else {
                        old[(i * inner + m) * cols + c]
                    };
                    assert_eq!(new[(i * inner + m) * cols + c], want, "{name} slot {i} col {c}");
                }
            }
        }
    }
    model.cycle_head(0, head, w - k).unwrap();
    assert_eq!(snapshot(&model), before, "the inverse cycle did not restore the model");

    let prompts = protocol::generate(&cfg.task, Protocol::Prefix, 2, 0).unwrap();
    let r = phasekv::analysis::cycling::cycle_profiles(
        &model,
        &prompts,
        cfg.task.residue_modulus,
        0,
        &[0, 1],
        &[1, 4, 2],
        &mut |_, _| {},
        &Stop::never(),
    )
    .unwrap();
    assert_eq!(r.rows.iter().map(|r| r.k).collect::<Vec<_>>(), [0, 1, 2], "k = W is the identity, not rerun");
    assert_eq!(
        r.rows[0].lag,
        if r.rows[0].phases.iter().all(|p| p.accuracy == r.rows[0].phases[0].accuracy) { None } else { Some(0) }
    );
    assert_eq!(snapshot(&model), before, "cycle_profiles left the model cycled");

    // bad input names its field, and nothing moves
    for (e, field) in [
        (model.cycle_head(2, 0, 1).unwrap_err(), "layer"),
        (model.cycle_head(0, 2, 1).unwrap_err(), "head"),
        (
            Model::new(&crate::common::configs::tiny_config("full"), &candle_core::Device::Cpu)
                .unwrap()
                .cycle_head(0, 0, 1)
                .unwrap_err(),
            "preset",
        ),
    ] {
        assert!(e.to_string().contains(field), "{e}");
    }
    assert_eq!(snapshot(&model), before);
}

/// On a layer layout, cycling reads the cycled layer's own window (issue 42): `dsv4-layout`'s
/// layer 1 is HCA16 (W 16), its representative CSA layer has W 8. With the representative's
/// window, `k = 8` was dropped from the request but evaluated, so the stored result never matched
/// its request and was recomputed on every call. Now the request keeps `k = 8`, drops
/// `k = 16` (the identity), and a repeated request is reused: a stop already requested would
/// fail any recomputation.
#[test]
fn cycling_a_layout_layer_reads_that_layer_s_window_and_reuses_its_result() {
    use phasekv::analysis::protocol::Protocol;
    use phasekv::model::train::{train, Outcome, Silent};
    use phasekv::stop::Stop;
    let mut cfg = crate::common::configs::tiny_config("dsv4-layout");
    let spec = KernelSpec::preset("dsv4-layout").unwrap();
    cfg.model.d_head = (8..).find(|&d| spec.validate_for(d).is_ok()).unwrap();
    cfg.task.max_prefix = 45;
    cfg.task.residue_modulus = 16; // a multiple of every layer's stride
    cfg.train.steps = 2;
    cfg.train.warmup_steps = 1;
    cfg.train.eval_every = 2;
    cfg.train.eval_samples = 4;
    cfg.train.checkpoint_every = 2;
    cfg.train.batch_size = 2;
    cfg.train.engine = phasekv::model::Engine::Fast;
    let dir = std::env::temp_dir().join(format!("phasekv-cycle-layout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let Outcome::Finished(_) = train(&cfg, &dir, serde_json::json!({}), &mut Silent).unwrap() else {
        panic!("the tiny run did not finish")
    };
    assert_eq!((phasekv::lab::run_window(&dir, 0).unwrap(), phasekv::lab::run_window(&dir, 1).unwrap()), (8, 16));
    let run = |stop: &Stop| {
        phasekv::lab::cycle_run(
            &dir,
            Protocol::Prefix,
            1,
            0,
            1,
            None,
            &[8, 16, 3],
            phasekv::lab::Scope::All,
            &mut |_, _| {},
            stop,
        )
    };
    let first = run(&Stop::never()).unwrap();
    assert_eq!(first.cycle.window, 16);
    assert_eq!(first.cycle.rows.iter().map(|r| r.k).collect::<Vec<_>>(), [0, 8, 3]);
    let again = run(&Stop::when(|| true)).expect("the same request is reused, not recomputed");
    assert_eq!(again, first);
    std::fs::remove_dir_all(&dir).unwrap();
}
