//! Two writers, one report (issue 46) and the first signal to `report` (issue 47, row 5): one
//! report per directory, none of an output a live reproduce holds or of an unfinished run
//! unless asked for as partial, and a report stopped by `kill -9` or a signal leaves the old
//! report whole and no temporary file. Each spawns the binary on one tiny reproduced model
//! and pauses a report mid-build (SIGSTOP) to act while it holds the directory.

use crate::common;

use common::plans::{assert_same_report, phasekv, phasekv_ok, scratch, tiny_sweep, write_plan};
use phasekv::reproduce::Plan;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// One tiny model (w4s4, seed 0) of `steps` steps.
fn one_model(steps: usize) -> Plan {
    let mut plan = tiny_sweep(steps);
    plan.seeds = vec![0];
    plan.sweep.as_mut().unwrap().axes[1].values = vec![4u64.into()];
    plan
}

/// The tests of this file that use [`base`]; the last one to end removes it.
const BASE_USERS: usize = 4;

/// A finished reproduction of [`one_model`], made once per test process and removed when the
/// last of its [`BASE_USERS`] users drops its guard (left behind only when a filter runs
/// some of them).
fn base() -> (&'static Path, BaseGuard) {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    let path = BASE.get_or_init(|| {
        let dir = scratch("writers-base");
        let plan = dir.join("one.json");
        write_plan(&plan, &one_model(6));
        let out = dir.join("out");
        phasekv_ok(&["reproduce", "--plan", s(&plan), "--out", s(&out)]);
        out
    });
    (path, BaseGuard)
}

struct BaseGuard;

impl Drop for BaseGuard {
    fn drop(&mut self) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static ENDED: AtomicUsize = AtomicUsize::new(0);
        if ENDED.fetch_add(1, Ordering::SeqCst) + 1 == BASE_USERS {
            let _ = std::fs::remove_dir_all(base_dir());
        }
    }
}

fn base_dir() -> PathBuf {
    std::env::temp_dir().join(format!("phasekv-writers-base-{}", std::process::id()))
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

/// Two inputs in `dir`: `r1`, a copy of the base output, and `r2`, the same with a second run (a copy
/// named `w4-s4-seed7`, so its report has figures `r1`'s lacks); `old`, a report of `r2`; and
/// `reference`, a report of `r1` written alone.
fn inputs(dir: &Path, base: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let (r1, r2, old, reference) = (dir.join("r1"), dir.join("r2"), dir.join("old"), dir.join("reference"));
    copy_dir(base, &r1);
    copy_dir(base, &r2);
    copy_dir(&r2.join("runs/w4-s4-seed0"), &r2.join("runs/w4-s4-seed7"));
    reseed(&r2.join("runs/w4-s4-seed7"), 7);
    phasekv_ok(&["report", "--from", s(&r2), "--out", s(&old)]);
    phasekv_ok(&["report", "--from", s(&r1), "--out", s(&reference)]);
    (r1, r2, old, reference)
}

/// Makes a copied run a run of seed `seed` as far as the report's loader can tell (the seed in
/// every file, no model identity shared with its source), and writes its manifest again: the
/// loader refuses a run copied under another name, rightly, so the copy must be a new run.
fn reseed(run: &Path, seed: u64) {
    use serde_json::Value;
    fn edit(v: &mut Value, seed: u64) {
        if let Some(o) = v.as_object_mut() {
            if o.contains_key("seed") {
                o.insert("seed".into(), seed.into());
            }
            if o.contains_key("run_id") {
                o.insert("run_id".into(), Value::Null);
            }
        }
    }
    for e in std::fs::read_dir(run).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name == "manifest.json" || !path.is_file() {
            continue;
        }
        if name.ends_with(".jsonl") {
            let text = std::fs::read_to_string(&path).unwrap();
            let lines: Vec<String> = text
                .lines()
                .map(|l| {
                    let mut v: Value = serde_json::from_str(l).unwrap();
                    edit(&mut v, seed);
                    v.to_string()
                })
                .collect();
            std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        } else if name.ends_with(".json") {
            let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            if name == "config.json" {
                v["train"]["seed"] = seed.into();
            } else {
                edit(&mut v, seed);
            }
            std::fs::write(&path, v.to_string()).unwrap();
        }
    }
    let _ = std::fs::remove_file(run.join("manifest.json"));
    phasekv::reproduce::write_manifest(run).unwrap();
}

