//! Dumps of a kernel that lives elsewhere (PyTorch, Triton, CUDA): the format, its loader and
//! writer. The format is documented in `theory/dump-format.md`; in brief:
//!
//! - a safetensors file whose `__metadata__` holds `phasekv.format` (= `1`), `preset` (a preset
//!   name) or `spec` (a JSON [`KernelSpec`]), `d_model`, `d_head`, `dtype` (`f64`, `f32`, `f16`,
//!   `bf16`), optionally `deterministic` (`true`/`false`, default `true`) and `perturbed.token`;
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

use crate::kernel::params::{KernelParams, ParamLayout};
use crate::kernel::spec::{KernelDims, KernelSpec};
use crate::{Error, Result};
use candle_core::DType;
use ndarray::{Array2, Array3, Array4, ArrayD};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

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
        let bytes = crate::limits::read_file(path, crate::limits::MAX_DUMP_BYTES)?;
        Dump::from_safetensors_bytes(path, &bytes, dtype_override)
    }

    /// Parses safetensors bytes (`path` only labels errors). Never panics.
    pub fn from_safetensors_bytes(path: &Path, bytes: &[u8], dtype_override: Option<DType>) -> Result<Self> {
        let (meta, tensors) = read_safetensors(path, bytes)?;
        Dump::from_parts(path, &meta, tensors, dtype_override)
    }

    /// Builds and validates a dump from its metadata map and raw tensors.
    pub fn from_parts(
        path: &Path,
        meta: &HashMap<String, String>,
        mut tensors: BTreeMap<String, RawTensor>,
        dtype_override: Option<DType>,
    ) -> Result<Self> {
        let err = |r: String| file_err(path, r);
        match meta.get("phasekv.format").map(String::as_str) {
            Some(FORMAT_VERSION) => {}
            Some(v) => return Err(err(format!("metadata phasekv.format is '{v}'; this build reads version 1"))),
            None => {
                return Err(err(
                    "metadata phasekv.format is missing (not a phasekv dump? see theory/dump-format.md)".into()
                ))
            }
        }
        let spec = match (meta.get("preset"), meta.get("spec")) {
            (Some(_), Some(_)) => return Err(err("metadata has both preset and spec; give one".into())),
            (None, None) => return Err(err("metadata needs preset (a name) or spec (JSON knobs)".into())),
            (Some(p), None) => KernelSpec::preset(p).map_err(|e| err(format!("metadata preset: {e}")))?,
            (None, Some(s)) => spec_from_json(s).map_err(|r| err(format!("metadata spec: {r}")))?,
        };
        let dim = |key: &str| -> Result<usize> {
            let v = meta.get(key).ok_or_else(|| err(format!("metadata {key} is missing")))?;
            let n: usize =
                v.trim().parse().map_err(|_| err(format!("metadata {key} = '{v}' is not a positive integer")))?;
            if n == 0 || n > MAX_DIM {
                return Err(err(format!("metadata {key} = {n} is outside 1..={MAX_DIM}")));
            }
            Ok(n)
        };
        let dims = KernelDims::new(dim("d_model")?, dim("d_head")?)?;
        let storage = tensors.get("keys").map(|t| t.dtype);
        let meta_dtype = match meta.get("dtype") {
            Some(s) => {
                Some(parse_dtype(s).ok_or_else(|| err(format!("metadata dtype '{s}' is not f64, f32, f16 or bf16")))?)
            }
            None => None,
        };
        // Every float tensor shares one storage dtype.
        let mut store: Option<(DType, String)> = None;
        for (name, t) in &tensors {
            match &store {
                None => store = Some((t.dtype, name.clone())),
                Some((d, first)) if *d != t.dtype => {
                    return Err(err(format!(
                        "tensor {name} is stored as {} but {first} as {}: every tensor must share one dtype",
                        dtype_name(t.dtype),
                        dtype_name(*d)
                    )))
                }
                _ => {}
            }
        }
        let dtype = match (dtype_override, meta_dtype, storage) {
            (Some(d), _, _) => d,
            (None, Some(m), Some(s)) if m != s => {
                return Err(err(format!(
                    "metadata dtype is {} but the tensors are stored as {} (pass --dtype to validate a kernel \
                     that computes below its storage precision)",
                    dtype_name(m),
                    dtype_name(s)
                )))
            }
            (None, Some(m), _) => m,
            (None, None, Some(s)) => s,
            (None, None, None) => DType::F64,
        };
        let deterministic = match meta.get("deterministic").map(String::as_str) {
            None | Some("true") => true,
            Some("false") => false,
            Some(v) => return Err(err(format!("metadata deterministic = '{v}'; expected true or false"))),
        };
        // NaN or infinity in the inputs or parameters makes the dump unusable; in the kernel's
        // outputs it is a failed kernel, reported by validation (`finite outputs`).
        for (name, t) in &tensors {
            let base = name.rsplit('.').next().unwrap_or(name);
            let output = matches!(base, "keys" | "values" | "pooled_keys" | "pooled_values" | "gate_k" | "gate_v")
                && (name == base || name.starts_with("shifted.") || name.starts_with("perturbed."));
            if output {
                continue;
            }
            if let Some(k) = t.data.iter().position(|v| !v.is_finite()) {
                return Err(err(format!("tensor {name} contains {} at flat index {k}", t.data[k])));
            }
        }
        // Parameters by layout name.
        let layout = ParamLayout::of(&spec, dims);
        let mut flat = Vec::new();
        for (name, shape) in &layout.pieces {
            let t = tensors.remove(*name).ok_or_else(|| {
                err(format!(
                    "parameter tensor {name} {shape:?} is missing (the spec {} needs {})",
                    spec.name,
                    layout.pieces.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
                ))
            })?;
            if &t.shape != shape {
                return Err(err(format!(
                    "parameter tensor {name} has shape {:?}, the spec {} with metadata d_model = {}, d_head = {} \
                     needs {shape:?}",
                    t.shape, spec.name, dims.d_model, dims.d_head
                )));
            }
            flat.extend(t.data);
        }
        let params = KernelParams::from_flat(&spec, dims, &flat).map_err(|e| err(e.to_string()))?;
        params.validate(&spec, dims).map_err(|e| err(e.to_string()))?;

        let batched = match tensors.get("input") {
            Some(t) => t.shape.len() == 3,
            None => return Err(err("tensor input is missing".into())),
        };
        let main = take_run(path, &mut tensors, "", &spec, dims, batched)?;
        let shifted = if tensors.contains_key("shifted.input") {
            let run = take_run(path, &mut tensors, "shifted.", &spec, dims, batched)?;
            let s = spec.geometry.stride();
            if run.batch() != main.batch() || run.tokens() != main.tokens() + s {
                return Err(err(format!(
                    "tensor shifted.input has {} sequences of {} tokens; K3 needs {} of {} (the input with S = {s} \
                     tokens prepended)",
                    run.batch(),
                    run.tokens(),
                    main.batch(),
                    main.tokens() + s
                )));
            }
            let tail = run.input.slice(ndarray::s![.., s.., ..]);
            if tail != main.input {
                return Err(err(format!("tensor shifted.input: tokens {s}.. are not the main input")));
            }
            Some(run)
        } else {
            None
        };
        let perturbed = if tensors.contains_key("perturbed.input") {
            let run = take_run(path, &mut tensors, "perturbed.", &spec, dims, batched)?;
            let v = meta.get("perturbed.token").ok_or_else(|| {
                err("tensor perturbed.input is present but metadata perturbed.token is missing".into())
            })?;
            let t: usize =
                v.trim().parse().map_err(|_| err(format!("metadata perturbed.token = '{v}' is not a token index")))?;
            if run.input.shape() != main.input.shape() {
                return Err(err(format!(
                    "tensor perturbed.input has shape {:?}, the main input {:?}",
                    run.input.shape(),
                    main.input.shape()
                )));
            }
            if t >= main.tokens() {
                return Err(err(format!("metadata perturbed.token = {t} but the input has {} tokens", main.tokens())));
            }
            for b in 0..main.batch() {
                for u in 0..main.tokens() {
                    if u != t && run.input.slice(ndarray::s![b, u, ..]) != main.input.slice(ndarray::s![b, u, ..]) {
                        return Err(err(format!(
                            "tensor perturbed.input differs from input at token {u} (sequence {b}), but metadata \
                             perturbed.token = {t}"
                        )));
                    }
                }
            }
            Some((run, t))
        } else {
            if meta.contains_key("perturbed.token") {
                return Err(err("metadata perturbed.token is set but tensor perturbed.input is missing".into()));
            }
            None
        };
        if let Some(name) = tensors.keys().next() {
            return Err(err(format!(
                "unknown tensor {name} (not an input, output, extra run or parameter of {}; see theory/dump-format.md)",
                spec.name
            )));
        }
        Ok(Dump { spec, dims, dtype, deterministic, params, main, shifted, perturbed, batched })
    }

    /// Writes the dump as safetensors, every tensor stored in the dump's dtype.
    pub fn save(&self, path: &Path) -> Result<()> {
        let (meta, tensors) = self.to_parts();
        write_safetensors(path, &meta, &tensors)
    }

    /// The metadata map and raw tensors of this dump (values rounded to the dump's dtype).
    pub fn to_parts(&self) -> (HashMap<String, String>, BTreeMap<String, RawTensor>) {
        let mut meta = HashMap::new();
        meta.insert("phasekv.format".to_string(), FORMAT_VERSION.to_string());
        match KernelSpec::preset(&self.spec.name) {
            Ok(p) if p == self.spec => meta.insert("preset".to_string(), self.spec.name.clone()),
            _ => meta.insert("spec".to_string(), serde_json::to_string(&self.spec).expect("spec serialises")),
        };
        meta.insert("d_model".to_string(), self.dims.d_model.to_string());
        meta.insert("d_head".to_string(), self.dims.d_head.to_string());
        meta.insert("dtype".to_string(), dtype_name(self.dtype).to_string());
        meta.insert("deterministic".to_string(), self.deterministic.to_string());
        let mut out = BTreeMap::new();
        let dtype = self.dtype;
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

/// A spec from JSON ([`KernelSpec::from_json`]), with windows capped at the dump format's size
/// limit.
fn spec_from_json(s: &str) -> std::result::Result<KernelSpec, String> {
    let spec = KernelSpec::from_json(s).map_err(|e| e.to_string())?;
    if spec.geometry.window() > MAX_DIM {
        return Err(format!("window {} is above {MAX_DIM}", spec.geometry.window()));
    }
    Ok(spec)
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

/// Takes the tensors of one run (`prefix` is `""`, `shifted.` or `perturbed.`) and checks their
/// shapes against the spec and each other.
fn take_run(
    path: &Path,
    tensors: &mut BTreeMap<String, RawTensor>,
    prefix: &str,
    spec: &KernelSpec,
    dims: KernelDims,
    batched: bool,
) -> Result<Run> {
    let err = |r: String| file_err(path, r);
    let rank_word = if batched { "[B, T, d]" } else { "[T, d]" };
    let input_name = format!("{prefix}input");
    let input = tensors.remove(&input_name).ok_or_else(|| err(format!("tensor {input_name} is missing")))?;
    let input = to3(path, &input_name, input, batched, rank_word)?;
    let (b, t_len, d) = input.dim();
    if d != dims.d_model {
        return Err(err(format!("tensor {input_name} has width {d} but metadata d_model = {}", dims.d_model)));
    }
    if b == 0 {
        return Err(err(format!("tensor {input_name} has no sequences")));
    }
    if t_len > MAX_DIM {
        return Err(err(format!("tensor {input_name} has {t_len} tokens, above {MAX_DIM}")));
    }
    let mut out3 = |name: &str, required: bool| -> Result<Option<Array3<f64>>> {
        let full = format!("{prefix}{name}");
        let Some(raw) = tensors.remove(&full) else {
            return if required { Err(err(format!("tensor {full} is missing"))) } else { Ok(None) };
        };
        let a = to3(path, &full, raw, batched, if batched { "[B, n, d_h]" } else { "[n, d_h]" })?;
        if a.shape()[0] != b || a.shape()[2] != dims.d_head {
            return Err(err(format!(
                "tensor {full} has shape {:?}, expected [{b}, n, {}] (batch of input, metadata d_head)",
                a.shape(),
                dims.d_head
            )));
        }
        Ok(Some(a))
    };
    let keys = out3("keys", true)?.expect("required");
    let values = out3("values", !spec.shared_kv)?;
    let pooled_keys = out3("pooled_keys", false)?;
    let pooled_values = out3("pooled_values", false)?;
    let n = keys.shape()[1];
    for (name, a) in [("values", &values), ("pooled_keys", &pooled_keys), ("pooled_values", &pooled_values)] {
        if let Some(a) = a {
            if a.shape()[1] != n {
                return Err(err(format!(
                    "tensor {prefix}{name} has {} entries but {prefix}keys has {n}",
                    a.shape()[1]
                )));
            }
        }
    }
    let w = spec.geometry.window();
    let c = spec.gate_width(dims.d_head).max(1);
    let mut gate = |name: &str| -> Result<Option<Array4<f64>>> {
        let full = format!("{prefix}{name}");
        let Some(raw) = tensors.remove(&full) else { return Ok(None) };
        let want: Vec<usize> = if batched { vec![b, n, w, c] } else { vec![n, w, c] };
        if raw.shape != want {
            return Err(err(format!(
                "tensor {full} has shape {:?}, expected {want:?} (entries, W, gate width)",
                raw.shape
            )));
        }
        let a = Array4::from_shape_vec((b, n, w, c), raw.data).map_err(|e| err(format!("tensor {full}: {e}")))?;
        Ok(Some(a))
    };
    let gate_k = gate("gate_k")?;
    let gate_v = gate("gate_v")?;
    Ok(Run { input, keys, values, pooled_keys, pooled_values, gate_k, gate_v })
}

fn to3(path: &Path, name: &str, raw: RawTensor, batched: bool, want: &str) -> Result<Array3<f64>> {
    let shape = match (batched, raw.shape.as_slice()) {
        (true, &[a, b, c]) => (a, b, c),
        (false, &[b, c]) => (1, b, c),
        _ => {
            return Err(file_err(
                path,
                format!("tensor {name} has shape {:?}, expected {want} (input's rank decides batching)", raw.shape),
            ))
        }
    };
    Array3::from_shape_vec(shape, raw.data).map_err(|e| file_err(path, format!("tensor {name}: {e}")))
}

fn decode(dtype: DType, bytes: &[u8]) -> Option<Vec<f64>> {
    Some(match dtype {
        DType::F64 => bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect(),
        DType::F32 => {
            bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")) as f64).collect()
        }
        DType::F16 => bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
        DType::BF16 => bytes.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
        _ => return None,
    })
}

fn elem_size(dtype: DType) -> usize {
    match dtype {
        DType::F64 => 8,
        DType::F32 => 4,
        _ => 2,
    }
}

/// Reads the metadata and every tensor of a safetensors buffer.
pub fn read_safetensors(path: &Path, bytes: &[u8]) -> Result<(HashMap<String, String>, BTreeMap<String, RawTensor>)> {
    use safetensors::tensor::{Dtype, SafeTensors};
    let err = |r: String| file_err(path, r);
    let (_, header) =
        SafeTensors::read_metadata(bytes).map_err(|e| err(format!("not a readable safetensors file: {e}")))?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| err(format!("not a readable safetensors file: {e}")))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let mut out = BTreeMap::new();
    for (name, view) in st.tensors() {
        let dtype = match view.dtype() {
            Dtype::F64 => DType::F64,
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            other => return Err(err(format!("tensor {name} has dtype {other:?}; a dump holds f64, f32, f16 or bf16"))),
        };
        let count = view.shape().iter().try_fold(1usize, |a, &s| a.checked_mul(s));
        if count.and_then(|c| c.checked_mul(elem_size(dtype))) != Some(view.data().len()) {
            return Err(err(format!("tensor {name}: shape {:?} does not match its data length", view.shape())));
        }
        let data = decode(dtype, view.data()).ok_or_else(|| err(format!("tensor {name}: unsupported dtype")))?;
        out.insert(name, RawTensor { dtype, shape: view.shape().to_vec(), data });
    }
    Ok((meta, out))
}

/// Writes raw tensors and metadata as a safetensors file.
pub fn write_safetensors(
    path: &Path,
    meta: &HashMap<String, String>,
    tensors: &BTreeMap<String, RawTensor>,
) -> Result<()> {
    let bytes = safetensors_bytes(meta, tensors).map_err(|r| file_err(path, r))?;
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

/// Serialises raw tensors and metadata to safetensors bytes.
pub fn safetensors_bytes(
    meta: &HashMap<String, String>,
    tensors: &BTreeMap<String, RawTensor>,
) -> std::result::Result<Vec<u8>, String> {
    use safetensors::tensor::{Dtype, TensorView};
    let encoded: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, t)| {
            let (dt, bytes): (Dtype, Vec<u8>) = match t.dtype {
                DType::F64 => (Dtype::F64, t.data.iter().flat_map(|v| v.to_le_bytes()).collect()),
                DType::F16 => (Dtype::F16, t.data.iter().flat_map(|&v| half::f16::from_f64(v).to_le_bytes()).collect()),
                DType::BF16 => {
                    (Dtype::BF16, t.data.iter().flat_map(|&v| half::bf16::from_f64(v).to_le_bytes()).collect())
                }
                _ => (Dtype::F32, t.data.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect()),
            };
            (name.clone(), dt, t.shape.clone(), bytes)
        })
        .collect();
    let views: Vec<(String, TensorView)> = encoded
        .iter()
        .map(|(n, dt, s, b)| TensorView::new(*dt, s.clone(), b).map(|v| (n.clone(), v)).map_err(|e| e.to_string()))
        .collect::<std::result::Result<_, _>>()?;
    safetensors::tensor::serialize(views, Some(meta.clone())).map_err(|e| e.to_string())
}

