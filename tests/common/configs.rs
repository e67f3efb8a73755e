//! Tiny model and task configurations shared by the training tests.

use phasekv::model::{ModelConfig, RunConfig};
use phasekv::task::TaskConfig;

/// A tiny run config for `preset` (vocabulary 20, sequence of 1 + 2 + 4*(2+1) + 2*3 = 21 tokens).
pub fn tiny_config(preset: &str) -> RunConfig {
    RunConfig {
        task: TaskConfig {
            n_key: 8,
            n_val: 8,
            n_filler: 2,
            key_len: 1,
            val_len: 1,
            n_records: 4,
            n_queries: 2,
            max_prefix: 2,
            max_gap: 1,
            residue_modulus: 24,
            ..TaskConfig::default()
        },
        model: ModelConfig {
            preset: preset.into(),
            spec: None,
            d_model: 16,
            n_layer: 2,
            n_head: 2,
            n_kv_head: 1,
            d_head: 8,
            d_ff: 32,
            local_window: 3,
            qk_norm_gain: 1.0,
        },
        ..RunConfig::default()
    }
}
