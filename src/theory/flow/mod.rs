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

mod batched;
mod config;
mod record;
mod run;
mod state;

pub use batched::{run_seeds_batched, run_seeds_on, LANES};
pub use config::{ContentOptions, FlowConfig, FlowKernel, Integrator};
pub use record::{ConvergenceCurve, FlowRun, Trajectory};
pub use run::*;
pub use state::*;
