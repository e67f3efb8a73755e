#!/usr/bin/env python3
"""Dump Hugging Face's DeepSeek-V4 compressors, unmodified, through phasekv's dump interface.

`DeepseekV4CSACompressor` and `DeepseekV4HCACompressor` (transformers 5.23,
`models/deepseek_v4/modeling_deepseek_v4.py`) are built from a tiny random `DeepseekV4Config`
with the released RoPE settings (`compress_rope_theta` 160000, YaRN factor 16 from 65536,
beta 32/1, `rms_norm_eps` 1e-6, 64/512 rotated channels), run on random hidden states, and
written as phasekv dumps that `phasekv kernel validate` checks against the presets `dsv4-csa`
and `dsv4-hca` (or `dsv4-hca{m}` at another HCA rate).

Parameter map (HF name -> phasekv name; d_h = head_dim):

| HF                        | CSA (groups prev = 0, cur = 1)                         | HCA          |
|---------------------------|--------------------------------------------------------|--------------|
| `kv_proj.weight`          | `proj_k[0] = rows :d_h` (Ca), `proj_k[1] = rows d_h:` (Cb) | `proj_k[0]` |
| `gate_proj.weight`        | `gate_k.z[0] = rows :d_h`, `gate_k.z[1] = rows d_h:`   | `gate_k.z[0]` |
| `position_bias [m, 2d_h]` | `gate_k.b[i] = bias[i, :d_h]` (slots 0..m-1, previous window), `gate_k.b[m+i] = bias[i, d_h:]` (current window) | `gate_k.b` |
| `kv_norm.weight`          | `gamma`                                                | `gamma`      |

The official checkpoint names map to the HF names as `wkv` -> `kv_proj`, `wgate` ->
`gate_proj`, `ape` -> `position_bias`, `norm` -> `kv_norm`.

Outputs: `keys` are HF's compressed entries; `pooled_keys` (the input of `kv_norm`) and
`gate_k` (the softmax over slots) are captured from HF's own forward, through a hook on
`kv_norm` and on `Tensor.softmax`. With `--chunk C` the compressor runs through HF's streaming
cache (`DeepseekV4CSACache` / `DeepseekV4HCACache`), C tokens per call, and only the keys are
dumped. `--swap` is the negative control: it maps prev and cur the wrong way round, so
validation must fail.

Usage:

    python3 python/hf_deepseek_v4.py --out hf-dumps/                 # dumps csa.safetensors, hca.safetensors
    python3 python/hf_deepseek_v4.py --out hf-dumps/ --validate target/release/phasekv
    python3 python/hf_deepseek_v4.py --out hf-far/ --d-head 512 --position-offset 65536 --validate target/release/phasekv
"""
import argparse
import os
import subprocess
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasekv_dump import DTYPES, dump  # noqa: E402
from phasekv_npdump import default_tokens  # noqa: E402

from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hf  # noqa: E402
from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config  # noqa: E402

# The released RoPE of compressed layers (config.json of V4-Flash / V4-Pro: rope_scaling).
RELEASED_YARN = {
    "rope_type": "yarn",
    "factor": 16.0,
    "original_max_position_embeddings": 65536,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
}


def tiny_config(d_model=64, d_head=64, hca_rate=128, yarn_factor=None):
    """A tiny DeepSeek-V4 config: the released compressor settings at small widths (with
    `yarn_factor`, YaRN at that factor instead of 16: a negative control)."""
    return DeepseekV4Config(
        hidden_size=d_model,
        head_dim=d_head,
        num_attention_heads=2,
        num_hidden_layers=2,
        q_lora_rank=16,
        o_lora_rank=16,
        o_groups=2,
        index_n_heads=2,
        # The shipped ratio (128 of 512). The indexer rotates the compressor's int(head_dim / 8)
        # channels of its own entries, so it must be at least that wide: a fixed 16 broke CSA at 512.
        index_head_dim=d_head // 4,
        index_topk=4,
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": hca_rate},
        rope_parameters=dict(RELEASED_YARN, **({"factor": yarn_factor} if yarn_factor else {})),
    )


