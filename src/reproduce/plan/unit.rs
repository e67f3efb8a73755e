//! The units a plan expands to: the kernel harness, the theory checks and one trained model
//! per arm and seed, each with a stable id.

use crate::model::RunConfig;
use std::path::{Path, PathBuf};

/// One trained model of a plan: an arm and a seed.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelUnit {
    /// The arm's name.
    pub arm: String,
    /// Training seed.
    pub seed: u64,
    /// The full training config (preset, overrides and seed applied).
    pub config: RunConfig,
}

impl ModelUnit {
    /// `<arm>-seed<seed>`: the run directory's name and, after `model:`, the unit id.
    pub fn key(&self) -> String {
        format!("{}-seed{}", self.arm, self.seed)
    }

    /// The run directory, relative to the output.
    pub fn dir(&self) -> PathBuf {
        Path::new("runs").join(self.key())
    }

    /// The kernel preset.
    pub fn preset(&self) -> &str {
        &self.config.model.preset
    }
}

/// One independent piece of work.
#[derive(Clone, Debug, PartialEq)]
pub enum Unit {
    /// The invariant harness.
    Kernels,
    /// The theory checks.
    Theory,
    /// One trained model and its analyses.
    Model(Box<ModelUnit>),
}

impl Unit {
    /// The unit's stable id: `kernels`, `theory`, `model:<arm>-seed<k>`.
    pub fn name(&self) -> String {
        match self {
            Unit::Kernels => "kernels".into(),
            Unit::Theory => "theory".into(),
            Unit::Model(m) => format!("model:{}", m.key()),
        }
    }
}
