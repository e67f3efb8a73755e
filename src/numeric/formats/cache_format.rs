//! The block layout of one cache entry ([`CacheFormat`]): its JSON metadata, and encoding,
//! decoding and grid checks block by block.

use serde::{Deserialize, Serialize};

use super::element::{bf16, element_values, Element, ScaleKind};

/// Smallest accepted `global_scale`: the smallest normal f32 (`2^-126`), as engines store it.
pub const MIN_GLOBAL_SCALE: f64 = f32::MIN_POSITIVE as f64;
/// Largest accepted `global_scale`: the largest f32.
pub const MAX_GLOBAL_SCALE: f64 = f32::MAX as f64;
/// Largest accepted `amax_min`: ten times the largest floor an engine is known to use (vLLM's
/// FP8 paths, `1e-4`). A floor `m` sets the scale of every block whose largest magnitude is
/// below it, so a larger one erases small data (every element rounds to 0).
pub const MAX_AMAX_MIN: f64 = 1e-3;

/// Which channels of an entry the format encodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FormatChannels {
    /// Every channel.
    All,
    /// The non-rotated (NoPE) channels; the RoPE channels are stored in bf16.
    Nope,
}

/// A quantized cache format: the `cache_format` metadata of a dump.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheFormat {
    /// The element format.
    pub element: Element,
    /// How each block's scale is chosen and stored.
    pub scale: ScaleKind,
    /// Channels per scale block (the last block of an entry may be shorter).
    pub block: usize,
    /// Which channels are encoded.
    pub channels: FormatChannels,
    /// A global scale `g`: blocks are encoded as `x / g`, decoded times `g` (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_scale: Option<f64>,
    /// A floor on a block's largest magnitude before its scale is chosen (vLLM's FP8 paths use
    /// `max(a, 1e-4)`; absent: none). Only blocks with `0 < a < amax_min` see it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amax_min: Option<f64>,
}

