#!/usr/bin/env python3
"""A Triton implementation of phasekv's gated compressor (paper eqs. 1-2), for any `w{W}s{S}`
geometry with vector gates, with or without `pad_left`, any group map (per offset, or DeepSeek's
{prev, cur}), separate or shared K/V.

One Triton program computes a block of entries (entry = one window of one sequence): it gathers
each window's tokens straight from `x` (the slot index is computed in the kernel from the window
index, the stride and the left pad; slots before the first or after the last token are empty),
evaluates the gate logits `Z_{g(i)} h + b_i` and the projections `C_{g(i)} h` of every slot as one
`[W, C, d]` tile, takes the per-channel softmax over the real slots (max-subtracted) and writes
the pooled entry and the gate weights. Tiles hold whole rows of `d`: a validation target, not a
kernel tuned for d = 4096. RMSNorm and RoPE run afterwards in torch (`kernels.GatedCompressor.post`, the same
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

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import Dsv4Csa, GatedCompressor, W8S4  # noqa: E402


@triton.jit
def gated_pool_kernel(
    x_ptr, z_ptr, b_ptr, c_ptr, g_ptr, pooled_ptr, gate_ptr,
    T, n_win, n_entries, first_start, D, C, E,
    STRIDE: tl.constexpr, W: tl.constexpr, SHIFT: tl.constexpr, BLOCK_Q: tl.constexpr,
    BLOCK_W: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_E: tl.constexpr, ACC: tl.constexpr,
):
    """BLOCK_Q entries per program, entry q = (sequence q // n_win, window q % n_win):
    pooled[q, e] = sum_i a[q, i, e'] * (C_{g(i)} x[t])[e] with e' = e (vector gate, C == E) or 0
    (scalar gate, C == 1), a[q, i, :] = softmax over the real slots i of Z_{g(i)} x[t] + b_i,
    t = first_start + (q % n_win) * STRIDE + i + SHIFT. Contiguous tensors: x [B, T, D],
    z [G, C, D], b [W, C], c [G, E, D], g [W] (int32), pooled [B * n_win, E],
    gate [B * n_win, W, C]."""
    q = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)  # [Q]
    oi = tl.arange(0, BLOCK_W)
    od = tl.arange(0, BLOCK_D)
    oc = tl.arange(0, BLOCK_C)
    oe = tl.arange(0, BLOCK_E)
    mq = q < n_entries
    mw = oi < W
    seq = q // n_win
    t = first_start + (q % n_win)[:, None] * STRIDE + oi[None, :] + SHIFT  # [Q, W] token of each slot
    real = mq[:, None] & mw[None, :] & (t >= 0) & (t < T)  # [Q, W] slots that hold a token

    # The window's tokens [Q, W, D], zero on empty slots.
    h = tl.load(x_ptr + (seq[:, None, None] * T + t[:, :, None]) * D + od[None, None, :],
                mask=real[:, :, None] & (od < D)[None, None, :], other=0.0).to(ACC)
    g = tl.load(g_ptr + oi, mask=mw, other=0)  # [W] parameter group of each offset
    wcd = mw[:, None, None] & (oc < C)[None, :, None] & (od < D)[None, None, :]
    z = tl.load(z_ptr + (g[:, None, None] * C + oc[None, :, None]) * D + od[None, None, :], mask=wcd,
                other=0.0).to(ACC)  # [W, C, D]
    bias = tl.load(b_ptr + oi[:, None] * C + oc[None, :], mask=mw[:, None] & (oc < C)[None, :], other=0.0).to(ACC)
    logits = tl.sum(h[:, :, None, :] * z[None, :, :, :], axis=3) + bias[None, :, :]  # [Q, W, C]

    # Softmax over the real slots, per channel.
    logits = tl.where(real[:, :, None], logits, float("-inf"))
    m = tl.max(logits, axis=1)  # [Q, C]
    m = tl.where(m == float("-inf"), 0.0, m)  # entries past the end: no real slot
    p = tl.where(real[:, :, None], tl.exp(logits - m[:, None, :]), 0.0)
    den = tl.sum(p, axis=1)
    a = p / tl.where(den == 0.0, 1.0, den)[:, None, :]  # [Q, W, C]

    # Projections [Q, W, E] and the pooled entry.
    wed = mw[:, None, None] & (oe < E)[None, :, None] & (od < D)[None, None, :]
    cm = tl.load(c_ptr + (g[:, None, None] * E + oe[None, :, None]) * D + od[None, None, :], mask=wed,
                 other=0.0).to(ACC)  # [W, E, D]
    proj = tl.sum(h[:, :, None, :] * cm[None, :, :, :], axis=3)
    pooled = tl.sum(a * proj, axis=1)  # [Q, E] (a broadcasts when C == 1)
    tl.store(pooled_ptr + q[:, None] * E + oe[None, :], pooled.to(pooled_ptr.dtype.element_ty),
             mask=mq[:, None] & (oe < E)[None, :])
    tl.store(gate_ptr + (q[:, None, None] * W + oi[None, :, None]) * C + oc[None, None, :],
             a.to(gate_ptr.dtype.element_ty), mask=mq[:, None, None] & mw[None, :, None] & (oc < C)[None, None, :])


def default_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def triton_pool(x, z, b, c, groups, window, stride, pad_left, shift=0):
    """Runs the Triton kernel: x [B, T, d], z [G, C, d], b [W, C], c [G, E, d] with C == E
    (vector gate) or C == 1 (scalar gate), groups: list of W group indices. Returns
    (pooled [B, n, E], gates [B, n, W, C]) on x's device."""
    bsz, t_len, d = x.shape
    if pad_left:
        n, first = t_len // stride, stride - window
    else:
        n, first = ((t_len - window) // stride + 1 if t_len >= window else 0), 0
    e, cw = c.shape[1], z.shape[1]
    if cw not in (1, e):
        raise ValueError(f"gate width {cw}: the Triton kernel takes vector gates (width {e}) or scalar ones (1)")
    pooled = torch.empty(bsz, n, e, dtype=x.dtype, device=x.device)
    gates = torch.empty(bsz, n, window, cw, dtype=x.dtype, device=x.device)
    entries = bsz * n
    if entries == 0:
        return pooled, gates
    g = torch.tensor(groups, dtype=torch.int32, device=x.device)
    acc = tl.float64 if x.dtype == torch.float64 else tl.float32
    # The interpreter pays per operation, not per element: one program for every entry there;
    # natively, 16 entries per program.
    block_q = triton.next_power_of_2(entries) if INTERPRETED else 16
    gated_pool_kernel[(triton.cdiv(entries, block_q),)](
        x.contiguous(), z.contiguous(), b.contiguous(), c.contiguous(), g, pooled, gates,
        t_len, n, entries, first, d, cw, e,
        STRIDE=stride, W=window, SHIFT=shift, BLOCK_Q=block_q, BLOCK_W=triton.next_power_of_2(window),
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
    from phasekv_npdump import default_tokens

    ap = argparse.ArgumentParser(description="Dump the Triton compressors for `phasekv kernel validate`.")
    ap.add_argument("--kernel", default="triton-w8s4",
                    help=f"one of {sorted(KERNELS)}, or several separated by commas (then --out is a folder)")
    ap.add_argument("--out", required=True, help="a .safetensors file (several kernels: a folder)")
    ap.add_argument("--tokens", type=int, default=None, help="default: past token 256 (a complete window starting there, plus 3 open tokens)")
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
        tokens = a.tokens or default_tokens(module.phasekv_spec())
        x = torch.rand(a.batch, tokens, a.d_model, generator=gen, dtype=torch.float64) * 2 - 1
        path = a.out
        if len(kernels) > 1:
            os.makedirs(a.out, exist_ok=True)
            path = os.path.join(a.out, k + ".safetensors")
        dump(module, x, path, dtype=DTYPES[a.dtype], seed=a.seed)
        mode = "interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "native"
        print(f"wrote {path} ({k}, spec {module.phasekv_spec()}, {a.batch}x{tokens}x{a.d_model}, {a.dtype}, "
              f"triton {triton.__version__} {mode} on {module.device or default_device()})")


if __name__ == "__main__":
    main()
