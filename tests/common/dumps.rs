//! Dumps changed as a kernel with a particular rounding or bug would have written them, shared
//! by the validator's tests.

use phasekv::conformance::dump::{round_to, Dump};
use phasekv::kernel::post::{rope, rope_angle};

/// `d` with every run's keys rotated as a kernel forming the RoPE angle in f32 rotates them:
/// pair `i` of the entry at position `p` by `fl32(fl32(p) fl32(f_i))` instead of `p f_i` (the
/// stored keys turned by the difference, rounded to the dump's dtype), or by `angle(p, i, f_i)`.
pub fn keys_rotated_by(d: &Dump, angle: &dyn Fn(usize, usize, f64) -> f64) -> Dump {
    let mut out = d.clone();
    let rs = d.spec.rope.clone().unwrap();
    let freqs = rs.inv_frequencies(rs.rotated_channels(d.dims.d_head));
    let spec = d.spec.clone();
    let dtype = d.dtype;
    let mut runs = vec![&mut out.main];
    runs.extend(out.shifted.as_mut());
    runs.extend(out.perturbed.as_mut().map(|p| &mut p.0));
    for run in runs {
        for k in 0..run.keys.shape()[0] {
            for j in 0..run.keys.shape()[1] {
                let p = spec.entry_position(j);
                let turn: Vec<f64> =
                    freqs.iter().enumerate().map(|(i, &f)| angle(p, i, f) - rope_angle(p, f)).collect();
                let mut v = run.keys.slice(ndarray::s![k, j, ..]).to_vec();
                rope(&mut v, &turn, 1);
                let v: Vec<f64> = v.into_iter().map(|x| round_to(dtype, x)).collect();
                run.keys.slice_mut(ndarray::s![k, j, ..]).assign(&ndarray::Array1::from(v));
            }
        }
    }
    out
}
