//! Partial RoPE on compressed entries: which channels rotate, the frequencies (plain, YaRN,
//! explicit) and DeepSeek-V4's settings. The angle formula itself is [`crate::kernel::post::rope_angle`].

use crate::geometry::EntryPosition;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

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
#[serde(rename_all = "snake_case", deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
    /// The absolute position `p0` of a run's token 0: token `t` sits at RoPE position `p0 + t`,
    /// the window grid unchanged (a dump's metadata `position_offset`, `theory/dump-format.md`,
    /// "Position offset"). Not part of the spec's JSON (a spec names a kernel, the offset a run):
    /// set only through [`super::KernelSpec::at_position_offset`]; 0 everywhere else.
    #[serde(skip)]
    pub position_offset: usize,
}

impl RopeSpec {
    /// Plain RoPE (no scaling) with base `theta`.
    pub fn plain(channels: RopeChannels, position: EntryPosition, theta: f64) -> Self {
        RopeSpec { channels, position, theta, scaling: None, position_offset: 0 }
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
    pub(super) fn validate(&self, d_head: Option<usize>) -> Result<()> {
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
                if self.theta <= 1.0 {
                    // The correction range divides by ln(theta): theta = 1 gives NaN frequencies.
                    return Err(Error::invalid(
                        "rope.theta",
                        format!(
                            "must be above 1 with scaling yarn (its correction range divides by ln theta), got {}",
                            self.theta
                        ),
                    ));
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
        if let Some(d) = d_head {
            let r = self.rotated_channels(d);
            if let Some((k, f)) = self.inv_frequencies(r).into_iter().enumerate().find(|(_, f)| !f.is_finite()) {
                return Err(Error::invalid("rope", format!("the frequency of pair {k} is {f} for d_head {d}")));
            }
        }
        Ok(())
    }
}

/// Every RoPE position a run may carry (with its position offset) is below this: `2^24`, the
/// integers f32 holds exactly. A correct kernel forms the angle `p f_i` in f32 (Hugging Face,
/// DeepSeek's reference, vLLM); the angle allowance of `kernel validate` counts the product's
/// rounding and the frequency's, not a rounded position (`theory/dump-format.md`, "RoPE angles
/// in the accumulator dtype").
pub const MAX_ROPE_POSITION: usize = 1 << 24;

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

/// DeepSeek-V4.1 rotates the last `qk_rope_head_dim` = 64 channels of each entry (mlx-lm 0.32.2
/// `deepseek_v41.py` `ModelArgs.qk_rope_head_dim`; vLLM 0.33.0's V4.1 kernels hard-code RoPE 64;
/// SGLang 0.5.23 `DeepseekV41Compressor`'s RoPE tail), as a count: the same 64 at any head width.
pub const DSV41_ROPE_CHANNELS: usize = 64;

/// DeepSeek-V4's HCA compression rate `m'` (`compress_rates.HCA`).
pub const DSV4_HCA_RATE: usize = 128;

/// DeepSeek-V4's RoPE on compressed entries: last 64 of 512 channels, base 160000, YaRN.
pub(super) fn dsv4_rope(position: EntryPosition) -> RopeSpec {
    RopeSpec {
        channels: RopeChannels::Fraction(DSV4_ROPE_FRACTION),
        position,
        theta: DSV4_COMPRESS_ROPE_THETA,
        scaling: Some(dsv4_yarn()),
        position_offset: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::KernelSpec;
    use super::*;

    #[test]
    fn dsv4_presets_follow_the_reference() {
        let csa = KernelSpec::preset("dsv4-csa").unwrap();
        assert_eq!(csa.num_groups(), 2);
        assert_eq!((0..8).map(|i| csa.group_of(i)).collect::<Vec<_>>(), [0, 0, 0, 0, 1, 1, 1, 1]);
        let rope = csa.rope.clone().unwrap();
        assert_eq!(rope.rotated_channels(512), 64);
        assert_eq!(rope.theta, 160_000.0);
        // DeepSeek-V4's YaRN on 64 channels, base 160000: the correction range is pairs
        // 15..25 (DeepSeek-V4's `precompute_freqs_cis` and Hugging Face's `yarn` rope type): pairs up to 15 keep the base
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
}
