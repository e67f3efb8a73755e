//! Issue 27's refusals and honest rows, without Python: a reference that is not finite makes the
//! dump unusable (exit 2, naming the spec field), never "inf vs bound inf: PASS"; unknown metadata
//! keys and spec fields are refused by name; K2 says when its perturbed token lies in no closed
//! window; `gate_bias: false` dumps carry no bias tensors; DeepSeek-V4.1's presets pass on the
//! reference; quantized cache formats pass labelled right and fail labelled wrong.

use candle_core::DType;
use ndarray::Array3;
use phasekv::conformance::dump::{round_to, Dump};
use phasekv::conformance::known::reference_dump;
use phasekv::conformance::validate::{validate, Status};
use phasekv::kernel::spec::{RopeChannels, RopeScaling};
use phasekv::kernel::{KernelDims, KernelParams, KernelSpec};
use phasekv::numeric::formats::CacheFormat;
use std::path::PathBuf;
use std::process::Command;

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("phasekv-strict-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `phasekv kernel validate FILE`: (exit code, stdout, stderr).
fn cli_on(file: &std::path::Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_phasekv")).args(["kernel", "validate"]).arg(file).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn cli(d: &Dump, label: &str) -> (i32, String, String) {
    let dir = scratch(label);
    let file = dir.join("d.safetensors");
    d.save(&file).unwrap();
    let r = cli_on(&file);
    std::fs::remove_dir_all(&dir).unwrap();
    r
}

fn good(preset: &str, dims: KernelDims, tokens: usize, dtype: DType, perturb: usize) -> Dump {
    let spec = KernelSpec::preset(preset).unwrap();
    let params = KernelParams::random(&spec, dims, 5);
    let x = phasekv::kernel::random_input(2 * tokens, dims.d_model, 6)
        .into_shape_with_order((2, tokens, dims.d_model))
        .unwrap();
    let pre = phasekv::kernel::random_input(spec.geometry.stride(), dims.d_model, 7);
    reference_dump(&spec, dims, &params, &x, dtype, Some((&pre, perturb))).unwrap()
}

fn zero_outputs(d: &mut Dump) {
    for r in [Some(&mut d.main), d.shifted.as_mut(), d.perturbed.as_mut().map(|p| &mut p.0)].into_iter().flatten() {
        r.keys.fill(0.0);
        for a in [r.values.as_mut(), r.pooled_keys.as_mut(), r.pooled_values.as_mut()].into_iter().flatten() {
            a.fill(0.0);
        }
    }
}

#[test]
fn an_overflowing_explicit_frequency_makes_the_dump_unusable_not_a_pass() {
    // w4s4 with an explicit frequency of 1e308: the angle at position 4 is infinite, the
    // reference NaN. A kernel that returns zeros must not pass.
    let mut spec = KernelSpec::preset("w4s4").unwrap();
    let rope = spec.rope.as_mut().unwrap();
    rope.channels = RopeChannels::All;
    rope.scaling = Some(RopeScaling::Frequencies(vec![1e308, 1.0]));
    spec.name = "overflow".into();
    let dims = KernelDims::new(4, 4).unwrap();
    let params = KernelParams::random(&spec, dims, 1);
    let x = phasekv::kernel::random_input(12, 4, 2).into_shape_with_order((1, 12, 4)).unwrap();
    let mut d = reference_dump(&spec, dims, &params, &x, DType::F32, None).unwrap();
    zero_outputs(&mut d);
    let e = validate(&d).unwrap_err().to_string();
    assert!(e.contains("rope.scaling.frequencies") && e.contains("not finite"), "{e}");
    let (code, out, err) = cli(&d, "freq");
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("rope.scaling.frequencies") && !out.contains("verdict: PASS"), "{out}{err}");
}

#[test]
fn yarn_at_theta_one_is_refused_naming_the_field() {
    let mut d = good("dsv4-csa", KernelDims::new(6, 16).unwrap(), 13, DType::F32, 2);
    d.spec.rope.as_mut().unwrap().theta = 1.0;
    zero_outputs(&mut d);
    let (code, out, err) = cli(&d, "theta");
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("rope.theta") && err.contains("above 1"), "{err}");
}

