//! The invariant harness: the catalogue K1-K14 of `theory/kernels.md`, usable on any kernel
//! that implements [`KernelUnderTest`] (the reference, the candle implementation in any dtype,
//! deliberately broken mutants, and later kernels loaded from dumps).
//!
//! Every random input comes from a proptest strategy ([`strategies::case_strategy`]), so
//! failures shrink to a minimal case and replay from a seed. The same code runs in
//! `cargo test` (`tests/kernel_invariants.rs`) and behind `phasekv kernel check`.

mod checkable;
pub mod checks;
pub mod external;
pub mod fast_subject;
mod invariant;
mod run;
pub mod strategies;
mod subject;
pub mod subjects;
pub mod tolerance;

pub use checkable::{check_work, checkable, checkable_with};
pub use invariant::{CheckVerdict, Invariant, InvariantReport, InvariantStatus};
pub use run::{run_all, run_catalogue, run_invariant, seeded_runner, seeded_runner_shrinking};
pub use strategies::Case;
pub use subject::KernelUnderTest;
