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
//! that depends on phase is the signature of an indexing bug.

use super::dump::{Dump, Run};
use super::harness::checks::{low_reference, post_rows};
use super::harness::tolerance::{floor, max_abs, max_abs_diff, reassociation, two_reference_bound, unit_roundoff};
use super::reference::{self, compress_window, Mutation};
use super::Compressed;
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
    let rule = |name: &str, got: &dyn Fn(usize) -> Array2<f64>, r: &dyn Fn(usize) -> (Array2<f64>, Array2<f64>)| {
        let (mut err, mut err_low, mut mag) = (0.0f64, 0.0f64, 0.0f64);
        for k in 0..b {
            let (r64, rlow) = r(k);
            err = err.max(max_abs_diff(&got(k), &r64));
            err_low = err_low.max(max_abs_diff(&rlow, &r64));
            mag = mag.max(max_abs(&r64));
        }
        let bound = two_reference_bound(err_low, d.dtype, mag, terms);
        CheckRow {
            id: "K13",
            name: format!("tolerance: {name}"),
            status: if err <= bound { Status::Pass } else { Status::Fail },
            error: err,
            bound,
            note: format!(
                "max|impl - ref64| = {err:.3e} vs 2 * max|low - ref64| ({err_low:.3e}) + floor ({:.3e})",
                floor(d.dtype, mag, terms)
            ),
        }
    };
    let first_n = |a: &Array2<f64>| a.slice(s![..n, ..]).to_owned();
    if let Some(pk) = &run.pooled_keys {
        rows.push(rule("pooled keys", &|k| cut2(pk, k), &|k| (first_n(&ref64[k].pooled_k), first_n(&low[k].pooled_k))));
    }
    if let Some(pv) = run.pooled_values.as_ref().or(if spec.shared_kv { run.pooled_keys.as_ref() } else { None }) {
        if !spec.shared_kv {
            rows.push(rule("pooled values", &|k| cut2(pv, k), &|k| {
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
            let mut row = rule(name, &got, &r);
            row.bound = row.bound.max(0.0);
            rows.push(row);
        }
    }
    let positions: Vec<usize> = ref64[0].positions[..n].to_vec();
    let outputs: Vec<(&str, &ndarray::Array3<f64>, Option<&ndarray::Array3<f64>>)> = if spec.shared_kv {
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
                rows.push(rule(&format!("{name} (post, given own pooled)"), &|k| cut2(out, k), &|k| {
                    (post(k, DType::F64), post(k, d.dtype))
                }));
            }
            None => {
                rows.push(rule(&format!("{name} (end to end)"), &|k| cut2(out, k), &|k| {
                    if is_key {
                        (first_n(&ref64[k].keys), first_n(&low[k].keys))
                    } else {
                        (first_n(&ref64[k].values), first_n(&low[k].values))
                    }
                }));
            }
        }
    }

    // K5: gate normalisation.
    let u = unit_roundoff(d.dtype);
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
    for k in 0..b {
        for (j, e) in window_errors.iter_mut().enumerate() {
            let ek = max_abs_diff(&run.keys.slice(s![k, j, ..]), &ref64[k].keys.row(j));
            let ev = max_abs_diff(&run.values_or_keys().slice(s![k, j, ..]), &ref64[k].values.row(j));
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
            for j in 0..n_got {
                let rows_j: Vec<Option<ArrayView1<f64>>> = (0..g.window())
                    .map(|i| {
                        g.token_at(j, i)
                            .map(|t0| t0 as i64 + delta)
                            .filter(|&t| t >= 0 && (t as usize) < t_len)
                            .map(|t| x.row(t as usize))
                    })
                    .collect();
                if rows_j.iter().all(Option::is_none) {
                    continue;
                }
                let out = compress_window(spec, d.dims, &d.params, j, &rows_j, Mutation::None);
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
        passed,
    })
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
                    super::post::rope(&mut old, r, s_len, rs.theta);
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
