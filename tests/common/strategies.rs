//! Shared proptest strategies for the theory tests (task parameters, probability vectors,
//! gates), so that shrinking and replay work the same everywhere.
#![allow(dead_code)]

use phasekv::theory::task::{OracleGates, TaskParams};
use proptest::prelude::*;

prop_compose! {
    /// Small valid task parameters (1 <= H < S, L >= 2, N >= L S).
    pub fn task_params()(stride in 2usize..=5, chunks in 2usize..=4)
        (heads in 1usize..stride, stride in Just(stride), chunks in Just(chunks),
         extra in 0usize..24, beta in 0.2f64..6.0, gamma in 0.2f64..6.0, kappa in 0.1f64..3.0)
        -> TaskParams {
        TaskParams { stride, heads, chunks, vocab: chunks * stride + extra, beta, gamma, kappa }
    }
}

prop_compose! {
    /// A probability vector of length `n` with entries bounded away from 0.
    pub fn prob_vec(n: usize)(raw in proptest::collection::vec(0.02f64..1.0, n)) -> Vec<f64> {
        let s: f64 = raw.iter().sum();
        raw.into_iter().map(|x| x / s).collect()
    }
}

/// `count` probability vectors of length `s`, concatenated.
pub fn prob_blocks(count: usize, s: usize) -> impl Strategy<Value = Vec<f64>> {
    proptest::collection::vec(prob_vec(s), count).prop_map(|v| v.concat())
}

/// Parameters together with random oracle gates for them.
pub fn params_and_gates() -> impl Strategy<Value = (TaskParams, OracleGates)> {
    task_params().prop_flat_map(|p| {
        let n = p.heads * p.chunks;
        (Just(p), prob_blocks(n, p.stride), prob_blocks(n, p.stride)).prop_map(|(p, key, value)| {
            let g = OracleGates {
                heads: p.heads,
                chunks: p.chunks,
                stride: p.stride,
                key,
                value,
            };
            (p, g)
        })
    })
}

/// Parameters together with random static gates (`H x S` each).
pub fn params_and_static() -> impl Strategy<Value = (TaskParams, Vec<f64>, Vec<f64>)> {
    task_params().prop_flat_map(|p| {
        (
            Just(p),
            prob_blocks(p.heads, p.stride),
            prob_blocks(p.heads, p.stride),
        )
    })
}

/// Relative error `|a - b| / max(|a|, |b|, floor)`.
pub fn rel_err(a: f64, b: f64, floor: f64) -> f64 {
    (a - b).abs() / a.abs().max(b.abs()).max(floor)
}
