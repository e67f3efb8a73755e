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

mod checks;
mod coverage;
mod format_check;
mod hints;
mod localized;
mod profile;
mod tolerance;

use hints::hints;
pub use tolerance::SCALE_FLOOR_ULPS;

use super::dump::{Dump, Run};
use super::harness::checks::low_reference;
use super::harness::tolerance::accumulator;
use crate::kernel::reference;
use crate::kernel::Compressed;
use crate::stop::Stop;
use crate::Result;
use ndarray::Axis;
use serde::Serialize;

/// The outcome of one row of the verdict table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The check holds.
    Pass,
    /// The check fails: the kernel is wrong.
    Fail,
    /// The dump does not carry what the check needs.
    NotCheckable,
}

/// One row of the verdict table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckRow {
    /// Invariant id (`K1`, `K13` ...).
    pub id: &'static str,
    /// What is checked.
    pub name: String,
    /// Outcome.
    pub status: Status,
    /// The measured error (0 when not applicable).
    pub error: f64,
    /// The bound it is held to.
    pub bound: f64,
    /// Detail: both sides of the rule, or why the check could not run.
    pub note: String,
}

/// One point of the phase profile.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhasePoint {
    /// Displacement of the window starts in tokens (`-(S-1) ..= S-1`).
    pub delta: i64,
    /// Phase `(start + delta) mod S` of the displaced window starts.
    pub phase: usize,
    /// `max |impl - ref_delta|` over keys and values of the compared entries.
    pub error: f64,
    /// Number of entries compared.
    pub entries: usize,
}

/// Everything `phasekv kernel validate` reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Validation {
    /// The spec's name.
    pub spec: String,
    /// The spec's knobs in one line.
    pub describe: String,
    /// The compute dtype the rule is applied in.
    pub dtype: String,
    /// The quantized cache format the keys and values were checked in (`None`: plain dtype).
    pub cache_format: Option<String>,
    /// Sequences, tokens, model and head widths.
    pub shape: [usize; 4],
    /// Entries the kernel produced and entries the geometry demands.
    pub entries: (usize, usize),
    /// The verdict table.
    pub rows: Vec<CheckRow>,
    /// `e_j` for every entry `j` (see the module docs).
    pub window_errors: Vec<f64>,
    /// The end-to-end tolerance on keys (for the window plot).
    pub window_bound: f64,
    /// The phase profile.
    pub phase_profile: Vec<PhasePoint>,
    /// The displacement with the smallest error.
    pub best_delta: i64,
    /// A diagnosis when the best displacement is not 0 (an indexing bug), else `None`.
    pub diagnosis: Option<String>,
    /// Named hints from the shape of the error (RoPE, RMSNorm, dtype), see [`hints`].
    pub hints: Vec<String>,
    /// Max error of each rotated channel pair of the keys (empty without RoPE or without a
    /// failure to explain).
    pub rope_pair_errors: Vec<f64>,
    /// What the dump cannot see (a warning, never a failure): token indices no main-run
    /// window reaches, YaRN below its original context (`coverage`).
    pub warnings: Vec<String>,
    /// Whether every checkable row passes.
    pub passed: bool,
}

impl Validation {
    /// At most `max` rows of the phase profile worth showing, by displacement: all of them
    /// when they fit, else delta 0 and the smallest errors (large `S` makes long profiles).
    pub fn phase_rows(&self, max: usize) -> Vec<&PhasePoint> {
        if self.phase_profile.len() <= max {
            return self.phase_profile.iter().collect();
        }
        let mut by_error: Vec<_> = self.phase_profile.iter().filter(|p| p.entries > 0).collect();
        by_error.sort_by(|a, b| a.error.total_cmp(&b.error));
        let mut keep: Vec<_> = by_error.into_iter().take(max.saturating_sub(1)).collect();
        keep.extend(self.phase_profile.iter().filter(|p| p.delta == 0));
        keep.sort_by_key(|p| p.delta);
        keep.dedup_by_key(|p| p.delta);
        keep
    }
}

/// Per-sequence f64 reference of a run, without the gate weights when the dump has none to
/// compare (`[n, W, c]` per sequence: `W` times the entries, most of the memory otherwise).
fn references(d: &Dump, run: &Run, stop: &Stop) -> Result<Vec<Compressed<f64>>> {
    (0..run.batch())
        .map(|b| {
            stop.check("kernel validate (references)")?;
            let mut r = reference::compress(&d.spec, d.dims, &d.params, run.input.index_axis(Axis(0), b))?;
            if !has_gates(d) {
                drop_gates(&mut r);
            }
            Ok(r)
        })
        .collect()
}

/// Whether the dump's main run carries gate weights.
fn has_gates(d: &Dump) -> bool {
    d.main.gate_k.is_some() || d.main.gate_v.is_some()
}

/// Frees the gate weights of a reference nothing compares them with.
fn drop_gates(c: &mut Compressed<f64>) {
    c.gate_k = ndarray::Array3::zeros((0, 0, 0));
    c.gate_v = ndarray::Array3::zeros((0, 0, 0));
}

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

