//! Reports: the claims ledger ([`ledger`]), rebuilt from run data, and a kernel designer's
//! one-page study of a kernel against a baseline ([`study`]). Every figure is drawn by
//! [`crate::figures`].

pub mod ledger;
pub mod study;
