//! The chunked KV-compression kernel family: the kernel itself and nothing that checks it (the
//! harness, mutants, dumps and their validation live in [`crate::conformance`]). Conventions,
//! implementations and tolerances: `theory/kernels.md`; the JSON spec and dump formats:
//! `theory/dump-format.md`.
//!
//! | file | owns |
//! |---|---|
//! | [`spec`] | knobs, validation, the JSON form; [`spec::presets`]: the preset registry |
//! | [`params`] | parameter layout of one head, flat order |
//! | [`cycle`] | gate cycling: a head's per-offset parameters moved by `k` offsets (`theory/gate-cycling.md`) |
//! | [`reference`] | the f64 (any float) reference: plain loops, one-shot and streaming |
//! | [`post`] | RMSNorm and partial RoPE of entries (the angle formula) |
//! | [`attention`] | compressed attention (local raw window + visible entries), reference |
//! | [`tensor`] | the candle implementation: batched, device-generic, f32/f16/bf16, streaming; its formulas (`ops`), parameter layout (`params`) and its one fast CPU f32 forward when no gradient is needed (`fast`: the `gemm` crate's AVX-512 sgemm through `numeric::gemm`, one-exponential softmax-pool, rayon over chunks) |

pub mod attention;
pub mod cycle;
pub mod params;
pub mod post;
pub mod reference;
pub mod spec;
pub mod tensor;

pub use params::{GateParams, KernelParams, ParamLayout};
pub use spec::{GateKind, KernelDims, KernelSpec, Named, ParamGroups, RopeChannels, RopeSpec};

use ndarray::{Array2, Array3};

/// The compressed entries of one sequence and everything the invariants look at.
#[derive(Clone, Debug, PartialEq)]
pub struct Compressed<F> {
    /// Keys after post-processing: `[n, d_h]`.
    pub keys: Array2<F>,
    /// Values after post-processing: `[n, d_h]` (equal to `keys` when `shared_kv`).
    pub values: Array2<F>,
    /// Pooled keys before post-processing (`sum_i a_i (.) C h_i`): `[n, d_h]`.
    pub pooled_k: Array2<F>,
    /// Pooled values before post-processing: `[n, d_h]`.
    pub pooled_v: Array2<F>,
    /// Key gate weights `[n, W, c]` with `c = max(d_g, 1)`; empty slots weigh 0.
    pub gate_k: Array3<F>,
    /// Value gate weights `[n, W, c]`.
    pub gate_v: Array3<F>,
    /// The position each entry carries.
    pub positions: Vec<usize>,
}

impl<F: Clone> Compressed<F> {
    /// The first `n` entries (what a prefix of the sequence produced).
    pub fn take(&self, n: usize) -> Self {
        self.slice(0, n)
    }

    /// Entries `from..to` (the one place `Compressed` is sliced).
    pub fn slice(&self, from: usize, to: usize) -> Self {
        use ndarray::s;
        Compressed {
            keys: self.keys.slice(s![from..to, ..]).to_owned(),
            values: self.values.slice(s![from..to, ..]).to_owned(),
            pooled_k: self.pooled_k.slice(s![from..to, ..]).to_owned(),
            pooled_v: self.pooled_v.slice(s![from..to, ..]).to_owned(),
            gate_k: self.gate_k.slice(s![from..to, .., ..]).to_owned(),
            gate_v: self.gate_v.slice(s![from..to, .., ..]).to_owned(),
            positions: self.positions[from..to].to_vec(),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }
}

/// Floating-point operations of one forward pass over `t_len` tokens, counting the per-slot
/// projections (`2 d d_h` for `C`, `2 d d_g` for `Z`, per branch) and the weighted sums
/// (`2 d_h` per slot and branch); softmax and post-processing are lower order and not counted.
pub fn forward_flops(spec: &KernelSpec, dims: KernelDims, t_len: usize) -> f64 {
    let g = &spec.geometry;
    let slots: usize = (0..g.num_windows(t_len)).map(|j| g.valid_slots(j)).sum();
    let (d, dh) = (dims.d_model as f64, dims.d_head as f64);
    let dg = spec.gate_width(dims.d_head) as f64;
    let branches = if spec.shared_kv { 1.0 } else { 2.0 };
    let gates = if spec.has_value_gate() {
        2.0
    } else if dg > 0.0 {
        1.0
    } else {
        0.0
    };
    slots as f64 * (branches * (2.0 * d * dh + 2.0 * dh) + gates * 2.0 * d * dg)
}

/// Seeded random input `[t_len, d]`, uniform in `[-1, 1)` (benchmarks and demos), drawn with
/// `ndarray-rand`, the crate that exists to make random arrays.
pub fn random_input(t_len: usize, d_model: usize, seed: u64) -> ndarray::Array2<f64> {
    use ndarray_rand::rand_distr::Uniform;
    use ndarray_rand::RandomExt;
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let uniform = Uniform::new(-1.0, 1.0).expect("a finite, non-empty range");
    ndarray::Array2::random_using((t_len, d_model), uniform, &mut rng)
}
