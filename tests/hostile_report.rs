//! The ledger trusts nothing it reads (issue 44): every corruption of the issue's table, made
//! on a copy of one tiny reproduction, is refused by `phasekv report --from` with exit 2 and one
//! line naming the file and the field, and `--out` gets no ledger. Each case runs twice: as the
//! corruption alone, which the run's provenance manifest refuses (the file named), and with the
//! manifest rewritten over the corrupted data, which the loader's consistency checks refuse
//! (file, line and field named). The migration `analyze manifest` refuses corrupted data and
//! writes, on clean data, exactly the manifest the writers recorded; `analyze upgrade` (issue 47
//! rows 6-9) checks every file before rewriting any, refuses fields it does not know, a run in
//! use and special files, cleans stale temporary files, and stops when asked.

use crate::common;

use common::plans::{phasekv, scratch, tiny_sweep, write_plan};
use phasekv::analysis::verdict::Rules;
use phasekv::reproduce::Axis;
use phasekv::run_dir::manifest;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const ARM: &str = "w4-s4";

/// One tiny reproduction (one arm, seeds 0 and 1, v2 rules: each seed fails the
/// training-success rule after its extension and is excluded), made once for every test here.
fn reproduction() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("hostile-report");
        let mut plan = tiny_sweep(4);
        let axis = |name: &str, v: u64| Axis { name: name.into(), values: vec![v.into()] };
        plan.sweep.as_mut().unwrap().axes = vec![axis("w", 4), axis("s", 4)];
        plan.rules = Rules::V2;
        let plan_file = dir.join("plan.json");
        write_plan(&plan_file, &plan);
        let out = dir.join("out");
        let (code, o, e) = phasekv(&["reproduce", "--plan", s(&plan_file), "--out", s(&out)]);
        assert_eq!(code, 0, "reproduce failed:\n{o}\n{e}");
        out
    })
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('.') {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn run(out: &Path, seed: u64) -> PathBuf {
    out.join("runs").join(format!("{ARM}-seed{seed}"))
}

fn edit_json(path: &Path, edit: impl Fn(&mut Value)) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap() + "\n").unwrap();
}

fn edit_lines(path: &Path, edit: impl Fn(&mut Vec<Value>)) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    edit(&mut lines);
    let text: Vec<String> = lines.iter().map(|v| serde_json::to_string(v).unwrap()).collect();
    std::fs::write(path, text.join("\n") + "\n").unwrap();
}

const IN_SEQ: &str = "eval-in-sequence-outcomes.jsonl";
const PREFIX: &str = "eval-prefix-outcomes.jsonl";

/// `phasekv report --from from --out out` is refused: exit 2, one line holding every needle,
/// no ledger in `out`.
fn report_refused(case: &str, from: &Path, needles: &[&str]) {
    let out = from.with_extension("report");
    let (code, o, e) = phasekv(&["report", "--from", s(from), "--out", s(&out)]);
    assert_eq!(code, 2, "{case}: exit {code}\n{o}{e}");
    assert_eq!(e.trim().lines().count(), 1, "{case}: not one line:\n{e}");
    for n in needles {
        assert!(e.contains(n), "{case}: {e:?} lacks {n:?}");
    }
    assert!(!out.join("ledger.json").exists() && !out.join("README.md").exists(), "{case}: a ledger was written");
}

type Corrupt = fn(&Path);

