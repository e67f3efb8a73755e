//! Issue 28, failures 6-10: hostile plan files and `--emit-slurm` options. Each is refused with
//! one line naming the field and exit status 2, quickly, before anything is written (the
//! scratch directory holds only what the test put there), and plan expansion is linear.

use crate::common::plans::{phasekv, scratch};
use std::path::Path;
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Exit status 2, one line with every needle, within `secs` seconds.
fn refused_within(secs: f64, args: &[&str], needles: &[&str]) {
    let start = Instant::now();
    let (code, out, err) = phasekv(args);
    let took = start.elapsed().as_secs_f64();
    assert_eq!(code, 2, "{args:?}: {out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: not one line:\n{err}");
    for n in needles {
        assert!(err.starts_with("error: ") && err.contains(n), "{args:?}: '{n}' missing: {err}");
    }
    assert!(took < secs, "{args:?}: took {took} s");
}

/// The entries of `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn plan_with(dir: &Path, name: &str, extra: serde_json::Value) -> std::path::PathBuf {
    let mut plan = serde_json::json!({"presets": ["w8s4"], "theory": false, "kernels": false});
    for (k, v) in extra.as_object().unwrap() {
        plan[k] = v.clone();
    }
    let path = dir.join(name);
    std::fs::write(&path, plan.to_string()).unwrap();
    path
}

