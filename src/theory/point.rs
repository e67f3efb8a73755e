//! One point of the oracle class, given by the user (`phasekv theory loss`): gates read from a
//! file, and the population loss (T-4), its gradient (T-5) and the point's classification there.

use super::critical::{classify_point, PointClass};
use super::task::{one_hot_loss, population_loss_grad, OracleGates, TaskParams};
use crate::{Error, Result};
use serde::Serialize;
use std::path::Path;

/// Largest gates file `theory loss` reads.
pub const MAX_GATES_FILE: u64 = 64 << 20;

/// Reads gates for `p` from a JSON file: `{"key": .., "value": ..}` as nested arrays `[H][S]`
/// (static gates, the same in every chunk), `[H][L][S]` or flat in the oracle layout (as
/// `theorem1.json` writes them); every block must be a
/// probability vector (finite, `>= 0`, summing to 1 within 1e-9).
pub fn read_gates(path: &Path, p: &TaskParams) -> Result<OracleGates> {
    let text = crate::limits::read_text(path, MAX_GATES_FILE)?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::invalid("gates", format!("{}: {e}", path.display())))?;
    let (hh, ll, ss) = (p.heads, p.chunks, p.stride);
    let mut g = OracleGates::uniform(p);
    let flat = |x: &serde_json::Value, field: &str| -> Result<Vec<f64>> {
        // Depth 1 (oracle layout, flat), 2 ([H][S]) or 3 ([H][L][S]).
        fn collect(x: &serde_json::Value, out: &mut Vec<f64>, shape: &mut Vec<usize>, depth: usize) -> bool {
            match x {
                serde_json::Value::Array(a) => {
                    if shape.len() <= depth {
                        shape.push(a.len());
                    } else if shape[depth] != a.len() {
                        return false;
                    }
                    a.iter().all(|y| collect(y, out, shape, depth + 1))
                }
                serde_json::Value::Number(n) => n.as_f64().map(|f| out.push(f)).is_some() && shape.len() == depth,
                _ => false,
            }
        }
        let mut out = Vec::new();
        let mut shape = Vec::new();
        if !collect(x, &mut out, &mut shape, 0) {
            return Err(Error::invalid(format!("gates {field}"), "not a rectangular array of numbers"));
        }
        let want_static = vec![hh, ss];
        let want_oracle = vec![hh, ll, ss];
        if shape == want_static {
            Ok((0..hh)
                .flat_map(|h| (0..ll).flat_map(move |_| (0..ss).map(move |r| (h, r))))
                .map(|(h, r)| out[h * ss + r])
                .collect())
        } else if shape == want_oracle || shape == vec![hh * ll * ss] {
            Ok(out)
        } else {
            Err(Error::invalid(
                format!("gates {field}"),
                format!(
                    "shape {shape:?}, expected [H={hh}][S={ss}], [H][L={ll}][S] or a flat array of H*L*S = {}",
                    hh * ll * ss
                ),
            ))
        }
    };
    let key = v.get("key").ok_or_else(|| Error::invalid("gates", format!("{} has no \"key\"", path.display())))?;
    let value =
        v.get("value").ok_or_else(|| Error::invalid("gates", format!("{} has no \"value\"", path.display())))?;
    g.key = flat(key, "key")?;
    g.value = flat(value, "value")?;
    for (field, data) in [("key", &g.key), ("value", &g.value)] {
        for h in 0..hh {
            for l in 0..ll {
                let blk = &data[(h * ll + l) * ss..(h * ll + l + 1) * ss];
                let sum: f64 = blk.iter().sum();
                if blk.iter().any(|x| !x.is_finite() || *x < 0.0) || (sum - 1.0).abs() > 1e-9 {
                    return Err(Error::invalid(
                        format!("gates {field}[head {}][chunk {}]", h + 1, l + 1),
                        format!("{blk:?} is not a probability vector (entries >= 0, sum 1 within 1e-9; sum is {sum})"),
                    ));
                }
            }
        }
    }
    Ok(g)
}

/// The loss, gradient and classification at one point.
#[derive(Debug, Clone, Serialize)]
pub struct PointReport {
    /// Parameters.
    pub params: TaskParams,
    /// `F` at the point.
    pub loss: f64,
    /// `F_1`, the loss of the concentrated vertex.
    pub f1: f64,
    /// `F - F_1`.
    pub loss_minus_f1: f64,
    /// dF/dpK in the oracle layout `(h * L + l) * S + r`.
    pub grad_key: Vec<f64>,
    /// dF/dpV, same layout.
    pub grad_value: Vec<f64>,
    /// The point's classification.
    pub classification: PointClass,
}

/// Evaluates `F`, its gradient and the classification at `g`.
pub fn evaluate(p: &TaskParams, g: &OracleGates) -> Result<PointReport> {
    let (loss, grad_key, grad_value) = population_loss_grad(p, g)?;
    let f1 = one_hot_loss(p)?;
    let classification = classify_point(p, g)?;
    Ok(PointReport { params: *p, loss, f1, loss_minus_f1: loss - f1, grad_key, grad_value, classification })
}
