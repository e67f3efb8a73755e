//! The window pass of the fast kernel: per chunk, the gate scores and the softmax-pool of every
//! window, compiled for AVX-512, AVX2 or neither (the same operations in the same order, so the
//! same bits), and the polynomial exponential it uses.

use super::chunk::{Ctx, Item, Scratch};
use crate::kernel::post;
use crate::numeric::{gemm, View};

/// The instruction set the window pass is compiled for (detected once per call).
#[derive(Clone, Copy, Debug)]
pub(super) enum Isa {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Generic,
}

impl Isa {
    pub(super) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Isa::Avx2;
            }
        }
        Isa::Generic
    }
}

/// Projections of one chunk, then its window passes.
pub(super) fn run_chunk(ctx: &Ctx, item: Item, scratch: &mut Scratch, isa: Isa) {
    let g = &ctx.spec.geometry;
    let (w, s, d) = (g.window(), g.stride(), ctx.d);
    let width = ctx.p.blocks.width;
    let cn = item.j1 - item.j0;
    scratch.proj.resize(w * cn * width, 0.0);
    for i in 0..w {
        let dst = &mut scratch.proj[i * cn * width..(i + 1) * cn * width];
        let rhs = View::rows(&ctx.p.wcat[ctx.spec.group_of(i)], width);
        let t0 = g.start(item.j0) + i as i64;
        let seq = item.b * ctx.t_len * d;
        if t0 >= 0 {
            // rows t0, t0 + S, ...: a strided view, no copy
            let base = seq + t0 as usize * d;
            let len = (cn - 1) * s * d + d;
            let lhs = View { data: &ctx.x[base..base + len], rs: s * d, cs: 1 };
            gemm(cn, width, d, dst, width, false, lhs, rhs);
        } else {
            // some rows lie before token 0 (pad_left): gather, with zero rows there
            scratch.gather.clear();
            scratch.gather.resize(cn * d, 0.0);
            for jj in 0..cn {
                if let Some(t) = g.token_at(item.j0 + jj, i) {
                    scratch.gather[jj * d..(jj + 1) * d].copy_from_slice(&ctx.x[seq + t * d..seq + (t + 1) * d]);
                }
            }
            let lhs = View::rows(&scratch.gather, d);
            gemm(cn, width, d, dst, width, false, lhs, rhs);
        }
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::detect` saw the CPU feature.
        Isa::Avx512 => unsafe { windows_avx512(ctx, item, scratch) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { windows_avx2(ctx, item, scratch) },
        Isa::Generic => windows(ctx, item, scratch),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn windows_avx512(ctx: &Ctx, item: Item, scratch: &mut Scratch) {
    windows(ctx, item, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn windows_avx2(ctx: &Ctx, item: Item, scratch: &mut Scratch) {
    windows(ctx, item, scratch)
}

/// Softmax-pool and post-processing of every window and head of a chunk.
#[inline(always)]
fn windows(ctx: &Ctx, item: Item, scratch: &mut Scratch) {
    let spec = ctx.spec;
    let g = &spec.geometry;
    let w = g.window();
    let (h, dh, c, dg) = (ctx.h, ctx.dh, ctx.c, ctx.dg);
    let p = ctx.p;
    let blocks = p.blocks;
    let width = blocks.width;
    let cn = item.j1 - item.j0;
    let proj = &scratch.proj[..w * cn * width];
    scratch.m.resize(c, 0.0);
    scratch.s.resize(c, 0.0);
    for jj in 0..cn {
        let j = item.j0 + jj;
        let first = g.first_valid_offset(j);
        if let Some(f) = &p.inv_freq {
            // one table per entry, shared by its heads' keys and values
            post::rope_table(f, spec.entry_position(j), &mut scratch.cos_sin);
        }
        let rows: Vec<&[f32]> = (0..w).map(|i| &proj[(i * cn + jj) * width..(i * cn + jj + 1) * width]).collect();
        for head in 0..h {
            let e = (jj * h + head) * dh;
            let ge = (jj * h + head) * w * c;
            let gk = &mut item.gate_k[ge..ge + w * c];
            let pk = &mut item.pooled_k[e..e + dh];
            let key_gate = blocks.zk.zip(p.bias_k.as_deref()).map(|(z, b)| (z + head * dg, b, head * dg));
            let vk = head * dh;
            pool(&rows, first, key_gate, dg, h * dg, vk, dh, pk, gk, &mut scratch.m, &mut scratch.s);
            let gv = &mut item.gate_v[ge..ge + w * c];
            let pv = &mut item.pooled_v[e..e + dh];
            match blocks.cv {
                Some(cv) => {
                    let value_gate = match (blocks.zv, p.bias_v.as_deref()) {
                        (Some(z), Some(b)) => Some((z + head * dg, b, head * dg)),
                        _ => key_gate, // tied or shared gate: the same weights, computed the same way
                    };
                    pool(&rows, first, value_gate, dg, h * dg, cv + vk, dh, pv, gv, &mut scratch.m, &mut scratch.s);
                }
                None => {
                    pv.copy_from_slice(pk);
                    gv.copy_from_slice(gk);
                }
            }
            let gamma = p.gamma.as_deref().map(|gm| &gm[head * dh..(head + 1) * dh]);
            let cos_sin = p.inv_freq.as_ref().map(|_| &scratch.cos_sin[..]);
            let key = &mut item.keys[e..e + dh];
            key.copy_from_slice(pk);
            post::apply_with(spec, key, gamma, cos_sin);
            let value = &mut item.values[e..e + dh];
            if spec.shared_kv {
                value.copy_from_slice(key);
            } else {
                value.copy_from_slice(pv);
                post::apply_with(spec, value, gamma, cos_sin);
            }
        }
    }
}

/// The streaming softmax-pool of one branch of one window and head. `rows[i]` is the projected
/// row of slot `i`; `gate = (score column, biases [W, bias_stride], bias column)` or `None` for
/// the uniform gate; values at columns `voff..voff + dh`. Writes the pooled entry and the gate
/// weights `[W, c]` (0 on empty slots `< first`); `m` and `s` are scratch of `c` channels.
///
/// Per gate channel: the scores go into the gate rows while the running max is taken; then one
/// pass evaluates `q_i = exp(z_i - m)` once per score, summing `q_i` and `q_i v_i`; last, the
/// sums and the gate rows are divided by `sum q_i`. The scores live only in the chunk buffer and
/// the `[W, c]` gate rows the API returns anyway. (The running-rescale form,
/// `acc <- acc exp(m_old - m_new) + ...`, needs two exponentials per score in its pass and a
/// third for the gate weights the API returns; this form needs one.)
// Indexed loops over equal-length slices: the form the vectoriser turns into SIMD lanes.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
#[inline(always)]
fn pool(
    rows: &[&[f32]],
    first: usize,
    gate: Option<(usize, &[f32], usize)>,
    dg: usize,
    bias_stride: usize,
    voff: usize,
    dh: usize,
    pooled: &mut [f32],
    gates: &mut [f32],
    m: &mut [f32],
    s: &mut [f32],
) {
    let w = rows.len();
    let c = dg.max(1);
    gates[..first * c].fill(0.0);
    let pooled = &mut pooled[..dh];
    let value = |i: usize| seg(rows, i, voff, dh);
    let Some((zoff, bias, boff)) = gate else {
        let u = 1.0 / (w - first) as f32;
        pooled.fill(0.0);
        for i in first..w {
            gates[i * c] = u;
            for (acc, &v) in pooled.iter_mut().zip(value(i)) {
                *acc += u * v;
            }
        }
        return;
    };
    let (m, s) = (&mut m[..c], &mut s[..c]);
    // scores and their running max
    for i in first..w {
        let z = seg(rows, i, zoff, c);
        let b = &bias[i * bias_stride + boff..i * bias_stride + boff + c];
        let g = &mut gates[i * c..(i + 1) * c];
        for e in 0..c {
            let v = z[e] + b[e];
            g[e] = v;
            m[e] = if i == first || v > m[e] { v } else { m[e] };
        }
    }
    // one exponential per score: sum and weighted sum
    s.fill(0.0);
    pooled.fill(0.0);
    for i in first..w {
        let v = value(i);
        let g = &mut gates[i * c..(i + 1) * c];
        if c == dh {
            let (g, m, s, v, pooled) = (&mut g[..dh], &m[..dh], &mut s[..dh], &v[..dh], &mut pooled[..dh]);
            for e in 0..dh {
                let q = exp_nonpositive(g[e] - m[e]);
                g[e] = q;
                s[e] += q;
                pooled[e] += q * v[e];
            }
        } else {
            // one scalar weight per slot
            let q = exp_nonpositive(g[0] - m[0]);
            g[0] = q;
            s[0] += q;
            for (acc, &ve) in pooled.iter_mut().zip(v) {
                *acc += q * ve;
            }
        }
    }
    for se in s.iter_mut() {
        *se = 1.0 / *se;
    }
    if c == dh {
        for (acc, &inv) in pooled.iter_mut().zip(s.iter()) {
            *acc *= inv;
        }
    } else {
        for acc in pooled.iter_mut() {
            *acc *= s[0];
        }
    }
    for i in first..w {
        for (g, &inv) in gates[i * c..(i + 1) * c].iter_mut().zip(s.iter()) {
            *g *= inv;
        }
    }
}

/// `rows[i][off..off + len]`.
#[inline(always)]
fn seg<'a>(rows: &[&'a [f32]], i: usize, off: usize, len: usize) -> &'a [f32] {
    &rows[i][off..off + len]
}

/// `e^x` for `x <= 0` (softmax arguments) in f32, within about 2 ulp: Cody-Waite reduction
/// `x = k ln2 + r`, `|r| <= ln2/2`, and Cephes' degree-6 polynomial for `e^r`. Branch-free so
/// that loops over it vectorise; arguments below -87 give `e^-87` (about 1.6e-38) instead of a
/// subnormal; NaN stays NaN.
#[inline(always)]
pub fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding and subtracting rounds to an integer
    let xc = if x > -87.0 { x } else { -87.0 };
    let k = (xc * LOG2E + ROUND) - ROUND;
    let r = (xc - k * LN2_HI) - k * LN2_LO;
    let mut y = 1.987_569_1e-4f32;
    y = y * r + 1.398_199_9e-3;
    y = y * r + 8.333_452e-3;
    y = y * r + 4.166_579_6e-2;
    y = y * r + 1.666_666_5e-1;
    y = y * r + 0.5; // Cephes: 5.0000001201e-1, which is 0.5 in f32
    y = y * (r * r) + r + 1.0;
    let scale = f32::from_bits(((k as i32 + 127) as u32) << 23);
    let out = y * scale;
    if x.is_nan() {
        x
    } else {
        out
    }
}
