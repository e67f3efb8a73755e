//! mlx-lm 0.32.2's DeepSeek-V4.1 compressor, unmodified, under MLX's CPU backend
//! (`python/mlx_deepseek_v41.py`), dumped with the numpy-only writer in a process where torch,
//! huggingface_hub and transformers cannot be imported (the documented `pip install --no-deps
//! mlx-lm`; mlx-lm's own `__init__` needs the latter two, so the adapter skips it), and validated against `dsv41-c{ratio}` in its real cache format (FP4 e2m1
//! with e4m3 scales per 16): ratios 1, 2, 4 and 128 pass one-shot, ratio 4 passes through
//! mlx-lm's decode path; labelled with the wrong ratio, or as plain bf16, the same kernel fails.
//!
//! Needs python3 with numpy, safetensors, `mlx[cpu]` 0.32.4 and mlx-lm 0.32.2. CI installs them
//! (`.ci/run`) and sets `PHASEKV_REQUIRE_MLX=1`, which turns a missing package into a failure.

use crate::common::python::{adapter_fails, adapter_passes, PyTool, YARN_WARNING};

const SCRIPT: &str = "mlx_deepseek_v41.py";

#[test]
fn mlx_lm_v41_compressor_passes_at_every_ratio_in_its_fp4_format_without_torch() {
    for ratio in ["1", "2", "4", "128"] {
        let label = format!("mlx-c{ratio}");
        let preset = format!("dsv41-c{ratio}");
        let Some(text) = adapter_passes(PyTool::Mlx, SCRIPT, &label, &["--ratio", ratio], &preset, "e2m1") else {
            return;
        };
        // K2 perturbs a token inside a window that closes, so some entry changes.
        assert!(
            text.lines().any(|l| l.starts_with("K2 ") && l.contains("PASS") && !l.contains("entries []")),
            "{text}"
        );
    }
    let streaming = &["--ratio", "4", "--chunk", "3", "--tokens", "22"];
    if let Some(text) = adapter_passes(PyTool::Mlx, SCRIPT, "mlx-c4-streaming", streaming, "dsv41-c4", "e2m1") {
        assert!(text.contains("streaming chunk 3"), "mlx-lm's decode path, 3 tokens a call:\n{text}");
    }
}

#[test]
fn mlx_lm_v41_negative_controls_fail() {
    adapter_fails(PyTool::Mlx, SCRIPT, "mlx-wrong-ratio", &["--ratio", "2", "--wrong-ratio"]);
    adapter_fails(PyTool::Mlx, SCRIPT, "mlx-plain", &["--ratio", "4", "--label-plain"]);
}

/// YaRN past the original context (issue 41, item 3): from position 65 536 (`--position-offset`,
/// mlx-lm's own `start_pos`) the compressor passes with neither coverage warning; the control runs
/// the kernel there but records position 0 in the dump, and fails.
#[test]
fn mlx_lm_v41_passes_past_the_original_context_and_an_unrecorded_offset_fails() {
    let at = &["--ratio", "4", "--position-offset", "65536"];
    if let Some(text) = adapter_passes(PyTool::Mlx, SCRIPT, "mlx-c4-offset", at, "dsv41-c4", "e2m1") {
        assert!(text.contains("from position 65536") && !text.contains(YARN_WARNING), "{text}");
    }
    let streaming = &["--ratio", "4", "--position-offset", "65536", "--chunk", "5"];
    adapter_passes(PyTool::Mlx, SCRIPT, "mlx-c4-offset-streaming", streaming, "dsv41-c4", "e2m1");
    let unrecorded = &["--ratio", "4", "--position-offset", "65536", "--offset-unrecorded"];
    adapter_fails(PyTool::Mlx, SCRIPT, "mlx-c4-offset-unrecorded", unrecorded);
}
