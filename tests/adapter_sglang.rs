//! SGLang 0.5.23's DeepSeek-V4.1 compressor (`DeepseekV41Compressor`, the torch path) and its
//! FP4 cache-entry step, unmodified, read from the downloaded wheel
//! (`python/sglang_deepseek_v41.py`) and validated against `dsv41-c1` / `dsv41-c2` in their real
//! cache format (FP4 e2m1 with e4m3 scales per 16): both pass; labelled with the wrong ratio, or
//! as plain bf16, the same kernel fails.
//!
//! Needs python3 with torch, numpy, safetensors and the SGLang wheel in `$PHASEKV_WHEELS` (else
//! `target/wheels`). CI downloads it (`.ci/run`) and sets `PHASEKV_REQUIRE_SGLANG=1`.

use crate::common::python::{adapter_fails, adapter_passes, PyTool, YARN_WARNING};

const SCRIPT: &str = "sglang_deepseek_v41.py";

#[test]
fn sglang_v41_compressor_passes_ratios_1_and_2_in_its_fp4_format() {
    adapter_passes(PyTool::Sglang, SCRIPT, "sglang-c1", &["--ratio", "1"], "dsv41-c1", "e2m1");
    adapter_passes(PyTool::Sglang, SCRIPT, "sglang-c2", &["--ratio", "2"], "dsv41-c2", "e2m1");
}

#[test]
fn sglang_v41_negative_controls_fail() {
    adapter_fails(PyTool::Sglang, SCRIPT, "sglang-wrong-ratio", &["--ratio", "1", "--wrong-ratio", "--tokens", "22"]);
    adapter_fails(PyTool::Sglang, SCRIPT, "sglang-plain", &["--ratio", "2", "--label-plain", "--tokens", "22"]);
}

/// YaRN past the original context (issue 41, item 3): SGLang's compressor from position 65 536
/// (its own `precompute_freqs_cis` table, read at the groups' absolute positions) passes with
/// neither coverage warning; run there but recorded at 0, it fails.
#[test]
fn sglang_v41_passes_past_the_original_context_and_an_unrecorded_offset_fails() {
    let at = &["--ratio", "2", "--position-offset", "65536"];
    if let Some(text) = adapter_passes(PyTool::Sglang, SCRIPT, "sglang-c2-offset", at, "dsv41-c2", "e2m1") {
        assert!(text.contains("from position 65536") && !text.contains(YARN_WARNING), "{text}");
    }
    let unrecorded = &["--ratio", "2", "--position-offset", "65536", "--offset-unrecorded", "--tokens", "22"];
    adapter_fails(PyTool::Sglang, SCRIPT, "sglang-c2-offset-unrecorded", unrecorded);
}
