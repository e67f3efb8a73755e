//! Constructed run sets for the ledger's claim tests (`tests/ledger_v2.rs`, `tests/ledger_v3.rs`):
//! a plan and, per arm and seed, the files a reproduction writes (`config.json`, `metrics.json`,
//! `eval-<protocol>.json` and its outcome lines), with every group's accuracy and answer
//! probability chosen by the test. Files other claims read (knockout maps, cycling results) are
//! written by the test into [`RunSet::run`]'s directories before [`RunSet::collect`].

use phasekv::analysis::phase::{self, Outcome};
use phasekv::analysis::protocol::{Balance, Protocol};
use phasekv::analysis::verdict::Rules;
use phasekv::lab::EvalResult;
use phasekv::report::ledger::{Claim, Collected, LEDGER};
use phasekv::reproduce::{Plan, Scale};
use std::path::{Path, PathBuf};

/// Residue groups of the fixture's task.
pub const M: usize = 24;
/// Phase families per seed and protocol: ten per depth, eight depths.
pub const FAMILIES: usize = 80;

/// A fresh temporary directory named after the test file's `prefix` and `label`.
pub fn tmp_dir(prefix: &str, label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("phasekv-{prefix}-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `v` as pretty JSON, creating the folders above it.
pub fn write<T: serde::Serialize>(path: &Path, v: &T) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// Outcomes as `eval` writes them (`id = group * FAMILIES + family`): family `f` at depth
/// `8 + 4 (f mod 8)`, its member of group `g` at position `24 + g`; of each (group, depth) cell's
/// ten families the first `round(10 acc(g))` are correct; every answer has probability
/// `prob(g, correct)`. A correct member answers its family's value (`v<f>`), a wrong one `x`:
/// a family whose members are all right or all wrong answers alike (flip rate 0).
pub fn outcomes(acc: &dyn Fn(usize) -> f64, prob: &dyn Fn(usize, bool) -> f64) -> Vec<Outcome> {
    outcomes_from(8, acc, prob)
}

/// [`outcomes`] with its depths starting at `base` instead of 8 (`base + 4 (f mod 8)`): a v3
/// run set scores beyond its plan's floor, which a layout arm puts at 16.
pub fn outcomes_from(base: usize, acc: &dyn Fn(usize) -> f64, prob: &dyn Fn(usize, bool) -> f64) -> Vec<Outcome> {
    let mut out = Vec::new();
    for g in 0..M {
        let k = (acc(g) * 10.0).round() as usize;
        for f in 0..FAMILIES {
            let correct = f / 8 < k;
            out.push(Outcome {
                id: g * FAMILIES + f,
                group: g,
                correct,
                prob: Some(prob(g, correct)),
                position: Some(M + g),
                depth: Some(base + 4 * (f % 8)),
                family: Some(f),
                predicted: Some(if correct { format!("v{f}") } else { "x".into() }),
                ..Outcome::default()
            });
        }
    }
    out
}

/// Writes `eval-<protocol>.json` and its outcome lines of arm `arm` into `dir`, depths from
/// `base` ([`outcomes_from`]).
pub fn write_eval(
    base: usize,
    dir: &Path,
    arm: &str,
    preset: &str,
    p: Protocol,
    acc: &dyn Fn(usize) -> f64,
    prob: &dyn Fn(usize, bool) -> f64,
) {
    let s = phasekv::model::ModelConfig { preset: preset.into(), ..Default::default() }.phase_stride().unwrap();
    let o = outcomes_from(base, acc, prob);
    let r = EvalResult {
        preset: preset.into(),
        protocol: p,
        per_group: FAMILIES,
        arm: Some(arm.into()),
        eval_seed: 0,
        stride: s,
        balance: Balance { groups: vec![], mean_spread: 0.0, std_spread: 0.0, depth_cdf_gap: Some(0.0) },
        profile: phase::profile(&o, M, s, 0).unwrap(),
        statistics: None,
        elimination_baseline: None,
        run_id: None,
        // Every outcome lies at depth `base` or deeper: the band a v3 run records (§9.2), read
        // by the v3 report's floor check and ignored under v1 and v2.
        depths: Some(phasekv::analysis::protocol::Depths::beyond(base)),
    };
    write(&dir.join(format!("eval-{}.json", p.name())), &r);
    let lines: Vec<String> = o.iter().map(|o| serde_json::to_string(o).unwrap()).collect();
    std::fs::write(dir.join(format!("eval-{}-outcomes.jsonl", p.name())), lines.join("\n") + "\n").unwrap();
}

/// One seed's data: held-out accuracy, steps trained and extensions recorded, per-group accuracy
/// and probability.
#[derive(Clone, Copy)]
pub struct Seed<'a> {
    /// Held-out exact match at the end.
    pub held_out: f64,
    /// Steps trained.
    pub steps: usize,
    /// Extensions `metrics.json` records (`steps` beyond the recipe with none: one).
    pub extensions: usize,
    /// Accuracy of residue group `g`.
    pub acc: &'a dyn Fn(usize) -> f64,
    /// Answer probability of group `g` for a correct or wrong answer.
    pub prob: &'a dyn Fn(usize, bool) -> f64,
}

impl<'a> Seed<'a> {
    /// A seed that trained at its recipe: held-out `held_out` after 2 500 steps.
    pub fn new(held_out: f64, acc: &'a dyn Fn(usize) -> f64, prob: &'a dyn Fn(usize, bool) -> f64) -> Self {
        Seed { held_out, steps: 2500, extensions: 0, acc, prob }
    }
}

/// One arm of a fixture: its name, preset, plan overrides and seeds (`0..seeds.len()`).
pub struct FixtureArm<'a> {
    /// The arm's name.
    pub name: &'a str,
    /// Its preset.
    pub preset: &'a str,
    /// Plan overrides (`"model.n_kv_head": 1`).
    pub overrides: serde_json::Value,
    /// Its seeds' data.
    pub seeds: Vec<Seed<'a>>,
}

