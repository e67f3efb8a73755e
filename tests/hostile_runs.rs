//! Careless and concurrent use of run directories (issue 12, items 6-9 and 13): one writer per
//! directory, provenance checked by every analysis, checksummed checkpoints, divergence
//! reported as a failure, weights written with the ordinary mode, and a property test that no
//! train config panics: each is refused as bad input or trains a step.

use crate::common;

use common::plans::{phasekv, scratch};

use phasekv::model::train::{Observer, Outcome};
use phasekv::model::{RunConfig, StepReport};
use phasekv::run_dir::DirLock;
use proptest::prelude::*;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn refused(args: &[&str], needles: &[&str]) -> String {
    let (code, out, err) = phasekv(args);
    assert_eq!(code, 2, "{args:?}: exit {code}\n{out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: not one line:\n{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {err:?} lacks {n:?}");
    }
    err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The tiny w8s4 run of the training tests, with M = 4 so the lab's protocols can balance it.
fn tiny(steps: usize) -> RunConfig {
    let mut c = common::configs::tiny_config("w8s4");
    c.task.residue_modulus = 4;
    c.train.steps = steps;
    c.train.batch_size = 4;
    c.train.warmup_steps = 2;
    c.train.eval_every = 5;
    c.train.eval_samples = 8;
    c.train.checkpoint_every = 5;
    c
}

