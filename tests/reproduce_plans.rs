//! Plan files (issue 16): the built-in plans are files that parse to the committed plan, a sweep
//! expands into units with stable ids, bad plans and options are one-line errors (exit 2), and
//! `--emit-slurm` writes an array job with one thread per task, a time request, requeue on
//! SIGTERM and a dependent report job.

use crate::common;

use common::plans::{phasekv, phasekv_ok, scratch, tiny_sweep, write_plan};
use phasekv::reproduce::{self, Plan, Scale, Unit};
use std::path::Path;

fn ids(plan: &Plan) -> Vec<String> {
    plan.units().unwrap().iter().map(Unit::name).collect()
}

fn one_line_error(args: &[&str], needles: &[&str]) {
    let (code, out, err) = phasekv(args);
    assert_eq!(code, 2, "{args:?}: {out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: not one line:\n{err}");
    for n in needles {
        assert!(err.starts_with("error: ") && err.contains(n), "{args:?}: {err} lacks {n}");
    }
}

#[test]
fn the_built_in_plans_are_files_and_print_plan_writes_one() {
    let full = Plan::builtin(Scale::Full).unwrap();
    let committed: Plan =
        phasekv::lab::read_json(&Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/plan.json")).unwrap();
    assert_eq!(full, committed, "plans/full.json is the plan of the committed report");
    let committed_text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/plan.json")).unwrap();
    assert_eq!(phasekv_ok(&["reproduce", "--print-plan"]), committed_text, "--print-plan writes the committed file");
    // The second pre-registration's run (theory/phase-lab.md §8.10): 16 arms x 3 seeds, then the
    // theory and kernel units, judged by the v2 rules; v1's plan is kept as plans/v1.json.
    assert_eq!(full.rules, phasekv::analysis::verdict::Rules::V2);
    let arms = [
        "full",
        "w8s4",
        "w8s6",
        "w8s8",
        "w4s4",
        "w12s12",
        "w8s4-norope",
        "w8s4-uniform",
        "w8s4-scalar",
        "w8s4-tied",
        "dsv4-csa",
        "w8s4-kv1",
        "w8s4-norope-kv1",
        "w8s8-stagger-heads",
        "w8s8-stagger-layers",
        "w8s4-kv1-stagger-layers",
    ];
    let mut want: Vec<String> = arms
        .iter()
        .flat_map(|a| (0..3).map(move |k| format!("model:{a}-seed{k}")))
        .chain(["theory".into(), "kernels".into()])
        .collect();
    let mut got = ids(&full);
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(full.models().unwrap().len(), 48);
    let v1 = Plan::from_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("plans/v1.json")).unwrap();
    assert_eq!((v1.rules, v1.models().unwrap().len()), (phasekv::analysis::verdict::Rules::V1, 24), "v1's plan, kept");
    // v2's task is v1's with the records packed (§8.1). The quick plan is a miniature of the v3
    // run (issue 45, item 3): its rules, its task (§9.3's T4), the curriculum over the same
    // third of its steps, two arms.
    assert_eq!(full.run.task, phasekv::task::TaskConfig { max_gap: 0, ..v1.run.task.clone() });
    let quick = Plan::builtin(Scale::Quick).unwrap();
    assert_eq!(quick.run.train.steps, 1500);
    assert_eq!(quick.run.train.engine, phasekv::model::Engine::Fast);
    assert_eq!(quick.run.task.query_placement, phasekv::task::QueryPlacement::AfterRecords);
    assert_eq!(ids(&quick).len(), 4);
    assert_eq!(quick.rules, phasekv::analysis::verdict::Rules::V3);
    let v3 = Plan::from_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("plans/v3.json")).unwrap();
    assert_eq!(quick.run.task, v3.run.task);
    assert_eq!(3 * quick.run.train.curriculum_steps, quick.run.train.steps);
    assert_eq!(3 * v3.run.train.curriculum_steps, v3.run.train.steps);
    // w8s4, not the cycling arm: w8s8 needs 3 000-6 000 steps (the v2 run's curves), beyond
    // quick's 3 min, so quick's ledger reads the cycling claims as not run.
    assert_eq!(quick.presets, ["full", "w8s4"]);
    assert!(!quick.presets.iter().any(|p| p == phasekv::reproduce::CYCLE_ARM));
    assert_eq!(full.run.train.engine, phasekv::model::Engine::Fast);
    let arms = full.arms().unwrap();
    assert!(arms.iter().any(|(name, cfg)| name == "w8s4-norope-kv1" && cfg.model.n_kv_head == 1));
    assert!(arms.iter().any(|(name, cfg)| name == "w8s4-kv1" && cfg.model.n_kv_head == 1));
    // --print-plan is a plan file: it reads back to the same plan.
    let dir = scratch("plans-print");
    for (flag, plan) in [("--quick", &quick), ("--print-plan", &full)] {
        let args: Vec<&str> = if flag == "--quick" {
            vec!["reproduce", "--quick", "--print-plan"]
        } else {
            vec!["reproduce", "--print-plan"]
        };
        let text = phasekv_ok(&args);
        let f = dir.join("printed.json");
        std::fs::write(&f, &text).unwrap();
        assert_eq!(&Plan::from_file(&f).unwrap(), plan);
        let again = phasekv_ok(&["reproduce", "--plan", f.to_str().unwrap(), "--print-plan"]);
        assert_eq!(again, text);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_sweep_expands_into_arms_with_stable_ids_and_overrides() {
    let text = r#"{
      "presets": ["full"],
      "arms": [{"name": "w8s4-1kv", "preset": "w8s4", "overrides": {"model.n_kv_head": 1}}],
      "sweep": {
        "axes": [{"name": "w", "values": [4, 8]}, {"name": "s", "values": [2, 4, 8]}, {"name": "kv", "values": [1, 2]}],
        "require": ["s <= w"],
        "preset": "w{w}s{s}",
        "overrides": {"model": {"n_kv_head": "{kv}"}, "train.lr": 0.002}
      },
      "seeds": [0, 2],
      "theory": false
    }"#;
    let plan = Plan::from_json(text, "test").unwrap();
    let models = plan.models().unwrap();
    // 1 preset + 1 arm + (w4: s2, s4; w8: s2, s4, s8) x 2 kv = 12 arms, x 2 seeds.
    assert_eq!(models.len(), 24);
    let names = ids(&plan);
    assert_eq!(names.last().unwrap(), "kernels");
    assert!(!names.contains(&"theory".to_string()));
    assert_eq!(&names[..4], ["model:full-seed0", "model:full-seed2", "model:w8s4-1kv-seed0", "model:w8s4-1kv-seed2"]);
    assert!(names.contains(&"model:w4-s4-kv2-seed2".to_string()) && !names.iter().any(|n| n.contains("w4-s8")));
    let m = models.iter().find(|m| m.key() == "w8-s8-kv1-seed2").unwrap();
    assert_eq!((m.preset(), m.config.model.n_kv_head, m.config.train.seed, m.config.train.lr), ("w8s8", 1, 2, 0.002));
    assert_eq!(m.dir(), Path::new("runs/w8-s8-kv1-seed2"));
    let arm = models.iter().find(|m| m.key() == "w8s4-1kv-seed0").unwrap();
    assert_eq!((arm.preset(), arm.config.model.n_kv_head, arm.config.train.lr), ("w8s4", 1, plan.run.train.lr));

    // Stable ids: another axis value and another seed leave every id there was.
    let mut wider = plan.clone();
    wider.sweep.as_mut().unwrap().axes[0].values.push(12.into());
    wider.seeds.push(5);
    let more = ids(&wider);
    assert!(names.iter().all(|n| more.contains(n)));
    // (preset + arm + (w4: 2, w8: 3, w12: 3 strides) x 2 kv) arms x 3 seeds, and kernels.
    assert_eq!(more.len(), (2 + (2 + 3 + 3) * 2) * 3 + 1);

    // Shards are disjoint and cover the plan; one unit runs alone.
    let units = plan.units().unwrap();
    let mut covered: Vec<String> =
        (0..5).flat_map(|i| reproduce::shard(&units, i, 5).unwrap()).map(|u| u.name()).collect();
    covered.sort();
    let mut all = names.clone();
    all.sort();
    assert_eq!(covered, all);
    assert_eq!(plan.select(&["model:w4-s2-kv1-seed0".into()]).unwrap().len(), 1);
    let e = reproduce::shard(&units, 0, units.len() + 1).unwrap_err().to_string();
    assert!(e.contains("--shard") && e.contains(&format!("1..={}", units.len())), "{e}");
}

