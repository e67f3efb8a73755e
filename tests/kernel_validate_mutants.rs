//! `phasekv kernel validate`'s failing side, with no Python involved: dumps written by the
//! reference with a planted bug (window shift, RoPE position, RoPE base, bias row, RMSNorm eps,
//! a lower compute precision, a systematic scale, NaN outputs, shared-K/V values that are not the
//! keys) must exit 1 with the right checks failing and the right diagnosis or hint, while the
//! reference itself passes. A validator wired to "pass" fails here.

use candle_core::DType;
use ndarray::{Array2, Array3};
use phasekv::conformance::dump::Dump;
use phasekv::conformance::known::mutant_dump;
use phasekv::conformance::mutants::Mutant;
use phasekv::conformance::validate::{validate, Status, Validation};
use phasekv::kernel::spec::{RopeScaling, ROPE_THETA};
use phasekv::kernel::{KernelDims, KernelParams, KernelSpec};
use std::path::PathBuf;
use std::process::Command;

fn input(b: usize, t: usize, d: usize, seed: u64) -> Array3<f64> {
    phasekv::kernel::random_input(b * t, d, seed).into_shape_with_order((b, t, d)).unwrap()
}

/// A dump of `claimed` whose outputs come from `computed` with `mutation`.
fn dump(claimed: &KernelSpec, computed: &KernelSpec, mutation: Option<Mutant>, dims: KernelDims, dtype: DType) -> Dump {
    let params = KernelParams::random(claimed, dims, 3);
    let x = input(2, 29, dims.d_model, 4);
    let pre: Array2<f64> = phasekv::kernel::random_input(claimed.geometry.stride(), dims.d_model, 5);
    mutant_dump(claimed, computed, mutation, dims, &params, &x, dtype, Some((&pre, 9))).unwrap()
}

fn failed(v: &Validation) -> Vec<String> {
    v.rows.iter().filter(|r| r.status == Status::Fail).map(|r| format!("{} {}", r.id, r.name)).collect()
}

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("phasekv-mutants-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Saves the dump and runs `phasekv kernel validate` on it: (exit code, stdout).
fn cli(d: &Dump, label: &str) -> (i32, String) {
    let dir = scratch(label);
    let file = dir.join("d.safetensors");
    d.save(&file).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_phasekv")).args(["kernel", "validate"]).arg(&file).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into())
}

fn preset(name: &str) -> KernelSpec {
    KernelSpec::preset(name).unwrap()
}

#[test]
fn the_reference_passes_in_every_dtype_with_no_hint() {
    for (name, dtype) in
        [("w8s4", DType::F32), ("dsv4-csa", DType::F64), ("dsv4-csa", DType::BF16), ("w4s4", DType::F16)]
    {
        let spec = preset(name);
        let v = validate(&dump(&spec, &spec, None, KernelDims::new(6, 32).unwrap(), dtype)).unwrap();
        assert!(v.passed, "{name} {dtype:?}: {:?}", failed(&v));
        assert!(v.hints.is_empty() && v.diagnosis.is_none(), "{name}: {:?} {:?}", v.hints, v.diagnosis);
    }
}

#[test]
fn a_window_shift_fails_with_the_displacement_diagnosis() {
    for name in ["w8s4", "dsv4-csa"] {
        let spec = preset(name);
        let d = dump(&spec, &spec, Some(Mutant::WindowStartOffByOne), KernelDims::new(6, 8).unwrap(), DType::F32);
        let v = validate(&d).unwrap();
        assert!(!v.passed);
        assert!(failed(&v).iter().any(|f| f.contains("pooled keys")), "{name}: {:?}", failed(&v));
        assert_eq!(v.best_delta, 1, "{name}: {:?}", v.phase_profile);
        let diag = v.diagnosis.clone().unwrap_or_default();
        assert!(diag.contains("1 token late"), "{name}: {diag}");
        let (code, out) = cli(&d, name);
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("diagnosis: the kernel matches the reference with windows starting 1 token late"),
            "{out}"
        );
    }
}

