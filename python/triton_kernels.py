#!/usr/bin/env python3
"""A Triton implementation of phasekv's gated compressor (paper eqs. 1-2), for any `w{W}s{S}`
geometry with vector gates, with or without `pad_left`, any group map (per offset, or DeepSeek's
{prev, cur}), separate or shared K/V.

One Triton program computes one window of one sequence: it gathers the window's tokens straight
from `x` (the slot index is computed in the kernel from the window index, the stride and the left
pad; slots before the first or after the last token are empty), evaluates the gate logits
`Z_{g(i)} h + b_i` and the projections `C_{g(i)} h` for every offset, takes the per-channel softmax
over the real slots (two passes: maximum, then normalised sum) and writes the pooled entry and the
gate weights. RMSNorm and RoPE run afterwards in torch (`kernels.GatedCompressor.post`, the same
code as the PyTorch kernels): the Triton kernel is the pooling, which is where the geometry lives.

The modules implement the dumpable interface of kernels.py (`phasekv_spec()`, `forward(x)` ->
dict, `state_dict()` under phasekv's names), so `phasekv_dump.dump` and `serve_kernel.py` take
them unchanged.

Running it:

- On a CPU (CI): `TRITON_INTERPRET=1` runs the kernel in Triton's interpreter on CPU tensors.
  `python3 python/triton_kernels.py --kernel triton-w8s4 --out k.safetensors` sets it itself
  when no CUDA device is present.
- On a CUDA GPU: the same command, with `--device cuda` (the default when torch sees a GPU);
  the kernel is compiled and runs natively, parameters and inputs are moved to the GPU per call
  and the outputs come back to the CPU for the dump. Do not set TRITON_INTERPRET there.

`triton-w8s4-late` and `triton-dsv4-csa-late` are deliberately wrong twins: every window starts
one token late (the slot index in the kernel is off by one). `phasekv kernel validate` must fail
them and name the displacement ("windows starting 1 token late").
"""
import argparse
import os
import sys

import torch

if not torch.cuda.is_available():
    # Triton reads this when it is imported: without a GPU, run kernels in the interpreter.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import Dsv4Csa, GatedCompressor, W8S4  # noqa: E402


