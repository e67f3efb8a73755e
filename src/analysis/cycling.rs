//! Gate cycling as an intervention on a trained model (issue 42, item 1;
//! `theory/gate-cycling.md`): the heads of one layer get their per-offset compressor parameters
//! moved by `k` offsets ([`crate::model::Model::cycle_head`]), the model is evaluated on the
//! same prompts, and the phase profile of each `k` is set beside the uncycled one.
//!
//! Per `k`: accuracy per residue group and per phase (`position mod S`), the circular lag at
//! which the cycled phase profile best matches the uncycled one (the pattern "moves by `k`" when
//! that lag is `k mod S`), and the accuracy, under `k`, of the uncycled model's weakest phase
//! (the boundary phase "stays weak" when it stays below the other phases' mean).

use super::eval;
use super::phase::Outcome;
use super::protocol::Prompt;
use super::stats::{self, GroupAccuracy};
use crate::model::Model;
use crate::stop::Stop;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// One cycle amount's evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CycleRow {
    /// Offsets moved (`0` is the uncycled model).
    pub k: usize,
    /// Accuracy per residue group.
    pub groups: Vec<GroupAccuracy>,
    /// Accuracy per phase `0..S` (groups folded by the stride).
    pub phases: Vec<GroupAccuracy>,
    /// The circular lag `l` in `0..S` maximising the correlation of this row's phase
    /// accuracies at `r + l` with the uncycled ones at `r` ([`best_lag`]); `None` when either
    /// profile is flat.
    pub lag: Option<usize>,
    /// Accuracy at the uncycled model's weakest phase.
    pub weakest_accuracy: f64,
    /// Mean accuracy of the other phases.
    pub others_mean: f64,
    /// Every prompt's correctness, in prompt order.
    pub correct: Vec<bool>,
}

/// A cycling experiment on one layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CycleResult {
    /// The layer whose heads were cycled.
    pub layer: usize,
    /// The KV heads cycled together.
    pub heads: Vec<usize>,
    /// Window `W` and stride `S` of the kernel.
    pub window: usize,
    /// Stride.
    pub stride: usize,
    /// The uncycled model's weakest phase (lowest accuracy; the lowest index on a tie).
    pub weakest_phase: usize,
    /// One row per `k`, the uncycled model (`k = 0`) first.
    pub rows: Vec<CycleRow>,
}

/// The circular lag `l` in `0..s` maximising the Pearson correlation between `base[r]` and
/// `moved[(r + l) mod s]` (the smallest such `l` on a tie); `None` when either is constant or
/// holds a non-finite value.
pub fn best_lag(base: &[f64], moved: &[f64]) -> Option<usize> {
    let s = base.len();
    if s == 0 || moved.len() != s || base.iter().chain(moved).any(|v| !v.is_finite()) {
        return None;
    }
    let centred = |v: &[f64]| {
        let m = v.iter().sum::<f64>() / s as f64;
        v.iter().map(|x| x - m).collect::<Vec<f64>>()
    };
    let (a, b) = (centred(base), centred(moved));
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm(&a) < 1e-12 || norm(&b) < 1e-12 {
        return None;
    }
    let score = |l: usize| (0..s).map(|r| a[r] * b[(r + l) % s]).sum::<f64>();
    let mut best = 0;
    for l in 1..s {
        if score(l) > score(best) + 1e-12 {
            best = l;
        }
    }
    Some(best)
}

/// The weakest phase of `phases` (lowest accuracy, the lowest index on a tie; empty phases are
/// passed over).
fn weakest(phases: &[GroupAccuracy]) -> usize {
    let mut best = 0;
    for (r, p) in phases.iter().enumerate() {
        if p.accuracy.is_finite() && !(phases[best].accuracy <= p.accuracy) {
            best = r;
        }
    }
    best
}

