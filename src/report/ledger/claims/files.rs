//! The names of the figures and data files a claim links (relative to the report directory).

use crate::analysis::protocol::Protocol;

/// The stem of a run's knockout figure under `protocol` (in `figures/`).
pub fn knockout_figure(label: &str, protocol: Protocol) -> String {
    format!("knockout-{label}-{}", protocol.name())
}

/// The phase-profile figure of a protocol.
pub(super) fn phase_fig(p: Protocol) -> String {
    format!("figures/phase-{}.png", p.name())
}

/// The phase-profile data of a protocol.
pub(super) fn phase_data(p: Protocol) -> String {
    format!("figures/phase-{}.csv", p.name())
}

pub(super) fn both_figs() -> Vec<String> {
    Protocol::ALL.iter().map(|&p| phase_fig(p)).collect()
}

pub(super) fn both_data() -> Vec<String> {
    Protocol::ALL.iter().map(|&p| phase_data(p)).collect()
}
