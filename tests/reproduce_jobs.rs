//! `phasekv reproduce --jobs N` runs a shard's units side by side; the results must be those
//! of one unit after another. A tiny plan of four models runs once with `--jobs 1` and once
//! with `--jobs 2` (through the binary, as a user runs it), and every file of every run is
//! compared after dropping what records wall time or the commit; a changed outcome is the
//! comparison's negative control. A `--jobs` outside `1..=256` is one error line and exit 2,
//! and the default is one unit per core of the shard, capped by the available memory at the
//! memory an emitted Slurm task requests.

use crate::common;

use common::plans::{phasekv, phasekv_ok, scratch, tiny_sweep, write_plan};
use phasekv::reproduce::jobs::{jobs, MAX_JOBS, UNIT_MEMORY_BYTES};
use proptest::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// What a file says once wall time, creation time and provenance are dropped: JSON keys naming
/// seconds, elapsed time, a creation stamp or a commit, recursively; other files as bytes.
fn content(path: &Path) -> Vec<u8> {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, _| {
                    !["second", "elapsed", "created", "git_hash", "tokens_per_s"].iter().any(|w| k.contains(w))
                });
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let bytes = std::fs::read(path).unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    let norm = |text: &str| -> String {
        let mut v: Value = serde_json::from_str(text).unwrap();
        strip(&mut v);
        v.to_string()
    };
    if name.ends_with(".jsonl") {
        String::from_utf8(bytes).unwrap().lines().map(norm).collect::<Vec<_>>().join("\n").into_bytes()
    } else if name.ends_with(".json") {
        norm(std::str::from_utf8(&bytes).unwrap()).into_bytes()
    } else {
        bytes
    }
}

/// Every file under `runs/`, by relative path, as [`content`] reads it; lock files and the
/// manifests (checksums of the files, wall times included) left out.
fn runs(out: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, into: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, into);
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if name.ends_with(".lock") || name == "manifest.json" {
                continue;
            }
            into.insert(p.strip_prefix(root).unwrap().display().to_string(), content(&p));
        }
    }
    let mut files = BTreeMap::new();
    walk(&out.join("runs"), &out.join("runs"), &mut files);
    files
}

/// The paths whose contents differ, or that only one side has.
fn differences(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter().filter(|k| a.get(*k) != b.get(*k)).cloned().collect()
}