/// An arm may train its own seeds (`theory/phase-lab.md` §9.5: 8 for some arms, 4 for the
/// others); the other arms keep the plan's, and the units are arm-major in seed order.
#[test]
fn an_arm_with_its_own_seeds_expands_to_those_seeds_only() {
    let plan: Plan = serde_json::from_str(
        r#"{"presets": ["full"], "arms": [{"name": "w8s8", "seeds": [0, 1, 2, 3, 4, 5, 6, 7]}, {"name": "w8s4"}],
            "seeds": [0, 1, 2, 3], "theory": false, "kernels": false}"#,
    )
    .unwrap();
    plan.validate().unwrap();
    let models = plan.models().unwrap();
    let by_arm = |arm: &str| models.iter().filter(|m| m.arm == arm).map(|m| m.seed).collect::<Vec<_>>();
    assert_eq!(by_arm("full"), [0, 1, 2, 3]);
    assert_eq!(by_arm("w8s8"), (0..8).collect::<Vec<u64>>());
    assert_eq!(by_arm("w8s4"), [0, 1, 2, 3]);
    assert!(models.iter().all(|m| m.config.train.seed == m.seed));
    assert_eq!(models.len(), 16);
    // A plan without per-arm seeds reads as before (the field is left out when written).
    let text = serde_json::to_string(&plan).unwrap();
    assert_eq!(text.matches("\"seeds\"").count(), 2, "{text}");
}