@triton.jit
def gated_pool_kernel(
    x_ptr, z_ptr, b_ptr, c_ptr, g_ptr, pooled_ptr, gate_ptr,
    T, n_win, first_start, D, C, E,
    STRIDE: tl.constexpr, W: tl.constexpr, SHIFT: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_E: tl.constexpr, ACC: tl.constexpr,
):
    """pooled[b, j, e] = sum_i a[b, j, i, e] * (C_{g(i)} x[t])[e], with
    a[b, j, i, :] = softmax over real slots i of (Z_{g(i)} x[t] + b_i), t = start_j + i + SHIFT,
    start_j = first_start + j * STRIDE. Contiguous tensors: x [B, T, D], z [G, C, D], b [W, C],
    c [G, E, D], g [W] (int32), pooled [B, n_win, E], gate [B, n_win, W, C] (C == E: vector
    gates)."""
    win = tl.program_id(0)
    bat = tl.program_id(1)
    start = first_start + win * STRIDE + SHIFT
    offs_d = tl.arange(0, BLOCK_D)
    offs_c = tl.arange(0, BLOCK_C)
    offs_e = tl.arange(0, BLOCK_E)
    md = offs_d < D
    mc = offs_c < C
    me = offs_e < E
    x_row = x_ptr + bat * T * D

    # Pass 1: the per-channel maximum of the logits over the real slots.
    m = tl.full((BLOCK_C,), float("-inf"), ACC)
    for i in range(W):
        t = start + i
        # Slot reality as vectors (the interpreter mishandles a scalar mask combined with a vector).
        td = offs_d * 0 + t
        tc = offs_c * 0 + t
        real_d = (td >= 0) & (td < T)
        real = (tc >= 0) & (tc < T)
        g = tl.load(g_ptr + i)
        h = tl.load(x_row + t * D + offs_d, mask=md & real_d, other=0.0).to(ACC)
        z = tl.load(z_ptr + g * C * D + offs_c[:, None] * D + offs_d[None, :], mask=mc[:, None] & md[None, :],
                    other=0.0).to(ACC)
        logit = tl.sum(z * h[None, :], axis=1) + tl.load(b_ptr + i * C + offs_c, mask=mc, other=0.0).to(ACC)
        m = tl.where(real, tl.maximum(m, logit), m)

    # Pass 2: the normaliser and the weighted sum of the projections.
    den = tl.zeros((BLOCK_C,), ACC)
    acc = tl.zeros((BLOCK_E,), ACC)
    for i in range(W):
        t = start + i
        # Slot reality as vectors (the interpreter mishandles a scalar mask combined with a vector).
        td = offs_d * 0 + t
        tc = offs_c * 0 + t
        real_d = (td >= 0) & (td < T)
        real = (tc >= 0) & (tc < T)
        g = tl.load(g_ptr + i)
        h = tl.load(x_row + t * D + offs_d, mask=md & real_d, other=0.0).to(ACC)
        z = tl.load(z_ptr + g * C * D + offs_c[:, None] * D + offs_d[None, :], mask=mc[:, None] & md[None, :],
                    other=0.0).to(ACC)
        logit = tl.sum(z * h[None, :], axis=1) + tl.load(b_ptr + i * C + offs_c, mask=mc, other=0.0).to(ACC)
        p = tl.where(real, tl.exp(logit - m), 0.0)
        den += p
        cm = tl.load(c_ptr + g * E * D + offs_e[:, None] * D + offs_d[None, :], mask=me[:, None] & md[None, :],
                     other=0.0).to(ACC)
        proj = tl.sum(cm * h[None, :], axis=1)
        acc += p * proj
    out = pooled_ptr + (bat * n_win + win) * E
    tl.store(out + offs_e, (acc / den).to(pooled_ptr.dtype.element_ty), mask=me)

    # Pass 3: the gate weights themselves (dumped for K5 and the phase diagnosis).
    gate_row = gate_ptr + (bat * n_win + win) * W * C
    for i in range(W):
        t = start + i
        # Slot reality as vectors (the interpreter mishandles a scalar mask combined with a vector).
        td = offs_d * 0 + t
        tc = offs_c * 0 + t
        real_d = (td >= 0) & (td < T)
        real = (tc >= 0) & (tc < T)
        g = tl.load(g_ptr + i)
        h = tl.load(x_row + t * D + offs_d, mask=md & real_d, other=0.0).to(ACC)
        z = tl.load(z_ptr + g * C * D + offs_c[:, None] * D + offs_d[None, :], mask=mc[:, None] & md[None, :],
                    other=0.0).to(ACC)
        logit = tl.sum(z * h[None, :], axis=1) + tl.load(b_ptr + i * C + offs_c, mask=mc, other=0.0).to(ACC)
        a = tl.where(real, tl.exp(logit - m) / den, 0.0)
        tl.store(gate_row + i * C + offs_c, a.to(gate_ptr.dtype.element_ty), mask=mc)


