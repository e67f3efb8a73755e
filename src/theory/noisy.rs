//! Theorem 1 at `eps > 0` (theory/induction-model.md §3.4): with a random vocabulary (T-1b)
//! contexts differ, so the oracle minimises per context. For one context the literal loss
//! (T-2, T-3) averaged over its `L (S-1)` queries depends on the embeddings only through the
//! Gram matrix `G = X^T X`, which gives the context loss (T-12) and its gradient (T-12g);
//! argmin's L-BFGS minimises it from seeded restarts, and the minimiser is classified
//! (concentrated? value = key + 1? distinct heads?). Contexts are drawn by Monte Carlo.

#![allow(clippy::needless_range_loop)] // index loops mirror (T-12), (T-12g)

use super::oracle::{classify, minimise, restart_plan, start_logits, OracleOptions, Structure};
use super::task::{sample_context, softmax_into, softmax_pullback, OracleGates, TaskParams};
use super::vocab::Vocabulary;
use crate::{Error, Result};
use argmin::core::{CostFunction, Gradient};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The per-context problem: gates of one context, loss (T-12) of the literal model.
#[derive(Debug, Clone)]
pub struct ContextProblem {
    /// Task parameters.
    pub params: TaskParams,
    /// `G[y, ctx(j)]` for every vocabulary token `y` and context position `j`, row-major
    /// `N x (L S)`.
    gram_ctx: Vec<f64>,
    /// Context token ids, `[l][r]` row-major.
    context: Vec<usize>,
}

impl ContextProblem {
    /// Problem for `context` (L S distinct token ids) under `vocab`.
    pub fn new(params: TaskParams, vocab: &Vocabulary, context: Vec<usize>) -> Result<Self> {
        params.validate()?;
        let m = params.chunks * params.stride;
        if vocab.len() != params.vocab || context.len() != m || context.iter().any(|&t| t >= params.vocab) {
            return Err(Error::shape(
                "context",
                format!("{m} token ids below N = {}", params.vocab),
                format!("{} ids, vocabulary of {}", context.len(), vocab.len()),
            ));
        }
        let g = vocab.gram();
        let mut gram_ctx = vec![0.0; params.vocab * m];
        for y in 0..params.vocab {
            for (j, &t) in context.iter().enumerate() {
                gram_ctx[y * m + j] = g[(y, t)];
            }
        }
        Ok(ContextProblem { params, gram_ctx, context })
    }

    /// The context's token ids.
    pub fn context(&self) -> &[usize] {
        &self.context
    }

