"""PyTorch implementations of phasekv compressors, for `phasekv_dump.py`.

The interface a dumpable compressor implements (see README, "Validating a kernel from elsewhere"):

- a `torch.nn.Module` whose `state_dict()` names are phasekv's parameter names, in phasekv's
  layout: `gate_k.z [G, d_g, d]`, `gate_k.b [W, d_g]`, `gate_v.z`, `gate_v.b`,
  `proj_k [G, d_h, d]`, `proj_v [G, d_h, d]`, `gamma [d_h]` (only those the spec has);
- `phasekv_spec()` returning a preset name (str) or a dict of every knob (phasekv's JSON spec);
- `forward(x)` with `x: [B, T, d]` returning a dict with `keys [B, n, d_h]`, `values` (omit for
  shared_kv kernels) and optionally `pooled_keys`, `pooled_values [B, n, d_h]`,
  `gate_k`, `gate_v [B, n, W, c]` (c = d_g, or 1 for uniform gates);
- optionally a `position_offset` attribute (int, default 0): the absolute position p0 of token
  0, so entries rotate at p0 + their position (`phasekv_dump.dump(..., position_offset=p0)`
  sets it and records it in the dump; a module without it refuses an offset).

`W8S4` and `Dsv4Csa` implement the presets, `W8S8Offset4` one head of a staggered preset (a grid
offset, `w8s8@o4`); `W8S4OffByOne` is deliberately wrong (every window
starts one token late) and must fail validation with the phase signature.
"""
import copy
import math

import torch


def inv_frequencies(r, theta=10000.0, yarn=None):
    """Inverse frequency of each rotated pair (phasekv's RopeSpec::inv_frequencies):
    theta^(-2k/r), and with yarn = (factor, original_max_position, beta_fast, beta_slow) the
    DeepSeek-V4 YaRN blend (pairs below the correction range keep their frequency, pairs above
    it are divided by factor, a linear ramp in between; no magnitude scaling)."""
    k = torch.arange(r // 2, dtype=torch.float64)
    f = theta ** (-2.0 * k / r)
    if yarn is None:
        return f
    factor, orig, beta_fast, beta_slow = yarn

    def dim_of(rot):
        return r * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(dim_of(beta_fast)), 0)
    high = min(math.ceil(dim_of(beta_slow)), r - 1)
    if low == high:
        high += 0.001
    ramp = ((k - low) / (high - low)).clamp(0, 1)
    return f / factor * ramp + f * (1 - ramp)


# DeepSeek-V4's compressed layers: compress_rope_theta and rope_scaling of the released config.
DSV4_THETA = 160000.0
DSV4_YARN = (16.0, 65536, 32.0, 1.0)


def rope(u, positions, r, theta=10000.0, yarn=None):
    """Interleaved-pair RoPE on the last r channels at the given positions (phasekv's
    post::rope: pair (2k, 2k+1) of the rotated slice, angle pos * inv_freq[k])."""
    if r == 0:
        return u
    d = u.shape[-1]
    ang = positions[:, None].to(torch.float64) * inv_frequencies(r, theta, yarn)
    c, s = ang.cos().to(u.dtype), ang.sin().to(u.dtype)
    x0, x1 = u[..., d - r :: 2], u[..., d - r + 1 :: 2]
    rot = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
    return torch.cat((u[..., : d - r], rot), dim=-1)


class Gate(torch.nn.Module):
    def __init__(self, groups, width, window, d, gen, scale):
        super().__init__()
        self.z = torch.nn.Parameter((torch.rand(groups, width, d, generator=gen, dtype=torch.float64) * 2 - 1) * scale)
        self.b = torch.nn.Parameter(torch.rand(window, width, generator=gen, dtype=torch.float64) * 2 - 1)


