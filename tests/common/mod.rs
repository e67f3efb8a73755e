//! Shared test support: proptest strategies and runners (`strategies`), the one probe for the
//! optional Python tools (`python`).
#![allow(dead_code, unused_imports)]

pub mod configs;
pub mod plans;
pub mod python;
pub mod strategies;

pub use strategies::*;
