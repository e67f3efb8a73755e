//! The invariants a dump makes checkable besides the tolerance rule: finite outputs, K5 (gate
//! normalisation, with dumped gates), K2 (locality, with a perturbed run) and K3 (stride shift,
//! with a shifted run).

use super::references::references;
use super::report::{not_checkable, CheckRow, Status};
use super::tolerance::{AngleAllowance, Bounds, Encoded};
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
/// without empty slots. Each output is held to its own K13 rule (`bounds`): pooled entries,
/// gates and plain keys/values to twice their max-norm bound (each of the two runs of a correct
/// kernel lies within it of the same exact entry), never more than the reassociation bound
/// `4 u terms max|keys|` (vacuous alone at production widths: 4.4e3 at HCA size). Keys and
/// values compare after rotating the old entry by RoPE at position `S` (entry positions move by
/// `S`), each channel less both runs' RoPE angle allowance (`AngleAllowance`). Stored (encoded)
/// keys and values are judged by the rounding model of K13 with twice its
/// pre-encoding bounds: the new entry against the reference's old entry, rotated by `S`, then
/// encoded (`theory/dump-format.md`, "Quantized keys: the rounding model").
pub(super) fn k3(d: &Dump, sh: &Run, terms: usize, bounds: &Bounds) -> CheckRow {
    let g = d.spec.geometry;
    let main = &d.main;
    let s_len = g.stride();
    let mag = max_abs(&main.keys).max(1.0);
    let reassoc = reassociation(d.dtype, terms, mag);
    let twice = |name: &str, fallback: &str| {
        bounds
            .plain(name)
            .or_else(|| bounds.plain(fallback))
            .filter(|b| b.is_finite() && *b > 0.0)
            .map_or(reassoc, |b| reassoc.min(2.0 * b))
    };
    let rot = d.spec.rope.as_ref().map(|rs| rs.inv_frequencies(rs.rotated_channels(d.dims.d_head)));
    let rotate = |v: &mut Vec<f64>| {
        if let Some(f) = &rot {
            crate::kernel::post::rope(v, f, s_len);
        }
    };
    let quantized = d.cache_format.as_ref().map_or(0, |f| {
        let r = d.spec.rope.as_ref().map_or(0, |rs| rs.rotated_channels(d.dims.d_head));
        f.quantized_channels(d.dims.d_head, r)
    });
    let split = d.dims.d_head - d.spec.rope.as_ref().map_or(0, |rs| rs.rotated_channels(d.dims.d_head));
    let angle = AngleAllowance::new(d);
    let model = |name: &str| bounds.encoded.iter().find(|m| m.name.starts_with(name));
    let mut outputs: Vec<(&str, &ndarray::Array3<f64>, &ndarray::Array3<f64>)> = vec![("keys", &main.keys, &sh.keys)];
    if !d.spec.shared_kv {
        outputs.push(("values", main.values_or_keys(), sh.values_or_keys()));
    } else if main.values.is_some() || sh.values.is_some() {
        outputs.push(("keys", main.values_or_keys(), sh.values_or_keys()));
    }
    let mut encoded: Vec<(String, Encoded)> = Vec::new();
    let (mut worst, mut compared, mut problem) = (0.0f64, 0, None::<String>);
    let mut worst_bound = 0.0f64;
    let mut check = |what: &str, diff: f64, tol: f64, k: usize, j: usize, problem: &mut Option<String>| {
        if diff > worst {
            worst = diff;
            worst_bound = tol;
        }
        if (diff.is_nan() || diff > tol) && problem.is_none() {
            *problem = Some(format!(
                "{what}: old entry {j} and new entry {} (sequence {k}) differ by {diff:.3e} > {tol:.3e}",
                j + 1
            ));
        }
    };
    for k in 0..main.batch() {
        for j in 0..main.entries() {
            if g.valid_slots(j) < g.window() || j + 1 >= sh.entries() {
                continue;
            }
            compared += 1;
            let pooled = [
                ("pooled keys", &main.pooled_keys, &sh.pooled_keys, twice("pooled keys", "pooled keys")),
                ("pooled values", &main.pooled_values, &sh.pooled_values, twice("pooled values", "pooled keys")),
            ];
            for (what, a, bb, tol) in pooled {
                if let (Some(a), Some(bb)) = (a, bb) {
                    check(
                        what,
                        max_abs_diff(&a.slice(s![k, j, ..]), &bb.slice(s![k, j + 1, ..])),
                        tol,
                        k,
                        j,
                        &mut problem,
                    );
                }
            }
            let gates = [
                ("key gate", &main.gate_k, &sh.gate_k, twice("key gate", "key gate")),
                ("value gate", &main.gate_v, &sh.gate_v, twice("value gate", "key gate")),
            ];
            for (what, a, bb, tol) in gates {
                if let (Some(a), Some(bb)) = (a, bb) {
                    let diff = max_abs_diff(&a.slice(s![k, j, .., ..]), &bb.slice(s![k, j + 1, .., ..]));
                    check(what, diff, tol, k, j, &mut problem);
                }
            }
            for &(what, a, bb) in &outputs {
                let new: Vec<f64> = bb.slice(s![k, j + 1, ..]).to_vec();
                match (d.cache_format.as_ref(), model(what)) {
                    (Some(f), Some(m)) => {
                        let Some(t) = m.targets.get(k).filter(|t| j < t.nrows()) else { continue };
                        let mut y = t.row(j).to_vec();
                        rotate(&mut y);
                        let e = match encoded.iter_mut().find(|(n, _)| n == what) {
                            Some((_, e)) => e,
                            None => {
                                encoded.push((what.to_string(), Encoded::new(split)));
                                &mut encoded.last_mut().expect("pushed").1
                            }
                        };
                        e.add(f, quantized, &new, &y, None, 2.0 * m.delta, 2.0 * m.rho, m.rms_ref);
                    }
                    _ => {
                        let mut old: Vec<f64> = a.slice(s![k, j, ..]).to_vec();
                        rotate(&mut old);
                        // Each run's RoPE angle rounds on its own: the old entry's at its
                        // position, the new one's `S` later, channel by channel.
                        let p = d.spec.entry_position(j);
                        let allow = angle.as_ref().map_or_else(
                            || vec![0.0; old.len()],
                            |an| an.entry(&old, p).iter().zip(an.entry(&old, p + s_len)).map(|(a, b)| a + b).collect(),
                        );
                        let diff = old.iter().zip(&new).zip(&allow).fold(0.0f64, |w, ((x, y), a)| {
                            let e = ((x - y).abs() - a).max(0.0);
                            if e.is_nan() {
                                f64::INFINITY
                            } else {
                                w.max(e)
                            }
                        });
                        check(what, diff, twice(what, "keys"), k, j, &mut problem);
                    }
                }
            }
        }
    }
    let mut notes = Vec::new();
    for (what, e) in &encoded {
        let line = format!(
            "stored {what}: max|new - enc(rotated old ref64)| / allowance {:.3e}, rms {:.3e} vs expected flips {:.3e}",
            e.worst,
            e.rms(),
            e.rms_bound()
        );
        if e.fails() && problem.is_none() {
            problem = Some(format!("{line} (rounding model, twice the K13 pre-encoding bounds)"));
        }
        notes.push(line);
    }
    CheckRow {
        id: "K3",
        name: "stride shift (S tokens prepended)".into(),
        status: if problem.is_none() { Status::Pass } else { Status::Fail },
        error: worst,
        bound: worst_bound,
        note: problem.unwrap_or_else(|| {
            let mut s = format!("{compared} full windows moved by one entry, each output within twice its K13 bound");
            for n in notes {
                s.push_str("; ");
                s.push_str(&n);
            }
            s
        }),
    }
}
