//! Theorem 2 (theory/induction-model.md §4): gradient flow `d theta/dt = -grad F` on static
//! softmax gates `pK_h = softmax(thetaK_h)`, `pV_h = softmax(thetaV_h)` from `theta(0) ~
//! N(0, sigma^2)`, integrated with RK4 (or Euler), seeds in parallel with rayon.
//!
//! The hot loop ([`FlowState::step`]) allocates nothing: it evaluates the exact static-gate
//! gradient (T-6g) through the softmax (T-8) into preallocated buffers.
//!
//! Optionally a content term (T-11): per-head token biases `bK_h(i) = wK_h.e_i` (the component
//! of `w` along the common direction `u` shifts every logit of a chunk equally and cancels in
//! the softmax, so these biases are all of `w` that matters at `eps = 0`). The population is
//! then a fixed, seeded sample of base contexts closed under the `N` cyclic relabellings of
//! the vocabulary, so that every token occupies every position equally often and the sample
//! gradient with respect to `w` vanishes at `w = 0` exactly, as the population gradient does.

#![allow(clippy::needless_range_loop)] // index loops mirror the formulas (T-6g, T-11)

use super::fast::FastStatic;
use super::task::{
    population_loss_grad, sample_context, softmax_into, softmax_pullback, static_loss_grad, OracleGates,
    StaticWorkspace, TaskParams,
};
use crate::{Error, Result};
use ndarray_rand::rand_distr::{Distribution, StandardNormal};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

mod state;
pub use state::*;
mod run;
pub use run::*;
mod batched;
pub use batched::{run_seeds_batched, run_seeds_on, LANES};

/// Integrator of the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Integrator {
    /// Classical fourth-order Runge-Kutta.
    Rk4,
    /// Forward Euler.
    Euler,
}

/// Which implementation evaluates the static-gate right-hand side (the content term always
/// uses the oracle closed form).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum FlowKernel {
    /// [`super::fast::FastStatic`]: batched, vectorised exponentials (the default).
    #[default]
    Fast,
    /// [`super::task::static_loss_grad`] plus a separate softmax pullback: the reference the
    /// fast kernel is tested and benchmarked against.
    Reference,
}

/// Content-term options (T-11).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ContentOptions {
    /// Base contexts; the sample holds `base_contexts * N` contexts (all cyclic relabellings).
    pub base_contexts: usize,
    /// Standard deviation of the initial content weights (per token bias).
    pub init_scale: f64,
}

/// Gradient-flow configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FlowConfig {
    /// Task parameters.
    pub params: TaskParams,
    /// Initial logit standard deviation `sigma`.
    pub sigma: f64,
    /// Step size.
    pub dt: f64,
    /// Time horizon `T_max`.
    pub t_max: f64,
    /// Integrator.
    pub integrator: Integrator,
    /// Convergence threshold on `pK_h(r_h)` and `pV_h(r_h + 1)` (spec: 0.99).
    pub threshold: f64,
    /// Record gates every this many steps (0: no trajectory).
    pub record_every: usize,
    /// Content term (None: static gates only).
    pub content: Option<ContentOptions>,
}

impl Default for FlowConfig {
    /// Spec §6 primary defaults: RK4 with `dt = 2`, `T_max = 3000`, `sigma = 0.01`.
    fn default() -> Self {
        FlowConfig {
            params: TaskParams::default(),
            sigma: 0.01,
            dt: 2.0,
            t_max: 3000.0,
            integrator: Integrator::Rk4,
            threshold: 0.99,
            record_every: 0,
            content: None,
        }
    }
}

impl FlowConfig {
    /// Check the configuration (task parameters, `sigma >= 0`, `dt > 0`, `t_max >= dt`,
    /// threshold in (0.5, 1)).
    pub fn validate(&self) -> Result<()> {
        self.params.validate()?;
        if !(self.sigma.is_finite() && self.sigma >= 0.0) {
            return Err(Error::invalid("sigma", format!("must be finite and >= 0, got {}", self.sigma)));
        }
        if !(self.dt.is_finite() && self.dt > 0.0) {
            return Err(Error::invalid("dt", format!("must be finite and > 0, got {}", self.dt)));
        }
        if !(self.t_max.is_finite() && self.t_max >= self.dt) {
            return Err(Error::invalid("t_max", format!("must be finite and >= dt = {}, got {}", self.dt, self.t_max)));
        }
        let steps = self.t_max / self.dt;
        if steps > super::limits::MAX_FLOW_STEPS {
            return Err(Error::invalid(
                "t_max",
                format!(
                    "t_max / dt = {steps} steps exceeds the limit {} (theory/induction-model.md §9)",
                    super::limits::MAX_FLOW_STEPS
                ),
            ));
        }
        if !(self.threshold > 0.5 && self.threshold < 1.0) {
            return Err(Error::invalid("threshold", format!("must lie in (0.5, 1), got {}", self.threshold)));
        }
        if let Some(c) = self.content {
            if c.base_contexts == 0 {
                return Err(Error::invalid("content base_contexts", "need >= 1"));
            }
            super::limits::at_most(
                "content contexts (base contexts x N)",
                c.base_contexts.saturating_mul(self.params.vocab),
                super::limits::MAX_CONTENT_CONTEXTS,
            )?;
            if !(c.init_scale.is_finite() && c.init_scale >= 0.0) {
                return Err(Error::invalid(
                    "content init_scale",
                    format!("must be finite and >= 0, got {}", c.init_scale),
                ));
            }
        }
        Ok(())
    }
}
