//! What a dump holds: the format version, the kernel's runs and the loaded dump, and a raw
//! tensor as a file stores it.

use crate::kernel::params::KernelParams;
use crate::kernel::spec::{KernelDims, KernelSpec};
use crate::numeric::formats::CacheFormat;
use candle_core::DType;
use ndarray::{Array3, Array4};

/// The format version this build reads and writes.
pub const FORMAT_VERSION: &str = "1";

/// Largest window, token count or width the loader accepts (a guard against absurd metadata,
/// far above any real kernel).
pub(super) const MAX_DIM: usize = 1 << 20;

/// One run of the kernel: its input and what it produced, in f64 with a batch axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// Input hidden states `[B, T, d]`.
    pub input: Array3<f64>,
    /// Post-processed keys `[B, n, d_h]`.
    pub keys: Array3<f64>,
    /// Post-processed values `[B, n, d_h]` (`None` when `shared_kv`: the keys serve).
    pub values: Option<Array3<f64>>,
    /// Pooled keys before post-processing, if dumped.
    pub pooled_keys: Option<Array3<f64>>,
    /// Pooled values before post-processing, if dumped.
    pub pooled_values: Option<Array3<f64>>,
    /// Key gate weights `[B, n, W, c]`, if dumped.
    pub gate_k: Option<Array4<f64>>,
    /// Value gate weights `[B, n, W, c]`, if dumped.
    pub gate_v: Option<Array4<f64>>,
}

impl Run {
    /// Batch size `B`.
    pub fn batch(&self) -> usize {
        self.input.shape()[0]
    }

    /// Sequence length `T`.
    pub fn tokens(&self) -> usize {
        self.input.shape()[1]
    }

    /// Number of entries the kernel produced.
    pub fn entries(&self) -> usize {
        self.keys.shape()[1]
    }

    /// The values, or the keys for `shared_kv` kernels.
    pub fn values_or_keys(&self) -> &Array3<f64> {
        self.values.as_ref().unwrap_or(&self.keys)
    }
}

/// A loaded, validated dump.
#[derive(Clone, Debug, PartialEq)]
pub struct Dump {
    /// The kernel spec (from `preset` or `spec`).
    pub spec: KernelSpec,
    /// Model and head widths.
    pub dims: KernelDims,
    /// The dtype the kernel computed in (the tolerance rule's dtype).
    pub dtype: DType,
    /// Whether the kernel is deterministic (K2 is then bit for bit).
    pub deterministic: bool,
    /// The parameters of the head.
    pub params: KernelParams<f64>,
    /// The main run.
    pub main: Run,
    /// The run on the input with `S` tokens prepended (K3), if dumped.
    pub shifted: Option<Run>,
    /// The run with one token perturbed and that token's index (K2), if dumped.
    pub perturbed: Option<(Run, usize)>,
    /// Whether `input` had a batch axis in the file (so a re-save keeps the rank).
    pub batched: bool,
    /// The quantized format the kernel stored its cache entries (`keys`, `values`) in, decoded
    /// back to floats in the dump (`None`: plain `dtype`); metadata `cache_format`.
    pub cache_format: Option<CacheFormat>,
}

/// One raw tensor: storage dtype, shape, values widened to f64.
#[derive(Clone, Debug, PartialEq)]
pub struct RawTensor {
    /// Storage dtype.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Values in row-major order.
    pub data: Vec<f64>,
}
