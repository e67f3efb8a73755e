//! Analyses of evaluation results.
//!
//! | file | owns |
//! |---|---|
//! | [`stats`] | per-group accuracy, Wilson intervals, max gap, folding by phase, period estimate, chi-square and permutation tests |

pub mod stats;
