//! The per-layer parameter names of the fast engine and their slots.

/// Per-layer parameter names (after `layer{l}.`), in the order of [`FastDecoder`]'s slots.
pub(super) const LAYER: [&str; 11] = [
    "attn_norm",
    "attn.wq",
    "attn.wk",
    "attn.wv",
    "attn.wo",
    "attn.q_norm",
    "attn.k_norm",
    "mlp_norm",
    "mlp.w_gate",
    "mlp.w_up",
    "mlp.w_down",
];
pub(super) const ATTN_NORM: usize = 0;
pub(super) const WQ: usize = 1;
pub(super) const WK: usize = 2;
pub(super) const WV: usize = 3;
pub(super) const WO: usize = 4;
pub(super) const Q_NORM: usize = 5;
pub(super) const K_NORM: usize = 6;
pub(super) const MLP_NORM: usize = 7;
pub(super) const W_GATE: usize = 8;
pub(super) const W_UP: usize = 9;
pub(super) const W_DOWN: usize = 10;
