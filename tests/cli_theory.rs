//! The three theory commands run on their defaults and write config, JSON, figures and the
//! DONE marker; a finished run directory is refused; bad input is one clear error line.

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
        for f in ["config.json", "environment.json", "DONE", json] {
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
    assert!(!dir.join("DONE").exists());
}
