//! The preset registry: every named kernel in one table ([`ALL`]: name, family, one-line
//! description, constructor), from which `phasekv kernel list`, the error for an unknown name and
//! the tests derive. Adding a named preset is one row here (plus a test that uses it).
//!
//! Besides the listed names, two families are open-ended and parsed from the name:
//! `w{W}s{S}` (any `1 <= S <= W`) with an optional ablation suffix ([`ABLATIONS`]), and
//! `dsv4-hca{m}` (DeepSeek-V4's HCA kernel at rate `m`), and `dsv41-c{m}` (DeepSeek-V4.1's
//! compressor at ratio `m`).

use super::kernel_spec::{KernelSpec, RMS_NORM_EPS};
use super::knobs::{GateKind, ParamGroups, Stagger};
use super::rope::{
    dsv4_rope, dsv4_yarn, RopeChannels, RopeSpec, DSV41_ROPE_CHANNELS, DSV4_COMPRESS_ROPE_THETA, DSV4_HCA_RATE,
    ROPE_THETA,
};
use crate::geometry::{Alignment, EntryPosition, Geometry, Visibility};
use crate::{Error, Result};

/// The family a named preset belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// The paper's generic kernel at one geometry.
    Paper,
    /// A paper geometry with one knob changed ([`ABLATIONS`]).
    Ablation,
    /// DeepSeek-V4's released compressors.
    DeepSeekV4,
    /// DeepSeek-V4.1's compressor (mlx-lm, vLLM, SGLang).
    DeepSeekV41,
    /// A paper geometry whose KV heads or layers sit on staggered grids ([`STAGGERS`]).
    Stagger,
    /// A layer layout: per-layer kernels, as DeepSeek-V4 and V4.1 alternate them by layer.
    Layout,
    /// The uncompressed baseline.
    Baseline,
}

impl Family {
    /// A short name (`paper`, `ablation`, `dsv4`, `dsv41`, `stagger`, `layout`, `baseline`).
    pub fn name(self) -> &'static str {
        match self {
            Family::Paper => "paper",
            Family::Ablation => "ablation",
            Family::DeepSeekV4 => "dsv4",
            Family::DeepSeekV41 => "dsv41",
            Family::Stagger => "stagger",
            Family::Layout => "layout",
            Family::Baseline => "baseline",
        }
    }
}

/// One named preset.
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    /// The name (`w8s4`, `dsv4-csa` ...): public API.
    pub name: &'static str,
    /// Its family.
    pub family: Family,
    /// One line saying what it is.
    pub about: &'static str,
    build: fn(&str) -> Result<KernelSpec>,
}

impl Preset {
    /// The spec.
    pub fn spec(&self) -> Result<KernelSpec> {
        (self.build)(self.name)
    }
}

/// A row of the table: a preset with every field given.
const fn row(name: &'static str, family: Family, about: &'static str, build: fn(&str) -> Result<KernelSpec>) -> Preset {
    Preset { name, family, about, build }
}

/// A row for a paper geometry `w{W}s{S}`.
const fn paper(name: &'static str, about: &'static str) -> Preset {
    row(name, Family::Paper, about, windowed)
}

/// A row for a paper geometry with one knob changed, `w{W}s{S}-suffix`.
const fn ablation(name: &'static str, about: &'static str) -> Preset {
    row(name, Family::Ablation, about, windowed)
}

/// A row for a paper geometry on staggered grids, `w{W}s{S}-stagger-{heads,layers}`.
const fn stagger(name: &'static str, about: &'static str) -> Preset {
    row(name, Family::Stagger, about, windowed)
}

