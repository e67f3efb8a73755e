//! The restarts of [`super::theorem1`]: their kinds, starting logits and the plan for given
//! options.

use super::options::OracleOptions;
use crate::theory::task::TaskParams;
use ndarray_rand::rand_distr::{Distribution, StandardNormal};
use rand::prelude::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// How a restart was initialised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StartKind {
    /// Logits `N(0, scale^2)` independently per entry.
    Random {
        /// Standard deviation of the logits.
        scale: f64,
    },
    /// Near a distinct one-hot vertex (logit 4 on the chosen offsets, noise 0.1); offsets
    /// drawn per chunk.
    NearVertex,
    /// Every head in `heads` spreads key mass evenly over its own `pairs` offsets `r` and value
    /// mass over `r + 1`; the other heads sit near one-hot pairs on further offsets (offsets are
    /// shared only when `S - 1` is too small); the same in every chunk.
    Split {
        /// Number of (key, value) pairs each split head is spread over.
        pairs: usize,
        /// The split heads (1-based).
        heads: Vec<usize>,
    },
}

pub(super) fn gaussian(rng: &mut ChaCha8Rng) -> f64 {
    StandardNormal.sample(rng)
}

/// Build the starting logits of one restart.
pub fn start_logits(p: &TaskParams, kind: &StartKind, rng: &mut ChaCha8Rng) -> Vec<f64> {
    let (hh, ll, ss) = (p.heads, p.chunks, p.stride);
    let n = hh * ll * ss;
    let mut theta = vec![0.0; 2 * n];
    let idx = |h: usize, l: usize, r: usize| (h * ll + l) * ss + r;
    match kind {
        StartKind::Random { scale } => theta.iter_mut().for_each(|t| *t = scale * gaussian(rng)),
        StartKind::NearVertex => {
            theta.iter_mut().for_each(|t| *t = 0.1 * gaussian(rng));
            let mut offs: Vec<usize> = (0..ss - 1).collect();
            for l in 0..ll {
                offs.shuffle(rng);
                for h in 0..hh {
                    theta[idx(h, l, offs[h])] += 4.0;
                    theta[n + idx(h, l, offs[h] + 1)] += 4.0;
                }
            }
        }
        StartKind::Split { pairs, heads } => {
            theta.iter_mut().for_each(|t| *t = 0.05 * gaussian(rng));
            let mut offs: Vec<usize> = (0..ss - 1).collect();
            offs.shuffle(rng);
            let k = (*pairs).min(ss - 1).max(1);
            let mut probs_k = vec![vec![1e-3; ss]; hh];
            let mut probs_v = vec![vec![1e-3; ss]; hh];
            // Split heads first, then the others, each taking the next offsets of the shuffled
            // list (wrapping around when there are too few).
            let mut cursor = 0;
            let order: Vec<(usize, usize)> = (0..hh)
                .filter(|h| heads.contains(&(h + 1)))
                .map(|h| (h, k))
                .chain((0..hh).filter(|h| !heads.contains(&(h + 1))).map(|h| (h, 1)))
                .collect();
            for (h, count) in order {
                for _ in 0..count {
                    let r = offs[cursor % offs.len()];
                    cursor += 1;
                    probs_k[h][r] += 1.0 / count as f64;
                    probs_v[h][r + 1] += 1.0 / count as f64;
                }
            }
            for h in 0..hh {
                for l in 0..ll {
                    for r in 0..ss {
                        theta[idx(h, l, r)] += probs_k[h][r].ln();
                        theta[n + idx(h, l, r)] += probs_v[h][r].ln();
                    }
                }
            }
        }
    }
    theta
}

/// The list of restarts [`theorem1`](super::theorem1) runs for `opts`.
pub fn restart_plan(p: &TaskParams, opts: &OracleOptions) -> Vec<StartKind> {
    let mut plan = Vec::new();
    for &scale in &opts.random_scales {
        for _ in 0..opts.random_per_scale {
            plan.push(StartKind::Random { scale });
        }
    }
    for _ in 0..opts.near_vertex {
        plan.push(StartKind::NearVertex);
    }
    for pairs in 2..=opts.max_split_pairs.min(p.stride - 1) {
        for heads in split_subsets(p.heads) {
            for _ in 0..opts.split_per_pairs {
                plan.push(StartKind::Split { pairs, heads: heads.clone() });
            }
        }
    }
    plan
}

/// Up to this many heads, the split starts use every non-empty subset of heads.
pub const MAX_SUBSET_HEADS: usize = 4;

/// The head subsets (1-based) of the split starts: every non-empty subset when
/// `H <= MAX_SUBSET_HEADS`, else each single head, each prefix `{1..k}` (`k >= 2`, which
/// includes all heads).
pub fn split_subsets(heads: usize) -> Vec<Vec<usize>> {
    if heads <= MAX_SUBSET_HEADS {
        (1usize..1 << heads).map(|mask| (0..heads).filter(|h| mask >> h & 1 == 1).map(|h| h + 1).collect()).collect()
    } else {
        (1..=heads).map(|h| vec![h]).chain((2..=heads).map(|k| (1..=k).collect())).collect()
    }
}

/// Number of restarts [`restart_plan`] would list, with saturating arithmetic (so that it can
/// be checked against a limit before anything is allocated).
pub fn plan_len(p: &TaskParams, opts: &OracleOptions) -> usize {
    let pair_counts = (opts.max_split_pairs.min(p.stride.saturating_sub(1))).saturating_sub(1);
    let subsets = if p.heads <= MAX_SUBSET_HEADS { (1usize << p.heads) - 1 } else { 2 * p.heads - 1 };
    opts.random_per_scale
        .saturating_mul(opts.random_scales.len())
        .saturating_add(opts.near_vertex)
        .saturating_add(pair_counts.saturating_mul(subsets).saturating_mul(opts.split_per_pairs))
}

/// Work units [`theorem1`](super::theorem1) reports through its progress callback: one per restart and one per
/// refinement kick.
pub fn planned_steps(p: &TaskParams, opts: &OracleOptions) -> usize {
    restart_plan(p, opts).len() + opts.refine_kicks
}
