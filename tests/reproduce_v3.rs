//! The v3 rules in `reproduce` (`theory/phase-lab.md` §9, issue 45): `plans/v3.json` is §9.8's
//! plan with §9.5's seeds and §9's constants; its run floor is §9.2's (16, 12 without the
//! layout arms); a tiny v3 plan run end to end trains each seed up to §9.4's budget, draws its
//! scored families beyond the run floor (every outcome line's depth at least the floor, checked
//! by the loader's [`check_beyond_floor`], which rejects a shallow line), measures near-query
//! accuracy in front of each arm's own floor (none for full attention, with the reason), and
//! cycles the gates of the `w8s8` arm; the loader's training budget follows the plan's rules.

use phasekv::analysis::eval::Intervention;
use phasekv::analysis::protocol::{Depths, Protocol};
use phasekv::analysis::training::MAX_EXTENSIONS_V3;
use phasekv::analysis::verdict::Rules;
use phasekv::lab::load::{budget, check_beyond_floor, load_run, Expected};
use phasekv::lab::{EvalResult, NEAR_QUERY_PER_GROUP, V3_EVAL_PER_GROUP};
use phasekv::model::floor::depth_floor;
use phasekv::model::train::{Observer, Silent};
use phasekv::reproduce::{self, Plan, Unit, CYCLE_ARM, V3_SEEDS, V3_SEEDS_LARGE};
use serde_json::Value;
use std::path::{Path, PathBuf};

use crate::common;
use crate::phase_test_v2::{check_quotes, phase_lab_section};

fn v3_plan() -> Plan {
    Plan::from_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("plans/v3.json")).unwrap()
}

const LAYOUT_ARMS: [&str; 2] = ["dsv4-layout-kv1", "dsv41-layout-kv1"];

/// §9.8's arms in its order, with §9.5's seeds, §9.3's task (T4) and §9's lab constants.
#[test]
fn the_v3_plan_is_section_9s_arms_seeds_and_constants() {
    let plan = v3_plan();
    assert_eq!(plan.rules, Rules::V3);
    let order = [
        "full",
        "w8s4",
        "w8s6",
        "w4s4",
        "w12s12",
        "w8s8",
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
        "dsv4-layout-kv1",
        "dsv41-layout-kv1",
    ];
    // The arms run and those §9.8's time rule cut before the run are §9.8's list in its order:
    // the cut ones its end (arms, never seeds).
    let run = plan.arms().unwrap();
    let cut = plan.cut_arms().unwrap();
    assert!(!run.is_empty() && !cut.is_empty(), "the cut is recorded in the plan (§9.9)");
    let arms: Vec<_> = run.iter().chain(&cut).cloned().collect();
    assert_eq!(arms.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), order);
    let large = ["full", "w8s8", "w8s4-kv1", "w8s8-stagger-heads", "w8s8-stagger-layers", "w8s4-kv1-stagger-layers"];
    let mut uncut = plan.clone();
    uncut.arms.extend(plan.cut.clone().unwrap().arms);
    uncut.cut = None;
    let models = uncut.models().unwrap();
    assert_eq!(models.len(), 96, "§9.8: 96 models");
    let cut_seeds = models.iter().filter(|m| cut.iter().any(|(n, _)| n == &m.arm)).count();
    assert_eq!(plan.models().unwrap().len(), 96 - cut_seeds, "a cut arm trains no seed");
    for arm in order {
        let seeds: Vec<u64> = models.iter().filter(|m| m.arm == arm).map(|m| m.seed).collect();
        let n = if large.contains(&arm) { V3_SEEDS_LARGE } else { V3_SEEDS };
        assert_eq!(seeds, (0..n as u64).collect::<Vec<_>>(), "{arm}: §9.5's seeds");
    }
    // The layout arms: four layers, one KV head per layer, d_head 64 for V4.1.
    for (name, cfg) in &arms {
        let want_layers = if LAYOUT_ARMS.contains(&name.as_str()) { 4 } else { 2 };
        assert_eq!(cfg.model.n_layer, want_layers, "{name}");
        if name.ends_with("kv1") || name.contains("kv1-") {
            assert_eq!(cfg.model.n_kv_head, 1, "{name}");
        }
    }
    let d41 = &arms.iter().find(|(n, _)| n == "dsv41-layout-kv1").unwrap().1;
    assert_eq!((d41.model.preset.as_str(), d41.model.d_head), ("dsv41-layout", 64));
    // §9.3's choice, T4: the v2 run's task and recipe with `max_tail` 40 and the curriculum.
    let full = Plan::builtin(reproduce::Scale::Full).unwrap();
    let t4 = Plan::from_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("plans/probes-v3/t4.json")).unwrap();
    assert_eq!((&plan.run.task, &plan.run.train), (&t4.run.task, &t4.run.train));
    assert_eq!((plan.run.task.max_tail, plan.run.train.curriculum_steps), (40, 1000));
    let mut v2 = plan.run.clone();
    (v2.task.max_tail, v2.train.curriculum_steps) = (full.run.task.max_tail, full.run.train.curriculum_steps);
    assert_eq!((&v2.task, &v2.train), (&full.run.task, &full.run.train), "T4 is T1 with two changes");
    // §9's constants are the code's, and the plan uses them.
    let section = phase_lab_section("## 9. Pre-registration v3", "\n## 10.");
    check_quotes(
        "§9",
        &section,
        &[
            ("V3_EVAL_PER_GROUP", V3_EVAL_PER_GROUP as f64),
            ("NEAR_QUERY_PER_GROUP", NEAR_QUERY_PER_GROUP as f64),
            ("V3_SEEDS_LARGE", V3_SEEDS_LARGE as f64),
            ("V3_SEEDS", V3_SEEDS as f64),
        ],
    );
    assert_eq!(plan.lab.eval_per_group, V3_EVAL_PER_GROUP);
    assert_eq!(
        (plan.lab.knockout_per_group, plan.lab.knockout_reference, plan.lab.gate_samples),
        (24, 8, 64),
        "§9.5: knockouts 24 per group as v2"
    );
}

