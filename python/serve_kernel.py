#!/usr/bin/env python3
"""Serve a compressor to `phasekv kernel check --external CMD` over stdin/stdout.

Wraps any module with the dumpable interface of kernels.py (`phasekv_spec()`, `forward(x)` ->
dict, `state_dict()` under phasekv's names, constructor `(d_model, d_head)`), so phasekv's
property harness (K1-K14, proptest-driven, shrinking) runs live against it. The protocol
(theory/dump-format.md, "Checking a live kernel"):

- every message, both ways, is a frame: an 8-byte little-endian unsigned length, then that many
  bytes of a safetensors file (tensors and a string-to-string metadata map);
- every request's metadata carries `id` (a decimal number, 1, 2, ...); every reply, `error`
  replies included, carries the same `id` (a reply with another id ends phasekv's run);
- phasekv sends `op = hello` first; the reply's metadata carries `spec` (the JSON spec) or `preset`,
  `dtype` (what the kernel computes in), `label`, and optionally `min_d_head` (the narrowest head
  the kernel runs; phasekv then draws `d_h` from it on; a factory attribute `min_d_head`);
- then any number of `op = compress` requests: metadata `d_model`, `d_head`; tensors `input`
  [B, T, d] and the parameters under phasekv's names (f64; the server casts to its dtype).
  The reply holds `keys` [B, n, d_h] and whatever else forward() returned (`values`,
  `pooled_keys`, `pooled_values`, `gate_k`, `gate_v`), as f64;
- a request that fails is answered with metadata `error` (one line), and the server goes on;
- end of stdin: the server exits 0.

Usage:

    phasekv kernel check --external "python3 python/serve_kernel.py --kernel triton-w8s4"

Library use, for a kernel of your own: `serve(lambda d_model, d_head: MyKernel(d_model, d_head))`.
Kernels served by name: those of kernels.py, triton_kernels.py (with triton) and
hf_deepseek_v4.py (with transformers: `hf-dsv4-csa`, `hf-dsv4-hca8`, Hugging Face's modules).
"""
import argparse
import json
import os
import struct
import sys
import traceback

import torch
from safetensors.torch import load, save

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phasekv_dump import DTYPES, NAMES, run  # noqa: E402


def read_frame(f):
    head = f.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    body = f.read(n)
    if len(body) < n:
        raise EOFError(f"frame of {n} bytes cut after {len(body)}")
    return body


def write_frame(f, tensors, meta):
    body = save({k: v.detach().contiguous() for k, v in tensors.items()}, metadata=meta)
    f.write(struct.pack("<Q", len(body)))
    f.write(body)
    f.flush()


def read_meta(body):
    """The metadata map of a safetensors buffer (safetensors.torch.load drops it)."""
    (n,) = struct.unpack("<Q", body[:8])
    return json.loads(body[8:8 + n]).get("__metadata__", {}) or {}


def serve(factory, dtype=torch.float32, label="kernel", stdin=None, stdout=None):
    """Answers phasekv's requests until stdin ends. `factory(d_model, d_head)` builds the module
    (it is built once per width pair and then only loads parameters)."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    modules = {}
    while True:
        body = read_frame(stdin)
        if body is None:
            return
        meta = read_meta(body)
        rid = {"id": str(meta.get("id", ""))}
        try:
            op = meta.get("op")
            if op == "hello":
                min_d_head = int(getattr(factory, "min_d_head", 1))
                spec = factory(1, min_d_head).phasekv_spec()
                reply = {"label": label, "dtype": NAMES[dtype], "min_d_head": str(min_d_head)}
                reply.update({"spec": json.dumps(spec)} if isinstance(spec, dict) else {"preset": spec})
                write_frame(stdout, {}, {**reply, **rid})
            elif op == "compress":
                tensors = load(body)
                d_model, d_head = int(meta["d_model"]), int(meta["d_head"])
                key = (d_model, d_head)
                if key not in modules:
                    modules[key] = factory(d_model, d_head).to(dtype)
                module = modules[key]
                x = tensors.pop("input").to(dtype)
                module.load_state_dict({k: v.to(dtype) for k, v in tensors.items()}, strict=True)
                out = run(module, x)
                write_frame(stdout, {k: v.to(torch.float64) for k, v in out.items()}, {"op": "compressed", **rid})
            else:
                raise ValueError(f"unknown op {op!r} (expected hello or compress)")
        except Exception as e:  # one line back to phasekv, the details on stderr
            traceback.print_exc(file=sys.stderr)
            write_frame(stdout, {}, {"error": f"{type(e).__name__}: {e}".replace("\n", " "), **rid})


def kernel_registry():
    from kernels import KERNELS

    table = dict(KERNELS)
    try:
        from triton_kernels import KERNELS as TRITON
        table.update(TRITON)
    except ImportError:
        pass
    try:
        from hf_deepseek_v4 import KERNELS as HF
        table.update(HF)
    except ImportError:
        pass
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernel", required=True, help="a kernel of kernels.py or triton_kernels.py")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    a = ap.parse_args()
    table = kernel_registry()
    if a.kernel not in table:
        ap.error(f"unknown kernel {a.kernel!r}; expected one of {sorted(table)}")
    cls = table[a.kernel]
    protocol = sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the frames

    def factory(d_model, d_head):
        return cls(d_model, d_head)

    factory.min_d_head = getattr(cls, "min_d_head", 1)
    serve(factory, dtype=DTYPES[a.dtype], label=a.kernel, stdout=protocol)


if __name__ == "__main__":
    main()
