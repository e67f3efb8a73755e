//! [`Dump::load`] and [`Dump::save`]: a dump from a safetensors file or an `.npy` folder, and
//! back, through its metadata map and named tensors ([`Dump::to_parts`]).

use super::data::{Dump, RawTensor, Run, FORMAT_VERSION};
use super::dtype::{dtype_name, round_to};
use super::npy::read_npy_dir;
use super::safetensors_io::{self, read_safetensors, write_safetensors};
use crate::kernel::params::ParamLayout;
use crate::Result;
use candle_core::DType;
use ndarray::ArrayD;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

impl Dump {
    /// Loads a dump: a `.safetensors` file, or a folder of `.npy` files with `metadata.json`.
    /// `dtype_override` (the CLI's `--dtype`) sets the compute dtype when the kernel computed in
    /// a lower precision than it stored.
    pub fn load(path: &Path, dtype_override: Option<DType>) -> Result<Self> {
        if path.is_dir() {
            let (meta, tensors) = read_npy_dir(path)?;
            return Dump::from_parts(path, &meta, tensors, dtype_override);
        }
        // The header's declared sizes against the file and the limits first (issue 47): nothing
        // is read or widened for a tensor the file cannot hold.
        safetensors_io::check_header(path)?;
        let bytes = crate::limits::read_file(path, crate::limits::MAX_DUMP_BYTES)?;
        Dump::from_safetensors_bytes(path, &bytes, dtype_override)
    }

    /// Parses safetensors bytes (`path` only labels errors). Never panics.
    pub fn from_safetensors_bytes(path: &Path, bytes: &[u8], dtype_override: Option<DType>) -> Result<Self> {
        let (meta, tensors) = read_safetensors(path, bytes)?;
        Dump::from_parts(path, &meta, tensors, dtype_override)
    }

    /// Writes the dump as safetensors, every tensor stored in the dump's dtype (in f32 when it
    /// has a cache format: the decoded entries are exact there, not in bf16).
    pub fn save(&self, path: &Path) -> Result<()> {
        let (meta, tensors) = self.to_parts();
        write_safetensors(path, &meta, &tensors)
    }

    /// The metadata map and raw tensors of this dump (values rounded to the dump's dtype).
    pub fn to_parts(&self) -> (HashMap<String, String>, BTreeMap<String, RawTensor>) {
        let mut meta = HashMap::new();
        meta.insert("phasekv.format".to_string(), FORMAT_VERSION.to_string());
        // The offset is the run's, not the kernel's: the spec is named as at position 0.
        let p0 = self.spec.position_offset();
        let spec = self.spec.at_position_offset(0, 0).expect("offset 0 is always allowed");
        match spec.is_listed() {
            true => meta.insert("preset".to_string(), spec.name.clone()),
            false => meta.insert("spec".to_string(), serde_json::to_string(&spec).expect("spec serialises")),
        };
        if p0 > 0 {
            meta.insert("position_offset".to_string(), p0.to_string());
        }
        meta.insert("d_model".to_string(), self.dims.d_model.to_string());
        meta.insert("d_head".to_string(), self.dims.d_head.to_string());
        meta.insert("dtype".to_string(), dtype_name(self.dtype).to_string());
        meta.insert("deterministic".to_string(), self.deterministic.to_string());
        if let Some(f) = &self.cache_format {
            meta.insert("cache_format".to_string(), serde_json::to_string(f).expect("format serialises"));
        }
        let mut out = BTreeMap::new();
        let dtype = if self.cache_format.is_some() { DType::F32 } else { self.dtype };
        let mut put = |name: String, shape: Vec<usize>, data: Vec<f64>| {
            out.insert(name, RawTensor { dtype, shape, data: data.into_iter().map(|v| round_to(dtype, v)).collect() });
        };
        let layout = ParamLayout::of(&self.spec, self.dims);
        let flat = self.params.to_flat();
        let mut at = 0;
        for (name, shape) in &layout.pieces {
            let n: usize = shape.iter().product();
            put(name.to_string(), shape.clone(), flat[at..at + n].to_vec());
            at += n;
        }
        let batched = self.batched;
        let mut put_run = |prefix: &str, r: &Run| {
            let squeeze = |a: ArrayD<f64>| -> (Vec<usize>, Vec<f64>) {
                let mut shape = a.shape().to_vec();
                if !batched {
                    shape.remove(0);
                }
                (shape, a.iter().copied().collect())
            };
            let mut one = |name: &str, a: Option<ArrayD<f64>>| {
                if let Some(a) = a {
                    let (s, d) = squeeze(a);
                    put(format!("{prefix}{name}"), s, d);
                }
            };
            one("input", Some(r.input.clone().into_dyn()));
            one("keys", Some(r.keys.clone().into_dyn()));
            one("values", r.values.clone().map(|a| a.into_dyn()));
            one("pooled_keys", r.pooled_keys.clone().map(|a| a.into_dyn()));
            one("pooled_values", r.pooled_values.clone().map(|a| a.into_dyn()));
            one("gate_k", r.gate_k.clone().map(|a| a.into_dyn()));
            one("gate_v", r.gate_v.clone().map(|a| a.into_dyn()));
        };
        put_run("", &self.main);
        if let Some(r) = &self.shifted {
            put_run("shifted.", r);
        }
        if let Some((r, t)) = &self.perturbed {
            put_run("perturbed.", r);
            meta.insert("perturbed.token".to_string(), t.to_string());
        }
        (meta, out)
    }
}
