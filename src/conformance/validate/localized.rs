//! The localized-error row of K13 (issue 41; `theory/dump-format.md`, "Errors confined to one
//! entry"): a bug confined to one window (the last window's sum accumulated in bf16) adds one
//! entry's error to a whole output's RMS and hides there. A correct kernel rounds every window
//! the same way, so each entry's RMS error relative to the scale of its roundings sits at the
//! kernel's own level, up to the chance of `n` channels; one entry far above its sequence's
//! median is the bug's signature. Each entry's error is divided by the first-order scale of a
//! correct kernel's roundings there ([`crate::kernel::reference::pooled_rounding_scale`]: each
//! gated term rounded once with its weight off by its logit's rounding, and the sum rounded
//! once), so an entry whose terms cancel or whose logits are large does not look like a bug.
//!
//! Held on the pooled entries of a bf16 or f16 dump only (where a bug of the kind lives and a
//! correct kernel's level is its output rounding, well above f32 reassociation): post-processed
//! keys and values are not held to it, since a correct kernel that post-processes in bf16 has
//! entries up to 2x its median there (RMSNorm amplifies its roundings by how far the pooled
//! entry cancels), and at f32 and f64 the per-entry level is reassociation noise that no ratio
//! rule bounds.

use super::report::{CheckRow, Status};
use crate::conformance::harness::tolerance::unit_roundoff;
use candle_core::DType;
use ndarray::Array2;
use std::borrow::Borrow;

/// Channels below which the row is not held. Production widths are 512 (DeepSeek-V4's `d_h`);
/// at 128-256 channels a correct PyTorch bf16 kernel's entries reached 1.66x their median
/// (`theory/dump-format.md`, "Errors confined to one entry"), too close to a bug's 2x to tell.
pub const MIN_CHANNELS: usize = 256;

/// Entries a sequence needs for its median to be the kernel's level.
pub const MIN_ENTRIES: usize = 8;

/// How far above its sequence's median a correct kernel's entry may sit beyond chance: the
/// differences between entries that a correct kernel's stage choices leave (a PyTorch bf16
/// kernel rounding every stage: up to 1.16x at `d_h = 512`, 1.66x at 256, measured) with room.
pub const SPREAD: f64 = 1.5;

/// Standard deviations of chance per entry: the RMS of `n` roundings varies by about
/// `1 / sqrt(2 n)` of itself, and the largest of a few thousand entries lies within 4 of them.
pub const CHANCE_SDS: f64 = 4.0;

/// The level floor, in units of roundoff: an output rounded to `dtype` errs by at least about
/// `u / sqrt(3)` of its RMS, so a median below `u / 8` means most entries are exact (zeros, or
/// values the dtype holds), not a level.
pub const LEVEL_FLOOR_ULPS: f64 = 0.125;

/// The bound on an entry's error over its sequence's median for `n` channels.
pub fn ratio_bound(n: usize) -> f64 {
    SPREAD * (1.0 + CHANCE_SDS / (2.0 * n as f64).sqrt())
}

/// Whether the row is held on these references (`[entries, channels]` per sequence) in `dtype`:
/// bf16 or f16, at least [`MIN_CHANNELS`] channels and [`MIN_ENTRIES`] entries per sequence.
pub(super) fn held<R: Borrow<Array2<f64>>>(refs: &[R], dtype: DType) -> bool {
    matches!(dtype, DType::BF16 | DType::F16)
        && refs.first().is_some_and(|r| r.borrow().shape()[1] >= MIN_CHANNELS)
        && refs.iter().all(|r| r.borrow().shape()[0] >= MIN_ENTRIES)
}