/// Parses one `.npy` file (little-endian `<f8`, `<f4`, `<f2`, C order). Never panics.
pub fn parse_npy(name: &str, bytes: &[u8]) -> std::result::Result<RawTensor, String> {
    let bad = |r: &str| format!("tensor {name}: {r}");
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("not an .npy file (bad magic)"));
    }
    let (hlen, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(bad(&format!("unsupported .npy version {v}"))),
    };
    let header = bytes.get(start..start.saturating_add(hlen)).ok_or_else(|| bad("truncated .npy header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad("the .npy header is not text"))?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = field("descr").ok_or_else(|| bad("the .npy header has no descr"))?;
    let dtype = if descr.starts_with("'<f8'") {
        DType::F64
    } else if descr.starts_with("'<f4'") {
        DType::F32
    } else if descr.starts_with("'<f2'") {
        DType::F16
    } else {
        return Err(bad(&format!(
            "dtype {} is not little-endian float (<f8, <f4, <f2)",
            descr.split(',').next().unwrap_or("")
        )));
    };
    if field("fortran_order").is_some_and(|f| f.starts_with("True")) {
        return Err(bad("Fortran-ordered arrays are not supported; save with np.ascontiguousarray"));
    }
    let shape_txt = field("shape").ok_or_else(|| bad("the .npy header has no shape"))?;
    let inner = shape_txt
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("the .npy shape is not a tuple"))?;
    let shape: Vec<usize> = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| bad(&format!("shape entry '{s}' is not a size"))))
        .collect::<std::result::Result<_, _>>()?;
    let data = &bytes[start + hlen..];
    let count = shape.iter().try_fold(1usize, |a, &s| a.checked_mul(s)).and_then(|c| c.checked_mul(elem_size(dtype)));
    if count != Some(data.len()) {
        return Err(bad(&format!("shape {shape:?} does not match the {} data bytes (truncated?)", data.len())));
    }
    let data = decode(dtype, data).ok_or_else(|| bad("unsupported dtype"))?;
    Ok(RawTensor { dtype, shape, data })
}

