//! Plans: what a reproduction runs, as a JSON file (`plans/*.json` are the built-in ones).
//!
//! A plan lists model arms (plain `presets`, explicit `arms` with config overrides, and a
//! `sweep`: the cartesian product of named axes, filtered by `require`), the `seeds` every arm
//! is trained with, the base training config `run`, the phase-lab settings `lab`, and whether the
//! `theory` and `kernels` units run. Expansion gives units with stable ids: `model:<arm>-seed<k>`
//! (the arm's name comes from its preset, its own `name`, or the sweep's `name` template filled
//! with the axis values), `theory` and `kernels`. Ids depend only on names and values, never on
//! positions, so adding an axis value or a seed leaves every other id (and run directory) as it
//! was.

mod expand;
mod file;
mod shard;
mod sweep;
mod unit;

pub use file::{
    Arm, Axis, Cut, Minutes, Plan, Scale, Sweep, FULL_PLAN, MAX_UNITS, QUICK_PLAN, V3_SEEDS, V3_SEEDS_LARGE,
};
pub use shard::{parse_shard, shard, slurm_shard};
pub use unit::{ModelUnit, Unit};
