//! `phasekv train` from the outside: it trains and prints accuracy, and bad input is one line.

use std::process::Command;

fn phasekv(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(args)
        .env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        .output()
        .expect("run phasekv");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn one_line_error(args: &[&str], needle: &str) {
    let (code, out, err) = phasekv(args);
    assert_eq!(code, 2, "{args:?}: {out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: not one line:\n{err}");
    assert!(err.starts_with("error: ") && err.contains(needle), "{args:?}: {err}");
}

const TINY: &str = r#"{"task": {"n_key": 8, "n_val": 8, "n_filler": 2, "n_records": 4, "n_queries": 2,
  "max_prefix": 2, "max_gap": 1},
 "model": {"d_model": 16, "n_head": 2, "n_kv_head": 1, "d_head": 8, "d_ff": 32, "local_window": 3},
 "train": {"batch_size": 4, "warmup_steps": 2, "eval_every": 5, "eval_samples": 8,
  "checkpoint_every": 5}}"#;

#[test]
fn train_runs_prints_accuracy_and_refuses_to_overwrite() {
    let dir = std::env::temp_dir().join(format!("phasekv-cli-train-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("tiny.json");
    std::fs::write(&cfg, TINY).unwrap();
    let out_dir = dir.join("run");
    let (c, o, p) = (cfg.to_str().unwrap(), out_dir.to_str().unwrap(), "w8s4");
    let (code, out, err) = phasekv(&["train", "--preset", p, "--config", c, "--steps", "6", "--out", o, "--quiet"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("w8s4: exact-match accuracy") && out.contains("after 6 steps"), "{out}");
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["steps"], 6);
    assert_eq!(metrics["preset"], "w8s4");
    one_line_error(&["train", "--preset", p, "--config", c, "--steps", "6", "--out", o], "finished run");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_train_options_are_one_line_errors() {
    one_line_error(&["train", "--preset", "w8s5x", "--print-config"], "preset");
    one_line_error(&["train", "--preset", "w8s4", "--steps", "0", "--print-config"], "train.steps");
    let dir = std::env::temp_dir().join(format!("phasekv-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("long-window.json");
    std::fs::write(&cfg, r#"{"model": {"local_window": 1000}}"#).unwrap();
    one_line_error(
        &["train", "--preset", "w8s4", "--config", cfg.to_str().unwrap(), "--print-config"],
        "model.local_window",
    );
    std::fs::write(&cfg, r#"{"model": {"heads": 3}}"#).unwrap();
    one_line_error(&["train", "--config", cfg.to_str().unwrap(), "--print-config"], "heads");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn print_config_shows_the_recorded_defaults() {
    let (code, out, _) = phasekv(&["train", "--preset", "w8s4", "--print-config"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["model"]["preset"], "w8s4");
    let back = phasekv::model::RunConfig::from_json(&out).unwrap();
    let mut want = phasekv::model::RunConfig::recommended();
    want.model.preset = "w8s4".into();
    assert_eq!(back, want);
    assert_eq!(back.train.engine, phasekv::model::Engine::Fast);
}

/// `phasekv train` with no config trains the task of the committed reproduction: its
/// `--print-config` task is the one `plans/full.json` composes, and on the one default engine
/// (fast, which the plan names). A config file that names no engine trains on the same default
/// (issue 39: it used to be candle), an explicit `--engine` wins, and an engine that does not
/// exist is one line from clap naming the allowed values (exit 2).
#[test]
fn the_default_task_is_the_committed_reproductions() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let plan = phasekv::reproduce::Plan::from_file(&root.join("plans/full.json")).unwrap();
    let (code, out, err) = phasekv(&["train", "--print-config"]);
    assert_eq!(code, 0, "{err}");
    let printed = phasekv::model::RunConfig::from_json(&out).unwrap();
    assert_eq!(printed.task, plan.run.task);
    assert_eq!(printed.task, phasekv::model::RunConfig::recommended().task);
    assert_eq!(printed.train, plan.run.train, "the plan's recipe (phase-lab §8.1: R2)");
    assert_eq!((printed.train.warmup_steps, printed.train.steps), (300, 3000));
    assert_ne!(printed.task, phasekv::model::RunConfig::default().task, "the plan's task is not the serde default");
    assert_eq!(
        (printed.train.engine, plan.run.train.engine),
        (phasekv::model::Engine::Fast, phasekv::model::Engine::Fast)
    );
    let dir = std::env::temp_dir().join(format!("phasekv-cli-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let no_engine = dir.join("no-engine.json");
    std::fs::write(&no_engine, r#"{"model": {"preset": "w8s4"}, "train": {"steps": 10}}"#).unwrap();
    let no_engine = no_engine.to_str().unwrap();
    for (args, engine) in [
        (&["train", "--preset", "w8s6-scalar", "--print-config"][..], "fast"),
        (&["train", "--preset", "dsv4-csa", "--print-config"][..], "fast"),
        (&["train", "--config", no_engine, "--print-config"][..], "fast"),
        (&["train", "--config", no_engine, "--engine", "candle", "--print-config"][..], "candle"),
        (&["train", "--preset", "w8s4", "--engine", "candle", "--print-config"][..], "candle"),
    ] {
        let (code, out, err) = phasekv(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["train"]["engine"].as_str(), Some(engine), "{args:?}: the engine is always written");
    }
    let (code, _, err) = phasekv(&["train", "--engine", "cuda", "--print-config"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--engine") && err.contains("fast") && err.contains("candle"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C (SIGINT) stops training after the current step with a checkpoint at that step,
/// exit status 130; the log holds exactly the steps the checkpoint covers.
#[cfg(unix)]
#[test]
fn ctrl_c_stops_with_a_checkpoint_at_the_last_step() {
    signal_stops_with_a_checkpoint_at_the_last_step("INT", 130);
}

/// SIGTERM (what Slurm and most schedulers send at a time limit) does the same, exit status 143.
#[cfg(unix)]
#[test]
fn sigterm_stops_with_a_checkpoint_at_the_last_step() {
    signal_stops_with_a_checkpoint_at_the_last_step("TERM", 143);
}

#[cfg(unix)]
fn signal_stops_with_a_checkpoint_at_the_last_step(signal: &str, code: i32) {
    let dir = std::env::temp_dir().join(format!("phasekv-cli-sig{signal}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("tiny.json");
    std::fs::write(&cfg, TINY).unwrap();
    let run = dir.join("run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(["train", "--preset", "w8s4", "--steps", "1000000", "--quiet", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(&run)
        .env("RAYON_NUM_THREADS", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let log = run.join("log.jsonl");
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&log).map(|t| t.lines().count()).unwrap_or(0) < 3 {
        assert!(t0.elapsed().as_secs() < 120, "training never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let kill = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(code));
    let idx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("checkpoint.json")).unwrap()).unwrap();
    let step = idx["step"].as_u64().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let logged: Vec<u64> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["kind"] == "train")
        .map(|l| l["step"].as_u64().unwrap())
        .collect();
    assert_eq!(logged, (1..=step).collect::<Vec<_>>(), "checkpoint at step {step} covers the log");
    assert!(run.join(idx["file"].as_str().unwrap()).exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