/// Reads a folder of `.npy` files and its `metadata.json` (a JSON object of strings).
pub fn read_npy_dir(dir: &Path) -> Result<(HashMap<String, String>, BTreeMap<String, RawTensor>)> {
    let meta_path = dir.join("metadata.json");
    let text = crate::limits::read_text(&meta_path, crate::limits::MAX_JSON_BYTES)?;
    let meta: HashMap<String, String> =
        serde_json::from_str(&text).map_err(|e| file_err(&meta_path, format!("not a JSON object of strings: {e}")))?;
    let mut out = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let p: PathBuf = entry.path();
        let Some(name) =
            p.file_name().and_then(|n| n.to_str()).filter(|n| !n.starts_with('.')).and_then(|n| n.strip_suffix(".npy"))
        else {
            continue;
        };
        let bytes = crate::limits::read_file(&p, crate::limits::MAX_DUMP_BYTES)?;
        out.insert(name.to_string(), parse_npy(name, &bytes).map_err(|r| file_err(&p, r))?);
    }
    Ok((meta, out))
}

/// Writes a dump as a folder of `.npy` files plus `metadata.json` (f64, f32 and f16 only: numpy
/// has no bf16).
pub fn write_npy_dir(dir: &Path, dump: &Dump) -> Result<()> {
    let (meta, tensors) = dump.to_parts();
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let meta_path = dir.join("metadata.json");
    std::fs::write(&meta_path, serde_json::to_string_pretty(&meta).expect("map"))
        .map_err(|e| Error::io(&meta_path, e))?;
    for (name, t) in tensors {
        let (descr, bytes): (&str, Vec<u8>) = match t.dtype {
            DType::F64 => ("<f8", t.data.iter().flat_map(|v| v.to_le_bytes()).collect()),
            DType::F32 => ("<f4", t.data.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect()),
            DType::F16 => ("<f2", t.data.iter().flat_map(|&v| half::f16::from_f64(v).to_le_bytes()).collect()),
            _ => return Err(file_err(dir, "numpy has no bf16; write bf16 dumps as safetensors")),
        };
        let shape = match t.shape.len() {
            1 => format!("({},)", t.shape[0]),
            _ => format!("({})", t.shape.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")),
        };
        let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((header.len() as u16).to_le_bytes());
        out.extend(header.as_bytes());
        out.extend(bytes);
        let p = dir.join(format!("{name}.npy"));
        std::fs::write(&p, out).map_err(|e| Error::io(&p, e))?;
    }
    Ok(())
}

/// A dump of the reference itself, computed in `dtype` on inputs and parameters rounded to it
/// (so it passes the tolerance rule by construction): the test suite's known-good dump. `x` is
/// `[B, T, d]`; with `extras`, the shifted run (S tokens prepended, `prepend` gives them) and a
/// perturbed run (token `perturb`, replaced by `prepend`'s first row) are included.
pub fn reference_dump(
    spec: &KernelSpec,
    dims: KernelDims,
    params: &KernelParams<f64>,
    x: &Array3<f64>,
    dtype: DType,
    extras: Option<(&Array2<f64>, usize)>,
) -> Result<Dump> {
    mutant_dump(spec, spec, None, dims, params, x, dtype, extras)
}

/// A known-bad dump for the test suite: the outputs computed by the reference under `computed`
/// (another spec, e.g. the wrong RoPE base) with the planted bug `mutation`, labelled as the
/// kernel `claimed`. `validate` must fail it; [`reference_dump`] is the case `claimed ==
/// computed`, no mutation.
#[allow(clippy::too_many_arguments)]
pub fn mutant_dump(
    claimed: &KernelSpec,
    computed: &KernelSpec,
    mutation: Option<crate::conformance::mutants::Mutant>,
    dims: KernelDims,
    params: &KernelParams<f64>,
    x: &Array3<f64>,
    dtype: DType,
    extras: Option<(&Array2<f64>, usize)>,
) -> Result<Dump> {
    let spec = computed;
    let params = params_rounded(params, dtype);
    let round3 = |a: &Array3<f64>| a.mapv(|v| round_to(dtype, v));
    let x = round3(x);
    let run = |x: &Array3<f64>| -> Result<Run> {
        let (b, _, _) = x.dim();
        let mut outs = Vec::new();
        for s in 0..b {
            let xs = x.index_axis(ndarray::Axis(0), s).to_owned();
            let c =
                crate::conformance::harness::checks::low_reference_mutated(dtype, spec, dims, &params, &xs, mutation)?
                    .ok_or_else(|| Error::invalid("dtype", format!("no reference in {dtype:?}")))?;
            outs.push(c);
        }
        let stack2 = |f: &dyn Fn(&crate::kernel::Compressed<f64>) -> &Array2<f64>| {
            let views: Vec<_> = outs.iter().map(|c| f(c).view()).collect();
            ndarray::stack(ndarray::Axis(0), &views).expect("same shapes")
        };
        let stack3 = |f: &dyn Fn(&crate::kernel::Compressed<f64>) -> &Array3<f64>| {
            let views: Vec<_> = outs.iter().map(|c| f(c).view()).collect();
            ndarray::stack(ndarray::Axis(0), &views).expect("same shapes")
        };
        Ok(Run {
            input: x.clone(),
            keys: stack2(&|c| &c.keys),
            values: (!spec.shared_kv).then(|| stack2(&|c| &c.values)),
            pooled_keys: Some(stack2(&|c| &c.pooled_k)),
            pooled_values: Some(stack2(&|c| &c.pooled_v)),
            gate_k: Some(stack3(&|c| &c.gate_k)),
            gate_v: Some(stack3(&|c| &c.gate_v)),
        })
    };
    let main = run(&x)?;
    let (mut shifted, mut perturbed) = (None, None);
    if let Some((pre, t)) = extras {
        let s = spec.geometry.stride();
        let (b, t_len, d) = x.dim();
        let mut xs = Array3::zeros((b, t_len + s, d));
        for k in 0..b {
            for u in 0..s {
                xs.slice_mut(ndarray::s![k, u, ..]).assign(&pre.row(u % pre.nrows()));
            }
        }
        xs.slice_mut(ndarray::s![.., s.., ..]).assign(&x);
        shifted = Some(run(&round3(&xs))?);
        if t < t_len {
            let mut xp = x.clone();
            for k in 0..b {
                xp.slice_mut(ndarray::s![k, t, ..]).assign(&pre.row(0));
            }
            perturbed = Some((run(&round3(&xp))?, t));
        }
    }
    Ok(Dump {
        spec: claimed.clone(),
        dims,
        dtype,
        deterministic: true,
        params,
        main,
        shifted,
        perturbed,
        batched: true,
    })
}

fn params_rounded(p: &KernelParams<f64>, dtype: DType) -> KernelParams<f64> {
    let mut q = p.clone();
    for g in [&mut q.gate_k, &mut q.gate_v].into_iter().flatten() {
        g.z.mapv_inplace(|v| round_to(dtype, v));
        g.b.mapv_inplace(|v| round_to(dtype, v));
    }
    q.proj_k.mapv_inplace(|v| round_to(dtype, v));
    if let Some(p) = &mut q.proj_v {
        p.mapv_inplace(|v| round_to(dtype, v));
    }
    if let Some(g) = &mut q.gamma {
        g.mapv_inplace(|v| round_to(dtype, v));
    }
    q
}
