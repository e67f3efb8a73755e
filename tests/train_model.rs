//! The decoder: causality for every kind of attention, gradients reach every parameter,
//! checkpoints round-trip, and configs are validated.

use candle_core::{Device, Tensor};
use phasekv::model::RunConfig;
use phasekv::model::{Batch, Model};
use proptest::prelude::*;

use crate::common;
use common::configs::tiny_config as tiny;

const PRESETS: &[&str] = &[
    "full",
    "w4s4",
    "w8s4",
    "w8s6",
    "w8s8",
    "w12s12",
    "w8s4-uniform",
    "w8s4-scalar",
    "w8s4-tied",
    "w8s4-norope",
    "dsv4-csa",
    "w8s8-stagger-layers",
];

fn tokens_of(cfg: &RunConfig, seed: u64) -> Vec<u32> {
    cfg.task.batch(seed, 0, 1)[0].tokens.clone()
}

proptest! {
    #![proptest_config(common::macro_config("train-model", 12, "proptest-regressions/train_model.txt"))]

    /// Changing a token at position `p` never changes the logits at any position before `p`
    /// (and does change something at or after `p`, so the test can fail).
    #[test]
    fn changing_a_future_token_never_changes_an_earlier_output(
        preset in prop::sample::select(PRESETS),
        seed in 0u64..1000,
        at in 1usize..21,
        new_token in 0u32..20,
    ) {
        let mut cfg = tiny(preset);
        cfg.train.seed = seed;
        let dev = Device::Cpu;
        let model = Model::new(&cfg, &dev).unwrap();
        let a = tokens_of(&cfg, seed);
        let mut b = a.clone();
        let t = a.len();
        prop_assume!(b[at] != new_token);
        b[at] = new_token;
        let batch = Tensor::from_vec([a, b].concat(), (2, t), &dev).unwrap();
        let logits = model.decoder.logits(&batch).unwrap().to_vec3::<f32>().unwrap();
        for (p, (row_a, row_b)) in logits[0].iter().zip(&logits[1]).enumerate().take(at) {
            for (x, y) in row_a.iter().zip(row_b) {
                prop_assert!((x - y).abs() <= 1e-6, "{preset}: position {p} changed ({x} vs {y}) after editing {at}");
            }
        }
        let later_changed = (at..t).any(|p| logits[0][p].iter().zip(&logits[1][p]).any(|(x, y)| (x - y).abs() > 1e-6));
        prop_assert!(later_changed, "{preset}: editing {at} changed nothing at all");
    }
}

#[test]
fn every_parameter_of_every_preset_receives_a_gradient() {
    let dev = Device::Cpu;
    for preset in PRESETS {
        let cfg = tiny(preset);
        let model = Model::new(&cfg, &dev).unwrap();
        let batch = Batch::new(&cfg.task.batch(0, 0, 2), &dev).unwrap();
        let r = model.decoder.batch_loss(&batch).unwrap();
        let grads = r.loss.backward().unwrap();
        let opt = phasekv::model::optim::AdamW::new(model.store.vars(), 0.9, 0.98, 0.0).unwrap();
        assert_eq!(opt.missing_grads(&grads), Vec::<String>::new(), "{preset}");
        // and not all zero
        assert!(opt.grad_norm(&grads).unwrap() > 0.0, "{preset}");
    }
}

