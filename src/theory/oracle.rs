//! Theorem 1 (theory/induction-model.md §3): minimise the population loss (T-4) over the
//! oracle class with argmin's L-BFGS (More-Thuente line search) on softmax-parameterised
//! simplices, from many seeded restarts (random at several scales, uniform plus noise,
//! near-vertex, and structured "split over k pairs" starts); classify the best minimiser and
//! compare it with `F_1` (T-7) and with the KKT conditions at the one-hot vertex (T-9).

use super::critical::{classify_point, PointClass, PointLabel};
use super::task::{
    one_hot_loss, population_loss, population_loss_grad, softmax_into, softmax_pullback, static_loss_grad, OracleGates,
    StaticWorkspace, TaskParams,
};
use crate::{Error, Result};
use argmin::core::{CostFunction, Executor, Gradient, State};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
use ndarray_rand::rand_distr::{Distribution, StandardNormal};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// Absolute tolerance below `F_1` that counts as "beaten" (spec §3: 1e-9).
pub const BEATEN_TOL: f64 = 1e-9;
/// KKT margins above `-KKT_TOL` count as satisfied.
pub const KKT_TOL: f64 = 1e-9;
/// A block (one `pK_{h,l}` or `pV_{h,l}`) counts as concentrated when its largest entry
/// exceeds this.
pub const CONCENTRATED: f64 = 0.9;

/// The oracle problem as an argmin cost function: parameters are the logits
/// `[thetaK (H*L*S), thetaV (H*L*S)]`, `pK_{h,l} = softmax(thetaK_{h,l})` (T-8).
#[derive(Debug, Clone)]
pub struct OracleProblem {
    /// Task parameters (validated on construction).
    pub params: TaskParams,
}

impl OracleProblem {
    /// A validated problem.
    pub fn new(params: TaskParams) -> Result<Self> {
        params.validate()?;
        Ok(OracleProblem { params })
    }

    /// Number of logits, `2 H L S`.
    pub fn dim(&self) -> usize {
        2 * self.params.heads * self.params.chunks * self.params.stride
    }

    /// Gates from logits (softmax per block).
    pub fn gates(&self, theta: &[f64]) -> OracleGates {
        gates_from_logits(&self.params, theta)
    }

    /// Loss and gradient with respect to the logits.
    pub fn loss_and_grad(&self, theta: &[f64]) -> Result<(f64, Vec<f64>)> {
        let g = self.gates(theta);
        let (f, mut gk, mut gv) = population_loss_grad(&self.params, &g)?;
        if gk.iter().chain(&gv).any(|x| !x.is_finite()) {
            return Err(Error::Numerical { what: "oracle gradient".into(), reason: "non-finite entry".into() });
        }
        let s = self.params.stride;
        for b in 0..g.key.len() / s {
            softmax_pullback(&g.key[b * s..(b + 1) * s], &mut gk[b * s..(b + 1) * s]);
            softmax_pullback(&g.value[b * s..(b + 1) * s], &mut gv[b * s..(b + 1) * s]);
        }
        gk.extend_from_slice(&gv);
        Ok((f, gk))
    }
}

fn to_argmin(e: Error) -> argmin::core::Error {
    argmin::core::Error::msg(e.to_string())
}

impl CostFunction for OracleProblem {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, theta: &Vec<f64>) -> std::result::Result<f64, argmin::core::Error> {
        population_loss(&self.params, &self.gates(theta)).map_err(to_argmin)
    }
}

impl Gradient for OracleProblem {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, theta: &Vec<f64>) -> std::result::Result<Vec<f64>, argmin::core::Error> {
        self.loss_and_grad(theta).map(|(_, g)| g).map_err(to_argmin)
    }
}

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

/// Structure of a gate configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Structure {
    /// `min` over blocks of the largest entry (1 at a vertex).
    pub concentration: f64,
    /// Every block's largest entry exceeds [`CONCENTRATED`].
    pub one_hot: bool,
    /// In every (head, chunk): argmax of `pV` = argmax of `pK` + 1.
    pub value_follows_key: bool,
    /// In every chunk, the heads' key offsets are distinct.
    pub distinct_heads: bool,
    /// Key offsets (1-based) per head and chunk, `[h][l]`.
    pub key_offsets: Vec<Vec<usize>>,
}

