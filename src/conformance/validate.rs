//! Validation of a dumped kernel ([`super::dump::Dump`]) against the reference: the tolerance
//! rule of `spec/kernels.md` §3 in the dump's dtype, the invariants the dump makes checkable
//! (K1 always, K2 with a perturbed run, K3 with a shifted run, K5 with dumped gates), and two
//! error profiles. The library computes; the CLI prints ([`Validation`] is the table).
//!
//! **Tolerance rule (K13), two stages as in the harness.** With pooled entries in the dump,
//! pooled keys/values and gates are compared with the f64 reference (`ref64`) and the reference
//! computed in the dump's dtype (`low`), and the post-processed keys/values are compared with the
//! f64 post-processing of the kernel's *own* pooled entries (the dtype's post-processing of the
//! same rows is the low reference). Without pooled entries the keys/values are compared end to
//! end (ill-conditioned under RMSNorm of short vectors, `theory/kernels.md`). Bound:
//! `2 max|low - ref64| + floor(dtype, max|ref64|, W max(d, d_h))`.
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

use super::dump::{Dump, Run};
use super::harness::checks::{low_reference, post_rows};
use super::harness::tolerance::{floor, max_abs, max_abs_diff, reassociation, two_reference_bound, unit_roundoff};
use crate::kernel::reference::{self, compress_window};
use crate::kernel::Compressed;
use crate::Result;
use candle_core::DType;
use ndarray::{s, Array2, ArrayView1, Axis};
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
    /// Whether every checkable row passes.
    pub passed: bool,
}

