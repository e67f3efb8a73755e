//! `phasekv reproduce`: the plan of work behind the report, split into independent units that
//! can run in any order, on any machine (`--shard i/n`, a Slurm array), and resume.
//!
//! Units, each writing only under its own directory of the output:
//!
//! | unit | directory | what |
//! |---|---|---|
//! | `kernels` | `kernels/` | the invariant harness K1-K14 on every preset's grids, reference, candle autodiff and fast |
//! | `theory` | `theory/` | Theorem 1 at the defaults, the phase diagram, Theorem 2 over seeds |
//! | `model:<arm>-seed<k>` | `runs/<arm>-seed<k>/` | training (resumed or reused; extended under the plan's rules' budget), both protocols, knockouts, gates; under the v3 rules on the families beyond the run floor ([`Plan::run_floor`]), with the near-query measurement and, on [`CYCLE_ARM`], gate cycling |
//!
//! A unit that finished (its result file exists) is reused; a model run that was interrupted
//! resumes from its last checkpoint. Shard `i` of `n` runs units `i, i+n, i+2n, ...` of the
//! plan's list, heaviest first, so shards are disjoint and their union is the plan. Plans are
//! files ([`plan`]); [`slurm`] writes the array job that runs one.

mod analyses;
pub mod jobs;
pub mod plan;
pub mod slurm;

pub use analyses::CYCLE_ARM;
pub use plan::{
    parse_shard, shard, slurm_shard, Arm, Axis, Cut, Minutes, ModelUnit, Plan, Scale, Sweep, Unit, V3_SEEDS,
    V3_SEEDS_LARGE,
};

use crate::analysis::training::{training_status_within, TrainingStatus, SUCCESS_ACCURACY};
use crate::conformance::harness::fast_subject::FastSubject;
use crate::conformance::harness::subjects::{ReferenceSubject, TensorSubject};
use crate::conformance::harness::{run_all, Invariant};
use crate::kernel::spec::presets::listed_specs;
use crate::kernel::spec::KernelSpec;
use crate::lab;
use crate::model::{Metrics, RunConfig};
use crate::run_dir::write_json_atomic;
use crate::theory::diagram::{compare_with_reference, phase_diagram, spec_grid};
use crate::theory::flow::{convergence_curves, run_seeds, summarise, ConvergenceCurve, FlowConfig, FlowSummary};
use crate::theory::oracle::{theorem1, OracleOptions, PointVerdict};
use crate::theory::task::TaskParams;
use crate::{Error, Result};
use analyses::{run_analyses, LabPlan, Stages};
pub use analyses::{Progress, StageSeconds};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// The plan file written at the top of an output directory.
pub const PLAN_FILE: &str = "plan.json";

/// One row of the kernel-invariant table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InvariantRow {
    /// Preset, with `@o{k}` for a grid of a staggered preset other than offset 0
    /// ([`KernelSpec::grid_label`]).
    pub preset: String,
    /// The path that ran, as [`kernel_paths`] labels it: `reference-f64`,
    /// `candle-autodiff-f32-cpu` or `fast-f32-cpu`.
    pub implementation: String,
    /// Invariant id (K1..K14).
    pub invariant: String,
    /// Pass, fail or not applicable.
    pub status: InvariantStatus,
    /// Cases that applied and held.
    pub cases_passed: usize,
    /// The failure, if any.
    pub failure: Option<String>,
}

pub use crate::conformance::harness::InvariantStatus;

/// `kernels/kernels.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelsResult {
    /// Cases per invariant.
    pub cases: u32,
    /// Every (preset, implementation, invariant).
    pub rows: Vec<InvariantRow>,
    /// Wall seconds.
    pub seconds: f64,
}