/// Classify gates (argmax offsets, concentration, distinctness).
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
        concentration: conc,
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
fn multisets(n: usize, k: usize, cap: usize) -> Option<usize> {
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

/// Options for [`theorem1`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OracleOptions {
    /// Random restarts per scale in `random_scales`.
    pub random_per_scale: usize,
    /// Logit scales of random restarts (small scales are "uniform plus noise").
    pub random_scales: Vec<f64>,
    /// Near-vertex restarts.
    pub near_vertex: usize,
    /// Largest number of pairs in the split starts (`2..=max_split_pairs`, capped at `S-1`).
    pub max_split_pairs: usize,
    /// Split restarts per (pair count, subset of split heads); see [`split_subsets`].
    pub split_per_pairs: usize,
    /// L-BFGS iteration cap.
    pub max_iters: u64,
    /// Seed of all restarts.
    pub seed: u64,
    /// Saddle escapes: a restart that ends unconcentrated is perturbed (logit noise 0.3) and
    /// re-minimised up to this many times, keeping a lower end point. L-BFGS can stop on the
    /// symmetric critical points of structured starts; this tells saddles from minima.
    pub saddle_escapes: usize,
    /// Local refinement of the best end point: this many kicks (logit noise 0.3 and 1.0 in
    /// turn), each re-minimised, keeping a lower end point.
    #[serde(default = "default_refine_kicks")]
    pub refine_kicks: usize,
}

fn default_refine_kicks() -> usize {
    4
}

impl Default for OracleOptions {
    fn default() -> Self {
        OracleOptions {
            random_per_scale: 2,
            random_scales: vec![0.01, 0.3, 1.0, 3.0],
            near_vertex: 2,
            max_split_pairs: 3,
            split_per_pairs: 2,
            max_iters: 600,
            seed: 0,
            saddle_escapes: 2,
            refine_kicks: default_refine_kicks(),
        }
    }
}

/// One restart's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restart {
    /// Initialisation.
    pub start: StartKind,
    /// Final loss.
    pub loss: f64,
    /// `loss - F_1`.
    pub gap: f64,
    /// L-BFGS iterations used (all runs of this restart).
    pub iters: u64,
    /// Saddle escapes that lowered the loss.
    pub escapes_used: usize,
    /// Structure of the final gates.
    pub structure: Structure,
    /// What the end point is: local minimum, saddle or not converged (T-13).
    pub label: PointLabel,
    /// The numbers behind the label (None when the classification itself failed).
    pub classification: Option<PointClass>,
    /// Why the optimiser stopped early (a non-finite loss or gradient), if it did; the end
    /// point is then the best finite point it evaluated and the label is `NotConverged`.
    pub error: Option<String>,
    /// The end point's gates.
    pub end_gates: OracleGates,
}

/// How many restarts ended with each label.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelCounts {
    /// Local minima.
    pub local_min: usize,
    /// Saddles.
    pub saddle: usize,
    /// Not converged (including failed restarts).
    pub not_converged: usize,
    /// Restarts stopped by a numerical error (counted in `not_converged` too).
    pub failed: usize,
}

/// The local refinement of the best end point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refinement {
    /// Kicks tried.
    pub kicks: usize,
    /// Kicks that lowered the loss.
    pub improved: usize,
    /// Best loss over restarts before refinement.
    pub loss_before: f64,
    /// After.
    pub loss_after: f64,
}

/// Verdict at one parameter point (the map symbols of spec §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// `+`: no restart beats `F_1` and the vertex is KKT: concentration is optimal.
    Holds,
    /// `k`: the vertex fails KKT (a head hedges), so it is beaten.
    NotKkt,
    /// `g`: the vertex is KKT but a restart finds a lower loss (e.g. a split head).
    Beaten,
}

impl Verdict {
    /// The map symbol: `+`, `k` or `g`.
    pub fn symbol(&self) -> char {
        match self {
            Verdict::Holds => '+',
            Verdict::NotKkt => 'k',
            Verdict::Beaten => 'g',
        }
    }

    /// The verdict of a map symbol (the inverse of [`Verdict::symbol`]).
    pub fn from_symbol(c: char) -> Option<Self> {
        [Verdict::Holds, Verdict::NotKkt, Verdict::Beaten].into_iter().find(|v| v.symbol() == c)
    }
}

/// Result of the Theorem 1 check at one parameter point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Theorem1Report {
    /// Parameters.
    pub params: TaskParams,
    /// `F_1` (T-7).
    pub f1: f64,
    /// Best loss found (restarts, then local refinement): an upper bound on the minimum of `F`
    /// over the oracle class, not a certified minimum.
    pub best_loss: f64,
    /// Structure of the best minimiser.
    pub best_structure: Structure,
    /// The best minimiser's gates.
    pub best_gates: OracleGates,
    /// Classification of the best point (T-13).
    pub best_classification: Option<PointClass>,
    /// The local refinement of the best restart.
    pub refinement: Refinement,
    /// KKT at the canonical distinct vertex.
    pub kkt: KktReport,
    /// The best chunk-uniform one-hot configuration (always computed; an `Option` for the
    /// JSON of older runs).
    pub best_one_hot: Option<BestOneHot>,
    /// Verdict.
    pub verdict: Verdict,
    /// Number of restarts that went below `F_1 - BEATEN_TOL`.
    pub restarts_below_f1: usize,
    /// Restarts by label.
    pub labels: LabelCounts,
    /// Every restart.
    pub restarts: Vec<Restart>,
}

