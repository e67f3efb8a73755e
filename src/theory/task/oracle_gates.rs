//! Oracle-class gates: one key and one value probability vector per (head, chunk).

use super::params::TaskParams;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

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

    pub(super) fn check(&self, p: &TaskParams) -> Result<()> {
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
