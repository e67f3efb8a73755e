//! Compressed attention, reference form: a query at position `q` attends, in one softmax, to
//! the raw tokens of a short local window `max(0, q-L+1) ..= q` and to every compressed entry
//! visible at `q` ([`crate::geometry::Geometry::is_visible`]). Scores are `q . k / sqrt(d_h)`.
//!
//! This is what the causality invariant (K12) checks, and what the model's tensor attention is
//! compared with.

use crate::geometry::{Geometry, Visibility};
use crate::{Error, Result};
use ndarray::{Array2, ArrayView2};
use num_traits::Float;

/// Raw per-token inputs of one attention head.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionInputs<F> {
    /// Queries `[T, d_h]` (already rotated, if RoPE is used).
    pub queries: Array2<F>,
    /// Raw keys of the local window `[T, d_h]`.
    pub raw_keys: Array2<F>,
    /// Raw values of the local window `[T, d_h]`.
    pub raw_values: Array2<F>,
    /// Local window length `L >= 1` (the query's own token included).
    pub local_window: usize,
}

/// Output `[T, d_h]` and the weight each query puts on each entry `[T, n]`.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionOut<F> {
    /// Attention output per query.
    pub output: Array2<F>,
    /// Weight of every compressed entry for every query (0 where not visible).
    pub entry_weights: Array2<F>,
}

/// Reference compressed attention for one head.
pub fn compressed_attention<F: Float>(
    geometry: &Geometry,
    visibility: Visibility,
    entry_keys: ArrayView2<F>,
    entry_values: ArrayView2<F>,
    inputs: &AttentionInputs<F>,
) -> Result<AttentionOut<F>> {
    compressed_attention_masked(entry_keys, entry_values, inputs, |j, q| geometry.is_visible(j, q, visibility))
}

/// Compressed attention where entry `j` is visible to query `q` when `visible(j, q)`
/// ([`compressed_attention`] passes the geometry's rule).
pub fn compressed_attention_masked<F: Float>(
    entry_keys: ArrayView2<F>,
    entry_values: ArrayView2<F>,
    inputs: &AttentionInputs<F>,
    visible: impl Fn(usize, usize) -> bool,
) -> Result<AttentionOut<F>> {
    let (t_len, dh) = inputs.queries.dim();
    if inputs.local_window == 0 {
        return Err(Error::invalid("local_window", "must be at least 1 (the query's own token), got 0"));
    }
    for (what, a) in [("raw_keys", &inputs.raw_keys), ("raw_values", &inputs.raw_values)] {
        if a.dim() != (t_len, dh) {
            return Err(Error::shape(what, format!("[{t_len}, {dh}]"), format!("{:?}", a.shape())));
        }
    }
    let n = entry_keys.nrows();
    if entry_keys.ncols() != dh || entry_values.dim() != (n, dh) {
        return Err(Error::shape("entries", format!("[{n}, {dh}]"), format!("{:?}", entry_values.shape())));
    }
    let scale = F::one() / F::from(dh).expect("dh").sqrt();
    let mut output = Array2::zeros((t_len, dh));
    let mut entry_weights = Array2::zeros((t_len, n));
    for q in 0..t_len {
        let qv = inputs.queries.row(q);
        let lo = crate::geometry::local_window_start(q, inputs.local_window);
        // (score, source) with source = raw token or entry
        let mut scores: Vec<(F, bool, usize)> = Vec::new();
        for t in lo..=q {
            scores.push((dot(qv, inputs.raw_keys.row(t)) * scale, false, t));
        }
        for j in 0..n {
            if visible(j, q) {
                scores.push((dot(qv, entry_keys.row(j)) * scale, true, j));
            }
        }
        let logits: Vec<F> = scores.iter().map(|s| s.0).collect();
        let mut weights = vec![F::zero(); logits.len()];
        crate::numeric::softmax_into(&logits, &mut weights);
        for (&(_, is_entry, idx), &a) in scores.iter().zip(&weights) {
            let v = if is_entry { entry_values.row(idx) } else { inputs.raw_values.row(idx) };
            for e in 0..dh {
                output[[q, e]] = output[[q, e]] + a * v[e];
            }
            if is_entry {
                entry_weights[[q, idx]] = a;
            }
        }
    }
    Ok(AttentionOut { output, entry_weights })
}

fn dot<F: Float>(a: ndarray::ArrayView1<F>, b: ndarray::ArrayView1<F>) -> F {
    a.iter().zip(b.iter()).fold(F::zero(), |acc, (&x, &y)| acc + x * y)
}
