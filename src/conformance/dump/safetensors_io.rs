//! The safetensors form of a dump: read (bounded, never panicking on any bytes) and write.

use super::parts::{decode, elem_size};
use super::{file_err, RawTensor};
use crate::Result;
use candle_core::DType;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

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
