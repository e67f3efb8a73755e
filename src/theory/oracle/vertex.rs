//! The one-hot vertex: the structure of a gate configuration, the KKT conditions (T-9) and the
//! best chunk-uniform one-hot configuration.

use super::options::{CONCENTRATED, KKT_TOL};
use crate::theory::task::{
    population_loss, population_loss_grad, static_loss_grad, OracleGates, StaticWorkspace, TaskParams,
};
use crate::Result;
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Structure of a gate configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Structure {
    /// `min` over blocks of the largest entry (1 at a vertex; higher = more concentrated).
    /// Not the lab's gate "concentration" (`crate::analysis::gates`, an effective number of
    /// offsets `exp(H)`, lower = more concentrated): a different quantity, a different name.
    pub min_peak: f64,
    /// Every block's largest entry exceeds [`CONCENTRATED`].
    pub one_hot: bool,
    /// In every (head, chunk): argmax of `pV` = argmax of `pK` + 1.
    pub value_follows_key: bool,
    /// In every chunk, the heads' key offsets are distinct.
    pub distinct_heads: bool,
    /// Key offsets (1-based) per head and chunk, `[h][l]`.
    pub key_offsets: Vec<Vec<usize>>,
}

/// Classify gates (argmax offsets, smallest block peak, distinctness).
#[allow(clippy::needless_range_loop)]
pub fn classify(g: &OracleGates) -> Structure {
    let s = g.stride;
    let argmax = |v: &[f64]| {
        v.iter().enumerate().fold((0, f64::NEG_INFINITY), |acc, (i, &x)| if x > acc.1 { (i, x) } else { acc })
    };
    let mut conc = f64::INFINITY;
    let mut follows = true;
    let mut offsets = vec![vec![0; g.chunks]; g.heads];
    for h in 0..g.heads {
        for l in 0..g.chunks {
            let i = g.idx(h, l, 0);
            let (rk, mk) = argmax(&g.key[i..i + s]);
            let (rv, mv) = argmax(&g.value[i..i + s]);
            conc = conc.min(mk).min(mv);
            follows &= rv == rk + 1;
            offsets[h][l] = rk + 1;
        }
    }
    let distinct = (0..g.chunks).all(|l| {
        let mut seen: Vec<usize> = (0..g.heads).map(|h| offsets[h][l]).collect();
        seen.sort_unstable();
        seen.windows(2).all(|w| w[0] != w[1])
    });
    Structure {
        min_peak: conc,
        one_hot: conc > CONCENTRATED,
        value_follows_key: follows,
        distinct_heads: distinct,
        key_offsets: offsets,
    }
}

/// KKT check of the canonical distinct vertex (head `h` on key offset `h`, value `h + 1`,
/// 0-based, in every chunk), eq. (T-9): on a simplex, a vertex `e_j` with gradient `g` is a
/// KKT point iff `g_r - g_j >= 0` for every `r != j`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KktReport {
    /// `min_{blocks, r != j} (g_r - g_j)`; `>= -KKT_TOL` means KKT holds.
    pub min_margin: f64,
    /// Whether the vertex is a KKT point.
    pub holds: bool,
    /// The move that attains the minimum, in words (1-based offsets).
    pub worst_move: String,
}

/// KKT margins of the canonical distinct one-hot vertex (T-9).
pub fn vertex_kkt(p: &TaskParams) -> Result<KktReport> {
    p.validate()?;
    let offsets: Vec<Vec<usize>> = (0..p.heads).map(|h| vec![h; p.chunks]).collect();
    kkt_at(p, &OracleGates::one_hot(p, &offsets)?)
}

/// KKT margins (T-9) of any one-hot gates `g`: in every block the vertex is the argmax entry.
pub fn kkt_at(p: &TaskParams, g: &OracleGates) -> Result<KktReport> {
    let (_, gk, gv) = population_loss_grad(p, g)?;
    let s = p.stride;
    let argmax = |v: &[f64]| {
        v.iter().enumerate().fold((0, f64::NEG_INFINITY), |acc, (i, &x)| if x > acc.1 { (i, x) } else { acc }).0
    };
    let mut min_margin = f64::INFINITY;
    let mut worst = String::new();
    for h in 0..p.heads {
        for l in 0..p.chunks {
            let i = g.idx(h, l, 0);
            let jk = argmax(&g.key[i..i + s]);
            let jv = argmax(&g.value[i..i + s]);
            for (name, grad, j) in [("key", &gk, jk), ("value", &gv, jv)] {
                for r in 0..s {
                    if r == j {
                        continue;
                    }
                    let m = grad[i + r] - grad[i + j];
                    if m < min_margin {
                        min_margin = m;
                        worst =
                            format!("head {} chunk {}: {name} mass from offset {} to {}", h + 1, l + 1, j + 1, r + 1);
                    }
                }
            }
        }
    }
    Ok(KktReport { min_margin, holds: min_margin >= -KKT_TOL, worst_move: worst })
}

/// Largest number of head configurations [`best_one_hot`] enumerates exactly; beyond it, a
/// seeded local search (and the result says it is not exact).
pub const MAX_ONE_HOT: usize = 2_000_000;

