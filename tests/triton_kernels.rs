//! The Triton gated compressor (`python/triton_kernels.py`) under Triton's interpreter
//! (`TRITON_INTERPRET=1`, CPU tensors), dumped through `phasekv_dump.dump` and validated:
//! the `w8s4` and `dsv4-csa` kernels pass (exit 0), their late-by-one twins fail (exit 1) with
//! the displacement named.
//!
//! Needs python3 with torch, safetensors and triton 3.9. CI installs them (`.ci/run`) and sets
//! `PHASEKV_REQUIRE_TRITON=1`, which turns a missing package into a failure, never a skip.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::python::{python_with, PyTool};

fn python_with_triton() -> Option<&'static str> {
    python_with(PyTool::Triton, "the Triton kernels")
}

fn phasekv(args: &[&str]) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_phasekv")).args(args).output().expect("run phasekv");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.code().unwrap_or(-1), text)
}

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("phasekv-triton-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn triton_kernels_pass_validation_and_their_late_twins_fail_with_the_shift_named() {
    let Some(py) = python_with_triton() else { return };
    let dir = scratch("dumps");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/triton_kernels.py");
    // One python start (importing torch and triton takes seconds); tiny shapes, since the
    // interpreter runs every program instance in Python.
    let o = Command::new(py)
        .arg(&script)
        .args(["--kernel", "triton-w8s4,triton-dsv4-csa,triton-w8s4-late,triton-dsv4-csa-late"])
        .arg("--out")
        .arg(&dir)
        .args(["--tokens", "18", "--batch", "2", "--d-model", "6", "--d-head", "8"])
        .env("TRITON_INTERPRET", "1")
        .output()
        .unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{log}");
    assert_eq!(log.matches("triton 3.9.0 interpreter on cpu").count(), 4, "{log}");
    let path = |k: &str| dir.join(format!("{k}.safetensors")).to_str().unwrap().to_string();

    for (kernel, preset) in [("triton-w8s4", "w8s4"), ("triton-dsv4-csa", "dsv4-csa")] {
        let (code, out) = phasekv(&["kernel", "validate", &path(kernel)]);
        assert_eq!(code, 0, "{kernel}:\n{out}");
        assert!(out.contains(&format!(": {preset} (W=8 S=4")), "{kernel}:\n{out}");
        for id in ["K1 ", "K2 ", "K3 ", "K5 ", "K13 "] {
            assert!(out.lines().any(|l| l.starts_with(id) && l.contains("PASS")), "{kernel} {id}:\n{out}");
            assert!(!out.lines().any(|l| l.starts_with(id) && l.contains("FAIL")), "{kernel} {id}:\n{out}");
        }
        assert!(out.lines().any(|l| l.trim_start().starts_with("0 ") && l.ends_with("<- best")), "{out}");
    }
    for kernel in ["triton-w8s4-late", "triton-dsv4-csa-late"] {
        let (code, out) = phasekv(&["kernel", "validate", &path(kernel)]);
        assert_eq!(code, 1, "{kernel}:\n{out}");
        assert!(out.contains("verdict: FAIL"), "{kernel}:\n{out}");
        assert!(
            out.contains("diagnosis: the kernel matches the reference with windows starting 1 token late"),
            "{out}"
        );
        assert!(out.lines().any(|l| l.trim_start().starts_with("1 ") && l.ends_with("<- best")), "{out}");
        assert!(out.lines().any(|l| l.starts_with("K2 ") && l.contains("FAIL")), "{kernel}:\n{out}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