/// Every named preset, in a stable order: the paper geometries each followed by its four
/// ablations (`w16s4`, added later, lists none: its ablations parse as the open-ended
/// `w{W}s{S}-suffix` family), then DeepSeek-V4's kernels and the uncompressed baseline.
pub const ALL: &[Preset] = &[
    paper("w4s4", "paper geometry: window 4, stride 4 (no overlap)"),
    ablation("w4s4-scalar", "w4s4 ablation: one gate logit per slot, not per channel"),
    ablation("w4s4-uniform", "w4s4 ablation: no learned gate: mean pooling"),
    ablation("w4s4-tied", "w4s4 ablation: value gate tied to the key gate"),
    ablation("w4s4-norope", "w4s4 ablation: no RoPE on entries, and a NoPE model"),
    paper("w8s4", "paper geometry: window 8, stride 4 (overlap 2)"),
    ablation("w8s4-scalar", "w8s4 ablation: one gate logit per slot, not per channel"),
    ablation("w8s4-uniform", "w8s4 ablation: no learned gate: mean pooling"),
    ablation("w8s4-tied", "w8s4 ablation: value gate tied to the key gate"),
    ablation("w8s4-norope", "w8s4 ablation: no RoPE on entries, and a NoPE model"),
    paper("w8s6", "paper geometry: window 8, stride 6 (uneven overlap)"),
    ablation("w8s6-scalar", "w8s6 ablation: one gate logit per slot, not per channel"),
    ablation("w8s6-uniform", "w8s6 ablation: no learned gate: mean pooling"),
    ablation("w8s6-tied", "w8s6 ablation: value gate tied to the key gate"),
    ablation("w8s6-norope", "w8s6 ablation: no RoPE on entries, and a NoPE model"),
    paper("w8s8", "paper geometry: window 8, stride 8 (no overlap)"),
    ablation("w8s8-scalar", "w8s8 ablation: one gate logit per slot, not per channel"),
    ablation("w8s8-uniform", "w8s8 ablation: no learned gate: mean pooling"),
    ablation("w8s8-tied", "w8s8 ablation: value gate tied to the key gate"),
    ablation("w8s8-norope", "w8s8 ablation: no RoPE on entries, and a NoPE model"),
    paper(
        "w16s4",
        "window 16, stride 4 (overlap 4): does the period follow the stride when every token sits in four windows?",
    ),
    paper("w12s12", "paper geometry: window 12, stride 12 (no overlap)"),
    ablation("w12s12-scalar", "w12s12 ablation: one gate logit per slot, not per channel"),
    ablation("w12s12-uniform", "w12s12 ablation: no learned gate: mean pooling"),
    ablation("w12s12-tied", "w12s12 ablation: value gate tied to the key gate"),
    ablation("w12s12-norope", "w12s12 ablation: no RoPE on entries, and a NoPE model"),
    stagger(
        "w8s8-stagger-heads",
        "w8s8 with KV head h on the grid offset by h*S/n_kv_head (2 heads: 0 and 4); same parameters, same \
         entries per S tokens (a shifted head adds one leading partial window)",
    ),
    stagger(
        "w8s8-stagger-layers",
        "w8s8 with layer l on the grid offset by l*S/n_layer (2 layers: 0 and 4); same parameters, same \
         entries per S tokens (a shifted layer adds one leading partial window)",
    ),
    stagger(
        "w8s4-stagger-layers",
        "w8s4 with layer l on the grid offset by l*S/n_layer (2 layers: 0 and 2); with model.n_kv_head 1 the \
         DeepSeek-like arm w8s4-kv1-stagger-layers; same parameters, same entries per S tokens (+1 leading)",
    ),
    row(
        "dsv4-csa",
        Family::DeepSeekV4,
        "DeepSeek-V4 CSA: W=8 S=4 pad-left, two groups, shared K/V, RMSNorm, partial YaRN RoPE",
        dsv4_csa,
    ),
    row(
        "dsv4-hca",
        Family::DeepSeekV4,
        "DeepSeek-V4 HCA: W=S=128, shared K/V, RMSNorm, partial YaRN RoPE (dsv4-hca{m}: rate m)",
        dsv4_hca,
    ),
    row("dsv41-c1", Family::DeepSeekV41, DSV41_ABOUT, dsv41),
    row("dsv41-c2", Family::DeepSeekV41, DSV41_ABOUT, dsv41),
    row("dsv41-c4", Family::DeepSeekV41, DSV41_ABOUT, dsv41),
    row("dsv41-c128", Family::DeepSeekV41, DSV41_ABOUT, dsv41),
    row(
        "dsv4-layout",
        Family::Layout,
        "DeepSeek-V4's layer layout, scaled: dsv4-csa on even layers, dsv4-hca16 on odd layers (HCA at rate 16 \
         for V4's 128, so a 98-token sequence holds 6 HCA entries)",
        dsv4_layout,
    ),
    row(
        "dsv41-layout",
        Family::Layout,
        "DeepSeek-V4.1's compressor in V4's layer layout, scaled: dsv41-c4 on even layers, dsv41-c16 on odd \
         layers (ratios 4 and 128 as SGLang's V4.1 model accepts them, 128 scaled to 16); d_head >= 64",
        dsv41_layout,
    ),
    row("full", Family::Baseline, "no compression: every token is its own entry (W=S=1, uniform)", full),
];

