//! The memory and work of validating a dump, estimated and refused above the limits before any
//! work.

use super::references::has_gates;
use crate::conformance::dump::Dump;
use crate::Result;

/// Bytes `kernel validate` holds for `d`, estimated: the dump's tensors in f64, and per run
/// compared with a reference (the main and the perturbed one) the f64 reference and its
/// low-precision twin, each `B * n * (4 d_h + 2 W c)` values (`c` the gate width; the gate
/// weights only when the dump has them), and one sequence's references while they are made
/// (with their gates, `2 n (4 d_h + 2 W c)`). The phase profile adds one sequence's
/// projections of `W + 2S` tokens. Measured (issue 47, w8s4, d = 8, d_h = 512, 1024 tokens,
/// no gates dumped): 93 / 128 / 191 MB peak RSS for 2 / 4 / 8 sequences, 24 MB of it the
/// binary's own; before, the profile cached every token of every sequence: 390 / 748 /
/// 1455 MB. `None` on overflow.
pub fn memory_estimate(d: &Dump) -> Option<u64> {
    let g = d.spec.geometry;
    let (b, t) = (d.main.batch(), d.main.tokens());
    let n = d.main.entries().max(g.num_windows(t)).max(1);
    let dh = d.dims.d_head;
    let c = d.spec.gate_width(dh).max(1);
    let gates = if has_gates(d) { 2 * g.window() * c } else { 0 };
    let per_entry = (4 * dh).checked_add(gates)?;
    let runs = 1 + usize::from(d.shifted.is_some()) + usize::from(d.perturbed.is_some());
    // The dump: input, and per entry keys, values, pooled entries (and gates), per run.
    let dump = crate::limits::product(&[runs, b, t, d.dims.d_model])?
        .checked_add(crate::limits::product(&[runs, b, n, per_entry])?)?;
    let compared = 1 + usize::from(d.perturbed.is_some());
    let refs = crate::limits::product(&[2 * compared, b, n, per_entry])?;
    let making = crate::limits::product(&[2, n, 4 * dh + 2 * g.window() * c])?;
    let profile = crate::limits::product(&[g.window() + 2 * g.stride(), d.spec.num_groups(), 2 * (c + dh)])?;
    dump.checked_add(refs)?.checked_add(making)?.checked_add(profile)?.checked_mul(8)
}

/// Work of validating `d`, in units of one window-token-channel step, estimated: the f64 and
/// low-precision reference runs and the `2S - 1` displaced references of the phase profile,
/// each `B * n * W * max(d, d_h)` (`n` the larger of the dump's and the geometry's entry
/// count). `None` on overflow.
pub fn work_estimate(d: &Dump) -> Option<u64> {
    let g = d.spec.geometry;
    let n = d.main.entries().max(g.num_windows(d.main.tokens()));
    let passes = (g.stride() as u64).checked_mul(2)?.checked_add(2)?;
    crate::limits::product(&[d.main.batch(), n.max(1), g.window(), d.dims.d_model.max(d.dims.d_head)])?
        .checked_mul(passes)
}

/// The work and memory bounds of [`validate`](super::validate), checked before any work: an error naming the
/// estimate, the limit and what fits (how many sequences of this length).
pub fn check_bounds(d: &Dump) -> Result<()> {
    let (b, t) = (d.main.batch(), d.main.tokens());
    bound_error(
        "dump (work of validation: (2S + 2) x B x n x W x max(d, d_h))",
        work_estimate(d),
        crate::limits::MAX_VALIDATION_WORK,
        b,
        t,
        "units, above the limit of {max} (MAX_VALIDATION_WORK)",
    )?;
    bound_error(
        "dump (memory of validation: the dump and two references in f64)",
        memory_estimate(d),
        crate::limits::MAX_VALIDATION_BYTES,
        b,
        t,
        "bytes, above the limit of {max} (MAX_VALIDATION_BYTES)",
    )
}

/// `Ok` when `estimate` (for `b` sequences of `t` tokens; `None`: overflowed) is at most `max`,
/// else an error naming `field`, the estimate, `limit` (its `{max}` replaced by `max`) and how
/// many sequences of `t` tokens fit (the estimate grows with the sequences).
pub fn bound_error(field: &str, estimate: Option<u64>, max: u64, b: usize, t: usize, limit: &str) -> Result<()> {
    if estimate.is_some_and(|v| v <= max) {
        return Ok(());
    }
    let one = estimate.map_or(u64::MAX, |v| v / b.max(1) as u64).max(1);
    let fits = match max / one {
        0 => format!("not even one sequence of {t} tokens fits: dump fewer tokens, or a narrower head"),
        k => format!("at most {k} sequence(s) of {t} tokens fit"),
    };
    Err(crate::Error::invalid(
        field,
        format!(
            "{} for {b} sequence(s) is {}; {fits}",
            estimate.map_or("more than 2^64".into(), |v| v.to_string()),
            limit.replace("{max}", &max.to_string())
        ),
    ))
}
