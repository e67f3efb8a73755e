//! The enumerated knobs of a spec: how gate scores are produced ([`GateKind`]), which parameter
//! group serves each offset ([`ParamGroups`]) and how a model's heads stagger their grids
//! ([`Stagger`]).

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

/// How a model's KV heads and layers spread their grid offsets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stagger {
    /// Every head of every layer on the geometry's grid.
    #[default]
    None,
    /// KV head `h` at `floor(h S / n_kv_head)` (2 heads: 0 and S/2), the same in every layer.
    Heads,
    /// Layer `l` at `floor(l S / n_layer)`, every head of the layer alike.
    Layers,
}

impl Stagger {
    /// Whether this is [`Stagger::None`] (serde skips it then: unstaggered specs read as before).
    pub fn is_none(&self) -> bool {
        *self == Stagger::None
    }

    /// The JSON name (`none`, `heads`, `layers`).
    pub fn name(self) -> &'static str {
        match self {
            Stagger::None => "none",
            Stagger::Heads => "heads",
            Stagger::Layers => "layers",
        }
    }
}
