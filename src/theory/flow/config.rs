//! The gradient flow's settings ([`FlowConfig`]): integrator, kernel, content term, and their
//! checks.

use crate::theory::task::TaskParams;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

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
    /// [`crate::theory::fast::FastStatic`]: batched, vectorised exponentials (the default).
    #[default]
    Fast,
    /// [`crate::theory::task::static_loss_grad`] plus a separate softmax pullback: the reference the
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
        if steps > crate::theory::limits::MAX_FLOW_STEPS {
            return Err(Error::invalid(
                "t_max",
                format!(
                    "t_max / dt = {steps} steps exceeds the limit {} (theory/induction-model.md §9)",
                    crate::theory::limits::MAX_FLOW_STEPS
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
            crate::theory::limits::at_most(
                "content contexts (base contexts x N)",
                c.base_contexts.saturating_mul(self.params.vocab),
                crate::theory::limits::MAX_CONTENT_CONTEXTS,
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