/// Per-sequence f64 reference of a run.
fn references(d: &Dump, run: &Run) -> Result<Vec<Compressed<f64>>> {
    (0..run.batch())
        .map(|b| reference::compress(&d.spec, d.dims, &d.params, run.input.index_axis(Axis(0), b)))
        .collect()
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

/// Validates a dump. Errors only when the reference itself cannot run (never for a failing
/// kernel), or when the dump would take more than [`crate::limits::MAX_VALIDATION_WORK`]
/// units of work (refused before any work, naming the estimate).
pub fn validate(d: &Dump) -> Result<Validation> {
    validate_with_progress(d, &mut |_, _| {})
}

/// [`validate`], reporting progress as `(done, total)` units: the reference runs, then one
/// unit per displacement of the phase profile.
pub fn validate_with_progress(d: &Dump, progress: &mut dyn FnMut(usize, usize)) -> Result<Validation> {
    crate::limits::check_product(
        "dump (work of validation: (2S + 2) x B x n x W x max(d, d_h))",
        work_estimate(d),
        crate::limits::MAX_VALIDATION_WORK,
    )?;
    let spec = &d.spec;
    let g = spec.geometry;
    let run = &d.main;
    let (b, t_len) = (run.batch(), run.tokens());
    let n_want = g.num_windows(t_len);
    let n_got = run.entries();
    let n = n_got.min(n_want);
    let terms = g.window() * d.dims.d_model.max(d.dims.d_head);
    let mut rows = Vec::new();

    // K1
    rows.push(CheckRow {
        id: "K1",
        name: "entry count n(T)".into(),
        status: if n_got == n_want { Status::Pass } else { Status::Fail },
        error: n_got.abs_diff(n_want) as f64,
        bound: 0.0,
        note: format!("{n_got} entries for T = {t_len}, the geometry gives {n_want}"),
    });

    rows.push(finite_outputs(d));

    // One unit for the reference runs, one per displacement `-(S-1)..=S-1`.
    let units = 2 * g.stride();
    progress(0, units);
    let ref64 = references(d, run)?;
    let mut low = Vec::new();
    for k in 0..b {
        let x = run.input.index_axis(Axis(0), k).to_owned();
        low.push(low_reference(d.dtype, spec, d.dims, &d.params, &x)?.expect("float dtype"));
    }

    // K13: the tolerance rule, per output.
    let cut2 = |a: &ndarray::Array3<f64>, k: usize| a.slice(s![k, ..n, ..]).to_owned();
    let u = unit_roundoff(d.dtype);
    let rule = |name: &str, got: &dyn Fn(usize) -> Array2<f64>, r: &dyn Fn(usize) -> (Array2<f64>, Array2<f64>)| {
        let (mut err, mut err_low, mut mag) = (0.0f64, 0.0f64, 0.0f64);
        let (mut cross, mut cross_low, mut norm) = (0.0f64, 0.0f64, 0.0f64);
        for k in 0..b {
            let (r64, rlow) = r(k);
            let g = got(k);
            err = err.max(max_abs_diff(&g, &r64));
            err_low = err_low.max(max_abs_diff(&rlow, &r64));
            mag = mag.max(max_abs(&r64));
            if g.shape() == r64.shape() {
                for ((&x, &y), &l) in g.iter().zip(r64.iter()).zip(rlow.iter()) {
                    cross += (x - y) * y;
                    cross_low += (l - y) * y;
                    norm += y * y;
                }
            }
        }
        let bound = two_reference_bound(err_low, d.dtype, mag, terms);
        let magnitude = CheckRow {
            id: "K13",
            name: format!("tolerance: {name}"),
            status: if err <= bound { Status::Pass } else { Status::Fail },
            error: err,
            bound,
            note: format!(
                "max|impl - ref64| = {err:.3e} vs 2 * max|low - ref64| ({err_low:.3e}) + floor ({:.3e})",
                floor(d.dtype, mag, terms)
            ),
        };
        // A systematic relative error (impl = ref * (1 + c)) hides under the magnitude rule
        // when c is a few units of roundoff; rounding errors are unbiased, so the least-squares
        // scale of the error on the reference, `sum (impl - ref) ref / sum ref^2`, is near 0 for
        // a correct kernel and c for a scaled one. Held to the same two-reference rule with a
        // floor of SCALE_FLOOR_ULPS units of roundoff.
        let (scale, scale_low) = if norm > 0.0 { (cross / norm, cross_low / norm) } else { (0.0, 0.0) };
        let scale_bound = 2.0 * scale_low.abs() + SCALE_FLOOR_ULPS * u;
        let systematic = CheckRow {
            id: "K13",
            name: format!("systematic scale: {name}"),
            status: if scale.abs() <= scale_bound { Status::Pass } else { Status::Fail },
            error: scale.abs(),
            bound: scale_bound,
            note: format!(
                "impl = ref64 * (1 + {scale:.3e}) in least squares ({:.1} units of roundoff); low: {scale_low:.3e}",
                scale / u
            ),
        };
        [magnitude, systematic]
    };
    let first_n = |a: &Array2<f64>| a.slice(s![..n, ..]).to_owned();
    if let Some(pk) = &run.pooled_keys {
        rows.extend(rule("pooled keys", &|k| cut2(pk, k), &|k| {
            (first_n(&ref64[k].pooled_k), first_n(&low[k].pooled_k))
        }));
    }
    if let Some(pv) = run.pooled_values.as_ref().or(if spec.shared_kv { run.pooled_keys.as_ref() } else { None }) {
        if !spec.shared_kv {
            rows.extend(rule("pooled values", &|k| cut2(pv, k), &|k| {
                (first_n(&ref64[k].pooled_v), first_n(&low[k].pooled_v))
            }));
        }
    }
    for (name, gate, pick) in
        [("key gate", &run.gate_k, 0usize), ("value gate", if spec.shared_kv { &None } else { &run.gate_v }, 1usize)]
    {
        if let Some(gt) = gate {
            let flat = |a: &ndarray::Array3<f64>| {
                let a = a.slice(s![..n, .., ..]).to_owned();
                let len = a.len();
                a.into_shape_with_order((1, len)).expect("contiguous")
            };
            let got = |k: usize| flat(&gt.index_axis(Axis(0), k).to_owned());
            let r = |k: usize| {
                let (a, l) =
                    if pick == 0 { (&ref64[k].gate_k, &low[k].gate_k) } else { (&ref64[k].gate_v, &low[k].gate_v) };
                (flat(a), flat(l))
            };
            let [row, _] = rule(name, &got, &r);
            rows.push(row);
        }
    }
    let positions: Vec<usize> = ref64[0].positions[..n].to_vec();
    // (name, the kernel's output, its pooled entries if dumped)
    type Output<'a> = (&'a str, &'a ndarray::Array3<f64>, Option<&'a ndarray::Array3<f64>>);
    let outputs: Vec<Output> = if spec.shared_kv {
        vec![("keys", &run.keys, run.pooled_keys.as_ref())]
    } else {
        vec![
            ("keys", &run.keys, run.pooled_keys.as_ref()),
            ("values", run.values_or_keys(), run.pooled_values.as_ref()),
        ]
    };
    for (name, out, pooled) in outputs {
        let is_key = name == "keys";
        match pooled {
            Some(p) => {
                let post = |k: usize, dt: DType| {
                    let own = cut2(p, k);
                    match dt {
                        DType::F32 => post_rows::<f32>(spec, &d.params, &own, &positions),
                        DType::F16 => post_rows::<half::f16>(spec, &d.params, &own, &positions),
                        DType::BF16 => post_rows::<half::bf16>(spec, &d.params, &own, &positions),
                        _ => post_rows::<f64>(spec, &d.params, &own, &positions),
                    }
                };
                rows.extend(rule(&format!("{name} (post, given own pooled)"), &|k| cut2(out, k), &|k| {
                    (post(k, DType::F64), post(k, d.dtype))
                }));
            }
            None => {
                rows.extend(rule(&format!("{name} (end to end)"), &|k| cut2(out, k), &|k| {
                    if is_key {
                        (first_n(&ref64[k].keys), first_n(&low[k].keys))
                    } else {
                        (first_n(&ref64[k].values), first_n(&low[k].values))
                    }
                }));
            }
        }
    }
    // A shared-K/V kernel that also dumps values: they must be its keys (never silently ignored).
    if let (true, Some(vals)) = (spec.shared_kv, &run.values) {
        let [mut row, _] = rule("values of a shared K/V kernel (against the keys)", &|k| cut2(vals, k), &|k| {
            (first_n(&ref64[k].keys), first_n(&low[k].keys))
        });
        let same = max_abs_diff(vals, &run.keys);
        if same > 0.0 {
            row.status = Status::Fail;
            row.note = format!(
                "values differ from the kernel's own keys by {same:.3e}; shared_kv means one tensor serves both"
            );
        }
        rows.push(row);
    }

    // K5: gate normalisation.
    match (&run.gate_k, &run.gate_v) {
        (None, None) => rows.push(not_checkable("K5", "gate normalisation", "the dump has no gate_k / gate_v")),
        (gk, gv) => {
            let mut worst = 0.0f64;
            let mut problem: Option<String> = None;
            let tol = 4.0 * u * g.window() as f64;
            for (bname, gate) in [("gate_k", gk), ("gate_v", gv)] {
                let Some(gate) = gate else { continue };
                for k in 0..b {
                    for j in 0..n {
                        for c in 0..gate.shape()[3] {
                            let mut sum = 0.0;
                            for i in 0..g.window() {
                                let w = gate[[k, j, i, c]];
                                let real = g.token_at(j, i).is_some();
                                if real && w <= 0.0 && problem.is_none() {
                                    problem = Some(format!("{bname}[{k}, {j}, {i}, {c}] = {w:e} on a real slot"));
                                }
                                if !real && w != 0.0 && problem.is_none() {
                                    problem = Some(format!("{bname}[{k}, {j}, {i}, {c}] = {w:e} on an empty slot"));
                                }
                                sum += w;
                            }
                            worst = worst.max((sum - 1.0).abs());
                        }
                    }
                }
            }
            if worst > tol && problem.is_none() {
                problem = Some(format!("weights sum to 1 +- {worst:.3e}"));
            }
            rows.push(CheckRow {
                id: "K5",
                name: "gate normalisation".into(),
                status: if problem.is_none() { Status::Pass } else { Status::Fail },
                error: worst,
                bound: tol,
                note: problem.unwrap_or_else(|| "positive on real slots, 0 on empty ones, sum 1".into()),
            });
        }
    }

    // K2: locality, with the perturbed run.
    rows.push(match &d.perturbed {
        None => not_checkable("K2", "locality (perturbed token)", "the dump has no perturbed run"),
        Some((p, t)) => k2(d, p, *t, terms)?,
    });
    // K3: stride shift, with the shifted run.
    rows.push(match &d.shifted {
        None => not_checkable("K3", "stride shift (S tokens prepended)", "the dump has no shifted run"),
        Some(sh) => k3(d, sh, terms),
    });

    // Profiles.
    let mut window_errors = vec![0.0f64; n];
    for (k, r) in ref64.iter().enumerate().take(b) {
        for (j, e) in window_errors.iter_mut().enumerate() {
            let ek = max_abs_diff(&run.keys.slice(s![k, j, ..]), &r.keys.row(j));
            let ev = max_abs_diff(&run.values_or_keys().slice(s![k, j, ..]), &r.values.row(j));
            *e = e.max(ek).max(ev);
        }
    }
    let window_bound = rows.iter().find(|r| r.name.starts_with("tolerance: keys")).map(|r| r.bound).unwrap_or(0.0);
    let sw = g.stride() as i64;
    let mut phase_profile = Vec::new();
    for delta in -(sw - 1)..sw {
        let mut err = 0.0f64;
        let mut count = 0;
        for k in 0..b {
            let x = run.input.index_axis(Axis(0), k);
            for j in 0..n_got.min(n_want) {
                // Only windows whose every slot is real in both geometries (the spec's and the
                // displaced one): a pad_left window 0, or a window displaced past either end,
                // would compare a different set of slots and swamp the profile.
                let rows_j: Option<Vec<Option<ArrayView1<f64>>>> = (0..g.window())
                    .map(|i| {
                        g.token_at(j, i)
                            .map(|t0| t0 as i64 + delta)
                            .filter(|&t| t >= 0 && (t as usize) < t_len)
                            .map(|t| Some(x.row(t as usize)))
                    })
                    .collect();
                let Some(rows_j) = rows_j else { continue };
                let out = compress_window(spec, d.dims, &d.params, j, &rows_j);
                err = err.max(max_abs_diff(&run.keys.slice(s![k, j, ..]), &out.key));
                err = err.max(max_abs_diff(&run.values_or_keys().slice(s![k, j, ..]), &out.value));
                count += 1;
            }
        }
        let start_phase = (g.start(0) + delta).rem_euclid(sw) as usize;
        phase_profile.push(PhasePoint { delta, phase: start_phase, error: err, entries: count });
        progress(phase_profile.len() + 1, units);
    }
    let best = phase_profile
        .iter()
        .filter(|p| p.entries > 0)
        .min_by(|a, b| a.error.total_cmp(&b.error).then(a.delta.abs().cmp(&b.delta.abs())))
        .cloned();
    let at0 = phase_profile.iter().find(|p| p.delta == 0).map(|p| p.error).unwrap_or(0.0);
    let best_delta = best.as_ref().map(|p| p.delta).unwrap_or(0);
    let diagnosis = match &best {
        Some(p) if p.delta != 0 && p.error < 0.1 * at0 => Some(format!(
            "the kernel matches the reference with windows starting {} token{} {} (error {:.3e}, against {:.3e} \
             at the spec's alignment): an indexing bug in the window start",
            p.delta.abs(),
            if p.delta.abs() == 1 { "" } else { "s" },
            if p.delta > 0 { "late" } else { "early" },
            p.error,
            at0
        )),
        _ => None,
    };
    let (hints, rope_pair_errors) = hints(d, &rows, &ref64, n, &positions);
    let passed = rows.iter().all(|r| r.status != Status::Fail);
    Ok(Validation {
        spec: spec.name.clone(),
        describe: spec.describe(),
        dtype: super::dump::dtype_name(d.dtype).into(),
        shape: [b, t_len, d.dims.d_model, d.dims.d_head],
        entries: (n_got, n_want),
        rows,
        window_errors,
        window_bound,
        phase_profile,
        best_delta,
        diagnosis,
        hints,
        rope_pair_errors,
        passed,
    })
}

