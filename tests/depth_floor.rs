//! The depth floor of every preset against its geometry (`theory/phase-lab.md` §9.2,
//! `phasekv::model::floor`): the formula `max(L, W_max) + val_len - 1` is held to the
//! enumeration of every record token, prediction position, layer and KV head
//! (`Grids::exposure`): nothing is exposed at the floor or beyond, something is one short of
//! it, and a model that leaves a span beside the query uncompressed moves the floor.

use crate::common::runner;
use phasekv::analysis::protocol::{generate, generate_in, Depths, Prompt, Protocol};
use phasekv::kernel::spec::preset_names;
use phasekv::model::floor::{depth_floor, Binding, Exposed, Grids};
use phasekv::model::ModelConfig;
use phasekv::task::{layout, TaskConfig};
use proptest::prelude::*;

fn model(preset: &str, local: usize) -> ModelConfig {
    ModelConfig { preset: preset.into(), local_window: local, ..ModelConfig::default() }
}

fn task(key_len: usize, val_len: usize) -> TaskConfig {
    TaskConfig { key_len, val_len, ..TaskConfig::default() }
}

/// The largest window of any layer of `m`.
fn widest(m: &ModelConfig) -> usize {
    let spec = m.kernel().unwrap();
    (0..m.n_layer).map(|l| spec.layer(l).geometry.window()).max().unwrap()
}

/// Sources `0..3 W` reach every phase of every grid; depths from the floor to two windows past it.
fn first_exposure_from(g: &Grids, w: usize, depths: std::ops::Range<usize>) -> Option<(usize, usize, String)> {
    (0..3 * w).find_map(|s| depths.clone().find_map(|d| g.exposure(s, d).map(|e| (s, d, e.to_string()))))
}

#[test]
fn every_preset_floor_is_exact_for_drawn_local_windows_and_record_shapes() {
    let mut presets = preset_names();
    presets.retain(|p| p != "full");
    let strategy = (proptest::sample::select(presets), 1usize..=20, 1usize..=2, 1usize..=3);
    let mut r = runner("depth-floor-presets", 64, Some("proptest-regressions/depth_floor.txt"));
    r.run(&strategy, |(preset, local, key_len, val_len)| {
        let (m, t) = (model(&preset, local), task(key_len, val_len));
        let floor = depth_floor(&m, &t).unwrap();
        let w = widest(&m);
        prop_assert_eq!(floor.depth, local.max(w) + val_len - 1);
        let g = Grids::new(&m, &t).unwrap();
        let beyond = first_exposure_from(&g, w, floor.depth..floor.depth + 2 * w);
        prop_assert!(beyond.is_none(), "{preset} L {local}: {floor} yet {beyond:?}");
        let short = first_exposure_from(&g, w, floor.depth - 1..floor.depth);
        prop_assert!(short.is_some(), "{preset} L {local}: nothing exposed one short of {floor}");
        Ok(())
    })
    .unwrap();
}

#[test]
fn every_listed_preset_and_layout_at_the_run_shape() {
    // The committed runs' shape: local window 4, one-token keys and values.
    let t = task(1, 1);
    for preset in preset_names().iter().map(String::as_str).chain(["dsv4-layout", "dsv41-layout"]) {
        let m = model(preset, 4);
        let floor = depth_floor(&m, &t).unwrap();
        let g = Grids::new(&m, &t).unwrap();
        if preset == "full" {
            assert_eq!((floor.depth, floor.binding), (0, Binding::Uncompressed));
            assert_eq!(g.exposure(0, 2), None, "full attention compresses nothing");
            continue;
        }
        let w = widest(&m);
        assert_eq!(floor.depth, w.max(4), "{preset}");
        assert_eq!(first_exposure_from(&g, w, floor.depth..floor.depth + w), None, "{preset}");
        assert!(first_exposure_from(&g, w, floor.depth - 1..floor.depth).is_some(), "{preset}");
    }
    // A layout's floor is its widest layer's: dsv4-csa (W 8) with dsv4-hca16 (W 16) on odd layers.
    let f = depth_floor(&model("dsv4-layout", 4), &t).unwrap();
    assert_eq!((f.depth, f.binding), (16, Binding::Window { layer: 1, window: 16 }));
}

#[test]
fn a_span_left_uncompressed_beside_the_query_is_caught() {
    // Negative control: w8s4 with a raw local window of 24 tokens. A floor read from the
    // compression window alone (W + val_len - 1 = 8) leaves records raw in that span; the
    // enumeration must find them, and the floor must move to the span.
    let (m, t) = (model("w8s4", 24), task(1, 1));
    let g = Grids::new(&m, &t).unwrap();
    let window_only = 8;
    let e = (0..24).find_map(|s| g.exposure(s, window_only)).expect("a raw record at the window-only floor");
    assert!(matches!(e.how, Exposed::Raw { local: 24 }), "{e}");
    let floor = depth_floor(&m, &t).unwrap();
    assert_eq!((floor.depth, floor.binding), (24, Binding::LocalWindow { local: 24 }));
    assert_eq!(first_exposure_from(&g, 8, 24..40), None);
}

