//! Named hints from the shape of a failing dump's key error (RoPE, RMSNorm, dtype), for a
//! kernel engineer to act on.

use super::report::{CheckRow, Status};
use super::tolerance::{flips_rms_bound, Bounds};
use crate::conformance::dump::Dump;
use crate::conformance::harness::checks::post_rows;
use crate::conformance::harness::tolerance::{unit_roundoff, STAGE_ROUNDINGS};
use crate::kernel::Compressed;
use crate::numeric::formats::CacheFormat;
use candle_core::DType;
use ndarray::{s, Array2};

/// One channel group's error against the keys' K13 rule, both halves: per channel the ratio of
/// the error to the largest-error half's allowance, and the RMS half's sums. Plain keys are held
/// to the plain bounds; a quantized record's to the rounding model's allowances of the
/// reference's own encoding (`theory/dump-format.md`, "Quantized keys: the rounding model").
struct Judge<'a> {
    format: Option<(&'a CacheFormat, usize)>,
    /// Largest-error and RMS bounds (plain), or pre-encoding `delta`, `rho` and the reference's
    /// RMS (quantized).
    delta: f64,
    rho: f64,
    rms_ref: f64,
    split: usize,
}

/// What [`Judge::entry`] accumulates per channel group (unrotated, rotated).
#[derive(Default)]
struct Groups {
    worst: [f64; 2],
    sq: [f64; 2],
    allowed: [f64; 2],
    count: [usize; 2],
    step: f64,
}

impl Groups {
    /// Whether group `g` fails either half.
    fn fails(&self, g: usize) -> bool {
        let n = self.count[g];
        n > 0
            && (self.worst[g] > 1.0 || (self.sq[g] / n as f64).sqrt() > flips_rms_bound(self.allowed[g], self.step, n))
    }
}

impl Judge<'_> {
    /// Per channel, `|got - enc(y)|` over its allowance (infinite for a NaN), accumulated into
    /// `acc`.
    fn entry(&self, got: &[f64], y: &[f64], acc: &mut Groups) -> Vec<f64> {
        let ratio = |diff: f64, allow: f64| {
            if diff.is_nan() {
                f64::INFINITY
            } else if diff == 0.0 {
                0.0
            } else {
                diff / allow
            }
        };
        let (target, max, sq) = match self.format {
            Some((f, q)) => {
                let a = f.allowance(y, q, self.delta, self.rho, self.rms_ref);
                acc.step = acc.step.max(a.step_max);
                let mut t = y.to_vec();
                f.round_entry(&mut t, q);
                (t, a.max, a.sq)
            }
            None => (y.to_vec(), vec![self.delta; y.len()], vec![self.rho * self.rho; y.len()]),
        };
        (0..y.len())
            .map(|c| {
                let diff = (got[c] - target[c]).abs();
                let g = usize::from(c >= self.split);
                let r = ratio(diff, max[c]);
                acc.worst[g] = acc.worst[g].max(r);
                acc.sq[g] += if diff.is_nan() { f64::INFINITY } else { diff * diff };
                acc.allowed[g] += sq[c];
                acc.count[g] += 1;
                r
            })
            .collect()
    }
}