/// Staggered KV heads (issue 30) with the same parameters: in layer 0 (the same input in every
/// model), head 0 of `w8s8-stagger-heads` compresses as head 0 of `w8s8` and head 1 as head 1 of
/// `w8s8@o4` (every head at offset 4), the captures padded with zeros to the longer head; a
/// future token never changes an earlier output, and every parameter gets a gradient.
#[test]
fn staggered_heads_compress_each_head_on_its_own_grid() {
    let dev = Device::Cpu;
    let cfg_of = |preset: &str| {
        let mut c = tiny(preset);
        (c.model.n_kv_head, c.model.n_head) = (2, 2);
        c
    };
    let models: Vec<Model> =
        ["w8s8-stagger-heads", "w8s8", "w8s8@o4"].iter().map(|p| Model::new(&cfg_of(p), &dev).unwrap()).collect();
    let cfg = cfg_of("w8s8-stagger-heads");
    let toks = tokens_of(&cfg, 7);
    let t = toks.len();
    let batch = Tensor::from_vec(toks.clone(), (1, t), &dev).unwrap();
    let probe = phasekv::model::decoder::Probe { capture: true, ..Default::default() };
    let keys: Vec<Vec<Vec<Vec<f32>>>> = models
        .iter()
        .map(|m| m.decoder.forward_probe(&batch, &probe).unwrap().captures[0].keys.get(0).unwrap().to_vec3().unwrap())
        .collect();
    let (n0, n4) = (keys[1][0].len(), keys[2][1].len());
    assert!(n4 == n0 + 1 || n4 == n0, "offset 4 has n(T + 4) entries: {n0} vs {n4}");
    assert_eq!(keys[0][0].len(), n0.max(n4), "captures padded to the longer head");
    assert_eq!(keys[0][1].len(), n0.max(n4), "captures padded to the longer head");
    let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + y.abs()));
    for (j, (a, b)) in keys[0][0].iter().zip(&keys[1][0]).take(n0).enumerate() {
        assert!(close(a, b), "head 0 entry {j}: {a:?} vs {b:?}");
    }
    for (j, (a, b)) in keys[0][1].iter().zip(&keys[2][1]).take(n4).enumerate() {
        assert!(close(a, b), "head 1 entry {j}: {a:?} vs {b:?}");
    }
    assert!(keys[0][0][n0..].iter().flatten().all(|&v| v == 0.0), "head 0's padding");
    // The grids differ (or the test shows nothing): head 1's first entry is the leading window.
    assert!(!close(&keys[0][1][0], &keys[1][1][0]), "head 1 sits on head 0's grid");
    // Causality across the per-head path, and gradients everywhere.
    let mut b = toks.clone();
    b[t - 3] = (b[t - 3] + 1) % cfg.task.vocab_size() as u32;
    let both = Tensor::from_vec([toks, b].concat(), (2, t), &dev).unwrap();
    let logits = models[0].decoder.logits(&both).unwrap().to_vec3::<f32>().unwrap();
    for (p, (a, b)) in logits[0].iter().zip(&logits[1]).take(t - 3).enumerate() {
        let same = a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-6);
        assert!(same, "editing token {} changed position {p}", t - 3);
    }
    let batch = Batch::new(&cfg.task.batch(0, 0, 2), &dev).unwrap();
    let grads = models[0].decoder.batch_loss(&batch).unwrap().loss.backward().unwrap();
    let opt = phasekv::model::optim::AdamW::new(models[0].store.vars(), 0.9, 0.98, 0.0).unwrap();
    assert_eq!(opt.missing_grads(&grads), Vec::<String>::new());
}

