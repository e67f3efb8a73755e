//! Theorem 1 (theory/induction-model.md §3): minimise the population loss (T-4) over the
//! oracle class with argmin's L-BFGS (More-Thuente line search) on softmax-parameterised
//! simplices, from many seeded restarts (random at several scales, uniform plus noise,
//! near-vertex, and structured "split over k pairs" starts); classify the best minimiser and
//! compare it with `F_1` (T-7) and with the KKT conditions at the one-hot vertex (T-9).

mod lbfgs;
mod options;
mod run;
mod starts;
mod vertex;

pub use lbfgs::*;
pub use options::{OracleOptions, BEATEN_TOL, CONCENTRATED, KKT_TOL};
pub use run::{
    iteration_log_jsonl, theorem1, theorem1_logged, IterationLine, LabelCounts, PointVerdict, Refinement, Restart,
    Theorem1Report,
};
pub use starts::*;
pub use vertex::*;
