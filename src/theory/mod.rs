//! The theory engine: the idealized induction task of the paper, its exact population loss,
//! and numerical checks of Theorem 1 (oracle class) and Theorem 2 (gradient flow).
//!
//! The mathematics, with the equation labels `(T-n)` that comments in these files cite, is in
//! `theory/induction-model.md`.
//!
//! | module | owns |
//! |---|---|
//! | [`vocab`] | vocabulary geometry (T-1): exact (`eps = 0`) and random constructions |
//! | [`task`] | task parameters, gates, closed-form loss and gradient (T-4..T-8), literal Monte Carlo model |
//! | [`critical`] | classification of critical points on the product of simplices: KKT margins, tangent Hessian |
//! | [`fast`] | the gradient flow's fast static-gate kernel (the reference is in [`task`]) |
//! | [`limits`] | upper bounds on every size the engine accepts |
//! | [`oracle`] | Theorem 1: argmin L-BFGS over the oracle class, classification, KKT (T-9) |
//! | [`diagram`] | the (beta, gamma) phase diagram of Theorem 1 |
//! | [`noisy`] | Theorem 1 at eps > 0: per-context L-BFGS on the literal model (T-12) |
//! | [`flow`] | Theorem 2: gradient flow on static gates (RK4 / Euler), seeds in parallel |
//! | [`theorem2`] | Theorem 2 as one run: seeds, the check against Euler at half the step, a recorded trajectory |
//! | [`point`] | one user-given point: gates from a file, loss, gradient and classification there |
//! | [`profile`] | retrieval accuracy by query offset of a converged model (T-10) |
//! | [`stagger`] | one chunk grid per head (issue 30): the loss, its gradient, the best one-hot configuration, a multi-start search |

pub mod critical;
pub mod diagram;
pub mod fast;
pub mod flow;
pub mod limits;
pub mod noisy;
pub mod oracle;
pub mod point;
pub mod profile;
pub mod stagger;
pub mod task;
pub mod theorem2;
pub mod vocab;
