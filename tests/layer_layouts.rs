//! Layer layouts (issue 42): each layer of a layout model runs its own kernel. The checker
//! [`layers_run_their_kernels`] reads what each layer of a built model attends to and which
//! compressor parameters it has; its negative control is a build that resolves every layer to
//! layer 0's kernel (a model whose layers share one kernel by mistake), which it must refuse.
//! Both engines compute the same model (`train_fast` compares them on the layout presets), so
//! the candle model's layers are checked here.

use candle_core::Device;
use phasekv::analysis::eval::{self, Intervention};
use phasekv::kernel::KernelSpec;
use phasekv::model::decoder::Probe;
use phasekv::model::{training_batch, Batch, Model, RunConfig};
use phasekv::stop::Stop;

use crate::common;

/// A tiny config of a layout preset, at the narrowest head width it holds, on sequences long
/// enough for several entries of every layer (`19 + 45 = 64` tokens: 4 HCA16 entries).
fn config(preset: &str, n_layer: usize) -> RunConfig {
    let mut cfg = common::configs::tiny_config(preset);
    let spec = KernelSpec::preset(preset).unwrap();
    cfg.model.d_head = (8..).find(|&d| spec.validate_for(d).is_ok()).unwrap();
    cfg.model.n_layer = n_layer;
    cfg.task.max_prefix = 45;
    cfg.validate().unwrap();
    cfg
}

/// The shapes of layer `l`'s compressor parameters, by name after `layer{l}.attn.kernel.`.
fn kernel_shapes(model: &Model, l: usize) -> Vec<(String, Vec<usize>)> {
    let prefix = format!("layer{l}.attn.kernel.");
    let mut out: Vec<(String, Vec<usize>)> = model
        .store
        .vars()
        .into_iter()
        .filter_map(|(n, v)| n.strip_prefix(&prefix).map(|p| (p.to_string(), v.shape().dims().to_vec())))
        .collect();
    out.sort();
    out
}

/// `Ok` when every layer `l` of `model` (built for `cfg`) runs `spec.layer(l)`: it attends to
/// as many compressed entries as that kernel makes of the sequence, and its compressor has the
/// parameters (names and shapes) of a model built on that kernel alone. `Err` names the first
/// layer that does not.
fn layers_run_their_kernels(model: &Model, cfg: &RunConfig, spec: &KernelSpec) -> Result<(), String> {
    let batch = Batch::new(&training_batch(cfg, 0), &Device::Cpu).unwrap();
    let t = batch.tokens.dims2().unwrap().1;
    let fwd = model.decoder.forward_probe(&batch.tokens, &Probe { capture: true, ..Probe::default() }).unwrap();
    for l in 0..cfg.model.n_layer {
        let kernel = spec.layer(l);
        let entries = fwd.captures[l].keys.dims4().unwrap().2;
        let want = kernel.geometry.num_windows(t);
        if entries != want {
            return Err(format!("layer {l}: {entries} entries on {t} tokens, {} makes {want}", kernel.name));
        }
        let mut alone = cfg.clone();
        alone.model.set_kernel(kernel.clone());
        alone.model.n_layer = 1;
        let reference = Model::new(&alone, &Device::Cpu).unwrap();
        if kernel_shapes(model, l) != kernel_shapes(&reference, 0) {
            return Err(format!(
                "layer {l}: compressor parameters {:?}, {} has {:?}",
                kernel_shapes(model, l),
                kernel.name,
                kernel_shapes(&reference, 0)
            ));
        }
    }
    Ok(())
}

#[test]
fn each_layer_of_a_layout_model_runs_its_own_kernel_and_one_shared_kernel_is_caught() {
    for (preset, n_layer) in [("dsv4-layout", 2), ("dsv4-layout", 4), ("dsv41-layout", 2)] {
        let cfg = config(preset, n_layer);
        let spec = cfg.model.kernel().unwrap();
        let model = Model::new(&cfg, &Device::Cpu).unwrap();
        layers_run_their_kernels(&model, &cfg, &spec).unwrap_or_else(|e| panic!("{preset}: {e}"));
        // The layers differ in what the checker reads: entries (W=S=16 against W=8 S=4 or
        // W=S=4) and, for V4, the per-offset gate bias rows (16 against 8).
        let (t, l0, l1) = (64, spec.layer(0), spec.layer(1));
        assert_ne!(l0.geometry.num_windows(t), l1.geometry.num_windows(t), "{preset}");
        assert!(l1.geometry.num_windows(t) >= 4, "{preset}: several HCA entries per sequence");
        // Negative control: the build resolving every layer to layer 0's kernel (the config of
        // layer 0's kernel in every layer) is refused, naming layer 1.
        let resolve_all_to_layer_0 = |cfg: &RunConfig| {
            let mut c = cfg.clone();
            c.model.set_kernel(spec.layer(0).clone());
            c
        };
        let shared = resolve_all_to_layer_0(&cfg);
        let mutant = Model::new(&shared, &Device::Cpu).unwrap();
        let e =
            layers_run_their_kernels(&mutant, &cfg, &spec).expect_err(&format!("{preset}: one shared kernel passed"));
        assert!(e.starts_with("layer 1:"), "{preset}: {e}");
    }
    // The V4 layout's HCA layer has gate biases of its own width: 16 rows, not CSA's 8.
    let cfg = config("dsv4-layout", 2);
    let model = Model::new(&cfg, &Device::Cpu).unwrap();
    let rows = |l: usize| kernel_shapes(&model, l).into_iter().find(|(n, _)| n == "gate_k.b").unwrap().1[0];
    assert_eq!((rows(0), rows(1)), (8, 16));
}

