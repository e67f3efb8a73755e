//! The idealized induction task and its loss (theory/induction-model.md §1-§2).
//!
//! Offsets are 0-based in code (`r = 0..S-1`); the Markdown and every JSON/plot output use the
//! paper's 1-based offsets (`code r` = `paper r + 1`). Query offsets are `r* = 0..S-2`, the
//! target is `r* + 1`.
//!
//! * [`population_loss`] / [`population_loss_grad`]: the exact population loss at `eps = 0`
//!   for the oracle class (per-head, per-chunk gates), eqs. (T-4)-(T-5).
//! * [`static_loss_grad`]: the static-gate closed form (T-6) and its exact gradient (T-6g), the
//!   hot loop of the gradient flow.
//! * [`one_hot_loss`]: `F_1` at a one-hot distinct vertex (T-7).
//! * [`monte_carlo_loss`]: the literal vector model (T-2, T-3) averaged over sampled contexts,
//!   valid for any `eps`.

mod oracle_gates;
mod params;
pub use oracle_gates::OracleGates;
pub use params::TaskParams;
mod population;
pub use population::*;
mod static_gates;
pub use static_gates::*;
mod monte_carlo;
pub use monte_carlo::*;
