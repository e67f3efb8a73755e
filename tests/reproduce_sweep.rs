//! A plan file describing a W x S x seed sweep runs the same in one process and as `--shard`
//! parts sharing one output (issue 16): byte-identical `ledger.json` and figure data. Any unit
//! runs alone (`--unit`), and a rerun reuses what is done.

use crate::common;

use common::plans::{assert_same_report, phasekv, phasekv_ok, scratch, tiny_sweep, write_plan};
use std::process::{Command, Stdio};

#[test]
fn a_sweep_plan_gives_the_same_report_in_one_process_and_as_concurrent_shards() {
    let dir = scratch("sweep");
    let plan_file = dir.join("sweep.json");
    let plan = tiny_sweep(6);
    write_plan(&plan_file, &plan);
    let pf = plan_file.to_str().unwrap();

    // The unit ids are the sweep's names with seeds, stable and in plan order.
    let list = phasekv_ok(&["reproduce", "--plan", pf, "--list-units"]);
    let ids: Vec<&str> = list.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(ids, ["model:w4-s2-seed0", "model:w4-s2-seed1", "model:w4-s4-seed0", "model:w4-s4-seed1"]);

    // One process.
    let one = dir.join("one");
    let out = phasekv_ok(&["reproduce", "--plan", pf, "--out", one.to_str().unwrap()]);
    assert!(out.contains("report:"), "{out}");
    for id in &ids {
        let run = one.join("runs").join(id.trim_start_matches("model:"));
        assert!(run.join("unit.json").exists(), "{id} did not finish");
    }
    // The timing file says where the time went (issue 40): seconds per stage over the 4 models.
    let timing: Vec<_> = std::fs::read_dir(one.join("timing")).unwrap().map(|e| e.unwrap().path()).collect();
    let [timing] = timing.as_slice() else { panic!("one timing file, got {timing:?}") };
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(timing).unwrap()).unwrap();
    assert_eq!(t["model_units_run"], 4, "{t}");
    let stages: Vec<(&str, f64)> = t["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["stage"].as_str().unwrap(), s["seconds"].as_f64().unwrap()))
        .collect();
    let names: Vec<&str> = stages.iter().map(|s| s.0).collect();
    assert!(names.starts_with(&["train"]) && names.contains(&"eval prefix") && names.contains(&"gates"), "{t}");
    // Stages are summed over units, and up to `jobs` units run at once.
    let sum: f64 = stages.iter().map(|s| s.1).sum();
    let jobs = t["jobs"].as_f64().unwrap();
    assert!(jobs >= 1.0, "{t}");
    assert!(
        sum > 0.0 && sum <= jobs * t["wall_seconds"].as_f64().unwrap(),
        "stages {sum} s within jobs x the wall time: {t}"
    );

    // A Slurm job for an output that holds results requests their measured time (seconds a
    // unit here: 2 min of SIGTERM lead + 5 min + rounding = 8 min), not the estimate (9 min a
    // model: 1.5 x 9 + 2 + 5 = 21 min).
    let job = dir.join("job");
    let (j, o) = (job.to_str().unwrap(), one.to_str().unwrap());
    phasekv_ok(&["reproduce", "--plan", pf, "--out", &format!("{o}-empty"), "--emit-slurm", j]);
    let script = std::fs::read_to_string(job.join("array.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --time=0:21:00") && script.contains("#SBATCH --array=0-3"), "{script}");
    // A second job goes to a directory of its own (a used one is refused, issue 28).
    let job2 = dir.join("job2");
    phasekv_ok(&["reproduce", "--plan", pf, "--out", o, "--emit-slurm", job2.to_str().unwrap()]);
    let script = std::fs::read_to_string(job2.join("array.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --time=0:08:00"), "{script}");

    // Three shards at once into one output, then the report.
    let shared = dir.join("shared");
    let children: Vec<_> = (0..3)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_phasekv"))
                .args(["reproduce", "--plan", pf, "--out", shared.to_str().unwrap(), "--shard", &format!("{i}/3")])
                .env("RAYON_NUM_THREADS", "1")
                .env("CANDLE_NUM_THREADS", "1")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("phasekv report --from"), "a shard points at the merge");
    }
    assert!(!shared.join("ledger.json").exists(), "a shard must not write a partial report");
    phasekv_ok(&["report", "--from", shared.to_str().unwrap(), "--out", shared.to_str().unwrap()]);
    assert_same_report(&one, &shared);

    // Runs that share a preset are told apart in the figures by their directory.
    let csv = std::fs::read_to_string(one.join("figures/learning-curves.csv")).unwrap();
    for key in ["w4-s2-seed0", "w4-s2-seed1", "w4-s4-seed0", "w4-s4-seed1"] {
        assert!(csv.contains(&format!("\n{key},")), "{key} missing from the learning curves:\n{csv}");
        assert!(one.join(format!("figures/knockout-{key}-in-sequence.json")).exists());
    }

    // One unit alone, into a third output: the same files as that unit's in the full run.
    let alone = dir.join("alone");
    phasekv_ok(&["reproduce", "--plan", pf, "--out", alone.to_str().unwrap(), "--unit", "model:w4-s4-seed1"]);
    let runs: Vec<_> = std::fs::read_dir(alone.join("runs")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(runs, ["w4-s4-seed1"]);
    for f in
        ["eval-prefix.json", "knockout-in-sequence.json", "knockout-prefix.json", "gates.json", "model.safetensors"]
    {
        let a = std::fs::read(alone.join("runs/w4-s4-seed1").join(f)).unwrap();
        let b = std::fs::read(one.join("runs/w4-s4-seed1").join(f)).unwrap();
        assert!(a == b, "{f} of a unit run alone differs from the full run's");
    }

    // A rerun reuses every unit; another plan in the same output is refused.
    let (code, _, err) = phasekv(&["reproduce", "--plan", pf, "--out", one.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.matches("done before, reused").count(), 4, "{err}");
    let mut other = plan.clone();
    other.seeds = vec![0, 1, 2];
    write_plan(&plan_file, &other);
    let (code, _, err) = phasekv(&["reproduce", "--plan", pf, "--out", one.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("different plan") && err.trim().lines().count() == 1, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
