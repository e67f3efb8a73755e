//! Reports: the claims ledger ([`ledger`]), rebuilt from run data. Every figure is drawn by
//! [`crate::figures`].

pub mod ledger;
