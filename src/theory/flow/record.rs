//! What one run of the flow returns ([`FlowRun`]): its outcome and, when asked, its
//! trajectory.

use super::state::concentration;
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

/// How one seed's gradient flow approaches Theorem 2's static concentration over time (the
/// data of the report's convergence figure): at each recorded time, the least concentrated
/// head's [`concentration`] (every head has converged exactly when it
/// exceeds the threshold) and the loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConvergenceCurve {
    /// Seed of the initialisation.
    pub seed: u64,
    /// First time every head exceeded the threshold, as [`FlowRun::t_conv`] (checked every
    /// integrator step, so it may fall between two records).
    pub t_conv: Option<f64>,
    /// Two or more heads chose the same offset, as [`FlowRun::heads_coincide`]: such a run
    /// concentrates on a colliding vertex, whose loss stays above `F_1`.
    pub heads_coincide: bool,
    /// Times of the records.
    pub times: Vec<f64>,
    /// The smallest concentration over heads at each record, in `[0, 1]`.
    pub concentration: Vec<f64>,
    /// Loss at each record.
    pub loss: Vec<f64>,
}

impl ConvergenceCurve {
    /// The curve of `run`, whose gates have `stride` offsets per head; `None` when the run
    /// recorded no trajectory.
    pub fn of(run: &FlowRun, stride: usize) -> Option<ConvergenceCurve> {
        let tr = run.trajectory.as_ref()?;
        let least = |key: &[f64], value: &[f64]| {
            key.chunks(stride).zip(value.chunks(stride)).map(|(k, v)| concentration(k, v).1).fold(1.0, f64::min)
        };
        Some(ConvergenceCurve {
            seed: run.seed,
            t_conv: run.t_conv,
            heads_coincide: run.heads_coincide,
            times: tr.times.clone(),
            concentration: tr.key.iter().zip(&tr.value).map(|(k, v)| least(k, v)).collect(),
            loss: tr.loss.clone(),
        })
    }
}
