//! Plotting helpers (placeholder until plot.rs lands).