#[test]
fn unknown_metadata_keys_and_spec_fields_are_refused_by_name() {
    let d = good("w8s4", KernelDims::new(4, 4).unwrap(), 13, DType::F32, 2);
    let dir = scratch("meta");
    let (mut meta, tensors) = d.to_parts();
    meta.insert("perturbed.tokn".into(), "2".into());
    let file = dir.join("a.safetensors");
    phasekv::conformance::dump::write_safetensors(&file, &meta, &tensors).unwrap();
    let (code, _, err) = cli_on(&file);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("perturbed.tokn"), "{err}");
    let (mut meta, tensors) = d.to_parts();
    meta.remove("preset");
    let spec = serde_json::to_string(&d.spec).unwrap().replace("\"rope\"", "\"rpoe\"");
    meta.insert("spec".into(), spec);
    let file = dir.join("b.safetensors");
    phasekv::conformance::dump::write_safetensors(&file, &meta, &tensors).unwrap();
    let (code, _, err) = cli_on(&file);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("rpoe"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn k2_on_a_token_in_no_closed_window_says_so_instead_of_passing() {
    // HCA at rate 8 on 13 tokens: one closed window (0..=7); token 10 lies in none.
    let d = good("dsv4-hca8", KernelDims::new(6, 16).unwrap(), 13, DType::F32, 10);
    let v = validate(&d).unwrap();
    let k2 = v.rows.iter().find(|r| r.id == "K2").unwrap();
    assert_eq!(k2.status, Status::NotCheckable, "{k2:?}");
    assert!(k2.note.contains("no closed window"), "{k2:?}");
    // Token 3 lies in window 0: K2 checks and passes.
    let d = good("dsv4-hca8", KernelDims::new(6, 16).unwrap(), 13, DType::F32, 3);
    let v = validate(&d).unwrap();
    assert_eq!(v.rows.iter().find(|r| r.id == "K2").unwrap().status, Status::Pass);
}

#[test]
fn dsv41_presets_pass_on_the_reference_and_refuse_a_bias_tensor() {
    for (preset, tokens) in [("dsv41-c1", 9), ("dsv41-c2", 13), ("dsv41-c4", 19), ("dsv41-c128", 259)] {
        for dtype in [DType::BF16, DType::F32] {
            let d = good(preset, KernelDims::new(8, 128).unwrap(), tokens, dtype, 0);
            let v = validate(&d).unwrap();
            assert!(v.passed, "{preset} {dtype:?}: {:#?}", v.rows);
        }
    }
    // A dump of dsv41-c4 that carries gate_k.b is refused: the spec has no bias.
    let d = good("dsv41-c4", KernelDims::new(8, 64).unwrap(), 9, DType::F32, 0);
    let dir = scratch("bias");
    let (meta, mut tensors) = d.to_parts();
    let z = tensors["gate_k.z"].clone();
    tensors.insert(
        "gate_k.b".into(),
        phasekv::conformance::dump::RawTensor { dtype: z.dtype, shape: vec![4, 64], data: vec![0.0; 256] },
    );
    let file = dir.join("b.safetensors");
    phasekv::conformance::dump::write_safetensors(&file, &meta, &tensors).unwrap();
    let (code, _, err) = cli_on(&file);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("gate_k.b"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The formats production engines store (`theory/dump-format.md`, "Quantized cache formats").
fn shipped() -> Vec<(&'static str, CacheFormat)> {
    [
        (
            "vLLM V4 FP8 NoPE + bf16 RoPE",
            r#"{"element": "e4m3", "scale": "pow2", "block": 64, "channels": "nope", "amax_min": 1e-4}"#,
        ),
        (
            "vLLM V4.1 MXFP8",
            r#"{"element": "e4m3", "scale": "pow2", "block": 32, "channels": "all", "amax_min": 1e-4}"#,
        ),
        ("OCP MXFP8", r#"{"element": "e4m3", "scale": "e8m0", "block": 32, "channels": "all"}"#),
        ("FP4 with e4m3 scales per 16", r#"{"element": "e2m1", "scale": "e4m3", "block": 16, "channels": "all"}"#),
        ("FP8 with f32 scales", r#"{"element": "e4m3", "scale": "f32", "block": 128, "channels": "all"}"#),
    ]
    .into_iter()
    .map(|(n, j)| (n, CacheFormat::from_json(j).unwrap()))
    .collect()
}

/// `d`'s keys encoded in `f` (the kernel's stored cache, decoded), in every run.
fn encode_keys(d: &mut Dump, f: &CacheFormat) {
    let r = d.spec.rope.as_ref().map_or(0, |rs| rs.rotated_channels(d.dims.d_head));
    let q = f.quantized_channels(d.dims.d_head, r);
    let enc = |a: &mut Array3<f64>| {
        for mut row in a.rows_mut() {
            let mut v = row.to_vec();
            f.round_entry(&mut v, q);
            row.assign(&ndarray::Array1::from(v));
        }
    };
    for run in [Some(&mut d.main), d.shifted.as_mut(), d.perturbed.as_mut().map(|p| &mut p.0)].into_iter().flatten() {
        enc(&mut run.keys);
    }
}

#[test]
fn quantized_records_pass_labelled_right_and_fail_labelled_wrong() {
    for (preset, tokens) in [("dsv4-csa", 67), ("dsv41-c2", 33), ("dsv4-hca", 259)] {
        for (label, f) in shipped() {
            let base = good(preset, KernelDims::new(64, 512).unwrap(), tokens, DType::BF16, 1);
            let mut d = base.clone();
            encode_keys(&mut d, &f);
            // Labelled with its format: passes, and the report names the format.
            d.cache_format = Some(f.clone());
            let v = validate(&d).unwrap();
            assert!(v.passed, "{preset} {label}: {:#?}", v.rows);
            assert_eq!(v.cache_format.as_deref(), Some(f.describe().as_str()));
            // Labelled plain bf16: a magnitude row fails, and the hint names the format for
            // the shipped ones.
            d.cache_format = None;
            let v = validate(&d).unwrap();
            let keys = v.rows.iter().find(|r| r.name.starts_with("tolerance: keys")).unwrap();
            assert_eq!(keys.status, Status::Fail, "{preset} {label} labelled bf16: {keys:?}");
            // A plain bf16 record labelled with the format: its values are off the grid.
            let mut plain = base.clone();
            plain.cache_format = Some(f.clone());
            let v = validate(&plain).unwrap();
            let grid = v.rows.iter().find(|r| r.name.starts_with("cache format: keys")).unwrap();
            assert_eq!(grid.status, Status::Fail, "{preset} {label}: bf16 labelled quantized {grid:?}");
            assert!(!v.passed);
        }
    }
}

#[test]
fn a_quantized_dump_round_trips_through_the_file_and_the_cli() {
    let (_, f) = shipped().swap_remove(3);
    let mut d = good("dsv41-c2", KernelDims::new(16, 128).unwrap(), 17, DType::BF16, 1);
    encode_keys(&mut d, &f);
    d.cache_format = Some(f.clone());
    let (code, out, err) = cli(&d, "fp4");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("cache format: e2m1 elements, e4m3 scales per 16"), "{out}");
    // Relabelled bf16 it fails (exit 1) with the hint naming the stored format.
    d.cache_format = None;
    d.main.keys.mapv_inplace(|v| round_to(DType::BF16, v));
    let (code, out, _) = cli(&d, "fp4-as-bf16");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("cache_format"), "{out}");
}

/// A dump of `claimed` whose outputs the reference computed under `computed` (f32).
fn mislabelled(claimed: &KernelSpec, computed: &KernelSpec, dims: KernelDims) -> Dump {
    let params = KernelParams::random(claimed, dims, 3);
    let x =
        phasekv::kernel::random_input(2 * 29, dims.d_model, 4).into_shape_with_order((2, 29, dims.d_model)).unwrap();
    phasekv::conformance::known::mutant_dump(claimed, computed, None, dims, &params, &x, DType::F32, None).unwrap()
}

#[test]
fn a_prev_cur_swap_with_every_channel_rotated_gets_no_rope_hint() {
    // DeepSeek-V4 CSA with RoPE on every channel: "only the rotated channels fail" would be
    // true of any failure, so it must not be said.
    let mut claimed = KernelSpec::preset("dsv4-csa").unwrap();
    claimed.rope.as_mut().unwrap().channels = RopeChannels::All;
    let mut swapped = claimed.clone();
    swapped.groups = phasekv::kernel::spec::ParamGroups::Map(vec![1, 1, 1, 1, 0, 0, 0, 0]);
    let v = validate(&mislabelled(&claimed, &swapped, KernelDims::new(6, 16).unwrap())).unwrap();
    assert!(!v.passed);
    assert!(v.hints.iter().all(|h| !h.contains("rotated channels")), "{:?}", v.hints);
}

#[test]
fn an_rms_norm_mismatch_at_bf16_size_gets_the_rms_norm_hint_alone() {
    // An eps of 2e-3 against 1e-6 changes every entry's scale by about a percent: the size of a
    // bf16 rounding, but the RMSNorm hint explains it and the dtype hint must not be added.
    let claimed = KernelSpec::preset("dsv4-csa").unwrap();
    let mut computed = claimed.clone();
    computed.rms_norm_eps = 2e-3;
    let v = validate(&mislabelled(&claimed, &computed, KernelDims::new(6, 32).unwrap())).unwrap();
    assert!(!v.passed, "{:#?}", v.rows);
    assert!(v.hints.iter().any(|h| h.contains("RMSNorm mismatch")), "{:?}", v.hints);
    assert!(v.hints.iter().all(|h| !h.contains("rounding level")), "{:?}", v.hints);
}
