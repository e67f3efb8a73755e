//! Analyses of evaluation results: the phase lab, documented in `theory/phase-lab.md`.
//!
//! | file | owns |
//! |---|---|
//! | [`stats`] | per-group accuracy, Wilson intervals, max gap, folding by phase, period estimate, chi-square and permutation tests |
//! | [`protocol`] | the prefix and in-sequence padding protocols and their balancing |
//! | [`phase`] | a phase profile (every statistic) from per-prompt outcomes |
//! | [`phase_test`] | the pre-registered depth-controlled phase test, its pooling over seeds, knockout row tests |
//! | [`verdict`] | verdict states of a claim, the ceiling rule, the paper's magnitudes |
//! | [`claims_v3`] | §9.7's new claims (E11-E14): their named thresholds and per-seed rules |
//! | [`training`] | the training-success rule of v2 (§8.2): success, one warm-restart extension, failed seeds excluded |
//! | [`eval`] | scoring a trained decoder on prompts; knockouts by mean replacement |
//! | [`gates`] | gate preferences: static and input-dependent concentration |
//! | [`cycling`] | gate cycling: a layer's heads cycled by `k` offsets, the phase profile per `k` |
//! | [`audit`] | prompts exported as JSONL, external results read back |

pub mod audit;
pub mod claims_v3;
pub mod cycling;
pub mod eval;
pub mod flips;
pub mod gates;
pub mod phase;
pub mod phase_test;
pub mod protocol;
pub mod stats;
pub mod training;
pub mod verdict;
