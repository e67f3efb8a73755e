#!/usr/bin/env python3
"""PyTorch twin of phasekv's training step, eager or `torch.compile`d (`--compile`), for timing side by side with
`phasekv train --bench N` (see README, "Training-step benchmark").

Same model as src/model/decoder.rs: token embedding; n_layer blocks of pre-RMSNorm attention
(grouped-query heads, per-head RMSNorm on q and k, interleaved RoPE on all channels) and
pre-RMSNorm SwiGLU; final RMSNorm; LM head evaluated only at the answer positions. For
`--preset w8s4` each KV head compresses the attention input with the W8/S4 gated kernel (vector
gates, per-offset parameters, untied, RoPE at the window's first token) and a query attends in
one softmax to a local window of raw tokens plus the visible entries (window end <= query).
AdamW with gradient clipping, as the Rust loop. The numbers are timing only (random tokens).
Prints one JSON line.

Sizes come from phasekv's own config, never from flags here, so the two cannot drift: the JSON
of `phasekv train --print-config [--preset P]`, given with `--config FILE` (`-` = stdin) or, by
default, obtained by running `--phasekv BIN train --print-config --preset P`. The sequence
length and vocabulary are derived from the task section as `TaskConfig::seq_len` and
`vocab_size` do; `benches/compare_train.sh` checks them against phasekv's `--bench` line.
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn.functional as F


import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kernels import rope as rope_last  # noqa: E402  phasekv's RoPE convention, one place on the Python side


def rope(u, positions, theta=10000.0):
    """RoPE on every channel (rounded down to an even count), as phasekv's generic presets."""
    return rope_last(u, positions, u.shape[-1] - u.shape[-1] % 2, theta)


class RMSNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


class Kernel(torch.nn.Module):
    """W/S gated compressor for h KV heads: keys, values [B, h, n, dh]."""

    def __init__(self, d, dh, h, window, stride):
        super().__init__()
        self.window, self.stride, self.h, self.dh = window, stride, h, dh
        s = 1.0 / math.sqrt(d)
        p = lambda *shape, sc=s: torch.nn.Parameter(torch.randn(*shape) * sc)
        self.zk, self.ck = p(window, d, h * dh), p(window, d, h * dh)
        self.zv, self.cv = p(window, d, h * dh), p(window, d, h * dh)
        self.bk = torch.nn.Parameter(torch.zeros(window, h * dh))
        self.bv = torch.nn.Parameter(torch.zeros(window, h * dh))

    def forward(self, x):
        b = x.shape[0]
        xw = x.unfold(1, self.window, self.stride).permute(0, 1, 3, 2)  # [B, n, W, d]
        n = xw.shape[1]
        ak = (torch.einsum("bnwd,wde->bnwe", xw, self.zk) + self.bk).softmax(dim=2)
        av = (torch.einsum("bnwd,wde->bnwe", xw, self.zv) + self.bv).softmax(dim=2)
        k = (ak * torch.einsum("bnwd,wde->bnwe", xw, self.ck)).sum(2)
        v = (av * torch.einsum("bnwd,wde->bnwe", xw, self.cv)).sum(2)
        k = k.view(b, n, self.h, self.dh).transpose(1, 2)
        v = v.view(b, n, self.h, self.dh).transpose(1, 2)
        pos = torch.arange(n) * self.stride
        return rope(k, pos), rope(v, pos)


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        d, dh, hq, hkv = a.d_model, a.d_head, a.n_head, a.n_kv_head
        self.a = a
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.wq, self.wk, self.wv, self.wo = lin(d, hq * dh), lin(d, hkv * dh), lin(d, hkv * dh), lin(hq * dh, d)
        self.qn, self.kn, self.n1, self.n2 = RMSNorm(dh), RMSNorm(dh), RMSNorm(d), RMSNorm(d)
        self.wg, self.wu, self.wd = lin(d, a.d_ff), lin(d, a.d_ff), lin(a.d_ff, d)
        self.kernel = None if a.preset == "full" else Kernel(d, dh, hkv, a.window, a.stride)

    def attn(self, x, mask_raw, mask_ent):
        a = self.a
        b, t, _ = x.shape
        pos = torch.arange(t)
        q = rope(self.qn(self.wq(x).view(b, t, a.n_head, a.d_head).transpose(1, 2)), pos)
        k = rope(self.kn(self.wk(x).view(b, t, a.n_kv_head, a.d_head).transpose(1, 2)), pos)
        v = self.wv(x).view(b, t, a.n_kv_head, a.d_head).transpose(1, 2)
        g = a.n_head // a.n_kv_head
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        scale = 1.0 / math.sqrt(a.d_head)
        s = q @ k.transpose(-1, -2) * scale + mask_raw
        if self.kernel is None:
            o = s.softmax(-1) @ v
        else:
            ek, ev = self.kernel(x)
            ek, ev = ek.repeat_interleave(g, 1), ev.repeat_interleave(g, 1)
            se = q @ ek.transpose(-1, -2) * scale + mask_ent
            w = torch.cat([s, se], -1).softmax(-1)
            o = w[..., :t] @ v + w[..., t:] @ ev
        return self.wo(o.transpose(1, 2).reshape(b, t, -1))

    def forward(self, x, mask_raw, mask_ent):
        x = x + self.attn(self.n1(x), mask_raw, mask_ent)
        h = self.n2(x)
        return x + self.wd(F.silu(self.wg(h)) * self.wu(h))


