//! The gradient flow's hot loop, fast (theory/induction-model.md §8): the static-gate loss
//! (T-6), its exact gradient (T-6g) and the softmax pullback (T-8) straight from the logits,
//! with a branch-free exponential ([`exp_poly`]) in place of libm's.
//!
//! One kernel (`lanes`) evaluates `W` parameter vectors at once, one per vector lane, with
//! the same arithmetic in every lane (`simd`: plain arrays, AVX-512 or AVX2 registers).
//! [`FastStatic`] is that kernel with one lane, in scalar code (one run of the flow,
//! `flow::FlowKernel::Fast`); `flow::run_seeds_batched` runs `flow::LANES` seeds per thread in
//! the lanes of one kernel, on AVX-512, AVX2 or the baseline instruction set, chosen once at run
//! time ([`Isa`]; `flow::run_seeds` uses it for static gates). All give the same numbers bit for
//! bit, on any number of threads. This module is the kernel only: it imports nothing of the flow
//! that drives it.
//!
//! [`super::task::static_loss_grad`] stays the reference: `flow::FlowKernel::Reference` runs
//! the flow through it, tests compare the two (`theory_fast` tests), and the bench
//! `theory_flow` times both side by side.

mod exp;
pub(crate) mod lanes;
mod scalar;
pub(crate) mod simd;

pub use exp::exp_poly;
pub use lanes::Isa;
pub use scalar::FastStatic;
