//! The conformance room: the tools that check a kernel, kept apart from the kernel itself
//! ([`crate::kernel`]). Rules and formats: `theory/kernels.md` and
//! `theory/dump-format.md`.
//!
//! | module | owns |
//! |---|---|
//! | [`harness`] | the invariant catalogue K1-K14, the kernels under test (reference, candle, a kernel in another process), strategies, the tolerance rule |
//! | [`bench`] | `phasekv kernel bench`: reference and candle forward passes timed beside this machine's sgemm rate |
//! | [`mutants`] | deliberately broken references, wrapped around the reference's building blocks |
//! | [`dump`] | dumps of external kernels (safetensors / .npy): load, check, save |
//! | [`known`] | the reference's own dumps, known-good and known-bad (another spec's or a mutant's outputs), for the tests of `validate` |
//! | [`validate`] | a dump against the reference: tolerance rule, K1/K2/K3/K5, error by window and phase |

pub mod bench;
pub mod dump;
pub mod harness;
pub mod known;
pub mod mutants;
pub mod validate;
