//! Hostile input from the outside (issue 12, items 2-5, 10, 11 and 13): every case is one error
//! line naming the field, exit status 2, within seconds, and nothing is written.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs phasekv with a hard deadline (a hang is a failure, not a stuck test).
fn phasekv(args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(args)
        .env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run phasekv");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{args:?}: still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Exit status 2, one line on stderr starting `error: ` and containing every needle.
fn refused(args: &[&str], needles: &[&str]) -> String {
    let (code, out, err) = phasekv(args);
    assert_eq!(code, 2, "{args:?}: exit {code}\n{out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: not one line:\n{err}");
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {err:?} lacks {n:?}");
    }
    err
}

fn scratch(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("phasekv-hostile-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn train_configs_with_absurd_sizes_are_refused_before_allocating() {
    let dir = scratch("sizes");
    let out = dir.join("run");
    let max = u64::MAX.to_string();
    let cases: Vec<(String, Vec<&str>)> = vec![
        (format!(r#"{{"task": {{"max_prefix": {max}}}}}"#), vec!["task.max_prefix", &max, "65536"]),
        (format!(r#"{{"task": {{"n_key": {max}}}}}"#), vec!["task.n_key", &max, "1048576"]),
        (r#"{"task": {"max_gap": 60000, "n_records": 4000, "n_queries": 8}}"#.into(), vec!["sequence length", "65536"]),
        (r#"{"model": {"d_model": 1000000000}}"#.into(), vec!["model.d_model", "1000000000", "16384"]),
        (r#"{"model": {"d_model": 16384, "d_ff": 16384, "n_layer": 256}}"#.into(), vec!["model parameters", "limit"]),
        (r#"{"train": {"batch_size": 1000000000}}"#.into(), vec!["train.batch_size", "1000000000", "65536"]),
        (r#"{"train": {"batch_size": 65536}}"#.into(), vec!["activations per step", "limit"]),
        (r#"{"train": {"eval_samples": 1000000000000}}"#.into(), vec!["train.eval_samples", "1048576"]),
        (r#"{"train": {"steps": 18446744073709551615}}"#.into(), vec!["train.steps", "100000000"]),
        ("[]".into(), vec!["must be a JSON object"]),
        ("7".into(), vec!["must be a JSON object"]),
    ];
    for (i, (text, needles)) in cases.iter().enumerate() {
        let cfg = dir.join(format!("c{i}.json"));
        std::fs::write(&cfg, text).unwrap();
        let mut needles = needles.clone();
        needles.push(s(&cfg)); // config errors name the file
        refused(&["train", "--preset", "w8s4", "--config", s(&cfg), "--out", s(&out), "--quiet"], &needles);
        assert!(!out.exists(), "{text}: a run directory was created");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn train_bench_refuses_an_unbounded_step_count() {
    refused(&["train", "--preset", "w8s4", "--bench", "18446744073709551615"], &["--bench", "100000"]);
}

#[test]
fn windows_or_strides_longer_than_the_sequence_are_refused() {
    let dir = scratch("degenerate");
    let out = dir.join("run");
    // The default task (the committed reproduction's) has 122-token sequences.
    for preset in ["w200s200", "w200s4", "w123s123"] {
        refused(&["train", "--preset", preset, "--out", s(&out), "--quiet"], &["model.preset", preset, "0 compressed"]);
    }
    assert!(!out.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn io_errors_print_the_os_text_once() {
    let err = refused(&["train", "--config", "/nonexistent/phasekv.json", "--print-config"], &["/nonexistent"]);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn kernel_commands_refuse_absurd_sizes() {
    refused(&["kernel", "check", "--preset", "w99999s1", "--cases", "1"], &["--preset", "99999", "512"]);
    refused(
        &["kernel", "bench", "--tokens", "1000000000", "--seconds", "0.01"],
        &["--tokens", "1000000000", "1048576"],
    );
    refused(&["kernel", "bench", "--d-model", "100000", "--seconds", "0.01"], &["--d-model", "4096"]);
    for bad in ["NaN", "-1", "inf", "0"] {
        refused(&["kernel", "bench", "--tokens", "8", &format!("--seconds={bad}")], &["--seconds", "3600"]);
    }
}

#[test]
fn special_files_are_never_read() {
    let dir = scratch("special");
    refused(&["kernel", "validate", "/dev/zero"], &["/dev/zero", "character device"]);
    // A .npy dump folder whose metadata.json is a symlink to /dev/zero.
    let npy = dir.join("npy");
    std::fs::create_dir_all(&npy).unwrap();
    std::os::unix::fs::symlink("/dev/zero", npy.join("metadata.json")).unwrap();
    refused(&["kernel", "validate", s(&npy)], &["metadata.json", "character device"]);
    // ... and one whose tensor f.npy is a FIFO (opening it would block forever).
    std::fs::remove_file(npy.join("metadata.json")).unwrap();
    std::fs::write(npy.join("metadata.json"), r#"{"phasekv.format": "1", "preset": "w8s4"}"#).unwrap();
    let fifo = npy.join("f.npy");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    refused(&["kernel", "validate", s(&npy)], &["f.npy", "FIFO"]);
    // A config that is a symlink to /dev/zero.
    let cfg = dir.join("cfg.json");
    std::os::unix::fs::symlink("/dev/zero", &cfg).unwrap();
    refused(&["train", "--config", s(&cfg), "--print-config"], &["cfg.json", "character device"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_dump_whose_validation_grows_as_w_squared_is_refused_before_starting() {
    use phasekv::conformance::known::reference_dump;
    use phasekv::kernel::{KernelDims, KernelParams, KernelSpec};
    // W = S = 2^17 on 2^17 tokens, d = 1: a 0.5 MB dump whose phase profile alone would need
    // 2^35 units of work.
    let w = 1usize << 17;
    let spec = KernelSpec::preset(&format!("w{w}s{w}")).unwrap();
    let dims = KernelDims::new(1, 1).unwrap();
    let params = KernelParams::random(&spec, dims, 1);
    let x = phasekv::kernel::random_input(w, 1, 2).into_shape_with_order((1, w, 1)).unwrap();
    let dump = reference_dump(&spec, dims, &params, &x, candle_core::DType::F32, None).unwrap();
    let est = phasekv::conformance::validate::work_estimate(&dump).unwrap();
    assert!(est > phasekv::limits::MAX_VALIDATION_WORK, "{est}");
    let dir = scratch("bomb");
    let file = dir.join("bomb.safetensors");
    dump.save(&file).unwrap();
    let start = Instant::now();
    refused(&["kernel", "validate", s(&file), "--report", s(&dir.join("report"))], &["work of validation", "limit"]);
    assert!(start.elapsed() < Duration::from_secs(20), "{:?}", start.elapsed());
    assert!(!dir.join("report").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn audit_export_and_analyze_refuse_absurd_sizes() {
    let dir = scratch("audit-sizes");
    let out = dir.join("p.jsonl");
    refused(&["audit", "export", "--samples", "1000000000", "--out", s(&out)], &["--samples", "100000"]);
    refused(&["audit", "export", "--samples", "90000", "--out", s(&out)], &["--samples", "limit"]);
    assert!(!out.exists());
    let res = dir.join("r.jsonl");
    std::fs::write(&res, "{\"group\": 1, \"correct\": true}\n").unwrap();
    refused(&["audit", "analyze", s(&res), "--modulus", "100000000000"], &["--modulus", "100000000000", "4096"]);
    assert!(!dir.join("r.audit").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn audit_analyze_refuses_fabricated_or_contradictory_results() {
    let dir = scratch("audit");
    let prompts = dir.join("prompts.jsonl");
    let (code, _, err) = phasekv(&["audit", "export", "--samples", "2", "--out", s(&prompts)]);
    assert_eq!(code, 0, "{err}");
    let exported: Vec<serde_json::Value> =
        std::fs::read_to_string(&prompts).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(exported.len(), 48);
    let line =
        |id: u64, group: u64, correct: bool| format!("{{\"id\": {id}, \"group\": {group}, \"correct\": {correct}}}\n");
    let honest: String = exported
        .iter()
        .map(|l| line(l["id"].as_u64().unwrap(), l["group"].as_u64().unwrap(), l["id"].as_u64().unwrap() % 3 == 0))
        .collect();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let ex = s(&prompts).to_string();
    // The same results three times over.
    let f = write("tripled.jsonl", &honest.repeat(3));
    refused(&["audit", "analyze", s(&f)], &["line 49", "repeats line 1"]);
    // An id that was never exported; a group that contradicts the export.
    let f = write("unknown.jsonl", &format!("{honest}{}", line(4000, 3, true)));
    refused(&["audit", "analyze", s(&f), "--export", &ex], &["line 49", "never exported"]);
    let g0 = exported[0]["group"].as_u64().unwrap();
    let f = write("regroup.jsonl", &line(0, (g0 + 1) % 24, true));
    refused(&["audit", "analyze", s(&f), "--export", &ex], &["line 1", "contradicts the export"]);
    // A group that contradicts the line's own target_pos; correct contradicting prob.
    let f = write("pos.jsonl", "{\"group\": 3, \"target_pos\": 28, \"correct\": true}\n");
    refused(&["audit", "analyze", s(&f)], &["line 1", "contradicts target_pos 28"]);
    // (`correct` is the greedy decoding, `prob` teacher-forced: only a miss above 0.5 contradicts.)
    let f = write("prob.jsonl", "{\"group\": 3, \"correct\": false, \"prob\": 0.99}\n");
    refused(&["audit", "analyze", s(&f)], &["line 1", "contradicts prob 0.99"]);
    let f = write("position.jsonl", "{\"group\": 3, \"position\": 28, \"correct\": true}\n");
    refused(&["audit", "analyze", s(&f)], &["line 1", "contradicts position 28"]);
    // Every flag honoured or rejected.
    let f = write("honest.jsonl", &honest);
    for stride in ["5", "0", "48"] {
        refused(&["audit", "analyze", s(&f), "--stride", stride], &["--stride", stride]);
    }
    // The honest results pass against the export; the output is then never overwritten.
    let out = dir.join("report");
    let (code, _, err) = phasekv(&["audit", "analyze", s(&f), "--export", &ex, "--stride", "4", "--out", s(&out)]);
    assert_eq!(code, 0, "{err}");
    let profile = std::fs::read(out.join("profile.json")).unwrap();
    refused(&["audit", "analyze", s(&f), "--out", s(&out)], &["exists", "never overwritten"]);
    assert_eq!(std::fs::read(out.join("profile.json")).unwrap(), profile);
    // Nothing was written for any refused case.
    for name in ["tripled", "unknown", "regroup", "pos", "prob"] {
        assert!(!dir.join(format!("{name}.audit")).exists(), "{name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
