//! The rounding model of a stored (encoded) entry (`theory/dump-format.md`, "Quantized keys:
//! the rounding model"): how far a correct kernel's encoded entry may lie from the reference's
//! own encoding, given how far its value *before* encoding may lie from the reference's.
//!
//! Encoding is a monotone step function per block scale. A pre-encoding error changes the
//! stored value only where it carries the value across a rounding boundary of the element grid
//! (one grid step), or carries the block's largest magnitude across a boundary of the scale rule
//! (the whole block re-encoded at the neighbouring scale). Everywhere else the encoding absorbs
//! it. So the allowance is computed per channel from where the reference value sits, not assumed
//! everywhere:
//!
//! - **largest-error half** ([`Allowance::max`]): with every pre-encoding error at most `delta`,
//!   the largest `|enc(x) - enc(y)|` over `|x - y| <= delta` and over every scale the block's
//!   largest magnitude can then take. Exact for a fixed rounding function (monotone: the extremes
//!   sit at the ends of the intervals).
//! - **RMS half** ([`Allowance::sq`]): with pre-encoding errors of root mean square `rho_c`
//!   (sums of independent roundings: a Gaussian tail with a margin, [`TAIL_MARGIN`]), the
//!   expected `(enc(x) - enc(y))^2`: each neighbouring grid value at distance `t` (to the rounding
//!   boundary) and step `q` adds `q^2 P(e > t)`, and each neighbouring block scale adds its
//!   probability times the block re-encoded there.

use super::cache_format::CacheFormat;
use super::element::{bf16, Element, ScaleKind};

/// Per-channel allowances of one stored entry ([`CacheFormat::allowance`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Allowance {
    /// The largest `|enc(x) - enc(y)|` of a channel over pre-encoding errors `|x - y| <= delta`.
    pub max: Vec<f64>,
    /// A bound on the expected `(enc(x) - enc(y))^2` of a channel when `x - y` has RMS `rho_c`.
    pub sq: Vec<f64>,
    /// The largest grid step any channel's bound involves (the fluctuation term's scale).
    pub step_max: f64,
}

/// Margin on the Gaussian tail in [`tail`]: any zero-mean error of RMS `rho` has
/// `E[max(e, 0)] <= rho / 2`, 1.25 times the Gaussian's `rho / sqrt(2 pi)`, and the expected
/// flips of a grid whose boundaries sit anywhere are proportional to it.
pub const TAIL_MARGIN: f64 = 1.25;

/// `P(e > t)` for a correct kernel's pre-encoding error `e` of RMS `rho`: a sum of independent
/// roundings, so a Gaussian tail, times [`TAIL_MARGIN`], capped at 1/2.
fn tail(t: f64, rho: f64) -> f64 {
    if rho <= 0.0 {
        return 0.0;
    }
    if t <= 0.0 {
        return 0.5;
    }
    let q = 0.5 * statrs::function::erf::erfc(t / (rho * std::f64::consts::SQRT_2));
    (TAIL_MARGIN * q).min(0.5)
}

/// The spacing of bf16 at `|x|` (8 significant bits), the subnormal spacing at 0.
fn bf16_spacing(x: f64) -> f64 {
    if x == 0.0 {
        return 2f64.powi(-133);
    }
    2f64.powi((x.abs().log2().floor() as i32).max(-126) - 7)
}

/// A rounding grid on magnitudes: rounding, spacing above a magnitude, and the largest value.
struct Grid<'a> {
    round: &'a dyn Fn(f64) -> f64,
    spacing: &'a dyn Fn(f64) -> f64,
    max: f64,
}

impl Grid<'_> {
    /// Expected squared change of `round(|w| + e)` against `round(|w|)` for `e` of RMS `rho`
    /// (in the same units as `w`): the two neighbours of the rounded value, each at its
    /// rounding boundary's distance. Returns (bound, largest step).
    fn flips(&self, w: f64, rho: f64) -> (f64, f64) {
        let w = w.abs();
        let r = (self.round)(w);
        let mut out = 0.0;
        let mut step = 0.0f64;
        if r < self.max {
            let next = r + (self.spacing)(r);
            let q = next - r;
            out += q * q * tail(0.5 * (r + next) - w, rho);
            step = step.max(q);
        }
        if r > 0.0 {
            let prev = r - (self.spacing)(r * (1.0 - 1e-12));
            let q = r - prev;
            out += q * q * tail(w - 0.5 * (r + prev), rho);
            step = step.max(q);
        }
        (out, step)
    }
}