fn gaussian(rng: &mut ChaCha8Rng) -> f64 {
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

/// The outcome of one L-BFGS run.
#[derive(Debug, Clone, PartialEq)]
pub struct Minimised {
    /// The best parameters.
    pub theta: Vec<f64>,
    /// Their loss.
    pub loss: f64,
    /// Iterations used.
    pub iters: u64,
    /// Why the run stopped early (a non-finite cost or gradient, or a solver error); `theta`
    /// is then the best finite point evaluated (or `init`).
    pub error: Option<String>,
}

/// The best finite `(cost, parameters)` seen so far, shared with the solver's copy of the problem.
type BestSeen = Arc<Mutex<Option<(f64, Vec<f64>)>>>;

/// A problem that remembers the best finite cost it evaluated, so that a run stopped by an
/// error still returns a point.
#[derive(Clone)]
struct Tracked<P> {
    inner: P,
    best: BestSeen,
}

impl<P: CostFunction<Param = Vec<f64>, Output = f64>> CostFunction for Tracked<P> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, theta: &Vec<f64>) -> std::result::Result<f64, argmin::core::Error> {
        let c = self.inner.cost(theta)?;
        if !c.is_finite() {
            return Err(argmin::core::Error::msg(format!("non-finite cost {c}")));
        }
        if let Ok(mut b) = self.best.lock() {
            if b.as_ref().is_none_or(|(v, _)| c < *v) {
                *b = Some((c, theta.clone()));
            }
        }
        Ok(c)
    }
}

impl<P: Gradient<Param = Vec<f64>, Gradient = Vec<f64>>> Gradient for Tracked<P> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, theta: &Vec<f64>) -> std::result::Result<Vec<f64>, argmin::core::Error> {
        let g = self.inner.gradient(theta)?;
        if g.iter().any(|x| !x.is_finite()) {
            return Err(argmin::core::Error::msg("non-finite gradient"));
        }
        Ok(g)
    }
}

/// Run L-BFGS (More-Thuente) from `init` through argmin's `Executor` on any problem with
/// `Vec<f64>` parameters. A non-finite cost or gradient stops the run cleanly (the line search
/// would otherwise evaluate at NaN forever): the outcome carries the error and the best finite
/// point evaluated.
pub fn minimise<P>(problem: &P, init: Vec<f64>, max_iters: u64) -> Minimised
where
    P: CostFunction<Param = Vec<f64>, Output = f64> + Gradient<Param = Vec<f64>, Gradient = Vec<f64>> + Clone,
{
    let tracked = Tracked { inner: problem.clone(), best: Arc::new(Mutex::new(None)) };
    let best = tracked.best.clone();
    let fallback = |error: String| {
        let seen = best.lock().ok().and_then(|b| b.clone());
        let (loss, theta) = seen.unwrap_or_else(|| (f64::NAN, init.clone()));
        Minimised { theta, loss, iters: 0, error: Some(error) }
    };
    let solver = match LBFGS::new(MoreThuenteLineSearch::new(), 10)
        .with_tolerance_grad(1e-11)
        .and_then(|s| s.with_tolerance_cost(0.0))
    {
        Ok(s) => s,
        Err(e) => return fallback(e.to_string()),
    };
    let res = match Executor::new(tracked, solver).configure(|s| s.param(init.clone()).max_iters(max_iters)).run() {
        Ok(r) => r,
        Err(e) => return fallback(e.to_string()),
    };
    let state = res.state();
    let cost = state.get_best_cost();
    match state.get_best_param() {
        Some(b) if cost.is_finite() => Minimised { theta: b.clone(), loss: cost, iters: state.get_iter(), error: None },
        _ => fallback("no finite parameter returned".into()),
    }
}

/// The list of restarts [`theorem1`] runs for `opts`.
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

/// Work units [`theorem1`] reports through its progress callback: one per restart and one per
/// refinement kick.
pub fn planned_steps(p: &TaskParams, opts: &OracleOptions) -> usize {
    restart_plan(p, opts).len() + opts.refine_kicks
}

fn label_of(class: &Result<PointClass>, error: &Option<String>) -> PointLabel {
    match (class, error) {
        (Ok(c), None) => c.label,
        _ => PointLabel::NotConverged,
    }
}