/// The issue's table: (case, corruption of a copy of the reproduction, the file the manifest
/// names, the field the loader names after the manifest is rewritten over the corruption).
fn table() -> Vec<(&'static str, Corrupt, &'static str, &'static str)> {
    vec![
        (
            "every outcome row written twice",
            |o| edit_lines(&run(o, 0).join(IN_SEQ), |v| v.extend(v.clone())),
            IN_SEQ,
            "id",
        ),
        ("one repeated outcome row", |o| edit_lines(&run(o, 0).join(IN_SEQ), |v| v.push(v[3].clone())), IN_SEQ, "id"),
        (
            "half the lines removed",
            |o| edit_lines(&run(o, 0).join(IN_SEQ), |v| v.truncate(v.len() / 2)),
            IN_SEQ,
            "lines",
        ),
        ("prob 2.0", |o| edit_lines(&run(o, 0).join(IN_SEQ), |v| v[1]["prob"] = 2.0.into()), IN_SEQ, "prob"),
        ("prob negative", |o| edit_lines(&run(o, 0).join(PREFIX), |v| v[2]["prob"] = (-0.25).into()), PREFIX, "prob"),
        (
            "correct false with prob above 0.5",
            |o| {
                edit_lines(&run(o, 0).join(IN_SEQ), |v| {
                    v[0]["correct"] = false.into();
                    v[0]["prob"] = 0.9.into();
                })
            },
            IN_SEQ,
            "correct",
        ),
        (
            "group contradicting position mod M",
            |o| {
                edit_lines(&run(o, 0).join(IN_SEQ), |v| {
                    let g = v[0]["group"].as_u64().unwrap();
                    v[0]["group"] = ((g + 1) % 4).into();
                })
            },
            IN_SEQ,
            "group",
        ),
        (
            "in-sequence lines in the prefix file",
            |o| {
                std::fs::copy(run(o, 0).join(IN_SEQ), run(o, 0).join(PREFIX)).unwrap();
            },
            PREFIX,
            "protocol",
        ),
        (
            "another seed's outcomes copied in",
            |o| edit_lines(&run(o, 0).join(IN_SEQ), |v| v.iter_mut().for_each(|l| l["seed"] = 1.into())),
            IN_SEQ,
            "seed",
        ),
        (
            "outcome lines naming another arm",
            |o| edit_lines(&run(o, 1).join(PREFIX), |v| v.iter_mut().for_each(|l| l["arm"] = "w4-s2".into())),
            PREFIX,
            "arm",
        ),
        (
            "a run directory copied under another seed's name",
            |o| {
                std::fs::remove_dir_all(run(o, 1)).unwrap();
                copy_dir(&run(o, 0), &run(o, 1));
            },
            "manifest.json",
            "train.seed",
        ),
        (
            "config says seed 5",
            |o| edit_json(&run(o, 0).join("config.json"), |v| v["train"]["seed"] = 5.into()),
            "config.json",
            "train.seed",
        ),
        (
            "config is full attention",
            |o| edit_json(&run(o, 0).join("config.json"), |v| v["model"]["preset"] = "full".into()),
            "config.json",
            "model.preset",
        ),
        (
            "an excluded seed's metrics.json removed",
            |o| std::fs::remove_file(run(o, 1).join("metrics.json")).unwrap(),
            "metrics.json",
            "metrics",
        ),
        (
            "an excluded seed's metrics.json claiming 5 extensions",
            |o| {
                edit_json(&run(o, 1).join("metrics.json"), |v| {
                    let x = v["extensions"][0].clone();
                    v["extensions"] = Value::Array(vec![x; 5]);
                })
            },
            "metrics.json",
            "extensions",
        ),
        (
            "held-out accuracy 1.5",
            |o| edit_json(&run(o, 0).join("metrics.json"), |v| v["final_eval"]["accuracy"] = 1.5.into()),
            "metrics.json",
            "final_eval.accuracy",
        ),
        (
            "held-out accuracy negative",
            |o| edit_json(&run(o, 1).join("metrics.json"), |v| v["final_eval"]["accuracy"] = (-0.5).into()),
            "metrics.json",
            "final_eval.accuracy",
        ),
        (
            "residue_modulus 0",
            |o| edit_json(&run(o, 0).join("config.json"), |v| v["task"]["residue_modulus"] = 0.into()),
            "config.json",
            "residue_modulus",
        ),
        (
            "stride 0",
            |o| edit_json(&run(o, 0).join("eval-prefix.json"), |v| v["stride"] = 0.into()),
            "eval-prefix.json",
            "stride",
        ),
        (
            "per_group 0",
            |o| edit_json(&run(o, 0).join("eval-in-sequence.json"), |v| v["per_group"] = 0.into()),
            "eval-in-sequence.json",
            "per_group",
        ),
        (
            "a short knockout row",
            |o| {
                edit_json(&run(o, 0).join("knockout-in-sequence.json"), |v| {
                    v["map"]["rows"][0]["drop_pp"].as_array_mut().unwrap().pop();
                })
            },
            "knockout-in-sequence.json",
            "drop_pp",
        ),
    ]
}

