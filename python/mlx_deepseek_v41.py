#!/usr/bin/env python3
"""Dump mlx-lm's DeepSeek-V4.1 compressor, unmodified, as a phasekv dump (numpy only, no torch).

mlx-lm 0.32.2 ships DeepSeek-V4.1 in `mlx_lm/models/deepseek_v41.py`. This adapter imports that
module from the installed package, builds one `Attention` layer from a tiny `ModelArgs` with
the released compressor settings (RoPE on the last 64 channels, `compress_rope_theta` 160000,
YaRN factor 16 from 65536, beta 32/1, no magnitude factor) and the preset's RMSNorm eps 1e-6
(mlx-lm's default is 1e-20), and runs the layer's own compression path, `Attention._compress`:
`Compressor` (projections, softmax pooling of non-overlapping groups of `ratio` tokens, RMSNorm),
RoPE at each group's first token, and `_fake_quant_fp4` (e2m1 elements, one e4m3 scale per 16
channels), under MLX's CPU backend. The dump is checked against the preset `dsv41-c{ratio}`.

What the cache stores is the FP4 fake-quantized entry, so the dump says so: `cache_format`
`{"element": "e2m1", "scale": "e4m3", "block": 16, "channels": "all"}`, every tensor in f32,
`dtype` the model dtype (bf16 by default: mlx-lm rounds the pooled latent to it before RMSNorm).

Parameter map (mlx-lm -> phasekv): `compressor.kv_proj.weight` -> `proj_k[0]`,
`compressor.gate_proj.weight` -> `gate_k.z[0]` (ratio 1 has no gate, and `dsv41-c1`'s gate is
uniform: a window of one token), `compressor.kv_norm.weight` -> `gamma`; no position bias.

Outputs: `keys` (the cache entries, `cache.compress_kv`); in one-shot mode also `pooled_keys`
(the input of `kv_norm`) and `gate_k` (the softmax over each group), captured from mlx-lm's own
forward. `--chunk C` runs the decode path instead, C tokens a call through `LayerCache`'s pending
rows, and dumps the keys only.

Negative controls (validation must fail): `--wrong-ratio` labels the dump with twice the ratio
it ran; `--label-plain` drops `cache_format`, claiming the FP4 entries are plain bf16.

Usage:

    python3 python/mlx_deepseek_v41.py --ratio 4 --out mlx-c4.safetensors --validate target/debug/phasekv
"""
import argparse
import importlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import phasekv_npdump  # noqa: E402

import mlx.core as mx  # noqa: E402



def _import_deepseek_v41():
    """mlx-lm's `models/deepseek_v41.py` without running `mlx_lm/__init__.py`, which imports
    `convert` and `utils` and through them huggingface_hub and transformers: the documented
    `pip install --no-deps mlx-lm` installs neither (issue 41). The package is registered bare
    (its spec and path, not executed), then only `mlx_lm.models` is imported."""
    import importlib.util

    if "mlx_lm" not in sys.modules:
        spec = importlib.util.find_spec("mlx_lm")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("mlx-lm is not installed: pip install mlx[cpu] numpy safetensors && pip install --no-deps mlx-lm")
        sys.modules["mlx_lm"] = importlib.util.module_from_spec(spec)
    return importlib.import_module("mlx_lm.models.deepseek_v41")


ds = _import_deepseek_v41()

