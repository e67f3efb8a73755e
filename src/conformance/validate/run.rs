//! [`validate`]: every check of a dump against the reference, with progress and stop.

use super::bounds::check_bounds;
use super::hints::hints;
use super::references::{drop_gates, has_gates, references};
use super::report::{not_checkable, CheckRow, Status, Validation};
use super::{checks, coverage, format_check, profile, tolerance};
use crate::conformance::dump::Dump;
use crate::conformance::harness::checks::low_reference;
use crate::conformance::harness::tolerance::accumulator;
use crate::stop::Stop;
use crate::Result;
use ndarray::Axis;

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
    stop.check("kernel validate (tolerances)")?;
    let (k13_rows, bounds) = tolerance::rows(d, &ref64, &low, n, &positions, terms);
    rows.extend(k13_rows);
    stop.check("kernel validate (tolerances)")?;
    rows.push(checks::k5(d, n));
    rows.push(match &d.perturbed {
        None => not_checkable("K2", "locality (perturbed token)", "the dump has no perturbed run"),
        Some((p, t)) => checks::k2(d, &ref64, p, *t, terms, stop)?,
    });
    rows.push(match &d.shifted {
        None => not_checkable("K3", "stride shift (S tokens prepended)", "the dump has no shifted run"),
        Some(sh) => checks::k3(d, sh, terms, &bounds),
    });
    stop.check("kernel validate (stride shift)")?;

    let window_bound = rows.iter().find(|r| r.name.starts_with("tolerance: keys")).map(|r| r.bound).unwrap_or(0.0);
    rows.push(checks::signal(d, &ref64, n));
    let p = profile::profiles(d, &ref64, n, &mut |done| progress(done + 1, units), stop)?;
    let (hints, rope_pair_errors) = hints(d, &rows, &ref64, n, &positions, &bounds);
    let passed = rows.iter().all(|r| r.status != Status::Fail);
    Ok(Validation {
        spec: spec.name.clone(),
        describe: spec.describe(),
        dtype: crate::conformance::dump::dtype_name(d.dtype).into(),
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