/// Floor of the systematic-scale check, in units of roundoff of the dump's dtype: a kernel whose
/// outputs are the reference times `1 + c` fails once `|c|` exceeds this (plus twice the low
/// reference's own scale). 4 keeps correct kernels (unbiased rounding, scale ~ u / sqrt(N)) far
/// inside and catches a 16-ulp systematic error with room to spare.
pub const SCALE_FLOOR_ULPS: f64 = 4.0;

/// A NaN or infinity in the kernel's outputs is a failed kernel (in its inputs or parameters the
/// dump is unusable, exit 2, see [`super::dump`]); the row names the first place it appears.
fn finite_outputs(d: &Dump) -> CheckRow {
    let mut runs: Vec<(&str, &Run)> = vec![("", &d.main)];
    if let Some(sh) = &d.shifted {
        runs.push(("shifted.", sh));
    }
    if let Some((p, _)) = &d.perturbed {
        runs.push(("perturbed.", p));
    }
    let mut first: Option<String> = None;
    for (prefix, r) in runs {
        let three = [
            ("keys", Some(&r.keys)),
            ("values", r.values.as_ref()),
            ("pooled_keys", r.pooled_keys.as_ref()),
            ("pooled_values", r.pooled_values.as_ref()),
        ];
        for (name, a) in three {
            let Some(a) = a else { continue };
            if let Some(((k, j, c), v)) = a.indexed_iter().find(|(_, v)| !v.is_finite()) {
                first.get_or_insert(format!(
                    "{prefix}{name}[{k}, {j}, {c}] = {v} (sequence {k}, window {j}, channel {c})"
                ));
            }
        }
        for (name, a) in [("gate_k", r.gate_k.as_ref()), ("gate_v", r.gate_v.as_ref())] {
            let Some(a) = a else { continue };
            if let Some(((k, j, i, c), v)) = a.indexed_iter().find(|(_, v)| !v.is_finite()) {
                first.get_or_insert(format!(
                    "{prefix}{name}[{k}, {j}, {i}, {c}] = {v} (sequence {k}, window {j}, slot {i}, channel {c})"
                ));
            }
        }
    }
    CheckRow {
        id: "K13",
        name: "finite outputs".into(),
        status: if first.is_some() { Status::Fail } else { Status::Pass },
        error: if first.is_some() { f64::INFINITY } else { 0.0 },
        bound: 0.0,
        note: first.unwrap_or_else(|| "every output is finite".into()),
    }
}

