//! The minimisation: the oracle problem as an argmin cost function over softmax logits, and one
//! L-BFGS run (More-Thuente line search) that keeps the best finite point it saw.

use crate::theory::task::{
    population_loss, population_loss_grad, softmax_into, softmax_pullback, OracleGates, TaskParams,
};
use crate::{Error, Result};
use argmin::core::observers::{Observe, ObserverMode};
use argmin::core::State;
use argmin::core::{CostFunction, Executor, Gradient, IterState, KV};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

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

pub(super) fn to_argmin(e: Error) -> argmin::core::Error {
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
    /// Every iteration as argmin's observer saw it (empty unless asked for, see
    /// [`minimise_logged`]).
    pub log: Vec<IterationRecord>,
}

/// One L-BFGS iteration as argmin's observer sees it after the iteration: the accepted point's
/// cost and gradient norm. The More-Thuente line search accepts a step only under the strong
/// Wolfe conditions, whose sufficient-decrease part makes the cost non-increasing along a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IterationRecord {
    /// argmin's iteration counter.
    pub iteration: u64,
    /// Cost at the accepted point.
    pub cost: f64,
    /// Euclidean norm of the gradient there (`NaN` if argmin reports none).
    pub grad_norm: f64,
}

/// The solver state argmin's L-BFGS hands to observers.
type LbfgsState = IterState<Vec<f64>, Vec<f64>, (), (), (), f64>;

/// An argmin observer that appends every iteration to a shared log.
struct Recorder(Arc<Mutex<Vec<IterationRecord>>>);

impl Observe<LbfgsState> for Recorder {
    fn observe_iter(&mut self, state: &LbfgsState, _kv: &KV) -> std::result::Result<(), argmin::core::Error> {
        let grad_norm = state.get_gradient().map_or(f64::NAN, |g| g.iter().map(|x| x * x).sum::<f64>().sqrt());
        let record = IterationRecord { iteration: state.get_iter(), cost: state.get_cost(), grad_norm };
        self.0.lock().map_err(|_| argmin::core::Error::msg("iteration log lock poisoned"))?.push(record);
        Ok(())
    }
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
    minimise_logged(problem, init, max_iters, false)
}

/// [`minimise`], and with `log` also record every iteration through an argmin observer into
/// [`Minimised::log`]. The observer only reads the solver state, so the result is the same.
pub fn minimise_logged<P>(problem: &P, init: Vec<f64>, max_iters: u64, log: bool) -> Minimised
where
    P: CostFunction<Param = Vec<f64>, Output = f64> + Gradient<Param = Vec<f64>, Gradient = Vec<f64>> + Clone,
{
    let records = Arc::new(Mutex::new(Vec::new()));
    let take_log = |records: &Arc<Mutex<Vec<IterationRecord>>>| {
        records.lock().map(|mut r| std::mem::take(&mut *r)).unwrap_or_default()
    };
    let tracked = Tracked { inner: problem.clone(), best: Arc::new(Mutex::new(None)) };
    let best = tracked.best.clone();
    let fallback = |error: String| {
        let seen = best.lock().ok().and_then(|b| b.clone());
        let (loss, theta) = seen.unwrap_or_else(|| (f64::NAN, init.clone()));
        Minimised { theta, loss, iters: 0, error: Some(error), log: take_log(&records) }
    };
    let solver = match LBFGS::new(MoreThuenteLineSearch::new(), 10)
        .with_tolerance_grad(1e-11)
        .and_then(|s| s.with_tolerance_cost(0.0))
    {
        Ok(s) => s,
        Err(e) => return fallback(e.to_string()),
    };
    let mut executor = Executor::new(tracked, solver).configure(|s| s.param(init.clone()).max_iters(max_iters));
    if log {
        executor = executor.add_observer(Recorder(records.clone()), ObserverMode::Always);
    }
    let res = match executor.run() {
        Ok(r) => r,
        Err(e) => return fallback(e.to_string()),
    };
    let state = res.state();
    let cost = state.get_best_cost();
    match state.get_best_param() {
        Some(b) if cost.is_finite() => {
            Minimised { theta: b.clone(), loss: cost, iters: state.get_iter(), error: None, log: take_log(&records) }
        }
        _ => fallback("no finite parameter returned".into()),
    }
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
