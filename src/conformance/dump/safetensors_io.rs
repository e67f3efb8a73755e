//! The safetensors form of a dump: read (bounded, never panicking on any bytes) and write.

use super::data::RawTensor;
use super::parts::file_err;
use super::parts::{decode, elem_size};
use crate::Result;
use candle_core::DType;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Largest safetensors header read before the tensors (the JSON of names, shapes and offsets):
/// 100 MB, the safetensors crate's own limit.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Checks a safetensors file's header against its length and the limits before anything else
/// is read (issue 47): every tensor's declared shape and offsets must fit in the file, and the
/// tensors widened to f64 (how the loader holds them) must fit in
/// [`crate::limits::MAX_VALIDATION_BYTES`]. A hostile header declaring a huge tensor is refused
/// in one line naming the tensor, having read at most the header. Returns the file's length.
pub fn check_header(path: &Path) -> Result<u64> {
    use std::io::Read;
    let err = |r: String| file_err(path, r);
    let (file, len) = crate::limits::open_regular(path, crate::limits::MAX_DUMP_BYTES)?;
    let mut file = file.take(8 + MAX_HEADER_BYTES);
    let mut n8 = [0u8; 8];
    file.read_exact(&mut n8).map_err(|_| {
        err(format!("not a readable safetensors file: {len} bytes, shorter than the 8-byte header length"))
    })?;
    let n = u64::from_le_bytes(n8);
    if n > MAX_HEADER_BYTES || n > len - 8 {
        return Err(err(format!(
            "not a readable safetensors file: header length: declares {n} bytes, the file holds {} after it (limit {MAX_HEADER_BYTES})",
            len - 8
        )));
    }
    let mut header = vec![0u8; n as usize];
    file.read_exact(&mut header).map_err(|e| err(format!("header: {e}")))?;
    let json: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&header)
        .map_err(|e| err(format!("not a readable safetensors file: header is not a JSON object: {e}")))?;
    let data_len = len - 8 - n;
    let mut widened: u64 = 0;
    for (name, v) in &json {
        if name == "__metadata__" {
            continue;
        }
        let shape: Option<Vec<u64>> =
            v.get("shape").and_then(|s| s.as_array()).and_then(|a| a.iter().map(|x| x.as_u64()).collect());
        let offsets: Option<Vec<u64>> =
            v.get("data_offsets").and_then(|s| s.as_array()).and_then(|a| a.iter().map(|x| x.as_u64()).collect());
        let (Some(shape), Some(offsets)) = (shape, offsets) else {
            return Err(err(format!(
                "not a readable safetensors file: tensor {name}: the header has no shape or data_offsets of integers"
            )));
        };
        let count = shape.iter().try_fold(1u64, |a, &s| a.checked_mul(s));
        let [start, end] = offsets[..] else {
            return Err(err(format!(
                "not a readable safetensors file: tensor {name}: data_offsets must be [start, end], got {offsets:?}"
            )));
        };
        if start > end || end > data_len {
            return Err(err(format!(
                "not a readable safetensors file: tensor {name}: data_offsets [{start}, {end}] lie outside the {data_len} bytes of data the file holds \
                 (truncated, or a hostile header)"
            )));
        }
        let Some(count) = count.filter(|&c| c <= data_len) else {
            return Err(err(format!(
                "not a readable safetensors file: tensor {name}: shape {shape:?} declares more elements than the file's {data_len} bytes of data hold"
            )));
        };
        widened = widened.saturating_add(count.saturating_mul(8));
    }
    if widened > crate::limits::MAX_VALIDATION_BYTES {
        return Err(err(format!(
            "tensors: {widened} bytes widened to f64, above the limit of {} (MAX_VALIDATION_BYTES)",
            crate::limits::MAX_VALIDATION_BYTES
        )));
    }
    Ok(len)
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

/// Writes raw tensors and metadata as a safetensors file (atomically: a full disk leaves no
/// half-written dump and no temporary file).
pub fn write_safetensors(
    path: &Path,
    meta: &HashMap<String, String>,
    tensors: &BTreeMap<String, RawTensor>,
) -> Result<()> {
    let bytes = safetensors_bytes(meta, tensors).map_err(|r| file_err(path, r))?;
    crate::run_dir::atomic_write(path, &bytes)
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