class GatedCompressor(torch.nn.Module):
    """The gated kernel family (paper eqs. 1-2) with vector gates, written in the obvious
    gather-then-einsum form. Subclasses fix the geometry and the knobs."""

    window, stride, pad_left, shared_kv, rms_norm = 8, 4, False, False, False
    group_map = None  # None: per offset
    rope_fraction = 1  # rotate the last d_h / rope_fraction channels (1: all)
    position = "first"  # first | stride_start
    start_shift = 0  # the bug knob: every window starts this many tokens late
    offset = 0  # grid offset o in 0..S (theory/kernels.md, "Staggered grids"): windows move by o - S
    #             when o > 0, so one leading window holds tokens 0..o-1 (its earlier slots empty)
    theta, yarn = 10000.0, None  # RoPE base and YaRN (factor, original length, beta_fast, beta_slow)
    position_offset = 0  # absolute position p0 of token 0: entries rotate at p0 + their position

    def __init__(self, d_model, d_head, seed=0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        w = self.window
        groups = w if self.group_map is None else max(self.group_map) + 1
        scale = 1.0 / math.sqrt(d_model)
        self.d_head = d_head
        self.gate_k = Gate(groups, d_head, w, d_model, gen, scale)
        if not self.shared_kv:
            self.gate_v = Gate(groups, d_head, w, d_model, gen, scale)
        self.proj_k = torch.nn.Parameter(
            (torch.rand(groups, d_head, d_model, generator=gen, dtype=torch.float64) * 2 - 1) * scale)
        if not self.shared_kv:
            self.proj_v = torch.nn.Parameter(
                (torch.rand(groups, d_head, d_model, generator=gen, dtype=torch.float64) * 2 - 1) * scale)
        if self.rms_norm:
            self.gamma = torch.nn.Parameter(1.0 + 0.1 * torch.rand(d_head, generator=gen, dtype=torch.float64))

    def groups(self):
        return list(range(self.window)) if self.group_map is None else self.group_map

    def slots(self, t_len):
        """Token index of every slot [n, W] (-1: empty) and the number of windows."""
        w, s = self.window, self.stride
        lead = self.offset - s if self.offset > 0 else 0
        t_grid = t_len - lead  # the unshifted grid's windows, complete in T - lead tokens
        if self.pad_left:
            n = t_grid // s
            start = torch.arange(n) * s + s - w + lead
        else:
            n = (t_grid - w) // s + 1 if t_grid >= w else 0
            start = torch.arange(n) * s + lead
        idx = start[:, None] + torch.arange(w)[None, :] + self.start_shift
        idx = torch.where((idx >= 0) & (idx < t_len), idx, torch.full_like(idx, -1))
        return idx, start, n

    def branch(self, xw, valid, gate, proj):
        g = torch.tensor(self.groups())
        logits = torch.einsum("bnwd,wcd->bnwc", xw, gate.z[g]) + gate.b
        logits = logits.masked_fill(~valid[None, :, :, None], float("-inf"))
        a = logits.softmax(dim=2)
        pooled = (a * torch.einsum("bnwd,wed->bnwe", xw, proj[g])).sum(2)
        return a, pooled

    def post(self, u, positions):
        if self.rms_norm:
            u = self.gamma * (u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + 1e-6))
        dh = u.shape[-1]
        r = dh if self.rope_fraction == 1 else min(max(dh // self.rope_fraction, 2), dh)
        return rope(u, positions, r & ~1, self.theta, self.yarn)

    def forward(self, x):
        b, t_len, d = x.shape
        idx, start, n = self.slots(t_len)
        valid = idx >= 0
        xw = x[:, idx.clamp(min=0)] * valid[None, :, :, None].to(x.dtype)  # [B, n, W, d]
        ak, pk = self.branch(xw, valid, self.gate_k, self.proj_k)
        lead = self.offset - self.stride if self.offset > 0 else 0
        stride_start = (torch.arange(n) * self.stride + lead).clamp(min=0)
        positions = (start.clamp(min=0) if self.position == "first" else stride_start) + self.position_offset
        out = {"keys": self.post(pk, positions), "pooled_keys": pk, "gate_k": ak}
        if not self.shared_kv:
            av, pv = self.branch(xw, valid, self.gate_v, self.proj_v)
            out.update(values=self.post(pv, positions), pooled_values=pv, gate_v=av)
        return out


class W8S4(GatedCompressor):
    """phasekv preset w8s4: W=8, S=4, start alignment, vector gates, per-offset parameters,
    untied, separate K/V, RoPE on every channel at the window's first token."""

    def phasekv_spec(self):
        return "w8s4"


class Dsv4Csa(GatedCompressor):
    """phasekv preset dsv4-csa: W=8, S=4, pad_left, groups {prev, cur}, shared K/V, RMSNorm,
    RoPE on the last d_h/8 channels at the stride start (DeepSeek-V4's 4w), base 160000 with
    the released YaRN."""

    pad_left, shared_kv, rms_norm = True, True, True
    group_map = [0, 0, 0, 0, 1, 1, 1, 1]
    rope_fraction, position = 8, "stride_start"
    theta, yarn = DSV4_THETA, DSV4_YARN

    def phasekv_spec(self):
        return "dsv4-csa"


class W8S4OffByOne(W8S4):
    """w8s4 with a planted bug: every window starts one token late (slots past the end are
    empty). Validation must fail, with the phase profile best at displacement +1."""

    start_shift = 1


class W8S8Offset4(GatedCompressor):
    """phasekv `w8s8@o4`: head 1 of `w8s8-stagger-heads` (the paper's w8s8 kernel on the grid
    offset by S/2 = 4): windows cover 4..11, 12..19, ..., and a leading window holds tokens 0..3
    in its last four slots (the first four empty)."""

    window, stride, offset = 8, 8, 4

    def phasekv_spec(self):
        return "w8s8@o4"


class Dsv4CsaF32(Dsv4Csa):
    """dsv4-csa as a careful low-precision kernel: in whatever dtype it is held, it computes in
    f32 from its (already rounded) inputs and parameters and rounds only its outputs, the least
    rounding a stored bf16 entry can have."""

    last_window_bf16 = False

    def branch(self, xw, valid, gate, proj):
        a, pooled = super().branch(xw, valid, gate, proj)
        if self.last_window_bf16:
            # The planted bug: the last window's weighted sum accumulated in bf16, term by term.
            g = torch.tensor(self.groups())
            terms = a * torch.einsum("bnwd,wed->bnwe", xw, proj[g])
            acc = torch.zeros_like(terms[:, -1, 0]).to(torch.bfloat16)
            for w in range(terms.shape[2]):
                acc = (acc.float() + terms[:, -1, w]).to(torch.bfloat16)
            pooled = pooled.clone()
            pooled[:, -1] = acc.to(pooled.dtype)
        return a, pooled

    def forward(self, x):
        f32 = copy.deepcopy(self).float()
        out = GatedCompressor.forward(f32, x.float())
        return {k: v.to(x.dtype) for k, v in out.items()}


class Dsv4CsaLastWindowBf16(Dsv4CsaF32):
    """Negative control (issue 41): Dsv4CsaF32 with its last window's sum accumulated in bf16.
    The entry errs about twice the kernel's own level, which the whole output's RMS hides; the
    localized-error row of K13 must fail at d_h 512 in bf16."""

    last_window_bf16 = True


KERNELS = {"w8s4": W8S4, "dsv4-csa": Dsv4Csa, "w8s4-off-by-one": W8S4OffByOne, "w8s8-offset4": W8S8Offset4,
           "dsv4-csa-f32": Dsv4CsaF32, "dsv4-csa-last-bf16": Dsv4CsaLastWindowBf16}
