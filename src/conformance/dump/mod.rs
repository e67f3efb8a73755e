//! Dumps of a kernel that lives elsewhere (PyTorch, Triton, CUDA): the format, its loader and
//! writer. The format is documented in `theory/dump-format.md`; in brief:
//!
//! - a safetensors file whose `__metadata__` holds `phasekv.format` (= `1`), `preset` (a preset
//!   name) or `spec` (a JSON [`KernelSpec`]), `d_model`, `d_head`, `dtype` (`f64`, `f32`, `f16`,
//!   `bf16`), optionally `deterministic` (`true`/`false`, default `true`), `perturbed.token` and
//!   `cache_format` (a [`CacheFormat`]: the entries were stored quantized, decoded in the dump),
//!   `position_offset` (`p0`: token `t` at RoPE position `p0 + t`, default 0);
//! - tensors `input` `[T, d]` or `[B, T, d]`, the parameters under their [`ParamLayout`] names,
//!   the outputs `keys` (and `values` unless `shared_kv`), optionally `pooled_keys`,
//!   `pooled_values` `[B, n, d_h]` and `gate_k`, `gate_v` `[B, n, W, c]`; extra runs under the
//!   prefixes `shifted.` (input with `S` tokens prepended, for K3) and `perturbed.` (one token
//!   changed, for K2).
//!
//! A folder of `.npy` files (one per tensor, named `<tensor>.npy`) with the metadata map in
//! `metadata.json` is the second accepted form.
//!
//! The loader never panics on any bytes: every problem is one [`Error::File`] naming the file
//! and the tensor or field.

mod npy;
mod parts;
mod safetensors_io;

pub use npy::{parse_npy, read_npy_dir, write_npy_dir};
pub use parts::METADATA_KEYS;
pub use safetensors_io::{read_safetensors, safetensors_bytes, write_safetensors};

use crate::kernel::params::{KernelParams, ParamLayout};
use crate::kernel::spec::{KernelDims, KernelSpec};
use crate::numeric::formats::CacheFormat;
use crate::{Error, Result};
use candle_core::DType;
use ndarray::{Array3, Array4, ArrayD};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The format version this build reads and writes.
pub const FORMAT_VERSION: &str = "1";

/// Largest window, token count or width the loader accepts (a guard against absurd metadata,
/// far above any real kernel).
const MAX_DIM: usize = 1 << 20;

/// One run of the kernel: its input and what it produced, in f64 with a batch axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// Input hidden states `[B, T, d]`.
    pub input: Array3<f64>,
    /// Post-processed keys `[B, n, d_h]`.
    pub keys: Array3<f64>,
    /// Post-processed values `[B, n, d_h]` (`None` when `shared_kv`: the keys serve).
    pub values: Option<Array3<f64>>,
    /// Pooled keys before post-processing, if dumped.
    pub pooled_keys: Option<Array3<f64>>,
    /// Pooled values before post-processing, if dumped.
    pub pooled_values: Option<Array3<f64>>,
    /// Key gate weights `[B, n, W, c]`, if dumped.
    pub gate_k: Option<Array4<f64>>,
    /// Value gate weights `[B, n, W, c]`, if dumped.
    pub gate_v: Option<Array4<f64>>,
}

impl Run {
    /// Batch size `B`.
    pub fn batch(&self) -> usize {
        self.input.shape()[0]
    }

    /// Sequence length `T`.
    pub fn tokens(&self) -> usize {
        self.input.shape()[1]
    }

    /// Number of entries the kernel produced.
    pub fn entries(&self) -> usize {
        self.keys.shape()[1]
    }

    /// The values, or the keys for `shared_kv` kernels.
    pub fn values_or_keys(&self) -> &Array3<f64> {
        self.values.as_ref().unwrap_or(&self.keys)
    }
}

/// A loaded, validated dump.
#[derive(Clone, Debug, PartialEq)]
pub struct Dump {
    /// The kernel spec (from `preset` or `spec`).
    pub spec: KernelSpec,
    /// Model and head widths.
    pub dims: KernelDims,
    /// The dtype the kernel computed in (the tolerance rule's dtype).
    pub dtype: DType,
    /// Whether the kernel is deterministic (K2 is then bit for bit).
    pub deterministic: bool,
    /// The parameters of the head.
    pub params: KernelParams<f64>,
    /// The main run.
    pub main: Run,
    /// The run on the input with `S` tokens prepended (K3), if dumped.
    pub shifted: Option<Run>,
    /// The run with one token perturbed and that token's index (K2), if dumped.
    pub perturbed: Option<(Run, usize)>,
    /// Whether `input` had a batch axis in the file (so a re-save keeps the rank).
    pub batched: bool,
    /// The quantized format the kernel stored its cache entries (`keys`, `values`) in, decoded
    /// back to floats in the dump (`None`: plain `dtype`); metadata `cache_format`.
    pub cache_format: Option<CacheFormat>,
}

/// One raw tensor: storage dtype, shape, values widened to f64.
#[derive(Clone, Debug, PartialEq)]
pub struct RawTensor {
    /// Storage dtype.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Values in row-major order.
    pub data: Vec<f64>,
}

/// Parses a dtype name (`f64`, `f32`, `f16`, `bf16`).
pub fn parse_dtype(s: &str) -> Option<DType> {
    match s.to_ascii_lowercase().as_str() {
        "f64" | "float64" => Some(DType::F64),
        "f32" | "float32" => Some(DType::F32),
        "f16" | "float16" => Some(DType::F16),
        "bf16" | "bfloat16" => Some(DType::BF16),
        _ => None,
    }
}

/// The name of a float dtype as the format writes it.
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F64 => "f64",
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        _ => "unsupported",
    }
}

fn file_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::File { path: path.to_path_buf(), reason: reason.into() }
}

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

/// Rounds an f64 to a dtype and back.
pub fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F32 => v as f32 as f64,
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        _ => v,
    }
}
