//! A model unit's analyses after training: both protocols' evaluations, under the v3 rules the
//! near-query measurement, the knockouts, under v3 the gate cycling of [`CYCLE_ARM`], and the
//! gate statistics, each stage timed (`theory/phase-lab.md` §8, §9.2, §9.7).

use super::plan::ModelUnit;
use crate::analysis::eval::Intervention;
use crate::analysis::protocol::Protocol;
use crate::analysis::verdict::Rules;
use crate::lab::{self, LabSettings, Scope, NEAR_QUERY_PER_GROUP};
use crate::model::train::Observer;
use crate::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// One stage of a model unit and its wall seconds ([`super::ModelUnitResult::stages`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageSeconds {
    /// What ran.
    pub stage: String,
    /// Wall seconds it took.
    pub seconds: f64,
}

/// Progress of a reproduction.
pub trait Progress {
    /// A line of news.
    fn message(&mut self, msg: &str);
    /// The observer of a training run.
    fn trainer(&mut self) -> &mut dyn Observer;
    /// Progress of an analysis step.
    fn step(&mut self, stage: &str, done: usize, total: usize);
    /// The stop check the analyses poll (the CLI's signals); never, by default.
    fn stop(&self) -> crate::stop::Stop {
        crate::stop::Stop::never()
    }
}

/// The arm whose last layer's gates are cycled under the v3 rules (E11, §9.7).
pub const CYCLE_ARM: &str = "w8s8";

/// What the lab runs on a model unit: the plan's settings and rules and, under v3, the run floor
/// every scored family lies at or beyond ([`super::Plan::run_floor`]).
pub(super) struct LabPlan<'a> {
    pub settings: &'a LabSettings,
    pub rules: Rules,
    pub run_floor: Option<usize>,
}

impl LabPlan<'_> {
    /// The scored families: beyond the run floor under v3, every depth before.
    fn scored(&self) -> Scope {
        self.run_floor.map_or(Scope::All, Scope::Beyond)
    }
}

/// The wall clock of a unit's stages, one lap each ([`super::ModelUnitResult::stages`]).
pub(super) struct Stages {
    clock: Instant,
    list: Vec<StageSeconds>,
}

impl Stages {
    pub fn start() -> Self {
        Stages { clock: Instant::now(), list: Vec::new() }
    }

    /// Ends the stage `stage` now.
    pub fn lap(&mut self, stage: &str) {
        self.list.push(StageSeconds { stage: stage.to_string(), seconds: self.clock.elapsed().as_secs_f64() });
        self.clock = Instant::now();
    }

    pub fn done(self) -> Vec<StageSeconds> {
        self.list
    }
}

/// Runs the analyses of the trained model of `unit` in `dir` (each reused where done); returns
/// why the near-query measurement wrote nothing, where it did not (full attention, under v3).
pub(super) fn run_analyses(
    dir: &Path,
    unit: &ModelUnit,
    plan: &LabPlan,
    progress: &mut dyn Progress,
    stages: &mut Stages,
) -> Result<Option<String>> {
    let key = unit.key();
    let s = plan.settings;
    let stop = progress.stop();
    let config = &unit.config;
    let scored = plan.scored();
    for protocol in Protocol::ALL {
        let stage = format!("{key} eval {}", protocol.name());
        lab::eval_run(dir, protocol, s.eval_per_group, s.seed, scored, &mut |d, t| progress.step(&stage, d, t), &stop)?;
        stages.lap(&format!("eval {}", protocol.name()));
    }
    let mut near_query_skipped = None;
    if plan.rules.scores_beyond_floor() {
        let own = crate::model::floor::depth_floor(&config.model, &config.task)?;
        let near = Scope::Near(own.depth);
        match near.empty_reason() {
            Some(why) => {
                progress.message(&format!("{key}: near-query accuracy not measured: {why}"));
                near_query_skipped = Some(why);
            }
            None => {
                for protocol in Protocol::ALL {
                    let stage = format!("{key} near {}", protocol.name());
                    let bar = &mut |d, t| progress.step(&stage, d, t);
                    lab::eval_run(dir, protocol, NEAR_QUERY_PER_GROUP, s.seed, near, bar, &stop)?;
                    stages.lap(&format!("near {}", protocol.name()));
                }
            }
        }
    }
    // §8.9: from the v2 rules on each arm gets its own intervention (a layer layout with one KV
    // head per layer: the KV head, so a knockout removes the layer's entries); v1 knocked out KV
    // heads.
    let intervention = match plan.rules {
        Rules::V1 => Intervention::KvHead,
        Rules::V2 | Rules::V3 => Intervention::for_model(&config.model, &config.model.kernel()?),
    };
    for protocol in Protocol::ALL {
        let stage = format!("{key} knockout {}", protocol.name());
        let (n, r) = (s.knockout_per_group, s.knockout_reference);
        let bar = &mut |d, t| progress.step(&stage, d, t);
        lab::knockout_run(dir, protocol, n, r, s.seed, intervention, scored, bar, &stop)?;
        stages.lap(&format!("knockout {}", protocol.name()));
    }
    if plan.rules.scores_beyond_floor() && unit.arm == CYCLE_ARM {
        let ks = cycle_amounts(&config.model)?;
        let layer = config.model.n_layer - 1;
        let protocol = Protocol::Prefix;
        let stage = format!("{key} cycle {}", protocol.name());
        let bar = &mut |d, t| progress.step(&stage, d, t);
        lab::cycle_run(dir, protocol, s.knockout_per_group, s.seed, layer, None, &ks, scored, bar, &stop)?;
        stages.lap(&format!("cycle {}", protocol.name()));
    }
    let stage = format!("{key} gates");
    lab::gates_run(dir, s.gate_samples, s.seed, &mut |d, t| progress.step(&stage, d, t), &stop)?;
    stages.lap("gates");
    Ok(near_query_skipped)
}

/// E11's cycle amounts (§9.7): every `k` in `1..S`, `S` the kernel's stride (none for full
/// attention, which has no gates to cycle: an error).
pub fn cycle_amounts(model: &crate::model::ModelConfig) -> Result<Vec<usize>> {
    let stride = model.phase_stride()?.ok_or_else(|| {
        crate::Error::invalid("cycle", format!("{}: full attention has no gates to cycle", model.preset))
    })?;
    Ok((1..stride).collect())
}
