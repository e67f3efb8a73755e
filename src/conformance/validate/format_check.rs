//! `cache_format` checked, not trusted (issue 41, item 4; `theory/dump-format.md`, "The label
//! checked against the record"): what the stored keys and values say about their format, before
//! anything is judged. A label the data contradict is refused (exit 2) naming the field, and the
//! label that fits is suggested:
//!
//! - **degenerate**: block 1 with f32 scales (every element its own scale: nothing is quantized).
//! - **channels**: a channel labelled bf16 (the RoPE channels of `channels: nope`) whose every
//!   value has at most the element's mantissa bits was stored quantized (an all-channel record, or
//!   another NoPE/RoPE split).
//! - **scale and block**: each rule leaves a block's largest stored element `m = max|block| / s`
//!   in a range of its own: pow2 `[E/2, E]`, E8M0 `[2^emax, E]` (saturating), E4M3 scales
//!   `[round(E / (1 + 2^-4)), E]`, f32 exactly `E`; and the block on the element grid. When blocks
//!   break the label's rule and every block fits another (scale, block) pair, the label is
//!   refused naming the fields that differ. When none fits, the encoder itself may be wrong, and
//!   the grid row fails instead (exit 1).
//! - **saturation**: E8M0 scales saturate (`m = E` for a fifth of the blocks) and never leave
//!   `m < 2^emax`; a record labelled pow2 with at least 64 blocks, none below `2^emax` and more
//!   than a tenth at `E` is an E8M0 record (pow2 leaves 19 % of blocks below `2^emax`).

use crate::conformance::dump::Dump;
use crate::numeric::formats::{CacheFormat, Element, ScaleKind};
use crate::{Error, Result};

/// Blocks a format's rule is checked on, from the label's layout: `(stored values / g)`.
fn blocks_of(d: &Dump, f: &CacheFormat, quantized: usize) -> Vec<Vec<f64>> {
    let g = f.global_scale.unwrap_or(1.0);
    let mut out = Vec::new();
    let mut outputs = vec![&d.main.keys];
    if !d.spec.shared_kv {
        outputs.push(d.main.values_or_keys());
    }
    for a in outputs {
        for row in a.rows() {
            let v: Vec<f64> = row.iter().map(|x| x / g).collect();
            for start in (0..quantized.min(v.len())).step_by(f.block.max(1)) {
                out.push(v[start..(start + f.block).min(quantized)].to_vec());
            }
        }
    }
    out
}

/// The range of a block's largest stored element under `scale` (see the module docs).
fn element_range(scale: ScaleKind, el: Element) -> (f64, f64) {
    let e = el.max();
    match scale {
        ScaleKind::Pow2 => (e / 2.0, e),
        ScaleKind::E8m0 => (2f64.powi(el.emax()), e),
        ScaleKind::E4m3 => (el.round(e / (1.0 + 1.0 / 16.0)), e),
        ScaleKind::F32 => (e, e),
    }
}

/// Whether a block follows `scale`'s rule with element `el`: `None` when exempt (zero, floored
/// by `amax_min`, or tiny), else whether some storable scale puts it on the grid with its largest
/// element in the rule's range.
fn fits(block: &[f64], scale: ScaleKind, el: Element, amax_min: Option<f64>) -> Option<bool> {
    let a = block.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    if a == 0.0 || a < 1e-30 || amax_min.is_some_and(|m| a < 1.07 * m) {
        return None;
    }
    if scale == ScaleKind::E4m3 && a < 1.1 * el.max() * 2f64.powi(-9) {
        return None;
    }
    let (lo, hi) = element_range(scale, el);
    let on_grid = |s: f64| {
        block.iter().all(|&x| {
            let e = x / s;
            (e - el.round(e)).abs() <= 4.0 * f32::EPSILON as f64 * e.abs().max(1.0)
        })
    };
    let tol = 1.0 + 4.0 * f32::EPSILON as f64;
    let in_range = |s: f64| a / s >= lo / tol && a / s <= hi * tol;
    let ok = match scale {
        ScaleKind::Pow2 | ScaleKind::E8m0 => {
            let k0 = (a / hi).log2().floor() as i32 - 1;
            (k0..k0 + 4).map(|k| 2f64.powi(k)).any(|s| in_range(s) && on_grid(s))
        }
        ScaleKind::F32 => on_grid(a / el.max()),
        ScaleKind::E4m3 => crate::numeric::formats::element_values(el)
            .into_iter()
            .filter(|&m| m >= lo && m <= hi)
            .map(|m| a / m)
            .any(|s| Element::E4m3.holds(s) && on_grid(s)),
    };
    Some(ok)
}

/// `(blocks checked, blocks breaking the rule)` of `d`'s stored entries under `(scale, block)`.
fn violations(d: &Dump, f: &CacheFormat, quantized: usize) -> (usize, usize) {
    let (mut n, mut bad) = (0, 0);
    for b in blocks_of(d, f, quantized) {
        if let Some(ok) = fits(&b, f.scale, f.element, f.amax_min) {
            n += 1;
            bad += usize::from(!ok);
        }
    }
    (n, bad)
}

