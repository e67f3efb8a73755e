//! Low-precision cache encodings, the one place they are defined: the OCP 8-bit and 4-bit float
//! elements (FP8 E4M3 "fn" and FP4 E2M1, OCP Microscaling Formats (MX) v1.0 §5.3), the block
//! scales production engines store beside them (power of two, E8M0, f32, E4M3) and the block
//! layout of one cache entry ([`CacheFormat`], `theory/dump-format.md`, "Quantized cache
//! formats").
//!
//! A format encodes and decodes an entry `x` (`[d_h]`) block by block: a block of `block`
//! consecutive channels takes one scale `s` from its largest magnitude `a` ([`ScaleKind`]), each
//! element becomes `s * e(x / s)` where `e` rounds to the nearest element (ties to even),
//! saturating at the element's largest finite value (E4M3 "fn" has no infinities: OCP §5.3.3).
//! With `channels: nope` only the first `quantized` channels are encoded, the rest (the RoPE
//! channels) are rounded to bf16.

use serde::{Deserialize, Serialize};

mod bounds;
pub use bounds::Allowance;

/// Smallest accepted `global_scale`: the smallest normal f32 (`2^-126`), as engines store it.
pub const MIN_GLOBAL_SCALE: f64 = f32::MIN_POSITIVE as f64;
/// Largest accepted `global_scale`: the largest f32.
pub const MAX_GLOBAL_SCALE: f64 = f32::MAX as f64;
/// Largest accepted `amax_min`: ten times the largest floor an engine is known to use (vLLM's
/// FP8 paths, `1e-4`). A floor `m` sets the scale of every block whose largest magnitude is
/// below it, so a larger one erases small data (every element rounds to 0).
pub const MAX_AMAX_MIN: f64 = 1e-3;

/// An element format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Element {
    /// OCP FP8 E4M3 ("fn"): 4 exponent bits (bias 7), 3 mantissa bits, subnormals, no
    /// infinities, largest finite 448 (`1.75 * 2^8`).
    E4m3,
    /// OCP FP4 E2M1: 2 exponent bits (bias 1), 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
    E2m1,
}

impl Element {
    /// Mantissa bits.
    fn mantissa_bits(self) -> i32 {
        match self {
            Element::E4m3 => 3,
            Element::E2m1 => 1,
        }
    }

    /// Exponent of the smallest normal number (`1 - bias`); below it the spacing is constant
    /// (subnormals).
    fn min_exponent(self) -> i32 {
        match self {
            Element::E4m3 => -6,
            Element::E2m1 => 0,
        }
    }

    /// Exponent of the largest normal binade (`emax` of the OCP MX spec: 8 for E4M3, 2 for E2M1).
    pub fn emax(self) -> i32 {
        match self {
            Element::E4m3 => 8,
            Element::E2m1 => 2,
        }
    }

    /// The largest finite value (448 for E4M3, 6 for E2M1).
    pub fn max(self) -> f64 {
        match self {
            Element::E4m3 => 448.0,
            Element::E2m1 => 6.0,
        }
    }

    /// The spacing of the element grid at magnitude `|x|` (the quantum of its binade; the
    /// subnormal spacing below the smallest normal).
    pub fn spacing(self, x: f64) -> f64 {
        let e = if x == 0.0 { self.min_exponent() } else { (x.abs().log2().floor() as i32).max(self.min_exponent()) };
        2f64.powi(e.min(self.emax()) - self.mantissa_bits())
    }

    /// `x` rounded to the nearest element (ties to even), saturating at `+-max` (NaN stays NaN).
    pub fn round(self, x: f64) -> f64 {
        if x.is_nan() {
            return x;
        }
        let a = x.abs().min(self.max() * 2.0);
        let q = self.spacing(a);
        let r = (a / q).round_ties_even() * q;
        r.min(self.max()).copysign(x)
    }

    /// Whether `x` is an element exactly.
    pub fn holds(self, x: f64) -> bool {
        x.is_finite() && x.abs() <= self.max() && self.round(x) == x
    }
}

/// How a block's scale is chosen from its largest magnitude `a` (`E` the element's maximum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleKind {
    /// `s = a / E` in f32.
    F32,
    /// `s = 2^ceil(log2(a / E))`: the smallest power of two with `a / s <= E` (DeepSeek's
    /// "ue8m0" scales, rounded up: no element saturates).
    Pow2,
    /// OCP MX's shared E8M0 scale: `s = 2^(floor(log2 a) - emax)`; elements above `E` saturate.
    E8m0,
    /// `s = a / E` rounded to the nearest E4M3 (NVFP4-style block scales of FP4).
    E4m3,
}

impl ScaleKind {
    /// The scale of a block whose largest magnitude is `a` (1 for an all-zero block).
    pub fn choose(self, a: f64, element: Element) -> f64 {
        if a == 0.0 || !a.is_finite() {
            return 1.0;
        }
        match self {
            ScaleKind::F32 => (a / element.max()) as f32 as f64,
            ScaleKind::Pow2 => {
                let mut k = (a / element.max()).log2().ceil() as i32;
                // log2 rounding can be off by one at exact powers of two.
                while a / 2f64.powi(k) > element.max() {
                    k += 1;
                }
                while k > -1074 && a / 2f64.powi(k - 1) <= element.max() {
                    k -= 1;
                }
                2f64.powi(k)
            }
            ScaleKind::E8m0 => 2f64.powi((a.log2().floor() as i32 - element.emax()).clamp(-127, 127)),
            ScaleKind::E4m3 => {
                let s = Element::E4m3.round(a / element.max());
                if s > 0.0 {
                    s
                } else {
                    Element::E4m3.spacing(0.0)
                }
            }
        }
    }

