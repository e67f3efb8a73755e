//! K1-K4: where the windows are (count, locality, stride shift, phase not window).

use super::super::invariant::CheckVerdict;
use super::super::strategies::Case;
use super::super::subject::KernelUnderTest;
use super::super::tolerance::{self, max_abs_diff};
use super::shared::{entry_diff, in_window, magnitude, same_bound, terms, window_span};
use crate::kernel::spec::KernelSpec;
use crate::Result;
use candle_core::DType;
use ndarray::{Array2, Axis};

pub(super) fn k1_count(s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    let spec = s.spec();
    let t = case.x.nrows();
    let out = s.compress(case.dims, &case.params, case.x.view())?;
    let mut expect = 0usize;
    while t > 0 && window_span(spec, expect).1 < t as i64 {
        expect += 1;
    }
    let n = out.len();
    let shapes_ok =
        out.keys.nrows() == n && out.values.nrows() == n && out.gate_k.dim().0 == n && out.gate_v.dim().0 == n;
    if n != expect || !shapes_ok {
        return Ok(CheckVerdict::Fail(format!(
            "T={t}: {n} entries (outputs {} rows), expected {expect}",
            out.keys.nrows()
        )));
    }
    Ok(CheckVerdict::pass(0.0, 0.0))
}

pub(super) fn perturbed(case: &Case) -> Array2<f64> {
    let mut x2 = case.x.clone();
    let mut row = x2.row_mut(case.token);
    row += &case.perturb;
    x2
}

pub(super) fn k2_locality(s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    if case.x.nrows() == 0 {
        return Ok(CheckVerdict::NotApplicable("empty sequence".into()));
    }
    let spec = s.spec();
    let a = s.compress(case.dims, &case.params, case.x.view())?;
    let b = s.compress(case.dims, &case.params, perturbed(case).view())?;
    for j in 0..a.len().min(b.len()) {
        if !in_window(spec, j, case.token) {
            let d = entry_diff(&a, j, &b, j, false);
            if d != 0.0 {
                return Ok(CheckVerdict::Fail(format!(
                    "perturbing token {} (outside window {j} = {:?}) changed entry {j} by {d:.3e}",
                    case.token,
                    window_span(spec, j)
                )));
            }
        }
    }
    Ok(CheckVerdict::pass(0.0, 0.0))
}

pub(super) fn k3_stride_shift(s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    let spec = s.spec();
    let g = spec.geometry;
    let a = s.compress(case.dims, &case.params, case.x.view())?;
    if a.is_empty() {
        return Ok(CheckVerdict::NotApplicable("no window".into()));
    }
    let x2 = ndarray::concatenate(Axis(0), &[case.prefix.view(), case.x.view()]).expect("same width");
    let b = s.compress(case.dims, &case.params, x2.view())?;
    if b.len() != a.len() + 1 {
        return Ok(CheckVerdict::Fail(format!(
            "prepending S tokens gave {} entries, expected {} + 1",
            b.len(),
            a.len()
        )));
    }
    let bound = same_bound(s, true, terms(s, case), magnitude(&a));
    let mut worst = 0.0f64;
    for j in 0..a.len() {
        // Entry positions move by S, so post-processed entries rotate differently: compare the
        // pooled entries and gates (RMSNorm is a function of the pooled entry alone).
        let d = entry_diff(&b, j + 1, &a, j, true)
            .max(max_abs_diff(&b.gate_k.index_axis(Axis(0), j + 1), &a.gate_k.index_axis(Axis(0), j)))
            .max(max_abs_diff(&b.gate_v.index_axis(Axis(0), j + 1), &a.gate_v.index_axis(Axis(0), j)));
        if g.valid_slots(j) == g.window() {
            if d > bound {
                return Ok(CheckVerdict::Fail(format!(
                    "new entry {} differs from old entry {j} by {d:.3e} (bound {bound:.1e})",
                    j + 1
                )));
            }
            worst = worst.max(d);
        } else if d <= bound {
            return Ok(CheckVerdict::Fail(format!(
                "old entry {j} had empty slots; after prepending S real tokens new entry {} should change, but differs by only {d:.3e}",
                j + 1
            )));
        }
    }
    Ok(CheckVerdict::pass(worst, bound))
}

/// Gate values (`n * W * d_h` per probe) K4 holds at once: 2^22 f64 per gate tensor, 32 MiB.
const PROBE_BATCH_SLOTS: usize = 1 << 22;

/// Proper divisors `p < S` of `S`.
fn proper_divisors(n: usize) -> Vec<usize> {
    (1..n).filter(|p| n.is_multiple_of(*p)).collect()
}