/// §8.9's offset knockout (`theory/phase-lab.md`), on every compressed preset whose heads share
/// a grid, including shared keys and values (`dsv4-csa`) and one KV head per layer: the slot
/// contributions sum to the pooled entries; replacing a slot's contribution by itself changes
/// nothing (exactly); replacing it by zero changes that layer's entries (the negative control:
/// a knock that did nothing would pass the first two); a knock on the wrong layer index or a
/// slot outside the window is one error naming the field.
#[test]
fn a_window_slot_knockout_replaces_exactly_that_slots_contribution() {
    use phasekv::kernel::tensor::SlotKnock;
    use phasekv::model::decoder::Probe;
    let dev = Device::Cpu;
    for preset in ["w8s4", "w8s4-kv1", "w4s4-tied", "w8s4-scalar", "dsv4-csa", "w8s4-stagger-layers"] {
        let (name, kv1) = match preset.strip_suffix("-kv1") {
            Some(p) => (p, true),
            None => (preset, false),
        };
        let mut cfg = tiny(name);
        // Two KV heads (one query head each) unless the arm has one KV head per layer.
        (cfg.model.n_kv_head, cfg.model.n_head) = if kv1 { (1, 2) } else { (2, 2) };
        let model = Model::new(&cfg, &dev).unwrap();
        let toks = tokens_of(&cfg, 3);
        let t = toks.len();
        let batch = Tensor::from_vec(toks, (1, t), &dev).unwrap();
        let cap =
            model.decoder.forward_probe(&batch, &Probe { capture: true, capture_slots: true, ..Probe::default() });
        let cap = cap.unwrap();
        let base = model.decoder.logits(&batch).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for (l, layer) in cap.captures.iter().enumerate() {
            let slots = layer.slots.as_ref().unwrap_or_else(|| panic!("{preset}: layer {l} has no slot capture"));
            let (w, _, n, hd) = slots.keys.dims4().unwrap();
            assert_eq!(w, model.decoder.spec().geometry.window(), "{preset}");
            // Sum over slots = the pooled keys before norm and RoPE.
            let summed = slots.keys.sum(0).unwrap().reshape((1, n, hd)).unwrap().to_vec3::<f32>().unwrap();
            assert!(n > 0 && summed[0].iter().flatten().any(|v| *v != 0.0), "{preset}: nothing pooled");
            let knock = |slot: usize, keys: Tensor, values: Tensor| Probe {
                knock_slot: Some((l, SlotKnock { slot, keys, values: Some(values) })),
                ..Probe::default()
            };
            let own = |u: &Tensor, i: usize| u.narrow(0, i, 1).unwrap().squeeze(0).unwrap();
            for i in [0, w - 1] {
                let same = knock(i, own(&slots.keys, i), own(&slots.values, i));
                let fwd = model.decoder.forward_probe(&batch, &same).unwrap();
                let idx = Tensor::arange(0u32, t as u32, &dev).unwrap();
                let got = model.decoder.logits_at(&fwd, &idx).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let worst = got.iter().zip(&base).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(
                    worst <= 1e-4,
                    "{preset} L{l} slot {i}: a knock by its own contribution moved logits by {worst}"
                );
                let zero = own(&slots.keys, i).zeros_like().unwrap();
                let fwd = model.decoder.forward_probe(&batch, &knock(i, zero.clone(), zero)).unwrap();
                let got = model.decoder.logits_at(&fwd, &idx).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let moved = got.iter().zip(&base).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(moved > 1e-4, "{preset} L{l} slot {i}: knocking the slot out changed nothing ({moved})");
            }
            let bad = knock(w, own(&slots.keys, 0), own(&slots.values, 0));
            let err = model.decoder.forward_probe(&batch, &bad).unwrap_err().to_string();
            assert!(err.contains("slot knockout") && err.contains(&format!("0..{w}")), "{preset}: {err}");
        }
        let wrong_layer = Probe {
            knock_slot: Some((
                cfg.model.n_layer,
                SlotKnock {
                    slot: 0,
                    keys: Tensor::zeros((1, 1, 1), candle_core::DType::F32, &dev).unwrap(),
                    values: None,
                },
            )),
            ..Probe::default()
        };
        let err = model.decoder.forward_probe(&batch, &wrong_layer).unwrap_err().to_string();
        assert!(
            err.contains("slot knockout") && err.contains(&format!("layer {}", cfg.model.n_layer)),
            "{preset}: {err}"
        );
    }
    // The full preset and a per-head staggered layer have no shared window slots.
    for preset in ["full", "w8s8-stagger-heads"] {
        let mut cfg = tiny(preset);
        (cfg.model.n_kv_head, cfg.model.n_head) = (2, 2);
        let model = Model::new(&cfg, &dev).unwrap();
        let toks = tokens_of(&cfg, 3);
        let batch = Tensor::from_vec(toks.clone(), (1, toks.len()), &dev).unwrap();
        let z = Tensor::zeros((1, 1, 1), candle_core::DType::F32, &dev).unwrap();
        let probe = Probe { knock_slot: Some((0, SlotKnock { slot: 0, keys: z, values: None })), ..Probe::default() };
        let err = model.decoder.forward_probe(&batch, &probe).unwrap_err().to_string();
        assert!(err.contains("share one grid"), "{preset}: {err}");
    }
}