/// Every file under `dir` (relative path and bytes, sorted), leaving out the lock files.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if !matches!(p.file_name().unwrap().to_str(), Some(".lock" | ".reproduce.lock")) {
                out.push((p.strip_prefix(root).unwrap().to_string_lossy().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn names(files: &[(String, Vec<u8>)]) -> Vec<&str> {
    files.iter().map(|(n, _)| n.as_str()).collect()
}

/// Paths under `dir` that a writer left behind: staging directories and temporary files.
fn litter(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            if n.starts_with(".report-") || n.contains(".tmp.") {
                found.push(p.strip_prefix(dir).unwrap().to_string_lossy().to_string());
            }
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    found
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(args)
        .env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn signal(child: &Child, sig: &str) {
    assert!(Command::new("kill").args([sig, &child.id().to_string()]).status().unwrap().success());
}

/// Waits until the report `child` builds in `out` (its staging directory exists), then stops it
/// (SIGSTOP) before its commit point (no ready directory yet).
fn pause_while_building(child: &mut Child, out: &Path) {
    let staging = out.join(format!(".report-new-{}", child.id()));
    let start = Instant::now();
    while !staging.exists() {
        assert!(child.try_wait().unwrap().is_none(), "the report ended before it was seen building");
        assert!(start.elapsed() < Duration::from_secs(60), "the report never started building");
        std::thread::sleep(Duration::from_millis(1));
    }
    signal(child, "-STOP");
    let stat = format!("/proc/{}/stat", child.id());
    while !std::fs::read_to_string(&stat).unwrap().contains(") T ") {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(staging.exists(), "the report passed its commit point before it was stopped");
}

/// Refused with exit 2 and one line holding every needle.
fn refused(args: &[&str], needles: &[&str]) -> String {
    let (code, out, err) = phasekv(args);
    assert_eq!(code, 2, "{args:?}: exit {code}\n{out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: not one line:\n{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {err:?} lacks {n:?}");
    }
    err
}

#[test]
fn two_reports_into_one_directory_one_is_refused_and_the_result_is_whole() {
    let (base, _guard) = base();
    let dir = scratch("writers-two");
    let (r1, r2, old, reference) = inputs(&dir, base);
    let out = dir.join("out");
    copy_dir(&old, &out);
    // The old report has figures of a run the new one lacks: a mix would keep them.
    let stale = "figures/knockout-w4-s4-seed7-in-sequence.json";
    assert!(out.join(stale).exists() && !reference.join(stale).exists());

    let mut a = spawn(&["report", "--from", s(&r1), "--out", s(&out)]);
    pause_while_building(&mut a, &out);
    let pid = format!("pid {}", a.id());
    refused(&["report", "--from", s(&r2), "--out", s(&out)], &["--out", s(&out), "another report", &pid]);
    // A reproduce into an output a report reads is refused too, naming the report.
    let plan = dir.join("one.json");
    write_plan(&plan, &one_model(6));
    refused(&["reproduce", "--plan", s(&plan), "--out", s(&r1)], &["--out", "in use by a report", &pid]);
    signal(&a, "-CONT");
    let done = a.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));

    // Whole: the report of r1 alone, file for file, and nothing of the old one or of r2.
    assert_same_report(&reference, &out);
    let (got, want) = (snapshot(&out.join("figures")), snapshot(&reference.join("figures")));
    assert_eq!(names(&got), names(&want));
    assert!(!out.join(stale).exists());
    assert_eq!(std::fs::read(out.join("README.md")).unwrap(), std::fs::read(reference.join("README.md")).unwrap());
    assert!(litter(&out).is_empty(), "{:?}", litter(&out));

    // Negative control: a second report after the first is accepted and replaces it.
    phasekv_ok(&["report", "--from", s(&r2), "--out", s(&out)]);
    assert!(out.join(stale).exists());
    assert_eq!(snapshot(&out), snapshot(&old));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_report_during_a_reproduce_is_refused_and_an_unfinished_run_only_as_partial() {
    let (base, _guard) = base();
    let dir = scratch("writers-reproduce");
    let mut plan = one_model(1_000_000);
    plan.run.train.eval_every = 1_000_000;
    plan.run.train.checkpoint_every = 1_000_000;
    let plan_file = dir.join("long.json");
    write_plan(&plan_file, &plan);
    let r = dir.join("r");
    let mut repro = spawn(&["reproduce", "--plan", s(&plan_file), "--out", s(&r)]);
    let log = r.join("runs/w4-s4-seed0/log.jsonl");
    let start = Instant::now();
    while std::fs::read_to_string(&log).map(|t| t.lines().count()).unwrap_or(0) < 2 {
        assert!(start.elapsed() < Duration::from_secs(60), "the reproduce never trained");
        assert!(repro.try_wait().unwrap().is_none(), "the reproduce ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = format!("a reproduce (pid {})", repro.id());
    refused(&["report", "--from", s(&r), "--out", s(&r)], &["--from", s(&r), &pid]);
    let elsewhere = dir.join("elsewhere");
    refused(&["report", "--from", s(&r), "--out", s(&elsewhere)], &["--from", s(&r), &pid]);
    assert!(!r.join("ledger.json").exists() && !elsewhere.join("ledger.json").exists());

    // Stopped, the reproduce leaves an unfinished run: refused, then accepted as partial.
    signal(&repro, "-TERM");
    assert_eq!(repro.wait().unwrap().code(), Some(143));
    let run = r.join("runs/w4-s4-seed0");
    assert!(!run.join("metrics.json").exists());
    refused(&["report", "--from", s(&r), "--out", s(&r)], &["--from", s(&run), "unfinished run", "--partial"]);
    assert!(!r.join("ledger.json").exists(), "a refused report wrote one");
    phasekv_ok(&["report", "--from", s(&r), "--out", s(&r), "--partial"]);
    let ledger: serde_json::Value = serde_json::from_slice(&std::fs::read(r.join("ledger.json")).unwrap()).unwrap();
    assert_eq!(ledger["partial"], true);
    assert_eq!(ledger["banner"][0]["kind"], "partial report");
    assert!(ledger["banner"][0]["text"].as_str().unwrap().contains(s(&run)));
    let readme = std::fs::read_to_string(r.join("README.md")).unwrap();
    assert!(readme.contains("- **partial report**: built with --partial"), "{readme}");

    // Negative control: a finished output is reported without --partial and not marked.
    let whole = dir.join("whole");
    phasekv_ok(&["report", "--from", s(base), "--out", s(&whole)]);
    let ledger: serde_json::Value = serde_json::from_slice(&std::fs::read(whole.join("ledger.json")).unwrap()).unwrap();
    assert!(ledger.get("partial").is_none(), "{ledger}");
    assert!(!std::fs::read_to_string(whole.join("README.md")).unwrap().contains("partial report"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kill_9_during_a_report_leaves_the_old_report_and_the_next_report_cleans_up() {
    let (base, _guard) = base();
    let dir = scratch("writers-kill");
    let (r1, _, old, reference) = inputs(&dir, base);
    let out = dir.join("out");
    copy_dir(&old, &out);
    let before = snapshot(&out);
    // Negative control: the new report differs from the old, so "intact" can fail.
    assert_ne!(snapshot(&reference), before);

    let mut a = spawn(&["report", "--from", s(&r1), "--out", s(&out)]);
    pause_while_building(&mut a, &out);
    signal(&a, "-KILL");
    a.wait().unwrap();
    let staging = format!(".report-new-{}", a.id());
    let after: Vec<_> = snapshot(&out).into_iter().filter(|(n, _)| !n.starts_with(&staging)).collect();
    assert!(after == before, "the old report changed");
    assert!(out.join(&staging).is_dir(), "kill -9 leaves its staging directory");

    // The next report proves it dead (it holds the lock), removes it, and writes whole.
    phasekv_ok(&["report", "--from", s(&r1), "--out", s(&out)]);
    assert!(litter(&out).is_empty(), "{:?}", litter(&out));
    assert_same_report(&reference, &out);
    assert_eq!(names(&snapshot(&out.join("figures"))), names(&snapshot(&reference.join("figures"))));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_first_signal_stops_a_report_at_once_leaving_the_old_report_and_no_temporaries() {
    let (base, _guard) = base();
    let dir = scratch("writers-signal");
    let (r1, _, old, _) = inputs(&dir, base);
    let out = dir.join("out");
    copy_dir(&old, &out);
    let before = snapshot(&out);
    for (sig, code, name) in [("-TERM", 143, "SIGTERM"), ("-INT", 130, "SIGINT"), ("-HUP", 129, "SIGHUP")] {
        let mut a = spawn(&["report", "--from", s(&r1), "--out", s(&out)]);
        pause_while_building(&mut a, &out);
        signal(&a, sig);
        let t0 = Instant::now();
        signal(&a, "-CONT");
        let done = a.wait_with_output().unwrap();
        let took = t0.elapsed();
        let err = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(code), "{sig}: {err}");
        assert!(took < Duration::from_secs(2), "{sig}: stopped after {took:?}");
        assert!(err.contains(&format!("{name}: report stopped")) && err.contains("as it was"), "{err}");
        assert!(snapshot(&out) == before, "{sig}: the old report changed");
        assert!(litter(&out).is_empty(), "{sig}: {:?}", litter(&out));
    }
    // Negative control: unsignalled, the same report replaces the old one.
    phasekv_ok(&["report", "--from", s(&r1), "--out", s(&out)]);
    assert!(snapshot(&out) != before);
    std::fs::remove_dir_all(&dir).unwrap();
}
