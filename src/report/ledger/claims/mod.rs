//! The claims of the ledger: one module per claim, each a [`LedgerClaim`] registered in
//! [`LEDGER`]. A claim computes its verdict from the [`Collected`](super::Collected) data with
//! the criterion it states, carries its own id and top-table words, and may draw figures of its
//! own. Adding a claim is one module here, one line in [`LEDGER`] and a test
//! (`tests/report_ledger.rs`). The criteria and their thresholds are documented in
//! `theory/phase-lab.md`.
//!
//! This file only declares and re-exports; the modules import one another by name.
//!
//! | module | does |
//! |---|---|
//! | `claim` | one line of the ledger ([`Claim`]) and the trait a claim implements |
//! | `ledger` | every claim in order ([`LEDGER`]), judged with its section and flags |
//! | `t1`, `t2`, `e1`..`e8` (E8-E10), `x1`, `e11`..`e14` (v3 only), `k` | one claim each |
//! | `arm` | what the phase claims read of an arm, and its excluded seeds |
//! | `judge` | the pooled test assembly: tests, seed rule, ceiling rule |
//! | `parts` | one model's part of a claim, and how the parts combine |
//! | `records` | the ledger's records of tests and magnitudes |
//! | `gaps` | magnitudes with their intervals, and the period rule |
//! | `words` | how the ledger writes its numbers |
//! | `files` | the names of the figures and data files claims link |
//! | `power` | the seed-count power table |
//! | `sensitivity` | the claims recomputed with the excluded seeds kept |

mod arm;
mod claim;
mod e1;
mod e11;
mod e12;
mod e13;
mod e14;
mod e2;
mod e3;
mod e4;
mod e5;
mod e6;
mod e7;
mod e8;
mod files;
mod gaps;
mod judge;
mod k;
mod ledger;
mod parts;
mod power;
mod records;
mod sensitivity;
mod t1;
mod t2;
mod words;
mod x1;

/// Significance level of every test in the ledger: the pre-registered one.
pub use crate::analysis::phase_test::ALPHA;

/// A claim's verdict, computed from data (one type for the ledger and the analysis).
pub use crate::analysis::verdict::Verdict;
pub use claim::{ArmVerdict, Claim, Interval, LedgerClaim, Measure, SeedLine, SeedTest, TestRecord};
pub use files::knockout_figure;
pub use ledger::{claims, draw_claim_figures, ledger_for, LEDGER};
pub use power::{power_table, PowerRow, PowerTable, POWER_ROUNDS};
pub use words::section_of;
pub(super) use words::{fmt_p, period_word};