/// One ablation: the `-suffix` and the knob it changes.
pub type Ablation = (&'static str, fn(&mut KernelSpec));

/// The single-knob ablations a `w{W}s{S}` name takes as a `-suffix`.
pub const ABLATIONS: &[Ablation] =
    &[("scalar", ablate_scalar), ("uniform", ablate_uniform), ("tied", ablate_tied), ("norope", ablate_norope)];

fn ablate_scalar(spec: &mut KernelSpec) {
    spec.gate = GateKind::Scalar;
}

fn ablate_uniform(spec: &mut KernelSpec) {
    spec.gate = GateKind::Uniform;
}

fn ablate_tied(spec: &mut KernelSpec) {
    spec.tied = true;
}

fn ablate_norope(spec: &mut KernelSpec) {
    spec.rope = None;
    spec.nope_model = true;
}

/// The stagger rules a `w{W}s{S}` name takes as a `-suffix` (after an ablation suffix, if any:
/// `w8s4-tied-stagger-heads`).
pub const STAGGERS: &[(&str, Stagger)] = &[("stagger-heads", Stagger::Heads), ("stagger-layers", Stagger::Layers)];

/// The listed preset with this name.
pub fn by_name(name: &str) -> Option<&'static Preset> {
    ALL.iter().find(|p| p.name == name)
}

/// Whether `name` is the uncompressed baseline (full attention): the one place that says so,
/// from the registry's family, not from the spelling of a name.
pub fn is_baseline(name: &str) -> bool {
    by_name(name).is_some_and(|p| p.family == Family::Baseline)
}

/// The listed names, in table order.
pub fn names() -> Vec<&'static str> {
    ALL.iter().map(|p| p.name).collect()
}

/// Every listed preset's spec, in table order (what the kernels unit of a reproduction and its
/// plan's validation check).
pub fn listed_specs() -> Result<Vec<KernelSpec>> {
    ALL.iter().map(|p| KernelSpec::preset(p.name)).collect()
}

/// The listed names as owned strings (what callers that build labels use).
pub fn preset_names() -> Vec<String> {
    ALL.iter().map(|p| p.name.to_string()).collect()
}

/// The error for a name that is neither listed nor of an open-ended family, derived from the
/// table: one line naming the field, the value and what is accepted.
fn unknown(name: &str) -> Error {
    let listed: Vec<&str> =
        ALL.iter().filter(|p| !matches!(p.family, Family::Ablation | Family::Stagger)).map(|p| p.name).collect();
    let suffixes: Vec<String> =
        ABLATIONS.iter().map(|(s, _)| s).chain(STAGGERS.iter().map(|(s, _)| s)).map(|s| format!("-{s}")).collect();
    Error::invalid(
        "preset",
        format!(
            "unknown preset '{name}'; expected one of {}, dsv4-hca{{m}}, dsv41-c{{m}}, or w{{W}}s{{S}} (1 <= S <= W) with an \
             optional suffix {} (e.g. w8s4-tied); `phasekv kernel list` shows them",
            listed.join(", "),
            suffixes.join(", ")
        ),
    )
}