    /// Context loss (T-12): the literal loss averaged over the context's queries, and its
    /// gradient (T-12g) with respect to the gates (layout of [`OracleGates`]).
    pub fn loss_grad(&self, g: &OracleGates, want_grad: bool) -> (f64, Vec<f64>, Vec<f64>) {
        let p = &self.params;
        let (hh, ll, ss, nn) = (p.heads, p.chunks, p.stride, p.vocab);
        let m = ll * ss;
        let n = hh * ll * ss;
        let (mut gk, mut gv) = if want_grad { (vec![0.0; n], vec![0.0; n]) } else { (vec![], vec![]) };
        let mut a = vec![0.0; hh * ll];
        let mut logits = vec![0.0; ll];
        let mut coef = vec![0.0; m]; // sum_h a_{h,l} pV_{h,l}(r) per context position
        let mut z = vec![0.0; nn];
        let mut w = vec![0.0; m];
        let mut total = 0.0;
        for lq in 0..ll {
            for rq in 0..ss - 1 {
                let qi = lq * ss + rq;
                let q = self.context[qi];
                let target = self.context[qi + 1];
                // (T-12a) attention logits beta q.k_{h,l} = beta sum_r pK_{h,l}(r) G[q, x_{l,r}]
                for h in 0..hh {
                    for l in 0..ll {
                        logits[l] = p.beta
                            * (0..ss).map(|r| g.key[g.idx(h, l, r)] * self.gram_ctx[q * m + l * ss + r]).sum::<f64>();
                    }
                    softmax_into(&logits, &mut a[h * ll..(h + 1) * ll]);
                }
                for l in 0..ll {
                    for r in 0..ss {
                        coef[l * ss + r] = (0..hh).map(|h| a[h * ll + l] * g.value[g.idx(h, l, r)]).sum();
                    }
                }
                // (T-12b) z_y = gamma y.o = gamma sum_j coef_j G[y, ctx(j)]
                let mut zmax = f64::NEG_INFINITY;
                for (y, zy) in z.iter_mut().enumerate() {
                    *zy = p.gamma
                        * coef.iter().zip(&self.gram_ctx[y * m..(y + 1) * m]).map(|(c, gv)| c * gv).sum::<f64>();
                    zmax = zmax.max(*zy);
                }
                let zs: f64 = z.iter().map(|v| (v - zmax).exp()).sum();
                let lse = zmax + zs.ln();
                total += lse - z[target];
                if !want_grad {
                    continue;
                }
                // (T-12g) D_y = gamma (pi_y - 1{y = y*}); W_j = sum_y D_y G[y, ctx(j)]
                w.iter_mut().for_each(|x| *x = 0.0);
                for y in 0..nn {
                    let d = p.gamma * ((z[y] - lse).exp() - if y == target { 1.0 } else { 0.0 });
                    for (wj, gy) in w.iter_mut().zip(&self.gram_ctx[y * m..(y + 1) * m]) {
                        *wj += d * gy;
                    }
                }
                for h in 0..hh {
                    let mut sbar = 0.0;
                    let mut s = vec![0.0; ll];
                    for l in 0..ll {
                        let al = a[h * ll + l];
                        for r in 0..ss {
                            let i = g.idx(h, l, r);
                            gv[i] += al * w[l * ss + r];
                            s[l] += g.value[i] * w[l * ss + r];
                        }
                        sbar += al * s[l];
                    }
                    for l in 0..ll {
                        let dm = p.beta * a[h * ll + l] * (s[l] - sbar);
                        for r in 0..ss {
                            gk[g.idx(h, l, r)] += dm * self.gram_ctx[q * m + l * ss + r];
                        }
                    }
                }
            }
        }
        let nq = (ll * (ss - 1)) as f64;
        gk.iter_mut().for_each(|x| *x /= nq);
        gv.iter_mut().for_each(|x| *x /= nq);
        (total / nq, gk, gv)
    }

    fn gates(&self, theta: &[f64]) -> OracleGates {
        super::oracle::gates_from_logits(&self.params, theta)
    }
}

impl CostFunction for ContextProblem {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, theta: &Vec<f64>) -> std::result::Result<f64, argmin::core::Error> {
        let f = self.loss_grad(&self.gates(theta), false).0;
        if !f.is_finite() {
            return Err(argmin::core::Error::msg(format!("non-finite context loss {f}")));
        }
        Ok(f)
    }
}

impl Gradient for ContextProblem {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, theta: &Vec<f64>) -> std::result::Result<Vec<f64>, argmin::core::Error> {
        let g = self.gates(theta);
        let (_, mut gk, mut gv) = self.loss_grad(&g, true);
        let s = self.params.stride;
        for b in 0..g.key.len() / s {
            softmax_pullback(&g.key[b * s..(b + 1) * s], &mut gk[b * s..(b + 1) * s]);
            softmax_pullback(&g.value[b * s..(b + 1) * s], &mut gv[b * s..(b + 1) * s]);
        }
        gk.extend_from_slice(&gv);
        if gk.iter().any(|x| !x.is_finite()) {
            return Err(argmin::core::Error::msg("non-finite context gradient"));
        }
        Ok(gk)
    }
}

