//! [`KernelSpec`]: every knob of one compression kernel, its strict JSON form and its checks;
//! [`Named`], why a kernel named from outside was not found.

use super::knobs::{GateKind, ParamGroups, Stagger};
use super::rope::{RopeChannels, RopeScaling, RopeSpec, MAX_ROPE_POSITION};
use crate::geometry::{EntryPosition, Geometry, Visibility};
use crate::{Error, Result};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

/// Every knob of one compression kernel. Strict: an unknown field is an error naming it (a typo
/// such as `"scalling"` must never drop a knob silently).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelSpec {
    /// The preset name this spec came from (or a user label).
    pub name: String,
    /// Window size, stride, alignment and grid offset.
    pub geometry: Geometry,
    /// How a model's KV heads and layers spread their grid offsets ([`Stagger`]; absent in JSON
    /// when `none`). A kernel instance computes on `geometry` alone.
    #[serde(default, skip_serializing_if = "Stagger::is_none")]
    pub stagger: Stagger,
    /// Gate kind.
    pub gate: GateKind,
    /// Parameter groups `g(i)`.
    pub groups: ParamGroups,
    /// Per-offset gate biases `b_i` (default `true`). `false` is the structural "no position
    /// bias" of DeepSeek-V4.1: the kernel has no `gate_k.b` / `gate_v.b` parameters at all (the
    /// logits are `Z h` alone), and a dump that holds one is refused.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub gate_bias: bool,
    /// Tied gates: `s^V = s^K` (the value branch has no gate parameters of its own).
    pub tied: bool,
    /// One compressed vector serves as key and value (DeepSeek-V4).
    pub shared_kv: bool,
    /// RMSNorm (learned weight) on the pooled entry.
    pub rms_norm: bool,
    /// Epsilon of that RMSNorm (DeepSeek-V4's `rms_norm_eps`, 1e-6, when absent).
    #[serde(default = "default_rms_norm_eps")]
    pub rms_norm_eps: f64,
    /// Partial RoPE on the entry, if any.
    pub rope: Option<RopeSpec>,
    /// When entries become visible to queries.
    pub visibility: Visibility,
    /// The `-norope` ablation: a model built on this kernel uses no RoPE anywhere (NoPE).
    pub nope_model: bool,
    /// A layer layout (issue 42, `theory/kernels.md`, "Layer layouts"): layer `l` of a model
    /// computes with `layout[l % len]`, each entry a preset name or a whole spec in JSON. The
    /// spec's own knobs are then those of its representative layer
    /// ([`KernelSpec::representative_layer`]). Absent: every layer uses this spec.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "deserialize_layout")]
    pub layout: Option<Vec<KernelSpec>>,
}

/// Reads a `layout` from JSON (here, not in `layout.rs`, which imports this file): each entry a preset name (`"dsv4-csa"`) or a whole spec object.
fn deserialize_layout<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Vec<KernelSpec>>, D::Error> {
    let values: Vec<serde_json::Value> = Vec::deserialize(d)?;
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            serde_json::Value::String(name) => {
                KernelSpec::preset(&name).map_err(|e| D::Error::custom(format!("layout[{i}]: {e}")))
            }
            v @ serde_json::Value::Object(_) => {
                serde_json::from_value(v).map_err(|e| D::Error::custom(format!("layout[{i}]: {e}")))
            }
            other => Err(D::Error::custom(format!("layout[{i}]: must be a preset name or a kernel spec, got {other}"))),
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Some)
}

/// Default RMSNorm epsilon: DeepSeek-V4's `rms_norm_eps` (config.json of V4-Flash and V4-Pro;
/// Hugging Face `DeepseekV4Config.rms_norm_eps`).
pub const RMS_NORM_EPS: f64 = 1e-6;

fn default_rms_norm_eps() -> f64 {
    RMS_NORM_EPS
}