/// Named hints from the shape of the keys' error, for a kernel engineer to act on:
///
/// - **RoPE**: the non-rotated channels pass and only the rotated ones fail. With the error 0
///   at position 0 and growing with position, the frequencies (theta, scaling, pairing) differ;
///   with an error already at position 0, the position the entry carries differs. The per-pair
///   profile says which: only the slow pairs (a scaling such as YaRN), every pair but the first
///   (the base theta).
/// - **RMSNorm**: every entry is the reference times its own scale: eps, or a missing or extra
///   normalisation.
/// - **dtype**: the error sits at the rounding level of a lower precision than the dump
///   declares.
///
/// Returns the hints and the per-pair profile of the rotated channels.
pub fn hints(
    d: &Dump,
    rows: &[CheckRow],
    ref64: &[Compressed<f64>],
    n: usize,
    positions: &[usize],
) -> (Vec<String>, Vec<f64>) {
    let mut out = Vec::new();
    let keys_row = rows.iter().find(|r| r.name.starts_with("tolerance: keys"));
    let Some(keys_row) = keys_row.filter(|r| r.status == Status::Fail) else { return (out, Vec::new()) };
    let pooled_ok = rows.iter().find(|r| r.name == "tolerance: pooled keys").is_none_or(|r| r.status == Status::Pass);
    let bound = keys_row.bound;
    let dh = d.dims.d_head;
    let r = d.spec.rope.as_ref().map_or(0, |rs| rs.rotated_channels(dh));
    let run = &d.main;
    // The keys' error against what they should be: the f64 post-processing of the kernel's own
    // pooled entries when dumped (isolates post-processing), else the f64 reference.
    let target = |k: usize| -> Array2<f64> {
        match &run.pooled_keys {
            Some(p) if pooled_ok => {
                post_rows::<f64>(&d.spec, &d.params, &p.slice(s![k, ..n, ..]).to_owned(), positions)
            }
            _ => ref64[k].keys.slice(s![..n, ..]).to_owned(),
        }
    };
    let mut err_plain = 0.0f64;
    let mut err_rot = 0.0f64;
    let mut pair = vec![0.0f64; r / 2];
    let mut by_entry = vec![0.0f64; n];
    let (mut scale_min, mut scale_max, mut scale_resid) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    let mut mag = 0.0f64;
    for k in 0..run.batch() {
        let t = target(k);
        for j in 0..n {
            let (mut xy, mut yy) = (0.0, 0.0);
            for c in 0..dh {
                let (x, y) = (run.keys[[k, j, c]], t[[j, c]]);
                let e = (x - y).abs();
                mag = mag.max(y.abs());
                if c < dh - r {
                    err_plain = err_plain.max(e);
                    xy += x * y;
                    yy += y * y;
                } else {
                    err_rot = err_rot.max(e);
                    by_entry[j] = by_entry[j].max(e);
                    let p = (c - (dh - r)) / 2;
                    pair[p] = pair[p].max(e);
                }
            }
            if yy > 0.0 && dh > r {
                let sc = xy / yy;
                scale_min = scale_min.min(sc);
                scale_max = scale_max.max(sc);
                for c in 0..dh - r {
                    scale_resid = scale_resid.max((run.keys[[k, j, c]] - sc * t[[j, c]]).abs());
                }
            }
        }
    }
    if r > 0 && err_plain <= bound && err_rot > bound {
        let mut hint = format!(
            "{}only the rotated channels fail (max error {err_rot:.2e}; the {} non-rotated channels {err_plain:.2e})",
            if pooled_ok { "pooled entries pass; " } else { "" },
            dh - r
        );
        let at0: Vec<f64> = (0..n).filter(|&j| positions[j] == 0).map(|j| by_entry[j]).collect();
        let later: Vec<(f64, f64)> =
            (0..n).filter(|&j| positions[j] > 0).map(|j| (positions[j] as f64, by_entry[j])).collect();
        let grows = later.len() >= 2 && {
            let mx = later.iter().map(|p| p.0).sum::<f64>() / later.len() as f64;
            let my = later.iter().map(|p| p.1).sum::<f64>() / later.len() as f64;
            later.iter().map(|(x, y)| (x - mx) * (y - my)).sum::<f64>() > 0.0
        };
        if !at0.is_empty() && at0.iter().all(|&e| e <= bound) && grows {
            hint.push_str(", error 0 at position 0 and growing with position: RoPE frequency or position mismatch");
            let agree = pair.iter().take_while(|&&e| e <= bound).count();
            if agree >= 2 && agree < pair.len() {
                hint.push_str(&format!(
                    " (pairs 0..{} agree, pairs {agree}..{} differ: the slow pairs, a frequency scaling such as YaRN)",
                    agree - 1,
                    pair.len() - 1
                ));
            } else if agree == 1 && pair.len() > 1 {
                hint.push_str(" (every pair but the first differs: the base theta)");
            }
        } else if at0.iter().any(|&e| e > bound) {
            hint.push_str(", already at position 0: the position the entry carries (which token's position) differs");
        } else {
            hint.push_str(": RoPE frequency, pairing or position mismatch");
        }
        out.push(hint);
    } else if pooled_ok && dh > r && err_plain > bound && scale_resid <= bound && scale_min.is_finite() {
        out.push(format!(
            "pooled entries pass; every entry is the reference times its own scale ({scale_min:.6} to {scale_max:.6}): \
             an RMSNorm mismatch (eps, or a missing or extra normalisation)"
        ));
    }
    let worst = keys_row.error;
    if matches!(d.dtype, DType::F64 | DType::F32) && worst.is_finite() {
        let terms = d.spec.geometry.window() * d.dims.d_model.max(dh);
        for low in [DType::BF16, DType::F16] {
            if low_dtype_fits(d.dtype, low) && worst <= floor(low, mag, terms) && worst > floor(d.dtype, mag, terms) {
                out.push(format!(
                    "the error ({worst:.2e}) is at the {} rounding level: the kernel computes in a lower precision \
                     than the dump's {}",
                    super::dump::dtype_name(low),
                    super::dump::dtype_name(d.dtype)
                ));
                break;
            }
        }
    }
    (out, pair)
}

