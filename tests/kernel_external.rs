//! `phasekv kernel check --external CMD`: the invariant harness (K1-K14, proptest-driven) run
//! live against a kernel in another process, through `python/serve_kernel.py`. The Triton kernel
//! passes under Triton's interpreter; its late-by-one twin fails with a shrunk counterexample
//! (one window, T = S + 1) that `kernel validate` replays. Processes that break the protocol
//! give one error line and exit status 2, without Python.
//!
//! The Python half needs python3 with torch, safetensors and triton; CI sets
//! `PHASEKV_REQUIRE_TRITON=1`, which turns a missing package into a failure, never a skip.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::python::{python_with, PyTool};

fn phasekv(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_phasekv")).args(args).output().expect("run phasekv");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn python_with_triton() -> bool {
    python_with(PyTool::Triton, "the external Triton kernels").is_some()
}

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("phasekv-external-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn serve(kernel: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/serve_kernel.py");
    format!("TRITON_INTERPRET=1 python3 {} --kernel {kernel}", script.display())
}

#[test]
fn triton_kernel_holds_every_invariant_live() {
    if !python_with_triton() {
        return;
    }
    let dir = scratch("pass");
    let failures = dir.join("failures");
    let (code, out, err) = phasekv(&[
        "kernel",
        "check",
        "--external",
        &serve("triton-dsv4-csa"),
        "--cases",
        "6",
        "--failures",
        failures.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("== external:triton-dsv4-csa (F32"), "{out}");
    assert!(out.contains("verdict: every invariant holds"), "{out}");
    // Every invariant applies to this kernel and ran on every case.
    for id in ["K1 ", "K2 ", "K3 ", "K4 ", "K5 ", "K6 ", "K7 ", "K8 ", "K9 ", "K10 ", "K11 ", "K12 ", "K13 "] {
        let row = out.lines().find(|l| l.starts_with(id)).unwrap_or_else(|| panic!("{id} missing:\n{out}"));
        assert!(row.contains(" PASS ") && row.split_whitespace().any(|w| w == "6"), "{row}\n{out}");
    }
    assert!(!failures.exists(), "nothing failed, so no counterexample is written");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn late_twin_fails_with_a_shrunk_counterexample_that_validate_replays() {
    if !python_with_triton() {
        return;
    }
    let dir = scratch("late");
    let failures = dir.join("failures");
    let (code, out, err) = phasekv(&[
        "kernel",
        "check",
        "--external",
        &serve("triton-dsv4-csa-late"),
        "--cases",
        "4",
        "--shrink",
        "16",
        "--failures",
        failures.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("verdict: FAILED"), "{out}");
    let row = out.lines().find(|l| l.starts_with("K2 ")).unwrap();
    assert!(row.contains("FAIL") && row.contains("outside window 0"), "{row}");
    // K2's counterexample shrinks to one window and one token past it: T = S + 1.
    assert!(out.contains("counterexample K2 (locality): T = 5,") && out.contains("1 window(s)"), "{out}");
    let dump = failures.join("K2.safetensors");
    assert!(out.contains(&format!("replay: phasekv kernel validate {}", dump.display())), "{out}");
    let (code, vout, verr) = phasekv(&["kernel", "validate", dump.to_str().unwrap()]);
    assert_eq!(code, 1, "{vout}\n{verr}");
    assert!(vout.contains("5 tokens") && vout.contains("verdict: FAIL"), "{vout}");
    assert!(vout.lines().any(|l| l.starts_with("K2 ") && l.contains("FAIL")), "{vout}");
    let k13 = failures.join("K13.safetensors");
    let (code, vout, _) = phasekv(&["kernel", "validate", k13.to_str().unwrap()]);
    assert_eq!(code, 1, "{vout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn processes_that_break_the_protocol_give_one_line_and_exit_2() {
    for (cmd, extra, needle) in [
        ("echo garbage", vec![], "does the process print to stdout?"),
        ("true", vec![], "at request 1 (hello)"),
        ("sleep 30", vec!["--reply-timeout", "1"], "no reply within 1 s"),
    ] {
        let mut args = vec!["kernel", "check", "--external", cmd];
        args.extend(extra);
        let start = std::time::Instant::now();
        let (code, out, err) = phasekv(&args);
        assert_eq!(code, 2, "{cmd}: {out}\n{err}");
        assert!(start.elapsed().as_secs() < 20, "{cmd} hung");
        assert_eq!(err.trim_end().lines().count(), 1, "{cmd}: not one line:\n{err}");
        assert!(err.starts_with("error: ") && err.contains(needle) && err.contains(cmd), "{cmd}: {err}");
    }
    let (code, _, err) = phasekv(&["kernel", "check", "--external", "true", "--reply-timeout", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("--reply-timeout") && err.contains("0.001..=86400"), "{err}");
}