/// Evaluates `model` on `prompts` with KV heads `heads` of layer `layer` cycled by each of
/// `ks` in turn (`k = 0` is evaluated first whether listed or not), restoring the parameters
/// after each; `modulus` and `stride` fold the groups. `progress(done, total)` counts prompts
/// over all `k`; `stop` is polled before every chunk. The model is left as it was given, also
/// on an error after a cycle (the inverse cycle is applied before returning).
#[allow(clippy::too_many_arguments)]
pub fn cycle_profiles(
    model: &Model,
    prompts: &[Prompt],
    modulus: usize,
    layer: usize,
    heads: &[usize],
    ks: &[usize],
    progress: &mut dyn FnMut(usize, usize),
    stop: &Stop,
) -> Result<CycleResult> {
    let spec = model.decoder.spec().layer(layer).clone();
    let (w, s) = (spec.geometry.window(), spec.geometry.stride());
    if heads.is_empty() {
        return Err(Error::invalid("head", "cycle at least one KV head"));
    }
    for &h in heads {
        model.cycle_head(layer, h, 0)?; // the identity: every check, before anything moves
    }
    let mut order = vec![0usize];
    order.extend(ks.iter().copied().filter(|&k| k % w != 0));
    let total = order.len() * prompts.len();
    let mut rows: Vec<CycleRow> = Vec::with_capacity(order.len());
    for (n, &k) in order.iter().enumerate() {
        let offset = n * prompts.len();
        let outcomes = if k == 0 {
            eval::evaluate(&model.decoder, prompts, &mut |d, _| progress(offset + d, total), stop)?
        } else {
            for &h in heads {
                model.cycle_head(layer, h, k)?;
            }
            let scored = eval::evaluate(&model.decoder, prompts, &mut |d, _| progress(offset + d, total), stop);
            for &h in heads {
                model.cycle_head(layer, h, w - k % w)?;
            }
            scored?
        };
        rows.push(row(k, &outcomes, modulus, s)?);
    }
    let weakest_phase = weakest(&rows[0].phases);
    let base: Vec<f64> = rows[0].phases.iter().map(|p| p.accuracy).collect();
    for row in &mut rows {
        let moved: Vec<f64> = row.phases.iter().map(|p| p.accuracy).collect();
        row.lag = best_lag(&base, &moved);
        row.weakest_accuracy = moved[weakest_phase];
        let others: Vec<f64> =
            moved.iter().enumerate().filter(|&(r, v)| r != weakest_phase && v.is_finite()).map(|(_, v)| *v).collect();
        row.others_mean = others.iter().sum::<f64>() / others.len().max(1) as f64;
    }
    Ok(CycleResult { layer, heads: heads.to_vec(), window: w, stride: s, weakest_phase, rows })
}

fn row(k: usize, outcomes: &[Outcome], modulus: usize, s: usize) -> Result<CycleRow> {
    let groups = stats::group_accuracies(&outcomes.iter().map(|o| (o.group, o.correct)).collect::<Vec<_>>(), modulus)?;
    let phases = stats::fold_by_phase(&groups, s)?;
    Ok(CycleRow {
        k,
        groups,
        phases,
        lag: None,
        weakest_accuracy: f64::NAN,
        others_mean: f64::NAN,
        correct: outcomes.iter().map(|o| o.correct).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::best_lag;

    #[test]
    fn the_best_lag_finds_a_circular_shift_and_refuses_a_flat_profile() {
        let base = [0.2, 0.9, 0.8, 0.7];
        for l in 0..4 {
            let moved: Vec<f64> = (0..4).map(|r| base[(r + 4 - l) % 4]).collect();
            assert_eq!(best_lag(&base, &moved), Some(l), "lag {l}");
        }
        assert_eq!(best_lag(&base, &[0.5; 4]), None);
        assert_eq!(best_lag(&base, &[0.5, f64::NAN, 0.1, 0.2]), None);
        assert_eq!(best_lag(&base, &[0.5, 0.1]), None);
    }
}