impl KernelSpec {
    /// The spec of a named preset: a listed one ([`ALL`]), `dsv4-hca{m}`, `dsv41-c{m}` or
    /// `w{W}s{S}[-suffix]`, optionally followed by `@o{k}` (that kernel on the grid offset by
    /// `k`, `0 <= k < S`, with no stagger rule).
    /// An unknown name is an error naming the field `preset` and the accepted forms.
    pub fn preset(name: &str) -> Result<Self> {
        // `NAME@o{k}`: that preset's kernel on the grid with offset k (one head of a staggered
        // model; what [`KernelSpec::grid_label`] writes and a dump's `preset` may name).
        // Parsed strictly: one suffix, decimal digits only (`w8s8@o4@o2`, `w8s8@o+4` refused).
        if let Some((base, offset)) = name.split_once("@o") {
            if base.contains('@') || offset.is_empty() || !offset.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Error::invalid(
                    "preset",
                    format!("'{name}': a grid takes one suffix @o{{k}}, k in decimal digits (e.g. w8s8@o4)"),
                ));
            }
            let offset: usize = offset.parse().map_err(|_| unknown(name))?;
            let spec = KernelSpec::preset(base)?;
            let geometry = spec.geometry.with_offset(offset)?;
            return Ok(KernelSpec { geometry, stagger: Stagger::None, ..spec });
        }
        match by_name(name) {
            Some(p) => p.spec(),
            None if name.starts_with("dsv4-hca") => dsv4_hca(name),
            None if name.starts_with("dsv41-c") => dsv41(name),
            None => windowed(name),
        }
    }

    /// The paper's generic kernel: vector gates, per-offset parameters, untied, separate K/V,
    /// no RMSNorm, RoPE on every channel at the entry's first token.
    fn generic(name: &str, geometry: Geometry) -> Self {
        KernelSpec {
            name: name.into(),
            geometry,
            stagger: Stagger::None,
            gate: GateKind::Vector,
            groups: ParamGroups::PerOffset,
            gate_bias: true,
            tied: false,
            shared_kv: false,
            rms_norm: false,
            rms_norm_eps: RMS_NORM_EPS,
            rope: Some(RopeSpec::plain(RopeChannels::All, EntryPosition::First, ROPE_THETA)),
            visibility: Visibility::Inclusive,
            nope_model: false,
            layout: None,
        }
    }
}

/// `w{W}s{S}` with an optional ablation suffix, then an optional stagger suffix.
fn windowed(name: &str) -> Result<KernelSpec> {
    let (name_unstaggered, stagger) = match STAGGERS.iter().find(|(s, _)| name.ends_with(&format!("-{s}"))) {
        Some((s, rule)) => (&name[..name.len() - s.len() - 1], *rule),
        None => (name, Stagger::None),
    };
    let (base, suffix) = match name_unstaggered.split_once('-') {
        Some((b, s)) => (b, Some(s)),
        None => (name_unstaggered, None),
    };
    let rest = base.strip_prefix('w').ok_or_else(|| unknown(name))?;
    let (w, s) = rest.split_once('s').ok_or_else(|| unknown(name))?;
    let window: usize = w.parse().map_err(|_| unknown(name))?;
    let stride: usize = s.parse().map_err(|_| unknown(name))?;
    let geometry = Geometry::new(window, stride, Alignment::Start)?;
    let mut spec = KernelSpec::generic(name, geometry);
    if let Some(suffix) = suffix {
        let (_, ablate) = ABLATIONS.iter().find(|(s, _)| *s == suffix).ok_or_else(|| unknown(name))?;
        ablate(&mut spec);
    }
    spec.stagger = stagger;
    Ok(spec)
}

