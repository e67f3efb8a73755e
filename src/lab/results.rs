//! The results the lab writes into a run directory as JSON: evaluation, knockout map, gates
//! and the cycle test.

use crate::analysis::eval::KnockoutMap;
use crate::analysis::gates::GateSnapshot;
use crate::analysis::phase::{self, PhaseProfile};
use crate::analysis::protocol::{Balance, Depths, Protocol};
use serde::{Deserialize, Serialize};

/// `eval-<protocol>.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalResult {
    /// Kernel preset (`w8s4` for the arm `w8s4-kv1`: the arm is [`EvalResult::arm`]).
    pub preset: String,
    /// The model's arm (the run directory's name without `-seed<k>`, [`crate::run_dir::arm_of`]);
    /// `None` in results written before issue 31 that were not upgraded
    /// ([`super::outcomes::upgrade_run`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<String>,
    /// Protocol.
    pub protocol: Protocol,
    /// Prompts per group.
    pub per_group: usize,
    /// The evaluation seed (of the prompts and permutation tests; the same for every model),
    /// not the model's training seed. Written as `seed` before issue 31, still read so.
    #[serde(rename = "eval_seed", alias = "seed")]
    pub eval_seed: u64,
    /// The kernel's stride (`None` for `full`).
    pub stride: Option<usize>,
    /// Achieved target-position balance.
    pub balance: Balance,
    /// Every phase statistic.
    pub profile: PhaseProfile,
    /// The pre-registered statistics (`theory/phase-lab.md` §7.2-7.3): the depth-controlled
    /// phase test at the stride, the corrected period scan, gaps with their noise floors.
    /// `None` in results written before they were computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statistics: Option<phase::PhaseStatistics>,
    /// Accuracy of an elimination-only reader on these prompts ([`layout::elimination_baseline`](crate::task::layout::elimination_baseline)):
    /// chance (`1 / n_records`) when the first query is scored. `None` in older results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elimination_baseline: Option<f64>,
    /// Identity of the run evaluated (`<config hash>/<weights hash>`); a cached result is
    /// reused only for the same identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The depths the families were drawn at (`theory/phase-lab.md` §9.2: at or beyond the run
    /// floor for the scored families, below the arm's floor for the near-query ones); `None`
    /// for every depth, as in every result of the v1 and v2 runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depths: Option<Depths>,
}

/// `knockout-<protocol>.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KnockoutResult {
    /// Kernel preset.
    pub preset: String,
    /// Protocol of the prompts.
    pub protocol: Protocol,
    /// Prompts per group.
    pub per_group: usize,
    /// Seed.
    pub seed: u64,
    /// The map.
    pub map: KnockoutMap,
    /// Identity of the run (see [`EvalResult::run_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The depths the families were drawn at (`theory/phase-lab.md` §9.2: at or beyond the run
    /// floor for the scored families, below the arm's floor for the near-query ones); `None`
    /// for every depth, as in every result of the v1 and v2 runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depths: Option<Depths>,
}

/// `gates.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatesResult {
    /// Kernel preset.
    pub preset: String,
    /// Window `W`.
    pub window: usize,
    /// Sequences averaged over.
    pub samples: usize,
    /// Seed of the sequences.
    pub seed: u64,
    /// One entry per saved checkpoint, in step order (the final model last).
    pub snapshots: Vec<GateSnapshot>,
    /// Identity of the run (see [`EvalResult::run_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// `cycle-<protocol>-layer<L>.json`: a gate-cycling experiment on one layer of a run
/// ([`crate::analysis::cycling`], `theory/gate-cycling.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CycleRunResult {
    /// Kernel preset.
    pub preset: String,
    /// Protocol of the prompts.
    pub protocol: Protocol,
    /// Prompts per group.
    pub per_group: usize,
    /// Seed of the prompts.
    pub seed: u64,
    /// The experiment.
    pub cycle: crate::analysis::cycling::CycleResult,
    /// Identity of the run (see [`EvalResult::run_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The depths the families were drawn at (`theory/phase-lab.md` §9.2: at or beyond the run
    /// floor for the scored families, below the arm's floor for the near-query ones); `None`
    /// for every depth, as in every result of the v1 and v2 runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depths: Option<Depths>,
}