#[test]
fn report_refuses_every_corruption_of_the_issue_table_naming_file_and_field() {
    let src = reproduction();
    let dir = scratch("hostile-report-cases");
    // The seeds are excluded by the training-success rule (the rows on excluded seeds).
    for seed in [0, 1] {
        let m: Value =
            serde_json::from_str(&std::fs::read_to_string(run(src, seed).join("metrics.json")).unwrap()).unwrap();
        assert!(
            m["final_eval"]["accuracy"].as_f64().unwrap() < 0.9,
            "seed {seed} trained: no excluded seed to corrupt"
        );
    }
    // The clean copy, its manifests rewritten by the migration's writer, is accepted.
    let clean = dir.join("clean");
    copy_dir(src, &clean);
    for seed in [0, 1] {
        manifest::write_all(&run(&clean, seed)).unwrap();
    }
    let (code, o, e) = phasekv(&["report", "--from", s(&clean), "--out", s(&dir.join("clean-report"))]);
    assert_eq!(code, 0, "the clean reproduction is refused:\n{o}{e}");
    assert!(dir.join("clean-report/ledger.json").is_file());

    for (i, (case, corrupt, file, field)) in table().into_iter().enumerate() {
        // The corruption alone: the manifest refuses the file.
        let a = dir.join(format!("a{i}"));
        copy_dir(src, &a);
        corrupt(&a);
        report_refused(case, &a, &[file]);
        // The manifest rewritten over it: the loader names file and field.
        let b = dir.join(format!("b{i}"));
        copy_dir(src, &b);
        corrupt(&b);
        for seed in [0, 1] {
            manifest::write_all(&run(&b, seed)).unwrap();
        }
        let named = if file == "manifest.json" { "config.json" } else { file };
        report_refused(case, &b, &[named, &format!("{field}:")]);
    }
    // A dangling metrics.json (the manifest cannot be rewritten over it).
    let d = dir.join("dangling");
    copy_dir(src, &d);
    std::fs::remove_file(run(&d, 1).join("metrics.json")).unwrap();
    std::os::unix::fs::symlink(dir.join("nowhere.json"), run(&d, 1).join("metrics.json")).unwrap();
    report_refused("a dangling metrics.json", &d, &["metrics.json"]);
    // A FIFO and /dev/zero where an outcome file should be.
    let f = dir.join("special");
    copy_dir(src, &f);
    std::fs::remove_file(run(&f, 0).join(IN_SEQ)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", run(&f, 0).join(IN_SEQ)).unwrap();
    report_refused("/dev/zero as outcomes", &f, &[IN_SEQ]);
    // A result file added after the run wrote its results.
    let x = dir.join("added");
    copy_dir(src, &x);
    std::fs::copy(run(&x, 0).join("eval-prefix.json"), run(&x, 0).join("eval-extra.json")).unwrap();
    report_refused("an added result file", &x, &["eval-extra.json", "not in manifest.json"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_manifest_migration_refuses_corrupted_data_and_rewrites_what_the_writers_recorded() {
    let src = reproduction();
    let dir = scratch("hostile-report-migrate");
    let out = dir.join("out");
    copy_dir(src, &out);
    let r0 = run(&out, 0);
    // The writers recorded every result file: the migration's manifest of the same files is
    // byte for byte the one `reproduce` left.
    let written = std::fs::read(r0.join("manifest.json")).unwrap();
    std::fs::remove_file(r0.join("manifest.json")).unwrap();
    let (code, o, e) = phasekv(&["analyze", "manifest", s(&r0)]);
    assert_eq!(code, 0, "{o}{e}");
    assert_eq!(std::fs::read(r0.join("manifest.json")).unwrap(), written, "the writers missed a result file");
    // A run with a manifest that verifies is left as it is.
    let (code, o, _) = phasekv(&["analyze", "manifest", s(&r0)]);
    assert!(code == 0 && o.contains("already there"), "{o}");
    // Already-corrupted data gets no manifest: the loader's refusal, one line, nothing written.
    std::fs::remove_file(r0.join("manifest.json")).unwrap();
    edit_lines(&r0.join(IN_SEQ), |v| v[0]["prob"] = 2.0.into());
    let (code, _, e) = phasekv(&["analyze", "manifest", s(&r0)]);
    assert_eq!(code, 2, "{e}");
    assert!(e.trim().lines().count() == 1 && e.contains(IN_SEQ) && e.contains("prob"), "{e}");
    assert!(!r0.join("manifest.json").exists(), "a manifest was written over corrupted data");
    // An edited run whose manifest no longer verifies is refused too (never re-blessed).
    let r1 = run(&out, 1);
    edit_json(&r1.join("metrics.json"), |v| v["best_accuracy"] = 0.5.into());
    let before = std::fs::read(r1.join("manifest.json")).unwrap();
    let (code, _, e) = phasekv(&["analyze", "manifest", s(&r1)]);
    assert!(code == 2 && e.contains("metrics.json") && e.contains("hash"), "{e}");
    assert_eq!(std::fs::read(r1.join("manifest.json")).unwrap(), before);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The files of `run` by name, with their bytes (hidden files and the lock left out).
fn files(run: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(run)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file() && !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| (e.file_name().to_string_lossy().to_string(), std::fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    v
}

/// The outcome files of `run` as written before issue 31: without the per-line columns.
fn strip_columns(run: &Path) {
    for f in [IN_SEQ, PREFIX] {
        edit_lines(&run.join(f), |v| {
            for l in v.iter_mut() {
                let o = l.as_object_mut().unwrap();
                for k in ["arm", "preset", "seed", "protocol", "family", "phase"] {
                    o.remove(k);
                }
            }
        });
    }
    manifest::write_all(run).unwrap();
}

#[test]
fn upgrade_checks_every_file_first_refuses_unknown_fields_busy_runs_and_special_files() {
    let src = reproduction();
    let dir = scratch("hostile-report-upgrade");
    let out = dir.join("out");
    copy_dir(src, &out);
    let (r0, r1) = (run(&out, 0), run(&out, 1));
    strip_columns(&r1);
    let refused = |args: &[&str], needles: &[&str]| {
        let (code, o, e) = phasekv(args);
        assert_eq!(code, 2, "{args:?}: exit {code}\n{o}{e}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        for n in needles {
            assert!(e.contains(n), "{e:?} lacks {n:?}");
        }
    };
    // An unknown field in one line of the second run: nothing of the first is rewritten.
    edit_lines(&r0.join(PREFIX), |v| v[2]["extra"] = "kept?".into());
    manifest::write_all(&r0).unwrap();
    let (before0, before1) = (files(&r0), files(&r1));
    refused(&["analyze", "upgrade", s(&r1), s(&r0)], &[PREFIX, "line 3", "extra"]);
    assert!(files(&r0) == before0 && files(&r1) == before1, "a file was rewritten before every file was checked");
    // An unknown field of the evaluation JSON, nested: refused the same way.
    edit_lines(&r0.join(PREFIX), |v| {
        v[2].as_object_mut().unwrap().remove("extra");
    });
    edit_json(&r0.join("eval-in-sequence.json"), |v| v["profile"]["note"] = "mine".into());
    manifest::write_all(&r0).unwrap();
    refused(&["analyze", "upgrade", s(&r1), s(&r0)], &["eval-in-sequence.json", "profile.note"]);
    assert_eq!(files(&r1), before1);
    edit_json(&r0.join("eval-in-sequence.json"), |v| {
        v["profile"].as_object_mut().unwrap().remove("note");
    });
    manifest::write_all(&r0).unwrap();
    // A run in use (its lock held by another process: this one).
    let lock = phasekv::run_dir::DirLock::acquire(&r1).unwrap();
    refused(&["analyze", "upgrade", s(&r1)], &["in use"]);
    drop(lock);
    assert_eq!(files(&r1), before1);
    // Special files where results should be.
    // (a copy under the run's own name: the arm is the directory's)
    let special = dir.join("special").join(format!("{ARM}-seed1"));
    copy_dir(&r1, &special);
    std::fs::remove_file(special.join("manifest.json")).unwrap();
    std::fs::remove_file(special.join(PREFIX)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", special.join(PREFIX)).unwrap();
    refused(&["analyze", "upgrade", s(&special)], &[PREFIX, "character device"]);
    std::fs::remove_file(special.join(PREFIX)).unwrap();
    let status = std::process::Command::new("mkfifo").arg(special.join(PREFIX)).status().unwrap();
    assert!(status.success());
    refused(&["analyze", "upgrade", s(&special)], &[PREFIX, "FIFO"]);
    // Asked to stop before writing: nothing written.
    let report = phasekv::lab::outcomes::upgrade_runs(&[r1.clone()], &|| true).unwrap();
    assert!(report.stopped && report.runs.is_empty());
    assert_eq!(files(&r1), before1);
    // A stale temporary file of a killed writer is removed; the upgrade writes, keeps the
    // manifest verifying, and the report reads the upgraded run.
    let stale = r1.join(".4000000-0.tmp.eval-prefix-outcomes.jsonl");
    std::fs::write(&stale, b"half").unwrap();
    let (code, o, e) = phasekv(&["analyze", "upgrade", s(&r1), s(&r0)]);
    assert_eq!(code, 0, "{o}{e}");
    assert!(o.contains("rewritten") && o.contains("stale"), "{o}");
    assert!(!stale.exists(), "stale temporary file left");
    manifest::verify(&r1).unwrap();
    assert_eq!(files(&r1), files(&run(src, 1)), "the upgrade did not restore the columns exactly");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Row 9's signal: the first SIGTERM stops `analyze upgrade` of many runs within a second or
/// two, exit 143, one line saying so; every file is then either as it was or as the full
/// upgrade writes it, every manifest verifies, and no temporary file is left. The same command
/// run again finishes the upgrade.
#[test]
fn upgrade_stops_on_the_first_signal_leaving_every_file_old_or_new() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let src = reproduction();
    let dir = scratch("hostile-report-upgrade-signal");
    let stripped = dir.join("stripped").join(format!("{ARM}-seed1"));
    copy_dir(&run(src, 1), &stripped);
    strip_columns(&stripped);
    let (old, new) = (files(&stripped), files(&run(src, 1)));
    assert_ne!(old, new);
    // Many runs, so that the upgrade is still checking when the signal comes.
    let runs: Vec<PathBuf> = (0..150)
        .map(|i| {
            let r = dir.join(format!("c{i}")).join(format!("{ARM}-seed1"));
            copy_dir(&stripped, &r);
            r
        })
        .collect();
    let mut args = vec!["analyze".to_string(), "upgrade".to_string()];
    args.extend(runs.iter().map(|r| s(r).to_string()));
    let child = Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(&args)
        .env("RAYON_NUM_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The signal comes once the first run's lock is taken: the other 149 are still to check.
    let started = Instant::now();
    while !runs[0].join(phasekv::run_dir::LOCK_FILE).exists() {
        assert!(started.elapsed() < Duration::from_secs(60), "the upgrade never took the first run's lock");
        std::thread::sleep(Duration::from_millis(5));
    }
    let sent = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let after = sent.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "exit {:?}: {err}", out.status.code());
    assert!(after < 2.5, "stopped {after:.1} s after SIGTERM");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("SIGTERM"), "{err}");
    let (mut untouched, mut done) = (0, 0);
    for r in &runs {
        for (name, bytes) in files(r) {
            let was = old.iter().find(|f| f.0 == name).map(|f| &f.1);
            let will = new.iter().find(|f| f.0 == name).map(|f| &f.1);
            assert!(was == Some(&bytes) || will == Some(&bytes), "{}/{name}: neither old nor new", r.display());
        }
        let hidden: Vec<String> = std::fs::read_dir(r)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.contains(".tmp."))
            .collect();
        assert!(hidden.is_empty(), "{}: temporary files left: {hidden:?}", r.display());
        manifest::verify(r).unwrap();
        untouched += usize::from(files(r) == old);
        done += usize::from(files(r) == new);
    }
    assert!(untouched > 0, "the upgrade finished before the signal ({done} runs upgraded): make it longer");
    // Run again: it finishes, every run as the full upgrade writes it.
    let (code, o, e) = phasekv(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{o}{e}");
    assert!(runs.iter().all(|r| files(r) == new));
    std::fs::remove_dir_all(&dir).unwrap();
}