/// No compression: `W = S = 1`, uniform pooling, one shared projection.
fn full(name: &str) -> Result<KernelSpec> {
    let mut spec = KernelSpec::generic(name, Geometry::new(1, 1, Alignment::Start)?);
    spec.gate = GateKind::Uniform;
    spec.groups = ParamGroups::Shared;
    Ok(spec)
}

/// DeepSeek-V4's CSA compressor.
fn dsv4_csa(name: &str) -> Result<KernelSpec> {
    let spec = KernelSpec::generic(name, Geometry::new(8, 4, Alignment::PadLeft)?);
    Ok(KernelSpec {
        groups: ParamGroups::Map(vec![0, 0, 0, 0, 1, 1, 1, 1]),
        shared_kv: true,
        rms_norm: true,
        rope: Some(dsv4_rope(EntryPosition::StrideStart)),
        ..spec
    })
}

/// DeepSeek-V4's HCA compressor: `dsv4-hca` is the released `m' = 128`, `dsv4-hca{m}` the same
/// kernel at rate `m` (Hugging Face's tiny test configs use small rates).
fn dsv4_hca(name: &str) -> Result<KernelSpec> {
    let rate = name.strip_prefix("dsv4-hca").ok_or_else(|| unknown(name))?;
    let m = if rate.is_empty() { DSV4_HCA_RATE } else { rate.parse().map_err(|_| unknown(name))? };
    let spec = KernelSpec::generic(name, Geometry::new(m, m, Alignment::Start)?);
    Ok(KernelSpec {
        groups: ParamGroups::Shared,
        shared_kv: true,
        rms_norm: true,
        rope: Some(dsv4_rope(EntryPosition::First)),
        ..spec
    })
}

/// What `phasekv kernel list` says of every `dsv41-c{m}` row.
const DSV41_ABOUT: &str =
    "DeepSeek-V4.1: W=S=ratio, one vector gate without position bias, shared K/V, RMSNorm, RoPE on the last 64 \
     channels (theta 160000, YaRN) at the group's first token (dsv41-c{m}: ratio m)";

/// DeepSeek-V4.1's compressor at ratio `m` (`dsv41-c{m}`, any `m >= 1`), as mlx-lm 0.32.2
/// (`mlx_lm/models/deepseek_v41.py`, `Compressor`), vLLM 0.33.0 (its V4.1 Triton kernels,
/// ratios 1 and 2) and SGLang 0.5.23 (`DeepseekV41Compressor`) all compute it
/// (`../shared/reference/shipped-compressors.md`): non-overlapping groups of `m` tokens, one
/// vector gate shared over the group's slots with **no position bias** (`gate_bias: false`),
/// softmax over the group, RMSNorm (eps [`RMS_NORM_EPS`] = 1e-6, the checkpoints' `rms_norm_eps`;
/// mlx-lm's constructor defaults to 1e-20, so its adapter passes the spec's eps), RoPE on the last
/// [`DSV41_ROPE_CHANNELS`] channels at the group's first token, base 160000 with DeepSeek-V4's
/// YaRN ([`super::rope::dsv4_yarn`]: all three packages read the same `rope_scaling`). At ratio
/// 1 none of them has a gate (a one-slot softmax is 1: mlx-lm's `Compressor`, vLLM's `has_gate`,
/// SGLang's plain projection), so `dsv41-c1` is uniform: no `gate_k.z` to dump.
fn dsv41(name: &str) -> Result<KernelSpec> {
    let ratio = name.strip_prefix("dsv41-c").ok_or_else(|| unknown(name))?;
    let m: usize = ratio.parse().map_err(|_| unknown(name))?;
    let spec = KernelSpec::generic(name, Geometry::new(m, m, Alignment::Start)?);
    Ok(KernelSpec {
        gate: if m == 1 { GateKind::Uniform } else { GateKind::Vector },
        groups: ParamGroups::Shared,
        gate_bias: false,
        shared_kv: true,
        rms_norm: true,
        rope: Some(RopeSpec {
            channels: RopeChannels::Count(DSV41_ROPE_CHANNELS),
            position: EntryPosition::First,
            theta: DSV4_COMPRESS_ROPE_THETA,
            scaling: Some(dsv4_yarn()),
            position_offset: 0,
        }),
        ..spec
    })
}

