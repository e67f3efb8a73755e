//! Hugging Face's DeepSeek-V4 compressors, unmodified (transformers 5.23), dumped through
//! `python/hf_deepseek_v4.py` and validated against the presets `dsv4-csa` and `dsv4-hca`:
//! one-shot and through HF's streaming cache they pass (exit 0); the negative control that maps
//! prev and cur the wrong way round fails (exit 1). The same modules, served live
//! (`python/serve_kernel.py`), pass every invariant K1-K14 of `kernel check --external`, and the
//! swapped control fails with a shrunk counterexample.
//!
//! Needs python3 with torch, safetensors and transformers. CI installs them (`.ci/run`) and sets
//! `PHASEKV_REQUIRE_TRANSFORMERS=1`, which turns a missing package into a failure, never a skip.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::python::{python_with, PyTool};

fn python_with_transformers() -> Option<&'static str> {
    python_with(PyTool::Transformers, "the Hugging Face DeepSeek-V4 check")
}

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("phasekv-hf-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the adapter with `--validate` on the phasekv binary: (exit code, stdout + stderr).
fn adapter(py: &str, out: &Path, extra: &[&str]) -> (i32, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/hf_deepseek_v4.py");
    let o = Command::new(py)
        .arg(script)
        .arg("--out")
        .arg(out)
        .args(["--validate", env!("CARGO_BIN_EXE_phasekv")])
        .args(extra)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.code().unwrap_or(-1), text)
}

#[test]
fn hugging_face_dsv4_compressors_validate_against_the_released_presets() {
    let Some(py) = python_with_transformers() else { return };
    let dir = scratch("oneshot");
    let (code, out) = adapter(py, &dir, &[]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("verdict: PASS").count(), 2, "{out}");
    assert!(out.contains("dsv4-csa (W=8 S=4 pad_left") && out.contains("dsv4-hca (W=128 S=128"), "{out}");
    assert!(out.contains("theta=160000 yarn(x16, from 65536)"), "{out}");
    // K2 perturbs a token inside a window that closes, for HCA too (token 256 of 387: entry 2).
    assert!(out.contains("token 8: entries [2, 3] change") && out.contains("token 256: entries [2] change"), "{out}");
    // The default lengths (267 CSA, 387 HCA tokens) reach past token 256 in the main run.
    assert!(out.contains("2x267x64") && out.contains("2x387x64"), "{out}");
    assert!(!out.contains(crate::common::python::COVERAGE_WARNING), "{out}");
    for id in ["K1 ", "K2 ", "K3 ", "K5 "] {
        assert_eq!(out.lines().filter(|l| l.starts_with(id) && l.contains("PASS")).count(), 2, "{id}:\n{out}");
    }

    let dir = scratch("streaming");
    let (code, out) = adapter(py, &dir, &["--chunk", "5"]);
    assert_eq!(code, 0, "through HF's streaming cache:\n{out}");
    assert!(out.contains("streaming chunk 5"), "{out}");

    let dir = scratch("swapped");
    let (code, out) = adapter(py, &dir, &["--swap", "--kind", "csa"]);
    assert_eq!(code, 1, "prev and cur swapped must fail:\n{out}");
    assert!(out.contains("verdict: FAIL") && out.contains("K13 tolerance: pooled keys"), "{out}");
    for label in ["oneshot", "streaming", "swapped"] {
        std::fs::remove_dir_all(std::env::temp_dir().join(format!("phasekv-hf-{}-{label}", std::process::id())))
            .unwrap();
    }
}

#[test]
fn hugging_face_dsv4_compressors_pass_the_live_harness_and_the_swap_fails_it() {
    let Some(py) = python_with_transformers() else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let server = root.join("python/serve_kernel.py");
    let dir = scratch("external");
    let check = |kernel: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_phasekv"))
            .args(["kernel", "check", "--cases", "16", "--external"])
            .arg(format!("{py} {} --kernel {kernel}", server.display()))
            .arg("--failures")
            .arg(dir.join(kernel))
            .output()
            .unwrap();
        (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).to_string())
    };
    for kernel in ["hf-dsv4-csa", "hf-dsv4-hca8"] {
        let (code, out) = check(kernel);
        assert_eq!(code, 0, "{kernel}:\n{out}");
        let passing = out.lines().filter(|l| l.starts_with('K') && l.contains(" PASS ")).count();
        assert_eq!(passing, 13, "{kernel}: every invariant runs and holds:\n{out}");
    }
    let (code, out) = check("hf-dsv4-csa-swapped");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("K13  reference agreement  FAIL") && out.contains("counterexample K13"), "{out}");
    assert!(dir.join("hf-dsv4-csa-swapped/K13.safetensors").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 41, item 5: at production width (`d_h = 512`, 64 rotated channels) HF's CSA (its
/// indexer now as wide as the shipped ratio, 128 of 512) and HCA pass in f32 at 259 and 4 096
/// tokens, though they form RoPE angles in f32 (the angle term of `theory/dump-format.md`, "RoPE
/// angles in the accumulator dtype"), and in bf16 at 259 (the adapter keeps HF's frequency
/// buffers in f32, as `from_pretrained` does). One sequence at 4 096: validate's work limit.
#[test]
fn hugging_face_dsv4_compressors_pass_at_production_width() {
    let Some(py) = python_with_transformers() else { return };
    for (tokens, batch, dtype) in [("259", "2", "f32"), ("259", "2", "bf16"), ("4096", "1", "f32")] {
        let label = format!("dh512-{tokens}-{dtype}");
        let dir = scratch(&label);
        let args = ["--d-head", "512", "--d-model", "256", "--tokens", tokens, "--batch", batch, "--dtype", dtype];
        let (code, out) = adapter(py, &dir, &args);
        assert_eq!(code, 0, "{label}:\n{out}");
        assert_eq!(out.matches("verdict: PASS").count(), 2, "{label}:\n{out}");
        if dtype == "f32" {
            assert!(out.contains("RoPE angle's rounding"), "{label}: {out}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Issue 41, item 3: HF's compressors with `--position-offset 65536` (the adapter adds `p0` at
/// the compressor's own rotary call; `theory/dump-format.md`, "Position offset") pass in f32 at
/// `d_h = 512`, forming their RoPE angles in f32 at positions past YaRN's original context, with
/// no YaRN warning; the same HF modules with YaRN factor 32 (a config of the wrong factor,
/// labelled as the released preset) fail there, CSA and HCA.
#[test]
fn hugging_face_dsv4_compressors_at_a_position_offset_and_a_wrong_yarn_factor() {
    let Some(py) = python_with_transformers() else { return };
    let base = ["--d-head", "512", "--d-model", "256", "--tokens", "259", "--batch", "1", "--position-offset", "65536"];
    let dir = scratch("offset");
    let (code, out) = adapter(py, &dir, &base);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("verdict: PASS").count(), 2, "{out}");
    assert!(!out.contains("YaRN's original context"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
    let dir = scratch("offset-factor32");
    let (code, out) = adapter(py, &dir, &[&base[..], &["--yarn-factor", "32"]].concat());
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.matches("verdict: FAIL").count(), 2, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}
