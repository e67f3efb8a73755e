//! JSON for an `f64` that may be infinite or NaN (JSON numbers cannot be): finite values as
//! numbers, the others as the strings `"inf"`, `"-inf"`, `"nan"`.

use serde::{Deserialize, Deserializer, Serializer};

/// Serialises `v`.
pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(*v)
    } else if v.is_nan() {
        s.serialize_str("nan")
    } else if *v > 0.0 {
        s.serialize_str("inf")
    } else {
        s.serialize_str("-inf")
    }
}

/// Deserialises what [`serialize`] wrote.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Num(f64),
        Text(String),
    }
    match Repr::deserialize(d)? {
        Repr::Num(x) => Ok(x),
        Repr::Text(t) => match t.as_str() {
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            "nan" => Ok(f64::NAN),
            other => Err(serde::de::Error::custom(format!("expected a number, inf, -inf or nan, got {other:?}"))),
        },
    }
}