/// Check Theorem 1 at one parameter point (eps = 0). `progress` is called after every restart
/// and every refinement kick ([`planned_steps`] in all).
pub fn theorem1(p: &TaskParams, opts: &OracleOptions, mut progress: impl FnMut()) -> Result<Theorem1Report> {
    let problem = OracleProblem::new(*p)?;
    if opts.random_scales.iter().any(|s| !(s.is_finite() && *s >= 0.0)) {
        return Err(Error::invalid("random_scales", "scales must be finite and >= 0"));
    }
    let f1 = one_hot_loss(p)?;
    let kkt = vertex_kkt(p)?;
    let best_one_hot = best_one_hot(p)?;
    let plan = restart_plan(p, opts);
    if plan.is_empty() {
        return Err(Error::invalid("restarts", "the restart plan is empty; ask for at least one restart"));
    }
    let mut restarts = Vec::with_capacity(plan.len());
    let mut best: Option<(f64, Vec<f64>)> = None;
    let mut labels = LabelCounts::default();
    for (i, kind) in plan.into_iter().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed.wrapping_mul(1_000_003).wrapping_add(i as u64));
        let init = start_logits(p, &kind, &mut rng);
        let m = minimise(&problem, init, opts.max_iters);
        let (mut theta, mut loss, mut iters, error) = (m.theta, m.loss, m.iters, m.error);
        let mut structure = classify(&problem.gates(&theta));
        let mut escapes_used = 0;
        for _ in 0..opts.saddle_escapes {
            if structure.one_hot || error.is_some() {
                break;
            }
            let kicked: Vec<f64> = theta.iter().map(|t| t + 0.3 * gaussian(&mut rng)).collect();
            let k = minimise(&problem, kicked, opts.max_iters);
            iters += k.iters;
            if k.error.is_none() && k.loss < loss - BEATEN_TOL {
                (theta, loss) = (k.theta, k.loss);
                structure = classify(&problem.gates(&theta));
                escapes_used += 1;
            }
        }
        if loss.is_finite() && best.as_ref().is_none_or(|(b, _)| loss < *b) {
            best = Some((loss, theta.clone()));
        }
        let end_gates = problem.gates(&theta);
        let class = classify_point(p, &end_gates);
        let label = label_of(&class, &error);
        match label {
            PointLabel::LocalMin => labels.local_min += 1,
            PointLabel::Saddle => labels.saddle += 1,
            PointLabel::NotConverged => labels.not_converged += 1,
        }
        labels.failed += usize::from(error.is_some());
        restarts.push(Restart {
            start: kind,
            loss,
            gap: loss - f1,
            iters,
            escapes_used,
            structure,
            label,
            classification: class.ok(),
            error,
            end_gates,
        });
        progress();
    }
    let (loss_before, mut best_theta) = best.ok_or_else(|| Error::Numerical {
        what: "Theorem 1 search".into(),
        reason: "every restart failed with a non-finite loss".into(),
    })?;
    // Local refinement: kick the best point and re-minimise, keeping improvements.
    let mut best_loss = loss_before;
    let mut improved = 0;
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x5EF1_0E00);
    for k in 0..opts.refine_kicks {
        let scale = if k % 2 == 0 { 0.3 } else { 1.0 };
        let kicked: Vec<f64> = best_theta.iter().map(|t| t + scale * gaussian(&mut rng)).collect();
        let m = minimise(&problem, kicked, opts.max_iters);
        if m.error.is_none() && m.loss < best_loss - BEATEN_TOL {
            (best_theta, best_loss) = (m.theta, m.loss);
            improved += 1;
        }
        progress();
    }
    let best_gates = problem.gates(&best_theta);
    let best_structure = classify(&best_gates);
    let best_classification = classify_point(p, &best_gates).ok();
    let restarts_below_f1 = restarts.iter().filter(|r| r.loss < f1 - BEATEN_TOL).count();
    let verdict = if !kkt.holds {
        Verdict::NotKkt
    } else if best_loss < f1 - BEATEN_TOL {
        Verdict::Beaten
    } else {
        Verdict::Holds
    };
    Ok(Theorem1Report {
        params: *p,
        f1,
        best_loss,
        best_structure,
        best_gates,
        best_classification,
        refinement: Refinement { kicks: opts.refine_kicks, improved, loss_before, loss_after: best_loss },
        kkt,
        best_one_hot: Some(best_one_hot),
        verdict,
        restarts_below_f1,
        labels,
        restarts,
    })
}

/// Oracle gates from logits `theta = [key logits | value logits]`, a softmax per block of `S`
/// (the parameterisation of every oracle-class minimisation, eps = 0 and eps > 0).
pub fn gates_from_logits(p: &TaskParams, theta: &[f64]) -> OracleGates {
    let mut g = OracleGates::uniform(p);
    let n = g.key.len();
    let s = p.stride;
    for b in 0..n / s {
        softmax_into(&theta[b * s..(b + 1) * s], &mut g.key[b * s..(b + 1) * s]);
        softmax_into(&theta[n + b * s..n + (b + 1) * s], &mut g.value[b * s..(b + 1) * s]);
    }
    g
}