/// §9.2: the run floor is the largest arm floor, 16 (the V4 layout's HCA window), 12 without the
/// layout arms; none under the v2 rules. Arms cut before the run (§9.9) still count.
#[test]
fn the_v3_plans_run_floor_is_16_and_12_without_the_layout_arms() {
    let plan = v3_plan();
    // The layout arms are cut before the run (§9.8), and still set the floor the other arms are
    // scored beyond: a cut never moves `D`.
    assert_eq!(plan.run_floor().unwrap(), Some(16));
    let cut = plan.cut.clone().unwrap();
    assert!(LAYOUT_ARMS.iter().all(|l| cut.arms.iter().any(|a| &a.name == l)));
    let mut without = plan.clone();
    without.arms.retain(|a| !LAYOUT_ARMS.contains(&a.name.as_str()));
    without.cut.as_mut().unwrap().arms.retain(|a| !LAYOUT_ARMS.contains(&a.name.as_str()));
    assert_eq!(without.run_floor().unwrap(), Some(12));
    let mut dropped = plan.clone();
    dropped.cut = None;
    assert_eq!(dropped.run_floor().unwrap(), Some(12), "negative control: a cut left out of the record moves D");
    // Negative controls: the same arms under v2 have none; full attention alone has 0.
    assert_eq!(Plan { rules: Rules::V2, ..plan.clone() }.run_floor().unwrap(), None);
    let mut only_full = plan.clone();
    only_full.arms.retain(|a| a.name == "full");
    assert_eq!(only_full.run_floor().unwrap(), Some(16), "the cut arms' floors count");
    only_full.cut = None;
    assert_eq!(only_full.run_floor().unwrap(), Some(0));
    // A v3 plan whose task does not build phase families cannot draw by depth: refused.
    let mut end = plan;
    end.run.task.query_placement = phasekv::task::QueryPlacement::End;
    end.run.task.max_tail = 0;
    let err = end.validate().unwrap_err().to_string();
    assert!(err.contains("after_records"), "{err}");
}

