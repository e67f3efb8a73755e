//! Parameters of one kernel head, stored in the layout of the equations:
//! `Z: [G, d_g, d]`, `b: [W, d_g]`, `C: [G, d_h, d]`, `gamma: [d_h]`.
//!
//! A flat parameter vector ([`KernelParams::from_flat`] / [`KernelParams::to_flat`]) is the
//! canonical order used by property-test strategies and by dumps: gate K (Z then b), gate V,
//! projection K, projection V, gamma; absent pieces are skipped.

use super::spec::{KernelDims, KernelSpec};
use crate::{Error, Result};
use ndarray::{Array1, Array2, Array3, ArrayD, ArrayViewD, Ix1, Ix2, Ix3, IxDyn};
use num_traits::Float;
use std::collections::HashMap;

/// Gate parameters of one branch: logits `s_{j,i} = Z_{g(i)} h_{j,i} + b_i`.
#[derive(Clone, Debug, PartialEq)]
pub struct GateParams<F> {
    /// `Z`: `[G, d_g, d]`.
    pub z: Array3<F>,
    /// `b`: `[W, d_g]`, per offset; all zeros when the spec has no gate bias.
    pub b: Array2<F>,
    /// Whether `b` is a parameter (`false`: the spec's `gate_bias: false`, `b` is a structural
    /// zero that is neither dumped nor loaded, and adding it to a logit is exact).
    pub bias: bool,
}

/// All parameters of one kernel head.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelParams<F> {
    /// Key gate (`None` for uniform gates).
    pub gate_k: Option<GateParams<F>>,
    /// Value gate (`None` when tied, shared_kv or uniform).
    pub gate_v: Option<GateParams<F>>,
    /// Key projection `C^K`: `[G, d_h, d]`.
    pub proj_k: Array3<F>,
    /// Value projection `C^V` (`None` when shared_kv).
    pub proj_v: Option<Array3<F>>,
    /// RMSNorm weight `gamma` (`Some` iff the spec has `rms_norm`).
    pub gamma: Option<Array1<F>>,
}

/// Shapes of every parameter piece, in flat order, for a spec and dims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamLayout {
    /// `(name, shape)` in flat order.
    pub pieces: Vec<(&'static str, Vec<usize>)>,
}

impl ParamLayout {
    /// The layout of a spec at the given dims.
    pub fn of(spec: &KernelSpec, dims: KernelDims) -> Self {
        let (g, w) = (spec.num_groups(), spec.geometry.window());
        let (d, dh) = (dims.d_model, dims.d_head);
        let dg = spec.gate_width(dh);
        let mut pieces = Vec::new();
        if dg > 0 {
            let bias = spec.has_gate_bias();
            pieces.push(("gate_k.z", vec![g, dg, d]));
            if bias {
                pieces.push(("gate_k.b", vec![w, dg]));
            }
            if spec.has_value_gate() {
                pieces.push(("gate_v.z", vec![g, dg, d]));
                if bias {
                    pieces.push(("gate_v.b", vec![w, dg]));
                }
            }
        }
        pieces.push(("proj_k", vec![g, dh, d]));
        if !spec.shared_kv {
            pieces.push(("proj_v", vec![g, dh, d]));
        }
        if spec.rms_norm {
            pieces.push(("gamma", vec![dh]));
        }
        ParamLayout { pieces }
    }

    /// Total number of scalars.
    pub fn len(&self) -> usize {
        self.pieces.iter().map(|(_, s)| s.iter().product::<usize>()).sum()
    }

    /// Whether there are no parameters at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<F: Float> KernelParams<F> {
    /// Builds parameters from a flat vector in [`ParamLayout`] order.
    pub fn from_flat(spec: &KernelSpec, dims: KernelDims, flat: &[F]) -> Result<Self> {
        let layout = ParamLayout::of(spec, dims);
        if flat.len() != layout.len() {
            return Err(Error::shape(
                "kernel parameters",
                format!("{} scalars", layout.len()),
                format!("{}", flat.len()),
            ));
        }
        let mut at = 0;
        let mut pieces: HashMap<&str, ArrayD<F>> = HashMap::new();
        for (name, shape) in &layout.pieces {
            let n: usize = shape.iter().product();
            let a = ArrayD::from_shape_vec(IxDyn(shape), flat[at..at + n].to_vec()).expect("layout shape");
            pieces.insert(name, a);
            at += n;
        }
        let mut take = |name: &str| pieces.remove(name);
        let dim3 = |a: ArrayD<F>| a.into_dimensionality::<Ix3>().expect("layout shape");
        let (w, dg) = (spec.geometry.window(), spec.gate_width(dims.d_head));
        let mut gate = |z: &str, b: &str| {
            let z = take(z)?;
            Some(match take(b) {
                Some(b) => {
                    GateParams { z: dim3(z), b: b.into_dimensionality::<Ix2>().expect("layout shape"), bias: true }
                }
                None => GateParams { z: dim3(z), b: Array2::zeros((w, dg)), bias: false },
            })
        };
        let (gate_k, gate_v) = (gate("gate_k.z", "gate_k.b"), gate("gate_v.z", "gate_v.b"));
        Ok(KernelParams {
            gate_k,
            gate_v,
            proj_k: dim3(take("proj_k").expect("proj_k is always present")),
            proj_v: take("proj_v").map(dim3),
            gamma: take("gamma").map(|a| a.into_dimensionality::<Ix1>().expect("layout shape")),
        })
    }

