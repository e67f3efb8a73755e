//! The buffers the fast engine reuses from step to step: what the forward keeps per layer for
//! the backward, and the gradient scratch.

use super::compress::{CompressScratch, LayerCompress};

/// What the forward pass keeps for the backward pass, per layer.
#[derive(Default)]
pub(in crate::model) struct LayerCache {
    pub(super) x_in: Vec<f32>,
    pub(super) r1: Vec<f32>,
    pub(super) h1: Vec<f32>,
    pub(super) qp: Vec<f32>,
    pub(super) rq: Vec<f32>,
    pub(super) q: Vec<f32>,
    pub(super) kp: Vec<f32>,
    pub(super) rk: Vec<f32>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    /// Keys and values attended to, `[B, H_kv, n + T, d_h]`: entries, then raw tokens.
    pub(super) kc: Vec<f32>,
    pub(super) vc: Vec<f32>,
    pub(super) comp: LayerCompress,
    pub(super) p: Vec<f32>,
    pub(super) o: Vec<f32>,
    pub(super) x_mid: Vec<f32>,
    pub(super) r2: Vec<f32>,
    pub(super) h2: Vec<f32>,
    pub(super) g: Vec<f32>,
    pub(super) sg: Vec<f32>,
    pub(super) u: Vec<f32>,
    pub(super) a: Vec<f32>,
}

/// Buffers reused from step to step. Every buffer is fully written before it is read, except
/// those zeroed explicitly (gradients, scatter targets).
#[derive(Default)]
pub(super) struct Workspace {
    pub(super) layers: Vec<LayerCache>,
    pub(super) x: Vec<f32>,
    pub(super) hf: Vec<f32>,
    pub(super) rf: Vec<f32>,
    pub(super) hs: Vec<f32>,
    pub(super) logits: Vec<f32>,
    pub(super) dhs: Vec<f32>,
    pub(super) dhf: Vec<f32>,
    pub(super) dx: Vec<f32>,
    pub(super) da: Vec<f32>,
    pub(super) dg: Vec<f32>,
    pub(super) dhid: Vec<f32>,
    pub(super) d_o: Vec<f32>,
    pub(super) dq: Vec<f32>,
    pub(super) dk: Vec<f32>,
    pub(super) dv: Vec<f32>,
    pub(super) dqp: Vec<f32>,
    pub(super) dkp: Vec<f32>,
    pub(super) ds: Vec<f32>,
    pub(super) dkc: Vec<f32>,
    pub(super) dvc: Vec<f32>,
    pub(super) comp: CompressScratch,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Workspace({} layers)", self.layers.len())
    }
}
