//! The one-line description of a spec's knobs (`phasekv kernel list`).

use super::kernel_spec::KernelSpec;
use super::knobs::{GateKind, ParamGroups, Stagger};
use super::rope::{RopeChannels, RopeScaling};
use crate::geometry::{Alignment, EntryPosition};

impl KernelSpec {
    /// One line describing the knobs, for `phasekv kernel list` (a layout: its layers, then
    /// the representative layer's knobs).
    pub fn describe(&self) -> String {
        let g = &self.geometry;
        let gate = match self.gate {
            GateKind::Scalar => "scalar",
            GateKind::Vector => "vector",
            GateKind::Uniform => "uniform",
        };
        let groups = match &self.groups {
            ParamGroups::PerOffset => "per_offset".to_string(),
            ParamGroups::Shared => "shared".to_string(),
            ParamGroups::Map(m) => format!("map{m:?}"),
        };
        let align = match g.alignment() {
            Alignment::Start => "start",
            Alignment::PadLeft => "pad_left",
        };
        let rope = match &self.rope {
            None if self.nope_model => "none (NoPE model)".to_string(),
            None => "none".to_string(),
            Some(r) => format!(
                "{} at {} theta={}{}",
                match r.channels {
                    RopeChannels::All => "all".to_string(),
                    RopeChannels::Fraction(d) => format!("last 1/{d}"),
                    RopeChannels::Count(n) => format!("last {n}"),
                },
                match r.position {
                    EntryPosition::First => "first",
                    EntryPosition::Last => "last",
                    EntryPosition::StrideStart => "stride_start",
                },
                r.theta,
                match &r.scaling {
                    None => String::new(),
                    Some(RopeScaling::Yarn { factor, original_max_position, .. }) => {
                        format!(" yarn(x{factor}, from {original_max_position})")
                    }
                    Some(RopeScaling::Frequencies(_)) => " explicit-frequencies".to_string(),
                }
            ),
        };
        // A run's position offset (`KernelSpec::at_position_offset`), named only when set.
        let rope = match self.position_offset() {
            0 => rope,
            p0 => format!("{rope} from position {p0}"),
        };
        let grid = match (g.offset(), self.stagger) {
            (0, Stagger::None) => String::new(),
            (o, Stagger::None) => format!(" offset={o}"),
            (0, rule) => format!(" stagger={}", rule.name()),
            (o, rule) => format!(" offset={o} stagger={}", rule.name()),
        };
        // A layer layout: its layers first; the knobs after are its representative layer's.
        let layout = match &self.layout {
            Some(layers) => {
                let names: Vec<&str> = layers.iter().map(|k| k.name.as_str()).collect();
                format!("layout=[{}] representative ", names.join(", "))
            }
            None => String::new(),
        };
        format!(
            "{layout}W={} S={}{grid} {align} gate={gate}{} groups={groups} {} {} norm={} rope={rope}",
            g.window(),
            g.stride(),
            if self.gate != GateKind::Uniform && !self.gate_bias { " (no bias)" } else { "" },
            if self.tied { "tied" } else { "untied" },
            if self.shared_kv { "shared_kv" } else { "separate_kv" },
            if self.rms_norm { "rms" } else { "none" },
        )
    }
}
