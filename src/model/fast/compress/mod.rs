//! The compressor of the fast engine, forward and backward: the `w{W}s{S}` family of
//! [`crate::kernel::tensor::TensorKernel::compress`] (paper eqs. 1-2) as the decoder
//! differentiates through it, for one attention layer and all its KV heads at once (heads on
//! different grids, `stagger: heads`, one head at a time: `heads`).
//!
//! Layout. `R = B * n` window rows (row `b * n + j`), `H` KV heads, `gw` gate channels per head
//! (`d_h` for vector gates, 1 for scalar and uniform ones). Per offset `i`:
//! `X_i: [R, d]` (the slot's token row of the attention input, zero for an empty slot),
//! `P_i = X_i C_{g(i)}: [R, H*d_h]`, gate logits `S_i = X_i Z_{g(i)} + b_i: [R, H*gw]` (no `b_i`
//! for a spec without gate biases, `gate_bias: false`), gate
//! weights `A_i = softmax_i(S_i)` over the window's valid offsets (uniform: `1/valid`), pooled
//! entry `E = sum_i A_i (.) P_i` (a scalar gate broadcast over its head's channels), then RoPE
//! at the entry positions of [`KernelSpec::entry_position`]. Windows, slots and positions come
//! from [`crate::geometry::Geometry`] (`slot_tokens`, `num_windows`), never re-derived here.
//!
//! Backward, per branch `B` (keys, values) with upstream `dE`:
//! `dP_i = A_i (.) dE`, `dA_i = dE (.) P_i` (summed over a head's channels for a scalar gate;
//! the key and value branches both add to a tied gate's `dA`), softmax backward
//! `dS_i = A_i (.) (dA_i - sum_k A_k (.) dA_k)`; then `dC_{g(i)} += X_i^T dP_i`,
//! `dZ_{g(i)} += X_i^T dS_i`, `db_i += colsum(dS_i)` (when there is a `b`), `dX_i = dP_i C^T + dS_i Z^T`, scattered
//! back onto the slot's token row. Offsets, rows and heads go in one fixed order.

mod backward;
mod forward;
mod heads;
mod shape;
pub(super) use heads::{compress_layer_backward, compress_layer_forward, LayerCompress, LayerWindows};
pub(super) use shape::{CompressScratch, CompressorShape};