fn low_dtype_fits(declared: DType, low: DType) -> bool {
    unit_roundoff(low) > unit_roundoff(declared)
}

fn not_checkable(id: &'static str, name: &str, why: &str) -> CheckRow {
    CheckRow { id, name: name.into(), status: Status::NotCheckable, error: 0.0, bound: 0.0, note: why.into() }
}

/// Every dumped entry-level output of entry `j` of sequence `k`, flattened (keys, values, pooled,
/// gates), so K2 compares everything the kernel exposed.
fn entry_outputs(r: &Run, k: usize, j: usize) -> Vec<f64> {
    let mut v: Vec<f64> = r.keys.slice(s![k, j, ..]).to_vec();
    v.extend(r.values_or_keys().slice(s![k, j, ..]).iter());
    for a in [&r.pooled_keys, &r.pooled_values].into_iter().flatten() {
        v.extend(a.slice(s![k, j, ..]).iter());
    }
    for a in [&r.gate_k, &r.gate_v].into_iter().flatten() {
        v.extend(a.slice(s![k, j, .., ..]).iter());
    }
    v
}

/// K2: entries whose window excludes the perturbed token are unchanged (bit for bit for a
/// deterministic kernel, within the reassociation bound otherwise); entries the reference
/// changes must change in the kernel too (the support is exact, K4 (a)).
fn k2(d: &Dump, p: &Run, t: usize, terms: usize) -> Result<CheckRow> {
    let g = d.spec.geometry;
    let main = &d.main;
    let n = main.entries().min(p.entries());
    let inside = g.windows_containing(t, main.tokens());
    let mag = max_abs(&main.keys).max(1.0);
    let tol = if d.deterministic { 0.0 } else { reassociation(d.dtype, terms, mag) };
    let ref_main = references(d, main)?;
    let ref_p = references(d, p)?;
    let (mut worst, mut problem) = (0.0f64, None);
    for k in 0..main.batch() {
        for j in 0..n {
            let (a, bb) = (entry_outputs(main, k, j), entry_outputs(p, k, j));
            let diff = a.iter().zip(&bb).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
            if inside.contains(&j) {
                let ref_changed = ref_main[k].keys.row(j) != ref_p[k].keys.row(j);
                if ref_changed && diff <= tol && problem.is_none() {
                    problem =
                        Some(format!("entry {j} (sequence {k}) holds token {t} but did not change when it changed"));
                }
            } else {
                worst = worst.max(diff);
                if diff > tol && problem.is_none() {
                    problem = Some(format!(
                        "entry {j} (sequence {k}) changed by {diff:.3e} when token {t} changed; its window {}..={} \
                         excludes it",
                        g.start(j),
                        g.end(j)
                    ));
                }
            }
        }
    }
    let mode = if d.deterministic { "bit for bit" } else { "within reassociation (nondeterministic kernel)" };
    Ok(CheckRow {
        id: "K2",
        name: "locality (perturbed token)".into(),
        status: if problem.is_none() { Status::Pass } else { Status::Fail },
        error: worst,
        bound: tol,
        note: problem.unwrap_or_else(|| format!("token {t}: entries {inside:?} change, the others are equal {mode}")),
    })
}