    /// Every piece present, in [`ParamLayout`] order: its name and values.
    fn pieces(&self) -> Vec<(&'static str, ArrayViewD<'_, F>)> {
        let mut out = Vec::new();
        for (g, z, b) in [(&self.gate_k, "gate_k.z", "gate_k.b"), (&self.gate_v, "gate_v.z", "gate_v.b")] {
            if let Some(g) = g {
                out.push((z, g.z.view().into_dyn()));
                if g.bias {
                    out.push((b, g.b.view().into_dyn()));
                }
            }
        }
        out.push(("proj_k", self.proj_k.view().into_dyn()));
        out.extend(self.proj_v.as_ref().map(|p| ("proj_v", p.view().into_dyn())));
        out.extend(self.gamma.as_ref().map(|g| ("gamma", g.view().into_dyn())));
        out
    }

    /// The flat vector in [`ParamLayout`] order.
    pub fn to_flat(&self) -> Vec<F> {
        self.pieces().iter().flat_map(|(_, a)| a.iter().copied()).collect()
    }

    /// Checks every shape against the spec and dims, and that every value is finite.
    pub fn validate(&self, spec: &KernelSpec, dims: KernelDims) -> Result<()> {
        let layout = ParamLayout::of(spec, dims);
        let got: Vec<(&str, Vec<usize>)> = self.pieces().iter().map(|(n, a)| (*n, a.shape().to_vec())).collect();
        for (want, have) in layout.pieces.iter().zip(&got) {
            if want.0 != have.0 {
                return Err(Error::shape(
                    "kernel parameters",
                    format!("piece {}", want.0),
                    format!("piece {}", have.0),
                ));
            }
            if want.1 != have.1 {
                return Err(Error::shape(
                    format!("parameter {}", want.0),
                    format!("{:?}", want.1),
                    format!("{:?}", have.1),
                ));
            }
        }
        if layout.pieces.len() != got.len() {
            let names = |v: &[(&str, Vec<usize>)]| v.iter().map(|p| p.0).collect::<Vec<_>>().join(", ");
            return Err(Error::shape("kernel parameters", names(&layout.pieces), names(&got)));
        }
        if self.to_flat().iter().any(|v| !v.is_finite()) {
            return Err(Error::invalid("kernel parameters", "contain NaN or infinity"));
        }
        Ok(())
    }

    /// Converts every value to another float type (e.g. rounding f64 parameters to f16).
    pub fn cast<G: Float>(&self) -> KernelParams<G> {
        let c = |v: &F| G::from(*v).expect("float cast");
        KernelParams {
            gate_k: self.gate_k.as_ref().map(|g| GateParams { z: g.z.map(c), b: g.b.map(c), bias: g.bias }),
            gate_v: self.gate_v.as_ref().map(|g| GateParams { z: g.z.map(c), b: g.b.map(c), bias: g.bias }),
            proj_k: self.proj_k.map(c),
            proj_v: self.proj_v.as_ref().map(|p| p.map(c)),
            gamma: self.gamma.as_ref().map(|g| g.map(c)),
        }
    }

    /// Multiplies the gate weights `Z` and projections `C` by `scale` (biases and RMSNorm
    /// weights untouched); `1/sqrt(d)` keeps entries of order 1 for inputs of order 1.
    pub fn scale_weights(&mut self, scale: F) {
        for g in [&mut self.gate_k, &mut self.gate_v].into_iter().flatten() {
            g.z.mapv_inplace(|v| v * scale);
        }
        self.proj_k.mapv_inplace(|v| v * scale);
        if let Some(pv) = &mut self.proj_v {
            pv.mapv_inplace(|v| v * scale);
        }
    }

    /// Sets every gate's content weights `Z` to zero, so gate weights depend on the offset
    /// biases only (content-free gates; used by K4, K7).
    pub fn zero_gate_content(&mut self) {
        for g in [&mut self.gate_k, &mut self.gate_v].into_iter().flatten() {
            g.z.fill(F::zero());
        }
    }

