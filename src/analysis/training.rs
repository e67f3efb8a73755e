//! The training-success rule of the second pre-registered run (`theory/phase-lab.md` §8.2): a
//! model succeeds when its held-out exact match at the end of training is at least
//! [`SUCCESS_ACCURACY`]; one below it continues from its final checkpoint with one warm restart
//! ([`Extension`]), at most [`MAX_EXTENSIONS`] times; one still below it is **failed**, reported,
//! and excluded from every pooled test, reference line, mean and interval
//! ([`seed_outcome`]). No failed seed is ever averaged in.
//!
//! The rule reads a run's training record only (its end-of-run held-out accuracy and how many
//! extensions it has had, `metrics.json`'s `extensions`: [`run_outcome`]), so it is decided
//! before any phase statistic is computed. [`crate::model::extend()`] runs an extension and
//! `phasekv reproduce` applies the rule to a plan with the v2 rules.

use crate::model::{Metrics, TrainConfig};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Held-out exact match (the `train` end-of-run evaluation) at or above which a model trained.
pub const SUCCESS_ACCURACY: f64 = 0.90;
/// Peak learning rate of an extension's warm restart, as a fraction of the recipe's.
pub const EXTENSION_LR_FRACTION: f64 = 0.5;
/// Extensions allowed under the v2 rules: the cap is `(1 + MAX_EXTENSIONS)` times the
/// recipe's steps.
pub const MAX_EXTENSIONS: usize = 1;
/// Extensions allowed under the v3 rules (`theory/phase-lab.md` §9.4, train until success or
/// the cap): the cap is five times the recipe's steps.
pub const MAX_EXTENSIONS_V3: usize = 4;

/// One extension's learning-rate schedule (defined with the trainer that runs it,
/// [`crate::model::extend()`]): from step `start` (the steps trained so far), `warmup_steps` of
/// linear warm-up to `EXTENSION_LR_FRACTION` of the recipe's rate, then cosine decay to the
/// recipe's final rate (`lr * min_lr_ratio`) at step `start + steps`.
pub use crate::model::config::Extension;

/// What the rule says of a model after its steps.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum TrainingStatus {
    /// At or above [`SUCCESS_ACCURACY`].
    Succeeded,
    /// Below it with an extension left: train on with this schedule.
    Extend(Extension),
    /// Below it after [`MAX_EXTENSIONS`] extensions: reported and excluded.
    Failed,
}

/// The rule on a model's end-of-run held-out accuracy after `extensions` extensions of the
/// recipe `recipe` (whose `steps` is the recipe's, not the extended total), with the v2 budget
/// of [`MAX_EXTENSIONS`].
pub fn training_status(accuracy: f64, extensions: usize, recipe: &TrainConfig) -> Result<TrainingStatus> {
    training_status_within(accuracy, extensions, recipe, MAX_EXTENSIONS)
}

/// [`training_status`] with a budget of `max_extensions` extensions: below
/// [`SUCCESS_ACCURACY`], extension `k + 1` (steps `(1 + k) steps .. (2 + k) steps`) follows the
/// `k`-th until the budget is spent; the same warm restart every time (§8.2, §9.4).
pub fn training_status_within(
    accuracy: f64,
    extensions: usize,
    recipe: &TrainConfig,
    max_extensions: usize,
) -> Result<TrainingStatus> {
    check_record(accuracy, extensions, max_extensions)?;
    if accuracy >= SUCCESS_ACCURACY {
        return Ok(TrainingStatus::Succeeded);
    }
    if extensions == max_extensions {
        return Ok(TrainingStatus::Failed);
    }
    let start = (1 + extensions) * recipe.steps;
    Ok(TrainingStatus::Extend(Extension {
        index: extensions + 1,
        start,
        end: start + recipe.steps,
        warmup_steps: recipe.warmup_steps,
        peak_lr: EXTENSION_LR_FRACTION * recipe.lr,
        final_lr: recipe.lr * recipe.min_lr_ratio,
    }))
}

/// An accuracy in [0, 1] and at most `max_extensions` extensions.
fn check_record(accuracy: f64, extensions: usize, max_extensions: usize) -> Result<()> {
    if !(0.0..=1.0).contains(&accuracy) {
        return Err(Error::invalid("held-out accuracy", format!("must be in [0, 1], got {accuracy}")));
    }
    if extensions > max_extensions {
        return Err(Error::invalid("extensions", format!("must be at most {max_extensions}, got {extensions}")));
    }
    Ok(())
}

/// What the rule makes of one finished seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SeedOutcome {
    /// At or above [`SUCCESS_ACCURACY`]: used everywhere.
    Succeeded,
    /// Below it after [`MAX_EXTENSIONS`] extensions: reported, excluded everywhere.
    Failed,
    /// Below it with an extension left (a run made before the rule, or one whose extension has
    /// not run): excluded like a failed seed until extended, and reported as such.
    Unextended,
}

impl SeedOutcome {
    /// What the rule made of the seed, in words (reports).
    pub fn words(self) -> &'static str {
        match self {
            SeedOutcome::Succeeded => "trained",
            SeedOutcome::Failed => "failed after its extension",
            SeedOutcome::Unextended => "not extended",
        }
    }
}

/// The rule on a finished seed: its end-of-run held-out `accuracy` after `extensions`
/// extensions (more than [`MAX_EXTENSIONS`] is an error), with the v2 budget.
pub fn seed_outcome(accuracy: f64, extensions: usize) -> Result<SeedOutcome> {
    seed_outcome_within(accuracy, extensions, MAX_EXTENSIONS)
}

/// [`seed_outcome`] with a budget of `max_extensions` extensions.
pub fn seed_outcome_within(accuracy: f64, extensions: usize, max_extensions: usize) -> Result<SeedOutcome> {
    check_record(accuracy, extensions, max_extensions)?;
    if accuracy >= SUCCESS_ACCURACY {
        return Ok(SeedOutcome::Succeeded);
    }
    Ok(if extensions == max_extensions { SeedOutcome::Failed } else { SeedOutcome::Unextended })
}

/// The rule on a finished run's `metrics.json`: its final held-out accuracy after the
/// extensions it records ([`Metrics::extension_count`], the one place the count is read; a
/// run from before extensions has none).
pub fn run_outcome(metrics: &Metrics) -> Result<SeedOutcome> {
    seed_outcome(metrics.final_eval.accuracy, metrics.extension_count())
}

/// Whether an arm with `successful` seeds can be judged (§8.2: fewer than 2 successful seeds
/// leave every claim that rests on the arm *not run*).
pub fn enough_seeds(successful: usize) -> bool {
    successful >= MIN_SUCCESSFUL_SEEDS
}

/// Successful seeds an arm needs to be judged at all (§8.2).
pub const MIN_SUCCESSFUL_SEEDS: usize = 2;
