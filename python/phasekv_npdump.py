#!/usr/bin/env python3
"""Write a phasekv dump with numpy alone, for `phasekv kernel validate DUMP`.

The format is theory/dump-format.md's: a safetensors file (or a folder of .npy files plus
metadata.json) holding the spec as metadata, the parameters under phasekv's names, the input,
the outputs, and two extra runs that make invariants checkable from outside: `shifted.*` (the
input with S tokens prepended, K3) and `perturbed.*` (one token replaced, K2; its index in the
metadata `perturbed.token`, by default a token inside a window that closes).

Nothing here imports torch: an MLX, JAX or NumPy kernel writes its dump with

    from phasekv_npdump import dump
    dump(run, x, params, "dsv41-c4", "out.safetensors", dtype="bf16")

where `run(x)` maps an input [B, T, d] (a float32/float64 array already rounded to `dtype`) to
a dict of outputs (`keys`, optionally `values`, `pooled_keys`, `pooled_values`, `gate_k`,
`gate_v`) and `params` maps phasekv's parameter names to arrays. numpy has no bfloat16, so bf16
tensors travel as float32 arrays holding bf16 values (`round_to(a, "bf16")` rounds to nearest
even) and are written with safetensors' own serializer as `BF16`: the upper 16 bits of each
float32.

A kernel whose cache stores quantized entries passes `cache_format` (the JSON object of the
format, theory/dump-format.md): the dump then holds the entries decoded back to floats, every
tensor is stored in f32 (decoded values are exact there), and `dtype` names the precision the
kernel computed in before encoding.
"""
import json
import os
import subprocess
import sys

import numpy as np
from safetensors import TensorSpec, serialize_file

# phasekv's dtype names -> the numpy dtype that holds them (bf16: float32 holding bf16 values).
NP_DTYPES = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.float32}
OUTPUTS = ("keys", "values", "pooled_keys", "pooled_values", "gate_k", "gate_v")
# The cache format of FP4 fake-quantized entries (mlx-lm's and SGLang's V4.1): e2m1 elements,
# one e4m3 scale per 16 channels, every channel.
FP4_E4M3_16 = {"element": "e2m1", "scale": "e4m3", "block": 16, "channels": "all"}


def round_to(a, dtype):
    """`a` rounded to phasekv dtype `dtype` (round to nearest even), as NP_DTYPES[dtype]."""
    a = np.asarray(a)
    if dtype != "bf16":
        return a.astype(NP_DTYPES[dtype])
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    lsb = (bits >> 16) & 1
    rounded = np.where(finite, (bits + 0x7FFF + lsb) & 0xFFFF0000, bits & 0xFFFF0000)
    return rounded.astype(np.uint32).view(np.float32)


def _preset_geometry(name):
    """(window, stride, alignment) of a preset name, the families phasekv ships (`NAME@o{k}`:
    the same geometry on the grid offset by k)."""
    name = name.split("@o")[0]
    if name.startswith("dsv4-csa"):
        return 8, 4, "pad_left"
    if name.startswith("dsv4-hca"):
        m = int(name[len("dsv4-hca"):] or 128)
        return m, m, "start"
    if name.startswith("dsv41-c"):
        m = int(name[len("dsv41-c"):])
        return m, m, "start"
    if name == "full":
        return 1, 1, "start"
    w, s = name.split("-")[0][1:].split("s")
    return int(w), int(s), ("pad_left" if "pad" in name else "start")


def geometry_of(spec):
    """(window, stride, alignment) of a preset name or a spec dict."""
    if isinstance(spec, dict):
        g = spec["geometry"]
        return g["window"], g["stride"], g.get("alignment", "start")
    return _preset_geometry(spec)


def stride_of(spec):
    return geometry_of(spec)[1]


# Dumps reach past this token by default: a bug that starts at a token index (an index wrapping
# at 256, a grid late from a power of two) shows only in a main-run window that starts there.
DEFAULT_REACH = 256
# Tokens after the last complete window: an open window the kernel must not emit.
OPEN_TOKENS = 3


