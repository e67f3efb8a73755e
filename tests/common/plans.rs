//! Tiny plans and helpers shared by the reproduce and Slurm tests: a W x S x seed sweep of tiny
//! models (seconds each), the CLI, and the comparison of two reports.

use phasekv::lab::LabSettings;
use phasekv::reproduce::{Axis, Plan, Scale, Sweep};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A W x S x seed sweep of tiny models: w in {4}, s in {2, 4} (s <= w), seeds {0, 1}; four
/// models of `steps` steps, no theory or kernel units.
pub fn tiny_sweep(steps: usize) -> Plan {
    let mut run = super::configs::tiny_config("full");
    run.task.residue_modulus = 4;
    run.train.steps = steps;
    run.train.batch_size = 2;
    run.train.warmup_steps = 2;
    run.train.eval_every = steps;
    run.train.eval_samples = 4;
    run.train.checkpoint_every = steps;
    let axis = |name: &str, v: &[u64]| Axis { name: name.into(), values: v.iter().map(|&x| x.into()).collect() };
    Plan {
        scale: Scale::Custom,
        presets: vec![],
        arms: vec![],
        sweep: Some(Sweep {
            axes: vec![axis("w", &[4]), axis("s", &[2, 4])],
            require: vec!["s <= w".into()],
            name: None,
            preset: "w{w}s{s}".into(),
            overrides: Default::default(),
        }),
        seeds: vec![0, 1],
        run,
        lab: LabSettings { eval_per_group: 2, knockout_per_group: 1, knockout_reference: 2, gate_samples: 2, seed: 0 },
        theory: false,
        kernels: false,
        t2_seeds: 1,
        kernel_cases: 1,
        minutes: Default::default(),
        rules: Default::default(),
        depth_floor: None,
        cut: None,
    }
}

/// A fresh scratch directory.
pub fn scratch(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("phasekv-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `plan` as a plan file.
pub fn write_plan(path: &Path, plan: &Plan) {
    std::fs::write(path, serde_json::to_string_pretty(plan).unwrap()).unwrap();
}

/// The phasekv CLI with one thread: (status, stdout, stderr).
pub fn phasekv(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_phasekv"))
        .args(args)
        .env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("SLURM_ARRAY_TASK_COUNT")
        .env_remove("SLURM_ARRAY_TASK_MIN")
        .output()
        .expect("run phasekv");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Runs the CLI and asserts success.
pub fn phasekv_ok(args: &[&str]) -> String {
    let (code, out, err) = phasekv(args);
    assert_eq!(code, 0, "phasekv {args:?} failed:\n{out}\n{err}");
    out
}

/// `ledger.json` and every figure data file (`figures/*.csv`, `figures/*.json`) of a report,
/// by relative path.
pub fn report_data(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![("ledger.json".to_string(), std::fs::read(dir.join("ledger.json")).unwrap())];
    let mut figs: Vec<PathBuf> = std::fs::read_dir(dir.join("figures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "csv" || x == "json"))
        .collect();
    figs.sort();
    for f in figs {
        let rel = format!("figures/{}", f.file_name().unwrap().to_string_lossy());
        files.push((rel, std::fs::read(&f).unwrap()));
    }
    files
}

/// Asserts that two reports have byte-identical ledgers and figure data.
pub fn assert_same_report(a: &Path, b: &Path) {
    let (x, y) = (report_data(a), report_data(b));
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&x), names(&y), "{} and {} have different files", a.display(), b.display());
    for ((n, p), (_, q)) in x.iter().zip(&y) {
        assert!(p == q, "{n} differs between {} and {}", a.display(), b.display());
    }
}
