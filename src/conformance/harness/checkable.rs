//! Which specs the harness can check, and the work of checking one, refused above the limit
//! before any case is drawn.

use super::strategies::{self};
use crate::kernel::spec::KernelSpec;
use crate::Result;

/// Whether the harness can draw cases for `spec` (cases hold up to `2W + 2S + 3` tokens, so
/// the window is capped at [`crate::limits::MAX_CHECK_WINDOW`]); a one-line error otherwise.
pub fn checkable(spec: &KernelSpec) -> Result<()> {
    let w = spec.geometry.window();
    if w > crate::limits::MAX_CHECK_WINDOW {
        return Err(crate::Error::invalid(
            "--preset",
            format!(
                "window W = {w} of {} is above the harness's limit of {} (cases hold up to 2W + 2S + 3 tokens)",
                spec.name,
                crate::limits::MAX_CHECK_WINDOW
            ),
        ));
    }
    Ok(())
}

/// Widest model width `d` a case draws ([`strategies::case_strategy`]).
const MAX_CASE_D_MODEL: usize = 4;

/// The work of `cases` cases per invariant on `spec` with heads from `min_d_head` on, in units
/// of `(W + 2T + 16) * n(T) * W * d * d_h` at the longest case (`T = 2W + 2S + 3` tokens,
/// `n(T)` windows, the widest `d` and `d_h` drawn): K4 runs `W` probes of `T` tokens, K11 the
/// `T` prefixes of a sequence, and the other invariants a few runs each, every run costing
/// about `n(T) * W * d * d_h`. `None` when it overflows 64 bits.
pub fn check_work(spec: &KernelSpec, cases: u32, min_d_head: usize) -> Option<u64> {
    let (w, s) = (spec.geometry.window(), spec.geometry.stride());
    let t = 2 * w + 2 * s + 3;
    let d_head = strategies::head_widths(spec, min_d_head).into_iter().max().unwrap_or(min_d_head);
    let per_case = [w + 2 * t + 16, spec.geometry.num_windows(t).max(1), w, MAX_CASE_D_MODEL, d_head];
    crate::limits::product(&per_case)?.checked_mul(u64::from(cases))
}

/// [`checkable`], and the work of `cases` cases per invariant ([`check_work`]) at most
/// [`crate::limits::MAX_CHECK_WORK`]: a one-line error naming the preset, `--cases` and the
/// most cases that fit otherwise.
pub fn checkable_with(spec: &KernelSpec, cases: u32, min_d_head: usize) -> Result<()> {
    checkable(spec)?;
    // The spec check `kernel validate` makes at the dump's width, over the widths cases draw:
    // a spec no width holds is bad input (exit 2), not a kernel failing every invariant.
    spec.head_widths(min_d_head, 1)?;
    let max = crate::limits::MAX_CHECK_WORK;
    match check_work(spec, cases, min_d_head) {
        Some(work) if work <= max => Ok(()),
        work => {
            let one = check_work(spec, 1, min_d_head).unwrap_or(u64::MAX);
            let fit = max / one.max(1);
            let work = work.map_or("more than 2^64".to_string(), |v| v.to_string());
            Err(crate::Error::invalid(
                "--cases",
                format!(
                    "{cases} cases per invariant on {} ({}) are {work} units of work, above the limit of {max} \
                     (MAX_CHECK_WORK); {}",
                    spec.name,
                    spec.describe(),
                    if fit == 0 {
                        "not even one case fits: choose a smaller window or stride".to_string()
                    } else {
                        format!("at most {fit} cases fit")
                    }
                ),
            ))
        }
    }
}