/// The HCA rate of the layout presets: DeepSeek-V4's 128 scaled to 16 so that every sequence
/// of the lab's task holds several HCA entries (`theory/kernels.md`, "Layer layouts": V4's
/// CSA : HCA = 4 : 128 = 1 : 32 becomes 4 : 16 = 1 : 4).
pub const LAYOUT_HCA_RATE: usize = 16;

/// DeepSeek-V4's layer layout (`../shared/reference/deepseek-v4-compressors.md` §2.2: CSA on
/// even layers, HCA on odd layers from layer 2 on), scaled ([`LAYOUT_HCA_RATE`]). The first two
/// layers of V4-Flash (sliding window only) and V4-Pro (HCA) are left out: the backbone's models
/// have 2 to 4 layers, every one of them in the interleave.
fn dsv4_layout(name: &str) -> Result<KernelSpec> {
    let hca = KernelSpec::preset(&format!("dsv4-hca{LAYOUT_HCA_RATE}"))?;
    KernelSpec::with_layout(name, vec![KernelSpec::preset("dsv4-csa")?, hca])
}

/// DeepSeek-V4.1's compressor in V4's layer layout, scaled the same way: `dsv41-c4` on even
/// layers, `dsv41-c16` on odd layers. The shipped implementations configure the ratios per
/// layer from the checkpoint's `compress_ratios` (mlx-lm 0.32.2 `mlx_lm/models/deepseek_v41.py`,
/// `Attention.__init__`: `ratio = compress_ratios[layer_id]`); SGLang 0.5.23
/// (`sglang/srt/models/deepseek_v4.py`, the attention's `assert compress_ratio in (0, 1, 2, 4,
/// 128)`) accepts 0, 1, 2, 4 and 128 per layer. No package ships a V4.1 checkpoint's array, so
/// the layout keeps V4's interleave of 4 and 128 (`../shared/reference/shipped-compressors.md`).
fn dsv41_layout(name: &str) -> Result<KernelSpec> {
    let wide = KernelSpec::preset(&format!("dsv41-c{LAYOUT_HCA_RATE}"))?;
    KernelSpec::with_layout(name, vec![KernelSpec::preset("dsv41-c4")?, wide])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_preset_parses_and_validates() {
        for p in ALL {
            let spec = KernelSpec::preset(p.name).unwrap();
            spec.validate().unwrap();
            assert_eq!(spec.name, p.name);
            assert_eq!(p.family == Family::Ablation, ABLATIONS.iter().any(|(s, _)| p.name.ends_with(&format!("-{s}"))));
            assert_eq!(p.family == Family::Stagger, spec.is_staggered(), "{}", p.name);
            assert_eq!(p.family == Family::Layout, spec.is_layout(), "{}", p.name);
        }
        let mut seen = std::collections::HashSet::new();
        assert!(ALL.iter().all(|p| seen.insert(p.name)), "duplicate preset name");
    }

    #[test]
    fn unknown_and_impossible_presets_are_one_line_errors() {
        for bad in ["w8", "w8s", "x8s4", "w8s4-fast", "", "wAs4", "w8s4-", "dsv4-hcaX", "dsv41-c", "dsv41-cX"] {
            let e = KernelSpec::preset(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid preset"), "{bad}: {e}");
            assert!(!e.contains('\n'));
            for p in ALL.iter().filter(|p| !matches!(p.family, Family::Ablation | Family::Stagger)) {
                assert!(e.contains(p.name), "{bad}: the error lists {}: {e}", p.name);
            }
        }
        let e = KernelSpec::preset("w4s8").unwrap_err().to_string();
        assert!(e.contains("stride"), "{e}");
        let e = KernelSpec::preset("w0s0").unwrap_err().to_string();
        assert!(e.contains("window"), "{e}");
        let e = KernelSpec::preset("dsv41-c0").unwrap_err().to_string();
        assert!(e.contains("window"), "{e}");
    }

    #[test]
    fn stagger_suffixes_keep_everything_but_the_rule() {
        for (base, suffix, rule) in [
            ("w8s8", "stagger-heads", super::super::Stagger::Heads),
            ("w8s4-tied", "stagger-layers", super::super::Stagger::Layers),
        ] {
            let staggered = KernelSpec::preset(&format!("{base}-{suffix}")).unwrap();
            let twin = KernelSpec::preset(base).unwrap();
            assert_eq!(staggered.stagger, rule);
            assert_eq!(
                KernelSpec { name: twin.name.clone(), stagger: twin.stagger, ..staggered.clone() },
                twin,
                "{base}-{suffix} differs from its twin in more than the rule"
            );
            let json = serde_json::to_string(&staggered).unwrap();
            assert_eq!(KernelSpec::from_json(&json).unwrap(), staggered, "{json}");
        }
        assert!(!serde_json::to_string(&KernelSpec::preset("w8s8").unwrap()).unwrap().contains("stagger"));
        for bad in ["w8s8-stagger", "w8s8-stagger-heads-tied", "w8s8-stagger-rows"] {
            assert!(KernelSpec::preset(bad).unwrap_err().to_string().contains("-stagger-heads"), "{bad}");
        }
        // One `@o{k}` per grid, digits only: nothing is silently re-read as another offset.
        for bad in ["w8s8@oX", "w8s8@o", "w8s8@o4@o2", "w8s8@o+4", "w8s8@o-0", "w8s8@o 4", "w8s8@o4@o", "w8s8@@o4"] {
            let e = KernelSpec::preset(bad).unwrap_err().to_string();
            assert!(e.contains("invalid preset") && e.contains("one suffix @o{k}"), "{bad}: {e}");
        }
        let head = KernelSpec::preset("w8s8-stagger-heads@o4").unwrap();
        assert_eq!(
            (head.geometry.offset(), head.is_staggered(), head.grid_label()),
            (4, false, "w8s8-stagger-heads@o4".into())
        );
        assert_eq!(KernelSpec::preset("w8s8@o4").unwrap().geometry, head.geometry);
        let e = KernelSpec::preset("w8s8@o8").unwrap_err().to_string();
        assert!(e.contains("offset") && e.contains("0..8"), "{e}");
    }

    #[test]
    fn dsv41_has_no_gate_bias_and_rotates_64_channels() {
        for m in [1, 2, 3, 4, 128, 7] {
            let spec = KernelSpec::preset(&format!("dsv41-c{m}")).unwrap();
            assert_eq!((spec.geometry.window(), spec.geometry.stride()), (m, m));
            assert!(!spec.gate_bias && !spec.has_gate_bias() && spec.shared_kv && spec.rms_norm);
            assert_eq!(spec.rms_norm_eps, 1e-6);
            let rope = spec.rope.as_ref().unwrap();
            assert_eq!((rope.rotated_channels(512), rope.position), (64, EntryPosition::First));
        }
        // The spec's JSON says so, and a round trip keeps it.
        let spec = KernelSpec::preset("dsv41-c4").unwrap();
        let json = serde_json::to_string(&spec).unwrap();
        assert!(json.contains("\"gate_bias\":false"), "{json}");
        assert_eq!(KernelSpec::from_json(&json).unwrap(), spec);
    }
}
