//! Shared test support: proptest strategies and runners (`strategies`), the one probe for the
//! optional Python tools (`python`), the invariant list and `test_device!` (`invariants`).
#![allow(dead_code, unused_imports)]

pub mod configs;
pub mod dumps;
pub mod invariants;
pub mod knockouts;
pub mod ledger_fixture;
pub mod plans;
pub mod python;
pub mod strategies;

pub(crate) use invariants::{for_each_invariant, test_device};
pub use strategies::*;