#[test]
fn units_side_by_side_give_the_results_of_one_after_another() {
    let dir = scratch("jobs");
    let plan = tiny_sweep(8);
    let file = dir.join("plan.json");
    write_plan(&file, &plan);
    let models = plan.units().unwrap().iter().filter(|u| u.name().starts_with("model:")).count();
    assert_eq!(models, 4);
    let (one, two) = (dir.join("one"), dir.join("two"));
    phasekv_ok(&["reproduce", "--plan", s(&file), "--out", s(&one), "--jobs", "1"]);
    let (code, out, err) = phasekv(&["reproduce", "--plan", s(&file), "--out", s(&two), "--jobs", "2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("2 at once"), "{err}");
    let timing = std::fs::read_dir(two.join("timing")).unwrap().next().unwrap().unwrap().path();
    let timing: Value = serde_json::from_slice(&std::fs::read(timing).unwrap()).unwrap();
    assert_eq!(timing["jobs"], 2);
    assert_eq!(timing["model_units_run"], 4);
    let (a, b) = (runs(&one), runs(&two));
    assert!(a.keys().filter(|k| k.ends_with("eval-prefix-outcomes.jsonl")).count() == models, "{:?}", a.keys());
    assert!(a.keys().any(|k| k.ends_with(".safetensors")), "{:?}", a.keys());
    assert_eq!(differences(&a, &b), Vec::<String>::new());
    // The ledgers agree too (the report reads the runs only).
    assert_eq!(content(&one.join("ledger.json")), content(&two.join("ledger.json")));

    // Negative control: one outcome changed in the second output is found.
    let key = b.keys().find(|k| k.ends_with("eval-prefix-outcomes.jsonl")).unwrap().clone();
    let path = two.join("runs").join(&key);
    let text = std::fs::read_to_string(&path).unwrap();
    let flipped = if text.contains("\"correct\":true") {
        text.replacen("\"correct\":true", "\"correct\":false", 1)
    } else {
        text.replacen("\"correct\":false", "\"correct\":true", 1)
    };
    assert_ne!(flipped, text);
    std::fs::write(&path, flipped).unwrap();
    assert_eq!(differences(&a, &runs(&two)), vec![key]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_jobs_count_outside_its_range_is_one_error_line() {
    let dir = scratch("jobs-bad");
    for bad in ["0", "257"] {
        let (code, out, err) = phasekv(&["reproduce", "--quick", "--out", s(&dir.join("out")), "--jobs", bad]);
        assert_eq!(code, 2, "--jobs {bad}: {out}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("--jobs") && err.contains("1..=256") && err.contains(&format!("got {bad}")), "{err}");
        assert!(!dir.join("out").join("runs").exists(), "--jobs {bad} started work");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The default `--jobs`: at least 1, at most 256, no more than the shard's share of the cores
/// nor than the available memory holds at 2 GiB a unit, and equal to the smaller of the two
/// where both are in range; a given count is taken as it is, in range, and refused out of it.
/// 2 GiB is what an emitted Slurm array task requests (`--mem=2G`, checked on the job file).
#[test]
fn the_default_jobs_count_is_the_shards_cores_within_its_memory() {
    let mut runner = common::runner("reproduce-jobs-default", 256, None);
    let gib = 1u64 << 30;
    let cases = (1usize..=4096, 1usize..=64, proptest::option::of(0u64..=1 << 40), 0usize..=300);
    runner
        .run(&cases, |(cpus, shards, memory, given)| {
            let j = jobs(None, cpus, shards, memory).unwrap();
            let by_cpu = cpus / shards;
            let by_memory = memory.map_or(usize::MAX, |m| (m / UNIT_MEMORY_BYTES) as usize);
            prop_assert!((1..=MAX_JOBS).contains(&j));
            prop_assert_eq!(j, by_cpu.min(by_memory).clamp(1, MAX_JOBS));
            prop_assert!(j == 1 || (j <= by_cpu && j <= by_memory));
            match jobs(Some(given), cpus, shards, memory) {
                Ok(g) => prop_assert!(g == given && (1..=MAX_JOBS).contains(&given)),
                Err(e) => {
                    prop_assert!(given == 0 || given > MAX_JOBS);
                    let (msg, want) = (e.to_string(), format!("got {given}"));
                    prop_assert!(msg.contains("--jobs") && msg.contains(&want), "{}", msg);
                }
            }
            Ok(())
        })
        .unwrap();
    // The cases users meet: two cores alone, two shards on two cores, a big node with little
    // memory, a machine whose memory is unknown.
    assert_eq!(jobs(None, 2, 1, Some(24 * gib)).unwrap(), 2);
    assert_eq!(jobs(None, 2, 2, Some(24 * gib)).unwrap(), 1);
    assert_eq!(jobs(None, 64, 1, Some(9 * gib)).unwrap(), 4);
    assert_eq!(jobs(None, 64, 1, Some(gib)).unwrap(), 1);
    assert_eq!(jobs(None, 8, 1, None).unwrap(), 8);
    assert_eq!(UNIT_MEMORY_BYTES, 2 * gib);
    let dir = scratch("jobs-slurm");
    let job = dir.join("job");
    phasekv_ok(&["reproduce", "--quick", "--out", s(&dir.join("out")), "--emit-slurm", s(&job)]);
    let array = std::fs::read_to_string(job.join("array.sbatch")).unwrap();
    assert!(array.contains("#SBATCH --mem=2G") && array.contains("--jobs 1"), "{array}");
    std::fs::remove_dir_all(&dir).unwrap();
}
