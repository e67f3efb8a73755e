//! Upper bounds on every size the theory engine accepts (theory/induction-model.md §9), so that
//! no request allocates past memory or runs for hours. They are derived from the machine the
//! suite is built for (24 GiB, 2 cores) and the cost of each computation:
//!
//! | quantity | limit | why |
//! |---|---|---|
//! | `S` | [`MAX_STRIDE`] | the oracle has `2 H L S` logits; the flow is `O(H S^2)` per step |
//! | `H` | [`MAX_HEADS`] (and `< S`) | |
//! | `L` | [`MAX_CHUNKS`] | |
//! | `N` (eps = 0) | [`MAX_VOCAB`] | enters only as the distractor count `N - L S` |
//! | `N` (eps > 0) | [`MAX_VOCAB_EPS`] | `N x N` Gram matrix and `d x N` embeddings, `d ~ 4 ln N / eps^2` |
//! | eps (target) | [`MIN_EPS`] .. 1 | the dimension grows as `1/eps^2` |
//! | `H L^2 S (S-1)` | [`MAX_ORACLE_WORK`] | multiply-adds of one oracle loss+gradient (T-4, T-5): about 1 ms |
//! | `L (S-1) N L S` | [`MAX_CONTEXT_WORK`] | one per-context loss (T-12) at eps > 0: about 20 ms |
//! | contexts | [`MAX_CONTEXTS`] | |
//! | restarts per point | [`MAX_RESTARTS`] | |
//! | L-BFGS iterations | [`MAX_ITERS`] | |
//! | seeds | [`MAX_SEEDS`] | one [`crate::theory::flow::FlowRun`] each, kept in memory and JSON |
//! | flow steps `t_max / dt` | [`MAX_FLOW_STEPS`] | |
//! | seeds x steps x `H S^2` | [`MAX_FLOW_WORK`] | about an hour on 2 threads at the fast kernel's speed |
//! | content sample `contexts * N` | [`MAX_CONTENT_CONTEXTS`] | every flow step sums over them |
//! | diagram cells | [`MAX_GRID_CELLS`] | |
//! | `beta`, `gamma` | [`MAX_TEMPERATURE`] | beyond it every softmax is a hard max to double precision |
//!
//! Each check returns [`Error::Invalid`] naming the field, the value and the limit.

use super::task::TaskParams;
use crate::{Error, Result};

/// Largest stride `S`.
pub const MAX_STRIDE: usize = 64;
/// Largest number of heads `H`.
pub const MAX_HEADS: usize = 32;
/// Largest number of chunks `L`.
pub const MAX_CHUNKS: usize = 64;
/// Largest vocabulary at eps = 0.
pub const MAX_VOCAB: usize = 1_000_000_000;
/// Largest vocabulary at eps > 0 (a Gram matrix of `N^2` doubles, embeddings of `d N`).
pub const MAX_VOCAB_EPS: usize = 2048;
/// Smallest target eps > 0 (the dimension is `ceil(4 ln N / eps^2) + 1`: 12 200 at N = 2048).
pub const MIN_EPS: f64 = 0.05;
/// Largest `H L^2 S (S-1)`, the multiply-adds of one oracle loss and gradient.
pub const MAX_ORACLE_WORK: usize = 250_000;
/// Largest `L (S-1) N L S`, the multiply-adds of one per-context loss at eps > 0.
pub const MAX_CONTEXT_WORK: usize = 20_000_000;
/// Largest number of Monte Carlo contexts at eps > 0.
pub const MAX_CONTEXTS: usize = 4096;
/// Largest number of restarts at one parameter point.
pub const MAX_RESTARTS: usize = 20_000;
/// Largest L-BFGS iteration cap.
pub const MAX_ITERS: u64 = 100_000;
/// Largest number of gradient-flow seeds in one command.
pub const MAX_SEEDS: u64 = 1 << 20;
/// Largest number of integrator steps `t_max / dt`.
pub const MAX_FLOW_STEPS: f64 = 1e7;
/// Largest `seeds * steps * H S^2`.
pub const MAX_FLOW_WORK: f64 = 1e13;
/// Largest content sample, `base contexts * N`.
pub const MAX_CONTENT_CONTEXTS: usize = 65_536;
/// Largest number of `(beta, gamma)` cells of a diagram.
pub const MAX_GRID_CELLS: usize = 4096;
/// Largest `beta` and `gamma`.
pub const MAX_TEMPERATURE: f64 = 1e4;