def default_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def triton_pool(x, z, b, c, groups, window, stride, pad_left, shift=0):
    """Runs the Triton kernel: x [B, T, d], z [G, C, d], b [W, C], c [G, E, d], groups: list of
    W group indices. Returns (pooled [B, n, E], gates [B, n, W, C]) on x's device."""
    bsz, t_len, d = x.shape
    if pad_left:
        n, first = t_len // stride, stride - window
    else:
        n, first = ((t_len - window) // stride + 1 if t_len >= window else 0), 0
    e, cw = c.shape[1], z.shape[1]
    pooled = torch.empty(bsz, n, e, dtype=x.dtype, device=x.device)
    gates = torch.empty(bsz, n, window, cw, dtype=x.dtype, device=x.device)
    if n == 0 or bsz == 0:
        return pooled, gates
    g = torch.tensor(groups, dtype=torch.int32, device=x.device)
    acc = tl.float64 if x.dtype == torch.float64 else tl.float32
    gated_pool_kernel[(n, bsz)](
        x.contiguous(), z.contiguous(), b.contiguous(), c.contiguous(), g, pooled, gates,
        t_len, n, first, d, cw, e,
        STRIDE=stride, W=window, SHIFT=shift,
        BLOCK_D=triton.next_power_of_2(d), BLOCK_C=triton.next_power_of_2(cw), BLOCK_E=triton.next_power_of_2(e),
        ACC=acc,
    )
    return pooled, gates


class TritonCompressor(GatedCompressor):
    """The pooling of GatedCompressor done by the Triton kernel; parameters, geometry knobs,
    positions, RMSNorm and RoPE are GatedCompressor's. `device` is where the kernel runs
    (inputs and parameters are moved there per call, outputs come back to x's device)."""

    device = None  # None: cuda when available, else cpu (interpreter)

    def forward(self, x):
        home = x.device
        dev = torch.device(self.device or default_device())
        xd = x.to(dev)
        _, start, n = self.slots(x.shape[1])
        groups = self.groups()

        def branch(gate, proj):
            pooled, a = triton_pool(xd, gate.z.to(dev), gate.b.to(dev), proj.to(dev), groups, self.window,
                                    self.stride, self.pad_left, self.start_shift)
            return a.to(home), pooled.to(home)

        positions = start.clamp(min=0) if self.position == "first" else torch.arange(n) * self.stride
        ak, pk = branch(self.gate_k, self.proj_k)
        out = {"keys": self.post(pk, positions), "pooled_keys": pk, "gate_k": ak}
        if not self.shared_kv:
            av, pv = branch(self.gate_v, self.proj_v)
            out.update(values=self.post(pv, positions), pooled_values=pv, gate_v=av)
        return out


class TritonW8S4(TritonCompressor, W8S4):
    """Preset w8s4 (W=8, S=4, start alignment, per-offset parameters, separate K/V) in Triton."""


class TritonDsv4Csa(TritonCompressor, Dsv4Csa):
    """Preset dsv4-csa (W=8, S=4, pad_left, {prev, cur} groups, shared K/V, RMSNorm, YaRN RoPE on
    the last d_h/8 channels) with the pooling in Triton."""


class TritonW8S4Late(TritonW8S4):
    """Buggy twin of TritonW8S4: every window starts one token late."""

    start_shift = 1


class TritonDsv4CsaLate(TritonDsv4Csa):
    """Buggy twin of TritonDsv4Csa: every window starts one token late (a pad_left kernel)."""

    start_shift = 1


KERNELS = {
    "triton-w8s4": TritonW8S4,
    "triton-dsv4-csa": TritonDsv4Csa,
    "triton-w8s4-late": TritonW8S4Late,
    "triton-dsv4-csa-late": TritonDsv4CsaLate,
}


def main():
    from phasekv_dump import DTYPES, dump

    ap = argparse.ArgumentParser(description="Dump the Triton compressors for `phasekv kernel validate`.")
    ap.add_argument("--kernel", default="triton-w8s4",
                    help=f"one of {sorted(KERNELS)}, or several separated by commas (then --out is a folder)")
    ap.add_argument("--out", required=True, help="a .safetensors file (several kernels: a folder)")
    ap.add_argument("--tokens", type=int, default=18)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=6)
    ap.add_argument("--d-head", type=int, default=8)
    ap.add_argument("--dtype", choices=["f32", "f64"], default="f32")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when torch sees a GPU)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    kernels = a.kernel.split(",")
    for k in kernels:
        if k not in KERNELS:
            ap.error(f"unknown kernel {k!r}; expected one of {sorted(KERNELS)}")
    for k in kernels:
        module = KERNELS[k](a.d_model, a.d_head, seed=a.seed)
        module.device = a.device
        gen = torch.Generator().manual_seed(a.seed)
        x = torch.rand(a.batch, a.tokens, a.d_model, generator=gen, dtype=torch.float64) * 2 - 1
        path = a.out
        if len(kernels) > 1:
            os.makedirs(a.out, exist_ok=True)
            path = os.path.join(a.out, k + ".safetensors")
        dump(module, x, path, dtype=DTYPES[a.dtype], seed=a.seed)
        mode = "interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "native"
        print(f"wrote {path} ({k}, spec {module.phasekv_spec()}, {a.batch}x{a.tokens}x{a.d_model}, {a.dtype}, "
              f"triton {triton.__version__} {mode} on {module.device or default_device()})")


if __name__ == "__main__":
    main()