    /// Sets every bias `b_i` to the value of offset 0 (equal biases; used by K7, K9; a no-op
    /// without biases, whose structural zeros are already equal).
    pub fn equalize_biases(&mut self) {
        for g in [&mut self.gate_k, &mut self.gate_v].into_iter().flatten() {
            let row0 = g.b.row(0).to_owned();
            for mut row in g.b.rows_mut() {
                row.assign(&row0);
            }
        }
    }

    /// Copies group 0's `Z` and `C` into every group (shared parameters; used by K9).
    pub fn share_groups(&mut self) {
        fn share<F: Float>(a: &mut Array3<F>) {
            let g0 = a.index_axis(ndarray::Axis(0), 0).to_owned();
            for mut g in a.outer_iter_mut() {
                g.assign(&g0);
            }
        }
        for g in [&mut self.gate_k, &mut self.gate_v].into_iter().flatten() {
            share(&mut g.z);
        }
        share(&mut self.proj_k);
        if let Some(p) = &mut self.proj_v {
            share(p);
        }
    }
}

impl KernelParams<f64> {
    /// Seeded random parameters for benchmarks and demos: weights uniform in `[-1, 1]/sqrt(d)`,
    /// biases uniform in `[-1, 1]`, RMSNorm weights 1. (Property tests draw from proptest
    /// strategies instead.)
    pub fn random(spec: &KernelSpec, dims: KernelDims, seed: u64) -> Self {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n = ParamLayout::of(spec, dims).len();
        let flat: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut p = KernelParams::from_flat(spec, dims, &flat).expect("layout length");
        p.scale_weights(1.0 / (dims.d_model as f64).sqrt());
        if let Some(g) = &mut p.gamma {
            g.fill(1.0);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DeepSeek-V4.1 carries no gate biases (`gate_bias: false`) and, at ratio 1, no gate.
    #[test]
    fn dsv41_parameters_have_no_gate_bias() {
        for m in [1, 2, 3, 4, 128, 7] {
            let spec = KernelSpec::preset(&format!("dsv41-c{m}")).unwrap();
            let layout = ParamLayout::of(&spec, KernelDims::new(8, 64).unwrap());
            let names: Vec<&str> = layout.pieces.iter().map(|p| p.0).collect();
            if m == 1 {
                assert_eq!(names, ["proj_k", "gamma"]);
            } else {
                assert_eq!(names, ["gate_k.z", "proj_k", "gamma"]);
            }
        }
    }

    #[test]
    fn flat_round_trip_and_shape_errors() {
        for name in ["w8s4", "w8s4-tied", "w8s4-uniform", "w8s6-scalar", "dsv4-csa", "full", "dsv41-c4"] {
            let spec = KernelSpec::preset(name).unwrap();
            let dims = KernelDims::new(3, 2).unwrap();
            let n = ParamLayout::of(&spec, dims).len();
            let flat: Vec<f64> = (0..n).map(|k| k as f64 * 0.01).collect();
            let p = KernelParams::from_flat(&spec, dims, &flat).unwrap();
            p.validate(&spec, dims).unwrap();
            assert_eq!(p.to_flat(), flat, "{name}");
            let e = KernelParams::<f64>::from_flat(&spec, dims, &flat[1..]).unwrap_err().to_string();
            assert!(e.contains("shape mismatch"), "{e}");
            let other = KernelDims::new(4, 2).unwrap();
            assert!(p.validate(&spec, other).is_err());
        }
    }

    #[test]
    fn gate_width_inconsistent_with_d_head_is_rejected() {
        // A vector gate must have d_g = d_h; parameters built for a scalar gate do not fit.
        let vector = KernelSpec::preset("w4s4").unwrap();
        let scalar = KernelSpec::preset("w4s4-scalar").unwrap();
        let dims = KernelDims::new(3, 4).unwrap();
        let n = ParamLayout::of(&scalar, dims).len();
        let p = KernelParams::from_flat(&scalar, dims, &vec![0.1; n]).unwrap();
        let e = p.validate(&vector, dims).unwrap_err().to_string();
        assert!(e.contains("gate_k.z") && e.contains("[4, 4, 3]") && e.contains("[4, 1, 3]"), "{e}");
    }

    #[test]
    fn nan_parameters_are_rejected() {
        let spec = KernelSpec::preset("w4s4").unwrap();
        let dims = KernelDims::new(2, 2).unwrap();
        let n = ParamLayout::of(&spec, dims).len();
        let mut flat = vec![0.1; n];
        flat[3] = f64::NAN;
        let p = KernelParams::from_flat(&spec, dims, &flat).unwrap();
        assert!(p.validate(&spec, dims).unwrap_err().to_string().contains("NaN"));
    }
}
