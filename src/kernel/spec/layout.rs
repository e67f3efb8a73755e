//! Layer layouts (issue 42, `theory/kernels.md`, "Layer layouts"): a model whose attention
//! layers use different kernels, as DeepSeek-V4 alternates CSA and HCA by layer.
//!
//! A spec with a `layout` lists per-layer kernels applied cyclically: layer `l` of a model
//! computes with `layout[l % len]` ([`KernelSpec::layer`]). The spec's own knobs are those of
//! its *representative layer* ([`KernelSpec::representative_layer`]: the first layer of the
//! smallest stride), so everything that reads "the model's kernel" (the phase stride, the lab's
//! window, the report) reads one defined value, and the per-layer hook
//! ([`KernelSpec::for_head`], [`crate::model::ModelConfig::head_specs`]) resolves the layer's
//! kernel first: every engine that asks per layer gets it. [`KernelSpec::check_layout`] is the
//! one check of a layout.

use super::kernel_spec::KernelSpec;
use crate::{Error, Result};

/// The longest layout accepted: one kernel per layer of the largest model.
pub const MAX_LAYOUT: usize = crate::limits::MAX_LAYERS;

impl KernelSpec {
    /// A layout spec named `name` over `layers` (layer `l` uses `layers[l % len]`): the
    /// representative layer's knobs with the layout attached, checked
    /// ([`KernelSpec::check_layout`]). What the layout presets and a caller building one use.
    pub fn with_layout(name: &str, layers: Vec<KernelSpec>) -> Result<KernelSpec> {
        let rep = Self::representative_index(&layers)
            .ok_or_else(|| Error::invalid("layout", format!("is empty; allowed: 1 to {MAX_LAYOUT} layer kernels")))?;
        let spec = KernelSpec { name: name.into(), layout: Some(layers.clone()), ..layers[rep].clone() };
        spec.check_layout()?;
        Ok(spec)
    }

    /// Whether this spec carries a layer layout.
    pub fn is_layout(&self) -> bool {
        self.layout.is_some()
    }

    /// The kernel of layer `layer`: `layout[layer % len]`, or this spec without a layout.
    pub fn layer(&self, layer: usize) -> &KernelSpec {
        match &self.layout {
            Some(layers) if !layers.is_empty() => &layers[layer % layers.len()],
            _ => self,
        }
    }

    /// The layout's length (1 without a layout).
    pub fn layout_len(&self) -> usize {
        self.layout.as_ref().map_or(1, |l| l.len().max(1))
    }

    /// The index of the representative layer of `layers`: the first of the smallest stride
    /// (`None` when empty). Its stride is the model's phase stride (`theory/kernels.md`).
    fn representative_index(layers: &[KernelSpec]) -> Option<usize> {
        (0..layers.len()).min_by_key(|&i| (layers[i].geometry.stride(), i))
    }

    /// The representative layer of the layout (`theory/kernels.md`, "Layer layouts"): the first
    /// layer of the smallest stride; this spec itself without a layout.
    pub fn representative_layer(&self) -> &KernelSpec {
        match &self.layout {
            Some(layers) => Self::representative_index(layers).map_or(self, |i| &layers[i]),
            None => self,
        }
    }

    /// The distinct kernels of a model's `n_layer` layers, in order of first use, with the
    /// first layer that uses each (one entry, layer 0, without a layout).
    pub fn distinct_layers(&self, n_layer: usize) -> Vec<(usize, &KernelSpec)> {
        let mut out: Vec<(usize, &KernelSpec)> = Vec::new();
        for l in 0..n_layer.max(1) {
            let k = self.layer(l);
            if !out.iter().any(|(_, seen)| *seen == k) {
                out.push((l, k));
            }
        }
        out
    }

    /// The window every layer shares: this spec's window, or `None` for a layout whose layers
    /// differ in window (what offset knockouts refuse).
    pub fn common_window(&self) -> Option<usize> {
        let w = self.geometry.window();
        self.layout.iter().flatten().all(|k| k.geometry.window() == w).then_some(w)
    }

