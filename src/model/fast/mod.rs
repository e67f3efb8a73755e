//! The fast training engine: a hand-derived f32 forward and backward pass of the whole decoder
//! of [`crate::model::decoder`] on the CPU, in the spirit of a compact C training loop. One
//! training step computes the loss, the accuracy counts and the gradient of every parameter
//! with plain loops and a strided GEMM ([`gemm`](crate::numeric::gemm)) over row-major buffers: no graph, no
//! broadcast ops, no zero-filled gradient tensors per op.
//!
//! It is the default engine for every preset. The candle autodiff path stays the reference,
//! chosen explicitly (`--engine candle`): `tests/train_fast.rs` checks the loss and every
//! parameter's gradient against it. Supported ([`SUPPORTED`]): `full` (causal attention over
//! raw tokens), the paper's `w{W}s{S}` family with any gate kind, parameter groups, tying and
//! entry RoPE or none, DeepSeek-V4's kernels (`dsv4-*`: one shared K/V entry, an RMSNorm on
//! each entry, partial YaRN RoPE) and DeepSeek-V4.1's (`dsv41-c{m}`: learned gates without
//! per-offset biases), each on staggered grids too: per layer (`stagger: layers`) or per KV
//! head (`stagger: heads`: each head's windows, entries and visibility from its own grid,
//! `compress/heads.rs`; a layer whose heads share a grid is one batched compressor).
//!
//! Files, one job each: `decoder` binds the engine to a model's parameters and implements
//! [`crate::model::engine::TrainEngine`]; `forward` (through the loss) and `backward` (every
//! parameter's gradient) are the two passes; `compress` the compressor (forward and backward);
//! `attention` local window plus visible entries in one softmax; `ops` RMSNorm, RoPE and two
//! small helpers; `buffers` what is kept between steps; `layout` the per-layer parameter slots;
//! `supported` what the engine implements. This file only declares and re-exports.
//!
//! Determinism: every reduction runs in one fixed order on one thread (GEMM with
//! `Parallelism::None`, rows and heads in order), so the same parameters and batch give the
//! same bits whatever `RAYON_NUM_THREADS` is.
//!
//! Layout (row-major, `BT = B * T` rows): hidden states `[BT, d]`; queries `[BT, H_q * d_h]`
//! (head `h` in columns `h*d_h..`), keys and values `[BT, H_kv * d_h]`; what attention reads,
//! `[B, H_kv, n + T, d_h]` (the `n` compressed entries, the longest head's count when heads sit
//! on different grids, then the raw tokens); attention weights
//! `[B, H_q, T, n + T]`. Query head `h` reads KV head `h / (H_q / H_kv)` (candle's `repeat_kv`).

mod attention;
mod backward;
mod buffers;
mod compress;
mod decoder;
mod forward;
mod layout;
mod ops;
mod supported;

pub use decoder::{FastDecoder, StepOutput};
pub use supported::{check_supported, SUPPORTED, SUPPORTED_PRESETS};