#[test]
fn failure_6_plans_are_read_through_the_bounded_reader() {
    let dir = scratch("hostile-plans-read");
    // A FIFO nobody writes to would block a plain read forever.
    let fifo = dir.join("fifo.json");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    refused_within(10.0, &["reproduce", "--plan", s(&fifo), "--list-units"], &["fifo.json", "a FIFO"]);
    // /dev/zero behind a .json name grows without end.
    let zero = dir.join("zero.json");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    refused_within(10.0, &["reproduce", "--plan", s(&zero), "--list-units"], &["zero.json", "a character device"]);
    // A sparse file over the 64 MiB JSON limit (nothing of it is read).
    let big = dir.join("big.json");
    std::fs::File::create(&big).unwrap().set_len((64 << 20) + 1).unwrap();
    refused_within(
        10.0,
        &["reproduce", "--plan", s(&big), "--list-units"],
        &["big.json", "above the limit of 67108864"],
    );
    assert_eq!(entries(&dir), ["big.json", "fifo.json", "zero.json"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failure_7_every_plan_field_is_bounded_at_load_and_fixed_fields_are_refused() {
    let dir = scratch("hostile-plans-fields");
    let cases: Vec<(&str, serde_json::Value, Vec<&str>)> = vec![
        ("t2", serde_json::json!({"t2_seeds": 1_000_000_000_000_000_000u64}), vec!["plan.t2_seeds", "seeds"]),
        ("cases", serde_json::json!({"kernel_cases": u32::MAX}), vec!["plan.kernel_cases", "1..=100000"]),
        (
            "eval",
            serde_json::json!({"lab": {"eval_per_group": 1_000_000_000_000_000u64, "knockout_per_group": 24,
                "knockout_reference": 8, "gate_samples": 64, "seed": 0}}),
            vec!["plan.lab.eval_per_group", "100000"],
        ),
        (
            "reference",
            serde_json::json!({"lab": {"eval_per_group": 24, "knockout_per_group": 24,
                "knockout_reference": 1_000_000_000_000_000u64, "gate_samples": 64, "seed": 0}}),
            vec!["plan.lab.knockout_reference", "1024"],
        ),
        (
            "seed",
            serde_json::json!({"arms": [{"name": "a", "preset": "w8s4", "overrides": {"train.seed": 5}}]}),
            vec!["plan.arms.overrides", "'train.seed' may not be overridden"],
        ),
        (
            "seed-nested",
            serde_json::json!({"arms": [{"name": "a", "preset": "w8s4", "overrides": {"train": {"seed": 5}}}]}),
            vec!["'train.seed' may not be overridden"],
        ),
        (
            "preset",
            serde_json::json!({"arms": [{"name": "a", "overrides": {"model.preset": "w8s8"}}]}),
            vec!["'model.preset' may not be overridden"],
        ),
        (
            "unknown",
            serde_json::json!({"arms": [{"name": "a", "overrides": {"model.no_such_field": 1}}]}),
            vec!["plan.arms.overrides", "no field 'model.no_such_field'"],
        ),
    ];
    for (label, extra, needles) in cases {
        let plan = plan_with(&dir, &format!("{label}.json"), extra);
        let out = dir.join(format!("out-{label}"));
        refused_within(10.0, &["reproduce", "--plan", s(&plan), "--list-units"], &needles);
        // The run itself is refused at load, before any unit trains or anything is written.
        refused_within(10.0, &["reproduce", "--plan", s(&plan), "--out", s(&out)], &needles);
        assert!(!out.exists(), "{label}: the refused run wrote {}", out.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failure_8_and_9_emit_slurm_refuses_the_output_a_used_directory_and_bad_values() {
    let dir = scratch("hostile-plans-slurm");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("plan.json"), b"another plan's").unwrap();
    // The output itself: its plan.json is the run's.
    refused_within(10.0, &["reproduce", "--quick", "--out", s(&out), "--emit-slurm", s(&out)], &["--emit-slurm"]);
    assert_eq!(std::fs::read(out.join("plan.json")).unwrap(), b"another plan's");
    // A non-empty directory (another emit's scripts).
    let used = dir.join("used");
    std::fs::create_dir_all(&used).unwrap();
    std::fs::write(used.join("array.sbatch"), b"another job").unwrap();
    refused_within(
        10.0,
        &["reproduce", "--quick", "--out", s(&out), "--emit-slurm", s(&used)],
        &["--emit-slurm", "not empty"],
    );
    assert_eq!(std::fs::read(used.join("array.sbatch")).unwrap(), b"another job");
    // --slurm-mem: a newline would end the #SBATCH header; 0 asks for a whole node.
    let job = dir.join("job");
    for mem in ["2G\ntouch X", "0", "0G", "-1G", "2GB", "", "1.5G", "G"] {
        let flag = format!("--slurm-mem={mem}");
        refused_within(
            10.0,
            &["reproduce", "--quick", "--out", s(&out), "--emit-slurm", s(&job), &flag],
            &["--slurm-mem", "whole number above 0"],
        );
        assert!(!job.exists(), "{mem:?}: the refused emit wrote {}", job.display());
    }
    assert_eq!(entries(&dir), ["out", "used"]);
    // A % in the emit path is escaped for #SBATCH --output (Slurm would expand %x, %j).
    let pct = dir.join("job%x%j");
    let (code, o, e) =
        phasekv(&["reproduce", "--quick", "--out", s(&out), "--emit-slurm", s(&pct), "--slurm-mem", "4G"]);
    assert_eq!(code, 0, "{o}{e}");
    let array = std::fs::read_to_string(pct.join("array.sbatch")).unwrap();
    let report = std::fs::read_to_string(pct.join("report.sbatch")).unwrap();
    assert!(array.contains("#SBATCH --output=") && array.contains("job%%x%%j/logs/array-%A_%a.out"), "{array}");
    assert!(report.contains("job%%x%%j/logs/report-%j.out"), "{report}");
    assert!(array.contains("#SBATCH --mem=4G\n#SBATCH --time="), "{array}");
    for line in ["#SBATCH --requeue", "#SBATCH --signal=TERM@120"] {
        assert!(array.contains(line), "{line} lost:\n{array}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failure_10_plan_expansion_is_linear_in_the_units() {
    // 100 000 units (the most a plan may have): over 60 s to list before; now a few seconds
    // (measured 2.7 s in the test profile on the loaded 2-core box). Bound generously.
    let dir = scratch("hostile-plans-linear");
    let axis = |name: &str, n: usize| serde_json::json!({"name": name, "values": (0..n).collect::<Vec<_>>()});
    let plan = plan_with(
        &dir,
        "big.json",
        serde_json::json!({"presets": [], "seeds": [0], "sweep": {"axes": [axis("a", 250), axis("b", 400)],
            "name": "a{a}-b{b}", "preset": "w4s2"}}),
    );
    let start = Instant::now();
    let (code, out, err) = phasekv(&["reproduce", "--plan", s(&plan), "--list-units"]);
    let took = start.elapsed();
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 100_000);
    assert!(out.lines().any(|l| l.starts_with("model:a249-b399-seed0 ")), "the last unit is listed");
    assert!(took < Duration::from_secs(30), "listing 100 000 units took {took:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
