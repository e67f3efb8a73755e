//! What the fast engine implements: in words, one preset of each family, and the check of a
//! model config.

use crate::model::config::ModelConfig;
use crate::{Error, Result};

/// What the fast engine implements, in words.
pub const SUPPORTED: &str =
    "every preset: full, w{W}s{S} with its ablations, DeepSeek-V4's dsv4-*, DeepSeek-V4.1's dsv41-c{m}, *-stagger-layers and *-stagger-heads, and the layer layouts dsv4-layout and dsv41-layout";

/// Presets of every family the fast engine implements, one each (what the tests compare
/// against the candle path): full attention; the paper's `w{W}s{S}` kernels with vector,
/// scalar and uniform gates, tied or untied, with or without RoPE, overlapping or not;
/// DeepSeek-V4's kernels (shared K/V, entry RMSNorm, partial YaRN RoPE on rotated channels),
/// CSA (padded left, two parameter groups) and HCA (at rate 4, which the tests' sequences hold);
/// DeepSeek-V4.1's (a vector gate without per-offset biases, RoPE on the last channels at
/// the group's first token), at ratio 4 (`dsv41-c1` has no gate: uniform pooling, as HCA's);
/// layers on staggered grids (`-stagger-layers`, each layer's own offset) and the KV heads of a
/// layer on staggered grids (`-stagger-heads`, each head's own offset and entry count); the
/// layer layouts (`dsv4-layout`, `dsv41-layout`: each layer its own kernel, window and
/// parameter shapes).
pub const SUPPORTED_PRESETS: &[&str] = &[
    "full",
    "w8s4",
    "w8s6",
    "w4s4",
    "w8s4-scalar",
    "w8s4-uniform",
    "w8s4-tied",
    "w8s4-norope",
    "dsv4-csa",
    "dsv4-hca4",
    "dsv41-c4",
    "w8s8-stagger-layers",
    "w8s4-stagger-layers",
    "w8s8-stagger-heads",
    "dsv4-layout",
    "dsv41-layout",
];

/// Refuses a model whose preset does not exist. Every kernel spec the presets make (separate or
/// shared K/V, with or without the entry RMSNorm, learned gates with or without per-offset
/// biases, layers or the KV heads of a layer on their own grids) is implemented.
pub fn check_supported(model: &ModelConfig) -> Result<()> {
    if model.is_full() {
        return Ok(());
    }
    model.kernel().map_err(|e| Error::invalid("train.engine", e.to_string()))?;
    Ok(())
}