/// `theory/theory.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TheoryResult {
    /// Theorem 1 at the defaults (written as its symbol: `+` holds, `k`, `g`).
    #[serde(with = "verdict_symbol")]
    pub t1_verdict: PointVerdict,
    /// `F_1` and the best loss found.
    pub t1_f1: f64,
    /// Best loss over restarts.
    pub t1_best_loss: f64,
    /// Restarts run.
    pub t1_restarts: usize,
    /// Phase diagram as text (spec layout).
    pub diagram: String,
    /// Cells of the diagram that agree with the spec's reference map, and the total.
    pub diagram_agree: (usize, usize),
    /// Theorem 2 over seeds.
    pub t2: FlowSummary,
    /// How the first [`T2_CURVE_SEEDS`] of those seeds approach concentration over time (the
    /// report's convergence figure). Results written before this field have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub t2_curves: Vec<ConvergenceCurve>,
    /// Wall seconds.
    pub seconds: f64,
}

/// Seeds of Theorem 2's run whose approach to concentration the theory unit records (the first
/// of the plan's `t2_seeds`): enough to show the spread of convergence times in one figure.
pub const T2_CURVE_SEEDS: u64 = 8;
/// Integrator steps between two records of a convergence curve (20 time units at `dt = 2`).
pub const T2_CURVE_EVERY: usize = 10;

/// Timing of one model unit (`runs/<..>/unit.json`), written when all its steps are done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelUnitResult {
    /// Preset.
    pub preset: String,
    /// Seconds of this invocation's analyses (training time is in `metrics.json`).
    pub analysis_seconds: f64,
    /// Wall seconds of each stage this invocation ran, in order (`train`, `extend`,
    /// `eval <protocol>`, under v3 `near <protocol>`, `knockout <protocol>` for prefix then
    /// in-sequence, under v3 on the `w8s8` arm `cycle prefix`, `gates`): where a seed's time goes (issue 40).
    /// A stage done by an earlier, interrupted invocation is reused and takes about 0 here.
    /// Units written before this field have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageSeconds>,
    /// Why the near-query measurement (`theory/phase-lab.md` §9.2, v3 only) wrote no file for
    /// this model: full attention's depth floor is 0, so no depth lies in front of it. `None`
    /// where it ran, and under v1 and v2, which have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_query_skipped: Option<String>,
}

/// Where the time of the units in `ran` went, summed by stage in the order stages first appear
/// (`train`, `extend`, `eval <protocol>`, `knockout <protocol>`, `gates`, from each model unit's
/// `unit.json` in `out`; `kernels` and `theory` from their own result's seconds), with the number
/// of model units read: the per-stage profile `reproduce` writes into the shard's timing file
/// (issue 40, item 1). A model unit written before stages were recorded adds nothing.
pub fn stage_totals(out: &Path, ran: &[&Unit]) -> Result<(Vec<StageSeconds>, usize)> {
    #[derive(Deserialize)]
    struct Seconds {
        seconds: f64,
    }
    let mut totals: Vec<StageSeconds> = Vec::new();
    let mut add = |stage: &str, seconds: f64| match totals.iter_mut().find(|t| t.stage == stage) {
        Some(t) => t.seconds += seconds,
        None => totals.push(StageSeconds { stage: stage.to_string(), seconds }),
    };
    let mut models = 0;
    for unit in ran {
        match unit {
            Unit::Model(m) => {
                let r: ModelUnitResult = lab::read_json(&out.join(m.dir()).join("unit.json"))?;
                r.stages.iter().for_each(|st| add(&st.stage, st.seconds));
                models += 1;
            }
            Unit::Kernels => {
                add("kernels", lab::read_json::<Seconds>(&out.join("kernels").join("kernels.json"))?.seconds)
            }
            Unit::Theory => add("theory", lab::read_json::<Seconds>(&out.join("theory").join("theory.json"))?.seconds),
        }
    }
    Ok((totals, models))
}

/// Writes `plan.json` into `out`, or checks that the one there is the same plan. Idempotent, so
/// that many tasks sharing one output may call it at once: the file is written only where
/// absent, through an atomic rename, and a writer that loses a race checks what won.
pub fn write_plan(out: &Path, plan: &Plan) -> Result<()> {
    plan.validate()?;
    let path = out.join(PLAN_FILE);
    let check = |path: &Path| -> Result<()> {
        let have: Plan = lab::read_json(path)?;
        if &have != plan {
            return Err(Error::File {
                path: path.to_path_buf(),
                reason: format!(
                    "holds a different plan ({:?} scale); use another --out or move it away (results are never overwritten)",
                    have.scale
                ),
            });
        }
        Ok(())
    };
    if path.exists() {
        return check(&path);
    }
    match write_json(&path, plan) {
        Ok(()) => check(&path),
        Err(e) if path.exists() => check(&path).map_err(|_| e),
        Err(e) => Err(e),
    }
}

