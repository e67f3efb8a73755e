//! K13 on a dump, the tolerance rule per output (`theory/dump-format.md`, "The tolerance rule"):
//! pooled keys/values and gates against the f64 reference and the twin (the reference in the
//! kernel's accumulator dtype), post-processed keys/values given the kernel's own pooled entries
//! (or end to end), encoded like the kernel's cache when the dump names a `cache_format`, and the
//! systematic-scale check beside each.

use super::report::{CheckRow, Status};
use crate::conformance::dump::Dump;
use crate::conformance::harness::checks::post_rows;
use crate::conformance::harness::tolerance::{
    accumulator, max_abs_diff, rounding_bound, rounding_bound_rms, unit_roundoff, STAGE_ROUNDINGS, STAGE_ROUNDINGS_RMS,
};
use crate::kernel::reference::pooled_rounding_scale;
use crate::kernel::spec::RopeScaling;
use crate::kernel::Compressed;
use crate::numeric::formats::CacheFormat;
use candle_core::DType;
use ndarray::{s, Array2, Axis};

/// Floor of the systematic-scale check, in units of roundoff of the dump's dtype: a kernel whose
/// outputs are the reference times `1 + c` fails once `|c|` exceeds this (plus twice the low
/// reference's own scale). 4 keeps correct kernels (unbiased rounding, scale ~ u / sqrt(N)) far
/// inside and catches a 16-ulp systematic error with room to spare.
pub const SCALE_FLOOR_ULPS: f64 = 4.0;

/// Roundings in a correct kernel's RoPE angle `p f_i` computed in its accumulator dtype
/// (`theory/dump-format.md`, "RoPE angles in the accumulator dtype"): the frequency's `pow`
/// (at most 2u), its reciprocal (u) and the product with the position (u). Hugging Face,
/// DeepSeek's reference and vLLM all form the angle this way in f32.
pub const ANGLE_ROUNDINGS: f64 = 4.0;

/// YaRN's blend of the interpolated and extrapolated frequency (`f / factor * ramp + f (1 -
/// ramp)`, the ramp itself rounded): at most four more roundings of `f_i`.
pub const YARN_BLEND_ROUNDINGS: f64 = 4.0;

/// The RoPE angle a correct kernel forms in its accumulator dtype, bounded per rotated channel:
/// pair `i` at position `p` is rotated by `p f_i (1 + e)` with `|e| <= c_i u`, `c_i =`
/// [`ANGLE_ROUNDINGS`] `+ (2i / r) ln theta` (the exponent `2i / r`, rounded, multiplies its
/// error by `ln theta` through `pow`) `+` [`YARN_BLEND_ROUNDINGS`] with YaRN. A rotation by
/// `delta` moves the pair by `|delta| |y_pair|` at most, so the allowance of both its channels is
/// `c_i u p f_i |y_pair|`: zero on the unrotated channels and growing with the position.
pub(super) struct AngleAllowance {
    /// The first rotated channel.
    split: usize,
    /// Per rotated pair, `c_i u f_i` (the allowance per unit position and unit pair norm).
    slopes: Vec<f64>,
}

impl AngleAllowance {
    /// The allowance of a dump's post-processed outputs (None without RoPE).
    pub fn new(d: &Dump) -> Option<Self> {
        let rs = d.spec.rope.as_ref()?;
        let r = rs.rotated_channels(d.dims.d_head);
        if r == 0 {
            return None;
        }
        let u = unit_roundoff(accumulator(d.dtype));
        let (from_theta, blend) = match &rs.scaling {
            None => (true, 0.0),
            Some(RopeScaling::Yarn { .. }) => (true, YARN_BLEND_ROUNDINGS),
            Some(RopeScaling::Frequencies(_)) => (false, 0.0),
        };
        let slopes = rs
            .inv_frequencies(r)
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let exponent = if from_theta { 2.0 * i as f64 / r as f64 * rs.theta.ln() } else { 0.0 };
                (ANGLE_ROUNDINGS + exponent + blend) * u * f.abs()
            })
            .collect();
        Some(AngleAllowance { split: d.dims.d_head - r, slopes })
    }

    /// Per channel, the allowance of an entry at position `pos` whose f64 reference is `y`.
    pub fn entry(&self, y: &[f64], pos: usize) -> Vec<f64> {
        let mut out = vec![0.0; y.len()];
        for (i, slope) in self.slopes.iter().enumerate() {
            let (c0, c1) = (self.split + 2 * i, self.split + 2 * i + 1);
            if c1 >= y.len() {
                break;
            }
            let a = slope * pos as f64 * y[c0].hypot(y[c1]);
            out[c0] = a;
            out[c1] = a;
        }
        out
    }

    /// The allowances of every output (`[n, d_h]` per sequence, entry `j` at `positions[j] +
    /// shift`).
    pub fn of(&self, refs: &[&Array2<f64>], positions: &[usize], shift: usize) -> Vec<Array2<f64>> {
        refs.iter()
            .map(|r| {
                let mut a = Array2::zeros(r.raw_dim());
                for (j, (row, mut out)) in r.rows().into_iter().zip(a.rows_mut()).enumerate() {
                    let pos = positions.get(j).copied().unwrap_or(0) + shift;
                    out.assign(&ndarray::ArrayView1::from(&self.entry(&row.to_vec(), pos)));
                }
                a
            })
            .collect()
    }
}