/// A plan may score at a floor deeper than its arms' own (`depth_floor`, for the §9.3 probes),
/// never shallower, and only under v3. The committed probe plans (`plans/probes-v3/`) are §9.3's
/// candidates: v3 rules, the v3 run's floor, probe seeds 100-102 for full attention and 100 for
/// w8s4 and w8s8, 48 families per group, and each candidate's changes of T1 (the v2 run's task
/// and recipe R2), as §9.3's two lists write them.
#[test]
fn probe_plans_score_at_the_v3_runs_floor_and_a_shallower_floor_is_refused() {
    let v3 = v3_plan();
    let d = v3.run_floor().unwrap().unwrap();
    let t1 = Plan::builtin(reproduce::Scale::Full).unwrap().run;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("plans/probes-v3");
    type Change = (&'static str, &'static str, u64);
    let candidates: [(&str, &[Change]); 6] = [
        ("t1", &[]),
        ("t2", &[("task", "n_records", 12)]),
        ("t3", &[("task", "max_tail", 40)]),
        ("t4", &[("task", "max_tail", 40), ("train", "curriculum_steps", 1000)]),
        ("t5", &[("task", "max_tail", 32), ("train", "curriculum_steps", 1000)]),
        ("t6", &[("task", "max_tail", 40), ("train", "warmup_steps", 600)]),
    ];
    for (name, changes) in candidates {
        let p = Plan::from_file(&dir.join(format!("{name}.json"))).unwrap();
        p.validate().unwrap();
        assert_eq!(p.rules, Rules::V3);
        assert_eq!(p.run_floor().unwrap(), Some(d), "{name}");
        assert!(
            p.depth_floor.unwrap()
                > p.arms().unwrap().iter().map(|(_, c)| depth_floor(&c.model, &c.task).unwrap().depth).max().unwrap()
        );
        let keys: Vec<(String, u64)> =
            p.models().unwrap().iter().map(|m| (m.arm.clone(), m.config.train.seed)).collect();
        let want: Vec<(String, u64)> = [("full", 100), ("full", 101), ("full", 102), ("w8s4", 100), ("w8s8", 100)]
            .iter()
            .map(|(a, s)| (a.to_string(), *s))
            .collect();
        assert_eq!(keys, want, "{name}");
        assert_eq!(p.lab.eval_per_group, 48);
        let (mut task, mut train) = (serde_json::to_value(&t1.task).unwrap(), serde_json::to_value(&t1.train).unwrap());
        for &(part, field, value) in changes {
            let target = if part == "task" { &mut task } else { &mut train };
            target[field] = Value::from(value);
        }
        assert_eq!(serde_json::to_value(&p.run.task).unwrap(), task, "{name}");
        assert_eq!(serde_json::to_value(&p.run.train).unwrap(), train, "{name}");
        // Negative controls: shallower than the arms' floor, and a floor under v2.
        let shallow = Plan { depth_floor: Some(7), ..p.clone() };
        let err = shallow.validate().unwrap_err().to_string();
        assert!(err.contains("plan.depth_floor") && err.contains("below the arms' own floor 8"), "{err}");
        let v2 = Plan { rules: Rules::V2, ..p.clone() };
        assert!(v2.validate().unwrap_err().to_string().contains("only v3"));
    }
}

/// §9.7's E12: the layout arms' knockout is the KV-head one (one KV head per layer, so a row
/// removes a layer's entries); negative control: a one-KV-head arm with one window everywhere
/// gets the window-slot knockout.
#[test]
fn the_layout_arms_are_knocked_out_by_kv_head() {
    for (name, cfg) in v3_plan().arms().unwrap() {
        let want = match name.as_str() {
            "dsv4-layout-kv1" | "dsv41-layout-kv1" | "full" => Intervention::KvHead,
            "w8s4-kv1" | "w8s4-norope-kv1" | "w8s4-kv1-stagger-layers" | "dsv4-csa" => Intervention::WindowSlot,
            _ => continue,
        };
        assert_eq!(Intervention::for_model(&cfg.model, &cfg.model.kernel().unwrap()), want, "{name}");
    }
}

