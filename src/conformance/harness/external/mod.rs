//! A kernel in another process, checked live by the harness (`phasekv kernel check --external
//! CMD`): every invariant K1-K14 runs against it with proptest-drawn cases, failures shrink, and
//! a shrunk counterexample is written as a dump that `phasekv kernel validate` replays.
//!
//! The protocol (theory/dump-format.md, "Checking a live kernel"; the Python side is
//! `python/serve_kernel.py`): frames on the process's stdin and stdout, each an 8-byte
//! little-endian length followed by a safetensors buffer. phasekv sends `op = hello` once (the
//! reply names the spec and the dtype), then `op = compress` with `d_model`, `d_head`, the input
//! `[B, T, d]` and the parameters under phasekv's names, all in f64; the reply holds `keys` and
//! whatever else the kernel's `forward` returned. A reply with metadata `error` is an error. The
//! process is started once and ended (killed) when the kernel is dropped, or by its guard when
//! phasekv itself ends (`process.rs`). The frames and the checks of what a reply holds are in
//! `frames.rs`.
//!
//! What the process does not compute is taken from the reference, and said so: streaming is a
//! stateless caller recomputing prefixes ([`stream_by_prefixes`](super::subjects::stream_by_prefixes)), attention (K12) is the
//! reference attention over the kernel's entries, and K7/K10, which compare two specs, compare
//! the process (its own spec) with the reference under the other spec.

mod frames;
mod kernel;
mod options;
mod process;

pub use frames::{decode_reply, read_frame, reply_outputs, Fault, Reply, MAX_FRAME};
pub use kernel::ExternalKernel;
pub use options::ExternalOptions;
pub use process::end_process_group;