/// The RMS half's bound on `n` stored channels whose expected squared flips sum to `allowed`:
/// that sum plus three standard deviations of it (each flip at most `step_max`), per channel.
pub(super) fn flips_rms_bound(allowed: f64, step_max: f64, n: usize) -> f64 {
    ((allowed + 3.0 * allowed.sqrt() * step_max) / n.max(1) as f64).sqrt()
}

/// `(max, rms)` of allowances over every element.
fn max_rms(a: &[Array2<f64>]) -> (f64, f64) {
    let (mut m, mut sq, mut n) = (0.0f64, 0.0f64, 0usize);
    for x in a.iter().flat_map(|a| a.iter()) {
        m = m.max(*x);
        sq += x * x;
        n += 1;
    }
    (m, if n > 0 { (sq / n as f64).sqrt() } else { 0.0 })
}

/// What K3 needs of the K13 rule of each output: the max-norm bound of a plain row (by the
/// output's name), and for an encoded output the rounding model's inputs and targets.
#[derive(Default)]
pub(super) struct Bounds {
    /// `(output name, max-norm bound, RMS bound)` of every plain (not encoded) output, without
    /// the RoPE angle's allowance (applied channel by channel, [`AngleAllowance`]).
    pub plain: Vec<(String, f64, f64)>,
    /// The rounding model of every encoded output.
    pub encoded: Vec<EncodedModel>,
}

impl Bounds {
    /// The max-norm bound of the plain output `name` (a prefix of the row's name).
    pub fn plain(&self, name: &str) -> Option<f64> {
        self.plain.iter().find(|(n, _, _)| n.starts_with(name)).map(|(_, b, _)| *b)
    }

    /// The RMS bound of the plain output `name`.
    pub fn plain_rms(&self, name: &str) -> Option<f64> {
        self.plain.iter().find(|(n, _, _)| n.starts_with(name)).map(|(_, _, r)| *r)
    }
}

/// An encoded output's rounding model (`theory/dump-format.md`, "Quantized keys: the rounding
/// model"): the pre-encoding bounds and the f64 values the reference encodes.
pub(super) struct EncodedModel {
    /// The output (`keys ...`, `values ...`).
    pub name: String,
    /// Largest pre-encoding error of a correct kernel (the plain max-norm bound).
    pub delta: f64,
    /// RMS of the pre-encoding error of a correct kernel (the plain RMS bound).
    pub rho: f64,
    /// RMS of the reference over the output.
    pub rms_ref: f64,
    /// Per sequence, the f64 values before encoding (`[n, d_h]`).
    pub targets: Vec<Array2<f64>>,
}

