//! K13 on a dump, the tolerance rule per output (`theory/dump-format.md`, "The tolerance rule"):
//! pooled keys/values and gates against the f64 reference and the twin (the reference in the
//! kernel's accumulator dtype), post-processed keys/values given the kernel's own pooled entries
//! (or end to end), encoded like the kernel's cache when the dump names a `cache_format`, and the
//! systematic-scale check beside each.

use super::{CheckRow, Status};
use crate::conformance::dump::Dump;
use crate::conformance::harness::checks::post_rows;
use crate::conformance::harness::tolerance::{
    accumulator, max_abs_diff, rounding_bound, rounding_bound_rms, unit_roundoff, STAGE_ROUNDINGS, STAGE_ROUNDINGS_RMS,
};
use crate::kernel::Compressed;
use candle_core::DType;
use ndarray::{s, Array2, Axis};

/// Floor of the systematic-scale check, in units of roundoff of the dump's dtype: a kernel whose
/// outputs are the reference times `1 + c` fails once `|c|` exceeds this (plus twice the low
/// reference's own scale). 4 keeps correct kernels (unbiased rounding, scale ~ u / sqrt(N)) far
/// inside and catches a 16-ulp systematic error with room to spare.
pub const SCALE_FLOOR_ULPS: f64 = 4.0;