/// The best one-hot configuration among all chunk-uniform ones (every head: any key offset,
/// any value offset, the same in every chunk).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestOneHot {
    /// Its loss (T-4).
    pub loss: f64,
    /// Key offset per head (1-based).
    pub key_offsets: Vec<usize>,
    /// Value offset per head (1-based).
    pub value_offsets: Vec<usize>,
    /// How many configurations were evaluated.
    pub enumerated: usize,
    /// Whether every configuration up to a permutation of the heads was evaluated (else: the
    /// best found by a local search, an upper bound on the one-hot minimum).
    pub exact: bool,
    /// KKT margins (T-9) at this vertex.
    pub kkt: KktReport,
}

/// Number of multisets of `k` items from `n` kinds, `C(n + k - 1, k)`, or None above `cap`.
pub(super) fn multisets(n: usize, k: usize, cap: usize) -> Option<usize> {
    let mut c: u128 = 1;
    for i in 0..k {
        c = c * (n + i) as u128 / (i + 1) as u128;
        if c > cap as u128 {
            return None;
        }
    }
    Some(c as usize)
}

/// The best chunk-uniform one-hot configuration. The chunks factor out of such a
/// configuration's loss, which is the static closed form (T-6) with one-hot `pK_h`, `pV_h`,
/// and the heads are interchangeable, so it suffices to evaluate (T-6) once per multiset of
/// `(key, value)` pairs: `C(S^2 + H - 1, H)` of them. When that exceeds [`MAX_ONE_HOT`], a
/// seeded local search (single-head moves to the best pair, from the distinct vertex and from
/// random configurations) gives an upper bound, marked `exact: false`.
pub fn best_one_hot(p: &TaskParams) -> Result<BestOneHot> {
    p.validate()?;
    let (hh, ss) = (p.heads, p.stride);
    let pairs = ss * ss;
    let mut ws = StaticWorkspace::new(hh, ss);
    let (mut key, mut value) = (vec![0.0; hh * ss], vec![0.0; hh * ss]);
    let mut eval = |cfg: &[usize]| {
        key.iter_mut().for_each(|x| *x = 0.0);
        value.iter_mut().for_each(|x| *x = 0.0);
        for (h, &c) in cfg.iter().enumerate() {
            key[h * ss + c / ss] = 1.0;
            value[h * ss + c % ss] = 1.0;
        }
        static_loss_grad(p, &key, &value, &mut ws, None)
    };
    let mut evaluated = 0usize;
    let mut best: Option<(f64, Vec<usize>)> = None;
    let exact = multisets(pairs, hh, MAX_ONE_HOT).is_some();
    if exact {
        // Non-decreasing sequences c_1 <= ... <= c_H over 0..S^2.
        let mut cfg = vec![0usize; hh];
        loop {
            let f = eval(&cfg);
            evaluated += 1;
            if best.as_ref().is_none_or(|(b, _)| f < b - 1e-12) {
                best = Some((f, cfg.clone()));
            }
            let Some(i) = (0..hh).rev().find(|&i| cfg[i] + 1 < pairs) else { break };
            let v = cfg[i] + 1;
            cfg[i..].iter_mut().for_each(|c| *c = v);
        }
    } else {
        let mut rng = ChaCha8Rng::seed_from_u64(0x0E_407);
        let distinct: Vec<usize> = (0..hh).map(|h| (h % (ss - 1)) * ss + h % (ss - 1) + 1).collect();
        for start in 0..8 {
            let mut cfg: Vec<usize> =
                if start == 0 { distinct.clone() } else { (0..hh).map(|_| rng.random_range(0..pairs)).collect() };
            let mut f = eval(&cfg);
            evaluated += 1;
            loop {
                let mut improved = false;
                for h in 0..hh {
                    let keep = cfg[h];
                    let mut best_c = (f, keep);
                    for c in 0..pairs {
                        cfg[h] = c;
                        let g = eval(&cfg);
                        evaluated += 1;
                        if g < best_c.0 - 1e-12 {
                            best_c = (g, c);
                        }
                    }
                    cfg[h] = best_c.1;
                    if best_c.1 != keep {
                        f = best_c.0;
                        improved = true;
                    }
                }
                if !improved {
                    break;
                }
            }
            if best.as_ref().is_none_or(|(b, _)| f < b - 1e-12) {
                best = Some((f, cfg));
            }
        }
    }
    let (_, cfg) = best.expect("at least one configuration");
    let mut g = OracleGates::uniform(p);
    g.key.iter_mut().for_each(|x| *x = 0.0);
    g.value.iter_mut().for_each(|x| *x = 0.0);
    for (h, &c) in cfg.iter().enumerate() {
        for l in 0..p.chunks {
            let i = g.idx(h, l, 0);
            g.key[i + c / ss] = 1.0;
            g.value[i + c % ss] = 1.0;
        }
    }
    // Report the oracle loss (T-4) of the winner (equal to T-6 to rounding).
    let loss = population_loss(p, &g)?;
    let kkt = kkt_at(p, &g)?;
    Ok(BestOneHot {
        loss,
        key_offsets: cfg.iter().map(|c| c / ss + 1).collect(),
        value_offsets: cfg.iter().map(|c| c % ss + 1).collect(),
        enumerated: evaluated,
        exact,
        kkt,
    })
}
