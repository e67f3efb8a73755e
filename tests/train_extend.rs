//! Extensions of a finished run (`theory/phase-lab.md` §8.2, `theory/training.md` §7): the
//! extension trains steps `start..end` on its own learning-rate schedule from the run's final
//! checkpoint and keeps the record from before it; stopped and resumed it ends bit-identical to
//! an uninterrupted one; under the v2 rules `reproduce` extends a seed below 90 % once and then
//! reports it failed, leaves a seed at or above 90 % alone, and under v1 changes nothing.

use phasekv::analysis::training::{
    seed_outcome_within, training_status, training_status_within, SeedOutcome, TrainingStatus, EXTENSION_LR_FRACTION,
    MAX_EXTENSIONS, MAX_EXTENSIONS_V3,
};
use phasekv::analysis::verdict::Rules;
use phasekv::model::train::{train, Observer, Outcome, Silent};
use phasekv::model::{extend, Engine, Extension, Metrics, RunConfig, StepReport};
use phasekv::reproduce::{self, Plan, Unit};
use phasekv::run_dir::RunDir;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::common;

fn tmp_dir(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("phasekv-extend-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A tiny run of `steps` steps on the fast engine at a learning rate (1e-4) far too low to
/// reach 90 % held-out exact match in so few steps.
fn tiny(steps: usize) -> RunConfig {
    let mut c = common::configs::tiny_config("w4s4");
    c.train.steps = steps;
    c.train.batch_size = 4;
    c.train.warmup_steps = 2;
    c.train.eval_every = 4;
    c.train.eval_samples = 8;
    c.train.checkpoint_every = 3;
    c.train.lr = 1e-4;
    c.train.engine = Engine::Fast;
    c
}

struct StopAt(usize);
impl Observer for StopAt {
    fn on_step(&mut self, r: &StepReport) -> ControlFlow<()> {
        if r.step == self.0 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

fn params(dir: &Path) -> Vec<(String, Vec<f32>)> {
    let map = candle_core::safetensors::load(dir.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    let mut v: Vec<(String, Vec<f32>)> =
        map.into_iter().map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The log's training lines as (step, loss, lr).
fn train_lines(dir: &Path) -> Vec<(u64, f64, f64)> {
    RunDir::open_existing(dir)
        .read_log()
        .unwrap()
        .iter()
        .filter(|l| l["kind"] == "train")
        .map(|l| (l["step"].as_u64().unwrap(), l["loss"].as_f64().unwrap(), l["lr"].as_f64().unwrap()))
        .collect()
}

/// A trained tiny run of `steps` steps in `dir` and the extension the rule gives it.
fn trained_below_the_threshold(dir: &Path, steps: usize) -> (RunConfig, Metrics, Extension) {
    let cfg = tiny(steps);
    let Outcome::Finished(m) = train(&cfg, dir, serde_json::json!({}), &mut Silent).unwrap() else {
        panic!("the recipe did not finish")
    };
    match training_status(m.final_eval.accuracy, 0, &cfg.train).unwrap() {
        TrainingStatus::Extend(x) => (cfg, m, x),
        other => panic!("lr 1e-4 for {steps} steps reached {:.3}: {other:?}", m.final_eval.accuracy),
    }
}

/// Whether the learning rates logged for steps `x.start + 1 ..= x.end` (1-based) are the
/// extension's warm restart: `peak / warmup` at its first step, the peak at the end of the
/// warm-up, then a cosine decay whose last step is within one step's decay of `final_lr`, each
/// step equal to [`Extension::lr_at`].
fn follows_the_schedule(lines: &[(u64, f64, f64)], x: &Extension) -> Result<(), String> {
    let ext: Vec<_> = lines.iter().filter(|l| l.0 as usize > x.start).collect();
    if ext.len() != x.end - x.start {
        return Err(format!("{} extension steps logged, want {}", ext.len(), x.end - x.start));
    }
    for &&(step, _, lr) in &ext {
        let want = x.lr_at(step as usize - 1);
        if lr != want {
            return Err(format!("step {step}: lr {lr}, the schedule says {want}"));
        }
    }
    let first = ext[0].2;
    if (first - x.peak_lr / x.warmup_steps as f64).abs() > 1e-15 {
        return Err(format!("first lr {first}, want peak / warmup = {}", x.peak_lr / x.warmup_steps as f64));
    }
    let peak = ext[x.warmup_steps - 1].2;
    if (peak - x.peak_lr).abs() > 1e-15 {
        return Err(format!("lr at the end of the warm-up {peak}, want the peak {}", x.peak_lr));
    }
    // The cosine's last step: one decay step short of the final rate.
    let decay = (x.end - x.start - x.warmup_steps) as f64;
    let one_step = (x.peak_lr - x.final_lr) * 0.5 * (1.0 - (std::f64::consts::PI / decay).cos());
    let last = ext.last().unwrap().2;
    if !(last >= x.final_lr && last - x.final_lr <= one_step * (1.0 + 1e-9)) {
        return Err(format!("last lr {last}, want within {one_step} above the final {}", x.final_lr));
    }
    Ok(())
}

#[test]
fn an_extension_trains_on_its_own_schedule_and_keeps_the_record_before_it() {
    let dir = tmp_dir("schedule");
    let (cfg, m0, x) = trained_below_the_threshold(&dir, 8);
    assert_eq!((x.index, x.start, x.end, x.warmup_steps), (1, 8, 16, 2));
    assert_eq!(x.peak_lr, EXTENSION_LR_FRACTION * cfg.train.lr);
    assert_eq!(x.final_lr, cfg.train.lr * cfg.train.min_lr_ratio);
    let (metrics0, weights0, config0) = (
        std::fs::read(dir.join("metrics.json")).unwrap(),
        std::fs::read(dir.join("model.safetensors")).unwrap(),
        std::fs::read(dir.join("config.json")).unwrap(),
    );
    let Outcome::Finished(m1) = extend(&dir, &x, &mut Silent).unwrap() else { panic!("extension did not finish") };
    // The run's record: 16 steps, the extension listed, the files it replaced kept unchanged.
    assert_eq!(m1.steps, 16);
    assert_eq!(m1.recipe_steps(), 8);
    assert_eq!(m1.extension_count(), 1);
    let r = &m1.extensions[0];
    assert_eq!(r.schedule, x);
    assert_eq!(r.accuracy_before, m0.final_eval.accuracy);
    assert_eq!(r.accuracy_after, m1.final_eval.accuracy);
    assert_eq!(std::fs::read(dir.join(&r.metrics_before)).unwrap(), metrics0);
    assert_eq!(std::fs::read(dir.join(&r.weights_before)).unwrap(), weights0);
    assert_eq!(std::fs::read(dir.join("config.json")).unwrap(), config0, "config.json keeps the recipe");
    assert_ne!(std::fs::read(dir.join("model.safetensors")).unwrap(), weights0, "the extension trained nothing");
    let evals: Vec<usize> = m1.evals.iter().map(|e| e.step).collect();
    assert_eq!(evals, vec![4, 8, 12, 16], "evaluated as the recipe does");
    let on_disk: Metrics = serde_json::from_slice(&std::fs::read(dir.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(on_disk.extensions, m1.extensions);
    // The analyses read the extended run (config, metrics and weights agree).
    let verified = phasekv::model::verify_run(&dir).unwrap();
    assert_eq!(verified.metrics.steps, 16);
    // Every step once, the extension's on its schedule.
    let lines = train_lines(&dir);
    assert_eq!(lines.iter().map(|l| l.0).collect::<Vec<_>>(), (1..=16).collect::<Vec<_>>());
    follows_the_schedule(&lines, &x).unwrap();
    // Nothing is overwritten: the same extension again, or one the run is not at, is refused.
    let again = extend(&dir, &x, &mut Silent).unwrap_err().to_string();
    assert!(again.contains("extension.index") && again.contains("already"), "{again}");
    let off = Extension { index: 2, start: 9, end: 17, ..x };
    let err = extend(&dir, &off, &mut Silent).unwrap_err().to_string();
    assert!(err.contains("extension.start") && err.contains("must be 16"), "{err}");
    let bad = Extension { peak_lr: f64::NAN, ..x };
    let err = extend(&dir, &bad, &mut Silent).unwrap_err().to_string();
    assert!(err.contains("extension.peak_lr"), "{err}");
    assert_eq!(on_disk.extensions, m1.extensions);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// §9.4's budget on a constructed slow run: a model that does not reach 90 % is extended, each
/// time on the warm restart's schedule from where the last one ended, until the v3 cap of five
/// recipes, and then reported failed; the v2 budget stops the same record after one extension
/// (the negative control: a budget that stops early leaves the run short of the cap).
#[test]
fn under_the_v3_budget_a_slow_run_is_extended_to_five_recipes_then_failed() {
    let dir = tmp_dir("budget-v3");
    let (cfg, _, first) = trained_below_the_threshold(&dir, 8);
    let mut x = first;
    let mut done = Vec::new();
    loop {
        let Outcome::Finished(m) = extend(&dir, &x, &mut Silent).unwrap() else { panic!("extension did not finish") };
        done.push(x);
        assert!(m.final_eval.accuracy < 0.9, "lr 1e-4 reached {:.3} after {} steps", m.final_eval.accuracy, m.steps);
        let under_v2 = training_status(m.final_eval.accuracy, m.extension_count().min(MAX_EXTENSIONS), &cfg.train);
        if m.extension_count() == MAX_EXTENSIONS {
            assert_eq!(under_v2.unwrap(), TrainingStatus::Failed, "v2 stops after one extension");
        }
        match training_status_within(m.final_eval.accuracy, m.extension_count(), &cfg.train, MAX_EXTENSIONS_V3).unwrap()
        {
            TrainingStatus::Extend(next) => x = next,
            TrainingStatus::Failed => break,
            TrainingStatus::Succeeded => panic!("succeeded below 90 %"),
        }
    }
    let m = metrics(&dir);
    assert_eq!((m.steps, m.extension_count()), (5 * 8, MAX_EXTENSIONS_V3), "trained to the cap of five recipes");
    let spans: Vec<(usize, usize, usize)> = done.iter().map(|x| (x.index, x.start, x.end)).collect();
    assert_eq!(spans, [(1, 8, 16), (2, 16, 24), (3, 24, 32), (4, 32, 40)]);
    let lines = train_lines(&dir);
    assert_eq!(lines.iter().map(|l| l.0).collect::<Vec<_>>(), (1..=40).collect::<Vec<_>>(), "every step once");
    for x in &done {
        let own: Vec<_> = lines.iter().copied().filter(|l| (l.0 as usize) <= x.end).collect();
        follows_the_schedule(&own, x).unwrap_or_else(|e| panic!("extension {}: {e}", x.index));
    }
    assert_eq!(
        seed_outcome_within(m.final_eval.accuracy, m.extension_count(), MAX_EXTENSIONS_V3).unwrap(),
        SeedOutcome::Failed
    );
    let err = seed_outcome_within(m.final_eval.accuracy, m.extension_count(), MAX_EXTENSIONS).unwrap_err().to_string();
    assert!(err.contains("extensions") && err.contains("at most 1"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// §9.4 on w12s12's curve: held-out accuracy after each block of the recipe, like seed 1 of the
/// v2 run (62 % after one recipe, 84 % after two) continued at its pace, succeeds at the fourth
/// extension under the v3 budget and fails after the first under v2's.
#[test]
fn a_w12s12_like_curve_trains_under_the_v3_budget_and_fails_under_v2s() {
    let recipe = tiny(3000).train;
    let curve = [0.62, 0.84, 0.87, 0.89, 0.93];
    let walk = |budget: usize| {
        let mut last = None;
        for (k, &acc) in curve.iter().enumerate() {
            match training_status_within(acc, k, &recipe, budget).unwrap() {
                TrainingStatus::Extend(x) => {
                    assert_eq!((x.index, x.start, x.end), (k + 1, (k + 1) * 3000, (k + 2) * 3000));
                    last = Some(x.end);
                }
                done => return (done, k, last),
            }
        }
        panic!("the curve ran out")
    };
    assert_eq!(walk(MAX_EXTENSIONS_V3), (TrainingStatus::Succeeded, 4, Some(15_000)));
    assert_eq!(walk(MAX_EXTENSIONS), (TrainingStatus::Failed, 1, Some(6_000)));
}

#[test]
fn an_extension_on_the_recipes_rate_is_caught_by_the_schedule_check() {
    // Negative control: an extension that ignored its warm restart and kept the recipe's rate
    // after its last step (`TrainConfig::lr_at` past `steps`: the final rate) runs, but its log
    // fails the check the extension passes, and it ends with other weights.
    let (a, b) = (tmp_dir("control-a"), tmp_dir("control-b"));
    let (cfg, _, x) = trained_below_the_threshold(&a, 8);
    trained_below_the_threshold(&b, 8);
    let recipe_rate = cfg.train.lr_at(x.start);
    let ignored = Extension { peak_lr: recipe_rate, final_lr: recipe_rate, ..x };
    extend(&a, &x, &mut Silent).unwrap();
    extend(&b, &ignored, &mut Silent).unwrap();
    follows_the_schedule(&train_lines(&a), &x).unwrap();
    let err = follows_the_schedule(&train_lines(&b), &x).unwrap_err();
    assert!(err.contains("lr"), "{err}");
    assert_ne!(params(&a), params(&b));
    for d in [a, b] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn an_interrupted_extension_resumes_to_the_uninterrupted_weights() {
    let (a, b) = (tmp_dir("resume-a"), tmp_dir("resume-b"));
    let (_, _, x) = trained_below_the_threshold(&a, 8);
    trained_below_the_threshold(&b, 8);
    let before = std::fs::read(b.join("metrics.json")).unwrap();
    let Outcome::Finished(ma) = extend(&a, &x, &mut Silent).unwrap() else { panic!("did not finish") };
    // Stopped at step 11 (off the checkpoint cadence of 3: the stop writes its own checkpoint).
    match extend(&b, &x, &mut StopAt(11)).unwrap() {
        Outcome::Interrupted { step } => assert_eq!(step, 11),
        o => panic!("expected an interruption, got {o:?}"),
    }
    assert_eq!(std::fs::read(b.join("metrics.json")).unwrap(), before, "metrics.json changed by a stopped extension");
    // A crash after the checkpoint leaves log lines of steps that will be redone.
    RunDir::open_existing(&b).append_log(&serde_json::json!({"kind": "train", "step": 12, "loss": 0.0})).unwrap();
    let Outcome::Finished(mb) = extend(&b, &x, &mut Silent).unwrap() else {
        panic!("resumed extension did not finish")
    };
    assert_eq!(params(&a), params(&b), "parameters differ after resume");
    assert_eq!(train_lines(&a), train_lines(&b), "losses or rates differ after resume");
    assert_eq!(ma.final_eval, mb.final_eval);
    assert_eq!(ma.evals, mb.evals);
    assert_eq!(ma.weights_hash, mb.weights_hash);
    assert_eq!(ma.extensions, mb.extensions);
    assert_eq!(std::fs::read(b.join(&mb.extensions[0].metrics_before)).unwrap(), before);
    for d in [a, b] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// A reproduction's progress, its lines kept.
#[derive(Default)]
struct Lines(Vec<String>, Silent);
impl reproduce::Progress for Lines {
    fn message(&mut self, msg: &str) {
        self.0.push(msg.to_string());
    }
    fn trainer(&mut self) -> &mut dyn Observer {
        &mut self.1
    }
    fn step(&mut self, _: &str, _: usize, _: usize) {}
}

/// A one-model plan of [`tiny`] under `rules`, with the smallest lab settings.
fn one_model_plan(rules: Rules) -> Plan {
    let mut plan = common::plans::tiny_sweep(8);
    plan.sweep = None;
    plan.presets = vec!["w4s4".into()];
    plan.seeds = vec![1];
    plan.run = tiny(8);
    plan.run.task.residue_modulus = 4;
    plan.run.train.checkpoint_every = 8;
    plan.rules = rules;
    plan
}

/// Runs the plan's one model unit in a fresh `out`, first calling `before` on its run
/// directory; returns the progress lines and the run directory.
fn run_the_unit(label: &str, plan: &Plan, before: impl Fn(&Path)) -> (Vec<String>, PathBuf, PathBuf) {
    let out = tmp_dir(label);
    std::fs::create_dir_all(&out).unwrap();
    reproduce::write_plan(&out, plan).unwrap();
    let units = plan.units().unwrap();
    let [Unit::Model(unit)] = units.as_slice() else { panic!("one model unit, got {units:?}") };
    let dir = out.join(unit.dir());
    before(&dir);
    let mut lines = Lines::default();
    assert!(reproduce::run_unit(&out, plan, &units[0], &mut lines).unwrap());
    assert!(!reproduce::run_unit(&out, plan, &units[0], &mut lines).unwrap(), "a rerun must reuse the unit");
    (lines.0, out, dir)
}

fn metrics(dir: &Path) -> Metrics {
    serde_json::from_slice(&std::fs::read(dir.join("metrics.json")).unwrap()).unwrap()
}

#[test]
fn under_v2_reproduce_extends_a_seed_below_90_percent_once_then_reports_it_failed() {
    let (lines, out, dir) = run_the_unit("v2-fails", &one_model_plan(Rules::V2), |_| {});
    let m = metrics(&dir);
    assert_eq!((m.steps, m.extension_count()), (16, 1), "{lines:#?}");
    let x = &m.extensions[0];
    assert!(m.final_eval.accuracy < 0.9);
    let want = format!("w4s4-seed1: held-out {:.1} % < 90 %: extension 1, steps 8..16", 100.0 * x.accuracy_before);
    assert!(lines.contains(&want), "no line {want:?} in {lines:#?}");
    assert_eq!(
        lines.iter().filter(|l| l.contains("< 90 %: extension")).count(),
        1,
        "extended more than once: {lines:#?}"
    );
    assert!(lines.iter().any(|l| l.contains("failed, excluded")), "{lines:#?}");
    follows_the_schedule(&train_lines(&dir), &x.schedule).unwrap();
    assert!(dir.join("unit.json").exists() && dir.join("eval-prefix.json").exists(), "analyses ran");
    // Where the unit's time went (issue 40): every stage, in order, each with its seconds.
    let u: phasekv::reproduce::ModelUnitResult =
        serde_json::from_slice(&std::fs::read(dir.join("unit.json")).unwrap()).unwrap();
    let names: Vec<&str> = u.stages.iter().map(|s| s.stage.as_str()).collect();
    let want =
        ["train", "extend", "eval prefix", "eval in-sequence", "knockout prefix", "knockout in-sequence", "gates"];
    assert_eq!(names, want, "{:?}", u.stages);
    assert!(u.stages.iter().all(|s| s.seconds.is_finite() && s.seconds >= 0.0), "{:?}", u.stages);
    assert!(u.stages[0].seconds > 0.0 && u.stages[1].seconds > 0.0, "training and its extension ran: {:?}", u.stages);
    let analyses: f64 = u.stages[2..].iter().map(|s| s.seconds).sum();
    assert!(analyses <= u.analysis_seconds + 1e-3, "{analyses} s of stages, {} s of analyses", u.analysis_seconds);
    // The shard's timing file sums the stages of the units that did work; none ran, nothing.
    let units = one_model_plan(Rules::V2).units().unwrap();
    let (totals, models) = reproduce::stage_totals(&out, &units.iter().collect::<Vec<_>>()).unwrap();
    assert_eq!((totals, models), (u.stages.clone(), 1));
    let (twice, models) = reproduce::stage_totals(&out, &[&units[0], &units[0]]).unwrap();
    assert_eq!(models, 2);
    for (t, s) in twice.iter().zip(&u.stages) {
        assert_eq!((t.stage.as_str(), t.seconds), (s.stage.as_str(), 2.0 * s.seconds));
    }
    assert_eq!(reproduce::stage_totals(&out, &[]).unwrap(), (vec![], 0));
    // The ledger reads the count from metrics.json: failed after its extension.
    assert_eq!(phasekv::analysis::training::run_outcome(&m).unwrap(), phasekv::analysis::training::SeedOutcome::Failed);
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn under_v2_a_seed_at_90_percent_is_not_extended_and_under_v1_nothing_is() {
    // A record at 95 %: the run is trained first, its final accuracy set to 0.95 (the rule
    // reads only that and the extension count; a tiny model does not reach 90 % in seconds).
    let plan = one_model_plan(Rules::V2);
    let at_95 = |dir: &Path| {
        let unit = plan.models().unwrap().remove(0);
        train(&unit.config, dir, serde_json::json!({}), &mut Silent).unwrap();
        let mut m = metrics(dir);
        m.final_eval.accuracy = 0.95;
        std::fs::write(dir.join("metrics.json"), serde_json::to_string_pretty(&m).unwrap() + "\n").unwrap();
    };
    let (lines, out, dir) = run_the_unit("v2-trains", &plan, at_95);
    assert_eq!((metrics(&dir).steps, metrics(&dir).extension_count()), (8, 0));
    assert!(lines.iter().any(|l| l == "w4s4-seed1: held-out 95.0 % >= 90 %: trained"), "{lines:#?}");
    assert!(!lines.iter().any(|l| l.contains("extension")), "{lines:#?}");
    std::fs::remove_dir_all(&out).unwrap();
    // v1: the failing seed is not extended and metrics.json has no `extensions` field.
    let (lines, out, dir) = run_the_unit("v1", &one_model_plan(Rules::V1), |_| {});
    assert_eq!(metrics(&dir).steps, 8);
    assert!(metrics(&dir).final_eval.accuracy < 0.9);
    assert!(!std::fs::read_to_string(dir.join("metrics.json")).unwrap().contains("extensions"));
    assert!(!lines.iter().any(|l| l.contains("extension") || l.contains("held-out")), "{lines:#?}");
    assert!(!dir.join("metrics.before-extension-1.json").exists());
    std::fs::remove_dir_all(&out).unwrap();
}

/// Copies the files (not the subdirectories) of run directory `from` into a new `to`.
fn copy_run(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// The parameters after steps `x.start..x.end` taken by hand from the checkpoint in `run`
/// (the batch of step `k` is `training_batch(cfg, k)`, the rate `x.lr_at(k)`), with the
/// checkpoint's AdamW moments when `moments`, with fresh ones otherwise.
fn by_hand(cfg: &RunConfig, run: &Path, x: &Extension, moments: bool) -> Vec<(String, Vec<f32>)> {
    use phasekv::model::checkpoint::Checkpointer;
    use phasekv::model::optim::AdamW;
    use phasekv::model::{engine_for, training_batch, Batch, Model};
    let device = candle_core::Device::Cpu;
    let model = Model::new(cfg, &device).unwrap();
    let t = &cfg.train;
    let mut opt = AdamW::new(model.store.vars(), t.beta1, t.beta2, t.weight_decay).unwrap();
    let dir = RunDir::open_existing(run);
    let p = Checkpointer::new(&dir, t.checkpoint_every, x.start).resume(&model, &mut opt).unwrap().unwrap();
    assert_eq!(p.step, x.start);
    if !moments {
        opt = AdamW::new(model.store.vars(), t.beta1, t.beta2, t.weight_decay).unwrap();
    }
    let mut engine = engine_for(cfg, &model).unwrap();
    for k in x.start..x.end {
        let s = engine.step(&Batch::new(&training_batch(cfg, k), &device).unwrap()).unwrap();
        opt.clipped_step(&s.grads, x.lr_at(k), t.grad_clip).unwrap();
    }
    drop(engine);
    let mut v: Vec<(String, Vec<f32>)> =
        model.tensors().into_iter().map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn an_extension_continues_the_final_checkpoints_parameters_and_moments_on_the_recipes_data() {
    // The extension's weights are those of its steps taken by hand from the recipe's final
    // checkpoint, AdamW moments included, on the recipe's batches of steps 8..16; restarting
    // the moments (negative control) gives other weights.
    let (a, copy) = (tmp_dir("by-hand"), tmp_dir("by-hand-copy"));
    let (cfg, _, x) = trained_below_the_threshold(&a, 8);
    copy_run(&a, &copy);
    extend(&a, &x, &mut Silent).unwrap();
    let extended = params(&a);
    assert_eq!(by_hand(&cfg, &copy, &x, true), extended, "not the recipe's checkpoint continued");
    assert_ne!(by_hand(&cfg, &copy, &x, false), extended, "the moments make no difference");
    for d in [a, copy] {
        std::fs::remove_dir_all(d).unwrap();
    }
}