fn write_config(dir: &Path, name: &str, c: &RunConfig) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string_pretty(c).unwrap()).unwrap();
    p
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn edit_json(path: &Path, edit: impl Fn(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

fn flip_byte(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let i = bytes.len() - 3;
    bytes[i] ^= 0x55;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn analyses_check_provenance_locks_and_sizes() {
    let dir = scratch("provenance");
    let cfg = write_config(&dir, "tiny.json", &tiny(6));
    let run = dir.join("run");
    let (code, out, err) = phasekv(&["train", "--config", s(&cfg), "--out", s(&run), "--quiet"]);
    assert_eq!(code, 0, "{out}{err}");
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("metrics.json")).unwrap()).unwrap();
    let config_hash = metrics["config_hash"].as_str().unwrap().to_string();
    let weights_hash = metrics["weights_hash"].as_str().unwrap().to_string();
    assert_eq!(config_hash, tiny(6).identity());
    assert_eq!(weights_hash, phasekv::limits::content_hash(&std::fs::read(run.join("model.safetensors")).unwrap()));

    // Weights get the ordinary mode, like every other file the run wrote.
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |f: &str| std::fs::metadata(run.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("model.safetensors"), mode("config.json"));
        assert_eq!(mode("model.safetensors"), mode("metrics.json"));
    }

    // Absurd sizes are refused before any work.
    refused(&["eval", s(&run), "--samples", "100000000000"], &["--samples", "100000000000", "100000"]);
    refused(&["analyze", "gates", s(&run), "--samples", "100000000000"], &["--samples", "100000"]);
    refused(&["analyze", "knockout", s(&run), "--reference", "100000"], &["--reference", "1024"]);

    // A second writer is refused while the directory is held (as a training or another eval
    // would hold it), naming the holder's pid; nothing is written.
    {
        let _held = DirLock::acquire(&run).unwrap();
        refused(&["eval", s(&run), "--samples", "2"], &["in use by pid", &std::process::id().to_string()]);
    }
    assert!(!run.join("eval-in-sequence.json").exists());

    // Evaluated once; the result carries the run's identity; another seed is refused, never
    // silently overwritten.
    let (code, out, err) = phasekv(&["eval", s(&run), "--samples", "2"]);
    assert_eq!(code, 0, "{out}{err}");
    let json = run.join("eval-in-sequence.json");
    let first = std::fs::read(&json).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(v["run_id"].as_str().unwrap(), format!("{config_hash}/{weights_hash}"));
    refused(&["eval", s(&run), "--samples", "2", "--seed", "1"], &["other settings"]);
    assert_eq!(std::fs::read(&json).unwrap(), first);

    // Edited after training: every case is refused, and nothing is evaluated or written.
    type Edit = fn(&Path);
    let edits: [(&str, Edit, &str); 6] = [
        (
            "preset",
            |r| edit_json(&r.join("config.json"), |v| v["model"]["preset"] = "w8s6".into()),
            "changed after training",
        ),
        (
            "norope",
            |r| edit_json(&r.join("config.json"), |v| v["model"]["preset"] = "w8s4-norope".into()),
            "changed after training",
        ),
        (
            "modulus",
            |r| edit_json(&r.join("config.json"), |v| v["task"]["residue_modulus"] = 2.into()),
            "changed after training",
        ),
        ("no-metrics", |r| std::fs::remove_file(r.join("metrics.json")).unwrap(), "not finished"),
        ("bad-metrics", |r| std::fs::write(r.join("metrics.json"), "garbage").unwrap(), "not the metrics"),
        ("weights", |r| flip_byte(&r.join("model.safetensors")), "weights were changed"),
    ];
    for (label, edit, needle) in edits {
        let copy = dir.join(format!("copy-{label}"));
        copy_dir(&run, &copy);
        std::fs::remove_file(copy.join("eval-in-sequence.json")).unwrap();
        edit(&copy);
        refused(&["eval", s(&copy), "--samples", "2"], &[needle]);
        assert!(!copy.join("eval-in-sequence.json").exists(), "{label}");
    }
    // A changed snapshot is refused by the gate analysis, which reads every snapshot.
    let copy = dir.join("copy-snapshot");
    copy_dir(&run, &copy);
    flip_byte(&copy.join("snapshots").join("step-0000005.safetensors"));
    refused(&["analyze", "gates", s(&copy), "--samples", "2"], &["step-0000005.safetensors", "snapshot was changed"]);
    assert!(!copy.join("gates.json").exists());
    // A cached result of the old model is not returned for the edited config.
    let copy = dir.join("copy-cached");
    copy_dir(&run, &copy);
    edit_json(&copy.join("config.json"), |v| v["model"]["preset"] = "full".into());
    refused(&["eval", s(&copy), "--samples", "2"], &["changed after training"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Stops training after `at` steps.
struct StopAt(usize);
impl Observer for StopAt {
    fn on_step(&mut self, r: &StepReport) -> ControlFlow<()> {
        if r.step >= self.0 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

#[test]
fn a_corrupted_checkpoint_is_refused_with_the_step_to_resume_from() {
    let dir = scratch("checksum");
    let config = tiny(20);
    let run = dir.join("run");
    let outcome = phasekv::model::train(&config, &run, serde_json::json!({}), &mut StopAt(3)).unwrap();
    assert!(matches!(outcome, Outcome::Interrupted { step: 3 }), "{outcome:?}");
    let ckpt = run.join("ckpt-0000003.safetensors");
    let log_before = std::fs::read(run.join("log.jsonl")).unwrap();
    flip_byte(&ckpt);
    let cfg = write_config(&dir, "tiny.json", &config);
    refused(
        &["train", "--config", s(&cfg), "--out", s(&run), "--quiet"],
        &["ckpt-0000003.safetensors", "step 3", "fails its checksum", "step 0"],
    );
    // Nothing lost or half-resumed: the log and checkpoint are as they were, no metrics.
    assert_eq!(std::fs::read(run.join("log.jsonl")).unwrap(), log_before);
    assert!(ckpt.exists() && !run.join("metrics.json").exists());

    // With an earlier checkpoint on disk, the refusal names it; removing the damaged file
    // resumes from it, and the run finishes with every step logged once.
    let run = dir.join("run2");
    let outcome = phasekv::model::train(&config, &run, serde_json::json!({}), &mut StopAt(7)).unwrap();
    assert!(matches!(outcome, Outcome::Interrupted { step: 7 }), "{outcome:?}");
    let ckpt = run.join("ckpt-0000007.safetensors");
    flip_byte(&ckpt);
    let args = ["train", "--config", s(&cfg), "--out", s(&run), "--quiet"];
    refused(&args, &["step 7", "fails its checksum", "checkpoint of step 5 is intact", "resume from step 5"]);
    std::fs::remove_file(&ckpt).unwrap();
    let (code, out, err) = phasekv(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("resuming at step 5"), "{err}");
    let steps: Vec<u64> = std::fs::read_to_string(run.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "train")
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, (1..=20).collect::<Vec<u64>>());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn divergence_stops_with_exit_1_and_no_metrics() {
    let dir = scratch("diverge");
    let mut c = tiny(40);
    c.train.lr = 10.0;
    c.train.grad_clip = 0.0;
    c.train.warmup_steps = 0;
    c.train.eval_every = 2;
    c.model.qk_norm_gain = 100.0;
    let cfg = write_config(&dir, "diverge.json", &c);
    let run = dir.join("run");
    let (code, out, err) = phasekv(&["train", "--config", s(&cfg), "--out", s(&run), "--quiet"]);
    assert_eq!(code, 1, "{out}{err}");
    // Eval lines are progress; the failure is one error line, the last.
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert_eq!(err.trim().lines().last(), Some(errors[0]));
    assert!(errors[0].contains("training diverged at step") && errors[0].contains("no metrics.json"), "{err}");
    assert!(!run.join("metrics.json").exists() && !run.join("model.safetensors").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_trainings_into_one_directory_the_second_is_refused() {
    let dir = scratch("concurrent");
    let mut c = tiny(1_000_000);
    c.train.eval_every = 1_000_000;
    c.train.checkpoint_every = 1_000_000;
    let cfg = write_config(&dir, "long.json", &c);
    let run = dir.join("run");
    let args = ["train", "--config", s(&cfg), "--out", s(&run), "--quiet"];
    let mut first = Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(args)
        .env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = first.id();
    // Wait until the first one trains (its log has lines).
    let start = Instant::now();
    while std::fs::read_to_string(run.join("log.jsonl")).map(|t| t.lines().count()).unwrap_or(0) < 3 {
        assert!(start.elapsed() < Duration::from_secs(60), "first training never started");
        assert!(first.try_wait().unwrap().is_none(), "first training exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
    let err = refused(&args, &["run directory in use by pid", &pid.to_string()]);
    assert!(err.contains(s(&run)), "{err}");
    // The first one is undisturbed: it stops on SIGTERM with a checkpoint, its log has every
    // step once and in order.
    assert!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    let status = first.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    let steps: Vec<u64> = std::fs::read_to_string(run.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "train")
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert!(!steps.is_empty());
    assert_eq!(steps, (1..=steps.len() as u64).collect::<Vec<_>>());
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("checkpoint.json")).unwrap()).unwrap();
    assert_eq!(index["step"].as_u64(), steps.last().copied());
    // No temporary files left behind by either process.
    let stray: Vec<_> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A size drawn mostly from a small valid range, sometimes hostile (0, huge, `usize::MAX`).
fn size(lo: usize, hi: usize) -> impl Strategy<Value = usize> {
    prop_oneof![
        90 => lo..=hi,
        1 => Just(0usize),
        1 => Just(usize::MAX),
        1 => (1usize << 20)..(1usize << 44),
    ]
}

fn config_strategy() -> impl Strategy<Value = RunConfig> {
    let presets =
        prop::sample::select(vec!["full", "w8s4", "w4s4-tied", "w3s2", "dsv4-csa", "w200s4", "w12s12-norope"]);
    let task = (
        (size(1, 12), size(1, 12), size(1, 3), size(1, 2), size(1, 2)),
        (size(1, 5), size(1, 4), size(0, 8), size(0, 3), size(1, 30)),
    );
    let model = (presets, size(1, 16), size(1, 2), size(1, 4), size(1, 2), size(1, 8), size(1, 16), size(1, 24));
    let lr = prop_oneof![30 => 1e-4..1.0f64, 1 => Just(f64::NAN), 1 => Just(0.0), 1 => Just(1e9)];
    let train = (size(1, 2), size(1, 3), size(1, 6), lr);
    (task, model, train).prop_map(|(((nk, nv, nf, kl, vl), (nr, nq, mp, mg, m)), model, (steps, batch, evals, lr))| {
        let mut c = RunConfig::default();
        c.task.n_key = nk;
        c.task.n_val = nv;
        c.task.n_filler = nf;
        c.task.key_len = kl;
        c.task.val_len = vl;
        c.task.n_records = nr;
        c.task.n_queries = nq;
        c.task.max_prefix = mp;
        c.task.max_gap = mg;
        c.task.residue_modulus = m;
        let (preset, d_model, n_layer, n_head, n_kv_head, d_head, d_ff, local_window) = model;
        c.model.preset = preset.to_string();
        c.model.d_model = d_model;
        c.model.n_layer = n_layer;
        c.model.n_head = n_head;
        c.model.n_kv_head = n_kv_head;
        c.model.d_head = d_head;
        c.model.d_ff = d_ff;
        c.model.local_window = local_window;
        c.train.steps = steps;
        c.train.batch_size = batch;
        c.train.eval_samples = evals;
        c.train.lr = lr;
        c
    })
}

#[test]
fn every_train_config_is_refused_as_bad_input_or_trains_a_step() {
    let mut runner = common::runner("hostile-train-configs", 128, Some("proptest-regressions/hostile_runs.txt"));
    let counts = std::cell::RefCell::new((0usize, 0usize));
    runner
        .run(&config_strategy(), |c| {
            let result = std::panic::catch_unwind(|| match c.validate() {
                Ok(()) => phasekv::model::bench_steps(&c, 0, 1).map(|_| true),
                Err(e) => Err(e),
            });
            let result = result.map_err(|_| TestCaseError::fail(format!("panicked on {c:?}")))?;
            match result {
                Ok(_) => counts.borrow_mut().0 += 1,
                // Refused configs are bad input: `Invalid` (exit status 2), one line, naming a field.
                Err(e @ phasekv::Error::Invalid { .. }) => {
                    let msg = e.to_string();
                    prop_assert!(!msg.contains('\n'), "{}", msg);
                    prop_assert!(msg.starts_with("invalid "), "{}", msg);
                    counts.borrow_mut().1 += 1;
                }
                Err(e) => return Err(TestCaseError::fail(format!("{c:?} failed after validation: {e}"))),
            }
            Ok(())
        })
        .unwrap();
    let (accepted, refused) = *counts.borrow();
    eprintln!("train configs: {accepted} accepted and trained a step, {refused} refused");
    // The strategy reaches both outcomes.
    assert!(accepted > 0 && refused > 0, "accepted {accepted}, refused {refused}");
}

/// A directory lock this process released can stay held for a moment by a child another thread
/// forked meanwhile (its copy of the open file, until `exec`): the next `acquire` here waits for
/// it, as the lab CLI tests beside a tiny reproduction needed. A second open file of the lock
/// stands in for the child's copy. Negative control: held longer than `OWN_LOCK_WAIT` by this
/// process, the lock is refused after that wait, naming this pid.
#[test]
fn a_lock_held_a_moment_by_this_process_is_waited_for_and_a_longer_hold_refused() {
    use phasekv::run_dir::OWN_LOCK_WAIT;
    let dir = scratch("own-lock");
    let copy = DirLock::acquire(&dir).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(copy);
    });
    let start = Instant::now();
    let second = DirLock::acquire(&dir).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(150), "{:?}", start.elapsed());
    release.join().unwrap();
    let start = Instant::now();
    let err = DirLock::acquire(&dir).unwrap_err().to_string();
    assert!(start.elapsed() >= OWN_LOCK_WAIT, "{:?}", start.elapsed());
    assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
    drop(second);
    DirLock::acquire(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
