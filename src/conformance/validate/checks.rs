//! The invariants a dump makes checkable besides the tolerance rule: finite outputs, K5 (gate
//! normalisation, with dumped gates), K2 (locality, with a perturbed run) and K3 (stride shift,
//! with a shifted run).

use super::references;
use super::{not_checkable, CheckRow, Status};
use crate::conformance::dump::{Dump, Run};
use crate::conformance::harness::tolerance::{max_abs, max_abs_diff, reassociation, unit_roundoff};
use crate::kernel::post::rope_angle;
use crate::kernel::spec::RopeScaling;
use crate::kernel::Compressed;
use crate::{Error, Result};
use ndarray::s;

/// A NaN or infinity in the kernel's outputs is a failed kernel (in its inputs or parameters the
/// dump is unusable, exit 2, see [`super::dump`]); the row names the first place it appears.
pub(super) fn finite_outputs(d: &Dump) -> CheckRow {
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

/// An output that is zero everywhere while the f64 reference is not fails, whatever else
/// passes: with a `cache_format` whose scales round every element to 0 (a floor far above the
/// data), the reference encoded the same way is zero too, and the tolerance rows would compare
/// zero with zero (issue 47). A correct kernel's output is zero only where the reference is.
pub(super) fn signal(d: &Dump, ref64: &[Compressed<f64>], n: usize) -> CheckRow {
    let run = &d.main;
    let mut outputs = vec![("keys", &run.keys)];
    if !d.spec.shared_kv {
        outputs.push(("values", run.values_or_keys()));
    }
    let mut problem = None;
    let mut worst = 0.0f64;
    for (name, got) in outputs {
        let got_max = max_abs(&got.slice(s![.., ..n.min(got.shape()[1]), ..]));
        let ref_max = ref64
            .iter()
            .map(|r| {
                let a = if name == "keys" { &r.keys } else { &r.values };
                max_abs(&a.slice(s![..n.min(a.shape()[0]), ..]))
            })
            .fold(0.0f64, f64::max);
        if got_max == 0.0 && ref_max > 0.0 && problem.is_none() {
            worst = ref_max;
            problem = Some(format!(
                "every {name} entry is 0 while the f64 reference reaches {ref_max:.3e}{}",
                if d.cache_format.is_some() { " (and its cache format may encode the reference as 0 too)" } else { "" }
            ));
        }
    }
    CheckRow {
        id: "K13",
        name: "outputs not all zero where the reference is not".into(),
        status: if problem.is_some() { Status::Fail } else { Status::Pass },
        error: worst,
        bound: 0.0,
        note: problem.unwrap_or_else(|| "every output carries a non-zero entry, or its reference is zero".into()),
    }
}

/// Where a reference is not finite, by stage (`None`: finite everywhere).
fn non_finite_stage(c: &Compressed<f64>) -> Option<&'static str> {
    if c.gate_k.iter().chain(c.gate_v.iter()).any(|v| !v.is_finite()) {
        Some("gate weights")
    } else if c.pooled_k.iter().chain(c.pooled_v.iter()).any(|v| !v.is_finite()) {
        Some("pooled entries")
    } else if c.keys.iter().chain(c.values.iter()).any(|v| !v.is_finite()) {
        Some("post-processed entries")
    } else {
        None
    }
}

/// A reference that is not finite makes the dump unusable (exit 2), never a pass: every row
/// would read `inf <= inf`. The error names the spec field that overflowed: a RoPE frequency
/// whose angle at the largest entry position is not finite (an explicit list, YaRN, theta),
/// else the stage that overflowed. A low-precision reference that overflows (an f16 dump whose
/// values leave f16's range) names the dtype.
pub(super) fn reference_finite(
    d: &Dump,
    ref64: &[Compressed<f64>],
    low: &[Compressed<f64>],
    max_position: usize,
) -> Result<()> {
    if let Some(stage) = ref64.iter().find_map(non_finite_stage) {
        if let Some(rope) = &d.spec.rope {
            let r = rope.rotated_channels(d.dims.d_head);
            let freqs = rope.inv_frequencies(r);
            let over = freqs.iter().enumerate().find(|(_, &f)| !rope_angle(max_position, f).is_finite());
            if let Some((k, f)) = over {
                let field = match &rope.scaling {
                    Some(RopeScaling::Frequencies(_)) => "rope.scaling.frequencies",
                    Some(RopeScaling::Yarn { .. }) => "rope.scaling.yarn",
                    None => "rope.theta",
                };
                return Err(Error::invalid(
                    field,
                    format!(
                        "the reference is not finite: pair {k}'s frequency {f:e} at position {max_position} gives a \
                         non-finite angle; the dump cannot be validated"
                    ),
                ));
            }
        }
        let field = match stage {
            "post-processed entries" => "spec",
            _ => "parameters",
        };
        return Err(Error::invalid(
            field,
            format!(
                "the f64 reference's {stage} are not finite (the inputs and parameters overflow this spec); the dump \
                 cannot be validated"
            ),
        ));
    }
    if let Some(stage) = low.iter().find_map(non_finite_stage) {
        return Err(Error::invalid(
            "dtype",
            format!(
                "the {} reference's {stage} are not finite (values beyond the dtype's range); the dump cannot be \
                 validated in this dtype",
                crate::conformance::dump::dtype_name(d.dtype)
            ),
        ));
    }
    Ok(())
}