/// Named hints from the shape of the keys' error, for a kernel engineer to act on:
///
/// - **saturation**: a quantized record holding NaN or infinity (an encoding that does not
///   saturate); no other hint is drawn from such keys.
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
/// Each "passes" and "fails" is the keys' K13 rule on that channel group, both halves (a
/// quantized record's by the rounding model). Returns the hints and the per-pair profile of the
/// rotated channels (each pair's largest error).
pub(super) fn hints(
    d: &Dump,
    rows: &[CheckRow],
    ref64: &[Compressed<f64>],
    n: usize,
    positions: &[usize],
    bounds: &Bounds,
) -> (Vec<String>, Vec<f64>) {
    let mut out = Vec::new();
    let keys_row = rows.iter().find(|r| r.name.starts_with("tolerance: keys"));
    let Some(keys_row) = keys_row.filter(|r| r.status == Status::Fail) else { return (out, Vec::new()) };
    let pooled_ok = rows.iter().find(|r| r.name == "tolerance: pooled keys").is_none_or(|r| r.status == Status::Pass);
    let dh = d.dims.d_head;
    let r = d.spec.rope.as_ref().map_or(0, |rs| rs.rotated_channels(dh));
    let run = &d.main;
    if let Some(((k, j, c), v)) = run.keys.slice(s![.., ..n, ..]).indexed_iter().find(|(_, v)| !v.is_finite()) {
        if let Some(f) = &d.cache_format {
            out.push(format!(
                "keys[{k}, {j}, {c}] = {v}: the record holds a non-finite value, an encoding to {} that does not \
                 saturate (a value beyond the largest element times the block scale cast to NaN); clamp before the \
                 cast, or choose the scale so the block's largest magnitude fits",
                f.describe()
            ));
        }
        return (out, Vec::new());
    }
    let judge = match &d.cache_format {
        Some(f) => {
            let Some(m) = bounds.encoded.iter().find(|m| m.name.starts_with("keys")) else { return (out, Vec::new()) };
            let q = f.quantized_channels(dh, r);
            Judge { format: Some((f, q)), delta: m.delta, rho: m.rho, rms_ref: m.rms_ref, split: dh - r }
        }
        None => {
            let (Some(max), Some(rms)) = (bounds.plain("keys"), bounds.plain_rms("keys")) else {
                return (out, Vec::new());
            };
            Judge { format: None, delta: max, rho: rms, rms_ref: 0.0, split: dh - r }
        }
    };
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
    let (mut groups, mut scaled) = (Groups::default(), Groups::default());
    let mut err_plain = 0.0f64;
    let mut err_rot = 0.0f64;
    let mut pair = vec![0.0f64; r / 2];
    let mut pair_abs = vec![0.0f64; r / 2];
    let mut by_entry = vec![0.0f64; n];
    let (mut scale_min, mut scale_max) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut mag = 0.0f64;
    for k in 0..run.batch() {
        let t = target(k);
        for (j, worst_rot) in by_entry.iter_mut().enumerate() {
            let x = run.keys.slice(s![k, j, ..]).to_vec();
            let y = t.row(j).to_vec();
            for (c, ratio) in judge.entry(&x, &y, &mut groups).into_iter().enumerate() {
                let e = (x[c] - y[c]).abs();
                mag = mag.max(y[c].abs());
                if c < dh - r {
                    err_plain = err_plain.max(e);
                } else {
                    err_rot = err_rot.max(e);
                    *worst_rot = worst_rot.max(ratio);
                    let p = (c - (dh - r)) / 2;
                    pair[p] = pair[p].max(ratio);
                    pair_abs[p] = pair_abs[p].max(e);
                }
            }
            // The entry's own least-squares scale on the reference (RMSNorm precedes RoPE, so
            // every channel carries it): the record judged against the reference times it.
            let (xy, yy) = x.iter().zip(&y).fold((0.0, 0.0), |(a, b), (x, y)| (a + x * y, b + y * y));
            if yy > 0.0 {
                let sc = xy / yy;
                scale_min = scale_min.min(sc);
                scale_max = scale_max.max(sc);
                let ys: Vec<f64> = y.iter().map(|v| v * sc).collect();
                judge.entry(&x, &ys, &mut scaled);
            }
        }
    }
    // With every channel rotated there is no non-rotated channel to pass, so "only the rotated
    // channels fail" would say nothing (a prev/cur swap fails every channel): no RoPE hint then.
    if r > 0 && dh > r && !groups.fails(0) && groups.fails(1) {
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
        if !at0.is_empty() && at0.iter().all(|&e| e <= 1.0) && grows {
            hint.push_str(", error 0 at position 0 and growing with position: RoPE frequency or position mismatch");
            let agree = pair.iter().take_while(|&&e| e <= 1.0).count();
            if agree >= 2 && agree < pair.len() {
                hint.push_str(&format!(
                    " (pairs 0..{} agree, pairs {agree}..{} differ: the slow pairs, a frequency scaling such as YaRN)",
                    agree - 1,
                    pair.len() - 1
                ));
            } else if agree == 1 && pair.len() > 1 {
                hint.push_str(" (every pair but the first differs: the base theta)");
            }
        } else if at0.iter().any(|&e| e > 1.0) {
            hint.push_str(", already at position 0: the position the entry carries (which token's position) differs");
        } else {
            hint.push_str(": RoPE frequency, pairing or position mismatch");
        }
        out.push(hint);
    } else if pooled_ok && dh > r && groups.fails(0) && !scaled.fails(0) && !scaled.fails(1) && scale_min.is_finite() {
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
    (out, pair_abs)
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

/// The formats production engines store (vLLM V4.1's "MXFP8" with scales rounded up, vLLM V4's
/// FP8 NoPE + bf16 RoPE, mlx-lm's and SGLang's FP4), tried by the quantized-record hint in this
/// order: the most constrained first. A per-32 all-channel record also lies on the per-64 NoPE
/// grid (its RoPE channels are e4m3 values, which bf16 holds; two pow2 scales of a 64-block
/// are one scale's grid), so tried the other way round V4.1's record was named V4's.
const SHIPPED_FORMATS: &[&str] = &[
    r#"{"element": "e4m3", "scale": "pow2", "block": 32, "channels": "all", "amax_min": 1e-4}"#,
    r#"{"element": "e4m3", "scale": "pow2", "block": 64, "channels": "nope", "amax_min": 1e-4}"#,
    r#"{"element": "e2m1", "scale": "e4m3", "block": 16, "channels": "all"}"#,
];

fn low_dtype_fits(declared: DType, low: DType) -> bool {
    unit_roundoff(low) > unit_roundoff(declared)
}
