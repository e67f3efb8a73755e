//! The idealized induction task and its loss (theory/induction-model.md §1-§2).
//!
//! Offsets are 0-based in code (`r = 0..S-1`); the Markdown and every JSON/plot output use the
//! paper's 1-based offsets (`code r` = `paper r + 1`). Query offsets are `r* = 0..S-2`, the
//! target is `r* + 1`.
//!
//! * [`population_loss`] / [`population_loss_grad`]: the exact population loss at `eps = 0`
//!   for the oracle class (per-head, per-chunk gates), eqs. (T-4)-(T-5).
//! * [`static_loss_grad`]: the static-gate closed form (T-6) and its exact gradient (T-6g), the
//!   hot loop of the gradient flow.
//! * [`one_hot_loss`]: `F_1` at a one-hot distinct vertex (T-7).
//! * [`monte_carlo_loss`]: the literal vector model (T-2, T-3) averaged over sampled contexts,
//!   valid for any `eps`.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};

mod population;
pub use population::*;
mod static_gates;
pub use static_gates::*;
mod monte_carlo;
pub use monte_carlo::*;

/// Parameters of the induction task.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TaskParams {
    /// Compression stride `S` (tokens per chunk).
    pub stride: usize,
    /// Number of heads `H` (`1 <= H < S`).
    pub heads: usize,
    /// Number of chunks `L` (`>= 2`).
    pub chunks: usize,
    /// Vocabulary size `N` (`>= L*S`).
    pub vocab: usize,
    /// Attention inverse temperature `beta > 0`.
    pub beta: f64,
    /// Readout scale `gamma > 0`.
    pub gamma: f64,
    /// Common component `kappa > 0` of the geometry (cancels exactly at `eps = 0`).
    pub kappa: f64,
}

impl Default for TaskParams {
    /// The spec's primary defaults: `S=4, H=2, L=4, N=64, beta=gamma=2, kappa=1`.
    fn default() -> Self {
        TaskParams { stride: 4, heads: 2, chunks: 4, vocab: 64, beta: 2.0, gamma: 2.0, kappa: 1.0 }
    }
}

impl TaskParams {
    /// The spec's secondary defaults: `S=8, H=3, L=4, N=256, beta=gamma=2, kappa=1`.
    pub fn secondary() -> Self {
        TaskParams { stride: 8, heads: 3, chunks: 4, vocab: 256, beta: 2.0, gamma: 2.0, kappa: 1.0 }
    }

    /// Check every parameter; the error names the field and the allowed range.
    pub fn validate(&self) -> Result<()> {
        let p = self;
        if p.stride < 2 {
            return Err(Error::invalid("stride", format!("S must be >= 2, got {}", p.stride)));
        }
        if p.heads < 1 || p.heads >= p.stride {
            return Err(Error::invalid("heads", format!("H must satisfy 1 <= H < S = {}, got {}", p.stride, p.heads)));
        }
        if p.chunks < 2 {
            return Err(Error::invalid("chunks", format!("L must be >= 2, got {}", p.chunks)));
        }
        if p.vocab < p.chunks * p.stride {
            return Err(Error::invalid(
                "vocab",
                format!(
                    "N must be >= L*S = {} (contexts hold L*S distinct tokens), got {}",
                    p.chunks * p.stride,
                    p.vocab
                ),
            ));
        }
        for (name, v) in [("beta", p.beta), ("gamma", p.gamma), ("kappa", p.kappa)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::invalid(name, format!("must be finite and > 0, got {v}")));
            }
        }
        Ok(())
    }

    /// Number of query offsets `R = S - 1` per chunk.
    pub fn query_offsets(&self) -> usize {
        self.stride - 1
    }

    /// Number of distractor tokens `N - L S` (never in the context).
    pub fn distractors(&self) -> f64 {
        (self.vocab - self.chunks * self.stride) as f64
    }
}

/// Oracle-class gates: one key and one value probability vector per (head, chunk).
/// Layout `[h][l][r]`, index `(h * L + l) * S + r`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OracleGates {
    /// `H`.
    pub heads: usize,
    /// `L`.
    pub chunks: usize,
    /// `S`.
    pub stride: usize,
    /// `pK_{h,l}(r)`.
    pub key: Vec<f64>,
    /// `pV_{h,l}(r)`.
    pub value: Vec<f64>,
}

impl OracleGates {
    /// Uniform gates.
    pub fn uniform(p: &TaskParams) -> Self {
        let n = p.heads * p.chunks * p.stride;
        let u = 1.0 / p.stride as f64;
        OracleGates { heads: p.heads, chunks: p.chunks, stride: p.stride, key: vec![u; n], value: vec![u; n] }
    }

    /// One-hot gates: head `h` in chunk `l` uses key offset `offsets[h][l]` and value offset
    /// `offsets[h][l] + 1` (0-based; each must be `<= S - 2`).
    pub fn one_hot(p: &TaskParams, offsets: &[Vec<usize>]) -> Result<Self> {
        if offsets.len() != p.heads || offsets.iter().any(|o| o.len() != p.chunks) {
            return Err(Error::shape(
                "one-hot offsets",
                format!("[{}][{}]", p.heads, p.chunks),
                format!("[{}][..]", offsets.len()),
            ));
        }
        let mut g = OracleGates::uniform(p);
        g.key.iter_mut().for_each(|x| *x = 0.0);
        g.value.iter_mut().for_each(|x| *x = 0.0);
        for (h, per_chunk) in offsets.iter().enumerate() {
            for (l, &r) in per_chunk.iter().enumerate() {
                if r + 1 >= p.stride {
                    return Err(Error::invalid(
                        "offset",
                        format!("key offset must be <= S-2 = {} (0-based), got {r}", p.stride - 2),
                    ));
                }
                let (ik, iv) = (g.idx(h, l, r), g.idx(h, l, r + 1));
                g.key[ik] = 1.0;
                g.value[iv] = 1.0;
            }
        }
        Ok(g)
    }

    /// Replicate static gates (`H x S`, the same in every chunk) into the oracle layout.
    pub fn from_static(p: &TaskParams, key: &[f64], value: &[f64]) -> Self {
        let mut g = OracleGates::uniform(p);
        for h in 0..p.heads {
            for l in 0..p.chunks {
                for r in 0..p.stride {
                    let i = g.idx(h, l, r);
                    g.key[i] = key[h * p.stride + r];
                    g.value[i] = value[h * p.stride + r];
                }
            }
        }
        g
    }

    /// Flat index of `(h, l, r)`.
    #[inline]
    pub fn idx(&self, h: usize, l: usize, r: usize) -> usize {
        (h * self.chunks + l) * self.stride + r
    }

    fn check(&self, p: &TaskParams) -> Result<()> {
        let n = p.heads * p.chunks * p.stride;
        if self.heads != p.heads
            || self.chunks != p.chunks
            || self.stride != p.stride
            || self.key.len() != n
            || self.value.len() != n
        {
            return Err(Error::shape(
                "oracle gates",
                format!("[H={}][L={}][S={}]", p.heads, p.chunks, p.stride),
                format!("[{}][{}][{}] with {} entries", self.heads, self.chunks, self.stride, self.key.len()),
            ));
        }
        Ok(())
    }
}