pub(super) fn k4_phase_not_window(s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    let spec = s.spec();
    let t_len = case.x.nrows();
    if t_len == 0 {
        return Ok(CheckVerdict::NotApplicable("empty sequence".into()));
    }
    // (a) The support of dB_j/dh_t is exactly the windows holding t (any parameters).
    // Entries outside the window are bit-for-bit unchanged (K2 holds exactly for every
    // implementation here), so "depends on" is exact too: any change at all.
    let a = s.compress(case.dims, &case.params, case.x.view())?;
    let b = s.compress(case.dims, &case.params, perturbed(case).view())?;
    for j in 0..a.len() {
        let d = entry_diff(&a, j, &b, j, true);
        let inside = in_window(spec, j, case.token);
        if inside && d == 0.0 {
            return Ok(CheckVerdict::Fail(format!(
                "token {} lies in window {j} = {:?} but perturbing it moved entry {j} by only {d:.3e}",
                case.token,
                window_span(spec, j)
            )));
        }
        if !inside && d != 0.0 {
            return Ok(CheckVerdict::Fail(format!(
                "token {} lies outside window {j} but moved it by {d:.3e}",
                case.token
            )));
        }
    }
    // (b) Content-free gates: the retention profile of interior tokens has period S, and no
    // smaller one for generic parameters.
    // The retention of token t is the summed norm of the pooled entries when only t carries the
    // probe direction. A window spans W consecutive tokens, so probe tokens W apart never share
    // one: probe sequence o carries the direction at every token t = o (mod W), each entry holds
    // exactly one of them (the other slots add exact zeros), and W sequences give the profile of
    // all T tokens, bit for bit what T single-token probes would.
    let mut p0 = case.params.clone();
    p0.zero_gate_content();
    let w = spec.geometry.window();
    let probe = |o: usize| {
        let mut x = Array2::zeros((t_len, case.dims.d_model));
        for t in (o..t_len).step_by(w) {
            x.row_mut(t).assign(&case.direction);
        }
        x
    };
    // The probes go in batches of at most PROBE_BATCH_SLOTS gate values each, every output
    // reduced to its tokens' retention before the next batch: memory stays that of one batch
    // (all W probes at once held W * n * W * d_h values, 6.8 GB at W = 512).
    let slots_per_probe = (spec.geometry.num_windows(t_len) * w * case.dims.d_head).max(1);
    let batch = (PROBE_BATCH_SLOTS / slots_per_probe).max(1);
    let mut profile = vec![0.0; t_len];
    let offsets: Vec<usize> = (0..w.min(t_len)).collect();
    for chunk in offsets.chunks(batch) {
        let probes: Vec<Array2<f64>> = chunk.iter().map(|&o| probe(o)).collect();
        let outs = s.compress_many(case.dims, &p0, &probes)?;
        for (&o, out) in chunk.iter().zip(&outs) {
            for t in (o..t_len).step_by(w) {
                profile[t] = (0..out.len())
                    .filter(|&j| in_window(spec, j, t))
                    .map(|j| {
                        out.pooled_k.row(j).dot(&out.pooled_k.row(j)).sqrt()
                            + out.pooled_v.row(j).dot(&out.pooled_v.row(j)).sqrt()
                    })
                    .sum();
            }
        }
    }
    let g = spec.geometry;
    let interior: Vec<bool> = (0..t_len).map(|t| g.is_interior(t, t_len)).collect();
    let st = g.stride();
    // The profile's own scale (one probe token, so no cancellation): often far below 1.
    let scale = profile.iter().cloned().fold(0.0, f64::max);
    let tol = if s.dtype() == DType::F64 { 0.0 } else { tolerance::reassociation_at(s.dtype(), terms(s, case), scale) };
    let mut worst = 0.0f64;
    for t in 0..t_len.saturating_sub(st) {
        if interior[t] && interior[t + st] {
            let d = (profile[t] - profile[t + st]).abs();
            if d > tol {
                return Ok(CheckVerdict::Fail(format!(
                    "content-free retention differs between interior tokens {t} and {} (same phase): {:.6} vs {:.6}",
                    t + st,
                    profile[t],
                    profile[t + st]
                )));
            }
            worst = worst.max(d);
        }
    }
    // No smaller period needs something that tells the phases of a stride apart once the gate
    // content is zero: the per-offset biases. Without them (uniform gates, DeepSeek-V4.1's
    // `gate_bias: false`) content-free weights are uniform over each window, and with W = S every
    // token is retained alike (period 1): only the period S half applies.
    let divisors = if spec.has_gate_bias() { proper_divisors(st) } else { Vec::new() };
    for p in divisors {
        let pairs: Vec<(usize, usize)> =
            (0..t_len.saturating_sub(p)).filter(|&t| interior[t] && interior[t + p]).map(|t| (t, t + p)).collect();
        if pairs.len() < st {
            continue; // too few interior tokens to tell periods apart in this case
        }
        let distinct = pairs.iter().any(|&(u, v)| (profile[u] - profile[v]).abs() > 10.0 * tol + 1e-9);
        if !distinct {
            return Ok(CheckVerdict::Fail(format!(
                "content-free retention has period {p}, smaller than the stride {st}: profile {:?}",
                &profile[..profile.len().min(2 * st + g.window())]
            )));
        }
    }
    Ok(CheckVerdict::pass(worst, tol))
}

