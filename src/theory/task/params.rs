//! The parameters of the induction task (`S`, `H`, `L`, `N`, `beta`, `gamma`, `kappa`) and
//! their validation.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};

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