/// Analyses indexed by window offset refuse a layout whose layers differ in window, in one line
/// naming both kernels; KV-head knockouts run on it.
#[test]
fn window_slot_knockouts_refuse_a_layout_of_two_windows() {
    use phasekv::analysis::protocol::{self, Protocol};
    let mut cfg = config("dsv4-layout", 2);
    cfg.task.residue_modulus = 8;
    let model = Model::new(&cfg, &Device::Cpu).unwrap();
    let prompts = protocol::generate(&cfg.task, Protocol::InSequence, 1, 0).unwrap();
    let knock = |i| eval::knockout_by(&model.decoder, &cfg.task, &prompts, 1, 0, i, &mut |_, _| {}, &Stop::never());
    let e = knock(Intervention::WindowSlot).unwrap_err().to_string();
    assert!(e.contains("dsv4-csa W=8") && e.contains("dsv4-hca16 W=16") && !e.contains('\n'), "{e}");
    let map = knock(Intervention::KvHead).unwrap();
    assert_eq!(map.rows.len(), cfg.model.n_layer * cfg.model.n_kv_head);
}

/// Knockout by layer (issue 42, "HCA layers contribute little"): with one KV head per layer (as
/// DeepSeek-V4), §8.9's rule gives a layout of two windows KV-head knockouts, and each row
/// mean-replaces one layer's whole compressed path: layer 1's row replaces HCA16 entries (fewer
/// than CSA's), and replacing them changes the model's output. Gate profiles run on the layout,
/// each layer on its own window.
#[test]
fn with_one_kv_head_each_layer_s_compressed_path_is_knocked_out_by_its_row() {
    use phasekv::analysis::protocol::{self, Protocol};
    use phasekv::model::decoder::Replacement;
    let mut cfg = config("dsv4-layout", 2);
    cfg.task.residue_modulus = 8;
    (cfg.model.n_kv_head, cfg.model.n_head) = (1, 2);
    let spec = cfg.model.kernel().unwrap();
    assert_eq!(Intervention::for_model(&cfg.model, &spec), Intervention::KvHead);
    assert_eq!(Intervention::for_model(&cfg.model, &KernelSpec::preset("dsv4-csa").unwrap()), Intervention::WindowSlot);
    let model = Model::new(&cfg, &Device::Cpu).unwrap();
    let prompts = protocol::generate(&cfg.task, Protocol::InSequence, 1, 0).unwrap();
    let map = eval::knockout_by(
        &model.decoder,
        &cfg.task,
        &prompts,
        1,
        0,
        Intervention::KvHead,
        &mut |_, _| {},
        &Stop::never(),
    )
    .unwrap();
    let rows: Vec<_> = map.rows.iter().map(|r| (r.layer, r.head, r.slot)).collect();
    assert_eq!(rows, [(0, 0, None), (1, 0, None)]);
    let (r0, r1) = (map.rows[0].replaced_entries.unwrap(), map.rows[1].replaced_entries.unwrap());
    assert!(r1 >= 1 && r1 < r0, "layer 1 replaces HCA16 entries: {r1} against CSA's {r0}");
    // Zeroing layer 1's entries reaches the output; a replacement with its own entries does not.
    let batch = Batch::new(&training_batch(&cfg, 0), &Device::Cpu).unwrap();
    let (b, t) = batch.tokens.dims2().unwrap();
    let clean = model.decoder.forward_probe(&batch.tokens, &Probe { capture: true, ..Probe::default() }).unwrap();
    let own = clean.captures[1].keys.squeeze(1).unwrap();
    let m = spec.layer(1).geometry.num_windows(t);
    assert_eq!(own.dims3().unwrap(), (b, m, cfg.model.d_head));
    let knocked = |keys: candle_core::Tensor| {
        let replace = Replacement { layer: 1, head: 0, values: keys.clone(), keys };
        let fwd =
            model.decoder.forward_probe(&batch.tokens, &Probe { replace: Some(replace), ..Probe::default() }).unwrap();
        (fwd.hidden - &clean.hidden).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
    };
    let own_values = clean.captures[1].values.squeeze(1).unwrap();
    let same = {
        let replace = Replacement { layer: 1, head: 0, keys: own.clone(), values: own_values };
        let fwd =
            model.decoder.forward_probe(&batch.tokens, &Probe { replace: Some(replace), ..Probe::default() }).unwrap();
        (fwd.hidden - &clean.hidden).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
    };
    assert_eq!(same, 0.0, "replacing layer 1's entries by themselves changes nothing");
    assert!(knocked(own.zeros_like().unwrap()) > 1e-3, "zeroed HCA entries must change the output");
    let samples = training_batch(&cfg, 0);
    let gates = phasekv::analysis::gates::gate_stats(&model.decoder, &samples, &Stop::never()).unwrap();
    for l in 0..2 {
        let g = gates.iter().find(|g| g.layer == l).unwrap();
        assert_eq!(g.profile.len(), spec.layer(l).geometry.window(), "layer {l}");
    }
}

/// The example plan `plans/examples/layouts.json` (both layouts at test size, one KV head per
/// layer, the V4.1 layout at d_head 64) parses and expands to one model unit per layout, each
/// arm's config valid; it is listed, not run (no phase statistic on layout models yet).
#[test]
fn the_example_layout_plan_expands_to_both_layouts() {
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/plans/examples/layouts.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(["reproduce", "--plan", plan, "--list-units"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let units: Vec<&str> = stdout.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(units, ["model:dsv4-layout-kv1-seed0", "model:dsv41-layout-kv1-seed0"], "{stdout}");
}