#[test]
fn a_bias_row_bug_fails_on_the_pooled_entries_and_gates() {
    let spec = preset("w8s4");
    let d = dump(&spec, &spec, Some(Mutant::BiasByWindow), KernelDims::new(6, 8).unwrap(), DType::F32);
    let v = validate(&d).unwrap();
    let f = failed(&v);
    assert!(
        f.iter().any(|f| f == "K13 tolerance: pooled keys") && f.iter().any(|f| f == "K13 tolerance: key gate"),
        "{f:?}"
    );
    assert_eq!(cli(&d, "bias").0, 1);
}

#[test]
fn a_rope_position_bug_fails_in_the_rotated_channels_only() {
    let claimed = preset("dsv4-csa");
    let mut computed = claimed.clone();
    computed.rope.as_mut().unwrap().position = phasekv::geometry::EntryPosition::Last;
    let d = dump(&claimed, &computed, None, KernelDims::new(6, 32).unwrap(), DType::F32);
    let v = validate(&d).unwrap();
    let f = failed(&v);
    assert!(f.iter().any(|f| f.starts_with("K13 tolerance: keys")), "{f:?}");
    assert!(!f.iter().any(|f| f.contains("tolerance: pooled")), "{f:?}");
    let hint = v.hints.join(" | ");
    assert!(hint.contains("only the rotated channels fail") && hint.contains("already at position 0"), "{hint}");
    let (code, out) = cli(&d, "rope-pos");
    assert_eq!(code, 1);
    assert!(out.contains("hint: pooled entries pass; only the rotated channels fail"), "{out}");
}

#[test]
fn a_rope_base_or_scaling_mismatch_gets_the_frequency_hint() {
    let claimed = preset("dsv4-csa");
    // The kernel as phasekv described DeepSeek-V4 before: base 10000, no YaRN.
    let mut theta = claimed.clone();
    let rope = theta.rope.as_mut().unwrap();
    rope.theta = ROPE_THETA;
    rope.scaling = None;
    // Base 160000 without YaRN: only the slow pairs differ.
    let mut no_yarn = claimed.clone();
    no_yarn.rope.as_mut().unwrap().scaling = None;
    for (computed, want) in [(theta, "every pair but the first differs"), (no_yarn, "the slow pairs")] {
        let d = dump(&claimed, &computed, None, KernelDims::new(6, 64).unwrap(), DType::F32);
        let v = validate(&d).unwrap();
        assert!(!v.passed);
        let hint = v.hints.join(" | ");
        assert!(hint.contains("error 0 at position 0 and growing with position: RoPE frequency"), "{hint}");
        assert!(hint.contains(want), "{hint}");
    }
}

#[test]
fn an_rms_norm_eps_mismatch_gets_the_rms_norm_hint() {
    let claimed = preset("dsv4-csa");
    let mut computed = claimed.clone();
    computed.rms_norm_eps = 0.05;
    let d = dump(&claimed, &computed, None, KernelDims::new(6, 32).unwrap(), DType::F64);
    let v = validate(&d).unwrap();
    assert!(!v.passed);
    assert!(v.hints.iter().any(|h| h.contains("RMSNorm mismatch")), "{:?} {:?}", v.hints, failed(&v));
}

#[test]
fn a_kernel_computing_in_bf16_under_an_f32_label_gets_the_dtype_hint() {
    let spec = preset("w8s4");
    let mut d = dump(&spec, &spec, None, KernelDims::new(6, 8).unwrap(), DType::BF16);
    d.dtype = DType::F32;
    let v = validate(&d).unwrap();
    assert!(!v.passed);
    assert!(v.hints.iter().any(|h| h.contains("bf16 rounding level")), "{:?}", v.hints);
}

