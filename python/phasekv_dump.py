"""Write a phasekv dump of a PyTorch compressor, for `phasekv kernel validate DUMP`.

Format (theory/dump-format.md): a safetensors file (or, with --npy, a folder of .npy files plus
metadata.json) holding the kernel spec as metadata, the parameters under phasekv's names, the
input, the outputs, and two extra runs that make invariants checkable from outside: `shifted.*`
(the input with S tokens prepended, K3) and `perturbed.*` (one token replaced, K2; its index in
the metadata `perturbed.token`). Gates are dumped when the module returns them (K5). The runs
and the file are `phasekv_npdump.dump`'s (numpy only); this module adapts a torch module to it.

The module interface is documented in kernels.py. Library use:

    from phasekv_dump import dump
    dump(module, x, "out.safetensors", dtype=torch.float32)

Command line (the shipped kernels):

    python3 python/phasekv_dump.py --kernel w8s4 --out w8s4.safetensors
    python3 python/phasekv_dump.py --kernel dsv4-csa --position-offset 65536 --out csa-far.safetensors
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import phasekv_npdump  # noqa: E402
from kernels import KERNELS  # noqa: E402
from phasekv_npdump import OUTPUTS, check_outputs, stride_of  # noqa: E402,F401

DTYPES = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
NAMES = {v: k for k, v in DTYPES.items()}


def run(module, x):
    with torch.no_grad():
        return check_outputs(module(x))


def to_numpy(t):
    """A tensor as a numpy array of its values (bf16 widened to float32, exactly)."""
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def dump(module, x, path, dtype=torch.float32, seed=0, perturb_token=None, npy=False, deterministic=True,
         cache_format=None, position_offset=0):
    """Run `module` on x [B, T, d] (cast to `dtype`, with the module), plus the shifted and
    perturbed runs, and write the dump to `path` (phasekv_npdump.dump). With `position_offset`
    p0 every run's token t sits at RoPE position p0 + t: the module's `position_offset` attribute
    is set to p0 (a module without one refuses any p0 but 0) and the dump records it."""
    if position_offset:
        if not hasattr(module, "position_offset"):
            raise ValueError(f"position_offset {position_offset}: {type(module).__name__} has no position_offset "
                             "attribute (it cannot rotate at an absolute position); only 0 is allowed")
        module.position_offset = position_offset
    module = module.to(dtype)

    def run_np(inp):
        out = run(module, torch.from_numpy(np.ascontiguousarray(inp)).to(dtype))
        return {k: to_numpy(v) for k, v in out.items()}

    params = {name: to_numpy(p) for name, p in module.state_dict().items()}
    x = x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else x
    return phasekv_npdump.dump(run_np, x, params, module.phasekv_spec(), path, dtype=NAMES[dtype], seed=seed,
                               perturb_token=perturb_token, npy=npy, deterministic=deterministic,
                               cache_format=cache_format, position_offset=position_offset)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernel", default="w8s4",
                    help=f"one of {sorted(KERNELS)}, or several separated by commas (then --out is a folder)")
    ap.add_argument("--out", required=True,
                    help="output .safetensors file (a folder with --npy, or with several kernels: "
                         "<out>/<kernel>.safetensors and, with --npy, <out>/<kernel>.npy/)")
    ap.add_argument("--tokens", type=int, default=None, help="default: past token 256 (a complete window starting there, plus 3 open tokens)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=8)
    ap.add_argument("--d-head", type=int, default=8)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--npy", action="store_true",
                    help="write a folder of .npy files instead (with several kernels: as well)")
    ap.add_argument("--position-offset", type=int, default=0, metavar="P0",
                    help="token t sits at RoPE position P0 + t (a multiple of the stride; e.g. 65536 to check "
                         "DeepSeek-V4's YaRN past its original context)")
    a = ap.parse_args()
    kernels = a.kernel.split(",")
    for k in kernels:
        if k not in KERNELS:
            ap.error(f"unknown kernel {k!r}; expected one of {sorted(KERNELS)}")
    torch.manual_seed(a.seed)
    for k in kernels:
        module = KERNELS[k](a.d_model, a.d_head, seed=a.seed)
        gen = torch.Generator().manual_seed(a.seed)
        tokens = a.tokens or phasekv_npdump.default_tokens(module.phasekv_spec())
        x = torch.rand(a.batch, tokens, a.d_model, generator=gen, dtype=torch.float64) * 2 - 1
        outs = [(a.out, a.npy)]
        if len(kernels) > 1:
            os.makedirs(a.out, exist_ok=True)
            outs = [(os.path.join(a.out, k + ".safetensors"), False)]
            if a.npy:
                outs.append((os.path.join(a.out, k + ".npy"), True))
        for path, npy in outs:
            dump(module, x, path, dtype=DTYPES[a.dtype], seed=a.seed, npy=npy, position_offset=a.position_offset)
            at = f", from position {a.position_offset}" if a.position_offset else ""
            print(f"wrote {path} ({k}, spec {module.phasekv_spec()}, {a.batch}x{tokens}x{a.d_model}, {a.dtype}{at})")


if __name__ == "__main__":
    main()