impl CacheFormat {
    /// The rounding model's allowances for a stored entry whose reference value (before
    /// encoding) is `y`: `delta` bounds every pre-encoding error (the largest-error half),
    /// `rho` their RMS over the output, whose reference RMS is `rms_ref`; a channel of
    /// magnitude `|y_c|` above the RMS is given `rho |y_c| / rms_ref` (roundings are relative).
    /// The first `quantized` channels are encoded in this format, the rest in bf16.
    pub fn allowance(&self, y: &[f64], quantized: usize, delta: f64, rho: f64, rms_ref: f64) -> Allowance {
        let g = self.global_scale.unwrap_or(1.0);
        let el = self.element;
        let mut out = Allowance { max: vec![0.0; y.len()], sq: vec![0.0; y.len()], step_max: 0.0 };
        let rho_at = |v: f64| if rms_ref > 0.0 { rho * (v.abs() / rms_ref).max(1.0) } else { rho };
        let el_round = |w: f64| el.round(w);
        let el_spacing = |w: f64| el.spacing(w);
        let el_grid = Grid { round: &el_round, spacing: &el_spacing, max: el.max() };
        let fuzz = |v: f64| 4.0 * f32::EPSILON as f64 * v.abs();
        for r in self.blocks(quantized) {
            let yb: Vec<f64> = y[r.clone()].iter().map(|v| v / g).collect();
            let a = yb.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let dn = delta / g;
            let s = self.block_scale(a);
            let r0: Vec<f64> = yb.iter().map(|&v| s * el.round(v / s)).collect();
            let (a_lo, a_hi) = (a - dn, a + dn);
            let s_hi = self.block_scale(a_hi);
            // Largest-error half.
            if a_lo <= 0.0 {
                // The block may be any small vector: its scale is unknown below `s_hi`, so the
                // stored value is within one top-binade step (two when E8M0 saturates) at
                // `s_hi` of the kernel's value, itself within `delta` of `y`.
                let top = 2.0 * s_hi * el.spacing(el.max());
                for (i, c) in r.clone().enumerate() {
                    out.max[c] = g * ((r0[i] - yb[i]).abs() + dn + top) + fuzz(g * r0[i]);
                }
            } else {
                let intervals = self.scale_intervals(a_lo, a_hi);
                for (i, c) in r.clone().enumerate() {
                    let (z_lo, z_hi) = (yb[i] - dn, yb[i] + dn);
                    let mut worst = 0.0f64;
                    for &(sl, sh) in &intervals {
                        let w_lo = (z_lo / sl).min(z_lo / sh);
                        let w_hi = (z_hi / sl).max(z_hi / sh);
                        let (rl, rh) = (el.round(w_lo), el.round(w_hi));
                        for v in [sl * rl, sh * rl, sl * rh, sh * rh] {
                            worst = worst.max((v - r0[i]).abs());
                        }
                    }
                    out.max[c] = g * worst + fuzz(g * r0[i].abs().max(yb[i].abs()));
                }
            }
            // RMS half: element flips at the reference's scale.
            let rho_a = rho_at(g * a) / g;
            for (i, c) in r.clone().enumerate() {
                if a == 0.0 {
                    // An all-zero block: the kernel's small values are stored nearly as they are.
                    out.sq[c] = rho_at(y[c]).powi(2);
                    continue;
                }
                let mut rho_c = rho_at(y[c]) / g;
                if self.scale == ScaleKind::F32 {
                    // A continuous scale moves with the block maximum: `x / s` changes by the
                    // relative error of `a` too.
                    rho_c += rho_a * yb[i].abs() / a;
                }
                let (e, step) = el_grid.flips(yb[i] / s, rho_c / s);
                out.sq[c] = g * g * s * s * e;
                out.step_max = out.step_max.max(g * s * step);
            }
            // RMS half: the block's scale flips (discrete scale rules).
            if a > 0.0 && self.scale != ScaleKind::F32 {
                for (t, s2) in self.scale_flips(a) {
                    let p = tail(t, rho_a);
                    if p < 1e-15 {
                        continue;
                    }
                    for (i, c) in r.clone().enumerate() {
                        // Re-encoded at `s2`, plus the element flips there.
                        let moved = (s2 * el.round(yb[i] / s2) - r0[i]).abs();
                        let (e, step) = el_grid.flips(yb[i] / s2, rho_at(y[c]) / g / s2);
                        out.sq[c] += p * g * g * (moved * moved + s2 * s2 * e);
                        out.step_max = out.step_max.max(g * (moved + s2 * step));
                    }
                }
            }
        }
        // Channels kept in bf16.
        let b_round = bf16;
        let b_spacing = bf16_spacing;
        let b_grid = Grid { round: &b_round, spacing: &b_spacing, max: f64::MAX };
        for (c, &v) in y.iter().enumerate().skip(quantized) {
            let r0 = bf16(v);
            out.max[c] = (bf16(v - delta) - r0).abs().max((bf16(v + delta) - r0).abs());
            let (e, step) = b_grid.flips(v, rho_at(v));
            out.sq[c] = e;
            out.step_max = out.step_max.max(step);
        }
        out
    }

    /// The block scales a block of largest magnitude in `a_lo..=a_hi` can take, as intervals:
    /// each discrete scale as a point (powers of two, E4M3 values), the continuous f32 scale (or
    /// more than 64 E4M3 values) as one interval.
    fn scale_intervals(&self, a_lo: f64, a_hi: f64) -> Vec<(f64, f64)> {
        let (s_lo, s_hi) = (self.block_scale(a_lo), self.block_scale(a_hi));
        let mut out = Vec::new();
        match self.scale {
            ScaleKind::F32 => return vec![(s_lo, s_hi)],
            ScaleKind::Pow2 | ScaleKind::E8m0 => {
                let mut s = s_lo;
                while s <= s_hi && out.len() < 2100 {
                    out.push((s, s));
                    s *= 2.0;
                }
            }
            ScaleKind::E4m3 => {
                let mut s = s_lo;
                while s <= s_hi {
                    if out.len() >= 64 {
                        return vec![(s_lo, s_hi)];
                    }
                    out.push((s, s));
                    s += Element::E4m3.spacing(s);
                }
            }
        }
        if out.is_empty() {
            out.push((s_lo, s_hi));
        }
        out
    }