/// The outcome for one context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextResult {
    /// Best loss over restarts.
    pub best_loss: f64,
    /// Loss of the canonical distinct vertex (head `h` on offset `h`) in this context.
    pub vertex_loss: f64,
    /// Smallest loss over the distinct one-hot vertices searched (all per-chunk assignments
    /// when there are at most [`MAX_VERTICES`], else the chunk-uniform ones).
    pub best_vertex_loss: f64,
    /// Some restart went below every distinct vertex (beyond 1e-9): concentration is not
    /// optimal in this context.
    pub vertex_beaten: bool,
    /// Loss of the best minimiser rounded to its argmax vertex.
    pub rounded_loss: f64,
    /// Structure of the best minimiser.
    pub structure: Structure,
    /// L-BFGS runs of this context stopped by a non-finite loss or gradient (recorded as
    /// failed; their best finite point still counts).
    #[serde(default)]
    pub failed_restarts: usize,
}

/// Largest number of distinct one-hot vertices enumerated per context.
pub const MAX_VERTICES: usize = 4096;

/// Injective maps heads -> key offsets `0..S-2` (0-based).
fn injective_maps(heads: usize, offsets: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = vec![vec![]];
    for _ in 0..heads {
        let mut next = Vec::new();
        for m in &out {
            for o in (0..offsets).filter(|o| !m.contains(o)) {
                let mut e = m.clone();
                e.push(o);
                next.push(e);
            }
        }
        out = next;
    }
    out
}

/// Distinct one-hot vertices to search, as `offsets[h][l]`. When there are more than
/// [`MAX_VERTICES`] injective head-to-offset maps, the canonical one and seeded random ones.
fn vertex_candidates(p: &TaskParams, seed: u64) -> Vec<Vec<Vec<usize>>> {
    let count = (0..p.heads).try_fold(1usize, |acc, i| acc.checked_mul(p.stride - 1 - i));
    let maps = if count.is_some_and(|c| c <= MAX_VERTICES) {
        injective_maps(p.heads, p.stride - 1)
    } else {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7E47);
        let mut offs: Vec<usize> = (0..p.stride - 1).collect();
        let mut maps = vec![(0..p.heads).collect::<Vec<usize>>()];
        for _ in 1..MAX_VERTICES {
            offs.shuffle(&mut rng);
            maps.push(offs[..p.heads].to_vec());
        }
        maps
    };
    let total = (maps.len() as f64).powi(p.chunks as i32);
    let mut per_chunk: Vec<Vec<usize>> = vec![vec![]];
    if total <= MAX_VERTICES as f64 {
        for _ in 0..p.chunks {
            per_chunk = per_chunk
                .into_iter()
                .flat_map(|c| (0..maps.len()).map(move |i| [c.clone(), vec![i]].concat()))
                .collect();
        }
    } else {
        per_chunk = (0..maps.len()).map(|i| vec![i; p.chunks]).collect();
    }
    per_chunk
        .into_iter()
        .map(|choice| (0..p.heads).map(|h| choice.iter().map(|&i| maps[i][h]).collect()).collect())
        .collect()
}

/// Summary of Theorem 1 at one `eps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoisyReport {
    /// Task parameters.
    pub params: TaskParams,
    /// The achieved eps of the vocabulary.
    pub eps: f64,
    /// Embedding dimension.
    pub dim: usize,
    /// Fraction of contexts whose minimiser is one-hot (every block peak > 0.9) with value = key + 1.
    pub concentrated_fraction: f64,
    /// Fraction of contexts whose minimiser is concentrated with distinct heads in every chunk.
    pub distinct_fraction: f64,
    /// Fraction of contexts in which some non-vertex point beats every distinct vertex.
    pub beaten_fraction: f64,
    /// Per-context results.
    pub contexts: Vec<ContextResult>,
}

