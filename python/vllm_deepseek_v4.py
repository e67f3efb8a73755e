#!/usr/bin/env python3
"""Dump vLLM 0.33.0's DeepSeek-V4 and V4.1 compressor Triton kernels, unmodified, as phasekv dumps.

The kernels are loaded from the downloaded wheel (`pip download --no-deps vllm==0.33.0`, found by
shipped_wheels.py) without importing vllm itself, and run under Triton's interpreter
(`TRITON_INTERPRET=1`) on CPU tensors, as the platform that uses them (the generic Triton path:
not CUDA, whose head-512 path is a CuTe-DSL kernel, and not ROCm) would:

- `--kind v4-csa` / `v4-hca` (`vllm/models/deepseek_v4/common/ops/`): `save_partial_states`
  (the fp32 state rows `[kv | score + ape]`), then `compress_norm_rope_store_triton`, the fused
  softmax pooling + RMSNorm + RoPE + FP8 insert kernel for head 512. Presets `dsv4-csa`,
  `dsv4-hca`.
- `--kind v41-c1` / `v41-c2` (`vllm/models/deepseek_v41/common/ops/fused_compress_quant_cache.py`):
  `fused_save_compress_norm` (pooling + RMSNorm, a bf16 latent, ratio 2's ring of open rows),
  then `rope_quant_insert` into the cache record `--record`: `mxfp8` (528 B, SM100's record, the
  default), `584` (every other arch: V4's record) or `bf16` (plain rows). Presets `dsv41-c1`,
  `dsv41-c2`.

The adapter supplies what vLLM's model code would: the projections `kv_score` (a bf16 x bf16 ->
fp32 GEMM, here torch's), the positions, slot mappings and block tables of `--batch` requests
packed in one call, and the RoPE `cos_sin_cache` ([pos, 32 cos | 32 sin], YaRN factor 16 from
65536, base 160000, no magnitude factor, built in float32 and stored in the model dtype bf16, as
vLLM's `RotaryEmbeddingBase` does without FlashInfer). The platform is a shim that answers "not
CUDA, not ROCm, not XPU"; `vllm.triton_utils` is the real triton. Then it decodes the cache records
back to floats (e4m3 elements times their UE8M0 power-of-two scales; the RoPE part of the 584 B
record is bf16), which is what the dump holds, with the record's `cache_format`.

Head 512 and 64 RoPE channels are hard-coded in these kernels, so the dumps are at production
width (d_h = 512). `--chunk C` runs C tokens of every request per call (chunked prefill /
decode through vLLM's own state cache). Negative controls (validation must fail): `--swap`
(CSA: prev and cur mapped the wrong way round), `--wrong-ratio` (labelled with twice the ratio),
`--label-plain` (the quantized record claimed to be plain bf16).

Usage:

    python3 python/vllm_deepseek_v4.py --kind v41-c2 --out c2.safetensors --validate target/debug/phasekv
"""
import argparse
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: no GPU here

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import phasekv_npdump  # noqa: E402
import shipped_wheels  # noqa: E402

VERSION = "0.33.0"
HEAD, ROPE = 512, 64
NOPE = HEAD - ROPE
RMS_NORM_EPS = 1e-6
YARN = {"factor": 16.0, "original": 65536, "beta_fast": 32, "beta_slow": 1, "base": 160000.0}
KINDS = {"v4-csa": ("dsv4-csa", 4), "v4-hca": ("dsv4-hca", 128), "v41-c1": ("dsv41-c1", 1), "v41-c2": ("dsv41-c2", 2)}
# Record -> (bytes per entry, cache_format of its decoded entries, None = plain bf16).
RECORDS = {
    "584": (584, {"element": "e4m3", "scale": "pow2", "block": 64, "channels": "nope"}),
    "mxfp8": (528, {"element": "e4m3", "scale": "pow2", "block": 32, "channels": "all"}),
    "bf16": (None, None),
}


class _Platform:
    """vLLM's `current_platform`, answering as the generic Triton platform does."""

    device_type = "cpu"

    def is_rocm(self):
        return False

    def is_cuda(self):
        return False

    def is_xpu(self):
        return False

    def is_device_capability_family(self, *_):
        return False

    def __getattr__(self, name):
        raise AttributeError(f"phasekv's platform shim for vLLM has no {name!r}")