fn name(s: ScaleKind) -> &'static str {
    match s {
        ScaleKind::F32 => "f32",
        ScaleKind::Pow2 => "pow2",
        ScaleKind::E8m0 => "e8m0",
        ScaleKind::E4m3 => "e4m3",
    }
}

/// Refuses a `cache_format` the stored record contradicts (see the module docs), naming the
/// field; `Ok` when the label is consistent with the data, or when no label fits (the grid row
/// then fails).
pub(super) fn check_label(d: &Dump) -> Result<()> {
    let Some(f) = &d.cache_format else { return Ok(()) };
    if f.block == 1 && f.scale == ScaleKind::F32 {
        return Err(Error::invalid(
            "cache_format.block",
            "block 1 with f32 scales gives every element its own exact scale: nothing is quantized, and the rule \
             would add a grid step of slack to every value; store the record as plain f32 (no cache_format)",
        ));
    }
    let dh = d.dims.d_head;
    let rotated = d.spec.rope.as_ref().map_or(0, |rs| rs.rotated_channels(dh));
    let quantized = f.quantized_channels(dh, rotated);
    // Channels labelled bf16 that were stored quantized.
    let bits = match f.element {
        Element::E4m3 => 3,
        Element::E2m1 => 1,
    };
    let coarse = |v: f64| v == 0.0 || ((v as f32).to_bits() & ((1u32 << (23 - bits)) - 1)) == 0;
    let mut outputs = vec![&d.main.keys];
    if !d.spec.shared_kv {
        outputs.push(d.main.values_or_keys());
    }
    let quantized_bf16: Vec<usize> = (quantized..dh)
        .filter(|&c| {
            let vals: Vec<f64> = outputs.iter().flat_map(|a| a.rows().into_iter().map(move |r| r[c])).collect();
            vals.iter().filter(|v| **v != 0.0).count() >= 16 && vals.iter().all(|&v| coarse(v))
        })
        .collect();
    if let (Some(&first), Some(&last)) = (quantized_bf16.first(), quantized_bf16.last()) {
        return Err(Error::invalid(
            "cache_format.channels",
            format!(
                "channels {first}..={last} are labelled bf16 (the RoPE channels of \"nope\", {quantized}..{dh}) but every \
                 stored value there has at most {bits} mantissa bits: they were stored in {} (an all-channel record, \
                 or another NoPE/RoPE split)",
                f.describe()
            ),
        ));
    }
    let (n, bad) = violations(d, f, quantized);
    if n == 0 {
        return Ok(());
    }
    if bad > 0 {
        // The most specific label that fits: the largest block, then the narrowest scale
        // rule (a record of E8M0 scales per 32 is also one of pow2 scales per 16).
        let mut fitting = None;
        'search: for block in [128, 64, 32, 16, 8, f.block] {
            for scale in [ScaleKind::F32, ScaleKind::E4m3, ScaleKind::E8m0, ScaleKind::Pow2] {
                if (scale, block) == (f.scale, f.block) || block > quantized {
                    continue;
                }
                let alt = CacheFormat { scale, block, ..f.clone() };
                let (m, b2) = violations(d, &alt, quantized);
                if m > 0 && b2 == 0 {
                    fitting = Some(alt);
                    break 'search;
                }
            }
        }
        let Some(alt) = fitting else { return Ok(()) };
        let mut fields = Vec::new();
        if alt.scale != f.scale {
            fields.push("cache_format.scale");
        }
        if alt.block != f.block {
            fields.push("cache_format.block");
        }
        return Err(Error::invalid(
            fields.join(" and "),
            format!(
                "{bad} of {n} stored blocks break the labelled rule ({} scales per {}), while every block follows {} \
                 scales per {}: label the record {}",
                name(f.scale),
                f.block,
                name(alt.scale),
                alt.block,
                serde_json::to_string(&alt).expect("format serialises")
            ),
        ));
    }
    // Saturation: a pow2 label on an E8M0 record.
    if f.scale == ScaleKind::Pow2 && n >= 64 {
        let (lo, _) = element_range(ScaleKind::E8m0, f.element);
        let e8 = CacheFormat { scale: ScaleKind::E8m0, ..f.clone() };
        let tops: Vec<f64> = blocks_of(d, f, quantized)
            .iter()
            .filter(|b| fits(b, f.scale, f.element, f.amax_min).is_some())
            .map(|b| {
                let a = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                a / 2f64.powi((a / f.element.max()).log2().ceil() as i32)
            })
            .collect();
        let below = tops.iter().filter(|&&m| m < lo * (1.0 - 1e-6)).count();
        let at_top = tops.iter().filter(|&&m| (m - f.element.max()).abs() <= 1e-6 * m).count();
        if below == 0 && at_top * 10 > tops.len() && violations(d, &e8, quantized).1 == 0 {
            return Err(Error::invalid(
                "cache_format.scale",
                format!(
                    "labelled pow2 (never saturating), but no stored block's largest element is below {lo} and {at_top} \
                     of {} sit at the saturation value {}: an E8M0 (OCP MX) record; label it {}",
                    tops.len(),
                    f.element.max(),
                    serde_json::to_string(&e8).expect("format serialises")
                ),
            ));
        }
    }
    Ok(())
}
