//! The phase lab's settings.

use serde::{Deserialize, Serialize};

/// Evaluation families per residue group and protocol in the v3 run (`theory/phase-lab.md`
/// §9.5's `V3_EVAL_PER_GROUP`).
pub const V3_EVAL_PER_GROUP: usize = 96;

/// Settings shared by the lab's steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabSettings {
    /// Evaluation prompts per residue group and protocol.
    pub eval_per_group: usize,
    /// Knockout prompts per residue group (in-sequence protocol).
    pub knockout_per_group: usize,
    /// Same-layout reference prompts per knocked-out prompt.
    pub knockout_reference: usize,
    /// Sequences whose windows the gate statistics average over.
    pub gate_samples: usize,
    /// Seed of prompts, reference sets and permutation tests.
    pub seed: u64,
}

impl Default for LabSettings {
    fn default() -> Self {
        LabSettings {
            // The pre-registered sample size (power of the phase test, theory/phase-lab.md).
            eval_per_group: crate::analysis::phase_test::DEFAULT_PER_GROUP,
            knockout_per_group: 24,
            knockout_reference: 8,
            gate_samples: 64,
            seed: 0,
        }
    }
}