/// The K13 rows of the main run: `ref64`/`low` are the f64 reference and the twin of each
/// sequence, `n` the entries compared, `positions` theirs, `terms` the summation length.
pub(super) fn rows(
    d: &Dump,
    ref64: &[Compressed<f64>],
    low: &[Compressed<f64>],
    n: usize,
    positions: &[usize],
    terms: usize,
) -> Vec<CheckRow> {
    let spec = &d.spec;
    let run = &d.main;
    let b = run.batch();
    let mut rows = Vec::new();
    let cut2 = |a: &ndarray::Array3<f64>, k: usize| a.slice(s![k, ..n, ..]).to_owned();
    let u = unit_roundoff(d.dtype);
    let format = d.cache_format.as_ref();
    let quantized = format.map_or(0, |f| {
        let r = spec.rope.as_ref().map_or(0, |rs| rs.rotated_channels(d.dims.d_head));
        f.quantized_channels(d.dims.d_head, r)
    });
    // `encoded`: the output is a stored cache entry in `format` (keys and values), compared with
    // the reference's own encoding of its f64 result, each channel allowed two grid steps of the
    // format at its block's scale (a pre-encoding difference may flip a rounding, or the block
    // scale by a power of two) on top of the pre-encoding rule.
    let rule = |name: &str,
                got: &dyn Fn(usize) -> Array2<f64>,
                r: &dyn Fn(usize) -> (Array2<f64>, Array2<f64>),
                encoded: bool| {
        let fmt = format.filter(|_| encoded);
        let (mut err, mut err_low, mut mag) = (0.0f64, 0.0f64, 0.0f64);
        let (mut sq, mut sq_low, mut sq_ref, mut count) = (0.0f64, 0.0f64, 0.0f64, 0usize);
        let (mut cross, mut cross_low, mut norm) = (0.0f64, 0.0f64, 0.0f64);
        let mut off_grid: Option<String> = None;
        for k in 0..b {
            let (r64, rlow) = r(k);
            let g = got(k);
            if g.shape() != r64.shape() {
                err = f64::INFINITY;
                continue;
            }
            for (j, ((gr, rr), lr)) in g.rows().into_iter().zip(r64.rows()).zip(rlow.rows()).enumerate() {
                let (rr, lr) = (rr.to_vec(), lr.to_vec());
                // What the comparison is against: the f64 result, encoded like the kernel's.
                let (target, low_t, slack) = match fmt {
                    Some(f) => {
                        let (mut t, mut l) = (rr.clone(), lr.clone());
                        f.round_entry(&mut t, quantized);
                        f.round_entry(&mut l, quantized);
                        let sp = f.spacing_entry(&rr, quantized);
                        if off_grid.is_none() {
                            if let Some(c) = f.off_grid(&gr.to_vec(), quantized) {
                                off_grid = Some(format!("sequence {k}, entry {j}, channel {c} = {:e}", gr[c]));
                            }
                        }
                        (t, l, sp.into_iter().map(|v| 2.0 * v).collect())
                    }
                    None => (rr.clone(), lr.clone(), vec![0.0; rr.len()]),
                };
                for c in 0..rr.len() {
                    let (x, y, l) = (gr[c], rr[c], lr[c]);
                    let e = (x - target[c]).abs() - slack[c];
                    err = if e.is_nan() { f64::INFINITY } else { err.max(e) };
                    err_low = err_low.max((l - y).abs());
                    mag = mag.max(y.abs());
                    sq += (x - y) * (x - y);
                    sq_low += (l - y) * (l - y);
                    sq_ref += y * y;
                    count += 1;
                    cross += (x - y) * y;
                    cross_low += (low_t[c] - y) * y;
                    norm += y * y;
                }
            }
        }
        let bound = rounding_bound(err_low, d.dtype, mag, terms);
        let rms = |v: f64| if count > 0 { (v / count as f64).sqrt() } else { 0.0 };
        let (rms_err, rms_low, rms_ref) = (rms(sq), rms(sq_low), rms(sq_ref));
        let bound_rms = rounding_bound_rms(rms_low, d.dtype, rms_ref, terms);
        // The RMS half of the rule is for plain outputs; an encoded output's error is the
        // format's rounding, held per channel above.
        let rms_fails = fmt.is_none() && rms_err > bound_rms;
        let max_fails = err.is_nan() || err > bound;
        let what = if fmt.is_some() { "max(|impl - enc(ref64)| - 2 steps)" } else { "max|impl - ref64|" };
        let rms_note = if fmt.is_some() {
            String::new()
        } else {
            format!("; rms {rms_err:.3e} vs 2 * rms|twin - ref64| ({rms_low:.3e}) + {STAGE_ROUNDINGS_RMS} u rms|ref64| = {bound_rms:.3e}")
        };
        let (error, shown_bound) = if rms_fails && !max_fails { (rms_err, bound_rms) } else { (err, bound) };
        let magnitude = CheckRow {
            id: "K13",
            name: format!("tolerance: {name}"),
            status: if max_fails || rms_fails { Status::Fail } else { Status::Pass },
            error,
            bound: shown_bound,
            note: format!(
                "{what} = {err:.3e} vs 2 * max|twin - ref64| ({err_low:.3e}) + {STAGE_ROUNDINGS} u max|ref64| = \
                 {bound:.3e}{rms_note}"
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
                "impl = ref64 * (1 + {scale:.3e}) in least squares ({:.1} units of roundoff); twin: {scale_low:.3e}",
                scale / u
            ),
        };
        let grid = fmt.map(|f| CheckRow {
            id: "K13",
            name: format!("cache format: {name} on the grid"),
            status: if off_grid.is_none() { Status::Pass } else { Status::Fail },
            error: if off_grid.is_none() { 0.0 } else { 1.0 },
            bound: 0.0,
            note: match &off_grid {
                None => format!("every entry is a decoded {}", f.describe()),
                Some(at) => format!(
                    "{at} is not a value of {}: the entries were not stored in this format (mislabelled, or \
                     another block size or scale kind)",
                    f.describe()
                ),
            },
        });
        let mut out = vec![magnitude, systematic];
        out.extend(grid);
        out
    };
    let first_n = |a: &Array2<f64>| a.slice(s![..n, ..]).to_owned();
    if let Some(pk) = &run.pooled_keys {
        rows.extend(rule(
            "pooled keys",
            &|k| cut2(pk, k),
            &|k| (first_n(&ref64[k].pooled_k), first_n(&low[k].pooled_k)),
            false,
        ));
    }
    if let Some(pv) = run.pooled_values.as_ref().or(if spec.shared_kv { run.pooled_keys.as_ref() } else { None }) {
        if !spec.shared_kv {
            rows.extend(rule(
                "pooled values",
                &|k| cut2(pv, k),
                &|k| (first_n(&ref64[k].pooled_v), first_n(&low[k].pooled_v)),
                false,
            ));
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
            let row = rule(name, &got, &r, false).swap_remove(0);
            rows.push(row);
        }
    }
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
                        DType::F32 => post_rows::<f32>(spec, &d.params, &own, positions),
                        _ => post_rows::<f64>(spec, &d.params, &own, positions),
                    }
                };
                rows.extend(rule(
                    &format!("{name} (post, given own pooled)"),
                    &|k| cut2(out, k),
                    &|k| (post(k, DType::F64), post(k, accumulator(d.dtype))),
                    true,
                ));
            }
            None => {
                rows.extend(rule(
                    &format!("{name} (end to end)"),
                    &|k| cut2(out, k),
                    &|k| {
                        if is_key {
                            (first_n(&ref64[k].keys), first_n(&low[k].keys))
                        } else {
                            (first_n(&ref64[k].values), first_n(&low[k].values))
                        }
                    },
                    true,
                ));
            }
        }
    }
    // A shared-K/V kernel that also dumps values: they must be its keys (never silently ignored).
    if let (true, Some(vals)) = (spec.shared_kv, &run.values) {
        let mut row = rule(
            "values of a shared K/V kernel (against the keys)",
            &|k| cut2(vals, k),
            &|k| (first_n(&ref64[k].keys), first_n(&low[k].keys)),
            true,
        )
        .swap_remove(0);
        let same = max_abs_diff(vals, &run.keys);
        if same > 0.0 {
            row.status = Status::Fail;
            row.note = format!(
                "values differ from the kernel's own keys by {same:.3e}; shared_kv means one tensor serves both"
            );
        }
        rows.push(row);
    }

    rows
}
