//! The depth floor of a model (`theory/phase-lab.md` §9.2): the smallest depth from which a
//! scored record reaches the query only through compressed entries, every one of them closed.
//!
//! A query whose `QUERY` marker sits at `query_pos = s + depth` (`s`: the target key's first
//! token, [`crate::task::layout::depth`]) predicts its answer's token `k` at
//! `q_k = query_pos + key_len + k`, and that token's source is `s + key_len + k`, at distance
//! `depth` exactly. The record spans `s ..= s + key_len + val_len - 1`, so its token nearest a
//! prediction position sits at distance `depth - (val_len - 1)` (the last value token, seen
//! from `q_0`). A record token `t` is **exposed** at a prediction position `q` when
//!
//! - it is raw: it lies in `q`'s local window (`q - t < L`, [`crate::geometry::local_window_start`]);
//!   or
//! - it is open: a window of some layer's KV head that holds `t` does not close strictly before
//!   `q` (its last slot, [`Geometry::last_end_containing`], is `>= q`). A window closing at `q`
//!   is visible under the inclusive convention, but it summarises the query's own token with
//!   the record, so it counts as open under either visibility.
//!
//! The last window holding `t` ends at most `W - 1` after it, with equality for the tokens at a
//! window's offset 0 (one phase of every stride), so no record token is exposed from distance
//! `max(L, W_max)` on, and one of them is at distance `max(L, W_max) - 1`, where `W_max` is the
//! largest window over layers (a layout) and KV heads (a staggered grid moves windows, not
//! their size). In the task's depth:
//!
//! ```text
//! floor = max(L, W_max) + val_len - 1      (0 for full attention: nothing is compressed)
//! ```
//!
//! [`depth_floor`] is that formula, the one place of it; [`Grids::exposure`] enumerates every
//! record token, prediction position, layer and KV head from the geometry, the independent
//! check the tests hold the formula to (`tests/depth_floor.rs`).

use super::config::ModelConfig;
use crate::geometry::{local_window_start, Geometry};
use crate::task::TaskConfig;
use crate::Result;

/// What sets a model's depth floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// Full attention: nothing is compressed, the floor is 0.
    Uncompressed,
    /// The raw local window of `L` tokens (at least as long as every window).
    LocalWindow {
        /// `L`.
        local: usize,
    },
    /// The longest compression window, first met at layer `layer`.
    Window {
        /// The layer.
        layer: usize,
        /// Its window `W`.
        window: usize,
    },
}

/// A model's depth floor on a task (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepthFloor {
    /// The smallest depth at which no token of the target record is exposed.
    pub depth: usize,
    /// What sets it.
    pub binding: Binding,
}

impl std::fmt::Display for DepthFloor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.binding {
            Binding::Uncompressed => write!(f, "depth floor 0 (full attention: nothing is compressed)"),
            Binding::LocalWindow { local } => {
                write!(f, "depth floor {} (the raw local window of {local} tokens)", self.depth)
            }
            Binding::Window { layer, window } => {
                write!(f, "depth floor {} (the window of {window} tokens, layer {layer})", self.depth)
            }
        }
    }
}

/// The depth floor of `model` on `task`: `max(L, W_max) + val_len - 1`, or 0 for full
/// attention (module doc).
pub fn depth_floor(model: &ModelConfig, task: &TaskConfig) -> Result<DepthFloor> {
    if model.is_full() {
        return Ok(DepthFloor { depth: 0, binding: Binding::Uncompressed });
    }
    let spec = model.kernel()?;
    let (layer, window) = (0..model.n_layer)
        .map(|l| (l, spec.layer(l).geometry.window()))
        .fold((0, 0), |best, (l, w)| if w > best.1 { (l, w) } else { best });
    let extra = task.val_len.saturating_sub(1);
    Ok(if model.local_window > window {
        DepthFloor { depth: model.local_window + extra, binding: Binding::LocalWindow { local: model.local_window } }
    } else {
        DepthFloor { depth: window + extra, binding: Binding::Window { layer, window } }
    })
}

/// How a record token reaches a prediction position other than through closed entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposed {
    /// In the position's raw local window of `local` tokens.
    Raw {
        /// `L`.
        local: usize,
    },
    /// Held by a window of layer `layer`, KV head `head`, whose last slot `last_end` is at or
    /// after the prediction position.
    Open {
        /// The layer.
        layer: usize,
        /// The KV head.
        head: usize,
        /// The window's last slot.
        last_end: usize,
    },
}

/// The first exposure of a record found by [`Grids::exposure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exposure {
    /// The record token.
    pub token: usize,
    /// The prediction position it is exposed at.
    pub predicted_at: usize,
    /// How.
    pub how: Exposed,
}

