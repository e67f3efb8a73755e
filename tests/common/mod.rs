//! Shared test helpers: proptest strategies live in `strategies`.
#![allow(dead_code, unused_imports)]

pub mod strategies;

pub use strategies::*;
