#!/usr/bin/env python3
"""Dump SGLang 0.5.23's DeepSeek-V4.1 compressor (the torch path), unmodified, as a phasekv dump.

`DeepseekV41Compressor` (`sglang/srt/layers/attention/dsv4/dsv41_sparse.py`) and its cache-entry
step `_rope_fq4(..., compressed_kv=True)` (RoPE on the last 64 channels, then
`fake_quant_compressed_kv`: e2m1 elements with one e4m3 scale per 16) are imported from the
downloaded wheel (`pip download --no-deps sglang==0.5.23`, found by shipped_wheels.py) without
importing sglang's package (its `__init__`s start the server stack), and so is SGLang's own RoPE
table, `precompute_freqs_cis` (base 160000, YaRN factor 16 from 65536, beta 32/1). Three
helpers the module imports for other classes are shims: `sglang.srt.utils` (`add_prefix`,
"not ROCm"), `sglang.srt.layers.linear.ReplicatedLinear` and `QuantizationConfig` (used by the
indexer only, never built here).

What the adapter does is what SGLang's attention backend does in `_low_ratio_compress_torch` and
`_low_ratio_write_group` (`srt/layers/attention/deepseek_v4_backend.py`), for whole sequences:
`project` (bf16 x bf16 -> fp32 GEMM; ratio 1: a bf16 linear), for ratio 2 `pool_pairs` of each
pair (the group's first token as partner), `finish` (the pooled latent rounded to bf16, then
RMSNorm in fp32), and `_rope_fq4` at the group's first position. The torch path has no streaming
form of its own (decode pairs come from the backend's state ring), so this adapter is one-shot.

The dump holds the FP4 fake-quantized entries with `cache_format`
`{"element": "e2m1", "scale": "e4m3", "block": 16, "channels": "all"}`, `pooled_keys` (the input
of the RMSNorm) and, for ratio 2, `gate_k` (the softmax of each pair), captured from SGLang's own
forward. Presets `dsv41-c1`, `dsv41-c2` (SGLang serves ratios 1 and 2 through this class).
Negative controls: `--wrong-ratio`, `--label-plain`.

Usage:

    python3 python/sglang_deepseek_v41.py --ratio 2 --out c2.safetensors --validate target/debug/phasekv
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import phasekv_npdump  # noqa: E402
import shipped_wheels  # noqa: E402

VERSION = "0.5.23"
ROPE = 64
RMS_NORM_EPS = 1e-6


class _NotShimmed:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("phasekv's SGLang adapter shims ReplicatedLinear only for imports")


def load_modules():
    """SGLang's dsv41_sparse (the compressor) and dsv4 rope modules, from the wheel."""
    return shipped_wheels.load(
        "sglang", VERSION,
        ["sglang.srt.layers.attention.dsv4.dsv41_sparse", "sglang.kernels.ops.attention.dsv4.rope"],
        stub_prefixes=("sglang.srt", "sglang.kernels"),
        shims={"sglang.srt.utils": {"add_prefix": lambda name, prefix: f"{prefix}.{name}" if prefix else name,
                                    "is_gfx95_supported": lambda: False, "is_hip": lambda: False},
               "sglang.srt.layers.linear": {"ReplicatedLinear": _NotShimmed},
               "sglang.srt.layers.quantization.base_config": {"QuantizationConfig": object}},
    )