# The released RoPE of compressed layers, and the preset's eps (theory/dump-format.md).
ROPE_DIM = 64
RELEASED_YARN = {"factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1}
RMS_NORM_EPS = 1e-6
MX_DTYPES = {"f32": mx.float32, "bf16": mx.bfloat16}


def tiny_args(ratio, d_model, d_head):
    """One compressed layer of DeepSeek-V4.1 at small widths, the released compressor settings."""
    return ds.ModelArgs(
        hidden_size=d_model, head_dim=d_head, num_attention_heads=2, num_hidden_layers=1,
        q_lora_rank=16, o_groups=2, o_lora_rank=16, qk_rope_head_dim=ROPE_DIM,
        compress_ratios=(ratio,), kv_source_layer_ids=(0,), index_source_layer_ids=(),
        compress_rope_theta=160000.0, rope_scaling=dict(RELEASED_YARN), rms_norm_eps=RMS_NORM_EPS,
    )


def to_np(a):
    return np.array(a.astype(mx.float32))


class MlxCompressor:
    """mlx-lm's V4.1 compression path (`Attention._compress`) behind phasekv_npdump's `run`."""

    def __init__(self, ratio, d_model, d_head, dtype="bf16", seed=0, chunk=None, position_offset=0):
        self.position_offset = position_offset  # token t of a run at absolute position p0 + t
        self.ratio, self.chunk, self.dtype = ratio, chunk, MX_DTYPES[dtype]
        self.attn = ds.Attention(tiny_args(ratio, d_model, d_head), 0)
        rng = np.random.default_rng(seed)
        comp = self.attn.compressor

        def weight(shape):
            return mx.array((rng.uniform(-1, 1, shape) / np.sqrt(d_model)).astype(np.float32)).astype(self.dtype)

        comp.kv_proj.weight = weight((d_head, d_model))
        if ratio > 1:
            comp.gate_proj.weight = weight((d_head, d_model))
        comp.kv_norm.weight = mx.array((1.0 + 0.1 * rng.uniform(0, 1, d_head)).astype(np.float32)).astype(self.dtype)
        self.d_model = d_model

    def params(self):
        comp = self.attn.compressor
        params = {"proj_k": to_np(comp.kv_proj.weight)[None], "gamma": to_np(comp.kv_norm.weight)}
        if self.ratio > 1:
            params["gate_k.z"] = to_np(comp.gate_proj.weight)[None]
        return params

    def _compress(self, x, start, cache):
        shared = {}
        self.attn._compress(x, start_pos=start, cache=cache, shared=shared)
        return shared.get("compress_kv")

    def __call__(self, x_np):
        x = mx.array(x_np.astype(np.float32)).astype(self.dtype)
        b, t, _ = x.shape
        empty = np.zeros((b, 0, self.attn.head_dim), np.float32)
        cache = ds.LayerCache(128)
        if self.chunk is not None:
            keys = None
            for start in range(0, t, self.chunk):
                keys = self._compress(x[:, start : start + self.chunk], self.position_offset + start, cache)
            return {"keys": empty if keys is None else to_np(keys)}
        captured = {}
        real_softmax, real_norm = mx.softmax, self.attn.compressor.kv_norm

        def softmax(a, *args, **kwargs):
            out = real_softmax(a, *args, **kwargs)
            captured.setdefault("gate", out)
            return out

        class Capture(ds.nn.Module):
            def __call__(inner, a):
                captured.setdefault("pooled", a)
                return real_norm(a)

        mx.softmax, self.attn.compressor.kv_norm = softmax, Capture()
        try:
            keys = self._compress(x, self.position_offset, cache)
        finally:
            mx.softmax, self.attn.compressor.kv_norm = real_softmax, real_norm
        if keys is None:
            return {"keys": empty, "pooled_keys": empty}
        out = {"keys": to_np(keys), "pooled_keys": to_np(captured["pooled"])}
        if "gate" in captured:
            out["gate_k"] = to_np(captured["gate"])
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    phasekv_npdump.add_adapter_args(ap)
    ap.add_argument("--ratio", type=int, default=4, help="compress ratio (group size), >= 1")
    ap.add_argument("--tokens", type=int, default=None, help="default: past token 256 (a complete window starting there, plus 3 open tokens)")
    ap.add_argument("--d-head", type=int, default=128, help="a multiple of 16 above 64 (512 as released)")
    ap.add_argument("--dtype", choices=sorted(MX_DTYPES), default="bf16")
    ap.add_argument("--chunk", type=int, default=None, help="run the decode path, this many tokens a call")
    a = ap.parse_args()
    if a.ratio < 1:
        ap.error(f"--ratio must be at least 1, got {a.ratio}")
    if a.d_head <= ROPE_DIM or a.d_head % 16:
        ap.error(f"--d-head must be a multiple of 16 above {ROPE_DIM}, got {a.d_head}")
    if a.chunk is not None and a.chunk < 1:
        ap.error(f"--chunk must be at least 1, got {a.chunk}")
    mx.set_default_device(mx.cpu)
    tokens = a.tokens or phasekv_npdump.default_tokens(f"dsv41-c{a.ratio}")
    module = MlxCompressor(a.ratio, a.d_model, a.d_head, a.dtype, seed=a.seed, chunk=a.chunk,
                           position_offset=a.position_offset)
    x = np.random.default_rng(a.seed).uniform(-1, 1, (a.batch, tokens, a.d_model))
    preset = f"dsv41-c{2 * a.ratio if a.wrong_ratio else a.ratio}"
    phasekv_npdump.adapter_dump(a, module, preset, x, a.dtype, phasekv_npdump.FP4_E4M3_16,
                                f"mlx-lm {ds.__name__} ratio {a.ratio}, d_head {a.d_head}"
                                f"{', streaming chunk %d' % a.chunk if a.chunk else ''}")


if __name__ == "__main__":
    main()