#[derive(Default)]
struct Lines(Vec<String>, Silent);
impl reproduce::Progress for Lines {
    fn message(&mut self, msg: &str) {
        self.0.push(msg.to_string());
    }
    fn trainer(&mut self) -> &mut dyn Observer {
        &mut self.1
    }
    fn step(&mut self, _: &str, _: usize, _: usize) {}
}

/// A tiny v3 plan: full attention and `w8s8` (the cycled arm) on a tiny model whose learning
/// rate cannot reach 90 % in 8 steps, on phase families with a long tail (deep targets).
fn tiny_v3() -> Plan {
    let mut plan = common::plans::tiny_sweep(8);
    plan.sweep = None;
    plan.presets = vec!["full".into(), CYCLE_ARM.into()];
    plan.seeds = vec![1];
    plan.run = common::configs::tiny_config("full");
    let (task, train) = (&mut plan.run.task, &mut plan.run.train);
    task.residue_modulus = 8;
    task.query_placement = phasekv::task::QueryPlacement::AfterRecords;
    task.max_tail = 12;
    task.max_prefix = 7;
    train.steps = 8;
    train.batch_size = 4;
    train.warmup_steps = 2;
    train.eval_every = 4;
    train.eval_samples = 8;
    train.checkpoint_every = 8;
    train.lr = 1e-4;
    train.engine = phasekv::model::Engine::Fast;
    plan.lab.eval_per_group = 8;
    plan.rules = Rules::V3;
    plan
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// A copy's place: `<out>/<label>/<the run's name>` (a run is named after its arm and seed).
fn beside(dir: &Path, label: &str) -> PathBuf {
    dir.parent().unwrap().parent().unwrap().join(label).join(dir.file_name().unwrap())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    copy_dir(from, to);
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        }
    }
}