/// Writes a unit's result file, creating its directory.
fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
    }
    write_json_atomic(path, value)
}

/// Runs one unit into `out`, reusing what is done; returns whether it did any work.
pub fn run_unit(out: &Path, plan: &Plan, unit: &Unit, progress: &mut dyn Progress) -> Result<bool> {
    match unit {
        Unit::Kernels => run_kernels(out, plan, progress),
        Unit::Theory => run_theory(out, plan, progress),
        Unit::Model(m) => run_model(out, m, plan, progress),
    }
}

/// How many implementation paths [`kernel_paths`] gives.
pub const KERNEL_PATHS: usize = 3;

/// The implementation paths of the kernel-invariant table, each labelled for what runs
/// ([`crate::conformance::harness::KernelUnderTest::label`]): the f64 reference
/// (`reference-f64`), candle's differentiable primitive ops in f32, the path training
/// differentiates (`candle-autodiff-f32-cpu`), and the fused no-gradient CPU forward
/// (`fast-f32-cpu`).
pub fn kernel_paths(spec: &KernelSpec) -> [Box<dyn crate::conformance::harness::KernelUnderTest>; KERNEL_PATHS] {
    [
        Box::new(ReferenceSubject::new(spec)),
        Box::new(TensorSubject::new(spec, candle_core::DType::F32, &candle_core::Device::Cpu)),
        Box::new(FastSubject::new(spec)),
    ]
}

fn run_kernels(out: &Path, plan: &Plan, progress: &mut dyn Progress) -> Result<bool> {
    let path = out.join("kernels").join("kernels.json");
    if path.exists() {
        progress.message("kernels: done before, reused");
        return Ok(false);
    }
    let t0 = Instant::now();
    let specs = listed_specs()?;
    let mut rows = Vec::new();
    // A staggered preset is checked on every grid its heads sit on in the default model shape,
    // as `kernel check` does, each grid's rows named `NAME@o{k}` (`theory/kernels.md`).
    let shape = crate::model::config::ModelConfig::default();
    let mut grids = 0;
    for (i, listed) in specs.iter().enumerate() {
        for spec in listed.head_kernels(shape.n_layer, shape.n_kv_head)? {
            grids += 1;
            for subject in kernel_paths(&spec) {
                let implementation = subject.label();
                for r in run_all(subject.as_ref(), plan.kernel_cases, 0) {
                    rows.push(InvariantRow {
                        preset: spec.grid_label(),
                        implementation: implementation.clone(),
                        invariant: r.invariant.id().to_string(),
                        status: r.status,
                        cases_passed: r.cases_passed,
                        failure: r.failure,
                    });
                }
            }
        }
        progress.step("kernel invariants", i + 1, specs.len());
    }
    debug_assert_eq!(rows.len(), grids * KERNEL_PATHS * Invariant::ALL.len());
    let failed = rows.iter().filter(|r| r.status == InvariantStatus::Fail).count();
    write_json(&path, &KernelsResult { cases: plan.kernel_cases, rows, seconds: t0.elapsed().as_secs_f64() })?;
    progress.message(&format!("kernels: {failed} failing (preset, implementation, invariant) rows"));
    Ok(true)
}

