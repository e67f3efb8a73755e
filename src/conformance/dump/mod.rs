//! Dumps of a kernel that lives elsewhere (PyTorch, Triton, CUDA): the format, its loader and
//! writer. The format is documented in `theory/dump-format.md`; in brief:
//!
//! - a safetensors file whose `__metadata__` holds `phasekv.format` (= `1`), `preset` (a preset
//!   name) or `spec` (a JSON [`KernelSpec`](crate::kernel::KernelSpec)), `d_model`, `d_head`, `dtype` (`f64`, `f32`, `f16`,
//!   `bf16`), optionally `deterministic` (`true`/`false`, default `true`), `perturbed.token` and
//!   `cache_format` (a [`CacheFormat`](crate::numeric::formats::CacheFormat): the entries were stored quantized, decoded in the dump),
//!   `position_offset` (`p0`: token `t` at RoPE position `p0 + t`, default 0);
//! - tensors `input` `[T, d]` or `[B, T, d]`, the parameters under their [`ParamLayout`](crate::kernel::params::ParamLayout) names,
//!   the outputs `keys` (and `values` unless `shared_kv`), optionally `pooled_keys`,
//!   `pooled_values` `[B, n, d_h]` and `gate_k`, `gate_v` `[B, n, W, c]`; extra runs under the
//!   prefixes `shifted.` (input with `S` tokens prepended, for K3) and `perturbed.` (one token
//!   changed, for K2).
//!
//! A folder of `.npy` files (one per tensor, named `<tensor>.npy`) with the metadata map in
//! `metadata.json` is the second accepted form.
//!
//! The loader never panics on any bytes: every problem is one [`Error::File`](crate::Error::File) naming the file
//! and the tensor or field.

mod data;
mod dtype;
mod file;
mod npy;
mod parts;
mod safetensors_io;

pub use data::{Dump, RawTensor, Run, FORMAT_VERSION};
pub use dtype::{dtype_name, parse_dtype, round_to};
pub use npy::{parse_npy, read_npy_dir, write_npy_dir};
pub use parts::METADATA_KEYS;
pub use safetensors_io::{read_safetensors, safetensors_bytes, write_safetensors};
