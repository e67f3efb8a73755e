//! Kernel specifications and the named presets of `spec/kernels.md` §2.
//!
//! A [`KernelSpec`] fixes every knob of the gated kernel family (paper eqs. 1-2):
//!
//! ```text
//! s^B_{j,i} = Z^B_{g(i)} h_{j,i} + b^B_i                      (gate logits, width d_g)
//! a^B_{j,i} = softmax over the valid offsets i of window j, per gate channel
//! B_j       = sum_i a^B_{j,i} (.) (C^B_{g(i)} h_{j,i})         ((.) broadcasts when d_g = 1)
//! ```
//!
//! then optionally RMSNorm and partial RoPE at the entry position. Preset names are public
//! API: `w{W}s{S}` with the suffixes `-scalar`, `-uniform`, `-tied`, `-norope`, and `full`,
//! `dsv4-csa`, `dsv4-hca`.

use crate::geometry::{Alignment, EntryPosition, Geometry, Visibility};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// How gate scores are produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateKind {
    /// One logit per slot (`d_g = 1`), broadcast over the head channels.
    Scalar,
    /// One logit per slot and channel (`d_g = d_h`).
    Vector,
    /// No learned gate: every valid slot weighs `1/valid`.
    Uniform,
}

/// Which parameter group `g(i)` serves offset `i` (biases are always per offset).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamGroups {
    /// `g(i) = i`: one projection per offset.
    PerOffset,
    /// `g(i) = 0`: one projection for every offset.
    Shared,
    /// An explicit map, one group index per offset (groups numbered `0..G`).
    Map(Vec<usize>),
}

/// Which channels of an entry are rotated by RoPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeChannels {
    /// Every channel (rounded down to an even count).
    All,
    /// The last `d_h / den` channels (rounded down to an even count, at least 2 when
    /// `d_h >= 2`). DeepSeek-V4 rotates 64 of 512 channels: `den = 8`.
    Fraction(usize),
}

/// Partial rotary embedding applied to compressed entries (interleaved pairs, as in
/// DeepSeek-V4: channel pairs `(2k, 2k+1)` of the rotated slice, frequency `theta^(-2k/r)`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RopeSpec {
    /// Which channels rotate.
    pub channels: RopeChannels,
    /// Which position the entry carries.
    pub position: EntryPosition,
    /// The RoPE base.
    pub theta: f64,
}

impl RopeSpec {
    /// Number of rotated channels `r` for a head of width `d_head` (always even, `<= d_head`).
    pub fn rotated_channels(&self, d_head: usize) -> usize {
        let r = match self.channels {
            RopeChannels::All => d_head,
            RopeChannels::Fraction(den) => (d_head / den.max(1)).max(2).min(d_head),
        };
        r & !1
    }
}

/// Every knob of one compression kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelSpec {
    /// The preset name this spec came from (or a user label).
    pub name: String,
    /// Window size, stride and alignment.
    pub geometry: Geometry,
    /// Gate kind.
    pub gate: GateKind,
    /// Parameter groups `g(i)`.
    pub groups: ParamGroups,
    /// Tied gates: `s^V = s^K` (the value branch has no gate parameters of its own).
    pub tied: bool,
    /// One compressed vector serves as key and value (DeepSeek-V4).
    pub shared_kv: bool,
    /// RMSNorm (eps `1e-6`, learned weight) on the pooled entry.
    pub rms_norm: bool,
    /// Partial RoPE on the entry, if any.
    pub rope: Option<RopeSpec>,
    /// When entries become visible to queries.
    pub visibility: Visibility,
    /// The `-norope` ablation: a model built on this kernel uses no RoPE anywhere (NoPE).
    pub nope_model: bool,
}

/// RMSNorm epsilon used by every kernel with `rms_norm` (DeepSeek-V4's value).
pub const RMS_NORM_EPS: f64 = 1e-6;
/// RoPE base used by the presets.
pub const ROPE_THETA: f64 = 10_000.0;

/// Model and head widths for a kernel instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelDims {
    /// Width `d` of the hidden states fed to the kernel.
    pub d_model: usize,
    /// Width `d_h` of each compressed key/value.
    pub d_head: usize,
}

impl KernelDims {
    /// Validated dims (both at least 1).
    pub fn new(d_model: usize, d_head: usize) -> Result<Self> {
        if d_model == 0 {
            return Err(Error::invalid("d_model", "must be at least 1, got 0"));
        }
        if d_head == 0 {
            return Err(Error::invalid("d_head", "must be at least 1, got 0"));
        }
        Ok(KernelDims { d_model, d_head })
    }
}