/// K3: with `S` tokens prepended, new entry `j+1` equals old entry `j` for every old window
/// without empty slots. Pooled entries and gates compare directly; keys and values after
/// rotating the old entry by RoPE at position `S` (entry positions move by `S`). Tolerance: the
/// reassociation bound (the kernel sees another sequence length, so its matmuls may sum in
/// another order).
fn k3(d: &Dump, sh: &Run, terms: usize) -> CheckRow {
    let g = d.spec.geometry;
    let main = &d.main;
    let s_len = g.stride();
    let mag = max_abs(&main.keys).max(1.0);
    let tol = reassociation(d.dtype, terms, mag);
    let (mut worst, mut compared, mut problem) = (0.0f64, 0, None);
    for k in 0..main.batch() {
        for j in 0..main.entries() {
            if g.valid_slots(j) < g.window() || j + 1 >= sh.entries() {
                continue;
            }
            compared += 1;
            let mut diffs = Vec::new();
            for (a, bb) in [(&main.pooled_keys, &sh.pooled_keys), (&main.pooled_values, &sh.pooled_values)] {
                if let (Some(a), Some(bb)) = (a, bb) {
                    diffs.push(max_abs_diff(&a.slice(s![k, j, ..]), &bb.slice(s![k, j + 1, ..])));
                }
            }
            for (a, bb) in [(&main.gate_k, &sh.gate_k), (&main.gate_v, &sh.gate_v)] {
                if let (Some(a), Some(bb)) = (a, bb) {
                    diffs.push(max_abs_diff(&a.slice(s![k, j, .., ..]), &bb.slice(s![k, j + 1, .., ..])));
                }
            }
            for (a, bb) in [(&main.keys, &sh.keys), (main.values_or_keys(), sh.values_or_keys())] {
                let mut old: Vec<f64> = a.slice(s![k, j, ..]).to_vec();
                if let Some(rs) = &d.spec.rope {
                    let r = rs.rotated_channels(old.len());
                    crate::kernel::post::rope(&mut old, &rs.inv_frequencies(r), s_len);
                }
                diffs.push(max_abs_diff(&ndarray::Array1::from(old), &bb.slice(s![k, j + 1, ..]).to_owned()));
            }
            let diff = diffs.into_iter().fold(0.0, f64::max);
            worst = worst.max(diff);
            if diff > tol && problem.is_none() {
                problem = Some(format!("old entry {j} and new entry {} (sequence {k}) differ by {diff:.3e}", j + 1));
            }
        }
    }
    CheckRow {
        id: "K3",
        name: "stride shift (S tokens prepended)".into(),
        status: if problem.is_none() { Status::Pass } else { Status::Fail },
        error: worst,
        bound: tol,
        note: problem.unwrap_or_else(|| format!("{compared} full windows moved by one entry")),
    }
}
