//! SGLang 0.5.23's DeepSeek-V4.1 compressor (`DeepseekV41Compressor`, the torch path) and its
//! FP4 cache-entry step, unmodified, read from the downloaded wheel
//! (`python/sglang_deepseek_v41.py`) and validated against `dsv41-c1` / `dsv41-c2` in their real
//! cache format (FP4 e2m1 with e4m3 scales per 16): both pass; labelled with the wrong ratio, or
//! as plain bf16, the same kernel fails.
//!
//! Needs python3 with torch, numpy, safetensors and the SGLang wheel in `$PHASEKV_WHEELS` (else
//! `target/wheels`). CI downloads it (`.ci/run`) and sets `PHASEKV_REQUIRE_SGLANG=1`.

use crate::common::python::{adapter_scratch, python_with, run_adapter, PyTool};

const SCRIPT: &str = "sglang_deepseek_v41.py";

fn python_with_sglang() -> Option<&'static str> {
    python_with(PyTool::Sglang, "the SGLang DeepSeek-V4.1 adapter")
}

#[test]
fn sglang_v41_compressor_passes_ratios_1_and_2_in_its_fp4_format() {
    let Some(py) = python_with_sglang() else { return };
    let dir = adapter_scratch("adapter-sglang-pass");
    for ratio in ["1", "2"] {
        let out = dir.join(format!("c{ratio}.safetensors"));
        let (code, text) = run_adapter(py, SCRIPT, &out, &["--ratio", ratio], false);
        assert_eq!(code, 0, "ratio {ratio}:\n{text}");
        assert!(text.contains(&format!("as dsv41-c{ratio}")) && text.contains("verdict: PASS"), "{text}");
        assert!(text.contains("cache format: ") && text.contains("e2m1"), "the format checked is named:\n{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sglang_v41_negative_controls_fail() {
    let Some(py) = python_with_sglang() else { return };
    let dir = adapter_scratch("adapter-sglang-fail");
    for (label, extra) in [
        ("wrong ratio", &["--ratio", "1", "--wrong-ratio"][..]),
        ("plain bf16", &["--ratio", "2", "--label-plain"][..]),
    ] {
        let out = dir.join(format!("{}.safetensors", label.replace(' ', "-")));
        let (code, text) = run_adapter(py, SCRIPT, &out, extra, false);
        assert_eq!(code, 1, "{label} must fail:\n{text}");
        assert!(text.contains("verdict: FAIL"), "{label}:\n{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
