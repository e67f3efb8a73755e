//! From tensors and metadata to a checked [`Dump`]: every field and shape validated, sizes
//! capped before anything is allocated, one [`Error::File`] line per problem.

use super::data::{Dump, RawTensor, Run, FORMAT_VERSION, MAX_DIM};
use super::dtype::{dtype_name, parse_dtype};
use crate::kernel::params::{KernelParams, ParamLayout};
use crate::kernel::spec::{KernelDims, KernelSpec, Named};
use crate::numeric::formats::CacheFormat;
use crate::{Error, Result};
use candle_core::DType;
use ndarray::{Array3, Array4};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Every metadata key a dump may carry (`theory/dump-format.md`, "Metadata").
pub const METADATA_KEYS: &[&str] = &[
    "phasekv.format",
    "preset",
    "spec",
    "d_model",
    "d_head",
    "dtype",
    "deterministic",
    "perturbed.token",
    "cache_format",
    "position_offset",
];

impl Dump {
    /// Builds and validates a dump from its metadata map and raw tensors.
    pub fn from_parts(
        path: &Path,
        meta: &HashMap<String, String>,
        mut tensors: BTreeMap<String, RawTensor>,
        dtype_override: Option<DType>,
    ) -> Result<Self> {
        let err = |r: String| file_err(path, r);
        // Strict metadata: an unknown key (a typo of `perturbed.token`, a knob the format does
        // not have) is refused, never ignored.
        let mut keys: Vec<&String> = meta.keys().collect();
        keys.sort();
        if let Some(k) = keys.into_iter().find(|k| !METADATA_KEYS.contains(&k.as_str())) {
            return Err(err(format!("unknown metadata key '{k}' (known: {})", METADATA_KEYS.join(", "))));
        }
        match meta.get("phasekv.format").map(String::as_str) {
            Some(FORMAT_VERSION) => {}
            Some(v) => return Err(err(format!("metadata phasekv.format is '{v}'; this build reads version 1"))),
            None => {
                return Err(err(
                    "metadata phasekv.format is missing (not a phasekv dump? see theory/dump-format.md)".into()
                ))
            }
        }
        let spec = KernelSpec::named(meta.get("preset").map(String::as_str), meta.get("spec").map(String::as_str))
            .map_err(|e| match e {
                Named::Both => err("metadata has both preset and spec; give one".into()),
                Named::Neither => err("metadata needs preset (a name) or spec (JSON knobs)".into()),
                Named::Preset(e) => err(format!("metadata preset: {e}")),
                Named::Spec(e) => err(format!("metadata spec: {e}")),
            })?;
        if spec.geometry.window() > MAX_DIM {
            return Err(err(format!("metadata: the kernel's window {} is above {MAX_DIM}", spec.geometry.window())));
        }
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
        let cache_format = match meta.get("cache_format") {
            None => None,
            Some(s) => Some(CacheFormat::from_json(s).map_err(|r| err(format!("metadata cache_format: {r}")))?),
        };
        let dtype = match (dtype_override, meta_dtype, storage) {
            (Some(d), _, _) => d,
            // A quantized cache is stored decoded (exact in f32); `dtype` is what the kernel
            // computed in before encoding, and may be below the storage dtype.
            (None, Some(m), _) if cache_format.is_some() => m,
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
        // The position offset last: its range depends on the longest run (`theory/dump-format.md`,
        // "Position offset"); the rule itself is the spec's (`KernelSpec::at_position_offset`).
        let spec = match meta.get("position_offset") {
            None => spec,
            Some(v) => {
                let p0: usize = v.trim().parse().map_err(|_| {
                    err(format!("metadata position_offset = '{v}' is not a non-negative integer (a token position)"))
                })?;
                let longest = shifted.as_ref().map_or(main.tokens(), |r| r.tokens());
                spec.at_position_offset(p0, longest).map_err(|e| match e {
                    crate::Error::Invalid { reason, .. } => err(format!("metadata position_offset {reason}")),
                    e => err(e.to_string()),
                })?
            }
        };
        if let Some(name) = tensors.keys().next() {
            return Err(err(format!(
                "unknown tensor {name} (not an input, output, extra run or parameter of {}; see theory/dump-format.md)",
                spec.name
            )));
        }
        Ok(Dump { spec, dims, dtype, deterministic, params, main, shifted, perturbed, batched, cache_format })
    }
}

/// A spec from JSON ([`KernelSpec::from_json`]), with windows capped at the dump format's size
/// limit.
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

pub(super) fn decode(dtype: DType, bytes: &[u8]) -> Option<Vec<f64>> {
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

pub(super) fn elem_size(dtype: DType) -> usize {
    match dtype {
        DType::F64 => 8,
        DType::F32 => 4,
        _ => 2,
    }
}

pub(super) fn file_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::File { path: path.to_path_buf(), reason: reason.into() }
}