/// The row for output `name` (`gots[k]`, `refs[k]`, `terms[k]`: sequence `k`'s `[entries,
/// channels]` kernel output, f64 reference and rounding scale per channel), or `None`
/// where it is not held (dtype, width or entries).
pub(super) fn row(
    name: &str,
    gots: &[Array2<f64>],
    refs: &[&Array2<f64>],
    terms: &[Array2<f64>],
    dtype: DType,
) -> Option<CheckRow> {
    if !held(refs, dtype) {
        return None;
    }
    let n = refs[0].shape()[1];
    let floor = LEVEL_FLOOR_ULPS * unit_roundoff(dtype);
    let bound = ratio_bound(n);
    // (ratio, sequence, entry, the entry's relative RMS error, the sequence's level)
    let mut worst = (0.0f64, 0, 0, 0.0, 0.0);
    for (k, ((g, r), ts)) in gots.iter().zip(refs).zip(terms).enumerate() {
        if g.shape() != r.shape() || ts.shape() != r.shape() {
            return None;
        }
        let rel: Vec<Option<f64>> = g
            .rows()
            .into_iter()
            .zip(r.rows())
            .zip(ts.rows())
            .map(|((gi, ri), ti)| {
                let scale_sq: f64 = ti.iter().map(|t| t * t).sum();
                let err_sq: f64 = gi.iter().zip(ri.iter()).map(|(x, y)| (x - y) * (x - y)).sum();
                (scale_sq > 0.0).then(|| (err_sq / scale_sq).sqrt())
            })
            .collect();
        let mut sorted: Vec<f64> = rel.iter().flatten().copied().collect();
        if sorted.len() < MIN_ENTRIES {
            continue;
        }
        sorted.sort_by(f64::total_cmp);
        let level = sorted[sorted.len() / 2].max(floor);
        for (j, e) in rel.iter().enumerate() {
            let ratio = e.map_or(0.0, |e| if e.is_nan() { f64::INFINITY } else { e / level });
            if ratio > worst.0 {
                worst = (ratio, k, j, e.unwrap_or(0.0), level);
            }
        }
    }
    let (ratio, k, j, e, level) = worst;
    Some(CheckRow {
        id: "K13",
        name: format!("localized error: {name}"),
        status: if ratio <= bound { Status::Pass } else { Status::Fail },
        error: ratio,
        bound,
        note: format!(
            "largest entry's rms|impl - ref64| / its roundings' scale, over its sequence's median entry: sequence {k}, entry \
             {j}: {e:.3e} / {level:.3e} = {ratio:.3} vs {SPREAD} (1 + {CHANCE_SDS} / sqrt(2 x {n} channels)) = \
             {bound:.3}: a correct kernel rounds every window alike"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::{ratio_bound, row};
    use crate::conformance::validate::Status;
    use candle_core::DType;
    use ndarray::Array2;

    /// Entries of `n` channels with a deterministic relative error of `rel(entry)`, sign
    /// alternating by channel.
    fn pair(entries: usize, n: usize, rel: &dyn Fn(usize) -> f64) -> (Array2<f64>, Array2<f64>) {
        let r = Array2::from_shape_fn((entries, n), |(i, c)| 1.0 + 0.5 * ((i * 7 + c * 3) % 11) as f64 / 11.0);
        let g = Array2::from_shape_fn((entries, n), |(i, c)| {
            r[[i, c]] * (1.0 + rel(i) * if (c + i) % 2 == 0 { 1.0 } else { -1.0 })
        });
        (g, r)
    }

    #[test]
    fn one_entry_above_its_sequences_level_fails_and_uniform_rounding_passes() {
        let u = 2f64.powi(-8);
        let even = pair(40, 512, &|i| 0.4 * u * (1.0 + 0.05 * ((i % 5) as f64 - 2.0)));
        let one = pair(40, 512, &|i| if i == 39 { 0.8 * u } else { 0.4 * u });
        // A rounding scale equal to the entry's magnitude.
        let check = |p: &(Array2<f64>, Array2<f64>), dt| {
            row("pooled keys", std::slice::from_ref(&p.0), &[&p.1], std::slice::from_ref(&p.1), dt)
        };
        assert_eq!(check(&even, DType::BF16).unwrap().status, Status::Pass);
        let bad = check(&one, DType::BF16).unwrap();
        assert_eq!(bad.status, Status::Fail, "{bad:?}");
        assert!(bad.note.contains("entry 39") && (bad.error - 2.0).abs() < 1e-9, "{}", bad.note);
        // Just under the bound passes, just over fails.
        let b = ratio_bound(512);
        for (k, want) in [(0.99, Status::Pass), (1.01, Status::Fail)] {
            let p = pair(40, 512, &|i| if i == 3 { k * b * 0.4 * u } else { 0.4 * u });
            assert_eq!(check(&p, DType::BF16).unwrap().status, want, "{k}");
        }
        // Not held at f32, below MIN_CHANNELS, or with too few entries.
        assert!(check(&one, DType::F32).is_none());
        assert!(check(&pair(40, 16, &|_| u), DType::BF16).is_none());
        assert!(check(&pair(4, 512, &|_| u), DType::BF16).is_none());
        // An entry whose terms cancel (its value a tenth of its terms') errs as its terms do:
        // held by its terms' scale it passes; held by its own magnitude it would be 10x.
        let (mut g, mut r) = pair(40, 512, &|_| 0.4 * u);
        let terms = r.clone();
        for c in 0..512 {
            let e = g[[7, c]] - r[[7, c]];
            r[[7, c]] *= 0.1;
            g[[7, c]] = r[[7, c]] + e;
        }
        let cancel = row("pooled keys", &[g], &[&r], &[terms], DType::BF16).unwrap();
        assert_eq!(cancel.status, Status::Pass, "{cancel:?}");
        // An exact kernel (most entries without error) is held to the floor, not to 0.
        let exact = pair(40, 512, &|i| if i == 0 { 0.05 * u } else { 0.0 });
        assert_eq!(check(&exact, DType::BF16).unwrap().status, Status::Pass);
    }
}
