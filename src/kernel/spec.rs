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
    /// The last `n` channels exactly (`n` even, at most `d_h`), e.g. `{"count": 24}` of 64.
    Count(usize),
}

/// How the RoPE frequencies are derived from the base `theta`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeScaling {
    /// YaRN as DeepSeek-V4 applies it to its compressed layers (`precompute_freqs_cis`, and
    /// Hugging Face's `yarn` rope type with `attention_factor` 1): base frequencies
    /// `f_k = theta^(-2k/r)`; pairs below the correction range keep `f_k`, pairs above it use
    /// `f_k / factor`, and a linear ramp blends the two in between. No magnitude scaling.
    Yarn {
        /// Context extension factor (DeepSeek-V4: 16).
        factor: f64,
        /// Training context length before extension (DeepSeek-V4: 65536).
        original_max_position: usize,
        /// Rotations at the fast end of the correction range (DeepSeek-V4: 32).
        beta_fast: f64,
        /// Rotations at the slow end of the correction range (DeepSeek-V4: 1).
        beta_slow: f64,
    },
    /// An explicit inverse frequency per rotated channel pair (`r / 2` values, radians per
    /// position), for any other scheme.
    Frequencies(Vec<f64>),
}

/// Partial rotary embedding applied to compressed entries (interleaved pairs, as in
/// DeepSeek-V4: channel pairs `(2k, 2k+1)` of the rotated slice, frequency `theta^(-2k/r)`,
/// optionally rescaled by [`RopeScaling`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RopeSpec {
    /// Which channels rotate.
    pub channels: RopeChannels,
    /// Which position the entry carries.
    pub position: EntryPosition,
    /// The RoPE base.
    pub theta: f64,
    /// Frequency scaling (none: plain `theta^(-2k/r)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<RopeScaling>,
}

impl RopeSpec {
    /// Plain RoPE (no scaling) with base `theta`.
    pub fn plain(channels: RopeChannels, position: EntryPosition, theta: f64) -> Self {
        RopeSpec { channels, position, theta, scaling: None }
    }

    /// Number of rotated channels `r` for a head of width `d_head` (always even, `<= d_head`).
    pub fn rotated_channels(&self, d_head: usize) -> usize {
        let r = match self.channels {
            RopeChannels::All => d_head,
            RopeChannels::Fraction(den) => (d_head / den.max(1)).max(2).min(d_head),
            RopeChannels::Count(n) => n.min(d_head),
        };
        r & !1
    }