fn default_true() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// Why [`KernelSpec::named`] found no kernel; each caller words it for its own input.
#[derive(Debug)]
pub enum Named {
    /// Both a preset name and a spec were given.
    Both,
    /// Neither was given.
    Neither,
    /// The preset name is not one ([`KernelSpec::preset`]'s error).
    Preset(Error),
    /// The spec does not parse or validate ([`KernelSpec::from_json`]'s error).
    Spec(Error),
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Named::Both => f.write_str("preset and spec: give one of them, not both"),
            Named::Neither => f.write_str("preset or spec: give one of them"),
            Named::Preset(e) | Named::Spec(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Named {}

impl KernelSpec {
    /// A spec from its JSON form (what `phasekv kernel list --json`, dumps' `spec` metadata and
    /// `kernel check --spec` use), with the geometry re-validated (serde does not call
    /// [`Geometry::new`]) and group maps checked before any code indexes with them.
    pub fn from_json(text: &str) -> Result<Self> {
        let spec: KernelSpec =
            serde_json::from_str(text).map_err(|e| Error::invalid("spec", format!("not a kernel spec: {e}")))?;
        spec.check_deserialized()?;
        Ok(spec)
    }

    /// The kernel a caller names from outside: exactly one of a preset name and a JSON spec, as
    /// a dump's metadata, an external kernel's hello, `kernel check` and `kernel list --json`
    /// give it. With [`crate::model::ModelConfig::kernel`] (a model config's kernel), the one
    /// place a name given from outside is resolved; everything downstream carries the spec.
    pub fn named(preset: Option<&str>, spec: Option<&str>) -> std::result::Result<Self, Named> {
        match (preset, spec) {
            (Some(_), Some(_)) => Err(Named::Both),
            (None, None) => Err(Named::Neither),
            (Some(p), None) => Self::preset(p).map_err(Named::Preset),
            (None, Some(j)) => Self::from_json(j).map_err(Named::Spec),
        }
    }

    /// Whether this spec is exactly the listed preset of its name (then its name alone
    /// identifies it, as in a dump's `preset` metadata and a run's `"preset"` form).
    pub fn is_listed(&self) -> bool {
        Self::preset(&self.name).is_ok_and(|p| p == *self)
    }

    /// A spec file (a regular file of at most [`crate::limits::MAX_JSON_BYTES`], read by
    /// [`Self::from_json`]); every error names the file.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = crate::limits::read_text(path, crate::limits::MAX_JSON_BYTES)?;
        Self::from_json(&text).map_err(|e| Error::File { path: path.to_path_buf(), reason: e.to_string() })
    }

    /// The checks a spec read by serde needs (inside [`Self::from_json`], and for the spec a
    /// run's `config.json` carries): the geometry re-validated (serde does not call
    /// [`Geometry::new`]), group maps checked before any code indexes with them, then
    /// [`Self::validate`].
    pub fn check_deserialized(&self) -> Result<()> {
        let g = self.geometry.revalidate()?;
        if let ParamGroups::Map(m) = &self.groups {
            if let Some(&bad) = m.iter().find(|&&k| k >= g.window().max(m.len())) {
                return Err(Error::invalid(
                    "groups",
                    format!("group index {bad} in the group map is not below the window {}", g.window()),
                ));
            }
        }
        self.validate()
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
            rope.validate(None)?;
        }
        if !(self.rms_norm_eps > 0.0 && self.rms_norm_eps.is_finite()) {
            return Err(Error::invalid(
                "rms_norm_eps",
                format!("must be positive and finite, got {}", self.rms_norm_eps),
            ));
        }
        self.check_layout()
    }

    /// [`Self::validate`] plus the checks that need the head width (an absolute RoPE channel
    /// count, an explicit frequency list).
    pub fn validate_for(&self, d_head: usize) -> Result<()> {
        self.validate()?;
        if let Some(rope) = &self.rope {
            rope.validate(Some(d_head))?;
        }
        for (i, layer) in self.layout.iter().flatten().enumerate() {
            layer.validate_for(d_head).map_err(|e| Error::invalid(format!("layout[{i}]"), e.to_string()))?;
        }
        Ok(())
    }

    /// The narrowest head widths from `from` on (at most `count`, below `from + 4096`) that
    /// this spec holds ([`Self::validate_for`]): the one spec check `kernel validate` (the
    /// dump's width) and `kernel check --spec` (the widths it draws cases with) share. None
    /// holding is the error [`Self::validate_for`] gives at the widest width tried, naming the
    /// field (a RoPE channel count above every width, a frequency list no width matches).
    /// Cheap whatever the spec's size: the width-independent checks run once, and the full
    /// check only on widths whose channel count and list length already fit.
    pub fn head_widths(&self, from: usize, count: usize) -> Result<Vec<usize>> {
        const SPAN: usize = 4096;
        self.validate()?;
        let lo = from.max(1);
        let fits_shape = |d: usize| match &self.rope {
            None => true,
            Some(rope) => {
                let count_fits = !matches!(rope.channels, RopeChannels::Count(c) if c > d);
                let list_fits = match &rope.scaling {
                    Some(RopeScaling::Frequencies(f)) => rope.rotated_channels(d) / 2 == f.len(),
                    _ => true,
                };
                count_fits && list_fits
            }
        };
        let mut out = Vec::new();
        for d in (lo..lo + SPAN).filter(|&d| fits_shape(d)) {
            if self.validate_for(d).is_ok() {
                out.push(d);
                if out.len() == count {
                    break;
                }
            }
        }
        if out.is_empty() {
            self.validate_for(lo + SPAN - 1)?;
            return Err(Error::invalid("spec", format!("no head width in {lo}..{} holds it", lo + SPAN)));
        }
        Ok(out)
    }