/// Per-context minimisation for `contexts` Monte Carlo contexts under `vocab` (T-12).
/// `progress` is called after each context.
pub fn theorem1_eps(
    p: &TaskParams,
    vocab: &Vocabulary,
    contexts: usize,
    opts: &OracleOptions,
    mut progress: impl FnMut(),
) -> Result<NoisyReport> {
    p.validate()?;
    if contexts == 0 {
        return Err(Error::invalid("contexts", "need at least 1 context, got 0"));
    }
    let plan = restart_plan(p, opts);
    if plan.is_empty() {
        return Err(Error::invalid("restarts", "the restart plan is empty; ask for at least one restart"));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x5EED_C0DE);
    let offsets: Vec<Vec<usize>> = (0..p.heads).map(|h| vec![h; p.chunks]).collect();
    let vertex = OracleGates::one_hot(p, &offsets)?;
    let candidates = vertex_candidates(p, opts.seed);
    let mut results = Vec::with_capacity(contexts);
    for c in 0..contexts {
        let ctx = sample_context(p, &mut rng);
        let problem = ContextProblem::new(*p, vocab, ctx)?;
        // The best distinct vertex of this context, also used as one more (near-vertex) start.
        let mut best_vertex = (f64::INFINITY, 0usize);
        for (i, offs) in candidates.iter().enumerate() {
            let l = problem.loss_grad(&OracleGates::one_hot(p, offs)?, false).0;
            if l < best_vertex.0 {
                best_vertex = (l, i);
            }
        }
        let n = p.heads * p.chunks * p.stride;
        let mut vstart = vec![0.0; 2 * n];
        let vg = OracleGates::one_hot(p, &candidates[best_vertex.1])?;
        for i in 0..n {
            vstart[i] = 6.0 * vg.key[i];
            vstart[n + i] = 6.0 * vg.value[i];
        }
        let mut failed_restarts = 0;
        let mut best: Option<(f64, Vec<f64>)> = None;
        let mut consider = |m: super::oracle::Minimised, best: &mut Option<(f64, Vec<f64>)>| {
            failed_restarts += usize::from(m.error.is_some());
            if m.loss.is_finite() && best.as_ref().is_none_or(|(b, _)| m.loss < *b) {
                *best = Some((m.loss, m.theta));
            }
        };
        consider(minimise(&problem, vstart, opts.max_iters), &mut best);
        for (i, kind) in plan.iter().enumerate() {
            let mut r = ChaCha8Rng::seed_from_u64(opts.seed.wrapping_mul(7_919).wrapping_add((c * 1000 + i) as u64));
            let init = start_logits(p, kind, &mut r);
            consider(minimise(&problem, init, opts.max_iters), &mut best);
        }
        let (best_loss, theta) = best.ok_or_else(|| Error::Numerical {
            what: format!("context {}", c + 1),
            reason: "every L-BFGS run failed with a non-finite loss".into(),
        })?;
        let g = problem.gates(&theta);
        let structure = classify(&g);
        let rounded_offsets: Vec<Vec<usize>> =
            structure.key_offsets.iter().map(|row| row.iter().map(|&o| (o - 1).min(p.stride - 2)).collect()).collect();
        let rounded = OracleGates::one_hot(p, &rounded_offsets)?;
        results.push(ContextResult {
            best_loss,
            vertex_loss: problem.loss_grad(&vertex, false).0,
            best_vertex_loss: best_vertex.0,
            vertex_beaten: best_loss < best_vertex.0 - 1e-9,
            rounded_loss: problem.loss_grad(&rounded, false).0,
            structure,
            failed_restarts,
        });
        progress();
    }
    let n = results.len() as f64;
    let conc = results.iter().filter(|r| r.structure.one_hot && r.structure.value_follows_key).count() as f64 / n;
    let dist = results
        .iter()
        .filter(|r| r.structure.one_hot && r.structure.value_follows_key && r.structure.distinct_heads)
        .count() as f64
        / n;
    let beaten = results.iter().filter(|r| r.vertex_beaten).count() as f64 / n;
    Ok(NoisyReport {
        params: *p,
        eps: vocab.eps,
        dim: vocab.dim(),
        concentrated_fraction: conc,
        distinct_fraction: dist,
        beaten_fraction: beaten,
        contexts: results,
    })
}
