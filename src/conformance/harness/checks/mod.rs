//! One function per invariant of the catalogue (`theory/kernels.md`, "The catalogue and the tests"). Each takes a kernel under test and a
//! drawn [`Case`](super::strategies::Case) and returns a [`CheckVerdict`](super::CheckVerdict) with the measured deviation and the allowed bound.
//!
//! Where an invariant is exact ("bit for bit"), the bound is 0. Where two computations of the
//! same quantity may reassociate a sum, the bound is [`tolerance::reassociation`](super::tolerance::reassociation), and the f64
//! reference is still held to exactness where the spec says so (K3, K11).

mod agreement;
mod dispatch;
mod gates;
mod geometry;
mod shared;

pub(crate) use agreement::{low_reference, low_reference_mutated, post_rows};
pub use dispatch::check;
