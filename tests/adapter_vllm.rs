//! vLLM 0.33.0's DeepSeek-V4 (CSA, HCA) and V4.1 (ratios 1, 2) compressor Triton kernels,
//! unmodified, read from the downloaded wheel and run under Triton's interpreter on CPU tensors
//! (`python/vllm_deepseek_v4.py`); their cache records decoded back to floats and validated in
//! their real formats: V4's 584 B record (FP8 e4m3 NoPE channels with power-of-two scales per
//! 64, bf16 RoPE channels) against `dsv4-csa` / `dsv4-hca`, V4.1's MXFP8 record (e4m3, one
//! power-of-two scale per 32, every channel) against `dsv41-c1` / `dsv41-c2`. One-shot and
//! chunked (vLLM's own state cache carried between calls) they pass. The negative controls fail:
//! CSA with prev and cur swapped, V4.1 labelled with the wrong ratio, the MXFP8 record labelled
//! plain bf16, and the kernels run with Triton 3.9's interpreter rounding as is (it truncates to
//! bf16 and mis-rounds e4m3, which the GPU does not).
//!
//! Needs python3 with torch, numpy, safetensors, triton 3.9 and the vLLM wheel in
//! `$PHASEKV_WHEELS` (else `target/wheels`). CI downloads it (`.ci/run`) and sets
//! `PHASEKV_REQUIRE_VLLM=1`.

use crate::common::python::{adapter_fails, adapter_passes, python_with, run_adapter, PyTool};

const SCRIPT: &str = "vllm_deepseek_v4.py";

/// The length of the chunked runs and the negative controls: each fails (or streams) at any
/// length, and Triton's interpreter takes about 6 s here against 13-17 s at the default
/// (which reaches past token 256: the one-shot runs).
const SHORT: &str = "22";

fn passes(label: &str, extra: &[&str], preset: &str) {
    adapter_passes(PyTool::Vllm, SCRIPT, &format!("vllm-{label}"), extra, preset, "e4m3");
}

fn fails(label: &str, extra: &[&str]) -> Option<String> {
    adapter_fails(PyTool::Vllm, SCRIPT, &format!("vllm-{label}"), extra)
}

#[test]
fn vllm_v4_csa_passes_one_shot_and_chunked_and_fails_swapped() {
    passes("csa", &["--kind", "v4-csa"], "dsv4-csa");
    passes("csa-chunked", &["--kind", "v4-csa", "--chunk", "5", "--tokens", SHORT], "dsv4-csa");
    fails("csa-swapped", &["--kind", "v4-csa", "--swap", "--tokens", SHORT]);
}

#[test]
fn vllm_v4_hca_passes_in_its_fp8_record() {
    passes("hca", &["--kind", "v4-hca"], "dsv4-hca");
}

#[test]
fn vllm_v41_ratios_1_and_2_pass_in_mxfp8_one_shot_and_chunked() {
    passes("v41-c1", &["--kind", "v41-c1"], "dsv41-c1");
    passes("v41-c2", &["--kind", "v41-c2"], "dsv41-c2");
    passes("v41-c2-chunked", &["--kind", "v41-c2", "--chunk", "3", "--tokens", SHORT], "dsv41-c2");
}

#[test]
fn vllm_v41_negative_controls_fail() {
    fails("v41-wrong-ratio", &["--kind", "v41-c2", "--wrong-ratio", "--tokens", SHORT]);
    // Its real MXFP8 record labelled plain bf16 fails, and is suggested its own format: pow2
    // scales per 32 on every channel (issue 41, item 6; not the V4 per-64 NoPE record).
    if let Some(text) = fails("v41-plain", &["--kind", "v41-c2", "--label-plain", "--tokens", SHORT]) {
        let hint =
            text.lines().find(|l| l.contains("cache_format = ")).unwrap_or_else(|| panic!("no suggestion:\n{text}"));
        assert!(hint.contains(r#""scale":"pow2","block":32,"channels":"all""#), "{hint}");
    }
    fails("v41-interpreter-rounding", &["--kind", "v41-c2", "--triton-rounding", "interpreter", "--tokens", SHORT]);
}

/// vLLM's kernels index their state cache and block table by absolute position, so this adapter
/// runs from position 0 only: `--position-offset` is refused in one line (exit 2), naming where
/// YaRN past the original context is checked instead, and no dump is written.
#[test]
fn vllm_refuses_a_position_offset_in_one_line() {
    let Some(py) = python_with(PyTool::Vllm, SCRIPT) else { return };
    let out = std::env::temp_dir().join(format!("phasekv-vllm-offset-{}.safetensors", std::process::id()));
    let (code, text) = run_adapter(py, SCRIPT, &out, &["--position-offset", "65536"], false);
    assert_eq!(code, 2, "{text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(last.contains("--position-offset 65536") && last.contains("hf_deepseek_v4.py"), "{text}");
    assert!(!out.exists(), "nothing written");
}