fn run_theory(out: &Path, plan: &Plan, progress: &mut dyn Progress) -> Result<bool> {
    let path = out.join("theory").join("theory.json");
    if path.exists() {
        progress.message("theory: done before, reused");
        return Ok(false);
    }
    let t0 = Instant::now();
    let p = TaskParams::default();
    let opts = OracleOptions::default();
    progress.message("theory: Theorem 1 at the defaults");
    let t1 = theorem1(&p, &opts, || {})?;
    progress.message("theory: phase diagram");
    let (betas, gammas) = spec_grid();
    let total = betas.len() * gammas.len();
    let d = phase_diagram(&p, &betas, &gammas, &opts, || {})?;
    progress.step("phase diagram", total, total);
    let diff = compare_with_reference(&d).map(|v| v.len()).unwrap_or(total);
    progress.message("theory: Theorem 2 over seeds");
    let cfg = FlowConfig::default();
    let seeds: Vec<u64> = (0..plan.t2_seeds).collect();
    let runs = run_seeds(&cfg, &seeds, || {})?;
    let curve_seeds: Vec<u64> = seeds.iter().copied().take(T2_CURVE_SEEDS as usize).collect();
    let t2_curves = convergence_curves(&cfg, &curve_seeds, T2_CURVE_EVERY)?;
    let result = TheoryResult {
        t1_verdict: t1.verdict,
        t1_f1: t1.f1,
        t1_best_loss: t1.best_loss,
        t1_restarts: t1.restarts.len(),
        diagram: d.to_text(),
        diagram_agree: (total - diff.min(total), total),
        t2: summarise(&cfg.params, &runs),
        t2_curves,
        seconds: t0.elapsed().as_secs_f64(),
    };
    write_json(&path, &result)?;
    progress.message(&format!(
        "theory: T1 '{}', diagram {}/{} cells as the spec, T2 {:.0} % of {} seeds converged",
        result.t1_verdict.symbol(),
        result.diagram_agree.0,
        total,
        100.0 * result.t2.converged_fraction,
        plan.t2_seeds
    ));
    Ok(true)
}

fn run_model(out: &Path, unit: &ModelUnit, plan: &Plan, progress: &mut dyn Progress) -> Result<bool> {
    let dir = out.join(unit.dir());
    let key = unit.key();
    let preset = key.as_str();
    let unit_file = dir.join("unit.json");
    if unit_file.exists() {
        progress.message(&format!("{preset}: done before, reused"));
        return Ok(false);
    }
    let lab_plan = LabPlan { settings: &plan.lab, rules: plan.rules, run_floor: plan.run_floor()? };
    let config = &unit.config;
    let mut stages = Stages::start();
    if !dir.join(crate::run_dir::METRICS_FILE).exists() {
        progress.message(&format!("{preset}: training {} steps", config.train.steps));
        let env = serde_json::json!({ "command": "phasekv reproduce" });
        match crate::model::train(config, &dir, env, progress.trainer())? {
            crate::model::Outcome::Finished(m) => progress.message(&format!(
                "{preset}: trained, exact match {:.1} % in {:.1} min",
                100.0 * m.final_eval.accuracy,
                m.train_seconds / 60.0
            )),
            crate::model::Outcome::Interrupted { step } => {
                return Err(Error::invalid("training", format!("{preset} stopped at step {step}; rerun to resume")))
            }
        }
    } else {
        progress.message(&format!("{preset}: trained before, reused"));
    }
    stages.lap("train");
    if let Some(budget) = lab_plan.rules.max_extensions() {
        apply_training_rule(&dir, preset, config, budget, progress)?;
        stages.lap("extend");
    }
    let t0 = Instant::now();
    let near_query_skipped = run_analyses(&dir, unit, &lab_plan, progress, &mut stages)?;
    let _lock = crate::run_dir::DirLock::shared(&dir)?;
    write_json(
        &unit_file,
        &ModelUnitResult {
            preset: unit.preset().to_string(),
            analysis_seconds: t0.elapsed().as_secs_f64(),
            stages: stages.done(),
            near_query_skipped,
        },
    )?;
    crate::run_dir::manifest::record(&dir, &["unit.json".to_string()])?;
    progress.message(&format!("{preset}: analyses done"));
    Ok(true)
}
/// The training-success rule of the v2 and v3 rules (`theory/phase-lab.md` §8.2, §9.4) on the
/// finished run in `dir`: while its held-out accuracy is below [`SUCCESS_ACCURACY`] with an
/// extension left, runs (or resumes) the extension ([`crate::model::extend()`]); then says what
/// the rule made of the seed. At most `budget` extensions (the rules'
/// [`crate::analysis::verdict::Rules::max_extensions`]), since the rule says `Failed` after them.
fn apply_training_rule(
    dir: &Path,
    preset: &str,
    config: &RunConfig,
    budget: usize,
    progress: &mut dyn Progress,
) -> Result<()> {
    loop {
        let metrics: Metrics = lab::read_json(&dir.join(crate::run_dir::METRICS_FILE))?;
        let accuracy = 100.0 * metrics.final_eval.accuracy;
        let (held_out, done) = (metrics.final_eval.accuracy, metrics.extension_count());
        let extension = match training_status_within(held_out, done, &config.train, budget)? {
            TrainingStatus::Extend(x) => x,
            TrainingStatus::Succeeded => {
                progress.message(&format!(
                    "{preset}: held-out {accuracy:.1} % >= {:.0} %: trained",
                    100.0 * SUCCESS_ACCURACY
                ));
                return Ok(());
            }
            TrainingStatus::Failed => {
                progress.message(&format!(
                    "{preset}: held-out {accuracy:.1} % < {:.0} % after {} extension(s): failed, excluded from every pooled test",
                    100.0 * SUCCESS_ACCURACY,
                    metrics.extension_count()
                ));
                return Ok(());
            }
        };
        progress.message(&format!(
            "{preset}: held-out {accuracy:.1} % < {:.0} %: extension {}, steps {}..{}",
            100.0 * SUCCESS_ACCURACY,
            extension.index,
            extension.start,
            extension.end
        ));
        match crate::model::extend(dir, &extension, progress.trainer())? {
            crate::model::Outcome::Finished(m) => progress.message(&format!(
                "{preset}: extension {} done, held-out {:.1} %",
                extension.index,
                100.0 * m.final_eval.accuracy
            )),
            crate::model::Outcome::Interrupted { step } => {
                return Err(Error::invalid(
                    "training",
                    format!("{preset} stopped at step {step} of extension {}; rerun to resume", extension.index),
                ))
            }
        }
    }
}

