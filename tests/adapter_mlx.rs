//! mlx-lm 0.32.2's DeepSeek-V4.1 compressor, unmodified, under MLX's CPU backend
//! (`python/mlx_deepseek_v41.py`), dumped with the numpy-only writer in a process where torch
//! cannot be imported, and validated against `dsv41-c{ratio}` in its real cache format (FP4 e2m1
//! with e4m3 scales per 16): ratios 1, 2, 4 and 128 pass one-shot, ratio 4 passes through
//! mlx-lm's decode path; labelled with the wrong ratio, or as plain bf16, the same kernel fails.
//!
//! Needs python3 with numpy, safetensors, `mlx[cpu]` 0.32.4 and mlx-lm 0.32.2. CI installs them
//! (`.ci/run`) and sets `PHASEKV_REQUIRE_MLX=1`, which turns a missing package into a failure.

use crate::common::python::{adapter_scratch, python_with, run_adapter, PyTool};

const SCRIPT: &str = "mlx_deepseek_v41.py";

fn python_with_mlx() -> Option<&'static str> {
    python_with(PyTool::Mlx, "the mlx-lm DeepSeek-V4.1 adapter")
}

#[test]
fn mlx_lm_v41_compressor_passes_at_every_ratio_in_its_fp4_format_without_torch() {
    let Some(py) = python_with_mlx() else { return };
    let dir = adapter_scratch("adapter-mlx-pass");
    for ratio in ["1", "2", "4", "128"] {
        let out = dir.join(format!("c{ratio}.safetensors"));
        let (code, text) = run_adapter(py, SCRIPT, &out, &["--ratio", ratio], true);
        assert_eq!(code, 0, "ratio {ratio}:\n{text}");
        assert!(text.contains(&format!("as dsv41-c{ratio}")) && text.contains("verdict: PASS"), "{text}");
        assert!(text.contains("cache format: ") && text.contains("e2m1"), "the format checked is named:\n{text}");
        assert!(
            text.lines().any(|l| l.starts_with("K2 ") && l.contains("PASS") && !l.contains("entries []")),
            "{text}"
        );
    }
    let out = dir.join("c4-streaming.safetensors");
    let (code, text) = run_adapter(py, SCRIPT, &out, &["--ratio", "4", "--chunk", "3"], true);
    assert_eq!(code, 0, "mlx-lm's decode path, 3 tokens a call:\n{text}");
    assert!(text.contains("streaming chunk 3"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mlx_lm_v41_negative_controls_fail() {
    let Some(py) = python_with_mlx() else { return };
    let dir = adapter_scratch("adapter-mlx-fail");
    for (label, extra) in [
        ("wrong ratio", &["--ratio", "2", "--wrong-ratio"][..]),
        ("plain bf16", &["--ratio", "4", "--label-plain"][..]),
    ] {
        let out = dir.join(format!("{}.safetensors", label.replace(' ', "-")));
        let (code, text) = run_adapter(py, SCRIPT, &out, extra, true);
        assert_eq!(code, 1, "{label} must fail:\n{text}");
        assert!(text.contains("verdict: FAIL"), "{label}:\n{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