/// `value <= max`, else an error naming `field`, the value and the limit.
pub fn at_most<T: PartialOrd + std::fmt::Display>(field: &str, value: T, max: T) -> Result<()> {
    if value <= max {
        Ok(())
    } else {
        Err(Error::invalid(field, format!("{value} exceeds the limit {max} (theory/induction-model.md §9)")))
    }
}

/// The task sizes every command shares: `S`, `H`, `L`, `N`, `beta`, `gamma` (after
/// [`TaskParams::validate`]).
pub fn check_task(p: &TaskParams) -> Result<()> {
    at_most("stride", p.stride, MAX_STRIDE)?;
    at_most("heads", p.heads, MAX_HEADS)?;
    at_most("chunks", p.chunks, MAX_CHUNKS)?;
    at_most("vocab", p.vocab, MAX_VOCAB)?;
    at_most("beta", p.beta, MAX_TEMPERATURE)?;
    at_most("gamma", p.gamma, MAX_TEMPERATURE)?;
    p.validate()
}

/// Sizes of the oracle problem (Theorem 1 at eps = 0).
pub fn check_oracle(p: &TaskParams, restarts: usize, max_iters: u64) -> Result<()> {
    check_task(p)?;
    let work = p.heads * p.chunks * p.chunks * p.stride * (p.stride - 1);
    if work > MAX_ORACLE_WORK {
        return Err(Error::invalid(
            "H L^2 S (S-1)",
            format!(
                "{work} (H={}, L={}, S={}) exceeds the limit {MAX_ORACLE_WORK} of the oracle search (theory/induction-model.md §9)",
                p.heads, p.chunks, p.stride
            ),
        ));
    }
    at_most("restarts", restarts, MAX_RESTARTS)?;
    at_most("max_iters", max_iters, MAX_ITERS)
}

/// Sizes of Theorem 1 at eps > 0.
pub fn check_eps(p: &TaskParams, eps: f64, contexts: usize) -> Result<()> {
    check_task(p)?;
    if !(eps.is_finite() && (MIN_EPS..=1.0).contains(&eps)) {
        return Err(Error::invalid("eps", format!("{eps} outside the allowed range {MIN_EPS}..=1")));
    }
    at_most("vocab", p.vocab, MAX_VOCAB_EPS)?;
    if contexts == 0 {
        return Err(Error::invalid("contexts", "0 outside the allowed range 1..=4096"));
    }
    at_most("contexts", contexts, MAX_CONTEXTS)?;
    let work = p.chunks * (p.stride - 1) * p.vocab * p.chunks * p.stride;
    if work > MAX_CONTEXT_WORK {
        return Err(Error::invalid(
            "L (S-1) N L S",
            format!(
                "{work} exceeds the limit {MAX_CONTEXT_WORK} of the per-context search (theory/induction-model.md §9)"
            ),
        ));
    }
    Ok(())
}

/// Sizes of a gradient-flow command: `seeds` runs of `t_max / dt` steps (the flow
/// configuration itself is checked by `FlowConfig::validate`).
pub fn check_flow(p: &TaskParams, first_seed: u64, seeds: u64, t_max: f64, dt: f64) -> Result<()> {
    check_task(p)?;
    if seeds == 0 {
        return Err(Error::invalid("seeds", format!("0 outside the allowed range 1..={MAX_SEEDS}")));
    }
    at_most("seeds", seeds, MAX_SEEDS)?;
    if first_seed.checked_add(seeds - 1).is_none() {
        return Err(Error::invalid(
            "seed",
            format!("{first_seed} + {seeds} seeds runs past the largest seed {}", u64::MAX),
        ));
    }
    let steps = t_max / dt;
    if steps.is_finite() {
        at_most("t_max / dt (steps)", steps, MAX_FLOW_STEPS)?;
        let work = seeds as f64 * steps * (p.heads * p.stride * p.stride) as f64;
        at_most("seeds * steps * H S^2", work, MAX_FLOW_WORK)?;
    }
    Ok(())
}
