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

mod bounds;
mod cache_format;
mod element;

pub use bounds::Allowance;
pub use cache_format::{CacheFormat, FormatChannels, MAX_AMAX_MIN, MAX_GLOBAL_SCALE, MIN_GLOBAL_SCALE};
pub use element::{element_values, Element, ScaleKind};