#[test]
fn bad_plans_and_options_are_one_line_errors() {
    let dir = scratch("plans-bad");
    let cases: [(&str, &[&str]); 11] = [
        (r#"{"presets": ["w8s9"]}"#, &["plan.presets", "stride"]),
        (
            r#"{"presets": ["full"], "arms": [{"name": "a", "preset": "w8s4", "overrides": {"model.n_kv_heads": 1}}]}"#,
            &["plan.arms.overrides", "model.n_kv_heads"],
        ),
        (r#"{"presets": ["full", "full"]}"#, &["appears twice"]),
        (r#"{"arms": [{"name": "../x"}]}"#, &["plan.arms", "../x"]),
        (
            r#"{"sweep": {"axes": [{"name": "w", "values": [4]}], "require": ["w <== 3"], "preset": "w{w}s4"}}"#,
            &["plan.sweep.require", "<=="],
        ),
        (
            r#"{"sweep": {"axes": [{"name": "w", "values": [4]}], "require": ["w < 3"], "preset": "w{w}s4"}}"#,
            &["no combination"],
        ),
        (r#"{"presets": ["full"], "t2_seeds": 0}"#, &["plan.t2_seeds", "0"]),
        (r#"{"presets": ["full"], "seeds": [1, 1]}"#, &["plan.seeds", "twice"]),
        (r#"{"arms": [{"name": "w8s4", "seeds": [3, 0, 3]}]}"#, &["plan.arms.w8s4.seeds", "seed 3", "twice"]),
        (r#"{"arms": [{"name": "w8s4", "seeds": []}]}"#, &["plan.arms.w8s4.seeds", "empty"]),
        (r#"{"theory": false, "kernels": false}"#, &["no units"]),
    ];
    let f = dir.join("bad.json");
    for (text, needles) in cases {
        std::fs::write(&f, text).unwrap();
        one_line_error(&["reproduce", "--plan", f.to_str().unwrap(), "--print-plan"], needles);
    }
    std::fs::write(&f, r#"{"presets": ["full"], "typo": 1}"#).unwrap();
    one_line_error(&["reproduce", "--plan", f.to_str().unwrap()], &["unknown field `typo`"]);
    let toml = dir.join("plan.toml");
    std::fs::write(&toml, "presets = ['full']").unwrap();
    one_line_error(&["reproduce", "--plan", toml.to_str().unwrap()], &["--plan", "TOML"]);

    let out = dir.join("out");
    let o = out.to_str().unwrap();
    one_line_error(&["reproduce", "--quick", "--out", o, "--shard", "99/100"], &["--shard", "99/100", "1..=4"]);
    one_line_error(&["reproduce", "--quick", "--out", o, "--shard", "4/4x"], &["--shard"]);
    one_line_error(&["reproduce", "--quick", "--out", o, "--shard", "slurm"], &["SLURM_ARRAY_TASK_ID"]);
    one_line_error(
        &["reproduce", "--quick", "--out", o, "--unit", "model:w8s4"],
        &["--unit", "model:w8s4", "--list-units"],
    );
    let job = dir.join("job");
    one_line_error(
        &["reproduce", "--quick", "--out", o, "--emit-slurm", job.to_str().unwrap(), "--slurm-tasks", "9"],
        &["--slurm-tasks", "1..=4", "9"],
    );
    assert!(!out.exists(), "nothing is written on bad input");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn slurm_array_variables_give_the_shard() {
    assert_eq!(reproduce::slurm_shard(Some("3"), Some("0"), Some("8")).unwrap(), (3, 8));
    assert_eq!(reproduce::slurm_shard(Some("5"), Some("1"), Some("8")).unwrap(), (4, 8));
    assert_eq!(reproduce::slurm_shard(Some("2"), None, Some("3")).unwrap(), (2, 3));
    for (id, min, count, needle) in [
        (None, None, Some("3"), "SLURM_ARRAY_TASK_ID"),
        (Some("1"), None, None, "SLURM_ARRAY_TASK_COUNT"),
        (Some("3"), Some("0"), Some("3"), "outside"),
        (Some("x"), None, Some("3"), "number"),
    ] {
        let e = reproduce::slurm_shard(id, min, count).unwrap_err().to_string();
        assert!(e.contains("--shard") && e.contains(needle), "{e}");
    }
}

#[test]
fn emit_slurm_writes_an_array_job_and_a_dependent_report() {
    let dir = scratch("plans-emit");
    let plan_file = dir.join("sweep.json");
    let plan = tiny_sweep(6);
    write_plan(&plan_file, &plan);
    let job = dir.join("job");
    let out = dir.join("out");
    let printed = phasekv_ok(&[
        "reproduce",
        "--plan",
        plan_file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--emit-slurm",
        job.to_str().unwrap(),
        "--slurm-tasks",
        "3",
    ]);
    assert!(printed.contains("4 units in 3 array tasks"), "{printed}");
    let array = std::fs::read_to_string(job.join("array.sbatch")).unwrap();
    for line in [
        "#SBATCH --array=0-2",
        "#SBATCH --cpus-per-task=1",
        "#SBATCH --requeue",
        "#SBATCH --signal=TERM@120",
        "#SBATCH --mem=2G",
        "RAYON_NUM_THREADS=1",
        "--shard slurm --jobs 1",
        "scontrol requeue",
    ] {
        assert!(array.contains(line), "array.sbatch lacks {line}:\n{array}");
    }
    // Time: the slowest task holds two units of 9 estimated minutes at the plan's own size:
    // 1.5 x 18 min + 2 min of SIGTERM lead + 5 min = 34 min.
    assert!(array.contains("#SBATCH --time=0:34:00"), "{array}");
    assert!(array.contains(&format!("--plan '{}'", job.join("plan.json").display())), "{array}");
    assert_eq!(Plan::from_file(&job.join("plan.json")).unwrap(), plan);
    let report = std::fs::read_to_string(job.join("report.sbatch")).unwrap();
    assert!(report.contains(&format!("report --from '{0}' --out '{0}'", out.display())), "{report}");
    let submit = std::fs::read_to_string(job.join("submit.sh")).unwrap();
    assert!(submit.contains("--dependency=afterok:"), "{submit}");
    assert!(!out.exists(), "emitting writes no results");
    std::fs::remove_dir_all(&dir).unwrap();
}
