//! Values of `phasekv lab` options that the lab commands share (clap value enums).

use clap::ValueEnum;
use phasekv::analysis::protocol::Protocol;

/// A padding protocol on the command line (`prefix`, `in-sequence`).
#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum ProtocolArg {
    /// Padding before the record block.
    Prefix,
    /// Random gaps between records.
    InSequence,
}

impl From<ProtocolArg> for Protocol {
    fn from(p: ProtocolArg) -> Self {
        match p {
            ProtocolArg::Prefix => Protocol::Prefix,
            ProtocolArg::InSequence => Protocol::InSequence,
        }
    }
}