class HfCompressor(torch.nn.Module):
    """An HF DeepSeek-V4 compressor behind phasekv's dump interface (see kernels.py)."""

    def __init__(self, kind, config, seed=0, chunk=None, swap=False):
        super().__init__()
        self.kind, self.config, self.chunk, self.swap = kind, config, chunk, swap
        gen = torch.Generator().manual_seed(seed)
        cls = hf.DeepseekV4CSACompressor if kind == "csa" else hf.DeepseekV4HCACompressor
        self.hf = cls(config)
        with torch.no_grad():
            for name, p in self.hf.named_parameters():
                if name.endswith("kv_norm.weight"):
                    p.copy_(1.0 + 0.1 * torch.rand(p.shape, generator=gen, dtype=torch.float64))
                elif name.endswith("position_bias"):
                    p.copy_(torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1)
                else:
                    p.copy_((torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) / config.hidden_size**0.5)
        self.q_residual_gen_seed = seed + 7
        # The absolute position p0 of token 0 (`--position-offset`, theory/dump-format.md,
        # "Position offset"). HF's compressor derives its entries' positions from its own window
        # count (`first_window_position`), not from `position_ids`, so p0 is added where those
        # positions enter its rotary embedding: a pre-hook on the compressor's own `rotary_emb`
        # (the CSA indexer's is another module). HF's angle computation itself is unchanged.
        self.position_offset = 0
        self.hf.rotary_emb.register_forward_pre_hook(self._at_offset, with_kwargs=True)

    def _at_offset(self, _module, args, kwargs):
        if self.position_offset:
            kwargs = dict(kwargs, position_ids=kwargs["position_ids"] + self.position_offset)
        return args, kwargs

    def _apply(self, fn, *args, **kwargs):
        """`Module.to(dtype)` on the rotary embedding's frequency buffers as HF's own loading
        treats them: `from_pretrained(dtype=torch.bfloat16)` creates them in f32 and never casts
        them, where a bare `.to(torch.bfloat16)` rounds them to bf16 (an angle error of
        `p f_i 2^-9`, 0.08 rad at position 128: not HF's kernel, a harness artifact)."""
        saved = {n: b.detach().clone() for n, b in self.named_buffers() if n.endswith("inv_freq")}
        out = super()._apply(fn, *args, **kwargs)
        for name, buf in saved.items():
            owner, _, leaf = name.rpartition(".")
            mod = self.get_submodule(owner)
            setattr(mod, leaf, buf.to(device=getattr(mod, leaf).device))
        return out

    def phasekv_spec(self):
        if self.kind == "csa":
            return "dsv4-csa"
        rate = self.config.compress_rates["heavily_compressed_attention"]
        return "dsv4-hca" if rate == 128 else f"dsv4-hca{rate}"

    def state_dict(self, *args, **kwargs):
        """phasekv's parameter names and layout, mapped from HF's state dict."""
        sd = self.hf.state_dict()
        dh = self.config.head_dim
        kv, gate, bias = sd["kv_proj.weight"], sd["gate_proj.weight"], sd["position_bias"]
        if self.kind == "csa":
            prev, cur = (slice(dh, None), slice(None, dh)) if self.swap else (slice(None, dh), slice(dh, None))
            return {
                "gate_k.z": torch.stack((gate[prev], gate[cur])),
                "gate_k.b": torch.cat((bias[:, prev], bias[:, cur])),
                "proj_k": torch.stack((kv[prev], kv[cur])),
                "gamma": sd["kv_norm.weight"],
            }
        return {"gate_k.z": gate[None], "gate_k.b": bias, "proj_k": kv[None], "gamma": sd["kv_norm.weight"]}

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """phasekv's names back to HF's parameters (the inverse of `state_dict`), so the live
        harness (`serve_kernel.py`) can set the parameters of every case."""
        dh = self.config.head_dim
        want = set(self.state_dict())
        if strict and set(state_dict) != want:
            raise KeyError(f"expected parameters {sorted(want)}, got {sorted(state_dict)}")
        z, b, c = state_dict["gate_k.z"], state_dict["gate_k.b"], state_dict["proj_k"]
        if self.kind == "csa":
            m = self.config.compress_rates["compressed_sparse_attention"]
            first, second = (1, 0) if self.swap else (0, 1)
            kv = torch.cat((c[first], c[second]))
            gate = torch.cat((z[first], z[second]))
            halves = (b[m:], b[:m]) if self.swap else (b[:m], b[m:])
            bias = torch.cat(halves, dim=1)
        else:
            kv, gate, bias = c[0], z[0], b
        sd = {"kv_proj.weight": kv, "gate_proj.weight": gate, "position_bias": bias, "kv_norm.weight": state_dict["gamma"]}
        with torch.no_grad():
            own = dict(self.hf.named_parameters())
            for k, v in sd.items():
                if own[k].shape != v.shape:
                    raise ValueError(f"{k}: shape {tuple(v.shape)}, HF holds {tuple(own[k].shape)} (head_dim {dh})")
                own[k].copy_(v.to(own[k].dtype))
        return None

    def _call(self, x, start, cache):
        b, t, _ = x.shape
        p0 = self.position_offset
        position_ids = torch.arange(p0 + start, p0 + start + t)[None].expand(b, -1)
        gen = torch.Generator().manual_seed(self.q_residual_gen_seed + start)
        q_residual = (torch.rand(b, t, self.config.q_lora_rank, generator=gen, dtype=torch.float64) * 2 - 1).to(x.dtype)
        past = None if cache is None else types.SimpleNamespace(layers=[cache])
        compressed, _ = self.hf(x, q_residual, position_ids, past, 0)
        return compressed[:, 0]

    def forward(self, x):
        b, dh = x.shape[0], self.config.head_dim
        w = 2 * self.config.compress_rates["compressed_sparse_attention"] if self.kind == "csa" else \
            self.config.compress_rates["heavily_compressed_attention"]
        no_entries = {"keys": x.new_zeros((b, 0, dh)), "pooled_keys": x.new_zeros((b, 0, dh)),
                      "gate_k": x.new_zeros((b, 0, w, dh))}
        if x.shape[1] == 0:
            # HF's CSA indexer cannot reshape an empty sequence; zero tokens give zero entries.
            return no_entries
        if self.chunk is not None:
            cls = hf.DeepseekV4CSACache if self.kind == "csa" else hf.DeepseekV4HCACache
            cache = cls(self.config)
            keys = None
            for start in range(0, x.shape[1], self.chunk):
                keys = self._call(x[:, start : start + self.chunk], start, cache)
            return {"keys": keys}
        captured = {}
        real_softmax = torch.Tensor.softmax

        def softmax(t, *args, **kwargs):
            out = real_softmax(t, *args, **kwargs)
            if "pooled" not in captured and t.dim() == 4:
                captured["gate"] = out
            return out

        def pre_hook(_module, inputs):
            captured.setdefault("pooled", inputs[0])

        handle = self.hf.kv_norm.register_forward_pre_hook(pre_hook)
        torch.Tensor.softmax = softmax
        try:
            keys = self._call(x, 0, None)
        finally:
            torch.Tensor.softmax = real_softmax
            handle.remove()
        if keys.shape[1] == 0:
            return no_entries  # no window closed: HF never pooled, so nothing was captured
        out = {"keys": keys}
        if "pooled" in captured:
            out["pooled_keys"] = captured["pooled"].to(keys.dtype)
            out["gate_k"] = captured["gate"].to(keys.dtype)
        return out