/// Every KV head's grid of a model, resolved once, with the task's record shape: the
/// enumeration behind [`Grids::exposure`].
#[derive(Clone, Debug)]
pub struct Grids {
    /// `None` for full attention (no raw window rule: nothing is compressed).
    local: Option<usize>,
    /// `(layer, head, grid)` of every KV head.
    heads: Vec<(usize, usize, Geometry)>,
    key_len: usize,
    val_len: usize,
}

impl Grids {
    /// The grids of `model` with `task`'s record shape.
    pub fn new(model: &ModelConfig, task: &TaskConfig) -> Result<Self> {
        let (key_len, val_len) = (task.key_len, task.val_len);
        if model.is_full() {
            return Ok(Grids { local: None, heads: Vec::new(), key_len, val_len });
        }
        let spec = model.kernel()?;
        let mut heads = Vec::new();
        for layer in 0..model.n_layer {
            for (head, k) in model.head_specs(&spec, layer)?.into_iter().enumerate() {
                heads.push((layer, head, k.geometry));
            }
        }
        Ok(Grids { local: Some(model.local_window), heads, key_len, val_len })
    }

    /// The first token of the record whose key starts at `source`, asked by a query at
    /// `source + depth`, that reaches some prediction position of the answer other than
    /// through closed compressed entries (`None`: none does). Enumerates every record token,
    /// every prediction position and every KV head of every layer.
    pub fn exposure(&self, source: usize, depth: usize) -> Option<Exposure> {
        let local = self.local?;
        let record = source..source + self.key_len + self.val_len;
        for k in 0..self.val_len {
            let q = source + depth + self.key_len + k;
            for token in record.clone().filter(|&t| t < q) {
                if token >= local_window_start(q, local) {
                    return Some(Exposure { token, predicted_at: q, how: Exposed::Raw { local } });
                }
                for &(layer, head, g) in &self.heads {
                    let last_end = g.last_end_containing(token);
                    if last_end >= q {
                        return Some(Exposure { token, predicted_at: q, how: Exposed::Open { layer, head, last_end } });
                    }
                }
            }
        }
        None
    }
}

impl std::fmt::Display for Exposure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.how {
            Exposed::Raw { local } => write!(
                f,
                "record token {} is raw at prediction position {} (local window of {local})",
                self.token, self.predicted_at
            ),
            Exposed::Open { layer, head, last_end } => write!(
                f,
                "record token {} is in an entry of layer {layer}, KV head {head} that closes at {last_end}, \
                 not before prediction position {}",
                self.token, self.predicted_at
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(preset: &str, local: usize) -> ModelConfig {
        ModelConfig { preset: preset.into(), local_window: local, ..ModelConfig::default() }
    }

    #[test]
    fn the_floor_of_the_paper_geometry_is_its_window() {
        let task = TaskConfig::default();
        let f = depth_floor(&model("w8s4", 4), &task).unwrap();
        assert_eq!(f, DepthFloor { depth: 8, binding: Binding::Window { layer: 0, window: 8 } });
        let f = depth_floor(&model("w8s4", 12), &TaskConfig { val_len: 2, ..task.clone() }).unwrap();
        assert_eq!(f, DepthFloor { depth: 13, binding: Binding::LocalWindow { local: 12 } });
        assert_eq!(depth_floor(&model("full", 4), &task).unwrap().depth, 0);
    }

    #[test]
    fn a_record_at_offset_zero_one_short_of_the_floor_is_in_an_open_entry() {
        // w8s4 (start-aligned): window j covers 4j..=4j+7. A key at 7 (value at 8, at offset 0
        // of window 2, 8..=15) asked at depth 7 is predicted at 7 + 7 + 1 = 15: window 2 closes
        // at the query itself, so the value is in an open entry. At depth 8 (predicted at 16)
        // every window holding 7 or 8 has closed, and the local window is 13..=16.
        let g = Grids::new(&model("w8s4", 4), &TaskConfig::default()).unwrap();
        let e = g.exposure(7, 7).expect("exposed");
        assert_eq!((e.token, e.predicted_at), (8, 15), "{e}");
        assert!(matches!(e.how, Exposed::Open { last_end: 15, .. }), "{e}");
        assert_eq!(g.exposure(7, 8), None);
        // The raw window: at depth 2 the answer is predicted at 10, whose local window 7..=10
        // holds the whole record.
        assert!(matches!(g.exposure(7, 2).map(|e| (e.token, e.how)), Some((7, Exposed::Raw { local: 4 }))));
    }
}
