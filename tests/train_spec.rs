//! Training on any kernel spec (issue 39): `phasekv train --spec FILE` and plan arms that name a
//! spec file train every spec `kernel check --spec` accepts and an engine implements; the run
//! directory keeps the spec and its results are named after it; any other spec is one line
//! naming the field (exit 2).

use crate::common::configs::tiny_config;
use crate::common::plans::{phasekv, scratch};
use phasekv::kernel::{KernelSpec, ParamGroups};

/// `w4s2` with its offsets paired into two parameter groups (`groups: [0, 0, 1, 1]`): a knob no
/// listed preset has (they are per offset or shared).
fn paired_spec() -> KernelSpec {
    let mut spec = KernelSpec::preset("w4s2").unwrap();
    spec.name = "w4s2-paired".into();
    spec.groups = ParamGroups::Map(vec![0, 0, 1, 1]);
    spec
}

fn write(path: &std::path::Path, value: &impl serde::Serialize) -> String {
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

fn one_line_refusal(args: &[&str], field: &str) {
    let (code, out, err) = phasekv(args);
    assert_eq!(code, 2, "{args:?}: {out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: not one line:\n{err}");
    assert!(err.contains(field), "{args:?}: does not name {field}: {err}");
}

/// A spec with a knob no preset has is checked by `kernel check --spec`, trained, and evaluated
/// under both protocols end to end; its run keeps the spec in `config.json` and its results
/// carry its name. `kernel list --json NAME` given back as a spec is that preset's run, with the
/// preset's config and identity.
#[test]
fn a_spec_no_preset_has_is_trained_and_evaluated_end_to_end() {
    let dir = scratch("train-spec");
    let spec = write(&dir.join("paired.json"), &paired_spec());
    let (code, out, err) = phasekv(&["kernel", "check", "--spec", &spec, "--cases", "2"]);
    assert_eq!(code, 0, "kernel check must accept the spec first: {out}{err}");
    let mut cfg = tiny_config("full");
    cfg.train.steps = 6;
    // M = 4: the tiny task's 13 reachable target positions hold the 3 M that balancing needs.
    cfg.task.residue_modulus = 4;
    let cfg = write(&dir.join("tiny.json"), &cfg);
    let run = dir.join("run");
    let run_s = run.to_str().unwrap();
    let (code, out, err) = phasekv(&["train", "--config", &cfg, "--spec", &spec, "--out", run_s, "--quiet"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("w4s2-paired: exact-match accuracy"), "{out}");
    let config = phasekv::model::RunConfig::from_file(&run.join("config.json")).unwrap();
    assert_eq!(config.model.preset, "w4s2-paired");
    assert_eq!(config.model.spec, Some(paired_spec()), "the run directory keeps the spec");
    assert_eq!(config.model.kernel().unwrap().groups, ParamGroups::Map(vec![0, 0, 1, 1]));
    for protocol in ["prefix", "in-sequence"] {
        let (code, out, err) = phasekv(&["eval", run_s, "--protocol", protocol, "--samples", "2"]);
        assert_eq!(code, 0, "{protocol}: {out}{err}");
        let e: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join(format!("eval-{protocol}.json"))).unwrap()).unwrap();
        assert_eq!(e["preset"], "w4s2-paired", "{protocol}");
        assert_eq!(e["stride"], 2, "{protocol}: the stride comes from the spec");
    }
    // A listed preset's own spec is that preset: no spec carried, the preset's identity.
    let (_, listed, _) = phasekv(&["kernel", "list", "--json", "w4s2"]);
    let listed_path = dir.join("w4s2.json");
    std::fs::write(&listed_path, listed).unwrap();
    let (code, out, err) =
        phasekv(&["train", "--config", &cfg, "--spec", listed_path.to_str().unwrap(), "--print-config"]);
    assert_eq!(code, 0, "{err}");
    let (_, by_name, _) = phasekv(&["train", "--config", &cfg, "--preset", "w4s2", "--print-config"]);
    assert_eq!(out, by_name);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Specs that cannot be trained are one line naming the field: a knob no engine (and no
/// checker) knows, a listed preset's name on other knobs, a name that is no directory name,
/// and a window longer than the task's sequences (no compressed entry to train).
#[test]
fn specs_that_cannot_be_trained_are_refused_in_one_line() {
    let dir = scratch("train-spec-bad");
    let cfg = write(&dir.join("tiny.json"), &tiny_config("full"));
    let mut unknown = serde_json::to_value(paired_spec()).unwrap();
    unknown["scalling"] = serde_json::json!(2.0);
    let path = write(&dir.join("unknown.json"), &unknown);
    one_line_refusal(&["train", "--config", &cfg, "--spec", &path, "--print-config"], "scalling");
    let (code, _, err) = phasekv(&["kernel", "check", "--spec", &path, "--cases", "1"]);
    assert_eq!(code, 2, "kernel check refuses it too: {err}");

    let mut squatter = paired_spec();
    squatter.name = "w4s2".into();
    let path = write(&dir.join("squatter.json"), &squatter);
    one_line_refusal(&["train", "--config", &cfg, "--spec", &path, "--print-config"], "spec.name");
    let mut escaping = paired_spec();
    escaping.name = "../../etc".into();
    let path = write(&dir.join("escaping.json"), &escaping);
    one_line_refusal(&["train", "--config", &cfg, "--spec", &path, "--print-config"], "spec.name");

    let mut long = paired_spec();
    long.name = "w64s32-paired".into();
    long.geometry = phasekv::geometry::Geometry::new(64, 32, long.geometry.alignment()).unwrap();
    long.groups = ParamGroups::Shared;
    let path = write(&dir.join("long.json"), &long);
    let (code, _, err) = phasekv(&["kernel", "check", "--spec", &path, "--cases", "1"]);
    assert_eq!(code, 0, "kernel check accepts the long window: {err}");
    one_line_refusal(&["train", "--config", &cfg, "--spec", &path, "--print-config"], "model.preset");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A plan arm names a spec file (relative to the plan's folder): the plan holds the spec once
/// read, and the arm's config carries it under its name. A preset that is not the spec's name,
/// and a spec file that is no spec, are refused naming the arm's field.
#[test]
fn a_plan_arm_names_a_spec_file() {
    let dir = scratch("train-spec-plan");
    write(&dir.join("paired.json"), &paired_spec());
    let mut plan = serde_json::to_value(crate::common::plans::tiny_sweep(4)).unwrap();
    plan["sweep"] = serde_json::Value::Null;
    plan["arms"] = serde_json::json!([{"name": "paired", "spec": "paired.json"}]);
    let path = dir.join("plan.json");
    write(&path, &plan);
    let p = phasekv::reproduce::Plan::from_file(&path).unwrap();
    assert_eq!(p.arms[0].spec, Some(paired_spec()));
    let arms = p.arms().unwrap();
    assert_eq!(arms.len(), 1);
    assert_eq!((arms[0].0.as_str(), arms[0].1.model.preset.as_str()), ("paired", "w4s2-paired"));
    assert_eq!(arms[0].1.model.spec, Some(paired_spec()));

    plan["arms"] = serde_json::json!([{"name": "paired", "preset": "w4s2", "spec": "paired.json"}]);
    write(&path, &plan);
    let err = phasekv::reproduce::Plan::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("plan.arms") && err.contains("w4s2-paired"), "{err}");
    std::fs::write(dir.join("paired.json"), "{\"name\": 3}").unwrap();
    plan["arms"] = serde_json::json!([{"name": "paired", "spec": "paired.json"}]);
    write(&path, &plan);
    let err = phasekv::reproduce::Plan::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("plan.arms[0].spec"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A layer layout given as a spec file (issue 42): layers named by preset in JSON, trained a few
/// steps end to end with the spec kept whole in `config.json`; a bad layout (a layer with a
/// layout of its own, a model whose layers do not hold the layout whole) is one line, exit 2.
#[test]
fn a_layout_spec_file_trains_and_a_bad_layout_is_one_line() {
    let dir = scratch("train-spec-layout");
    let mut value = serde_json::to_value(KernelSpec::preset("dsv4-layout").unwrap()).unwrap();
    value["name"] = "hca-first".into();
    value["layout"] = serde_json::json!(["dsv4-hca8", "dsv4-csa"]);
    let spec = write(&dir.join("layout.json"), &value);
    let mut cfg = tiny_config("full");
    cfg.train.steps = 3;
    cfg.task.residue_modulus = 4;
    let cfg_path = write(&dir.join("tiny.json"), &cfg);
    let run = dir.join("run");
    let (code, out, err) =
        phasekv(&["train", "--config", &cfg_path, "--spec", &spec, "--out", run.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 0, "{out}{err}");
    let config = phasekv::model::RunConfig::from_file(&run.join("config.json")).unwrap();
    let kernel = config.model.kernel().unwrap();
    assert_eq!((kernel.layer(0).name.as_str(), kernel.layer(1).name.as_str()), ("dsv4-hca8", "dsv4-csa"));
    assert_eq!(config.model.phase_stride().unwrap(), Some(4), "the representative layer is CSA");
    value["layout"] = serde_json::json!(["dsv4-csa", "dsv4-layout"]);
    let bad = write(&dir.join("nested.json"), &value);
    one_line_refusal(&["train", "--config", &cfg_path, "--spec", &bad, "--print-config"], "layout[1].layout");
    let mut three = cfg.clone();
    three.model.n_layer = 3;
    let three = write(&dir.join("three.json"), &three);
    one_line_refusal(&["train", "--config", &three, "--spec", &spec, "--print-config"], "model.n_layer");
    let _ = std::fs::remove_dir_all(&dir);
}
