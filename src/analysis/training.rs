//! The training-success rule of the second pre-registered run (`theory/phase-lab.md` §8.2): a
//! model succeeds when its held-out exact match at the end of training is at least
//! [`SUCCESS_ACCURACY`]; one below it continues from its final checkpoint with one warm restart
//! ([`Extension`]), at most [`MAX_EXTENSIONS`] times; one still below it is **failed**, reported,
//! and excluded from every pooled test, reference line, mean and interval
//! ([`seed_outcome`]). No failed seed is ever averaged in.
//!
//! The rule reads a run's training record only (its end-of-run held-out accuracy and how many
//! extensions it has had), so it is decided before any phase statistic is computed.

use crate::model::TrainConfig;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

/// Held-out exact match (the `train` end-of-run evaluation) at or above which a model trained.
pub const SUCCESS_ACCURACY: f64 = 0.90;
/// Peak learning rate of an extension's warm restart, as a fraction of the recipe's.
pub const EXTENSION_LR_FRACTION: f64 = 0.5;
/// Extensions allowed: the cap is `(1 + MAX_EXTENSIONS)` times the recipe's steps.
pub const MAX_EXTENSIONS: usize = 1;

/// One extension's learning-rate schedule: from step `start` (the steps trained so far),
/// `warmup_steps` of linear warm-up to `EXTENSION_LR_FRACTION` of the recipe's rate, then cosine
/// decay to the recipe's final rate (`lr * min_lr_ratio`) at step `start + steps`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Extension {
    /// Which extension (1-based).
    pub index: usize,
    /// The first step of the extension.
    pub start: usize,
    /// Its last step plus one (`start + steps`).
    pub end: usize,
    /// Warm-up steps (the recipe's).
    pub warmup_steps: usize,
    /// Peak rate (`EXTENSION_LR_FRACTION * lr`).
    pub peak_lr: f64,
    /// Final rate (the recipe's `lr * min_lr_ratio`).
    pub final_lr: f64,
}

impl Extension {
    /// The learning rate at `step` (`start <= step < end`).
    pub fn lr_at(&self, step: usize) -> f64 {
        let k = step.saturating_sub(self.start);
        if k < self.warmup_steps {
            return self.peak_lr * (k + 1) as f64 / self.warmup_steps as f64;
        }
        let decay = (self.end - self.start).saturating_sub(self.warmup_steps).max(1) as f64;
        let p = ((k - self.warmup_steps) as f64 / decay).min(1.0);
        let cos = 0.5 * (1.0 + (std::f64::consts::PI * p).cos());
        self.final_lr + (self.peak_lr - self.final_lr) * cos
    }
}

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
/// recipe `recipe` (whose `steps` is the recipe's, not the extended total).
pub fn training_status(accuracy: f64, extensions: usize, recipe: &TrainConfig) -> Result<TrainingStatus> {
    if !(0.0..=1.0).contains(&accuracy) {
        return Err(Error::invalid("held-out accuracy", format!("must be in [0, 1], got {accuracy}")));
    }
    if extensions > MAX_EXTENSIONS {
        return Err(Error::invalid("extensions", format!("must be at most {MAX_EXTENSIONS}, got {extensions}")));
    }
    if accuracy >= SUCCESS_ACCURACY {
        return Ok(TrainingStatus::Succeeded);
    }
    if extensions == MAX_EXTENSIONS {
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

/// The rule on a finished seed: its end-of-run held-out `accuracy` after `steps` steps in all,
/// of a recipe of `recipe_steps` (an extension adds `recipe_steps`, so it has had
/// `steps / recipe_steps - 1`).
pub fn seed_outcome(accuracy: f64, steps: usize, recipe_steps: usize) -> Result<SeedOutcome> {
    if recipe_steps == 0 {
        return Err(Error::invalid("recipe steps", "must be at least 1, got 0"));
    }
    if !(0.0..=1.0).contains(&accuracy) {
        return Err(Error::invalid("held-out accuracy", format!("must be in [0, 1], got {accuracy}")));
    }
    if accuracy >= SUCCESS_ACCURACY {
        return Ok(SeedOutcome::Succeeded);
    }
    let extensions = (steps / recipe_steps).saturating_sub(1);
    Ok(if extensions >= MAX_EXTENSIONS { SeedOutcome::Failed } else { SeedOutcome::Unextended })
}

/// Whether an arm with `successful` seeds can be judged (§8.2: fewer than 2 successful seeds
/// leave every claim that rests on the arm *not run*).
pub fn enough_seeds(successful: usize) -> bool {
    successful >= MIN_SUCCESSFUL_SEEDS
}

/// Successful seeds an arm needs to be judged at all (§8.2).
pub const MIN_SUCCESSFUL_SEEDS: usize = 2;