    /// The largest window among the layers (this spec's without a layout).
    pub fn max_window(&self) -> usize {
        self.layout.iter().flatten().map(|k| k.geometry.window()).fold(self.geometry.window(), usize::max)
    }

    /// The error of an analysis indexed by window offset on a layout whose windows differ.
    pub fn needs_common_window(&self, what: &str) -> Result<usize> {
        self.common_window().ok_or_else(|| {
            let ws: Vec<String> =
                self.layout.iter().flatten().map(|k| format!("{} W={}", k.name, k.geometry.window())).collect();
            Error::invalid(
                "preset",
                format!("{what} need one window in every layer; layout '{}' has {}", self.name, ws.join(", ")),
            )
        })
    }

    /// The one check of a layout (nothing without one). Refused, each in one line naming the
    /// field: an empty or overlong layout; a layer that is full attention, carries a layout of
    /// its own, staggers, or fails its own checks; layers whose model-level RoPE (the queries'
    /// and raw keys' channels, base and scaling, and NoPE) differ; a stagger rule on the layout;
    /// own knobs other than the representative layer's.
    pub fn check_layout(&self) -> Result<()> {
        let Some(layers) = &self.layout else { return Ok(()) };
        if layers.is_empty() || layers.len() > MAX_LAYOUT {
            return Err(Error::invalid(
                "layout",
                format!("has {} layer kernels; allowed: 1 to {MAX_LAYOUT}", layers.len()),
            ));
        }
        let model_rope =
            |k: &KernelSpec| (k.nope_model, k.rope.as_ref().map(|r| (r.channels, r.theta, r.scaling.clone())));
        for (i, k) in layers.iter().enumerate() {
            let field = |f: &str| format!("layout[{i}]{f}");
            if k.layout.is_some() {
                return Err(Error::invalid(
                    field(".layout"),
                    format!("layer kernel '{}' has a layout of its own; allowed: a kernel without one", k.name),
                ));
            }
            if k.is_staggered() {
                return Err(Error::invalid(
                    field(".stagger"),
                    format!(
                        "is {} on layer kernel '{}'; allowed: none (a layout gives each layer its kernel; staggered \
                         grids and layouts do not combine)",
                        k.stagger.name(),
                        k.name
                    ),
                ));
            }
            // Full attention, the preset `full` included, is the geometry W = S = 1 (the check reads
            // the geometry, not the name, so this file need not import the preset table).
            if k.geometry.window() == 1 && k.geometry.stride() == 1 {
                return Err(Error::invalid(
                    field(""),
                    format!(
                        "'{}' is full attention (W = S = 1); allowed: a compressing kernel (W or S above 1)",
                        k.name
                    ),
                ));
            }
            k.check_deserialized().map_err(|e| Error::invalid(field(""), format!("'{}': {e}", k.name)))?;
            if model_rope(k) != model_rope(&layers[0]) {
                return Err(Error::invalid(
                    field(".rope"),
                    format!(
                        "layer kernel '{}' rotates queries and keys otherwise than layout[0] '{}'; allowed: the same \
                         RoPE channels, base, scaling and NoPE in every layer (the model's RoPE is one)",
                        k.name, layers[0].name
                    ),
                ));
            }
        }
        if self.is_staggered() {
            return Err(Error::invalid(
                "stagger",
                format!(
                    "is {} on a layout; allowed: none (staggered grids and layouts do not combine)",
                    self.stagger.name()
                ),
            ));
        }
        let rep = self.representative_layer();
        let own = KernelSpec { name: rep.name.clone(), layout: None, ..self.clone() };
        if own != *rep {
            return Err(Error::invalid(
                "layout",
                format!(
                    "the spec's own knobs must be those of its representative layer '{}' (the first of the smallest \
                     stride, {}); `phasekv kernel list --json` prints layout presets whole",
                    rep.name,
                    rep.geometry.stride()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_with_layout(layout: &str) -> String {
        let mut v = serde_json::to_value(KernelSpec::preset("dsv4-layout").unwrap()).unwrap();
        v["layout"] = serde_json::from_str(layout).unwrap();
        v.to_string()
    }

    #[test]
    fn a_layout_resolves_each_layer_cyclically() {
        let spec = KernelSpec::preset("dsv4-layout").unwrap();
        assert_eq!(spec.layer(0).name, "dsv4-csa");
        assert_eq!(spec.layer(1).name, "dsv4-hca16");
        assert_eq!(spec.layer(5).name, "dsv4-hca16");
        assert_eq!(spec.representative_layer().name, "dsv4-csa");
        assert_eq!(spec.geometry, spec.layer(0).geometry);
        let names: Vec<_> = spec.distinct_layers(4).into_iter().map(|(l, k)| (l, k.name.clone())).collect();
        assert_eq!(names, vec![(0, "dsv4-csa".to_string()), (1, "dsv4-hca16".to_string())]);
        // JSON round trip, and names in JSON resolve to the same layers.
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(KernelSpec::from_json(&json).unwrap(), spec);
        assert_eq!(KernelSpec::from_json(&json_with_layout(r#"["dsv4-csa", "dsv4-hca16"]"#)).unwrap(), spec);
        // Without a layout, a spec is its own layer.
        let w8s4 = KernelSpec::preset("w8s4").unwrap();
        assert_eq!((w8s4.layer(3), w8s4.layout_len(), w8s4.is_layout()), (&w8s4, 1, false));
    }

    #[test]
    fn bad_layouts_are_refused_in_one_line_naming_the_field() {
        for (layout, needle) in [
            ("[]", "invalid layout: has 0 layer kernels; allowed: 1 to 256"),
            (r#"["nonesuch"]"#, "layout[0]: invalid preset: unknown preset 'nonesuch'"),
            (r#"["dsv4-csa", "dsv4-layout"]"#, "invalid layout[1].layout"),
            (r#"["dsv4-csa", "full"]"#, "invalid layout[1]: 'full' is full attention"),
            (r#"["dsv4-csa", "w8s8-stagger-layers"]"#, "invalid layout[1].stagger"),
            (r#"["dsv4-csa", "w8s4"]"#, "invalid layout[1].rope"),
            (r#"["dsv4-csa", 3]"#, "layout[1]: must be a preset name or a kernel spec, got 3"),
            (
                r#"["dsv4-hca16"]"#,
                "invalid layout: the spec's own knobs must be those of its representative layer 'dsv4-hca16'",
            ),
        ] {
            let e = KernelSpec::from_json(&json_with_layout(layout)).unwrap_err().to_string();
            assert!(e.contains(needle) && !e.contains('\n'), "{layout}: {e}");
        }
        // HCA first is a layout too: its representative (smallest stride) is still CSA, layer 1.
        let hca_first = KernelSpec::from_json(&json_with_layout(r#"["dsv4-hca16", "dsv4-csa"]"#)).unwrap();
        assert_eq!(
            (hca_first.layer(0).name.as_str(), hca_first.representative_layer().name.as_str()),
            ("dsv4-hca16", "dsv4-csa")
        );
        // A layer that fails its own checks is named with its index.
        let mut bad = KernelSpec::preset("dsv4-hca16").unwrap();
        bad.rms_norm_eps = -1.0;
        let e = KernelSpec::with_layout("mine", vec![KernelSpec::preset("dsv4-csa").unwrap(), bad])
            .unwrap_err()
            .to_string();
        assert!(e.contains("layout[1]") && e.contains("rms_norm_eps"), "{e}");
        // A stagger rule on the layout itself.
        let mut staggered = KernelSpec::preset("dsv4-layout").unwrap();
        staggered.stagger = super::super::Stagger::Layers;
        let e = staggered.validate().unwrap_err().to_string();
        assert!(e.contains("invalid stagger") && e.contains("layout"), "{e}");
    }
}
