//! The depth floor of every preset against its geometry (`theory/phase-lab.md` §9.2,
//! `phasekv::model::floor`): the formula `max(L, W_max) + val_len - 1` is held to the
//! enumeration of every record token, prediction position, layer and KV head
//! (`Grids::exposure`): nothing is exposed at the floor or beyond, something is one short of
//! it, and a model that leaves a span beside the query uncompressed moves the floor.

use crate::common::runner;
use phasekv::kernel::spec::preset_names;
use phasekv::model::floor::{depth_floor, Binding, Exposed, Grids};
use phasekv::model::ModelConfig;
use phasekv::task::TaskConfig;
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
