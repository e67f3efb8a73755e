//! `phasekv kernel ...`: list presets, run the invariant harness, time the kernels, validate a
//! dump. Parses, calls [`phasekv::conformance`], prints.

mod args;
mod bench;
mod check;
mod dispatch;
mod study;

pub use args::KernelCmd;
pub use dispatch::run;
