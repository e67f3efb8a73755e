//! Shared test support: strategies and the preset runner.
#![allow(dead_code)]
pub mod strategies;
