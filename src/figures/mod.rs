//! Every figure of the project, drawn from result data only (never from a model), so that
//! `phasekv report` can redraw each of them. Each figure is written as `<stem>.svg` and
//! `<stem>.png`, text drawn with the embedded DejaVu Sans font (no system fonts needed).
//!
//! This layer sits above `analysis` and `theory` (whose result types it draws) and below `lab`,
//! `reproduce`, `report` and the CLI, which call it; it imports nothing above it.
//!
//! | module | draws |
//! |---|---|
//! | [`colour`] | the palette and sequential scales, checked for colour-blind readers |
//! | [`grid`] | category grids (knockout maps, the Theorem 1 diagram): muted and outlined cells |
//! | [`plot`] | the chart helpers: line charts (one or several panels), scatter plots, legends, titles that fit |
//! | [`lab`] | the phase lab (see `theory/phase-lab.md`): phase profiles, knockout maps, gate preferences |
//! | [`theory`] | Theorem 1 restarts and phase diagram, Theorem 2 trajectories, phase profile and chosen offsets |
//! | [`validation`] | a kernel dump's validation: error by phase of the window start, error by window |

pub mod colour;
pub mod grid;
pub mod lab;
pub mod plot;
pub mod theory;
pub mod validation;
