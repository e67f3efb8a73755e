//! K13 on a dump, the tolerance rule per output: pooled keys/values and gates against the f64
//! and the low-precision reference, post-processed keys/values given the kernel's own pooled
//! entries (or end to end), and the systematic-scale check beside each.

use super::{CheckRow, Status};
use crate::conformance::dump::Dump;
use crate::conformance::harness::checks::post_rows;
use crate::conformance::harness::tolerance::{floor, max_abs, max_abs_diff, two_reference_bound, unit_roundoff};
use crate::kernel::Compressed;
use candle_core::DType;
use ndarray::{s, Array2, Axis};

/// Floor of the systematic-scale check, in units of roundoff of the dump's dtype: a kernel whose
/// outputs are the reference times `1 + c` fails once `|c|` exceeds this (plus twice the low
/// reference's own scale). 4 keeps correct kernels (unbiased rounding, scale ~ u / sqrt(N)) far
/// inside and catches a 16-ulp systematic error with room to spare.
pub const SCALE_FLOOR_ULPS: f64 = 4.0;

/// The K13 rows of the main run: `ref64`/`low` are the f64 and the dump-dtype reference of each
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
                        DType::F16 => post_rows::<half::f16>(spec, &d.params, &own, positions),
                        DType::BF16 => post_rows::<half::bf16>(spec, &d.params, &own, positions),
                        _ => post_rows::<f64>(spec, &d.params, &own, positions),
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

    rows
}
