//! # phasekv
//!
//! A verification and simulation suite for *phase sensitivity* in chunked KV-cache compression.
//!
//! Crate map (data flows one way: geometry <- kernel <- model <- analysis <- report, and
//! theory <- report; the `phasekv` binary sits on top and is the only place that prints):
//!
//! | module | owns |
//! |---|---|
//! | [`error`] | the one error enum |

#![warn(missing_docs)]

pub mod error;

pub use error::{Error, Result};