class Model(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.embed = torch.nn.Embedding(a.vocab, a.d_model)
        self.blocks = torch.nn.ModuleList([Block(a) for _ in range(a.n_layer)])
        self.norm = RMSNorm(a.d_model)
        self.head = torch.nn.Linear(a.d_model, a.vocab, bias=False)
        t = a.seq_len
        qq, tt = torch.arange(t)[:, None], torch.arange(t)[None, :]
        local = t if a.preset == "full" else a.local_window
        self.mask_raw = torch.where((tt <= qq) & (tt + local > qq), 0.0, float("-inf"))
        n = (t - a.window) // a.stride + 1
        end = torch.arange(n)[None, :] * a.stride + a.window - 1
        self.mask_ent = torch.where(end <= qq, 0.0, float("-inf"))

    def forward(self, tokens, idx):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, self.mask_raw, self.mask_ent)
        h = self.norm(x).reshape(-1, self.a.d_model)[idx]
        return self.head(h)


def sizes_from_config(a):
    """Fills the model and workload sizes of `a` from phasekv's config JSON."""
    if a.config == "-":
        cfg = json.load(sys.stdin)
    elif a.config:
        with open(a.config) as f:
            cfg = json.load(f)
    else:
        out = subprocess.run([a.phasekv, "train", "--print-config", "--preset", a.preset],
                             check=True, capture_output=True, text=True).stdout
        cfg = json.loads(out)
    m, task, tr = cfg["model"], cfg["task"], cfg["train"]
    if m["preset"] not in ("full", "w8s4"):
        sys.exit(f"error: the twin implements presets full and w8s4, got {m['preset']}")
    a.preset = m["preset"]
    for k in ("d_model", "n_layer", "n_head", "n_kv_head", "d_head", "d_ff", "local_window"):
        setattr(a, k, m[k])
    a.batch_size = tr["batch_size"]
    # TaskConfig::vocab_size and TaskConfig::seq_len (src/task).
    a.vocab = 2 + task["n_filler"] + task["n_key"] + task["n_val"]
    a.seq_len = (1 + task["max_prefix"] + task["n_records"] * (task["key_len"] + task["val_len"] + task["max_gap"])
                 + task.get("max_tail", 0) + task["n_queries"] * (1 + task["key_len"] + task["val_len"]))
    a.answers = task["n_queries"] * task["val_len"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="full", choices=["full", "w8s4"],
                    help="preset asked of phasekv when --config is not given")
    ap.add_argument("--config", help="JSON of `phasekv train --print-config` (- = stdin)")
    ap.add_argument("--phasekv", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "phasekv"),
                    help="phasekv binary to ask for the config when --config is not given")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (inductor; compiled during the 5 untimed warm-up steps)")
    a = ap.parse_args()
    sizes_from_config(a)
    a.window, a.stride = 8, 4
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = Model(a)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.01)
    # The compiled twin runs the same module (same parameters, same optimiser); torch.compile
    # traces forward and backward on the first steps, which the warm-up leaves untimed.
    fwd = torch.compile(m) if a.compile else m
    times = []
    for step in range(5 + a.steps):
        t0 = time.perf_counter()
        tokens = torch.randint(0, a.vocab, (a.batch_size, a.seq_len))
        idx = (torch.arange(a.batch_size)[:, None] * a.seq_len + torch.arange(a.seq_len - a.answers - 1, a.seq_len - 1)[None, :]).flatten()
        loss = F.cross_entropy(fwd(tokens, idx), tokens.flatten()[idx + 1])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if step >= 5:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    tok = a.batch_size * a.seq_len
    impl = "pytorch-compile-f32" if a.compile else "pytorch-eager-f32"
    print(json.dumps({"impl": impl, "preset": a.preset, "steps": a.steps, "median_s": med,
                      "mean_s": sum(times) / len(times), "tokens_per_step": tok, "tokens_per_s": tok / med,
                      "seq_len": a.seq_len, "vocab": a.vocab,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                      "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
