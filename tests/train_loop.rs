//! The training loop: resume after an interruption reproduces the uninterrupted run exactly
//! (no lost or repeated steps), finished runs are never overwritten, and a tiny model learns.

use phasekv::model::train::{train, Observer, Outcome, Silent};
use phasekv::model::RunConfig;
use phasekv::model::StepReport;
use phasekv::run_dir::RunDir;
use phasekv::Error;
use std::ops::ControlFlow;
use std::path::PathBuf;

use crate::common;

fn tmp_dir(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("phasekv-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn tiny(preset: &str, steps: usize) -> RunConfig {
    let mut c = common::configs::tiny_config(preset);
    c.train.steps = steps;
    c.train.batch_size = 4;
    c.train.warmup_steps = 2;
    c.train.eval_every = 4;
    c.train.eval_samples = 8;
    c.train.checkpoint_every = 3;
    c
}

/// Stops after a given step.
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

fn params(dir: &std::path::Path) -> Vec<(String, Vec<f32>)> {
    let map = candle_core::safetensors::load(dir.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    let mut v: Vec<(String, Vec<f32>)> =
        map.into_iter().map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn train_steps(dir: &std::path::Path) -> Vec<u64> {
    RunDir::open_existing(dir)
        .read_log()
        .unwrap()
        .iter()
        .filter(|l| l["kind"] == "train")
        .map(|l| l["step"].as_u64().unwrap())
        .collect()
}

#[test]
fn resume_after_interruption_equals_the_uninterrupted_run() {
    for preset in ["full", "w4s4"] {
        let cfg = tiny(preset, 10);
        let a = tmp_dir(&format!("resume-a-{preset}"));
        let b = tmp_dir(&format!("resume-b-{preset}"));
        let Outcome::Finished(ma) = train(&cfg, &a, serde_json::json!({}), &mut Silent).unwrap() else {
            panic!("uninterrupted run did not finish")
        };
        // Interrupt at step 5 (checkpoint cadence 3, so the stop writes its own checkpoint).
        match train(&cfg, &b, serde_json::json!({}), &mut StopAt(5)).unwrap() {
            Outcome::Interrupted { step } => assert_eq!(step, 5),
            o => panic!("expected an interruption, got {o:?}"),
        }
        assert!(!b.join("metrics.json").exists());
        // A crash after the checkpoint leaves log lines of steps that will be redone.
        RunDir::open_existing(&b).append_log(&serde_json::json!({"kind": "train", "step": 6, "loss": 0.0})).unwrap();
        let Outcome::Finished(mb) = train(&cfg, &b, serde_json::json!({}), &mut Silent).unwrap() else {
            panic!("resumed run did not finish")
        };
        assert_eq!(params(&a), params(&b), "{preset}: parameters differ after resume");
        assert_eq!(ma.final_eval, mb.final_eval, "{preset}");
        assert_eq!(ma.evals, mb.evals, "{preset}");
        let want: Vec<u64> = (1..=10).collect();
        assert_eq!(train_steps(&a), want);
        assert_eq!(train_steps(&b), want, "{preset}: lost or repeated steps in the log");
        for d in [&a, &b] {
            for f in ["config.json", "environment.json", "metrics.json", "log.jsonl", "curve.csv", "model.safetensors"]
            {
                assert!(d.join(f).exists(), "{f} missing in {}", d.display());
            }
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}

#[test]
fn a_finished_run_is_never_overwritten_and_a_changed_config_is_refused() {
    let cfg = tiny("w8s4", 2);
    let dir = tmp_dir("finished");
    train(&cfg, &dir, serde_json::json!({}), &mut Silent).unwrap();
    let before = std::fs::read(dir.join("metrics.json")).unwrap();
    let err = train(&cfg, &dir, serde_json::json!({}), &mut Silent).unwrap_err();
    assert!(matches!(err, Error::FinishedRun { .. }), "{err}");
    assert!(err.to_string().contains("finished run"));
    assert_eq!(std::fs::read(dir.join("metrics.json")).unwrap(), before);
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = tmp_dir("changed");
    train(&cfg, &dir, serde_json::json!({}), &mut StopAt(1)).unwrap();
    let mut other = cfg.clone();
    other.train.lr *= 2.0;
    let err = train(&other, &dir, serde_json::json!({}), &mut Silent).unwrap_err().to_string();
    assert!(err.contains("--out") && err.contains("different config"), "{err}");
    let env: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("environment.json")).unwrap()).unwrap();
    assert_eq!(env["seed"], 0);
    assert_eq!(env["preset"], "w8s4");
    assert!(env["git_hash"].is_string());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tiny_model_learns_the_task_loss_falls_and_accuracy_beats_chance() {
    // Single-query-per-record recall of 4 records: chance in context is 25 %.
    // d = 32 learns it in a few hundred steps at lr 3e-3 (d = 16, or lr 1e-2, stalls near 40 %).
    let mut cfg = tiny("full", 600);
    cfg.model.d_model = 32;
    cfg.model.d_head = 16;
    cfg.model.d_ff = 64;
    cfg.train.batch_size = 16;
    cfg.train.lr = 3e-3;
    cfg.train.warmup_steps = 20;
    cfg.train.eval_every = 100;
    cfg.train.eval_samples = 128;
    cfg.train.checkpoint_every = 1000;
    let dir = tmp_dir("learns");
    let Outcome::Finished(m) = train(&cfg, &dir, serde_json::json!({}), &mut Silent).unwrap() else {
        panic!("did not finish")
    };
    let first = &m.evals[0];
    let last = &m.final_eval;
    let losses: Vec<f64> = RunDir::open_existing(&dir)
        .read_log()
        .unwrap()
        .iter()
        .filter(|l| l["kind"] == "train")
        .map(|l| l["loss"].as_f64().unwrap())
        .collect();
    let head: f64 = losses[..20].iter().sum::<f64>() / 20.0;
    let tail: f64 = losses[losses.len() - 20..].iter().sum::<f64>() / 20.0;
    assert!(tail < head - 0.3, "training loss did not fall: {head:.3} -> {tail:.3}");
    assert!(
        last.accuracy > 2.0 * m.chance_in_context,
        "accuracy {:.3} not well above chance {:.3} (first eval {:.3})",
        last.accuracy,
        m.chance_in_context,
        first.accuracy
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
