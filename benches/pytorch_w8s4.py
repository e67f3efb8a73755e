#!/usr/bin/env python3
"""PyTorch-eager twin of phasekv's w8s4 kernel, for timing side by side with
`phasekv kernel bench` (benches/compare_pytorch.sh passes the sizes, window and stride it reads
from phasekv, and computes GFLOP/s from phasekv's FLOP count, so the two sides cannot drift).

The kernel (paper eqs. 1-2, vector gates, per-offset parameters, untied, `start` alignment,
RoPE on all channels at the window's first token) in the obvious eager form: unfold the windows,
one einsum per projection, softmax over the slot axis, weighted sum. Prints one JSON line per
sequence length (seconds per forward, median), after one line with the sgemm yardstick.
"""
import argparse
import json
import math
import time

import torch


import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kernels import rope as rope_last  # noqa: E402  phasekv's RoPE convention, one place on the Python side


def rope(u, positions, theta=10000.0):
    """RoPE on every channel (rounded down to an even count), as phasekv's generic presets."""
    return rope_last(u, positions, u.shape[-1] - u.shape[-1] % 2, theta)


class W8S4(torch.nn.Module):
    def __init__(self, d, dh, window=8, stride=4, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        s = 1.0 / math.sqrt(d)
        self.window, self.stride = window, stride

        def p(*shape, scale=s):
            return torch.nn.Parameter((torch.rand(*shape, generator=g) * 2 - 1) * scale)

        self.zk, self.bk, self.ck = p(window, d, dh), p(window, dh, scale=1.0), p(window, d, dh)
        self.zv, self.bv, self.cv = p(window, d, dh), p(window, dh, scale=1.0), p(window, d, dh)

    def forward(self, x):  # x: [B, T, d] -> keys, values [B, n, dh]
        xw = x.unfold(1, self.window, self.stride).permute(0, 1, 3, 2)  # [B, n, W, d]
        sk = torch.einsum("bnwd,wde->bnwe", xw, self.zk) + self.bk
        sv = torch.einsum("bnwd,wde->bnwe", xw, self.zv) + self.bv
        ak, av = sk.softmax(dim=2), sv.softmax(dim=2)
        k = (ak * torch.einsum("bnwd,wde->bnwe", xw, self.ck)).sum(2)
        v = (av * torch.einsum("bnwd,wde->bnwe", xw, self.cv)).sum(2)
        pos = torch.arange(k.shape[1]) * self.stride
        return rope(k, pos), rope(v, pos)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="4096,65536")
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--d-head", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--stride", type=int, default=4)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    # sgemm yardstick on the same shapes phasekv's bench uses
    best = 0.0
    for (mm, kk, nn) in [(4096, 128, 512), (1024, 1024, 1024)]:
        A, B = torch.randn(mm, kk), torch.randn(kk, nn)
        A @ B
        runs = []
        start = time.perf_counter()
        while len(runs) < 3 or time.perf_counter() - start < a.seconds / 2:
            t0 = time.perf_counter()
            A @ B
            runs.append(time.perf_counter() - t0)
        runs.sort()
        best = max(best, 2 * mm * kk * nn / runs[len(runs) // 2])
    print(json.dumps({"impl": "pytorch-sgemm", "gflops": best / 1e9, "threads": torch.get_num_threads(),
                      "cpu_capability": torch.backends.cpu.get_cpu_capability()}))
    m = W8S4(a.d_model, a.d_head, window=a.window, stride=a.stride)
    for t in [int(s) for s in a.tokens.split(",")]:
        x = torch.rand(1, t, a.d_model) * 2 - 1
        with torch.no_grad():
            m(x)  # warm-up
            runs, start = [], time.perf_counter()
            while len(runs) < 3 or time.perf_counter() - start < a.seconds:
                t0 = time.perf_counter()
                m(x)
                runs.append(time.perf_counter() - t0)
        runs.sort()
        secs = runs[len(runs) // 2]
        print(json.dumps({"impl": "pytorch-eager-f32", "tokens": t, "seconds": secs, "tokens_per_s": t / secs,
                          "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
