//! Named hints from the shape of a failing dump's key error (RoPE, RMSNorm, dtype), for a
//! kernel engineer to act on.

use super::{CheckRow, Status};
use crate::conformance::dump::Dump;
use crate::conformance::harness::checks::post_rows;
use crate::conformance::harness::tolerance::{unit_roundoff, STAGE_ROUNDINGS};
use crate::kernel::Compressed;
use crate::numeric::formats::CacheFormat;
use candle_core::DType;
use ndarray::{s, Array2};

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
    // With every channel rotated there is no non-rotated channel to pass, so "only the rotated
    // channels fail" would say nothing (a prev/cur swap fails every channel): no RoPE hint then.
    if r > 0 && dh > r && err_plain <= bound && err_rot > bound {
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
    // The precision hints explain an error by its size alone, so they speak only when nothing
    // more specific (RoPE, RMSNorm) did.
    let worst = keys_row.error;
    let level = |dt: DType| STAGE_ROUNDINGS * unit_roundoff(dt) * mag;
    if out.is_empty() && d.cache_format.is_none() && worst.is_finite() && worst > level(d.dtype) {
        let low =
            [DType::BF16, DType::F16].into_iter().find(|&low| low_dtype_fits(d.dtype, low) && worst <= level(low));
        // A quantized record first: an FP8 error can be as small as bf16's rounding level.
        if let Some(f) = stored_format(d, r) {
            out.push(format!(
                "every key lies on the grid of {} (error {worst:.2e}): the kernel stores its cache quantized; name \
                 the format in the dump's metadata: cache_format = {}",
                f.describe(),
                serde_json::to_string(&f).expect("format serialises")
            ));
        } else if let Some(low) = low {
            out.push(format!(
                "the error ({worst:.2e}) is at the {} rounding level: the kernel computes in a lower precision \
                 than the dump's {}",
                crate::conformance::dump::dtype_name(low),
                crate::conformance::dump::dtype_name(d.dtype)
            ));
        }
    }
    (out, pair)
}

/// The shipped cache formats (`theory/dump-format.md`, "Quantized cache formats") whose grid the
/// main run's keys lie on, the first one: a quantized record labelled as plain floats.
fn stored_format(d: &Dump, rotated: usize) -> Option<CacheFormat> {
    let keys = &d.main.keys;
    let dh = d.dims.d_head;
    SHIPPED_FORMATS.iter().map(|json| CacheFormat::from_json(json).expect("a valid format")).find(|f| {
        // Only a format that quantizes some nonzero channel can be recognised: with every
        // channel rotated, the NoPE layout quantizes none and any bf16 record "lies on" it.
        let q = f.quantized_channels(dh, rotated);
        let quantized_nonzero = keys.rows().into_iter().any(|row| row.iter().take(q).any(|&v| v != 0.0));
        quantized_nonzero && keys.rows().into_iter().all(|row| f.off_grid(&row.to_vec(), q).is_none())
    })
}

/// The formats production engines store (vLLM V4's FP8 NoPE + bf16 RoPE, vLLM V4.1's "MXFP8"
/// with scales rounded up, mlx-lm's and SGLang's FP4), tried by the quantized-record hint.
const SHIPPED_FORMATS: &[&str] = &[
    r#"{"element": "e4m3", "scale": "pow2", "block": 64, "channels": "nope", "amax_min": 1e-4}"#,
    r#"{"element": "e4m3", "scale": "pow2", "block": 32, "channels": "all", "amax_min": 1e-4}"#,
    r#"{"element": "e2m1", "scale": "e4m3", "block": 16, "channels": "all"}"#,
];

fn low_dtype_fits(declared: DType, low: DType) -> bool {
    unit_roundoff(low) > unit_roundoff(declared)
}