    /// The nearest boundaries of the scale rule around a block maximum `a > 0`, up and down:
    /// `(distance, the scale beyond it)`. Found by bisection on the rule itself (with the
    /// `amax_min` floor), within a factor of two of `a`.
    fn scale_flips(&self, a: f64) -> Vec<(f64, f64)> {
        let s = self.block_scale(a);
        let mut out = Vec::new();
        for far in [2.0 * a, 0.5 * a] {
            let s_far = self.block_scale(far);
            if s_far == s {
                continue;
            }
            // `near` keeps the scale `s`, `far` does not.
            let (mut near, mut beyond) = (a, far);
            for _ in 0..60 {
                let mid = 0.5 * (near + beyond);
                if self.block_scale(mid) == s {
                    near = mid;
                } else {
                    beyond = mid;
                }
            }
            out.push(((beyond - a).abs(), self.block_scale(beyond)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::cache_format::FormatChannels;
    use super::*;

    fn fmt(json: &str) -> CacheFormat {
        CacheFormat::from_json(json).unwrap()
    }

    #[test]
    fn no_allowance_away_from_a_boundary_and_one_step_across_one() {
        let f = fmt(r#"{"element": "e4m3", "scale": "pow2", "block": 4, "channels": "all"}"#);
        // Block maximum 400: scale 1, grid spacing 16 in 128..256, 8 in 64..128.
        let y = [400.0, 195.0, 98.0, 1.0];
        let a = f.allowance(&y, 4, 0.5, 0.0, 1.0);
        assert!(a.max[2] < 1e-3, "{a:?}"); // 98 +- 0.5 stays 96
        assert!(a.max[1] < 1e-3, "{a:?}"); // 195 +- 0.5 stays 192
                                           // Near a boundary (100, between 96 and 104): one step.
        let a = f.allowance(&[400.0, 195.0, 99.8, 1.0], 4, 0.5, 0.0, 1.0);
        assert!((a.max[2] - 8.0).abs() < 1e-3, "{a:?}");
        // The maximum's scale flips (448.5 needs scale 2): a power-of-two scale moves only the
        // subnormals (0.0027 is 2^-9 at scale 1, 2^-8 at scale 2), counted; the normal values
        // keep their grid.
        let a = f.allowance(&[448.0, 195.0, 98.0, 0.0027], 4, 1e-4, 0.0, 1.0);
        assert!(a.max[3] > 1e-3 && a.max[2] < 1e-3, "{a:?}");
        let a = f.allowance(&[400.0, 195.0, 98.0, 0.0027], 4, 1e-4, 0.0, 1.0);
        assert!(a.max[3] < 1e-3, "{a:?}");
    }

    #[test]
    fn the_rms_half_grows_with_rho_and_vanishes_without_error() {
        for f in [
            fmt(r#"{"element": "e4m3", "scale": "e8m0", "block": 32, "channels": "all"}"#),
            fmt(r#"{"element": "e2m1", "scale": "e4m3", "block": 16, "channels": "all"}"#),
            fmt(r#"{"element": "e4m3", "scale": "f32", "block": 16, "channels": "all"}"#),
            CacheFormat {
                element: Element::E4m3,
                scale: ScaleKind::Pow2,
                block: 64,
                channels: FormatChannels::Nope,
                global_scale: None,
                amax_min: Some(1e-4),
            },
        ] {
            let y: Vec<f64> = (0..128).map(|k| ((k as f64) * 0.71).sin() * 2.0).collect();
            let rms = (y.iter().map(|v| v * v).sum::<f64>() / 128.0).sqrt();
            let sum = |rho: f64| f.allowance(&y, 64, 0.0, rho, rms).sq.iter().sum::<f64>();
            assert_eq!(sum(0.0), 0.0, "{}", f.describe());
            assert!(sum(1e-3) > 0.0 && sum(1e-2) > sum(1e-3), "{}", f.describe());
            // Exact when every error is within delta: the encoded kernel value never leaves it.
            let delta = 0.01;
            let a = f.allowance(&y, 64, delta, 0.0, rms);
            let mut r = y.clone();
            f.round_entry(&mut r, 64);
            for e in [-delta, -0.5 * delta, 0.3 * delta, delta] {
                let mut x: Vec<f64> = y.iter().enumerate().map(|(c, v)| v + e * (c as f64 * 1.3).cos()).collect();
                f.round_entry(&mut x, 64);
                for c in 0..128 {
                    assert!((x[c] - r[c]).abs() <= a.max[c], "{} channel {c}: {e}", f.describe());
                }
            }
        }
    }
}
