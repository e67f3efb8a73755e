//! Shared test support: proptest strategies and runners (`strategies`).
#![allow(dead_code, unused_imports)]

pub mod configs;
pub mod plans;
pub mod strategies;

pub use strategies::*;
