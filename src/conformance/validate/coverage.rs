//! What a dump cannot see (issue 41, item 3): warnings, never failures, printed with the report
//! and written to `validation.json`. A kernel bug that starts at a token index (a wrap at 256, a
//! grid late from a power of two) shows only in a window that starts there; a YaRN error only
//! at positions comparable with the original context.

use crate::conformance::dump::Dump;
use crate::kernel::spec::RopeScaling;

/// The smallest dump length whose main run holds a complete window starting at or after `p`.
fn tokens_to_reach(d: &Dump, p: usize) -> usize {
    let g = d.spec.geometry;
    let j = (0..).find(|&j| g.start(j) >= p as i64).expect("windows start ever later");
    let mut t = g.end(j) + 1;
    while g.num_windows(t) <= j {
        t += 1;
    }
    t
}

/// The coverage warnings of a dump whose main run has `n` entries compared, entry positions up
/// to `max_position`:
///
/// - no complete main-run window starts at or after some power of two below the dump's length
///   (the smallest such named, with the length that reaches it);
/// - every entry position (the run's position offset included) lies below YaRN's original
///   context, where a wrong factor or correction range moves the slow pairs by too little to
///   see (the offset that reaches it named).
pub(super) fn warnings(d: &Dump, n: usize, max_position: usize) -> Vec<String> {
    let mut out = Vec::new();
    let g = d.spec.geometry;
    let t_len = d.main.tokens();
    let last_start = (0..n).map(|j| g.start(j)).max();
    let uncovered = (0..usize::BITS)
        .map(|k| 1usize << k)
        .take_while(|&p| p < t_len)
        .find(|&p| last_start.is_none_or(|s| s < p as i64));
    if let Some(p) = uncovered {
        out.push(format!(
            "no complete main-run window starts at or after token {p} (the last of {n} starts at {}, T = {t_len}): a \
             bug from token {p} on (an index wrapping, a grid late) shows only in the shifted run, if any; dump at \
             least {} tokens",
            last_start.map_or("-".to_string(), |s| s.to_string()),
            tokens_to_reach(d, p)
        ));
    }
    if let Some(RopeScaling::Yarn { factor, original_max_position, .. }) =
        d.spec.rope.as_ref().and_then(|r| r.scaling.as_ref())
    {
        if max_position < *original_max_position {
            // The smallest offset that lifts the largest entry position to the original context,
            // rounded up to a multiple of S (`KernelSpec::at_position_offset`).
            let s = g.stride();
            let need = (original_max_position - max_position).div_ceil(s) * s + d.spec.position_offset();
            out.push(format!(
                "every entry position (at most {max_position}) lies below YaRN's original context \
                 ({original_max_position}): a wrong factor (not {factor}) or correction range moves the slow pairs by \
                 position x frequency change, too little to see at these positions; YaRN is checked only past the \
                 original context: dump with metadata position_offset >= {need} (--position-offset; \
                 theory/dump-format.md, \"Position offset\")"
            ));
        }
    }
    out
}