class SglangCompressor:
    """SGLang's V4.1 compressor and cache-entry step behind phasekv_npdump's `run`."""

    def __init__(self, modules, ratio, d_model, d_head, seed=0, position_offset=0):
        self.position_offset = position_offset  # token t of a run at absolute position p0 + t
        self.sparse, self.rope = modules
        self.ratio, self.d_head = ratio, d_head
        self.comp = self.sparse.DeepseekV41Compressor(d_model, d_head, ratio, RMS_NORM_EPS, fused_compress=False)
        rng = np.random.default_rng(seed)

        def bf16(a):
            return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)

        with torch.no_grad():
            self.comp.wkv.weight.copy_(bf16(rng.uniform(-1, 1, (d_head, d_model)) / np.sqrt(d_model)))
            if ratio > 1:
                self.comp.wgate.weight.copy_(bf16(rng.uniform(-1, 1, (d_head, d_model)) / np.sqrt(d_model)))
            # The checkpoint's norm weight is bf16; SGLang holds it in an fp32 parameter.
            self.comp.norm.weight.copy_(bf16(1.0 + 0.1 * rng.uniform(0, 1, d_head)).float())

    def params(self):
        params = {"proj_k": self.comp.wkv.weight.detach().float().numpy()[None],
                  "gamma": self.comp.norm.weight.detach().numpy()}
        if self.ratio > 1:  # ratio 1 has no gate; dsv41-c1's is uniform (a window of one token)
            params["gate_k.z"] = self.comp.wgate.weight.detach().float().numpy()[None]
        return params

    def _sequence(self, x, freqs_cis, captured):
        """One sequence [T, d] -> (entries, pooled latents, gates) as SGLang's backend makes them."""
        kv, score = self.comp.project(x)
        n = x.shape[0] // self.ratio
        if self.ratio == 1:
            pooled = kv
        else:
            first, second = slice(0, 2 * n, 2), slice(1, 2 * n, 2)
            pooled = self.comp.pool_pairs(torch.stack([kv[first], kv[second]], dim=1),
                                          torch.stack([score[first], score[second]], dim=1))
        latent = self.comp.finish(pooled)
        group_pos = self.position_offset + torch.arange(n) * self.ratio
        entries = self.sparse._rope_fq4(latent, freqs_cis[group_pos], ROPE, compressed_kv=True)
        gates = captured.pop("gate", None)
        return entries, pooled.to(torch.bfloat16), gates

    def __call__(self, x_np):
        b, t, _ = x_np.shape
        x = torch.from_numpy(x_np.astype(np.float32)).to(torch.bfloat16)
        freqs_cis = self.rope.precompute_freqs_cis(
            dim=ROPE, seqlen=max(self.position_offset + t, 1), original_seq_len=65536, base=160000.0, factor=16.0, beta_fast=32, beta_slow=1)
        captured = {}
        real_softmax = torch.Tensor.softmax

        def softmax(tensor, *args, **kwargs):
            out = real_softmax(tensor, *args, **kwargs)
            captured.setdefault("gate", out)
            return out

        torch.Tensor.softmax = softmax
        try:
            with torch.no_grad():
                runs = [self._sequence(x[i], freqs_cis, captured) for i in range(b)]
        finally:
            torch.Tensor.softmax = real_softmax
        out = {"keys": torch.stack([r[0] for r in runs]).float().numpy(),
               "pooled_keys": torch.stack([r[1] for r in runs]).float().numpy()}
        if self.ratio > 1 and all(r[2] is not None for r in runs):
            out["gate_k"] = torch.stack([r[2] for r in runs]).float().numpy()
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    phasekv_npdump.add_adapter_args(ap)
    ap.add_argument("--ratio", type=int, choices=[1, 2], default=2)
    ap.add_argument("--tokens", type=int, default=None, help="default: past token 256 (a complete window starting there, plus 3 open tokens)")
    ap.add_argument("--d-head", type=int, default=512, help="a multiple of 16 above 64 (512 as released)")
    a = ap.parse_args()
    if a.d_head <= ROPE or a.d_head % 16:
        ap.error(f"--d-head must be a multiple of 16 above {ROPE}, got {a.d_head}")
    module = SglangCompressor(load_modules(), a.ratio, a.d_model, a.d_head, seed=a.seed,
                              position_offset=a.position_offset)
    tokens = a.tokens or phasekv_npdump.default_tokens(f"dsv41-c{a.ratio}")
    x = np.random.default_rng(a.seed).uniform(-1, 1, (a.batch, tokens, a.d_model))
    preset = f"dsv41-c{2 * a.ratio if a.wrong_ratio else a.ratio}"
    phasekv_npdump.adapter_dump(a, module, preset, x, "bf16", phasekv_npdump.FP4_E4M3_16,
                                f"SGLang {VERSION} DeepseekV41Compressor ratio {a.ratio}, d_head {a.d_head}")


if __name__ == "__main__":
    main()