def load_kernels():
    """vLLM's V4 and V4.1 compressor kernel modules, imported from the wheel."""
    return shipped_wheels.load(
        "vllm", VERSION,
        ["vllm.models.deepseek_v4.common.ops.save_partial_states",
         "vllm.models.deepseek_v4.common.ops.fused_compress_quant_cache",
         "vllm.models.deepseek_v41.common.ops.fused_compress_quant_cache"],
        stub_prefixes=("vllm.models", "vllm.model_executor", "vllm.v1"),
        shims={"vllm.platforms": {"current_platform": _Platform()},
               "vllm.triton_utils": {"tl": tl, "triton": triton, "HAS_TRITON": True},
               "vllm.utils.deep_gemm": {"mqa_logits_use_mx_scales": lambda: False}},
    )


def hardware_rounding():
    """Make Triton's interpreter round fp32 -> bf16 and fp32 -> e4m3 as the GPU does.

    Triton 3.9.0's interpreter (`triton/runtime/interpreter.py`, `_convert_float`) truncates
    fp32 -> bf16 (`.to(tl.bfloat16)` goes through `cast_impl` with no rounding mode) and rounds
    fp32 -> fp8e4nv half-up, dropping the carry into the exponent whenever the exponent is odd
    (126.0 -> 64.0, 1.97 -> 1.0, 1.0625 -> 1.125; measured). The GPU instructions these kernels
    compile to (`cvt.rn.bf16.f32`, `cvt.rn.satfinite.e4m3x2.f32`) round to nearest even, the
    latter saturating at +-448. This replaces only those two conversions, with torch's (RNE), and
    leaves vLLM's kernels and every other conversion untouched. `--triton-rounding interpreter`
    skips it: then the validator rejects the records, as it should."""
    from triton.runtime import interpreter

    original = interpreter._convert_float

    def convert(values, input_dtype, output_dtype, rounding_mode):
        if input_dtype == tl.float32 and output_dtype in (tl.bfloat16, tl.float8e4nv):
            x = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
            if output_dtype == tl.bfloat16:
                return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).reshape(values.shape)
            x = torch.where(torch.isnan(x), x, x.clamp(-448.0, 448.0))
            return x.to(torch.float8_e4m3fn).view(torch.uint8).numpy().reshape(values.shape)
        return original(values, input_dtype, output_dtype, rounding_mode)

    interpreter._convert_float = convert


def cos_sin_cache(positions, dtype=torch.bfloat16):
    """[positions, 32 cos | 32 sin] of YaRN RoPE as vLLM's DeepseekScalingRotaryEmbedding
    computes it (float32, `mscale` 0), stored in `dtype`."""
    import math

    dim, base = ROPE, YARN["base"]

    def correction_dim(rotations):
        return dim * math.log(YARN["original"] / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(YARN["beta_fast"])), 0)
    high = min(math.ceil(correction_dim(YARN["beta_slow"])), dim - 1)
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (YARN["factor"] * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float) - low) / (high - low), 0, 1)
    mask = 1 - ramp
    inv_freq = interpolation * (1 - mask) + extrapolation * mask
    freqs = torch.einsum("i,j -> ij", torch.arange(positions, dtype=torch.float32), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)


def decode_records(kv_cache, record, slots):
    """The entries at `slots` of a vLLM cache, decoded to float32 [len(slots), 512]."""
    if record == "bf16":
        return kv_cache.reshape(-1, HEAD)[slots].float()
    pages, per_page, width = kv_cache.shape
    flat = kv_cache.reshape(pages, per_page * width)
    page, row = slots // per_page, slots % per_page
    if record == "mxfp8":
        rec = flat[page[:, None], row[:, None] * width + torch.arange(width)]
        values = rec[:, :HEAD].contiguous().view(torch.float8_e4m3fn).float()
        scales = torch.exp2(rec[:, HEAD:].float() - 127.0)
        return values * scales.repeat_interleave(32, dim=1)
    # 584: per page, `per_page` records of 448 e4m3 + 64 bf16, then 8 UE8M0 bytes per record.
    rec = flat[page[:, None], row[:, None] * 576 + torch.arange(576)]
    nope = rec[:, :NOPE].contiguous().view(torch.float8_e4m3fn).float()
    rope = rec[:, NOPE:].contiguous().view(torch.bfloat16).float()
    sb = flat[page[:, None], per_page * 576 + row[:, None] * 8 + torch.arange(7)]
    return torch.cat((nope * torch.exp2(sb.float() - 127.0).repeat_interleave(64, dim=1), rope), dim=1)