    /// The position entry `j` carries (the RoPE position rule; a kernel without RoPE uses the
    /// window's first token): the one place this fallback lives.
    ///
    /// With a position offset `p0` ([`Self::at_position_offset`]) every entry carries `p0` more:
    /// the one place the offset is applied, so the f64 reference, the low-precision twin, the
    /// candle kernels and validation all rotate at the absolute position.
    pub fn entry_position(&self, j: usize) -> usize {
        let rope = self.rope.as_ref();
        self.geometry.entry_position(j, rope.map_or(EntryPosition::First, |r| r.position))
            + rope.map_or(0, |r| r.position_offset)
    }

    /// The position offset `p0` of the run this spec describes (0 unless set by
    /// [`Self::at_position_offset`]).
    pub fn position_offset(&self) -> usize {
        self.rope.as_ref().map_or(0, |r| r.position_offset)
    }

    /// This spec for a run whose token 0 sits at absolute position `p0` (token `t` at `p0 + t`,
    /// for RoPE only), checked against the rule of `theory/dump-format.md`, "Position offset":
    /// the spec has RoPE (without it positions enter nothing; only 0 is allowed), `p0` is a
    /// multiple of the stride `S` (the grid phase `(t - o) mod S` of every token is then the
    /// same at `t` and `p0 + t`; every window start moves by whole strides, `start(j) + kS =
    /// start(j + k)` under both alignments, so the window `W` adds no condition), and the
    /// largest position of a run of `tokens` tokens, `p0 + tokens - 1`, is below
    /// [`MAX_ROPE_POSITION`] (positions exact in f32, where correct kernels form the angle).
    pub fn at_position_offset(&self, p0: usize, tokens: usize) -> Result<KernelSpec> {
        let s = self.geometry.stride();
        let max = MAX_ROPE_POSITION.saturating_sub(tokens);
        let max = max - max % s;
        let mut out = self.clone();
        match out.rope.as_mut() {
            None if p0 == 0 => {}
            None => {
                return Err(Error::invalid(
                    "position_offset",
                    format!(
                        "is {p0}, but the spec {} has no RoPE: positions enter nothing, only 0 is allowed",
                        self.name
                    ),
                ))
            }
            Some(_) if !p0.is_multiple_of(s) || p0 > max => {
                return Err(Error::invalid(
                    "position_offset",
                    format!("is {p0}; allowed: a multiple of the stride S = {s} in 0..={max} (for {tokens} tokens)"),
                ))
            }
            Some(rope) => rope.position_offset = p0,
        }
        Ok(out)
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

    /// Whether the gates carry per-offset biases `b_i` (a learned gate with `gate_bias`).
    pub fn has_gate_bias(&self) -> bool {
        self.gate_bias && self.gate != GateKind::Uniform
    }

    /// Whether the value branch has gate parameters of its own.
    pub fn has_value_gate(&self) -> bool {
        !self.shared_kv && !self.tied && self.gate != GateKind::Uniform
    }

    /// A copy with a different gate kind (used by the harness for K7 and K10).
    pub fn with_gate(&self, gate: GateKind) -> Self {
        KernelSpec { gate, ..self.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_named_from_outside_is_exactly_one_of_a_preset_and_a_spec() {
        let w8s4 = KernelSpec::preset("w8s4").unwrap();
        let json = serde_json::to_string(&w8s4).unwrap();
        assert_eq!(KernelSpec::named(Some("w8s4"), None).unwrap(), w8s4);
        assert_eq!(KernelSpec::named(None, Some(&json)).unwrap(), w8s4);
        assert!(matches!(KernelSpec::named(Some("w8s4"), Some(&json)), Err(Named::Both)));
        assert!(matches!(KernelSpec::named(None, None), Err(Named::Neither)));
        let bad = KernelSpec::named(Some("nonesuch"), None).unwrap_err();
        assert!(matches!(bad, Named::Preset(_)) && bad.to_string().contains("preset"), "{bad}");
        let bad = KernelSpec::named(None, Some("{\"name\": 3}")).unwrap_err();
        assert!(matches!(bad, Named::Spec(_)) && bad.to_string().contains("spec"), "{bad}");
    }

    #[test]
    fn only_a_listed_preset_s_exact_knobs_are_listed() {
        let w8s8 = KernelSpec::preset("w8s8").unwrap();
        assert!(w8s8.is_listed());
        // one knob changed under the listed name, or a new name with the listed knobs: not listed
        assert!(!w8s8.with_gate(GateKind::Scalar).is_listed());
        assert!(!KernelSpec { name: "w8s8-mine".into(), ..w8s8 }.is_listed());
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