/// The outcome of comparing stored entries with the reference's encoding under the rounding
/// model, accumulated entry by entry ([`Encoded::add`]).
#[derive(Default)]
pub(super) struct Encoded {
    /// Largest `|impl - enc(ref)| / allowance` (1: at the allowance).
    pub worst: f64,
    /// `|impl - enc(ref)|` and the allowance at the worst channel.
    pub at_worst: (f64, f64),
    /// Per channel group (the channels before `split`, the rest): squared errors, expected
    /// squared flips, channels.
    group_sq: [f64; 2],
    group_allowed: [f64; 2],
    group_count: [usize; 2],
    /// The first rotated channel (the RMS half holds on the NoPE and the RoPE channels each:
    /// a RoPE bug is confined to the latter).
    split: usize,
    step_max: f64,
    count: usize,
    cross: f64,
    cross_low: f64,
    noise: f64,
    norm: f64,
    entries: usize,
    entry_sq: f64,
    entry_noise: f64,
    rho: f64,
    rms_ref: f64,
    /// Per rotated pair: the error's component along the pair's rotation direction, the
    /// reference's squared norm, the flips' variance of that component.
    pairs: Vec<[f64; 3]>,
}

impl Encoded {
    /// Adds one entry: `got` stored by the kernel, `y` the f64 value the reference encodes,
    /// `low` the twin's (None: not compared), under pre-encoding bounds `delta` and `rho`.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        f: &CacheFormat,
        quantized: usize,
        got: &[f64],
        y: &[f64],
        low: Option<&[f64]>,
        delta: f64,
        rho: f64,
        rms_ref: f64,
    ) {
        let mut t = y.to_vec();
        f.round_entry(&mut t, quantized);
        let lt = low.map(|l| {
            let mut l = l.to_vec();
            f.round_entry(&mut l, quantized);
            l
        });
        let a = f.allowance(y, quantized, delta, rho, rms_ref);
        self.rho = self.rho.max(rho);
        self.rms_ref = rms_ref;
        let n_pairs = y.len().saturating_sub(self.split) / 2;
        if self.pairs.len() < n_pairs {
            self.pairs.resize(n_pairs, [0.0; 3]);
        }
        for (p, acc) in self.pairs.iter_mut().enumerate().take(n_pairs) {
            let (c0, c1) = (self.split + 2 * p, self.split + 2 * p + 1);
            let (d0, d1) = (got[c0] - t[c0], got[c1] - t[c1]);
            // `J y = (-y1, y0)`: the direction a rotation by a small angle moves the pair.
            acc[0] += -d0 * y[c1] + d1 * y[c0];
            acc[1] += y[c0] * y[c0] + y[c1] * y[c1];
            acc[2] += a.sq[c0] * y[c1] * y[c1] + a.sq[c1] * y[c0] * y[c0];
        }
        let (mut e_cross, mut e_norm, mut e_noise) = (0.0f64, 0.0f64, 0.0f64);
        for c in 0..y.len() {
            e_cross += (got[c] - t[c]) * y[c];
            e_norm += y[c] * y[c];
            e_noise += a.sq[c] * y[c] * y[c];
            let diff = (got[c] - t[c]).abs();
            let ratio = if diff.is_nan() {
                f64::INFINITY
            } else if diff == 0.0 {
                0.0
            } else {
                diff / a.max[c]
            };
            if ratio > self.worst || (self.count == 0 && c == 0) {
                self.worst = self.worst.max(ratio);
                self.at_worst = (diff, a.max[c]);
            }
            let grp = usize::from(c >= self.split);
            self.group_sq[grp] += diff * diff;
            self.group_allowed[grp] += a.sq[c];
            self.group_count[grp] += 1;
            self.count += 1;
            self.cross += (got[c] - t[c]) * y[c];
            if let Some(lt) = &lt {
                self.cross_low += (lt[c] - t[c]) * y[c];
            }
            self.noise += a.sq[c] * y[c] * y[c];
            self.norm += y[c] * y[c];
        }
        self.step_max = self.step_max.max(a.step_max);
        if e_norm > 0.0 {
            let c = e_cross / e_norm;
            self.entries += 1;
            self.entry_sq += if c.is_nan() { f64::INFINITY } else { c * c * e_norm };
            self.entry_noise += e_noise / e_norm;
        }
    }

    /// The entry-scale half, `(statistic, bound)`: each entry's least-squares scale `c_j` of
    /// `impl - enc(ref)` on its reference (what an RMSNorm bug changes), weighted,
    /// `sqrt(sum_j c_j^2 |y_j|^2 / N)`. Before encoding it is at most the RMS of the error, so at
    /// most `rho`; the encoding's flips add their variance `V` (expected, with three standard
    /// deviations of its sum over the entries and of the cross term).
    pub fn entry_scales(&self) -> (f64, f64) {
        if self.count == 0 || self.entries == 0 {
            return (0.0, 0.0);
        }
        let n = self.count as f64;
        let m = self.entries as f64;
        let v = self.entry_noise / n;
        let rho = self.rho;
        let bound = (rho * rho + v * (1.0 + 3.0 * (2.0 / m).sqrt()) + 6.0 * rho * (v / m).sqrt()).sqrt();
        ((self.entry_sq / n).sqrt(), bound)
    }

    /// The rotation half, `(pair, angle, bound)` of the pair closest to failing: each rotated
    /// pair's least-squares rotation angle of `impl - enc(ref)` over every entry (what a wrong
    /// RoPE frequency or position gives). Before encoding, the error's component along the
    /// rotation is at most its RMS, `rho` (at the pair's magnitude when above the output's), so
    /// `|angle| <= rho' / rms(pair)`; the flips add four standard deviations of their noise.
    pub fn pair_angles(&self) -> Option<(usize, f64, f64)> {
        let mut worst: Option<(usize, f64, f64)> = None;
        for (p, &[cross, norm, noise]) in self.pairs.iter().enumerate() {
            if norm <= 0.0 || self.entries == 0 {
                continue;
            }
            let rms_pair = (norm / (2.0 * self.entries as f64)).sqrt();
            let rho = self.rho * (rms_pair / self.rms_ref.max(f64::MIN_POSITIVE)).max(1.0);
            let angle = cross / norm;
            let bound = rho / rms_pair + 4.0 * noise.sqrt() / norm;
            let ratio = |a: f64, b: f64| if b > 0.0 { a.abs() / b } else { f64::INFINITY };
            if worst.is_none_or(|(_, a, b)| ratio(angle, bound) > ratio(a, b) || angle.is_nan()) {
                worst = Some((p, angle, bound));
            }
        }
        worst
    }

    /// The RMS half on the channel groups: a new accumulator whose RoPE channels start at
    /// `split` (`d_h` or 0: one group).
    pub fn new(split: usize) -> Self {
        Encoded { split, ..Default::default() }
    }

    /// `(rms, bound)` of the channel group whose RMS of `impl - enc(ref)` is largest against
    /// its bound: the expected squared flips, plus three standard deviations of their sum (each
    /// flip at most `step_max`).
    fn rms_half(&self) -> (f64, f64) {
        let mut worst = (0.0, 0.0);
        let mut ratio = -1.0f64;
        for g in 0..2 {
            let n = self.group_count[g];
            if n == 0 {
                continue;
            }
            let rms = (self.group_sq[g] / n as f64).sqrt();
            let bound = flips_rms_bound(self.group_allowed[g], self.step_max, n);
            let r = if rms == 0.0 {
                0.0
            } else if bound > 0.0 {
                rms / bound
            } else {
                f64::INFINITY
            };
            if r > ratio {
                ratio = r;
                worst = (rms, bound);
            }
        }
        worst
    }

    /// RMS of `impl - enc(ref)` on the channel group closest to failing.
    pub fn rms(&self) -> f64 {
        self.rms_half().0
    }

    /// The RMS half's bound on that group.
    pub fn rms_bound(&self) -> f64 {
        self.rms_half().1
    }

    /// Whether either half fails.
    pub fn fails(&self) -> bool {
        let (es, eb) = self.entry_scales();
        let rotation = self.pair_angles().is_some_and(|(_, a, b)| a.is_nan() || a.abs() > b);
        self.worst > 1.0 || self.rms() > self.rms_bound() || es > eb || rotation
    }

    /// `(scale, twin's scale, noise)`: the least-squares scale of `impl - enc(ref)` on the
    /// reference, the twin's, and four standard deviations of the scale the encoding's flips
    /// alone give.
    pub fn scale(&self) -> (f64, f64, f64) {
        if self.norm > 0.0 {
            (self.cross / self.norm, self.cross_low / self.norm, 4.0 * self.noise.sqrt() / self.norm)
        } else {
            (0.0, 0.0, 0.0)
        }
    }
}

