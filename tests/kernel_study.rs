//! `phasekv kernel study` end to end on a tiny model (issue 39): a spec with a knob no preset
//! has is trained and evaluated under both protocols against a baseline, the one-page report
//! answers in its first lines, a second run resumes everything, and bad studies are one line.
//! (The tiny models stay below the training-success threshold, so the report must say that it
//! cannot judge them; the rule itself is tested on data in `report::study`'s unit tests.)

use crate::common::configs::tiny_config;
use crate::common::plans::{phasekv, scratch};
use phasekv::kernel::{KernelSpec, ParamGroups};

#[test]
fn a_study_of_a_custom_spec_trains_evaluates_reports_and_resumes() {
    let dir = scratch("kernel-study");
    let mut spec = KernelSpec::preset("w4s2").unwrap();
    spec.name = "w4s2-paired".into();
    spec.groups = ParamGroups::Map(vec![0, 0, 1, 1]);
    let spec_path = dir.join("paired.json");
    std::fs::write(&spec_path, serde_json::to_string_pretty(&spec).unwrap()).unwrap();
    let mut cfg = tiny_config("full");
    cfg.train.steps = 6;
    cfg.task.residue_modulus = 4;
    let cfg_path = dir.join("tiny.json");
    std::fs::write(&cfg_path, serde_json::to_string(&cfg).unwrap()).unwrap();
    let out = dir.join("study");
    let args = [
        "kernel",
        "study",
        "--spec",
        spec_path.to_str().unwrap(),
        "--baseline",
        "w4s4",
        "--seeds",
        "2",
        "--config",
        cfg_path.to_str().unwrap(),
        "--samples",
        "2",
        "--out",
        out.to_str().unwrap(),
    ];
    let (code, stdout, err) = phasekv(&args);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(err.contains("w4s2-paired-seed0 (1 of 4): training 6 steps"), "progress lines: {err}");
    let page = std::fs::read_to_string(out.join("study.md")).unwrap();
    let first: Vec<&str> = page.lines().take(7).collect();
    assert!(first[0].contains("w4s2-paired against w4s4"), "{page}");
    assert!(first.iter().any(|l| l.contains("**w4s2-paired**: not judged: no seed reached 90 %")), "{page}");
    assert!(first.iter().any(|l| l.starts_with("- Accuracy cost") && l.contains(" pp [")), "{page}");
    assert!(page.contains("study-prefix.svg") && out.join("study-prefix.svg").is_file(), "one figure");
    for seed in 0..2 {
        let run = out.join(format!("runs/w4s2-paired-seed{seed}"));
        let config = phasekv::model::RunConfig::from_file(&run.join("config.json")).unwrap();
        assert_eq!(config.model.spec.as_ref(), Some(&spec), "the run keeps the spec");
        for p in ["prefix", "in-sequence"] {
            assert!(run.join(format!("eval-{p}.json")).is_file(), "{p}");
        }
        assert!(out.join(format!("runs/w4s4-seed{seed}/eval-prefix.json")).is_file());
        // Every outcome line carries the model's answer, what the flip rate compares
        // (theory/flip-rate.md): token ids, one per answer token.
        let lines = std::fs::read_to_string(run.join("eval-prefix-outcomes.jsonl")).unwrap();
        for line in lines.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let p = v["predicted"].as_str().unwrap_or_else(|| panic!("no answer: {line}"));
            assert!(!p.is_empty() && p.split(' ').all(|t| t.parse::<u32>().is_ok()), "{line}");
        }
    }
    let result = std::fs::read(out.join("study.json")).unwrap();
    let (code, _, err) = phasekv(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.matches("trained before, reused").count(), 4, "{err}");
    assert!(!err.contains("training 6 steps"), "nothing retrained: {err}");
    assert_eq!(std::fs::read(out.join("study.json")).unwrap(), result, "the same study");

    // Another study in the same folder, the kernel against itself, no seeds: one line each.
    let mut other = args.to_vec();
    other[11] = "3";
    let (code, _, err) = phasekv(&other);
    assert_eq!((code, err.trim().lines().count()), (2, 1), "{err}");
    assert!(err.contains("--out"), "{err}");
    let mut itself = args.to_vec();
    itself[5] = "w4s2-paired";
    let (code, _, err) = phasekv(&itself);
    assert_eq!((code, err.trim().lines().count()), (2, 1), "{err}");
    let mut none = args.to_vec();
    none[7] = "0";
    let (code, _, err) = phasekv(&none);
    assert_eq!((code, err.trim().lines().count()), (2, 1), "{err}");
    assert!(err.contains("--seeds"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
