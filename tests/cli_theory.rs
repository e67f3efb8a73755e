//! The three theory commands run on their defaults and write config, JSON, figures and the
//! finished marker (`metrics.json`, the one marker of `run_dir::RunDir`); a finished run
//! directory is refused; bad input is one clear error line.

use std::path::PathBuf;
use std::process::Command;

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("phasekv-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_phasekv")).args(args).output().expect("binary runs")
}

#[test]
fn theory_commands_write_runs_on_defaults() {
    for (cmd, json, figures) in [
        ("t1", "theorem1.json", vec!["t1-restarts"]),
        ("t2", "theorem2.json", vec!["t2-gate-trajectories", "t2-phase-profile"]),
        ("diagram", "diagram.json", vec!["phase-diagram"]),
    ] {
        let dir = out_dir(cmd);
        let out = run(&["theory", cmd, "--out", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
        for f in ["config.json", "environment.json", "metrics.json", json] {
            assert!(dir.join(f).is_file(), "{cmd}: missing {f}");
        }
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join(json)).unwrap()).unwrap();
        assert!(v.is_object());
        for fig in figures {
            for ext in ["svg", "png"] {
                let meta = std::fs::metadata(dir.join(format!("{fig}.{ext}")))
                    .unwrap_or_else(|_| panic!("{cmd}: missing {fig}.{ext}"));
                assert!(meta.len() > 1000);
            }
        }
        // A finished run is never overwritten.
        let again = run(&["theory", cmd, "--out", dir.to_str().unwrap()]);
        assert_eq!(again.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&again.stderr).contains("finished run"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn bad_input_is_one_clear_line() {
    let dir = out_dir("bad");
    let out = run(&["theory", "t2", "--heads", "4", "--out", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("heads") && err.contains("H < S"), "{err}");
    let out = run(&["theory", "t1", "--vocab", "10", "--out", dir.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("vocab"));
    assert!(!dir.join("metrics.json").exists());
}

/// Runs `args` with a wall-clock limit; a command that hangs fails the test instead of the
/// suite.
fn run_within(args: &[&str], secs: u64) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(args)
        .env("PHASEKV_PROGRESS_SECS", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("binary runs");
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed().as_secs() > secs {
            let _ = child.kill();
            panic!("phasekv {args:?} did not finish within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Hostile sizes (issue 12): one error line naming the field and the limit, exit 2, and no
/// run directory left behind.
#[test]
fn hostile_sizes_are_refused_before_any_run_directory() {
    let max = u64::MAX.to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["t2", "--seed", &max, "--seeds", "2"], "seed"),
        (vec!["t2", "--seeds", &max], "seeds"),
        (vec!["t2", "--seeds", "0"], "seeds"),
        (vec!["t2", "--t-max", "1e12"], "t_max"),
        (vec!["t2", "--threshold", "0.3"], "threshold"),
        (vec!["diagram", "--betas", "NaN"], "betas"),
        (vec!["diagram", "--gammas", "1,inf"], "gammas"),
        (vec!["t1", "-S", "100000"], "stride"),
        (vec!["t1", "-S", "64", "-H", "8", "-L", "64", "-N", "5000"], "H L^2 S (S-1)"),
        (vec!["t1", "--random-per-scale", &max], "restarts"),
        (vec!["t1", "--max-iters", "10000000"], "max_iters"),
        (vec!["t1", "--eps", "0.8", "--contexts", "100000"], "contexts"),
        (vec!["t1", "--eps", "0.001"], "eps"),
        (vec!["t1", "--eps", "0.5", "-N", "100000"], "vocab"),
        (vec!["diagram", "-S", "100000"], "stride"),
    ];
    for (args, field) in cases {
        let dir = out_dir(&format!("hostile-{}", field.replace(['/', ' ', '^', '(', ')'], "")));
        let mut full = vec!["theory"];
        full.extend(args.iter());
        full.extend(["--out", dir.to_str().unwrap()]);
        let out = run_within(&full, 60);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(field), "{args:?} should name {field}: {err}");
        assert!(!dir.exists(), "{args:?} left {} behind", dir.display());
    }
}

/// Issue 13 item 1: `t1 --eps 0.8 --contexts 28` used to run forever (NaN in the line search);
/// it now finishes, and t1 reports progress lines when stderr is not a terminal.
#[test]
fn t1_at_eps_0_8_with_28_contexts_finishes() {
    let dir = out_dir("eps-nan");
    let out = run_within(&["theory", "t1", "--eps", "0.8", "--contexts", "28", "--out", dir.to_str().unwrap()], 240);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("progress restarts") && err.contains("progress contexts"), "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("theorem1-eps.json")).unwrap()).unwrap();
    assert_eq!(v["contexts"].as_array().unwrap().len(), 28);
    let t1: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("theorem1.json")).unwrap()).unwrap();
    for r in t1["restarts"].as_array().unwrap() {
        assert!(["LocalMin", "Saddle", "NotConverged"].contains(&r["label"].as_str().unwrap()), "{r}");
        assert!(r["end_gates"]["key"].is_array());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `theory loss --gates FILE` prints F, F_1 and the gradient for static or oracle gates, and
/// refuses gates that are not probability vectors; `t2` prints plain numbers.
#[test]
fn loss_command_and_plain_numbers() {
    let dir = out_dir("loss");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("gates.json");
    std::fs::write(&f, r#"{"key": [[1,0,0,0],[0,1,0,0]], "value": [[0,1,0,0],[0,0,1,0]]}"#).unwrap();
    let out = run(&["theory", "loss", "--gates", f.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("F = 3.2999024475") && text.contains("LocalMin"), "{text}");
    assert!(text.contains("dF/dpV head 2 chunk 4"), "{text}");
    let out = run(&["theory", "loss", "--gates", f.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!((v["loss"].as_f64().unwrap() - 3.299902447536).abs() < 1e-11);
    assert_eq!(v["grad_key"].as_array().unwrap().len(), 32);
    std::fs::write(&f, r#"{"key": [[0.5,0,0,0],[0,1,0,0]], "value": [[0,1,0,0],[0,0,1,0]]}"#).unwrap();
    let out = run(&["theory", "loss", "--gates", f.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains("key[head 1][chunk 1]") && err.trim().lines().count() == 1, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = out_dir("plain");
    let out = run(&["theory", "t2", "--seeds", "4", "--threshold", "0.98", "--out", dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(!text.contains("Some(") && text.contains("Wilson"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SIGTERM (what schedulers send) stops a long theory command at its next unit of work with
/// exit status 143, instead of being swallowed by the interrupt handler.
#[test]
fn sigterm_stops_a_long_theory_command() {
    let dir = out_dir("sigterm");
    let mut child = Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(["theory", "t2", "-S", "8", "-H", "3", "-N", "256", "--t-max", "10000", "--seeds", "100000"])
        .args(["--no-euler-check", "--out", dir.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("binary runs");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let start = std::time::Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert_eq!(st.code(), Some(143));
            break;
        }
        if start.elapsed().as_secs() > 30 {
            let _ = child.kill();
            panic!("t2 ignored SIGTERM for 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!dir.join("metrics.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `theory t1` writes the L-BFGS iteration log recorded by argmin's observer: one JSON line per
/// iteration, the cost non-increasing along each run (the More-Thuente line search accepts only
/// steps of sufficient decrease), and recording it leaves the Theorem 1 result unchanged.
#[test]
fn t1_writes_iteration_log_without_changing_the_result() {
    use phasekv::theory::oracle::{theorem1, IterationLine, OracleOptions};
    use phasekv::theory::task::TaskParams;
    use std::collections::BTreeMap;
    let dir = out_dir("t1-log");
    let args = ["--random-per-scale", "1", "--near-vertex", "1", "--split-per-pairs", "1", "--refine-kicks", "2"];
    let mut cmd = vec!["theory", "t1", "--out", dir.to_str().unwrap()];
    cmd.extend(args);
    let out = run(&cmd);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(dir.join("iterations.jsonl")).expect("iterations.jsonl written");
    let lines: Vec<IterationLine> =
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"))).collect();
    assert!(lines.len() > 10, "{} lines", lines.len());
    let mut runs: BTreeMap<(bool, usize, usize), Vec<IterationLine>> = BTreeMap::new();
    for l in &lines {
        assert!(l.record.cost.is_finite() && l.record.grad_norm.is_finite(), "{l:?}");
        runs.entry((l.refine, l.restart, l.run)).or_default().push(*l);
    }
    assert!(runs.keys().any(|k| k.0), "no refinement kick logged");
    for (key, run) in &runs {
        for w in run.windows(2) {
            assert!(w[1].record.iteration > w[0].record.iteration, "{key:?}: {w:?}");
            assert!(w[1].record.cost <= w[0].record.cost, "{key:?}: cost rose: {w:?}");
        }
    }
    // The same point and options through the library without the observer: identical result.
    #[derive(serde::Deserialize)]
    struct Config {
        params: TaskParams,
        options: OracleOptions,
    }
    let config: Config = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("theorem1.json")).unwrap()).unwrap();
    let plain = theorem1(&config.params, &config.options, || {}).unwrap();
    assert_eq!(written, serde_json::to_value(&plain).unwrap());
    assert!(runs.keys().all(|k| k.0 || k.1 < plain.restarts.len()));
    std::fs::remove_dir_all(&dir).unwrap();
}