class VllmCompressor:
    """One vLLM compressor layer behind phasekv_npdump's `run`."""

    def __init__(self, kernels, kind, d_model, seed=0, chunk=None, record="mxfp8", swap=False):
        self.save_mod, self.v4, self.v41 = kernels
        self.kind, self.chunk, self.record, self.swap = kind, chunk, record, swap
        self.ratio = KINDS[kind][1]
        self.v41_kind = kind.startswith("v41")
        self.coff = 2 if self.ratio == 4 else 1
        rng = np.random.default_rng(seed)

        def bf16(a):
            return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)

        width = self.coff * HEAD
        self.wkv = bf16(rng.uniform(-1, 1, (width, d_model)) / np.sqrt(d_model))
        self.has_gate = self.ratio > 1
        self.wgate = bf16(rng.uniform(-1, 1, (width, d_model)) / np.sqrt(d_model))
        self.ape = None if self.v41_kind else torch.from_numpy(rng.uniform(-1, 1, (self.ratio, width)).astype(np.float32))
        self.gamma = bf16(1.0 + 0.1 * rng.uniform(0, 1, HEAD))

    def params(self):
        kv, gate = self.wkv.float().numpy(), self.wgate.float().numpy()
        gamma = self.gamma.float().numpy()
        if self.v41_kind:
            if not self.has_gate:  # ratio 1 has no gate; dsv41-c1's is uniform (a window of one token)
                return {"proj_k": kv[None], "gamma": gamma}
            return {"proj_k": kv[None], "gate_k.z": gate[None], "gamma": gamma}
        ape = self.ape.numpy()
        if self.coff == 1:
            return {"proj_k": kv[None], "gate_k.z": gate[None], "gate_k.b": ape, "gamma": gamma}
        prev, cur = (slice(HEAD, None), slice(None, HEAD)) if self.swap else (slice(None, HEAD), slice(HEAD, None))
        return {"proj_k": np.stack((kv[prev], kv[cur])), "gate_k.z": np.stack((gate[prev], gate[cur])),
                "gate_k.b": np.concatenate((ape[:, prev], ape[:, cur])), "gamma": gamma}

    def __call__(self, x_np):
        b, t, _ = x_np.shape
        x = torch.from_numpy(x_np.astype(np.float32)).to(torch.bfloat16)
        weights = torch.cat((self.wkv, self.wgate)) if self.has_gate else self.wkv
        kv_score = (x.float() @ weights.float().T).contiguous()  # [b, t, (1|2) coff 512] fp32
        entries = t // self.ratio
        per_req = max(entries, 1)
        cos_sin = cos_sin_cache(t + 1)
        state = self._new_state(b, t)
        step = self.chunk or max(t, 1)
        for start in range(0, t, step):
            stop = min(start + step, t)
            pos = torch.arange(start, stop, dtype=torch.int64).repeat(b)
            req = torch.arange(b, dtype=torch.int64).repeat_interleave(stop - start)
            rows = kv_score[:, start:stop].reshape(b * (stop - start), -1).contiguous()
            main_slots = req * per_req + pos // self.ratio
            self._launch(state, rows, pos, req, main_slots, cos_sin, b, stop - start)
        slots = (torch.arange(b)[:, None] * per_req + torch.arange(entries)[None]).reshape(-1)
        keys = decode_records(state["kv_cache"], self.record, slots) if entries else torch.zeros(0, HEAD)
        return {"keys": keys.reshape(b, entries, HEAD).numpy()}

    def _new_state(self, b, t):
        per_req = max(t // self.ratio, 1)
        page = 16
        pages = -(-b * per_req // page)
        width = RECORDS[self.record][0]
        if width is None:
            kv_cache = torch.zeros(pages, page, HEAD, dtype=torch.bfloat16)
        else:
            kv_cache = torch.zeros(pages, page, width, dtype=torch.uint8)
        state = {"kv_cache": kv_cache}
        if self.v41_kind:
            if self.ratio == 2:
                state["ring"] = torch.zeros(b, 4, 2 * HEAD, dtype=torch.float32)
            return state
        block = 4 if self.ratio == 4 else 8
        blocks_per_req = -(-max(t, 1) // block)
        state["block_size"] = block
        state["block_table"] = torch.arange(b * blocks_per_req, dtype=torch.int32).reshape(b, blocks_per_req)
        state["state_cache"] = torch.zeros(b * blocks_per_req, block, 2 * self.coff * HEAD, dtype=torch.float32)
        return state

    def _launch(self, state, rows, pos, req, main_slots, cos_sin, b, n):
        if self.v41_kind:
            latent = torch.zeros(rows.shape[0], HEAD, dtype=torch.bfloat16)
            qsl = torch.arange(0, (b + 1) * n, n, dtype=torch.int32)
            if self.ratio == 2:
                ring = state["ring"]
                ring_slots = req * ring.shape[1] + pos % ring.shape[1]
                self.v41.fused_save_compress_norm(
                    rows, pos, ring, ring_slots, qsl, req.to(torch.int32), self.gamma, RMS_NORM_EPS, 2, latent)
            else:
                self.v41.fused_save_compress_norm(
                    rows, pos, None, main_slots, None, None, self.gamma, RMS_NORM_EPS, 1, latent)
            self.v41.rope_quant_insert(latent, pos, cos_sin, state["kv_cache"], main_slots, self.ratio)
            return
        width = self.coff * HEAD
        kv, score = rows[:, :width], rows[:, width:]
        block = state["block_size"]
        table = state["block_table"]
        state_slots = table[req, pos // block].to(torch.int64) * block + pos % block
        self.save_mod._SAVE_PARTIAL_STATES_KERNEL(
            kv=kv, score=score, ape=self.ape, positions=pos, state_cache=state["state_cache"],
            slot_mapping=state_slots, block_size=block, state_width=width, compress_ratio=self.ratio, pdl_kwargs={})

        class KCacheMeta:
            slot_mapping = main_slots

        self.v4.compress_norm_rope_store_triton(
            state_cache=state["state_cache"], num_actual=rows.shape[0], token_to_req_indices=req.to(torch.int32),
            positions=pos, slot_mapping=state_slots, block_table=table, block_size=block, state_width=width,
            cos_sin_cache=cos_sin, kv_cache=state["kv_cache"], k_cache_metadata=KCacheMeta, pdl_kwargs={},
            head_dim=HEAD, rope_head_dim=ROPE, compress_ratio=self.ratio, overlap=self.coff == 2,
            use_fp4_cache=False, rms_norm_weight=self.gamma, rms_norm_eps=RMS_NORM_EPS, quant_block=64,
            token_stride=NOPE + 2 * ROPE, scale_dim=NOPE // 64 + 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    phasekv_npdump.add_adapter_args(ap)
    ap.add_argument("--kind", choices=sorted(KINDS), default="v41-c2")
    ap.add_argument("--record", choices=sorted(RECORDS), default=None,
                    help="V4.1's cache record (default mxfp8); V4 always writes its 584 B record")
    ap.add_argument("--tokens", type=int, default=None, help="default: past token 256 (a complete window starting there, plus 3 open tokens)")
    ap.add_argument("--chunk", type=int, default=None, help="this many tokens of each request per call")
    ap.add_argument("--swap", action="store_true", help="negative control (CSA): prev and cur the wrong way round")
    ap.add_argument("--triton-rounding", choices=["hardware", "interpreter"], default="hardware",
                    help="hardware: fp32 -> bf16 / e4m3 round to nearest even, as on the GPU (default); "
                         "interpreter: Triton 3.9's interpreter as is (truncates, mis-rounds e4m3)")
    a = ap.parse_args()
    preset, ratio = KINDS[a.kind]
    v41 = a.kind.startswith("v41")
    record = a.record or ("mxfp8" if v41 else "584")
    if not v41 and record != "584":
        ap.error(f"--record {record}: vLLM's V4 kernel writes only the 584 B record")
    if a.swap and a.kind != "v4-csa":
        ap.error("--swap needs --kind v4-csa (the only kernel with prev/cur halves)")
    if a.chunk is not None and a.chunk < 1:
        ap.error(f"--chunk must be at least 1, got {a.chunk}")
    if a.position_offset:
        ap.error(f"--position-offset {a.position_offset}: this adapter runs from position 0 only (vLLM's kernels "
                 "index their state cache and block table by absolute position); check YaRN past the original "
                 "context with python/hf_deepseek_v4.py --position-offset or the mlx-lm and SGLang adapters")
    if a.wrong_ratio and a.kind == "v4-csa":
        ap.error("--wrong-ratio: CSA's ratio is fixed by its preset; use --swap")
    if a.wrong_ratio:
        preset = "dsv4-hca256" if a.kind == "v4-hca" else f"dsv41-c{2 * ratio}"
    tokens = a.tokens or phasekv_npdump.default_tokens(KINDS[a.kind][0])
    if a.triton_rounding == "hardware":
        hardware_rounding()
    module = VllmCompressor(load_kernels(), a.kind, a.d_model, seed=a.seed, chunk=a.chunk, record=record, swap=a.swap)
    x = np.random.default_rng(a.seed).uniform(-1, 1, (a.batch, tokens, a.d_model))
    phasekv_npdump.adapter_dump(a, module, preset, x, "bf16", RECORDS[record][1],
                                f"vLLM {VERSION} {a.kind}, record {record}, d_head {HEAD}"
                                f"{', streaming chunk %d' % a.chunk if a.chunk else ''}"
                                f"{', prev/cur swapped' if a.swap else ''}"
                                f"{', Triton interpreter rounding as is' if a.triton_rounding == 'interpreter' else ''}")


if __name__ == "__main__":
    main()
