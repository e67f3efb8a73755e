//! The `.npy` folder form of a dump: one `<tensor>.npy` per tensor and `metadata.json`. The
//! `.npy` reader and writer are hand-written (why not `npyz`: `theory/dump-format.md`,
//! "Containers"): little-endian float, C order, never panicking;
//! files are written through [`crate::run_dir::atomic_write`].

use super::data::{Dump, RawTensor};
use super::parts::file_err;
use super::parts::{decode, elem_size};
use crate::{Error, Result};
use candle_core::DType;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

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

/// Reads a folder of `.npy` files and its `metadata.json` (a JSON object of strings; the one
/// structured key, `cache_format`, may also be given as a JSON object, kept as its JSON text).
pub fn read_npy_dir(dir: &Path) -> Result<(HashMap<String, String>, BTreeMap<String, RawTensor>)> {
    let meta_path = dir.join("metadata.json");
    let text = crate::limits::read_text(&meta_path, crate::limits::MAX_JSON_BYTES)?;
    let raw: HashMap<String, serde_json::Value> =
        serde_json::from_str(&text).map_err(|e| file_err(&meta_path, format!("not a JSON object of strings: {e}")))?;
    let mut meta = HashMap::new();
    for (k, v) in raw {
        let s = match v {
            serde_json::Value::String(s) => s,
            serde_json::Value::Object(_) if k == "cache_format" => v.to_string(),
            other => return Err(file_err(&meta_path, format!("metadata {k} is {other}, not a string"))),
        };
        meta.insert(k, s);
    }
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
    crate::run_dir::atomic_write(&meta_path, serde_json::to_string_pretty(&meta).expect("map").as_bytes())?;
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
        crate::run_dir::atomic_write(&p, &out)?;
    }
    Ok(())
}