/// The migration of `phasekv analyze manifest`: writes the provenance manifest
/// ([`crate::run_dir::manifest`]) of the run in `run` after checking its data with the
/// report's loader ([`lab::load::load_run`], against the plan's unit when `run` sits in a
/// reproduction output `OUT/runs/<name>` with `OUT/plan.json`), under the run's lock. A run
/// that already has a manifest is verified and left as it is (`None`); one whose manifest does
/// not verify, or whose data the loader refuses, is an error and nothing is written. Returns
/// the number of result files recorded.
pub fn write_manifest(run: &Path) -> Result<Option<usize>> {
    use crate::run_dir::manifest;
    if !run.join(crate::run_dir::CONFIG_FILE).is_file() {
        return Err(Error::File { path: run.to_path_buf(), reason: "not a run directory (no config.json)".into() });
    }
    let _lock = crate::run_dir::DirLock::shared(run)?;
    if manifest::read(run)?.is_some() {
        manifest::verify(run)?;
        return Ok(None);
    }
    let name = run.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let plan_file = run.parent().filter(|p| p.file_name().is_some_and(|n| n == "runs")).and_then(Path::parent);
    let expected = match plan_file.map(|o| o.join(PLAN_FILE)).filter(|p| p.exists()) {
        Some(p) => {
            let plan: Plan = lab::read_json(&p)?;
            plan.models()?.iter().find(|m| m.key() == name).map(|m| lab::load::Expected::of(&m.config, plan.rules))
        }
        None => None,
    };
    lab::load::load_run(run, expected.as_ref())?;
    Ok(Some(manifest::write_all(run)?.files.len()))
}

/// A Theorem 1 verdict serialized as its map symbol (`"+"`, `"k"`, `"g"`), as `theory.json`
/// has always written it.
mod verdict_symbol {
    use crate::theory::oracle::PointVerdict;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &PointVerdict, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_char(v.symbol())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<PointVerdict, D::Error> {
        let c = char::deserialize(d)?;
        PointVerdict::from_symbol(c)
            .ok_or_else(|| serde::de::Error::custom(format!("t1_verdict {c:?} is not one of '+', 'k', 'g'")))
    }
}