/// The work and memory bounds of [`validate`], checked before any work: an error naming the
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

/// Validates a dump. Errors only when the reference itself cannot run (never for a failing
/// kernel), or when the dump would take more than [`crate::limits::MAX_VALIDATION_WORK`]
/// units of work (refused before any work, naming the estimate).
pub fn validate(d: &Dump) -> Result<Validation> {
    validate_with_progress(d, &mut |_, _| {}, &Stop::never())
}

/// [`validate`], reporting progress as `(done, total)` units: the reference runs, then one
/// unit per sequence of the phase profile; `stop` polled per sequence of the references and
/// per window of the profile ([`crate::Error::Interrupted`] when requested). Refused before
/// any work ([`check_bounds`]) above [`crate::limits::MAX_VALIDATION_WORK`] or
/// [`crate::limits::MAX_VALIDATION_BYTES`].
pub fn validate_with_progress(d: &Dump, progress: &mut dyn FnMut(usize, usize), stop: &Stop) -> Result<Validation> {
    // The spec check `kernel check --spec` shares (`KernelSpec::head_widths`), at the dump's
    // width, before anything runs.
    d.spec.validate_for(d.dims.d_head)?;
    // The cache format's label against the stored record (issue 41): refused when contradicted.
    format_check::check_label(d)?;
    check_bounds(d)?;
    let spec = &d.spec;
    let g = spec.geometry;
    let run = &d.main;
    let (b, t_len) = (run.batch(), run.tokens());
    let n_want = g.num_windows(t_len);
    let n_got = run.entries();
    let n = n_got.min(n_want);
    let terms = g.window() * d.dims.d_model.max(d.dims.d_head);
    let mut rows = vec![
        CheckRow {
            id: "K1",
            name: "entry count n(T)".into(),
            status: if n_got == n_want { Status::Pass } else { Status::Fail },
            error: n_got.abs_diff(n_want) as f64,
            bound: 0.0,
            note: format!("{n_got} entries for T = {t_len}, the geometry gives {n_want}"),
        },
        checks::finite_outputs(d),
    ];

    // One unit for the reference runs, one per sequence of the phase profile.
    let units = 1 + b;
    progress(0, units);
    let ref64 = references(d, run, stop)?;
    let max_position = ref64.iter().flat_map(|c| c.positions.iter().copied()).max().unwrap_or(0);
    checks::reference_finite(d, &ref64, &[], max_position)?;
    let mut low = Vec::new();
    for k in 0..b {
        stop.check("kernel validate (references)")?;
        let x = run.input.index_axis(Axis(0), k).to_owned();
        let mut l = low_reference(accumulator(d.dtype), spec, d.dims, &d.params, &x)?.expect("float dtype");
        checks::reference_finite(d, &[], std::slice::from_ref(&l), max_position)?;
        if !has_gates(d) {
            drop_gates(&mut l);
        }
        low.push(l);
    }
    let positions: Vec<usize> = ref64[0].positions[..n].to_vec();
    let (k13_rows, bounds) = tolerance::rows(d, &ref64, &low, n, &positions, terms);
    rows.extend(k13_rows);
    rows.push(checks::k5(d, n));
    rows.push(match &d.perturbed {
        None => not_checkable("K2", "locality (perturbed token)", "the dump has no perturbed run"),
        Some((p, t)) => checks::k2(d, &ref64, p, *t, terms, stop)?,
    });
    rows.push(match &d.shifted {
        None => not_checkable("K3", "stride shift (S tokens prepended)", "the dump has no shifted run"),
        Some(sh) => checks::k3(d, sh, terms, &bounds),
    });

    let window_bound = rows.iter().find(|r| r.name.starts_with("tolerance: keys")).map(|r| r.bound).unwrap_or(0.0);
    rows.push(checks::signal(d, &ref64, n));
    let p = profile::profiles(d, &ref64, n, &mut |done| progress(done + 1, units), stop)?;
    let (hints, rope_pair_errors) = hints(d, &rows, &ref64, n, &positions, &bounds);
    let passed = rows.iter().all(|r| r.status != Status::Fail);
    Ok(Validation {
        spec: spec.name.clone(),
        describe: spec.describe(),
        dtype: super::dump::dtype_name(d.dtype).into(),
        cache_format: d.cache_format.as_ref().map(|f| f.describe()),
        shape: [b, t_len, d.dims.d_model, d.dims.d_head],
        entries: (n_got, n_want),
        rows,
        window_errors: p.window_errors,
        window_bound,
        phase_profile: p.phase_profile,
        best_delta: p.best_delta,
        diagnosis: p.diagnosis,
        hints,
        rope_pair_errors,
        warnings: coverage::warnings(d, n, max_position),
        passed,
    })
}

fn not_checkable(id: &'static str, name: &str, why: &str) -> CheckRow {
    CheckRow { id, name: name.into(), status: Status::NotCheckable, error: 0.0, bound: 0.0, note: why.into() }
}
