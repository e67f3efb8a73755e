//! Validation of a dumped kernel ([`super::dump::Dump`]) against the reference: the tolerance
//! rule of `theory/kernels.md` ("Tolerances") in the dump's dtype, the invariants the dump makes checkable
//! (K1 always, K2 with a perturbed run, K3 with a shifted run, K5 with dumped gates), and two
//! error profiles. The library computes; the CLI prints ([`Validation`] is the table).
//!
//! **Tolerance rule (K13), two stages as in the harness.** With pooled entries in the dump,
//! pooled keys/values and gates are compared with the f64 reference (`ref64`) and the twin (the
//! reference computed in the accumulator dtype of a correct kernel in the dump's dtype: f32 for
//! f32, f16 and bf16), and the post-processed keys/values are compared with the f64
//! post-processing of the kernel's *own* pooled entries (the twin: the same in f32). Without
//! pooled entries the keys/values are compared end to end (ill-conditioned under RMSNorm of short
//! vectors, `theory/kernels.md`). Bounds: `2 max|twin - ref64| + 8 u max|ref64|` and
//! `2 rms(twin - ref64) + 2 u rms(ref64)` (`theory/dump-format.md`, "The tolerance rule"); with a
//! `cache_format`, keys and values against the reference encoded the same way, two grid steps
//! per channel on top. A reference that is not finite is an error (exit 2) naming the spec field.
//!
//! **Error by window** `e_j`: `max |impl - ref64|` over the keys and values of entry `j`
//! (all sequences, all channels).
//!
//! **Error by phase.** For each displacement `delta` in `-(S-1) ..= S-1`, the kernel's keys and
//! values are compared with a reference whose window `j` holds tokens `token_at(j, i) + delta`
//! (slots outside the sequence empty, entry positions unchanged). The window starts then have
//! phase `(start + delta) mod S`: the profile is the error as a function of the phase of the
//! window start. A correct kernel is best at `delta = 0`; a kernel whose windows start one token
//! late matches the reference at `delta = +1` to rounding and is off everywhere else: an error
//! that depends on phase is the signature of an indexing bug. Only windows whose every slot holds
//! a real token under both the spec's and the displaced geometry are compared, so a `pad_left`
//! kernel's half-empty window 0 (and windows displaced past either end) do not swamp the profile.

mod bounds;
mod checks;
mod coverage;
mod format_check;
mod hints;
mod localized;
mod profile;
mod references;
mod report;
mod run;
mod tolerance;

pub use bounds::{bound_error, check_bounds, memory_estimate, work_estimate};
pub use report::{CheckRow, PhasePoint, Status, Validation};
pub use run::{validate, validate_with_progress};
pub use tolerance::SCALE_FLOOR_ULPS;