    /// Whether `s` is a value this scale kind can store.
    fn holds(self, s: f64) -> bool {
        match self {
            ScaleKind::F32 => s > 0.0 && s as f32 as f64 == s,
            ScaleKind::Pow2 | ScaleKind::E8m0 => s > 0.0 && s.log2().fract() == 0.0,
            ScaleKind::E4m3 => s > 0.0 && Element::E4m3.holds(s),
        }
    }
}

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

/// Rounds to bf16 (round to nearest even) and back.
fn bf16(x: f64) -> f64 {
    half::bf16::from_f64(x).to_f64()
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
    fn block_scale(&self, a: f64) -> f64 {
        let a = match self.amax_min {
            Some(m) if a > 0.0 => a.max(m),
            _ => a,
        };
        self.scale.choose(a, self.element)
    }

    /// The blocks of the first `quantized` channels, as ranges.
    fn blocks(&self, quantized: usize) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
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

/// Every non-negative value of an element format, ascending.
pub fn element_values(element: Element) -> Vec<f64> {
    let q0 = element.spacing(0.0);
    let mut out = vec![0.0];
    let mut x = q0;
    while x <= element.max() {
        out.push(x);
        x += element.spacing(x);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2m1_is_the_ocp_value_set() {
        assert_eq!(element_values(Element::E2m1), [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        // Round to nearest, ties to even, saturating at 6.
        for (x, want) in [
            (0.24, 0.0),
            (0.25, 0.0),
            (0.26, 0.5),
            (0.75, 1.0),
            (1.25, 1.0),
            (2.5, 2.0),
            (3.5, 4.0),
            (5.0, 4.0),
            (5.1, 6.0),
            (7.0, 6.0),
            (1e9, 6.0),
            (-2.6, -3.0),
        ] {
            assert_eq!(Element::E2m1.round(x), want, "{x}");
        }
    }

    #[test]
    fn e4m3_follows_the_fn_definition() {
        let v = element_values(Element::E4m3);
        // 8 subnormals (0 and 7 nonzero: k * 2^-9) then 15 binades of 8 (exponents -6..=8), the
        // last one without its top value (S.1111.111 is NaN in the fn variant): 127 values.
        assert_eq!(v.len(), 127);
        assert_eq!(v[1], 2f64.powi(-9));
        assert_eq!(*v.last().unwrap(), 448.0);
        assert!(v.contains(&416.0) && !v.contains(&480.0));
        // No infinities: everything above 448 saturates.
        assert_eq!(Element::E4m3.round(1e300), 448.0);
        assert_eq!(Element::E4m3.round(-500.0), -448.0);
        assert_eq!(Element::E4m3.round(464.0), 448.0);
        // Ties to even in a binade of spacing 2^(e-3): 1.0625 is halfway between 1 and 1.125.
        assert_eq!(Element::E4m3.round(1.0625), 1.0);
        assert_eq!(Element::E4m3.round(1.1875), 1.25);
        // Every element rounds to itself, and halfway points to a neighbour.
        for w in v.windows(2) {
            assert_eq!(Element::E4m3.round(w[0]), w[0]);
            let mid = 0.5 * (w[0] + w[1]);
            assert!([w[0], w[1]].contains(&Element::E4m3.round(mid)));
        }
    }

    #[test]
    fn scales_follow_their_definitions() {
        // pow2: the smallest power of two that brings the maximum within 448.
        assert_eq!(ScaleKind::Pow2.choose(448.0, Element::E4m3), 1.0);
        assert_eq!(ScaleKind::Pow2.choose(449.0, Element::E4m3), 2.0);
        assert_eq!(ScaleKind::Pow2.choose(1.0, Element::E4m3), 2f64.powi(-8));
        // OCP MX E8M0: 2^(floor(log2 a) - emax).
        assert_eq!(ScaleKind::E8m0.choose(1.0, Element::E4m3), 2f64.powi(-8));
        assert_eq!(ScaleKind::E8m0.choose(500.0, Element::E4m3), 1.0); // 500 saturates to 448
        assert_eq!(ScaleKind::E8m0.choose(512.0, Element::E4m3), 2.0);
        assert_eq!(ScaleKind::E8m0.choose(6.0, Element::E2m1), 1.0);
        // NVFP4-style E4M3 scale of amax / 6, and f32.
        assert_eq!(ScaleKind::E4m3.choose(6.0, Element::E2m1), 1.0);
        assert_eq!(ScaleKind::E4m3.choose(7.0, Element::E2m1), Element::E4m3.round(7.0 / 6.0));
        assert_eq!(ScaleKind::F32.choose(3.0, Element::E2m1), 0.5);
        assert_eq!(ScaleKind::Pow2.choose(0.0, Element::E4m3), 1.0);
    }

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