    /// The inverse frequency of every rotated pair (`r / 2` values): the one place the RoPE
    /// frequencies are computed, for the reference, the tensor path and the decoder.
    pub fn inv_frequencies(&self, r: usize) -> Vec<f64> {
        let half = r / 2;
        let base: Vec<f64> = (0..half).map(|k| self.theta.powf(-(2.0 * k as f64) / r as f64)).collect();
        match &self.scaling {
            None => base,
            Some(RopeScaling::Frequencies(f)) => f.clone(),
            Some(RopeScaling::Yarn { factor, original_max_position, beta_fast, beta_slow }) => {
                // Correction range: the pair index whose wavelength makes `rot` full turns over
                // the original context, floor/ceil, clamped to [0, r - 1] (DeepSeek-V4 and HF).
                let dim_of = |rot: f64| {
                    r as f64 * (*original_max_position as f64 / (rot * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * self.theta.ln())
                };
                let low = dim_of(*beta_fast).floor().max(0.0);
                let mut high = dim_of(*beta_slow).ceil().min(r as f64 - 1.0);
                if low == high {
                    high += 0.001;
                }
                base.iter()
                    .enumerate()
                    .map(|(k, &f)| {
                        let ramp = ((k as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        f / factor * ramp + f * (1.0 - ramp)
                    })
                    .collect()
            }
        }
    }

    /// Checks theta, the channel count against `d_head` (when known) and the scaling.
    fn validate(&self, d_head: Option<usize>) -> Result<()> {
        if !(self.theta > 0.0 && self.theta.is_finite()) {
            return Err(Error::invalid("rope.theta", format!("must be positive and finite, got {}", self.theta)));
        }
        match self.channels {
            RopeChannels::Fraction(0) => {
                return Err(Error::invalid("rope.channels", "a fraction needs a positive denominator, got 0"))
            }
            RopeChannels::Count(n) if n == 0 || n % 2 == 1 => {
                return Err(Error::invalid("rope.channels.count", format!("must be even and at least 2, got {n}")))
            }
            RopeChannels::Count(n) if d_head.is_some_and(|d| n > d) => {
                return Err(Error::invalid(
                    "rope.channels.count",
                    format!("{n} exceeds the head width d_head = {}", d_head.unwrap_or(0)),
                ))
            }
            _ => {}
        }
        match &self.scaling {
            None => {}
            Some(RopeScaling::Yarn { factor, original_max_position, beta_fast, beta_slow }) => {
                if !(factor.is_finite() && *factor >= 1.0) {
                    return Err(Error::invalid(
                        "rope.scaling.yarn.factor",
                        format!("must be finite and >= 1, got {factor}"),
                    ));
                }
                if *original_max_position == 0 {
                    return Err(Error::invalid("rope.scaling.yarn.original_max_position", "must be at least 1, got 0"));
                }
                if !(beta_fast.is_finite() && beta_slow.is_finite() && *beta_slow > 0.0 && beta_fast > beta_slow) {
                    return Err(Error::invalid(
                        "rope.scaling.yarn",
                        format!(
                            "needs finite beta_fast > beta_slow > 0, got beta_fast {beta_fast}, beta_slow {beta_slow}"
                        ),
                    ));
                }
            }
            Some(RopeScaling::Frequencies(f)) => {
                if let Some((k, v)) = f.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                    return Err(Error::invalid(
                        "rope.scaling.frequencies",
                        format!("entry {k} is {v}, must be finite"),
                    ));
                }
                if let Some(d) = d_head {
                    let half = self.rotated_channels(d) / 2;
                    if f.len() != half {
                        return Err(Error::invalid(
                            "rope.scaling.frequencies",
                            format!("needs one frequency per rotated pair ({half} for d_head {d}), got {}", f.len()),
                        ));
                    }
                }
            }
        }
        Ok(())
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
}

/// Default RMSNorm epsilon: DeepSeek-V4's `rms_norm_eps` (config.json of V4-Flash and V4-Pro;
/// Hugging Face `DeepseekV4Config.rms_norm_eps`).
pub const RMS_NORM_EPS: f64 = 1e-6;

fn default_rms_norm_eps() -> f64 {
    RMS_NORM_EPS
}

/// RoPE base of the paper's `w{W}s{S}` presets (the common Llama/Qwen base).
pub const ROPE_THETA: f64 = 10_000.0;

/// DeepSeek-V4's RoPE base for compressed (CSA/HCA) layers: `compress_rope_theta` = 160000
/// (config.json of V4-Flash and V4-Pro; HF `DeepseekV4Config.compress_rope_theta`).
pub const DSV4_COMPRESS_ROPE_THETA: f64 = 160_000.0;

/// DeepSeek-V4's YaRN on compressed layers: `rope_scaling` = {factor 16,
/// original_max_position_embeddings 65536, beta_fast 32, beta_slow 1} (config.json of
/// V4-Flash and V4-Pro; the reference `inference/config.json` keys `rope_factor` 16 and
/// `original_seq_len` 65536). Applied without magnitude scaling (HF forces
/// `attention_factor` = 1 because the reference does not multiply cos/sin by YaRN's mscale).
pub fn dsv4_yarn() -> RopeScaling {
    RopeScaling::Yarn { factor: 16.0, original_max_position: 65_536, beta_fast: 32.0, beta_slow: 1.0 }
}

/// DeepSeek-V4 rotates the last `qk_rope_head_dim` = 64 of `head_dim` = 512 channels.
pub const DSV4_ROPE_FRACTION: usize = 8;

/// DeepSeek-V4's HCA compression rate `m'` (`compress_rates.HCA`).
pub const DSV4_HCA_RATE: usize = 128;

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
                    "unknown preset '{name}'; expected full, dsv4-csa, dsv4-hca, dsv4-hca{{m}}, or w{{W}}s{{S}} \
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
                    rms_norm_eps: RMS_NORM_EPS,
                    rope: Some(dsv4_rope(EntryPosition::StrideStart)),
                    visibility: Visibility::Inclusive,
                    nope_model: false,
                });
            }
            _ => {}
        }
        if let Some(rate) = name.strip_prefix("dsv4-hca") {
            // `dsv4-hca` is the released m' = 128; `dsv4-hca{m}` the same kernel at rate m
            // (Hugging Face's tiny test configs use small rates).
            let m = if rate.is_empty() { DSV4_HCA_RATE } else { rate.parse().map_err(|_| unknown())? };
            let geometry = Geometry::new(m, m, Alignment::Start)?;
            return Ok(KernelSpec {
                name: name.into(),
                geometry,
                gate: GateKind::Vector,
                groups: ParamGroups::Shared,
                tied: false,
                shared_kv: true,
                rms_norm: true,
                rms_norm_eps: RMS_NORM_EPS,
                rope: Some(dsv4_rope(EntryPosition::First)),
                visibility: Visibility::Inclusive,
                nope_model: false,
            });
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

    /// A spec from its JSON form (what `phasekv kernel list --json`, dumps' `spec` metadata and
    /// `kernel check --spec` use), with the geometry re-validated (serde does not call
    /// [`Geometry::new`]) and group maps checked before any code indexes with them.
    pub fn from_json(text: &str) -> Result<Self> {
        let spec: KernelSpec =
            serde_json::from_str(text).map_err(|e| Error::invalid("spec", format!("not a kernel spec: {e}")))?;
        let g = spec.geometry;
        Geometry::new(g.window(), g.stride(), g.alignment())?;
        if let ParamGroups::Map(m) = &spec.groups {
            if let Some(&bad) = m.iter().find(|&&k| k >= g.window().max(m.len())) {
                return Err(Error::invalid(
                    "groups",
                    format!("group index {bad} in the group map is not below the window {}", g.window()),
                ));
            }
        }
        spec.validate()?;
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
            rms_norm_eps: RMS_NORM_EPS,
            rope: Some(RopeSpec::plain(RopeChannels::All, EntryPosition::First, ROPE_THETA)),
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
            rope.validate(None)?;
        }
        if !(self.rms_norm_eps > 0.0 && self.rms_norm_eps.is_finite()) {
            return Err(Error::invalid(
                "rms_norm_eps",
                format!("must be positive and finite, got {}", self.rms_norm_eps),
            ));
        }
        Ok(())
    }

    /// [`Self::validate`] plus the checks that need the head width (an absolute RoPE channel
    /// count, an explicit frequency list).
    pub fn validate_for(&self, d_head: usize) -> Result<()> {
        self.validate()?;
        if let Some(rope) = &self.rope {
            rope.validate(Some(d_head))?;
        }
        Ok(())
    }

    /// The position entry `j` carries (the RoPE position rule; a kernel without RoPE uses the
    /// window's first token): the one place this fallback lives.
    pub fn entry_position(&self, j: usize) -> usize {
        self.geometry.entry_position(j, self.rope.as_ref().map_or(EntryPosition::First, |r| r.position))
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

/// DeepSeek-V4's RoPE on compressed entries: last 64 of 512 channels, base 160000, YaRN.
fn dsv4_rope(position: EntryPosition) -> RopeSpec {
    RopeSpec {
        channels: RopeChannels::Fraction(DSV4_ROPE_FRACTION),
        position,
        theta: DSV4_COMPRESS_ROPE_THETA,
        scaling: Some(dsv4_yarn()),
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
        let rope = csa.rope.clone().unwrap();
        assert_eq!(rope.rotated_channels(512), 64);
        assert_eq!(rope.theta, 160_000.0);
        // DeepSeek-V4's YaRN on 64 channels, base 160000: the correction range is pairs
        // 15..25 (shared/reference/deepseek-v4-compressors.md §2.4): pairs up to 15 keep the base
        // frequency, pairs from 25 on are divided by 16, pairs in between are blended.
        let f = rope.inv_frequencies(64);
        let plain = RopeSpec::plain(rope.channels, rope.position, rope.theta).inv_frequencies(64);
        assert_eq!(f.len(), 32);
        for k in 0..=15 {
            assert_eq!(f[k], plain[k], "pair {k}");
        }
        for k in 25..32 {
            assert!((f[k] - plain[k] / 16.0).abs() <= 1e-15 * plain[k], "pair {k}");
        }
        for k in 16..25 {
            assert!(f[k] < plain[k] && f[k] > plain[k] / 16.0, "pair {k}");
        }
        assert!(csa.shared_kv && csa.rms_norm && !csa.has_value_gate());
        let hca = KernelSpec::preset("dsv4-hca").unwrap();
        assert_eq!(hca.num_groups(), 1);
        assert_eq!(hca.geometry.window(), 128);
        let hca8 = KernelSpec::preset("dsv4-hca8").unwrap();
        assert_eq!((hca8.geometry.window(), hca8.geometry.stride()), (8, 8));
        assert_eq!(hca8.rope, hca.rope);
    }

    #[test]
    fn rope_channel_counts_and_frequency_lists_are_validated() {
        let mut spec = KernelSpec::preset("w4s4").unwrap();
        let rope = spec.rope.as_mut().unwrap();
        rope.channels = RopeChannels::Count(24);
        assert_eq!(rope.rotated_channels(64), 24);
        spec.validate_for(64).unwrap();
        assert!(spec.validate_for(16).unwrap_err().to_string().contains("rope.channels.count"));
        spec.rope.as_mut().unwrap().channels = RopeChannels::Count(3);
        assert!(spec.validate().unwrap_err().to_string().contains("even"));
        let rope = spec.rope.as_mut().unwrap();
        rope.channels = RopeChannels::Count(4);
        rope.scaling = Some(RopeScaling::Frequencies(vec![1.0, 0.5]));
        spec.validate_for(8).unwrap();
        assert_eq!(spec.rope.as_ref().unwrap().inv_frequencies(4), vec![1.0, 0.5]);
        spec.rope.as_mut().unwrap().scaling = Some(RopeScaling::Frequencies(vec![1.0]));
        assert!(spec.validate_for(8).unwrap_err().to_string().contains("one frequency per rotated pair"));
        spec.rms_norm_eps = 0.0;
        assert!(spec.validate().unwrap_err().to_string().contains("rms_norm_eps"));
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