impl KernelSpec {
    /// The spec of a named preset (see [`preset_names`]); an unknown name is an error naming
    /// the field `preset` and the accepted forms.
    pub fn preset(name: &str) -> Result<Self> {
        let unknown = || {
            Error::invalid(
                "preset",
                format!(
                    "unknown preset '{name}'; expected full, dsv4-csa, dsv4-hca, or w{{W}}s{{S}} \
                     with an optional suffix -scalar, -uniform, -tied or -norope (e.g. w8s4-tied)"
                ),
            )
        };
        match name {
            "full" => {
                let mut spec = Self::generic(name, Geometry::new(1, 1, Alignment::Start)?);
                spec.gate = GateKind::Uniform;
                spec.groups = ParamGroups::Shared;
                return Ok(spec);
            }
            "dsv4-csa" => {
                let geometry = Geometry::new(8, 4, Alignment::PadLeft)?;
                return Ok(KernelSpec {
                    name: name.into(),
                    geometry,
                    gate: GateKind::Vector,
                    groups: ParamGroups::Map(vec![0, 0, 0, 0, 1, 1, 1, 1]),
                    tied: false,
                    shared_kv: true,
                    rms_norm: true,
                    rope: Some(RopeSpec {
                        channels: RopeChannels::Fraction(8),
                        position: EntryPosition::StrideStart,
                        theta: ROPE_THETA,
                    }),
                    visibility: Visibility::Inclusive,
                    nope_model: false,
                });
            }
            "dsv4-hca" => {
                let geometry = Geometry::new(128, 128, Alignment::Start)?;
                return Ok(KernelSpec {
                    name: name.into(),
                    geometry,
                    gate: GateKind::Vector,
                    groups: ParamGroups::Shared,
                    tied: false,
                    shared_kv: true,
                    rms_norm: true,
                    rope: Some(RopeSpec {
                        channels: RopeChannels::Fraction(8),
                        position: EntryPosition::First,
                        theta: ROPE_THETA,
                    }),
                    visibility: Visibility::Inclusive,
                    nope_model: false,
                });
            }
            _ => {}
        }
        let (base, suffix) = match name.split_once('-') {
            Some((b, s)) => (b, Some(s)),
            None => (name, None),
        };
        let rest = base.strip_prefix('w').ok_or_else(unknown)?;
        let (w, s) = rest.split_once('s').ok_or_else(unknown)?;
        let window: usize = w.parse().map_err(|_| unknown())?;
        let stride: usize = s.parse().map_err(|_| unknown())?;
        let geometry = Geometry::new(window, stride, Alignment::Start)?;
        let mut spec = Self::generic(name, geometry);
        match suffix {
            None => {}
            Some("scalar") => spec.gate = GateKind::Scalar,
            Some("uniform") => spec.gate = GateKind::Uniform,
            Some("tied") => spec.tied = true,
            Some("norope") => {
                spec.rope = None;
                spec.nope_model = true;
            }
            Some(_) => return Err(unknown()),
        }
        Ok(spec)
    }

    /// The paper's generic kernel: vector gates, per-offset parameters, untied, separate K/V,
    /// no RMSNorm, RoPE on every channel at the entry's first token.
    fn generic(name: &str, geometry: Geometry) -> Self {
        KernelSpec {
            name: name.into(),
            geometry,
            gate: GateKind::Vector,
            groups: ParamGroups::PerOffset,
            tied: false,
            shared_kv: false,
            rms_norm: false,
            rope: Some(RopeSpec { channels: RopeChannels::All, position: EntryPosition::First, theta: ROPE_THETA }),
            visibility: Visibility::Inclusive,
            nope_model: false,
        }
    }

    /// Checks the knobs against each other (group map length and coverage); presets always pass.
    pub fn validate(&self) -> Result<()> {
        if let ParamGroups::Map(map) = &self.groups {
            let w = self.geometry.window();
            if map.len() != w {
                return Err(Error::invalid(
                    "groups",
                    format!("an explicit group map needs one entry per offset ({w}), got {}", map.len()),
                ));
            }
            let g = map.iter().copied().max().unwrap_or(0) + 1;
            if let Some(missing) = (0..g).find(|k| !map.contains(k)) {
                return Err(Error::invalid(
                    "groups",
                    format!("group indices must cover 0..{g} without gaps; group {missing} is unused"),
                ));
            }
        }
        if self.tied && self.shared_kv {
            return Err(Error::invalid("tied", "tied gates need separate K/V branches; shared_kv has only one"));
        }
        if let Some(rope) = &self.rope {
            if !(rope.theta > 0.0 && rope.theta.is_finite()) {
                return Err(Error::invalid("rope.theta", format!("must be positive and finite, got {}", rope.theta)));
            }
            if let RopeChannels::Fraction(0) = rope.channels {
                return Err(Error::invalid("rope.channels", "a fraction needs a positive denominator"));
            }
        }
        Ok(())
    }