def default_tokens(spec, reach=DEFAULT_REACH):
    """The default dump length for `spec`: the smallest run whose main run holds a complete window
    starting at or after token `reach`, plus OPEN_TOKENS of an open window. Every power of two
    up to `reach` then has a complete window starting at or after it (the validator's coverage
    check, `theory/dump-format.md`, "Coverage warnings"); e.g. 267 for dsv4-csa and w8s4, 387 for
    dsv4-hca (W = 128)."""
    w, s, alignment = geometry_of(spec)
    first_start = -(w - s) if alignment == "pad_left" else 0
    j = max(0, -(-(reach - first_start) // s))
    return first_start + j * s + w + OPEN_TOKENS


def default_perturb_token(spec, tokens):
    """A token of phase 0 that lies in a window that closes within `tokens` tokens (so K2 sees
    an entry change): 2S when that window closes, else the first token of the last closed
    window, else the last token (no window closes: K2 has nothing to compare either way)."""
    w, s, alignment = geometry_of(spec)
    span = s if alignment == "pad_left" else w
    if tokens < span:
        return max(tokens - 1, 0)
    last_closed = (tokens - span) // s
    return min(2 * s, last_closed * s)


def check_outputs(out):
    """The outputs dict a kernel returned, checked against the names a dump may hold."""
    if "keys" not in out:
        raise ValueError(f"the kernel must return keys (got {sorted(out)})")
    unknown = set(out) - set(OUTPUTS)
    if unknown:
        raise ValueError(f"the kernel returned unknown outputs {sorted(unknown)}; allowed: {OUTPUTS}")
    return out


def write(path, tensors, meta, dtype, npy=False):
    """Write `tensors` (name -> array, values already representable in `dtype`) and the string
    metadata `meta` as a dump: safetensors, or with `npy` a folder of .npy files."""
    if npy:
        if dtype == "bf16":
            raise ValueError("numpy has no bf16: write bf16 dumps as safetensors")
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "metadata.json"), "w") as f:
            json.dump(meta, f, indent=1)
        for k, v in tensors.items():
            np.save(os.path.join(path, k + ".npy"), np.asarray(v, dtype=NP_DTYPES[dtype]))
        return path
    keep = []  # serialize_file reads the buffers through raw pointers: keep them alive
    specs = {}
    for k, v in tensors.items():
        if dtype == "bf16":
            arr = np.ascontiguousarray((round_to(v, "bf16").view(np.uint32) >> 16).astype("<u2"))
            name = "bfloat16"
        else:
            arr = np.ascontiguousarray(v, dtype=np.dtype(NP_DTYPES[dtype]).newbyteorder("<"))
            name = np.dtype(NP_DTYPES[dtype]).name
        keep.append(arr)
        specs[k] = TensorSpec(dtype=name, shape=arr.shape, data_ptr=arr.ctypes.data, data_len=arr.nbytes)
    serialize_file(specs, path, metadata=meta)
    return path