#[test]
fn same_seed_same_weights_other_seed_other_weights() {
    let dev = Device::Cpu;
    let cfg = tiny("w8s4");
    let a = Model::new(&cfg, &dev).unwrap().tensors();
    let b = Model::new(&cfg, &dev).unwrap().tensors();
    let mut other = cfg.clone();
    other.train.seed = 1;
    let c = Model::new(&other, &dev).unwrap().tensors();
    let mut differs = false;
    for (k, t) in &a {
        let diff = (t - &b[k]).unwrap().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(diff, 0.0, "{k}");
        let d2 = (t - &c[k]).unwrap().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
        differs |= d2 > 0.0;
    }
    assert!(differs);
}

#[test]
fn checkpoint_round_trip_restores_identical_outputs() {
    let dev = Device::Cpu;
    let dir = std::env::temp_dir().join(format!("phasekv-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for preset in ["full", "w8s4", "dsv4-csa"] {
        let cfg = tiny(preset);
        let model = Model::new(&cfg, &dev).unwrap();
        let path = dir.join(format!("{preset}.safetensors"));
        model.save(&path).unwrap();
        let mut other_cfg = cfg.clone();
        other_cfg.train.seed = 99;
        let other = Model::new(&other_cfg, &dev).unwrap();
        let tokens = Tensor::from_vec(tokens_of(&cfg, 3), (1, cfg.task.seq_len()), &dev).unwrap();
        let before = other.decoder.logits(&tokens).unwrap();
        let want = model.decoder.logits(&tokens).unwrap();
        let gap = |x: &Tensor| (x - &want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(gap(&before) > 1e-3, "{preset}: models should differ before loading");
        other.load(&path).unwrap();
        assert_eq!(gap(&other.decoder.logits(&tokens).unwrap()), 0.0, "{preset}");
        // A checkpoint of another architecture is refused with a message, in both directions:
        // a compressed model's checkpoint holds every tensor of a `full` model plus the
        // compressor's, and must not load into `full` by ignoring the rest.
        let wrong = Model::new(&tiny(if preset == "full" { "w8s4" } else { "full" }), &dev).unwrap();
        let e = wrong.load(&path).unwrap_err().to_string();
        if preset == "full" {
            assert!(e.contains("missing tensor"), "{e}");
        } else {
            assert!(e.contains("does not have") && e.contains("another preset"), "{e}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_configs_are_one_line_errors_naming_the_field() {
    let mut c = tiny("w8s4");
    c.model.preset = "w8s9".into();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("stride") || e.contains("preset"), "{e}");
    let mut c = tiny("nope");
    c.model.preset = "bogus".into();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("preset") && !e.contains('\n'), "{e}");
    let mut c = tiny("w8s4");
    c.model.local_window = c.task.seq_len();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("model.local_window") && e.contains("shorter"), "{e}");
    let mut c = tiny("w8s4");
    c.train.steps = 0;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("train.steps"), "{e}");
    let mut c = tiny("w8s4");
    c.model.n_head = 3;
    c.model.n_kv_head = 2;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("model.n_head"), "{e}");
    let e = RunConfig::from_json(r#"{"model": {"presett": "full"}}"#).unwrap_err().to_string();
    assert!(e.contains("presett"), "{e}");
}

#[test]
fn the_curriculum_starts_easy_and_ends_on_the_full_task() {
    use phasekv::model::training_batch;
    let mut cfg = tiny("full");
    cfg.task.n_records = 6;
    cfg.task.n_queries = 6;
    cfg.train.curriculum_steps = 100;
    cfg.train.batch_size = 16;
    let first = training_batch(&cfg, 0);
    assert!(first.iter().all(|s| s.record_positions.len() == 2 && s.prefix == 0));
    let late = training_batch(&cfg, 100);
    assert!(late.iter().all(|s| s.record_positions.len() == 6));
    // After the curriculum the batch is the plain task stream of that step.
    assert_eq!(late, cfg.task.batch(cfg.train.seed, 100, 16));
    let mid = training_batch(&cfg, 50);
    assert!(mid.iter().any(|s| s.record_positions.len() > 2));
    assert!(mid.iter().all(|s| s.record_positions.len() <= 4));
}
