//! Theorem 1 (theory/induction-model.md §3): minimise the population loss (T-4) over the
//! oracle class with argmin's L-BFGS (More-Thuente line search) on softmax-parameterised
//! simplices, from many seeded restarts (random at several scales, uniform plus noise,
//! near-vertex, and structured "split over k pairs" starts); classify the best minimiser and
//! compare it with `F_1` (T-7) and with the KKT conditions at the one-hot vertex (T-9).

use super::task::{
    one_hot_loss, population_loss, population_loss_grad, softmax_into, softmax_pullback, OracleGates, TaskParams,
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
    /// Head 0 spreads key mass evenly over `pairs` offsets `r` and value mass over `r + 1`; the
    /// other heads sit near distinct one-hot pairs on the remaining offsets; same in every chunk.
    Split {
        /// Number of (key, value) pairs head 0 is split over.
        pairs: usize,
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

/// Largest number of chunk-uniform one-hot configurations [`best_one_hot`] enumerates.
pub const MAX_ONE_HOT: usize = 100_000;

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
    /// How many configurations were enumerated, `S^(2H)`.
    pub enumerated: usize,
    /// KKT margins (T-9) at this vertex.
    pub kkt: KktReport,
}

/// Enumerate every chunk-uniform one-hot configuration (`S^(2H)` of them) and return the
/// best; `None` when there are more than [`MAX_ONE_HOT`].
pub fn best_one_hot(p: &TaskParams) -> Result<Option<BestOneHot>> {
    p.validate()?;
    let s = p.stride;
    let per_head = s * s;
    let total = (per_head as f64).powi(p.heads as i32);
    if total > MAX_ONE_HOT as f64 {
        return Ok(None);
    }
    let total = total as usize;
    let mut g = OracleGates::uniform(p);
    let mut best: Option<(f64, usize)> = None;
    let decode = |mut code: usize| -> Vec<(usize, usize)> {
        (0..p.heads)
            .map(|_| {
                let c = code % per_head;
                code /= per_head;
                (c / s, c % s)
            })
            .collect()
    };
    let set = |g: &mut OracleGates, code: usize| {
        g.key.iter_mut().for_each(|x| *x = 0.0);
        g.value.iter_mut().for_each(|x| *x = 0.0);
        for (h, (rk, rv)) in decode(code).into_iter().enumerate() {
            for l in 0..p.chunks {
                let i = g.idx(h, l, 0);
                g.key[i + rk] = 1.0;
                g.value[i + rv] = 1.0;
            }
        }
    };
    for code in 0..total {
        set(&mut g, code);
        let f = population_loss(p, &g)?;
        if best.is_none_or(|(b, _)| f < b - 1e-12) {
            best = Some((f, code));
        }
    }
    let (loss, code) = best.expect("at least one configuration");
    set(&mut g, code);
    let kkt = kkt_at(p, &g)?;
    let d = decode(code);
    Ok(Some(BestOneHot {
        loss,
        key_offsets: d.iter().map(|x| x.0 + 1).collect(),
        value_offsets: d.iter().map(|x| x.1 + 1).collect(),
        enumerated: total,
        kkt,
    }))
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
    /// Split restarts per pair count.
    pub split_per_pairs: usize,
    /// L-BFGS iteration cap.
    pub max_iters: u64,
    /// Seed of all restarts.
    pub seed: u64,
    /// Saddle escapes: a restart that ends unconcentrated is perturbed (logit noise 0.3) and
    /// re-minimised up to this many times, keeping a lower end point. L-BFGS can stop on the
    /// symmetric critical points of structured starts; this tells saddles from minima.
    pub saddle_escapes: usize,
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
}

/// Result of the Theorem 1 check at one parameter point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Theorem1Report {
    /// Parameters.
    pub params: TaskParams,
    /// `F_1` (T-7).
    pub f1: f64,
    /// Best loss over restarts.
    pub best_loss: f64,
    /// Structure of the best minimiser.
    pub best_structure: Structure,
    /// The best minimiser's gates.
    pub best_gates: OracleGates,
    /// KKT at the canonical distinct vertex.
    pub kkt: KktReport,
    /// The best chunk-uniform one-hot configuration, by enumeration (None if too many).
    pub best_one_hot: Option<BestOneHot>,
    /// Verdict.
    pub verdict: Verdict,
    /// Number of restarts that went below `F_1 - BEATEN_TOL`.
    pub restarts_below_f1: usize,
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
        StartKind::Split { pairs } => {
            theta.iter_mut().for_each(|t| *t = 0.05 * gaussian(rng));
            let mut offs: Vec<usize> = (0..ss - 1).collect();
            offs.shuffle(rng);
            let k = (*pairs).min(ss - 1).max(1);
            let mut probs_k = vec![vec![1e-3; ss]; hh];
            let mut probs_v = vec![vec![1e-3; ss]; hh];
            for &r in &offs[..k] {
                probs_k[0][r] += 1.0 / k as f64;
                probs_v[0][r + 1] += 1.0 / k as f64;
            }
            for h in 1..hh {
                // remaining heads on distinct remaining offsets when available
                let r = if k + h - 1 < offs.len() { offs[k + h - 1] } else { offs[rng.random_range(0..offs.len())] };
                probs_k[h][r] += 1.0;
                probs_v[h][r + 1] += 1.0;
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

/// Run L-BFGS (More-Thuente) from `init` through argmin's `Executor` on any problem with
/// `Vec<f64>` parameters. Returns the best logits, their loss and the iteration count.
pub fn minimise<P>(problem: &P, init: Vec<f64>, max_iters: u64) -> Result<(Vec<f64>, f64, u64)>
where
    P: CostFunction<Param = Vec<f64>, Output = f64> + Gradient<Param = Vec<f64>, Gradient = Vec<f64>> + Clone,
{
    let numerical = |e: argmin::core::Error| Error::Numerical { what: "L-BFGS".into(), reason: e.to_string() };
    let solver = LBFGS::new(MoreThuenteLineSearch::new(), 10)
        .with_tolerance_grad(1e-11)
        .map_err(numerical)?
        .with_tolerance_cost(0.0)
        .map_err(numerical)?;
    let res = Executor::new(problem.clone(), solver)
        .configure(|s| s.param(init).max_iters(max_iters))
        .run()
        .map_err(numerical)?;
    let state = res.state();
    let best = state
        .get_best_param()
        .cloned()
        .ok_or_else(|| Error::Numerical { what: "L-BFGS".into(), reason: "no parameter returned".into() })?;
    let cost = state.get_best_cost();
    Ok((best, cost, state.get_iter()))
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
        for _ in 0..opts.split_per_pairs {
            plan.push(StartKind::Split { pairs });
        }
    }
    plan
}

/// Check Theorem 1 at one parameter point (eps = 0). `progress` is called after every restart.
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
    for (i, kind) in plan.into_iter().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed.wrapping_mul(1_000_003).wrapping_add(i as u64));
        let init = start_logits(p, &kind, &mut rng);
        let (mut theta, mut loss, mut iters) = minimise(&problem, init, opts.max_iters)?;
        let mut structure = classify(&problem.gates(&theta));
        let mut escapes_used = 0;
        for _ in 0..opts.saddle_escapes {
            if structure.one_hot {
                break;
            }
            let kicked: Vec<f64> = theta.iter().map(|t| t + 0.3 * gaussian(&mut rng)).collect();
            let (t2, l2, i2) = minimise(&problem, kicked, opts.max_iters)?;
            iters += i2;
            if l2 < loss - BEATEN_TOL {
                (theta, loss) = (t2, l2);
                structure = classify(&problem.gates(&theta));
                escapes_used += 1;
            }
        }
        if best.as_ref().is_none_or(|(b, _)| loss < *b) {
            best = Some((loss, theta));
        }
        restarts.push(Restart { start: kind, loss, gap: loss - f1, iters, escapes_used, structure });
        progress();
    }
    let (best_loss, best_theta) = best.expect("plan is non-empty");
    let best_gates = problem.gates(&best_theta);
    let best_structure = classify(&best_gates);
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
        kkt,
        best_one_hot,
        verdict,
        restarts_below_f1,
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