/// K14 (grid shift, issue 30): a kernel on the grid with offset `o > 0` is the same kernel on a
/// grid `o' < o` moved by `d = o - o'` tokens. For `o'` in `{0, floor(o/2)}`: prepend the last
/// `d` prefix rows to the sequence and compress on grid `o`; entry `j + k` of that equals entry
/// `j` of grid `o'` on the sequence itself (`k = 1` when `o' = 0` and grid `o`'s leading window is
/// complete: it has no counterpart there), pooled entries and gates, wherever grid `o'`'s window
/// `j` has no empty slot (exact for the reference, reassociation otherwise), and differs where it
/// has one (the prepended tokens fill it). The entry count is `n_{o'}(T) + k`. Offset 0: not
/// applicable.
pub(super) fn k14_grid_shift(s: &dyn KernelUnderTest, case: &Case) -> Result<CheckVerdict> {
    let spec = s.spec();
    let g = spec.geometry;
    let o = g.offset();
    if o == 0 {
        return Ok(CheckVerdict::NotApplicable("grid offset 0: no lower grid to map onto".into()));
    }
    let mut lower_offsets = vec![0, o / 2];
    lower_offsets.dedup();
    let (mut worst, mut bound_at_worst) = (0.0f64, 0.0f64);
    for o2 in lower_offsets {
        let g2 = g.with_offset(o2)?;
        let lower = s.with_spec(KernelSpec { geometry: g2, ..spec.clone() });
        let a = lower.compress(case.dims, &case.params, case.x.view())?;
        let d = o - o2;
        let pre = case.prefix.slice(ndarray::s![case.prefix.nrows() - d.., ..]);
        let x2 = ndarray::concatenate(Axis(0), &[pre, case.x.view()]).expect("same width");
        let b = s.compress(case.dims, &case.params, x2.view())?;
        // Grid o's leading window has no counterpart on grid 0; it counts once complete.
        let k = usize::from(o2 == 0 && g.end(0) < x2.nrows());
        if b.len() != a.len() + k {
            return Ok(CheckVerdict::Fail(format!(
                "prepending {d} tokens on grid {o} gave {} entries; grid {o2} has {} (+{k} leading)",
                b.len(),
                a.len()
            )));
        }
        let bound = same_bound(s, true, terms(s, case), magnitude(&a));
        for j in 0..a.len() {
            let diff = entry_diff(&b, j + k, &a, j, true)
                .max(max_abs_diff(&b.gate_k.index_axis(Axis(0), j + k), &a.gate_k.index_axis(Axis(0), j)))
                .max(max_abs_diff(&b.gate_v.index_axis(Axis(0), j + k), &a.gate_v.index_axis(Axis(0), j)));
            if g2.valid_slots(j) == g2.window() {
                if diff > bound {
                    return Ok(CheckVerdict::Fail(format!(
                        "grid {o} after prepending {d} tokens: entry {} differs from grid {o2}'s entry {j} by {diff:.3e} \
                         (bound {bound:.1e})",
                        j + k
                    )));
                }
                if diff >= worst {
                    (worst, bound_at_worst) = (diff, bound);
                }
            } else if diff <= bound {
                return Ok(CheckVerdict::Fail(format!(
                    "grid {o2}'s entry {j} has empty slots; with {d} real tokens prepended grid {o}'s entry {} should \
                     differ, but by only {diff:.3e}",
                    j + k
                )));
            }
        }
    }
    Ok(CheckVerdict::pass(worst, bound_at_worst))
}

pub(in crate::conformance::harness) fn perturbed_or_same(case: &Case) -> Array2<f64> {
    if case.x.nrows() == 0 {
        case.x.clone()
    } else {
        perturbed(case)
    }
}