#[test]
fn a_floor_read_from_inclusive_visibility_is_caught() {
    // Negative control: under the inclusive convention an entry is visible at its own last
    // slot, which suggests a floor of W - 1. That entry summarises the query's own token with
    // the record, so the enumeration must call it open, for every stride of the paper arms.
    for preset in ["w8s4", "w8s6", "w8s8", "w12s12", "dsv4-csa"] {
        let (m, t) = (model(preset, 4), task(1, 1));
        let g = Grids::new(&m, &t).unwrap();
        let w = widest(&m);
        let e = (0..3 * w).find_map(|s| g.exposure(s, w - 1)).expect(preset);
        assert!(matches!(e.how, Exposed::Open { last_end, .. } if last_end == e.predicted_at), "{preset}: {e}");
    }
}

/// The v2 run's task (`plans/full.json`'s `run.task`), on which §9.3 tries T1 first.
fn v2_task() -> TaskConfig {
    serde_json::from_value(serde_json::json!({
        "query_placement": "after_records", "max_tail": 24, "scored_query": "first", "max_gap": 0
    }))
    .unwrap()
}

fn scored_depths(task: &TaskConfig, prompts: &[Prompt]) -> Vec<usize> {
    let mut d: Vec<usize> = prompts.iter().map(|p| layout::depth(&p.sample.queries[p.scored])).collect();
    debug_assert!(prompts.iter().all(|p| layout::scored(task, &p.sample) == Some(p.scored)));
    d.sort_unstable();
    d
}

#[test]
fn scored_families_lie_beyond_the_run_floor_with_equal_depth_distributions() {
    let task = v2_task();
    // The run floor of §9.2: the V4 layout arm's (16), beyond every other arm's.
    let floor = ["w8s4", "w8s8", "w12s12", "dsv4-csa", "dsv4-layout"]
        .iter()
        .map(|p| depth_floor(&model(p, 4), &task).unwrap().depth)
        .max()
        .unwrap();
    assert_eq!(floor, 16);
    for protocol in Protocol::ALL {
        let all = generate(&task, protocol, 12, 0).unwrap();
        assert_eq!(generate_in(&task, protocol, 12, 0, Depths::ALL).unwrap(), all, "the full band redraws nothing");
        assert!(scored_depths(&task, &all)[0] < floor, "the plain families reach in front of the floor");
        let scored = generate_in(&task, protocol, 12, 0, Depths::beyond(floor)).unwrap();
        assert_eq!(scored.len(), 12 * task.residue_modulus);
        let depths = scored_depths(&task, &scored);
        assert!(depths[0] >= floor, "{protocol:?}: {depths:?}");
        assert_eq!(layout::max_depth_cdf_gap(&task, &scored.iter().map(|p| p.sample.clone()).collect::<Vec<_>>()), 0.0);
        // No scored record reaches any arm's query except through closed entries.
        for preset in ["w8s4", "w8s8", "w12s12", "dsv4-csa", "dsv4-layout", "w8s8-stagger-heads"] {
            let g = Grids::new(&model(preset, 4), &task).unwrap();
            for p in &scored {
                let q = &p.sample.queries[p.scored];
                assert_eq!(g.exposure(q.source_key_pos, layout::depth(q)), None, "{preset} prompt {}", p.id);
            }
        }
        // The near-query families of w8s4 (floor 8) lie in front of its floor.
        let near = generate_in(&task, protocol, 4, 0, Depths::before(8)).unwrap();
        assert!(*scored_depths(&task, &near).last().unwrap() < 8);
    }
}

#[test]
fn a_depth_band_the_task_cannot_produce_is_one_error_not_a_hang() {
    let task = v2_task();
    let t0 = std::time::Instant::now();
    let e = generate_in(&task, Protocol::Prefix, 2, 0, Depths::beyond(10_000)).unwrap_err().to_string();
    assert!(e.contains("depths") && e.contains("at least 10000") && e.contains("draws"), "{e}");
    assert!(t0.elapsed().as_secs() < 30, "{:?}", t0.elapsed());
    let e = generate_in(&task, Protocol::Prefix, 2, 0, Depths { min: 9, max: 8 }).unwrap_err().to_string();
    assert!(e.contains("empty"), "{e}");
    let end = TaskConfig::default();
    let e = generate_in(&end, Protocol::Prefix, 2, 0, Depths::beyond(4)).unwrap_err().to_string();
    assert!(e.contains("query_placement"), "{e}");
}
