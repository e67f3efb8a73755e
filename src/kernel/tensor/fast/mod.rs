//! A fast CPU forward of the compression kernel family, f32, for inference (no gradient):
//! an AVX-512 sgemm ([`crate::numeric::gemm`], chosen at run time on stable Rust) and a streaming
//! softmax-pool, with rayon over chunks of windows.
//!
//! Per chunk of `cw` windows of one sequence (`cw` sized so that the chunk's projections stay
//! in L2, [`chunk_windows`]):
//!
//! 1. **one matmul per offset** `i`: the rows of slot `i` of the chunk's windows are a strided
//!    view of the input (row `start(j) + i`, stride `S d`), projected at once with every
//!    branch's weights of group `g(i)`, `[C^K | Z^K | C^V | Z^V]`, into a `[cw, width]` buffer
//!    (rows before token 0 under `pad_left` are gathered with zeros instead);
//! 2. **a streaming softmax-pool** per window, head and branch, over the window's rows of the
//!    chunk buffer (in L1/L2): the scores go into the `[W, c]` gate rows the API returns while
//!    the running max is taken, then one pass evaluates each exponential once and accumulates
//!    the sum and the weighted sum of the projected values, and a division finishes both. No
//!    score tensor beyond the chunk is materialised (`windows::pool` says why this form rather than the
//!    running-rescale one);
//! 3. post-processing ([`crate::kernel::post::apply_with`], the code the reference runs, with each
//!    entry's RoPE table computed once for its keys and values).
//!
//! Chunks are fixed by the shapes alone, and each chunk's arithmetic is sequential, so the
//! result is bit-identical for any number of threads. The exponential is a polynomial
//! ([`exp_nonpositive`]) that the compiler vectorises; the pass runs under `avx512f` (or
//! `avx2`) when the CPU has it, with the same operations in the same order, hence the same
//! bits. The invariant harness checks this path like every implementation
//! (`conformance::harness::fast_subject::FastSubject`, `phasekv kernel check --impl fast`,
//! `tests/kernel_fast.rs`).

mod chunk;
mod kernel;
mod windows;

pub use kernel::{chunk_windows, FastKernel};
pub use windows::exp_nonpositive;
