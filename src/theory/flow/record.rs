//! What one run of the flow returns ([`FlowRun`]): its outcome and, when asked, its
//! trajectory.

use serde::{Deserialize, Serialize};

/// Recorded gates over time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// Times of the records.
    pub times: Vec<f64>,
    /// `pK` (`H x S`, row-major) at each record.
    pub key: Vec<Vec<f64>>,
    /// `pV` (`H x S`) at each record.
    pub value: Vec<Vec<f64>>,
    /// Loss at each record.
    pub loss: Vec<f64>,
}

/// Outcome of one gradient-flow run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowRun {
    /// Seed of the initialisation.
    pub seed: u64,
    /// Every head reached `pK(r_h) > threshold` and `pV(r_h + 1) > threshold`.
    pub converged: bool,
    /// First time at which that held.
    pub t_conv: Option<f64>,
    /// Chosen key offsets (1-based), per head, at convergence (None for a head that did not
    /// converge).
    pub key_offsets: Vec<Option<usize>>,
    /// Two or more heads chose the same offset.
    pub heads_coincide: bool,
    /// Norm of the content weights at the end (0 without content term).
    pub content_norm: f64,
    /// Norm of the content weights at the start.
    pub content_norm_init: f64,
    /// Final static gates `pK` (`H x S`).
    pub key: Vec<f64>,
    /// Final static gates `pV` (`H x S`).
    pub value: Vec<f64>,
    /// Loss at the end.
    pub final_loss: f64,
    /// Integrator steps taken.
    pub steps: usize,
    /// Recorded trajectory, if asked for.
    pub trajectory: Option<Trajectory>,
}