    /// Number of parameter groups `G`.
    pub fn num_groups(&self) -> usize {
        match &self.groups {
            ParamGroups::PerOffset => self.geometry.window(),
            ParamGroups::Shared => 1,
            ParamGroups::Map(map) => map.iter().copied().max().unwrap_or(0) + 1,
        }
    }

    /// The group `g(i)` of offset `i`.
    pub fn group_of(&self, i: usize) -> usize {
        match &self.groups {
            ParamGroups::PerOffset => i,
            ParamGroups::Shared => 0,
            ParamGroups::Map(map) => map[i],
        }
    }

    /// Gate width `d_g` for a head of width `d_head` (0 for uniform gates: no parameters).
    pub fn gate_width(&self, d_head: usize) -> usize {
        match self.gate {
            GateKind::Scalar => 1,
            GateKind::Vector => d_head,
            GateKind::Uniform => 0,
        }
    }

    /// Whether the value branch has gate parameters of its own.
    pub fn has_value_gate(&self) -> bool {
        !self.shared_kv && !self.tied && self.gate != GateKind::Uniform
    }

    /// A copy with a different gate kind (used by the harness for K7 and K10).
    pub fn with_gate(&self, gate: GateKind) -> Self {
        KernelSpec { gate, ..self.clone() }
    }

    /// One line describing the knobs, for `phasekv kernel list`.
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
                "{} at {}",
                match r.channels {
                    RopeChannels::All => "all".to_string(),
                    RopeChannels::Fraction(d) => format!("last 1/{d}"),
                },
                match r.position {
                    EntryPosition::First => "first",
                    EntryPosition::Last => "last",
                    EntryPosition::StrideStart => "stride_start",
                }
            ),
        };
        format!(
            "W={} S={} {align} gate={gate} groups={groups} {} {} norm={} rope={rope}",
            g.window(),
            g.stride(),
            if self.tied { "tied" } else { "untied" },
            if self.shared_kv { "shared_kv" } else { "separate_kv" },
            if self.rms_norm { "rms" } else { "none" },
        )
    }
}

/// The preset names the project provides, in a stable order: every paper geometry with its
/// four single-knob ablations, then `dsv4-csa`, `dsv4-hca` and `full`.
pub fn preset_names() -> Vec<String> {
    let mut names = Vec::new();
    for base in ["w4s4", "w8s4", "w8s6", "w8s8", "w12s12"] {
        names.push(base.to_string());
        for suffix in ["scalar", "uniform", "tied", "norope"] {
            names.push(format!("{base}-{suffix}"));
        }
    }
    names.extend(["dsv4-csa", "dsv4-hca", "full"].map(String::from));
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_preset_parses_and_validates() {
        for name in preset_names() {
            let spec = KernelSpec::preset(&name).unwrap();
            spec.validate().unwrap();
            assert_eq!(spec.name, name);
        }
    }

    #[test]
    fn unknown_and_impossible_presets_are_one_line_errors() {
        for bad in ["w8", "w8s", "x8s4", "w8s4-fast", "", "wAs4", "w8s4-"] {
            let e = KernelSpec::preset(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid preset"), "{bad}: {e}");
            assert!(!e.contains('\n'));
        }
        let e = KernelSpec::preset("w4s8").unwrap_err().to_string();
        assert!(e.contains("stride"), "{e}");
        let e = KernelSpec::preset("w0s0").unwrap_err().to_string();
        assert!(e.contains("window"), "{e}");
    }

    #[test]
    fn dsv4_presets_follow_the_reference() {
        let csa = KernelSpec::preset("dsv4-csa").unwrap();
        assert_eq!(csa.num_groups(), 2);
        assert_eq!((0..8).map(|i| csa.group_of(i)).collect::<Vec<_>>(), [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(csa.rope.unwrap().rotated_channels(512), 64);
        assert!(csa.shared_kv && csa.rms_norm && !csa.has_value_gate());
        let hca = KernelSpec::preset("dsv4-hca").unwrap();
        assert_eq!(hca.num_groups(), 1);
        assert_eq!(hca.geometry.window(), 128);
    }

    #[test]
    fn explicit_group_map_is_validated() {
        let mut spec = KernelSpec::preset("w4s4").unwrap();
        spec.groups = ParamGroups::Map(vec![0, 2, 2, 0]);
        assert!(spec.validate().unwrap_err().to_string().contains("group 1"));
        spec.groups = ParamGroups::Map(vec![0, 1]);
        assert!(spec.validate().unwrap_err().to_string().contains("one entry per offset"));
    }
}
