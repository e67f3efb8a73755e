//! The float dtypes of the format: their names, and rounding an f64 to one.

use candle_core::DType;

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

/// Rounds an f64 to a dtype and back.
pub fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F32 => v as f32 as f64,
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        _ => v,
    }
}
