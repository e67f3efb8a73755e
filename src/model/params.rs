//! A seeded parameter store. candle's CPU random generator cannot be seeded
//! (`Device::set_seed` fails on CPU), so parameters are drawn here from a ChaCha8 stream in
//! creation order: the same seed and model config give bit-identical initial weights.

use candle_core::{DType, Device, Shape, Tensor, Var};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use ndarray_rand::rand_distr::{Distribution, Normal, Uniform};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::{Arc, Mutex};

/// Named trainable variables in creation order, drawn from a seeded stream.
#[derive(Clone)]
pub struct ParamStore {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    rng: ChaCha8Rng,
    vars: Vec<(String, Var)>,
}

impl std::fmt::Debug for ParamStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.inner.lock().map(|i| i.vars.len()).unwrap_or(0);
        write!(f, "ParamStore({n} vars)")
    }
}

impl ParamStore {
    /// An empty store whose initial values come from `seed`.
    pub fn new(seed: u64) -> Self {
        ParamStore { inner: Arc::new(Mutex::new(Inner { rng: ChaCha8Rng::seed_from_u64(seed), vars: Vec::new() })) }
    }

    /// A `VarBuilder` that creates (or returns) variables in this store.
    pub fn var_builder(&self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_backend(Box::new(self.clone()), dtype, device.clone())
    }

    /// All variables, in creation order, with their names.
    pub fn vars(&self) -> Vec<(String, Var)> {
        self.inner.lock().expect("param store lock").vars.clone()
    }

    /// Total number of scalar parameters.
    pub fn num_params(&self) -> usize {
        self.vars().iter().map(|(_, v)| v.elem_count()).sum()
    }
}

fn draw(rng: &mut ChaCha8Rng, n: usize, init: Init, fan_in: usize) -> Vec<f32> {
    match init {
        Init::Const(c) => vec![c as f32; n],
        Init::Randn { mean, stdev } => {
            let d = Normal::new(mean, stdev.max(0.0)).expect("finite normal");
            (0..n).map(|_| d.sample(rng) as f32).collect()
        }
        Init::Uniform { lo, up } => {
            let d = Uniform::new(lo, up.max(lo + f64::MIN_POSITIVE)).expect("finite uniform");
            (0..n).map(|_| d.sample(rng) as f32).collect()
        }
        Init::Kaiming { .. } => {
            let d = Normal::new(0.0, 1.0 / (fan_in.max(1) as f64).sqrt()).expect("normal");
            (0..n).map(|_| d.sample(rng) as f32).collect()
        }
    }
}

impl SimpleBackend for ParamStore {
    fn get(&self, s: Shape, name: &str, h: Init, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let mut inner = self.inner.lock().expect("param store lock");
        if let Some((_, v)) = inner.vars.iter().find(|(n, _)| n == name) {
            if v.shape() != &s {
                candle_core::bail!("parameter {name}: shape {:?} != {:?}", v.shape(), s);
            }
            return Ok(v.as_tensor().clone());
        }
        let dims = s.dims().to_vec();
        let fan_in = if dims.len() >= 2 { dims[1..].iter().product() } else { 1 };
        let values = draw(&mut inner.rng, s.elem_count(), h, fan_in);
        let t = Tensor::from_vec(values, s, dev)?.to_dtype(dtype)?;
        let var = Var::from_tensor(&t)?;
        inner.vars.push((name.to_string(), var.clone()));
        Ok(var.as_tensor().clone())
    }

    fn get_unchecked(&self, name: &str, _dtype: DType, _dev: &Device) -> candle_core::Result<Tensor> {
        let inner = self.inner.lock().expect("param store lock");
        match inner.vars.iter().find(|(n, _)| n == name) {
            Some((_, v)) => Ok(v.as_tensor().clone()),
            None => candle_core::bail!("parameter {name} not found"),
        }
    }

    fn contains_tensor(&self, name: &str) -> bool {
        let inner = self.inner.lock().expect("param store lock");
        inner.vars.iter().any(|(n, _)| n == name)
    }
}