#[test]
fn a_systematic_error_of_16_ulps_on_the_pooled_values_fails_in_f32() {
    let spec = preset("w8s4");
    let good = dump(&spec, &spec, None, KernelDims::new(6, 8).unwrap(), DType::F32);
    assert!(validate(&good).unwrap().passed);
    let u = f32::EPSILON as f64 / 2.0;
    // The kernel's value branch is off by a factor 1 + 16u in every run (w8s4's post-processing,
    // RoPE, is linear, so its values carry the same factor).
    let mut d = good.clone();
    let f32r = |v: f64| v as f32 as f64;
    let scale = |r: &mut phasekv::conformance::dump::Run| {
        for a in [r.pooled_values.as_mut(), r.values.as_mut()].into_iter().flatten() {
            a.mapv_inplace(|v| f32r(v * (1.0 + 16.0 * u)));
        }
    };
    scale(&mut d.main);
    scale(d.shifted.as_mut().unwrap());
    scale(&mut d.perturbed.as_mut().unwrap().0);
    let v = validate(&d).unwrap();
    // The scale row names it; the RMS half of the magnitude rule (`theory/dump-format.md`, "The
    // tolerance rule") sees 16 units of roundoff on every value too. Nothing else fails.
    let f = failed(&v);
    assert!(f.contains(&"K13 systematic scale: pooled values".to_string()), "{:#?}", v.rows);
    assert!(f.iter().all(|r| r.ends_with(": pooled values")), "{f:?}");
    let row = v.rows.iter().find(|r| r.name == "systematic scale: pooled values").unwrap();
    assert!((row.error / u - 16.0).abs() < 2.0, "{}", row.note);
}

#[test]
fn nan_in_the_outputs_fails_the_kernel_and_nan_in_the_inputs_is_unusable() {
    let spec = preset("w8s4");
    let mut d = dump(&spec, &spec, None, KernelDims::new(6, 8).unwrap(), DType::F32);
    d.main.keys[[1, 2, 3]] = f64::NAN;
    let v = validate(&d).unwrap();
    let row = v.rows.iter().find(|r| r.name == "finite outputs").unwrap();
    assert_eq!(row.status, Status::Fail);
    assert!(row.note.contains("keys[1, 2, 3] = NaN (sequence 1, window 2, channel 3)"), "{}", row.note);
    let (code, out) = cli(&d, "nan-out");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("finite outputs") && out.contains("window 2, channel 3"), "{out}");
    let mut bad = dump(&spec, &spec, None, KernelDims::new(6, 8).unwrap(), DType::F32);
    bad.main.input[[0, 0, 0]] = f64::INFINITY;
    let (code, _) = cli(&bad, "nan-in");
    assert_eq!(code, 2);
}

#[test]
fn shared_kv_values_that_are_not_the_keys_fail() {
    let spec = preset("dsv4-csa");
    let mut d = dump(&spec, &spec, None, KernelDims::new(6, 16).unwrap(), DType::F32);
    d.main.values = Some(d.main.keys.clone());
    assert!(validate(&d).unwrap().passed, "values equal to the keys are fine");
    let n = d.main.keys.shape()[1];
    d.main.values = Some(input(2, n, 16, 99));
    let v = validate(&d).unwrap();
    assert!(failed(&v).iter().any(|f| f.contains("values of a shared K/V kernel")), "{:?}", failed(&v));
    assert_eq!(cli(&d, "shared-values").0, 1);
}

#[test]
fn the_yarn_frequencies_are_those_of_the_released_config() {
    // Spot values of DeepSeek-V4's compressed-layer RoPE (64 channels, base 160000, YaRN x16
    // from 65536, beta 32/1): pair 0 keeps 1, pair 31 is divided by 16.
    let rope = preset("dsv4-hca").rope.unwrap();
    assert!(matches!(rope.scaling, Some(RopeScaling::Yarn { .. })));
    let f = rope.inv_frequencies(64);
    assert_eq!(f[0], 1.0);
    let plain31 = 160_000f64.powf(-62.0 / 64.0);
    assert!((f[31] - plain31 / 16.0).abs() < 1e-18, "{} {}", f[31], plain31 / 16.0);
}
