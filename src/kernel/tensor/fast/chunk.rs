//! What one chunk of windows reads and writes in the fast kernel's pass: the parameters in the
//! pass's layout, the chunk's context, its output rows and the per-thread scratch.

use crate::kernel::spec::KernelSpec;

/// Column blocks of the concatenated projection `[C^K | Z^K | C^V | Z^V]` (offsets, width).
#[derive(Clone, Copy, Debug)]
pub(super) struct Blocks {
    pub(super) zk: Option<usize>,
    pub(super) cv: Option<usize>,
    pub(super) zv: Option<usize>,
    pub(super) width: usize,
}

/// Parameters in the layout the pass reads: f32, row-major.
pub(super) struct Prepared {
    /// Per group `[d, width]`.
    pub(super) wcat: Vec<Vec<f32>>,
    pub(super) blocks: Blocks,
    /// Per-offset gate biases `[W, H*d_g]`.
    pub(super) bias_k: Option<Vec<f32>>,
    pub(super) bias_v: Option<Vec<f32>>,
    /// RMSNorm weights `[H, d_h]`.
    pub(super) gamma: Option<Vec<f32>>,
    /// RoPE frequencies of the rotated channels (`None`: no RoPE).
    pub(super) inv_freq: Option<Vec<f64>>,
}

/// Everything a chunk reads.
pub(super) struct Ctx<'a> {
    pub(super) spec: &'a KernelSpec,
    pub(super) x: &'a [f32],
    pub(super) t_len: usize,
    pub(super) d: usize,
    pub(super) h: usize,
    pub(super) dh: usize,
    /// Gate channels per head (`d_g`, at least 1 in the output layout).
    pub(super) c: usize,
    pub(super) dg: usize,
    pub(super) p: &'a Prepared,
}

/// Output rows of one chunk: `[cw, H, d_h]` and `[cw, H, W, c]`.
pub(super) struct Item<'a> {
    pub(super) b: usize,
    pub(super) j0: usize,
    pub(super) j1: usize,
    pub(super) keys: &'a mut [f32],
    pub(super) values: &'a mut [f32],
    pub(super) pooled_k: &'a mut [f32],
    pub(super) pooled_v: &'a mut [f32],
    pub(super) gate_k: &'a mut [f32],
    pub(super) gate_v: &'a mut [f32],
}

/// Per-thread scratch.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) proj: Vec<f32>,
    pub(super) gather: Vec<f32>,
    pub(super) m: Vec<f32>,
    pub(super) s: Vec<f32>,
    pub(super) cos_sin: Vec<(f32, f32)>,
}