def dump(run, x, params, spec, path, dtype="f32", seed=0, perturb_token=None, npy=False,
         deterministic=True, cache_format=None, position_offset=0):
    """Run `run` on x [B, T, d] (rounded to `dtype`), on the shifted input (S random tokens
    prepended) and on the perturbed input (one token replaced), and write the dump to `path`.

    `params`: phasekv's parameter names -> arrays. `spec`: a preset name or a spec dict.
    `cache_format`: the format dict of quantized cache entries, or None for plain `dtype`.
    `position_offset`: the absolute position p0 of every run's token 0 (token t at RoPE position
    p0 + t; theory/dump-format.md, "Position offset"). `run` must already rotate at p0 + t: this
    only records it (metadata `position_offset`, written when not 0)."""
    if dtype not in NP_DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {sorted(NP_DTYPES)}")
    x = round_to(np.asarray(x, dtype=np.float64), dtype)
    b, t_len, d = x.shape
    s = stride_of(spec)
    rng = np.random.default_rng(seed + 1)
    tensors = {}

    def put(prefix, inp):
        tensors[prefix + "input"] = inp
        for k, v in check_outputs(run(inp)).items():
            tensors[prefix + k] = np.asarray(v)

    put("", x)
    pre = round_to(rng.uniform(-1.0, 1.0, size=(b, s, d)), dtype)
    put("shifted.", np.concatenate((pre, x), axis=1))
    if perturb_token is None:
        perturb_token = default_perturb_token(spec, t_len)
    xp = x.copy()
    xp[:, perturb_token] = round_to(rng.uniform(-2.0, 2.0, size=(b, d)), dtype)
    put("perturbed.", xp)
    for name, p in params.items():
        tensors[name] = np.asarray(p)
    meta = {
        "phasekv.format": "1",
        "d_model": str(d),
        "d_head": str(tensors["keys"].shape[-1]),
        "dtype": dtype,
        "deterministic": "true" if deterministic else "false",
        "perturbed.token": str(perturb_token),
    }
    if isinstance(spec, dict):
        meta["spec"] = json.dumps(spec)
    else:
        meta["preset"] = spec
    store = dtype
    if position_offset:
        meta["position_offset"] = str(position_offset)
    if cache_format is not None:
        meta["cache_format"] = json.dumps(cache_format)
        store = "f32"
    return write(path, tensors, meta, store, npy=npy)


def mislabelled(run, params):
    """The negative control `--wrong-ratio`: keys only (pooled entries and gates have the ratio's
    shape, which the dump format would refuse before any check runs), and a zero gate weight
    when the kernel has none but the label's preset needs one."""
    params = dict(params)
    params.setdefault("gate_k.z", np.zeros_like(params["proj_k"]))
    return (lambda x: {"keys": run(x)["keys"]}), params


def add_adapter_args(ap, d_model=64):
    """The command-line options every adapter of a shipped kernel shares."""
    ap.add_argument("--out", required=True, help="the .safetensors dump to write")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=d_model)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wrong-ratio", action="store_true", help="negative control: label the dump with twice the ratio")
    ap.add_argument("--label-plain", action="store_true", help="negative control: claim the quantized entries are plain")
    ap.add_argument("--validate", metavar="PHASEKV",
                    help="then run PHASEKV kernel validate on the dump; exit with its status")
    ap.add_argument("--position-offset", type=int, default=0, metavar="P0",
                    help="token t sits at RoPE position P0 + t (a multiple of the ratio; e.g. 65536 to check "
                         "YaRN past the original context; theory/dump-format.md, \"Position offset\")")
    ap.add_argument("--offset-unrecorded", action="store_true",
                    help="negative control: the kernel runs from --position-offset but the dump records 0")


def adapter_dump(a, module, preset, x, dtype, cache_format, description):
    """Dump `module` (with `params()`) for an adapter's parsed options `a` (add_adapter_args),
    applying its negative controls, print one line, and validate when asked (exits then)."""
    run, params = (module, module.params())
    if a.wrong_ratio:
        run, params = mislabelled(run, params)
    fmt = None if a.label_plain else cache_format
    if a.offset_unrecorded and not a.position_offset:
        print("error: --offset-unrecorded needs --position-offset P0 > 0 (got 0)", file=sys.stderr)
        sys.exit(2)
    p0 = 0 if a.offset_unrecorded else a.position_offset
    dump(run, x, params, preset, a.out, dtype=dtype, seed=a.seed, cache_format=fmt, position_offset=p0)
    cache = "plain (relabelled)" if a.label_plain and cache_format else (json.dumps(fmt) if fmt else "plain")
    at = f", from position {a.position_offset}{' (recorded as 0)' if a.offset_unrecorded else ''}" \
        if a.position_offset else ""
    print(f"wrote {a.out} ({description} as {preset}, {'x'.join(map(str, x.shape))}, {dtype}, cache {cache}{at})",
          flush=True)
    if a.validate:
        sys.exit(subprocess.call([a.validate, "kernel", "validate", a.out]))
