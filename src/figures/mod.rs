//! Figures: every plot the crate draws, above the data it plots.
//!
//! | module | draws |
//! |---|---|
//! | [`validation`] | a kernel dump's validation: error by phase of the window start, error by window |

pub mod validation;