impl CacheFormat {
    /// Parses the JSON object, strictly (an unknown field is an error naming it), and checks
    /// the block size and global scale. The error is one line.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let f: CacheFormat = serde_json::from_str(text).map_err(|e| format!("not a cache format: {e}"))?;
        if f.block == 0 || f.block > 1 << 20 {
            return Err(format!("block must be in 1..={}, got {}", 1 << 20, f.block));
        }
        // Degenerate labels are refused whatever the data: a global scale outside the normal
        // f32 range (how engines store it) overflows or underflows `x / g`, and a floor above
        // MAX_AMAX_MIN sets the scale of every small block, so elements round to 0 and an
        // all-zero output matches an all-zero encoded reference.
        let ranges = [
            ("global_scale", f.global_scale, MIN_GLOBAL_SCALE, MAX_GLOBAL_SCALE),
            ("amax_min", f.amax_min, f64::MIN_POSITIVE, MAX_AMAX_MIN),
        ];
        for (name, v, lo, hi) in ranges {
            if let Some(g) = v {
                if !(g.is_finite() && (lo..=hi).contains(&g)) {
                    return Err(format!("{name} must be in {lo:e}..={hi:e}, got {g:e}"));
                }
            }
        }
        Ok(f)
    }

    /// One line naming the format, e.g. `e4m3 elements, pow2 scales per 64 (NoPE channels; RoPE bf16)`.
    pub fn describe(&self) -> String {
        let el = match self.element {
            Element::E4m3 => "e4m3",
            Element::E2m1 => "e2m1",
        };
        let sc = match self.scale {
            ScaleKind::F32 => "f32",
            ScaleKind::Pow2 => "pow2",
            ScaleKind::E8m0 => "e8m0",
            ScaleKind::E4m3 => "e4m3",
        };
        let ch = match self.channels {
            FormatChannels::All => "every channel".to_string(),
            FormatChannels::Nope => "NoPE channels; RoPE channels bf16".to_string(),
        };
        let g = self.global_scale.map(|g| format!(", global scale {g}")).unwrap_or_default();
        let m = self.amax_min.map(|m| format!(", block maximum floored at {m:e}")).unwrap_or_default();
        format!("{el} elements, {sc} scales per {} ({ch}){g}{m}", self.block)
    }

    /// The number of encoded channels of a `d_h`-wide entry with `rotated` RoPE channels.
    pub fn quantized_channels(&self, d_head: usize, rotated: usize) -> usize {
        match self.channels {
            FormatChannels::All => d_head,
            FormatChannels::Nope => d_head - rotated.min(d_head),
        }
    }

    /// The scale of a block whose largest magnitude (after the global scale) is `a`.
    pub(super) fn block_scale(&self, a: f64) -> f64 {
        let a = match self.amax_min {
            Some(m) if a > 0.0 => a.max(m),
            _ => a,
        };
        self.scale.choose(a, self.element)
    }

    /// The blocks of the first `quantized` channels, as ranges.
    pub(super) fn blocks(&self, quantized: usize) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        (0..quantized).step_by(self.block).map(move |s| s..(s + self.block).min(quantized))
    }

    /// Encodes and decodes one entry in place: blocks of the first `quantized` channels in the
    /// format, the rest in bf16.
    pub fn round_entry(&self, x: &mut [f64], quantized: usize) {
        let g = self.global_scale.unwrap_or(1.0);
        for r in self.blocks(quantized) {
            let a = x[r.clone()].iter().fold(0.0f64, |m, v| m.max((v / g).abs()));
            let s = self.block_scale(a);
            for v in &mut x[r] {
                *v = g * s * self.element.round(*v / g / s);
            }
        }
        for v in &mut x[quantized..] {
            *v = bf16(*v);
        }
    }

    /// Per channel of an entry `x` (unencoded), the grid spacing of its encoding at `x`'s
    /// block scale: what one rounding step of the format is worth there (bf16's spacing for the
    /// channels kept in bf16).
    pub fn spacing_entry(&self, x: &[f64], quantized: usize) -> Vec<f64> {
        let g = self.global_scale.unwrap_or(1.0);
        let mut out = vec![0.0; x.len()];
        for r in self.blocks(quantized) {
            let a = x[r.clone()].iter().fold(0.0f64, |m, v| m.max((v / g).abs()));
            let s = self.block_scale(a);
            for c in r {
                out[c] = g * s * self.element.spacing(x[c] / g / s);
            }
        }
        for c in quantized..x.len() {
            // bf16 keeps 8 significant bits: the spacing at |x| is 2^(floor(log2|x|) - 7).
            out[c] = if x[c] == 0.0 { 0.0 } else { 2f64.powi(x[c].abs().log2().floor() as i32 - 7) };
        }
        out
    }

    /// The first channel of a decoded entry that no encoding in this format produces (`None`
    /// when the entry lies on the format's grid): every block must be `g * s * e` for one scale
    /// `s` the scale kind can store and elements `e`, the other channels bf16 values.
    pub fn off_grid(&self, v: &[f64], quantized: usize) -> Option<usize> {
        let g = self.global_scale.unwrap_or(1.0);
        for r in self.blocks(quantized) {
            let block: Vec<f64> = v[r.clone()].iter().map(|x| x / g).collect();
            let a = block.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            if a == 0.0 {
                continue;
            }
            // The decoded block maximum is `s * e_max` for the element `e_max` it rounded to:
            // every element value is a candidate, and the scale must be storable.
            let mut candidates: Vec<f64> = element_values(self.element)
                .into_iter()
                .filter(|&e| e > 0.0)
                .map(|e| a / e)
                .filter(|&s| self.scale.holds(s) || self.scale == ScaleKind::F32)
                .collect();
            if self.scale == ScaleKind::F32 {
                candidates.push((a / self.element.max()) as f32 as f64);
            }
            let fits = |s: f64| {
                block.iter().all(|&x| {
                    let e = x / s;
                    let r = self.element.round(e);
                    // f32 scales are stored rounded, so the quotient is exact only to f32.
                    (e - r).abs() <= 4.0 * f32::EPSILON as f64 * e.abs().max(1.0)
                })
            };
            if !candidates.into_iter().any(fits) {
                let first = r.clone().find(|&c| !self.element.holds(v[c] / g / self.scale.choose(a, self.element)));
                return Some(first.unwrap_or(r.start));
            }
        }
        (quantized..v.len()).find(|&c| bf16(v[c]) != v[c])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn formats() -> Vec<CacheFormat> {
        let f = |element, scale, block, channels| CacheFormat {
            element,
            scale,
            block,
            channels,
            global_scale: None,
            amax_min: None,
        };
        vec![
            f(Element::E4m3, ScaleKind::Pow2, 64, FormatChannels::Nope),
            f(Element::E4m3, ScaleKind::E8m0, 32, FormatChannels::All),
            f(Element::E2m1, ScaleKind::E4m3, 16, FormatChannels::All),
            f(Element::E4m3, ScaleKind::F32, 128, FormatChannels::All),
            f(Element::E2m1, ScaleKind::E8m0, 32, FormatChannels::All),
        ]
    }

    #[test]
    fn round_trips_are_idempotent_on_the_grid_and_within_a_spacing() {
        let x: Vec<f64> = (0..200).map(|k| ((k as f64) * 0.37).sin() * (1.0 + (k % 7) as f64)).collect();
        for f in formats() {
            let q = f.quantized_channels(x.len(), 40);
            let mut y = x.clone();
            f.round_entry(&mut y, q);
            let sp = f.spacing_entry(&x, q);
            // Half a step by rounding to nearest; E8M0's saturation (elements up to 512 s
            // clipped to 448 s) costs up to two steps of the top binade.
            let steps = if f.scale == ScaleKind::E8m0 { 2.0 } else { 0.5 };
            for c in 0..x.len() {
                assert!(
                    (y[c] - x[c]).abs() <= steps * sp[c],
                    "{}: channel {c}: {} -> {} (spacing {})",
                    f.describe(),
                    x[c],
                    y[c],
                    sp[c]
                );
            }
            assert_eq!(f.off_grid(&y, q), None, "{}", f.describe());
            let mut z = y.clone();
            f.round_entry(&mut z, q);
            assert_eq!(z, y, "{}: encoding a decoded entry changes nothing", f.describe());
            // The unencoded entry is not on the grid.
            assert!(f.off_grid(&x, q).is_some(), "{}", f.describe());
        }
    }

    #[test]
    fn strict_json() {
        let f =
            CacheFormat::from_json(r#"{"element": "e4m3", "scale": "pow2", "block": 64, "channels": "nope"}"#).unwrap();
        assert_eq!(f, formats()[0]);
        let e = CacheFormat::from_json(
            r#"{"element": "e4m3", "scale": "pow2", "block": 64, "channels": "nope", "blok": 1}"#,
        )
        .unwrap_err();
        assert!(e.contains("blok"), "{e}");
        assert!(
            CacheFormat::from_json(r#"{"element": "e5m2", "scale": "pow2", "block": 64, "channels": "all"}"#).is_err()
        );
        assert!(
            CacheFormat::from_json(r#"{"element": "e4m3", "scale": "pow2", "block": 0, "channels": "all"}"#).is_err()
        );
    }
}