/// The whole tiny v3 run: budget, scored and near-query families, cycling, the floor checker
/// with its negative controls, and the loader's budget by rules.
#[test]
fn a_tiny_v3_run_scores_beyond_the_floor_and_trains_to_the_v3_budget() {
    let plan = tiny_v3();
    let out = common::plans::scratch("v3-run");
    reproduce::write_plan(&out, &plan).unwrap();
    let floor = plan.run_floor().unwrap().unwrap();
    let units = plan.units().unwrap();
    let models: Vec<_> = units.iter().filter_map(|u| if let Unit::Model(m) = u { Some(m) } else { None }).collect();
    assert_eq!(models.len(), 2);
    let w8s8 = models.iter().find(|m| m.arm == CYCLE_ARM).unwrap();
    assert_eq!(floor, depth_floor(&w8s8.config.model, &w8s8.config.task).unwrap().depth);
    assert!(floor > 0);
    let mut lines = Lines::default();
    for u in &units {
        assert!(reproduce::run_unit(&out, &plan, u, &mut lines).unwrap());
    }
    for m in &models {
        let dir = out.join(m.dir());
        // §9.4: extended four times, to five recipes, then failed.
        let metrics: phasekv::model::Metrics =
            serde_json::from_slice(&std::fs::read(dir.join("metrics.json")).unwrap()).unwrap();
        assert_eq!((metrics.steps, metrics.extension_count()), (40, MAX_EXTENSIONS_V3), "{}: {:#?}", m.key(), lines.0);
        let u: reproduce::ModelUnitResult =
            serde_json::from_slice(&std::fs::read(dir.join("unit.json")).unwrap()).unwrap();
        let names: Vec<&str> = u.stages.iter().map(|s| s.stage.as_str()).collect();
        let files = load_run(&dir, None).unwrap().unwrap();
        check_beyond_floor(&dir, &files, floor).unwrap();
        for e in files.evals.values() {
            assert_eq!(e.depths, Some(Depths::beyond(floor)));
        }
        assert!(files.outcomes.values().flatten().all(|o| o.depth.is_some_and(|d| d >= floor)));
        assert_eq!(files.outcomes.len(), 2);
        if m.arm == "full" {
            assert_eq!(
                names,
                [
                    "train",
                    "extend",
                    "eval prefix",
                    "eval in-sequence",
                    "knockout prefix",
                    "knockout in-sequence",
                    "gates"
                ]
            );
            assert!(u.near_query_skipped.as_deref().is_some_and(|w| w.contains("full attention")), "{u:?}");
            assert!(!dir.join("near-prefix.json").exists());
        } else {
            assert_eq!(
                names,
                [
                    "train",
                    "extend",
                    "eval prefix",
                    "eval in-sequence",
                    "near prefix",
                    "near in-sequence",
                    "knockout prefix",
                    "knockout in-sequence",
                    "cycle prefix",
                    "gates"
                ]
            );
            assert_eq!(u.near_query_skipped, None);
            for p in Protocol::ALL {
                let near: EvalResult = phasekv::lab::read_json(&dir.join(format!("near-{}.json", p.name()))).unwrap();
                assert_eq!((near.depths, near.per_group), (Some(Depths::before(floor)), NEAR_QUERY_PER_GROUP));
                assert!(near.statistics.is_none(), "the near-query measurement is never tested");
                let text = std::fs::read_to_string(dir.join(format!("near-{}-outcomes.jsonl", p.name()))).unwrap();
                assert_eq!(text.lines().count(), NEAR_QUERY_PER_GROUP * plan.run.task.residue_modulus);
                for l in text.lines() {
                    let o: phasekv::analysis::phase::Outcome = serde_json::from_str(l).unwrap();
                    assert!(o.depth.is_some_and(|d| d < floor), "{l}");
                }
                for ext in ["csv", "svg", "png"] {
                    assert!(dir.join(format!("near-{}.{ext}", p.name())).exists(), "near-{}.{ext}", p.name());
                }
            }
            let cycle: phasekv::lab::CycleRunResult =
                phasekv::lab::read_json(&dir.join(format!("{}.json", phasekv::lab::cycle_stem(Protocol::Prefix, 1))))
                    .unwrap();
            assert_eq!(cycle.depths, Some(Depths::beyond(floor)));
            assert_eq!(cycle.cycle.rows.iter().map(|r| r.k).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
        }
    }
    // The report reads the run (§9.2's check on every run of a v3 plan) and refuses a copy of it
    // with one line below the floor, naming the file.
    phasekv::report::ledger::collect(std::slice::from_ref(&out)).unwrap();
    let shallow = out.with_file_name(format!("{}-shallow", out.file_name().unwrap().to_string_lossy()));
    copy_tree(&out, &shallow);
    let jsonl = shallow.join(w8s8.dir()).join("eval-in-sequence-outcomes.jsonl");
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let mut o: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    o["depth"] = Value::from(floor - 1);
    let rest: Vec<&str> = text.lines().skip(1).collect();
    std::fs::write(&jsonl, format!("{}\n{}\n", serde_json::to_string(&o).unwrap(), rest.join("\n"))).unwrap();
    let err = match phasekv::report::ledger::collect(std::slice::from_ref(&shallow)) {
        Ok(_) => panic!("a v3 report read a line below the run floor"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("eval-in-sequence-outcomes.jsonl") && err.contains("below the run floor"), "{err}");
    std::fs::remove_dir_all(&shallow).unwrap();
    the_banner_names_a_cut_and_its_claims(&out, &plan);
    let dir = out.join(w8s8.dir());
    rejects_shallow_lines(&dir, floor);
    the_loaders_budget_follows_the_rules(&dir, &w8s8.config);
    std::fs::remove_dir_all(&out).unwrap();
}

/// A plan that records arms cut before its run (§9.8) gets one banner entry naming them, their
/// seeds and the plan's reason, and the claims that rest on them; without a cut there is none.
/// A cut with no reason, or of an arm the plan still runs, is refused in one line.
fn the_banner_names_a_cut_and_its_claims(out: &Path, plan: &Plan) {
    use phasekv::report::ledger::{banner, claims, collect};
    let kind = "arms cut before the run";
    let c = collect(&[out.to_path_buf()]).unwrap();
    let cl = claims(&c);
    assert!(banner(&c, &cl).iter().all(|e| e.kind != kind), "no cut, no entry");
    let layout = reproduce::Arm {
        name: "dsv4-layout-kv1".into(),
        preset: Some("dsv4-layout".into()),
        spec: None,
        overrides: serde_json::from_str(r#"{"model.n_layer": 4, "model.n_kv_head": 1}"#).unwrap(),
        seeds: Some(vec![0, 1, 2, 3]),
    };
    let mut cut_plan = plan.clone();
    cut_plan.cut = Some(reproduce::Cut { arms: vec![layout.clone()], reason: "measured: too slow".into() });
    cut_plan.validate().unwrap();
    let mut c = c;
    c.plan = Some(cut_plan.clone());
    let cl = claims(&c);
    let entries: Vec<_> = banner(&c, &cl).into_iter().filter(|e| e.kind == kind).collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let e = &entries[0];
    assert!(e.text.contains("`dsv4-layout-kv1` (4 seeds)") && e.text.contains("Why: measured: too slow"), "{}", e.text);
    assert_eq!(e.claims, ["E12"], "the claim whose arm was cut, and no other");
    // Negative controls: no reason; an arm both cut and run.
    let mut no_reason = cut_plan.clone();
    no_reason.cut.as_mut().unwrap().reason = " ".into();
    let err = no_reason.validate().unwrap_err().to_string();
    assert!(err.contains("plan.cut") && !err.contains('\n'), "{err}");
    let mut both = cut_plan;
    both.cut.as_mut().unwrap().arms.push(reproduce::Arm {
        name: "full".into(),
        preset: None,
        spec: None,
        overrides: Default::default(),
        seeds: None,
    });
    let err = both.validate().unwrap_err().to_string();
    assert!(err.contains("plan.cut.arms") && err.contains("'full' is both cut and in the plan"), "{err}");
}

/// Negative controls of [`check_beyond_floor`] on a copy of a v3 run: one outcome line one
/// token shallower than the floor, and an evaluation that records no depth band, are rejected.
fn rejects_shallow_lines(dir: &Path, floor: usize) {
    let copy = beside(dir, "shallow");
    copy_dir(dir, &copy);
    let jsonl = copy.join("eval-prefix-outcomes.jsonl");
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut o: Value = serde_json::from_str(&lines[2]).unwrap();
    o["depth"] = Value::from(floor - 1);
    lines[2] = serde_json::to_string(&o).unwrap();
    std::fs::write(&jsonl, lines.join("\n") + "\n").unwrap();
    let files = load_run(&copy, None).unwrap().unwrap();
    let err = check_beyond_floor(&copy, &files, floor).unwrap_err().to_string();
    assert!(err.contains("eval-prefix-outcomes.jsonl") && err.contains("line 3") && err.contains("below"), "{err}");
    std::fs::write(&jsonl, text).unwrap();
    check_beyond_floor(&copy, &load_run(&copy, None).unwrap().unwrap(), floor).unwrap();
    edit_json(&copy.join("eval-in-sequence.json"), |v| {
        v.as_object_mut().unwrap().remove("depths");
    });
    let err = check_beyond_floor(&copy, &load_run(&copy, None).unwrap().unwrap(), floor).unwrap_err().to_string();
    assert!(err.contains("eval-in-sequence.json") && err.contains("depths"), "{err}");
    // A higher floor than the run's makes its own lines shallow.
    let files = load_run(dir, None).unwrap().unwrap();
    assert!(check_beyond_floor(dir, &files, floor + 1000).is_err());
    std::fs::remove_dir_all(&copy).unwrap();
}

/// `load_run`'s extension budget is the rules' (§8.2, §9.4): with two extensions a v2 load
/// refuses and a v3 load accepts; with five a v3 load and a load with no plan refuse.
fn the_loaders_budget_follows_the_rules(dir: &Path, config: &phasekv::model::RunConfig) {
    let copy = beside(dir, "budget");
    copy_dir(dir, &copy);
    let expected = |rules| Expected {
        preset: config.model.preset.clone(),
        seed: config.train.seed,
        max_extensions: budget(rules),
    };
    let metrics = copy.join("metrics.json");
    edit_json(&metrics, |v| v["extensions"].as_array_mut().unwrap().truncate(2));
    let err = load_run(&copy, Some(&expected(Rules::V2))).unwrap_err().to_string();
    assert!(err.contains("extensions") && err.contains("at most 1"), "{err}");
    load_run(&copy, Some(&expected(Rules::V3))).unwrap();
    load_run(&copy, None).unwrap();
    edit_json(&metrics, |v| {
        let xs = v["extensions"].as_array_mut().unwrap();
        for i in 2..5 {
            let mut x = xs[0].clone();
            x["index"] = Value::from(i + 1);
            xs.push(x);
        }
    });
    for expected in [Some(expected(Rules::V3)), None] {
        let err = load_run(&copy, expected.as_ref()).unwrap_err().to_string();
        assert!(err.contains("extensions") && err.contains("at most 4"), "{err}");
    }
    std::fs::remove_dir_all(&copy).unwrap();
}

/// `phasekv eval --beyond D` and `--near`, `analyze knockout --beyond D` and `analyze cycle
/// --beyond D` draw a user's run as a v3 run scores it (§9.2): every outcome at depth D or more,
/// or in front of the run's own floor for `--near`. Negative controls: a D in front of the
/// run's floor is one error line and exit 2 for each command, and full attention (floor 0) has
/// no near-query families.
#[test]
fn the_lab_commands_score_beyond_a_floor_and_refuse_one_in_front_of_the_runs_own() {
    let dir = common::plans::scratch("v3-cli-scope");
    let plan = tiny_v3();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let mut runs = Vec::new();
    for preset in ["full", CYCLE_ARM] {
        let mut config = plan.run.clone();
        config.model = common::configs::tiny_config(preset).model;
        config.train.steps = 2;
        config.train.checkpoint_every = 2;
        let file = dir.join(format!("{preset}.json"));
        std::fs::write(&file, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        let run = dir.join(preset);
        common::plans::phasekv_ok(&["train", "--config", &s(&file), "--out", &s(&run), "--quiet"]);
        runs.push((run, depth_floor(&config.model, &config.task).unwrap().depth));
    }
    let (w8s8, floor) = runs[1].clone();
    assert!(floor > 1, "{floor}");
    let refused = |args: &[String]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = common::plans::phasekv(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        err
    };
    let front = (floor - 1).to_string();
    for cmd in [&["eval"][..], &["analyze", "knockout"], &["analyze", "cycle", "--layer", "1"]] {
        let mut args: Vec<String> = cmd.iter().map(|a| a.to_string()).collect();
        args.extend([s(&w8s8), "--beyond".into(), front.clone(), "--samples".into(), "2".into()]);
        let err = refused(&args);
        assert!(err.contains("--beyond") && err.contains(&format!("depth floor {floor}")), "{cmd:?}: {err}");
        assert!(err.contains(&format!("allowed {floor} or more")), "{err}");
    }
    let lines = |run: &Path, stem: &str| -> Vec<usize> {
        std::fs::read_to_string(run.join(format!("{stem}-outcomes.jsonl")))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["depth"].as_u64().unwrap() as usize)
            .collect()
    };
    let f = floor.to_string();
    common::plans::phasekv_ok(&["eval", &s(&w8s8), "--beyond", &f, "--samples", "8", "--protocol", "prefix"]);
    let beyond = lines(&w8s8, "eval-prefix");
    assert!(!beyond.is_empty() && beyond.iter().all(|&d| d >= floor), "{beyond:?}");
    let e: EvalResult = phasekv::lab::read_json(&w8s8.join("eval-prefix.json")).unwrap();
    assert_eq!(e.depths, Some(Depths::beyond(floor)));
    common::plans::phasekv_ok(&["eval", &s(&w8s8), "--near", "--samples", "8", "--protocol", "prefix"]);
    let near = lines(&w8s8, "near-prefix");
    assert!(!near.is_empty() && near.iter().all(|&d| d < floor), "{near:?}");
    common::plans::phasekv_ok(&[
        "analyze",
        "knockout",
        &s(&w8s8),
        "--beyond",
        &f,
        "--samples",
        "8",
        "--reference",
        "2",
    ]);
    let err = refused(&["eval".into(), s(&runs[0].0), "--near".into(), "--samples".into(), "2".into()]);
    assert!(err.contains("no near-query families") && err.contains("full attention"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