/// The K13 rows of the main run: `ref64`/`low` are the f64 reference and the twin of each
/// sequence, `n` the entries compared, `positions` theirs, `terms` the summation length. Also
/// returns what K3 needs of each output's rule ([`Bounds`]).
pub(super) fn rows(
    d: &Dump,
    ref64: &[Compressed<f64>],
    low: &[Compressed<f64>],
    n: usize,
    positions: &[usize],
    terms: usize,
) -> (Vec<CheckRow>, Bounds) {
    let spec = &d.spec;
    let run = &d.main;
    let b = run.batch();
    let mut rows = Vec::new();
    let bounds = std::cell::RefCell::new(Bounds::default());
    let cut2 = |a: &ndarray::Array3<f64>, k: usize| a.slice(s![k, ..n, ..]).to_owned();
    let u = unit_roundoff(d.dtype);
    let stride = spec.geometry.stride();
    let format = d.cache_format.as_ref();
    let rotated = spec.rope.as_ref().map_or(0, |rs| rs.rotated_channels(d.dims.d_head));
    let quantized = format.map_or(0, |f| f.quantized_channels(d.dims.d_head, rotated));
    // `encoded`: the output is a stored cache entry in `format` (keys and values), compared with
    // the reference's own encoding of its f64 result under the rounding model.
    let rule = |name: &str,
                got: &dyn Fn(usize) -> Array2<f64>,
                r: &dyn Fn(usize) -> (Array2<f64>, Array2<f64>),
                encoded: bool| {
        let fmt = format.filter(|_| encoded);
        let refs: Vec<(Array2<f64>, Array2<f64>)> = (0..b).map(r).collect();
        let gots: Vec<Array2<f64>> = (0..b).map(got).collect();
        // The pre-encoding statistics of the reference and its twin.
        let (mut err_low, mut mag, mut sq_low, mut sq_ref, mut count) = (0.0f64, 0.0f64, 0.0f64, 0.0f64, 0usize);
        for (r64, rlow) in &refs {
            for (y, l) in r64.iter().zip(rlow.iter()) {
                err_low = err_low.max((l - y).abs());
                mag = mag.max(y.abs());
                sq_low += (l - y) * (l - y);
                sq_ref += y * y;
                count += 1;
            }
        }
        let rms = |v: f64| if count > 0 { (v / count as f64).sqrt() } else { 0.0 };
        let (rms_low, rms_ref) = (rms(sq_low), rms(sq_ref));
        let bound = rounding_bound(err_low, d.dtype, mag, terms);
        let bound_rms = rounding_bound_rms(rms_low, d.dtype, rms_ref, terms);
        let shape_ok = gots.iter().zip(&refs).all(|(g, (r, _))| g.shape() == r.shape());
        // A stored (post-processed) output carries RoPE: its rotated channels may also differ by
        // the angle's rounding in the accumulator dtype, at the main run's positions and (for
        // K3's bounds) at the shifted run's.
        let angle = if encoded { AngleAllowance::new(d) } else { None };
        let r64s: Vec<&Array2<f64>> = refs.iter().map(|(r, _)| r).collect();
        let allow = angle.as_ref().map(|a| a.of(&r64s, positions, 0)).unwrap_or_default();
        let (angle_max, angle_rms) = max_rms(&allow);
        let angle_shifted = angle.as_ref().map_or(0.0, |a| max_rms(&a.of(&r64s, positions, stride)).0);
        let mut off_grid: Option<String> = None;
        let (magnitude, systematic) = match fmt {
            Some(f) => {
                let mut e = Encoded::new(d.dims.d_head - rotated);
                for (k, (g, (r64, rlow))) in gots.iter().zip(&refs).enumerate() {
                    if g.shape() != r64.shape() {
                        continue;
                    }
                    for (j, ((gr, rr), lr)) in g.rows().into_iter().zip(r64.rows()).zip(rlow.rows()).enumerate() {
                        let (gr, rr, lr) = (gr.to_vec(), rr.to_vec(), lr.to_vec());
                        if off_grid.is_none() {
                            if let Some(c) = f.off_grid(&gr, quantized) {
                                off_grid = Some(format!("sequence {k}, entry {j}, channel {c} = {:e}", gr[c]));
                            }
                        }
                        e.add(f, quantized, &gr, &rr, Some(&lr), bound + angle_max, bound_rms + angle_rms, rms_ref);
                    }
                }
                bounds.borrow_mut().encoded.push(EncodedModel {
                    name: name.to_string(),
                    delta: bound + angle_shifted,
                    rho: bound_rms + angle_rms,
                    rms_ref,
                    targets: refs.iter().map(|(r, _)| r.clone()).collect(),
                });
                let max_fails = !shape_ok || e.worst > 1.0;
                let (es, eb) = e.entry_scales();
                let (pair, angle, angle_bound) = e.pair_angles().unwrap_or((0, 0.0, 0.0));
                let rotation_fails = angle.is_nan() || angle.abs() > angle_bound;
                let rms_fails = e.rms() > e.rms_bound() || es > eb || rotation_fails;
                let (error, shown) = match (max_fails, e.rms() > e.rms_bound()) {
                    (true, _) => e.at_worst,
                    (false, true) => (e.rms(), e.rms_bound()),
                    (false, false) if es > eb => (es, eb),
                    (false, false) if rotation_fails => (angle.abs(), angle_bound),
                    _ => e.at_worst,
                };
                let magnitude = CheckRow {
                    id: "K13",
                    name: format!("tolerance: {name}"),
                    status: if max_fails || rms_fails { Status::Fail } else { Status::Pass },
                    error: if shape_ok { error } else { f64::INFINITY },
                    bound: shown,
                    note: format!(
                        "rounding model of the stored entry, pre-encoding error <= {bound:.3e} (max), {bound_rms:.3e} \
                         (rms): max|impl - enc(ref64)| / allowance = {:.3e} ({:.3e} vs {:.3e}); rms {:.3e} vs \
                         expected flips {:.3e}; entry scales {es:.3e} vs {eb:.3e}; rotation of pair {pair} \
                         {angle:.3e} vs {angle_bound:.3e}",
                        e.worst,
                        e.at_worst.0,
                        e.at_worst.1,
                        e.rms(),
                        e.rms_bound()
                    ),
                };
                // A systematic scale `c` before encoding is an RMS error `|c| rms(ref)`, which the
                // plain RMS rule bounds by `bound_rms`; the encoding's flips add noise only.
                let (scale, scale_low, noise) = e.scale();
                let scale_bound = 2.0 * scale_low.abs() + bound_rms / rms_ref.max(f64::MIN_POSITIVE) + noise;
                let systematic = CheckRow {
                    id: "K13",
                    name: format!("systematic scale: {name}"),
                    status: if scale.abs() <= scale_bound { Status::Pass } else { Status::Fail },
                    error: scale.abs(),
                    bound: scale_bound,
                    note: format!(
                        "impl - enc(ref64) = ref64 * {scale:.3e} in least squares ({:.1} units of roundoff); \
                         twin: {scale_low:.3e}; bound: the pre-encoding RMS bound / rms(ref64) + flip noise \
                         {noise:.3e}",
                        scale / u
                    ),
                };
                (magnitude, systematic)
            }
            None => {
                bounds.borrow_mut().plain.push((name.to_string(), bound, bound_rms));
                plain_rows(name, &gots, &refs, &allow, bound, bound_rms, (err_low, rms_low, rms_ref), u, shape_ok)
            }
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
    // The localized-error row of a pooled output (`localized`): one entry far above its
    // sequence's level, which the whole output's RMS dilutes.
    let localized = |name: &str, got: &ndarray::Array3<f64>, value: bool| {
        let gots: Vec<Array2<f64>> = (0..b).map(|k| cut2(got, k)).collect();
        let refs: Vec<Array2<f64>> =
            (0..b).map(|k| first_n(if value { &ref64[k].pooled_v } else { &ref64[k].pooled_k })).collect();
        if !super::localized::held(&refs, d.dtype) {
            return None;
        }
        let terms: Vec<Array2<f64>> = (0..b)
            .map(|k| {
                let x = run.input.index_axis(Axis(0), k);
                let mut t = Array2::<f64>::zeros((n, d.dims.d_head));
                for j in 0..n {
                    let (tk, tv) = pooled_rounding_scale(spec, d.dims, &d.params, x, j);
                    t.row_mut(j).assign(if value { &tv } else { &tk });
                }
                t
            })
            .collect();
        super::localized::row(name, &gots, &refs.iter().collect::<Vec<_>>(), &terms, d.dtype)
    };
    if let Some(pk) = &run.pooled_keys {
        rows.extend(rule(
            "pooled keys",
            &|k| cut2(pk, k),
            &|k| (first_n(&ref64[k].pooled_k), first_n(&low[k].pooled_k)),
            false,
        ));
        rows.extend(localized("pooled keys", pk, false));
    }
    if let Some(pv) = run.pooled_values.as_ref().or(if spec.shared_kv { run.pooled_keys.as_ref() } else { None }) {
        if !spec.shared_kv {
            rows.extend(rule(
                "pooled values",
                &|k| cut2(pv, k),
                &|k| (first_n(&ref64[k].pooled_v), first_n(&low[k].pooled_v)),
                false,
            ));
            rows.extend(localized("pooled values", pv, true));
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

    (rows, bounds.into_inner())
}

/// The magnitude and systematic-scale rows of a plain (not encoded) output.
#[allow(clippy::too_many_arguments)]
fn plain_rows(
    name: &str,
    gots: &[Array2<f64>],
    refs: &[(Array2<f64>, Array2<f64>)],
    allow: &[Array2<f64>],
    bound: f64,
    bound_rms: f64,
    (err_low, rms_low, rms_ref): (f64, f64, f64),
    u: f64,
    shape_ok: bool,
) -> (CheckRow, CheckRow) {
    let (mut err, mut sq, mut count) = (if shape_ok { 0.0f64 } else { f64::INFINITY }, 0.0f64, 0usize);
    let (mut cross, mut cross_low, mut norm) = (0.0f64, 0.0f64, 0.0f64);
    let mut angle_used = 0.0f64;
    for (k, (g, (r64, rlow))) in gots.iter().zip(refs).enumerate() {
        if g.shape() != r64.shape() {
            continue;
        }
        let a = allow.get(k).filter(|a| a.shape() == r64.shape());
        for (i, ((x, y), l)) in g.iter().zip(r64.iter()).zip(rlow.iter()).enumerate() {
            // The error beyond the RoPE angle's allowance (`AngleAllowance`; 0 off RoPE).
            let a = a.map_or(0.0, |a| a.as_slice().map_or(0.0, |s| s[i]));
            let raw = (x - y).abs();
            let e = (raw - a).max(0.0);
            angle_used = angle_used.max(raw.min(a));
            err = if raw.is_nan() { f64::INFINITY } else { err.max(e) };
            sq += e * e;
            count += 1;
            cross += (x - y) * y;
            cross_low += (l - y) * y;
            norm += y * y;
        }
    }
    let rms_err = if count > 0 { (sq / count as f64).sqrt() } else { 0.0 };
    let angle_note = if allow.is_empty() {
        String::new()
    } else {
        format!(" (both beyond the RoPE angle's rounding, of which up to {angle_used:.3e} used)")
    };
    let rms_fails = rms_err > bound_rms;
    let max_fails = err.is_nan() || err > bound;
    let (error, shown_bound) = if rms_fails && !max_fails { (rms_err, bound_rms) } else { (err, bound) };
    let magnitude = CheckRow {
        id: "K13",
        name: format!("tolerance: {name}"),
        status: if max_fails || rms_fails { Status::Fail } else { Status::Pass },
        error,
        bound: shown_bound,
        note: format!(
            "max|impl - ref64| = {err:.3e} vs 2 * max|twin - ref64| ({err_low:.3e}) + {STAGE_ROUNDINGS} u max|ref64| = \
             {bound:.3e}{angle_note}; rms {rms_err:.3e} vs 2 * rms|twin - ref64| ({rms_low:.3e}) + {STAGE_ROUNDINGS_RMS} u \
             rms|ref64| ({rms_ref:.3e}) = {bound_rms:.3e}"
        ),
    };
    // A systematic relative error (impl = ref * (1 + c)) hides under the magnitude rule when c is
    // a few units of roundoff; rounding errors are unbiased, so the least-squares scale of the
    // error on the reference, `sum (impl - ref) ref / sum ref^2`, is near 0 for a correct kernel
    // and c for a scaled one. Held to the same two-reference rule with a floor of
    // SCALE_FLOOR_ULPS units of roundoff.
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
    (magnitude, systematic)
}
