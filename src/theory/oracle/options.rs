//! The options of a Theorem 1 run and its tolerances.

use serde::{Deserialize, Serialize};

/// Absolute tolerance below `F_1` that counts as "beaten" (spec §3: 1e-9).
pub const BEATEN_TOL: f64 = 1e-9;
/// KKT margins above `-KKT_TOL` count as satisfied.
pub const KKT_TOL: f64 = 1e-9;
/// A block (one `pK_{h,l}` or `pV_{h,l}`) counts as concentrated when its largest entry
/// exceeds this.
pub const CONCENTRATED: f64 = 0.9;

/// Options for [`theorem1`](super::theorem1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OracleOptions {
    /// Random restarts per scale in `random_scales`.
    pub random_per_scale: usize,
    /// Logit scales of random restarts (small scales are "uniform plus noise").
    pub random_scales: Vec<f64>,
    /// Near-vertex restarts.
    pub near_vertex: usize,
    /// Largest number of pairs in the split starts (`2..=max_split_pairs`, capped at `S-1`).
    pub max_split_pairs: usize,
    /// Split restarts per (pair count, subset of split heads); see [`split_subsets`](super::starts::split_subsets).
    pub split_per_pairs: usize,
    /// L-BFGS iteration cap.
    pub max_iters: u64,
    /// Seed of all restarts.
    pub seed: u64,
    /// Saddle escapes: a restart that ends unconcentrated is perturbed (logit noise 0.3) and
    /// re-minimised up to this many times, keeping a lower end point. L-BFGS can stop on the
    /// symmetric critical points of structured starts; this tells saddles from minima.
    pub saddle_escapes: usize,
    /// Local refinement of the best end point: this many kicks (logit noise 0.3 and 1.0 in
    /// turn), each re-minimised, keeping a lower end point.
    #[serde(default = "default_refine_kicks")]
    pub refine_kicks: usize,
}

fn default_refine_kicks() -> usize {
    4
}

impl Default for OracleOptions {
    fn default() -> Self {
        OracleOptions {
            random_per_scale: 2,
            random_scales: vec![0.01, 0.3, 1.0, 3.0],
            near_vertex: 2,
            max_split_pairs: 3,
            split_per_pairs: 2,
            max_iters: 600,
            seed: 0,
            saddle_escapes: 2,
            refine_kicks: default_refine_kicks(),
        }
    }
}
