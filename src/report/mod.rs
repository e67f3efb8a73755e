//! Reports: small plotting helpers shared by every part of the project. Each helper writes the
//! same figure as `<stem>.svg` and `<stem>.png`, drawing text with the embedded DejaVu Sans
//! font (no system fonts needed).

pub mod figures;
pub mod ledger;
pub mod plot;
