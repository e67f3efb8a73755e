#!/usr/bin/env python3
"""Write a phasekv dump of a PyTorch compressor, for `phasekv kernel validate DUMP`.

Format (theory/dump-format.md): a safetensors file (or, with --npy, a folder of .npy files plus
metadata.json) holding the kernel spec as metadata, the parameters under phasekv's names, the
input, the outputs, and two extra runs that make invariants checkable from outside: `shifted.*`
(the input with S tokens prepended, K3) and `perturbed.*` (one token replaced, K2; its index in
the metadata `perturbed.token`). Gates are dumped when the module returns them (K5).

The module interface is documented in kernels.py. Library use:

    from phasekv_dump import dump
    dump(module, x, "out.safetensors", dtype=torch.float32)

Command line (the shipped kernels):

    python3 python/phasekv_dump.py --kernel w8s4 --out w8s4.safetensors
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import KERNELS  # noqa: E402

DTYPES = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
NAMES = {v: k for k, v in DTYPES.items()}
OUTPUTS = ("keys", "values", "pooled_keys", "pooled_values", "gate_k", "gate_v")


def stride_of(spec):
    if isinstance(spec, dict):
        return spec["geometry"]["stride"]
    if spec.startswith("dsv4-csa"):
        return 4
    if spec.startswith("dsv4-hca"):
        return int(spec[len("dsv4-hca"):] or 128)
    if spec == "full":
        return 1
    return int(spec.split("-")[0].split("s")[1])


def run(module, x):
    with torch.no_grad():
        out = module(x)
    missing = {"keys"} - set(out)
    if missing:
        raise ValueError(f"forward() must return keys (got {sorted(out)})")
    unknown = set(out) - set(OUTPUTS)
    if unknown:
        raise ValueError(f"forward() returned unknown outputs {sorted(unknown)}; allowed: {OUTPUTS}")
    return out


def dump(module, x, path, dtype=torch.float32, seed=0, perturb_token=None, npy=False, deterministic=True):
    """Run `module` on x [B, T, d] (cast to `dtype`, with the module), plus the shifted and
    perturbed runs, and write the dump to `path`."""
    spec = module.phasekv_spec()
    module = module.to(dtype)
    x = x.to(dtype)
    b, t_len, d = x.shape
    s = stride_of(spec)
    gen = torch.Generator().manual_seed(seed + 1)
    tensors = {}

    def put(prefix, inp, out):
        tensors[prefix + "input"] = inp
        for k, v in out.items():
            tensors[prefix + k] = v

    put("", x, run(module, x))
    pre = (torch.rand(b, s, d, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
    xs = torch.cat((pre, x), dim=1)
    put("shifted.", xs, run(module, xs))
    if perturb_token is None:
        perturb_token = min(t_len - 1, 2 * s)  # an interior token of phase 0 when T allows
    xp = x.clone()
    xp[:, perturb_token] = (torch.rand(b, d, generator=gen, dtype=torch.float64) * 4 - 2).to(dtype)
    put("perturbed.", xp, run(module, xp))
    for name, p in module.state_dict().items():
        tensors[name] = p
    d_head = tensors["keys"].shape[-1]
    meta = {
        "phasekv.format": "1",
        "d_model": str(d),
        "d_head": str(d_head),
        "dtype": NAMES[dtype],
        "deterministic": "true" if deterministic else "false",
        "perturbed.token": str(perturb_token),
    }
    if isinstance(spec, dict):
        meta["spec"] = json.dumps(spec)
    else:
        meta["preset"] = spec
    tensors = {k: v.detach().contiguous() for k, v in tensors.items()}
    if npy:
        if dtype == torch.bfloat16:
            raise ValueError("numpy has no bf16: write bf16 dumps as safetensors")
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "metadata.json"), "w") as f:
            json.dump(meta, f, indent=1)
        for k, v in tensors.items():
            np.save(os.path.join(path, k + ".npy"), v.numpy())
    else:
        save_file(tensors, path, metadata=meta)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernel", default="w8s4",
                    help=f"one of {sorted(KERNELS)}, or several separated by commas (then --out is a folder)")
    ap.add_argument("--out", required=True,
                    help="output .safetensors file (a folder with --npy, or with several kernels: "
                         "<out>/<kernel>.safetensors and, with --npy, <out>/<kernel>.npy/)")
    ap.add_argument("--tokens", type=int, default=22)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=8)
    ap.add_argument("--d-head", type=int, default=8)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--npy", action="store_true",
                    help="write a folder of .npy files instead (with several kernels: as well)")
    a = ap.parse_args()
    kernels = a.kernel.split(",")
    for k in kernels:
        if k not in KERNELS:
            ap.error(f"unknown kernel {k!r}; expected one of {sorted(KERNELS)}")
    torch.manual_seed(a.seed)
    for k in kernels:
        module = KERNELS[k](a.d_model, a.d_head, seed=a.seed)
        gen = torch.Generator().manual_seed(a.seed)
        x = torch.rand(a.batch, a.tokens, a.d_model, generator=gen, dtype=torch.float64) * 2 - 1
        outs = [(a.out, a.npy)]
        if len(kernels) > 1:
            os.makedirs(a.out, exist_ok=True)
            outs = [(os.path.join(a.out, k + ".safetensors"), False)]
            if a.npy:
                outs.append((os.path.join(a.out, k + ".npy"), True))
        for path, npy in outs:
            dump(module, x, path, dtype=DTYPES[a.dtype], seed=a.seed, npy=npy)
            print(f"wrote {path} ({k}, spec {module.phasekv_spec()}, {a.batch}x{a.tokens}x{a.d_model}, {a.dtype})")


if __name__ == "__main__":
    main()