class _Served(HfCompressor):
    """An HF compressor built from a tiny config of the given widths, for serve_kernel.py."""

    kind_name, hca_rate, swapped = "csa", 8, False
    # HF rotates int(head_dim / 8) channels: below 16 that is fewer than one pair.
    min_d_head = 16

    def __init__(self, d_model, d_head, seed=0):
        super().__init__(self.kind_name, tiny_config(d_model, d_head, self.hca_rate), seed=seed, swap=self.swapped)


class ServedCsa(_Served):
    kind_name = "csa"


class ServedHca8(_Served):
    kind_name = "hca"


class ServedCsaSwapped(_Served):
    """The negative control: prev and cur mapped the wrong way round (must fail)."""

    kind_name, swapped = "csa", True


# Kernels `python/serve_kernel.py --kernel NAME` serves (Hugging Face's unmodified modules).
KERNELS = {"hf-dsv4-csa": ServedCsa, "hf-dsv4-hca8": ServedHca8, "hf-dsv4-csa-swapped": ServedCsaSwapped}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for csa.safetensors and hca.safetensors")
    ap.add_argument("--kind", choices=["csa", "hca", "both"], default="both")
    ap.add_argument("--tokens", type=int, default=None, help="default: past token 256 (a complete window starting there, plus 3 open tokens): 267 for CSA, 387 for HCA at rate 128")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--d-head", type=int, default=64)
    ap.add_argument("--hca-rate", type=int, default=128)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=None, help="run through HF's streaming cache, this many tokens a call")
    ap.add_argument("--swap", action="store_true", help="negative control: map prev and cur the wrong way round")
    ap.add_argument("--validate", metavar="PHASEKV", help="then run PHASEKV kernel validate on each dump; exit with its worst status")
    ap.add_argument("--yarn-factor", type=float, default=None, metavar="F",
                    help="negative control: HF's YaRN at factor F instead of the released 16, labelled as the preset "
                         "(visible past the original context: use with --position-offset 65536)")
    ap.add_argument("--position-offset", type=int, default=0, metavar="P0",
                    help="token t at RoPE position P0 + t (a multiple of the compression rate; 65536 checks YaRN "
                         "past its original context)")
    a = ap.parse_args()
    if a.chunk is not None and a.chunk < 1:
        ap.error(f"--chunk must be at least 1, got {a.chunk}")
    config = tiny_config(a.d_model, a.d_head, a.hca_rate, a.yarn_factor)
    os.makedirs(a.out, exist_ok=True)
    status = 0
    for kind in (["csa", "hca"] if a.kind == "both" else [a.kind]):
        module = HfCompressor(kind, config, seed=a.seed, chunk=a.chunk, swap=a.swap)
        tokens = a.tokens or default_tokens(module.phasekv_spec())
        gen = torch.Generator().manual_seed(a.seed)
        x = torch.rand(a.batch, tokens, a.d_model, generator=gen, dtype=torch.float64) * 2 - 1
        path = os.path.join(a.out, f"{kind}.safetensors")
        dump(module, x, path, dtype=DTYPES[a.dtype], seed=a.seed, position_offset=a.position_offset)
        print(f"wrote {path} (HF DeepseekV4{kind.upper()}Compressor as {module.phasekv_spec()}, "
              f"{a.batch}x{tokens}x{a.d_model}, {a.dtype}{', streaming chunk %d' % a.chunk if a.chunk else ''}"
              f"{', from position %d' % a.position_offset if a.position_offset else ''}"
              f"{', prev/cur swapped' if a.swap else ''}{', YaRN factor %g' % a.yarn_factor if a.yarn_factor else ''})",
              flush=True)
        if a.validate:
            rc = subprocess.call([a.validate, "kernel", "validate", path])
            status = max(status, rc)
    sys.exit(status)


if __name__ == "__main__":
    main()