/// K5 on the dumped gates of the first `n` entries: positive on real slots, 0 on empty ones,
/// summing to 1 within `4 u W`.
pub(super) fn k5(d: &Dump, n: usize) -> CheckRow {
    let (g, run, b) = (d.spec.geometry, &d.main, d.main.batch());
    let u = unit_roundoff(d.dtype);
    match (&run.gate_k, &run.gate_v) {
        (None, None) => not_checkable("K5", "gate normalisation", "the dump has no gate_k / gate_v"),
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
            CheckRow {
                id: "K5",
                name: "gate normalisation".into(),
                status: if problem.is_none() { Status::Pass } else { Status::Fail },
                error: worst,
                bound: tol,
                note: problem.unwrap_or_else(|| "positive on real slots, 0 on empty ones, sum 1".into()),
            }
        }
    }
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
pub(super) fn k2(
    d: &Dump,
    ref_main: &[Compressed<f64>],
    p: &Run,
    t: usize,
    terms: usize,
    stop: &crate::stop::Stop,
) -> Result<CheckRow> {
    let g = d.spec.geometry;
    let main = &d.main;
    let n = main.entries().min(p.entries());
    let inside = g.windows_containing(t, main.tokens());
    let closed = inside.iter().any(|&j| j < n);
    let mag = max_abs(&main.keys).max(1.0);
    let tol = if d.deterministic { 0.0 } else { reassociation(d.dtype, terms, mag) };
    let ref_p = references(d, p, stop)?;
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
    if problem.is_none() && !closed {
        // The perturbed token lies in no entry the kernel produced (a window that never
        // closes): the entries that must change are none, so K2 checked only half of itself,
        // and the row says so instead of PASS.
        return Ok(not_checkable(
            "K2",
            "locality (perturbed token)",
            &format!(
                "token {t} lies in no closed window (entries {inside:?}, {n} produced), so nothing must change; \
                 perturb a token inside a window that closes (e.g. token 0)"
            ),
        ));
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
/// rotating the old entry by RoPE at position `S` (entry positions move by `S`). Tolerance:
/// twice `k13_bound`, the largest bound the rounding model of K13 gives one output against the
/// f64 reference (each of the two runs of a correct kernel lies within it of the same exact
/// entry), and never more than the reassociation bound `4 u terms max|keys|`, which grows with
/// `W d` and is vacuous at production widths (4.4e3 at HCA size) when used alone. Exception:
/// the keys and values of a quantized record (`cache_format`) keep the reassociation bound. The
/// old entry is decoded, then rotated by RoPE, while the new one was rotated, then encoded, and
/// a block scale that flips between the two runs moves a whole block by a grid step at another
/// scale (measured: up to 6 times the K13 bound for FP4); their shift is checked through the
/// pooled entries and gates, which are never quantized, and their values by K13.
pub(super) fn k3(d: &Dump, sh: &Run, terms: usize, k13_bound: f64) -> CheckRow {
    let g = d.spec.geometry;
    let main = &d.main;
    let s_len = g.stride();
    let mag = max_abs(&main.keys).max(1.0);
    let reassoc = reassociation(d.dtype, terms, mag);
    let tol = if k13_bound.is_finite() && k13_bound > 0.0 { reassoc.min(2.0 * k13_bound) } else { reassoc };
    let key_tol = if d.cache_format.is_some() { reassoc } else { tol };
    let (mut worst, mut worst_keys, mut compared, mut problem) = (0.0f64, 0.0f64, 0, None);
    for k in 0..main.batch() {
        for j in 0..main.entries() {
            if g.valid_slots(j) < g.window() || j + 1 >= sh.entries() {
                continue;
            }
            compared += 1;
            let mut diffs = Vec::new();
            let mut key_diffs = Vec::new();
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
                key_diffs.push(max_abs_diff(&ndarray::Array1::from(old), &bb.slice(s![k, j + 1, ..]).to_owned()));
            }
            let diff = diffs.into_iter().fold(0.0, f64::max);
            let key_diff = key_diffs.into_iter().fold(0.0, f64::max);
            worst = worst.max(diff).max(if d.cache_format.is_some() { 0.0 } else { key_diff });
            worst_keys = worst_keys.max(key_diff);
            if (diff > tol || key_diff > key_tol) && problem.is_none() {
                problem = Some(format!(
                    "old entry {j} and new entry {} (sequence {k}) differ by {:.3e}",
                    j + 1,
                    diff.max(key_diff)
                ));
            }
        }
    }
    CheckRow {
        id: "K3",
        name: "stride shift (S tokens prepended)".into(),
        status: if problem.is_none() { Status::Pass } else { Status::Fail },
        error: worst,
        bound: tol,
        note: problem.unwrap_or_else(|| {
            if d.cache_format.is_some() {
                format!(
                    "{compared} full windows moved by one entry; quantized keys/values: {worst_keys:.3e} vs the \
                     reassociation bound {key_tol:.3e}"
                )
            } else {
                format!("{compared} full windows moved by one entry")
            }
        }),
    }
}
