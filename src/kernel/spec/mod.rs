//! Kernel specifications (`theory/dump-format.md`, "Specs") and the named presets ([`presets`]).
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
//! `dsv4-csa`, `dsv4-hca`, `dsv41-c{m}`.

mod describe;
mod dims;
mod kernel_spec;
mod knobs;
mod layout;
pub mod presets;
mod rope;
mod stagger;

pub use dims::KernelDims;
pub use kernel_spec::{KernelSpec, Named, RMS_NORM_EPS};
pub use knobs::{GateKind, ParamGroups, Stagger};
pub use presets::{preset_names, Family, Preset};
pub use rope::{
    dsv4_yarn, RopeChannels, RopeScaling, RopeSpec, DSV41_ROPE_CHANNELS, DSV4_COMPRESS_ROPE_THETA, DSV4_HCA_RATE,
    DSV4_ROPE_FRACTION, MAX_ROPE_POSITION, ROPE_THETA,
};