impl<'a> FixtureArm<'a> {
    /// An arm named after its preset, without overrides.
    pub fn preset(preset: &'a str, seeds: Vec<Seed<'a>>) -> Self {
        FixtureArm { name: preset, preset, overrides: serde_json::json!({}), seeds }
    }
}

/// A written run set: its folder and plan.
pub struct RunSet {
    /// The reproduction output's folder.
    pub dir: PathBuf,
    /// Its plan.
    pub plan: Plan,
}

impl RunSet {
    /// The run directory of `arm`'s seed `seed`.
    pub fn run(&self, arm: &str, seed: u64) -> PathBuf {
        self.dir.join("runs").join(format!("{arm}-seed{seed}"))
    }

    /// The collected data.
    pub fn collect(&self) -> Collected {
        phasekv::report::ledger::collect(std::slice::from_ref(&self.dir)).unwrap()
    }
}

impl Drop for RunSet {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Writes a run set of `arms` under `rules` into a fresh folder (`prefix`, `label`).
pub fn run_set(prefix: &str, label: &str, rules: Rules, arms: &[FixtureArm]) -> RunSet {
    let dir = tmp_dir(prefix, label);
    let mut plan = Plan::builtin(Scale::Full).unwrap();
    plan.presets = vec![];
    plan.arms = arms
        .iter()
        .map(|a| {
            serde_json::from_value(serde_json::json!({
                "name": a.name, "preset": a.preset, "overrides": a.overrides,
                "seeds": (0..a.seeds.len() as u64).collect::<Vec<u64>>()
            }))
            .unwrap()
        })
        .collect();
    plan.seeds = (0..arms.iter().map(|a| a.seeds.len()).max().unwrap_or(1) as u64).collect();
    plan.rules = rules;
    plan.sweep = None;
    write(&dir.join("plan.json"), &plan);
    let base = plan.run_floor().unwrap().unwrap_or(0).max(8);
    for unit in plan.models().unwrap() {
        let run = dir.join(unit.dir());
        write(&run.join("config.json"), &unit.config);
        let a = arms.iter().find(|a| a.name == unit.arm).expect("an arm of the plan");
        let s = &a.seeds[unit.seed as usize];
        let ev = serde_json::json!({"step": s.steps, "loss": 0.1, "accuracy": s.held_out, "token_accuracy": s.held_out, "queries": 10000});
        let mut metrics = serde_json::json!({
            "preset": a.preset, "seed": unit.seed, "steps": s.steps, "best_accuracy": s.held_out,
            "chance_in_context": 0.125, "train_seconds": 1.0, "tokens_per_second": 1e4, "parameters": 1000,
            "final_eval": ev, "evals": [ev]
        });
        // A seed trained past its recipe had extensions, which metrics.json records (the count
        // the training-success rule reads).
        let recipe = unit.config.train.steps;
        let n_ext = if s.steps > recipe { s.extensions.max(1) } else { s.extensions };
        let t = &unit.config.train;
        let ext: Vec<serde_json::Value> = (1..=n_ext)
            .map(|i| {
                serde_json::json!({
                    "index": i, "start": recipe * i, "end": if i == n_ext { s.steps } else { recipe * (i + 1) },
                    "warmup_steps": t.warmup_steps, "peak_lr": 0.5 * t.lr, "final_lr": t.lr * t.min_lr_ratio,
                    "accuracy_before": 0.3, "accuracy_after": s.held_out,
                    "metrics_before": format!("metrics.before-extension-{i}.json"),
                    "weights_before": format!("model.before-extension-{i}.safetensors")
                })
            })
            .collect();
        if !ext.is_empty() {
            metrics["extensions"] = serde_json::json!(ext);
        }
        write(&run.join("metrics.json"), &metrics);
        for p in Protocol::ALL {
            write_eval(base, &run, a.name, a.preset, p, s.acc, s.prob);
        }
    }
    RunSet { dir, plan }
}

/// Claim `id` of `c` (only that claim is computed, so a test takes seconds).
pub fn claim_of(c: &Collected, id: &str) -> Claim {
    let l = LEDGER.iter().find(|l| l.id() == id).unwrap_or_else(|| panic!("{id} is not in LEDGER"));
    let out = l.check(c);
    assert_eq!(out.id, id);
    out
}
