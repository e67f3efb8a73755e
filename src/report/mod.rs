//! Reports: the claims ledger ([`ledger`]), rebuilt from run data. Every figure is drawn by
//! [`crate::figures`].

pub mod ledger;

/// The chart helpers under their former path, kept for callers not yet moved to
/// [`crate::figures::plot`] (`cli/validate.rs`, whose plots move to `figures::validation`).
pub use crate::figures::plot;
