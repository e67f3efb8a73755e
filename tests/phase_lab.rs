//! The phase lab (issue 5): balanced padding protocols, entropy measures on hand-computed
//! gates, knockouts on a tiny trained model, the lab's run-directory steps, the JSONL audit
//! round trip and its line-numbered errors.

use phasekv::analysis::audit::{export_jsonl, parse_results, TextTemplate};
use phasekv::analysis::eval::{evaluate, knockout, Intervention};
use phasekv::analysis::gates::{concentrations, effective_offsets};
use phasekv::analysis::protocol::{self, Protocol};
use phasekv::lab;
use phasekv::model::train::{train, Outcome, Silent};
use phasekv::model::Model;
use phasekv::model::RunConfig;
use phasekv::stop::Stop;
use phasekv::task::TaskConfig;
use proptest::prelude::*;
use std::path::PathBuf;
use std::process::Command;

use crate::common;

fn tmp_dir(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("phasekv-lab-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The tiny task of the training tests with M = 4 (its 13 reachable target positions hold the
/// 3 M that balancing needs).
fn tiny(preset: &str) -> RunConfig {
    let mut c = common::configs::tiny_config(preset);
    c.task.residue_modulus = 4;
    c
}

fn check_prompts(task: &TaskConfig, protocol: Protocol, per_group: usize, seed: u64) {
    let prompts = protocol::generate(task, protocol, per_group, seed).unwrap();
    let m = task.residue_modulus;
    assert_eq!(prompts.len(), per_group * m);
    let query = prompts[0].target().query_pos;
    for p in &prompts {
        let q = p.target();
        assert_eq!(p.sample.tokens.len(), task.seq_len());
        assert_eq!(q.source_key_pos, p.target_pos, "target placed where the design says");
        assert_eq!(p.group, p.target_pos % m);
        assert_eq!(q.query_pos, query, "the scored query sits at a fixed position");
        assert_eq!(
            &p.sample.tokens[q.source_key_pos..q.source_key_pos + task.key_len],
            &p.sample.tokens[q.query_pos + 1..q.query_pos + 1 + task.key_len]
        );
        if protocol == Protocol::Prefix {
            assert!(p.gaps(task).iter().all(|&g| g == 0), "prefix padding moves the records as one block");
        }
    }
    let b = protocol::balance(&prompts, m);
    assert!(b.groups.iter().all(|g| g.n == per_group));
    assert!(
        b.agrees(),
        "{protocol:?}: group means differ by {:.2} tokens, stds by {:.1} %",
        b.mean_spread,
        100.0 * b.std_spread
    );
}

const REGRESSIONS: &str = "proptest-regressions/phase_lab.txt";

/// At the default task and sample size, every residue group has the same mean (within 1 token)
/// and standard deviation (within 5 %) of the target position, under both protocols.
#[test]
fn protocols_balance_target_depth_across_groups() {
    let task = TaskConfig::default();
    common::runner("balance", 3, Some(REGRESSIONS))
        .run(&any::<u64>(), |seed| {
            for protocol in Protocol::ALL {
                check_prompts(&task, protocol, lab::LabSettings::default().eval_per_group, seed);
            }
            Ok(())
        })
        .unwrap();
}

/// The effective number of offsets is 1 for a one-hot gate and W for a uniform one.
#[test]
fn effective_offsets_of_one_hot_and_uniform() {
    common::runner("entropy", 64, Some(REGRESSIONS))
        .run(&(1usize..33, 0usize..32), |(w, hot)| {
            let hot = hot % w;
            let one_hot: Vec<f64> = (0..w).map(|i| if i == hot { 1.0 } else { 0.0 }).collect();
            prop_assert!((effective_offsets(&one_hot) - 1.0).abs() < 1e-12);
            let uniform = vec![1.0 / w as f64; w];
            prop_assert!((effective_offsets(&uniform) - w as f64).abs() < 1e-9);
            Ok(())
        })
        .unwrap();
}

#[test]
fn in_sequence_padding_moves_distractors_independently() {
    let task = TaskConfig::default();
    let prompts = protocol::generate(&task, Protocol::InSequence, 24, 1).unwrap();
    let varied = prompts.iter().filter(|p| p.gaps(&task).iter().any(|&g| g > 0)).count();
    assert!(varied > prompts.len() / 2, "only {varied} of {} prompts have gaps", prompts.len());
    // Same seed, same prompts; another seed, other prompts.
    assert_eq!(prompts, protocol::generate(&task, Protocol::InSequence, 24, 1).unwrap());
    assert_ne!(prompts, protocol::generate(&task, Protocol::InSequence, 24, 2).unwrap());
}

#[test]
fn the_spec_nearest_to_base_rule_cannot_balance_the_variance_here() {
    // Why generate() matches moments instead (module docs of analysis::protocol): on the
    // default task's 72 reachable positions, the spec's rule leaves the per-group std spread
    // far above the 5 % the spec asks for.
    let k1 = protocol::nearest_to_base_std_spread(1, 72, 24, 1);
    let k2 = protocol::nearest_to_base_std_spread(1, 72, 24, 2);
    assert!(k1 > 0.5 && k2 > 0.2, "spreads {k1:.3} {k2:.3}");
    let b = protocol::balance(&protocol::generate(&TaskConfig::default(), Protocol::Prefix, 100, 0).unwrap(), 24);
    assert!(b.std_spread < 0.05);
}

#[test]
fn a_task_too_short_for_its_modulus_is_refused_with_the_reason() {
    let task = common::configs::tiny_config("full").task; // M = 24 on 13 positions
    let e = protocol::generate(&task, Protocol::Prefix, 4, 0).unwrap_err().to_string();
    assert!(e.contains("3 M") && e.contains("residue_modulus"), "{e}");
    let e = protocol::generate(&tiny("full").task, Protocol::Prefix, 0, 0).unwrap_err().to_string();
    assert!(e.contains("at least 1"), "{e}");
}

#[test]
fn concentrations_of_hand_computed_gates() {
    let hot = |i: usize| -> Vec<f64> { (0..4).map(|k| if k == i { 1.0 } else { 0.0 }).collect() };
    // Always the same offset: statically and input-dependently concentrated.
    let same: Vec<Vec<Vec<f64>>> = (0..6).map(|_| vec![hot(2)]).collect();
    let (s, i, profile) = concentrations(&same);
    assert!((s - 1.0).abs() < 1e-12 && (i - 1.0).abs() < 1e-12);
    assert!(profile.iter().zip(hot(2)).all(|(a, b)| (a - b).abs() < 1e-12), "{profile:?}");
    // One-hot per window but alternating between two offsets: input-dependent concentration 1,
    // static concentration 2 (the average gate is uniform on two offsets).
    let alt: Vec<Vec<Vec<f64>>> = (0..6).map(|j| vec![hot(j % 2)]).collect();
    let (s, i, _) = concentrations(&alt);
    assert!((s - 2.0).abs() < 1e-12 && (i - 1.0).abs() < 1e-12, "{s} {i}");
    // Uniform gates: W for both.
    let uni: Vec<Vec<Vec<f64>>> = (0..3).map(|_| vec![vec![0.25; 4], vec![0.25; 4]]).collect();
    let (s, i, _) = concentrations(&uni);
    assert!((s - 4.0).abs() < 1e-12 && (i - 4.0).abs() < 1e-12);
}

/// Trains the tiny full-attention model of the training tests until it retrieves.
fn trained_tiny(dir: &std::path::Path) -> RunConfig {
    let mut cfg = tiny("full");
    cfg.model.d_model = 32;
    cfg.model.d_head = 16;
    cfg.model.d_ff = 64;
    cfg.train.steps = 600;
    cfg.train.batch_size = 16;
    cfg.train.warmup_steps = 20;
    cfg.train.eval_every = 600;
    cfg.train.eval_samples = 64;
    cfg.train.checkpoint_every = 600;
    let Outcome::Finished(_) = train(&cfg, dir, serde_json::json!({}), &mut Silent).unwrap() else {
        panic!("did not finish")
    };
    cfg
}

#[test]
fn knockouts_lower_accuracy_where_a_head_matters_and_change_nothing_at_zero_weight() {
    let dir = tmp_dir("knockout");
    let cfg = trained_tiny(&dir);
    let (_, model) = phasekv::model::load_run(&dir, None).unwrap();
    let prompts = protocol::generate(&cfg.task, Protocol::InSequence, 16, 0).unwrap();
    let clean = evaluate(&model.decoder, &prompts, &mut |_, _| {}, &Stop::never()).unwrap();
    let acc = clean.iter().filter(|o| o.correct).count() as f64 / clean.len() as f64;
    assert!(acc > 2.0 * cfg.task.chance_in_context(), "tiny model did not learn: {acc}");
    let map = knockout(&model.decoder, &cfg.task, &prompts, 4, 0, &mut |_, _| {}).unwrap();
    assert_eq!(map.rows.len(), cfg.model.n_layer * cfg.model.n_kv_head);
    let worst = map.rows.iter().map(|r| r.mean_drop_pp).fold(f64::NEG_INFINITY, f64::max);
    assert!(
        worst > 20.0,
        "no head's knockout lowers accuracy: {:?}",
        map.rows.iter().map(|r| r.mean_drop_pp).collect::<Vec<_>>()
    );

    // A random-init model whose layer-1 attention output weight is zero: knocking out that
    // layer's head changes no outcome at all.
    let mut rcfg = tiny("w4s4");
    rcfg.model.n_kv_head = 2;
    let m = Model::new(&rcfg, &candle_core::Device::Cpu).unwrap();
    for (name, var) in m.store.vars() {
        if name == "layer1.attn.wo" {
            var.set(&var.as_tensor().zeros_like().unwrap()).unwrap();
        }
    }
    let prompts = protocol::generate(&rcfg.task, Protocol::Prefix, 4, 3).unwrap();
    let base = evaluate(&m.decoder, &prompts, &mut |_, _| {}, &Stop::never()).unwrap();
    let map = knockout(&m.decoder, &rcfg.task, &prompts, 2, 0, &mut |_, _| {}).unwrap();
    for row in map.rows.iter().filter(|r| r.layer == 1) {
        assert!(row.drop_pp.iter().all(|&d| d == 0.0), "zero-weight head L1.H{} changed accuracy", row.head);
    }
    let base_acc: Vec<f64> =
        phasekv::analysis::stats::group_accuracies(&base.iter().map(|o| (o.group, o.correct)).collect::<Vec<_>>(), 4)
            .unwrap()
            .iter()
            .map(|g| g.accuracy)
            .collect();
    assert_eq!(base_acc, map.clean.iter().map(|g| g.accuracy).collect::<Vec<_>>());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lab_steps_write_their_results_reuse_them_and_never_overwrite_other_settings() {
    let dir = tmp_dir("steps");
    let mut cfg = tiny("w4s4");
    cfg.train.steps = 24;
    cfg.train.batch_size = 4;
    cfg.train.eval_every = 12;
    cfg.train.eval_samples = 8;
    cfg.train.checkpoint_every = 8;
    let Outcome::Finished(_) = train(&cfg, &dir, serde_json::json!({}), &mut Silent).unwrap() else { panic!() };
    let e = lab::eval_run(&dir, Protocol::Prefix, 6, 0, lab::Scope::All, &mut |_, _| {}, &Stop::never()).unwrap();
    assert_eq!(e.profile.n, 24);
    assert_eq!(e.stride, Some(4));
    for f in ["eval-prefix.json", "eval-prefix.csv", "eval-prefix.svg", "eval-prefix.png", "eval-prefix-outcomes.jsonl"]
    {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    // Every outcome line names its model and prompt (issue 31), written by the evaluation itself.
    let text = std::fs::read_to_string(dir.join("eval-prefix-outcomes.jsonl")).unwrap();
    let arm = phasekv::run_dir::arm_of(dir.file_name().unwrap().to_str().unwrap()).to_string();
    assert_eq!(text.lines().count(), e.profile.n, "one line per prompt");
    for line in text.lines() {
        let o: phasekv::analysis::phase::Outcome = serde_json::from_str(line).unwrap();
        assert_eq!(o.arm.as_deref(), Some(arm.as_str()), "{line}");
        assert_eq!(o.preset.as_deref(), Some("w4s4"), "{line}");
        assert_eq!(o.seed, Some(cfg.train.seed), "{line}");
        assert_eq!(o.protocol.as_deref(), Some("prefix"), "{line}");
        // Families only on the phase-family task (`after_records`, the committed one, whose
        // files `report_committed` checks); this tiny task has none.
        let families = cfg.task.query_placement == phasekv::task::QueryPlacement::AfterRecords;
        assert_eq!(o.group, o.id / 6, "{line}");
        assert_eq!(o.family, families.then_some(o.id % 6), "id = group * n + family: {line}");
        assert_eq!(o.phase, Some(o.position.expect("a position") % 4), "phase = position mod S: {line}");
    }
    // Same settings: reused, identical. Other settings: an error naming the file.
    assert_eq!(
        lab::eval_run(&dir, Protocol::Prefix, 6, 0, lab::Scope::All, &mut |_, _| {}, &Stop::never()).unwrap(),
        e
    );
    let err = lab::eval_run(&dir, Protocol::Prefix, 7, 0, lab::Scope::All, &mut |_, _| {}, &Stop::never())
        .unwrap_err()
        .to_string();
    assert!(err.contains("eval-prefix.json") && err.contains("never overwritten"), "{err}");
    let g = lab::gates_run(&dir, 4, 0, &mut |_, _| {}, &Stop::never()).unwrap().expect("w4s4 has gates");
    assert_eq!(g.snapshots.iter().map(|s| s.step).collect::<Vec<_>>(), vec![0, 8, 16, 24], "snapshots from step 0 on");
    for s in &g.snapshots {
        assert_eq!(s.gates.len(), 2 * 2, "key and value gate of one head in each of 2 layers");
        for x in &s.gates {
            assert!(x.static_concentration >= 1.0 - 1e-9 && x.static_concentration <= 4.0 + 1e-9);
            assert!(x.input_concentration >= 1.0 - 1e-9 && x.input_concentration <= 4.0 + 1e-9);
            assert!((x.profile.iter().sum::<f64>() - 1.0).abs() < 1e-5);
        }
    }
    let k = lab::knockout_run(
        &dir,
        Protocol::InSequence,
        2,
        2,
        0,
        Intervention::KvHead,
        lab::Scope::All,
        &mut |_, _| {},
        &Stop::never(),
    )
    .unwrap();
    assert_eq!(k.map.rows.len(), 2);
    // §8.9's window-slot knockout: layers x W rows, each with its per-prompt outcomes, the
    // prompts' ids and groups once; asking the same file for another intervention is refused.
    let err = lab::knockout_run(
        &dir,
        Protocol::InSequence,
        2,
        2,
        0,
        Intervention::WindowSlot,
        lab::Scope::All,
        &mut |_, _| {},
        &Stop::never(),
    );
    let err = err.unwrap_err().to_string();
    assert!(err.contains("knockout-in-sequence.json") && err.contains("never overwritten"), "{err}");
    let ks = lab::knockout_run(
        &dir,
        Protocol::Prefix,
        2,
        2,
        0,
        Intervention::WindowSlot,
        lab::Scope::All,
        &mut |_, _| {},
        &Stop::never(),
    )
    .unwrap();
    assert_eq!(ks.map.intervention, Intervention::WindowSlot);
    let prompts = ks.map.ids.len();
    assert_eq!(prompts, 2 * tiny("w4s4").task.residue_modulus, "every prompt once");
    assert_eq!((ks.map.prompt_groups.len(), ks.map.clean_correct.len()), (prompts, prompts));
    let labels: Vec<String> = ks.map.rows.iter().map(|r| r.label()).collect();
    let want: Vec<String> = (0..2).flat_map(|l| (0..4).map(move |i| format!("L{l}.S{i}"))).collect();
    assert_eq!(labels, want, "2 layers x W = 4 slots");
    for r in &ks.map.rows {
        assert_eq!(r.knocked.len(), prompts, "{}", r.label());
        let correct = r.knocked.chars().filter(|&c| c == '1').count();
        assert_eq!(correct, r.groups.iter().map(|g| g.correct).sum::<usize>(), "{}: bits agree with groups", r.label());
        assert!(r.replaced_entries.is_some_and(|m| m > 0));
    }
    for r in &k.map.rows {
        assert!(r.slot.is_none() && r.knocked.len() == k.map.ids.len(), "{}", r.label());
    }
    let csv = std::fs::read_to_string(dir.join("knockout-prefix.csv")).unwrap();
    assert!(csv.starts_with("layer,head,slot,group,"), "{csv}");
    assert!(dir.join("knockout-in-sequence.png").exists() && dir.join("gates-trajectory.svg").exists());
    let csv = std::fs::read_to_string(dir.join("gates.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 4 * 4, "a header and one line per gate and snapshot");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn phasekv() -> Command {
    Command::new(env!("CARGO_BIN_EXE_phasekv"))
}

#[test]
fn audit_round_trip_through_the_cli() {
    let dir = tmp_dir("audit");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.json");
    std::fs::write(&config, serde_json::to_string(&tiny("full")).unwrap()).unwrap();
    let prompts = dir.join("prompts.jsonl");
    let out = phasekv()
        .args(["audit", "export", "--protocol", "in-sequence", "--samples", "10", "--filler", "um"])
        .arg("--config")
        .arg(&config)
        .arg("--out")
        .arg(&prompts)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&prompts).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 40);
    for l in &lines {
        let toks = l["tokens"].as_array().unwrap();
        assert_eq!(toks.len(), l["answer_pos"].as_u64().unwrap() as usize);
        assert!(l["text"].as_str().unwrap().contains("um") || l["target_pos"].as_u64().unwrap() < 3);
        assert!(l["answer_text"].as_str().unwrap().starts_with('v'));
    }
    // An "external model" that is right exactly on even groups: the analysis must see period 2.
    let mut results = String::new();
    for l in &lines {
        let g = l["group"].as_u64().unwrap();
        results.push_str(&format!("{{\"id\": {}, \"group\": {g}, \"correct\": {}}}\n", l["id"], g % 2 == 0));
    }
    let res = dir.join("results.jsonl");
    std::fs::write(&res, results).unwrap();
    let report = dir.join("audit");
    let out =
        phasekv().args(["audit", "analyze", "--modulus", "4"]).arg(&res).arg("--out").arg(&report).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("profile.json")).unwrap()).unwrap();
    assert_eq!(p["max_gap_pp"].as_f64().unwrap(), 100.0);
    assert_eq!(p["period"]["period"].as_u64(), Some(2));
    assert!(report.join("phase.png").exists() && report.join("groups.csv").exists());
    // The export is never overwritten.
    let again = phasekv().args(["audit", "export", "--out"]).arg(&prompts).output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn malformed_results_are_reported_with_their_line_number() {
    let cases = [
        ("{\"group\": 1, \"correct\": true}\n{\"correct\": true}\n", "line 2: group"),
        ("{\"group\": \"3\", \"correct\": true}\n", "line 1: group"),
        ("{\"group\": 1, \"correct\": true}\n\n{\"group\": 30, \"correct\": true}\n", "line 3: group"),
        ("{\"group\": 1, \"correct\": \"yes\"}\n", "line 1: correct"),
        ("{\"group\": 1}\n", "line 1: correct"),
        ("{\"group\": 1, \"prob\": 1.5}\n", "line 1: prob"),
        ("{\"group\": 1, \"correct\": true, \"predicted\": 8}\n", "line 1: predicted"),
        ("{\"group\": 1, \"correct\": true}\n{\"group\": 2, \"correct\": tru\n", "line 2: JSON"),
        ("[1, 2]\n", "line 1"),
        ("", "no result lines"),
    ];
    for (text, want) in cases {
        let e = parse_results(text, 24).unwrap_err().to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
    let ok = parse_results("{\"group\": 3, \"prob\": 0.7, \"extra\": 1}\n{\"group\": 3, \"prob\": 0.2}\n", 24).unwrap();
    assert_eq!(ok.iter().map(|o| o.correct).collect::<Vec<_>>(), vec![true, false]);
    // An external model's answer is read as given (the flip rate compares it, theory/flip-rate.md).
    let answered = parse_results("{\"group\": 3, \"correct\": true, \"predicted\": \"32\"}\n", 24).unwrap();
    assert_eq!(answered[0].predicted.as_deref(), Some("32"));
    // Through the CLI: one error line with the line number, exit status 2.
    let dir = tmp_dir("badjsonl");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.jsonl");
    std::fs::write(&f, "{\"group\": 1, \"correct\": true}\n{\"group\": 99, \"correct\": true}\n").unwrap();
    let out = phasekv().args(["audit", "analyze"]).arg(&f).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("line 2") && err.contains("unknown group 99"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn export_text_follows_the_templates() {
    let task = tiny("full").task;
    let prompts = protocol::generate(&task, Protocol::Prefix, 1, 0).unwrap();
    let tpl = TextTemplate { filler: "x".into(), record: "<{key}={value}>".into(), query: "{key}=?".into() };
    let text = export_jsonl(&task, Protocol::Prefix, &prompts, &tpl).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let t = first["text"].as_str().unwrap();
    assert_eq!(t.matches('<').count(), task.n_records, "{t}");
    assert!(t.ends_with("=?"), "the scored query ends the text unanswered: {t}");
    let bad = TextTemplate { record: "{key}".into(), ..TextTemplate::default() };
    assert!(export_jsonl(&task, Protocol::Prefix, &prompts, &bad).unwrap_err().to_string().contains("{value}"));
}

/// `audit analyze --export --stride` applies the pre-registered depth-controlled phase test
/// with positions from the export (issue 17, item 8): results whose correctness depends only on
/// the key-to-query distance show no phase effect, a planted one (phase 0 of S = 4 correct 25 pp
/// less often) is found. Outcomes are drawn with a fixed hash of the prompt id (seeded).
#[test]
fn audit_applies_the_depth_controlled_phase_test_with_positions_from_the_export() {
    let dir = tmp_dir("audit-depth");
    std::fs::create_dir_all(&dir).unwrap();
    let prompts = dir.join("prompts.jsonl");
    let out = phasekv()
        .args(["audit", "export", "--protocol", "in-sequence", "--samples", "60", "--out"])
        .arg(&prompts)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&prompts).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // A uniform draw in [0, 1) from the prompt id and a salt (splitmix64).
    let uniform = |id: u64, salt: u64| {
        let mut z = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as f64 / 2f64.powi(64)
    };
    let analyse = |label: &str, p_correct: &dyn Fn(u64, u64) -> f64| {
        let mut results = String::new();
        for l in &lines {
            let (id, g) = (l["id"].as_u64().unwrap(), l["group"].as_u64().unwrap());
            let (t, q) = (l["target_pos"].as_u64().unwrap(), l["query_pos"].as_u64().unwrap());
            let correct = uniform(id, 7) < p_correct(q - t, t);
            results.push_str(&format!("{{\"id\": {id}, \"group\": {g}, \"correct\": {correct}}}\n"));
        }
        let res = dir.join(format!("{label}.jsonl"));
        std::fs::write(&res, results).unwrap();
        let report = dir.join(label);
        let out = phasekv()
            .args(["audit", "analyze", "--modulus", "24", "--stride", "4", "--export"])
            .arg(&prompts)
            .arg(&res)
            .arg("--out")
            .arg(&report)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("depth-controlled phase test (pre-registered, S = 4)"), "{stdout}");
        let st: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(report.join("statistics.json")).unwrap()).unwrap();
        let t = &st["phase_test"];
        assert_eq!(t["n"].as_u64(), Some(lines.len() as u64));
        t["p"]["value"].as_f64().unwrap_or_else(|| panic!("{t}"))
    };
    // Depth only: accuracy falls smoothly from about 95 % to 60 % with the key-to-query distance.
    let p_depth = analyse("depth-only", &|depth, _| 0.95 - 0.35 * (depth as f64 / 90.0).min(1.0));
    eprintln!("depth-only p = {p_depth}");
    assert!(p_depth > 0.01, "a depth-only model must not show a phase effect: p = {p_depth}");
    // The same plus a planted phase effect at the kernel's stride.
    let p_phase = analyse("planted", &|depth, t| {
        0.95 - 0.35 * (depth as f64 / 90.0).min(1.0) - if t % 4 == 0 { 0.25 } else { 0.0 }
    });
    eprintln!("planted p = {p_phase}");
    assert!(p_phase < 1e-3, "a planted 25 pp phase effect must be found: p = {p_phase}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The evaluation protocols on issue 17's task (query block after the records, first query
/// scored) are phase families: every group the same size, the scored query the target, the
/// depth distributions equal (largest CDF difference 0, so the balance agrees), the
/// elimination-only reader at chance, every layout a training layout, and a knockout's
/// reference set has exactly the prompt's layout. On the default task the same depth check
/// is computed (and reported by `eval`) for the moment-matched protocols.
#[test]
fn the_protocols_on_the_phase_family_task_have_equal_depth_distributions() {
    use phasekv::task::{layout, QueryPlacement, ScoredQuery};
    let task = TaskConfig {
        query_placement: QueryPlacement::AfterRecords,
        max_tail: 8,
        scored_query: ScoredQuery::First,
        ..TaskConfig::default()
    };
    let m = task.residue_modulus;
    for proto in Protocol::ALL {
        let prompts = protocol::generate(&task, proto, 30, 3).unwrap();
        assert_eq!(prompts, protocol::generate(&task, proto, 30, 3).unwrap(), "same seed, same prompts");
        assert_eq!(prompts.len(), 30 * m);
        let balance = protocol::balance(&prompts, m);
        assert_eq!(balance.depth_cdf_gap, Some(0.0), "{proto:?}");
        assert!(balance.agrees());
        assert!(balance.groups.iter().all(|g| g.n == 30));
        let samples: Vec<_> = prompts.iter().map(|p| p.sample.clone()).collect();
        assert_eq!(layout::max_depth_cdf_gap(&task, &samples), 0.0);
        assert_eq!(layout::elimination_baseline(&task, &samples), task.chance_in_context());
        for (i, p) in prompts.iter().enumerate() {
            assert_eq!(p.id, i);
            assert_eq!(p.target_pos % m, p.group);
            assert_eq!(p.target().source_key_pos, p.target_pos);
            assert_eq!(p.scored, 0, "the first query is scored");
            assert!(task.layout_probability(&p.sample) > 0.0, "prompt {i} is not a training layout");
        }
        let p = &prompts[7 * 30 + 4];
        for s in protocol::same_layout(&task, p, 3, 9).unwrap() {
            assert_eq!(s.record_positions, p.sample.record_positions);
            assert_eq!(s.queries.iter().map(|q| q.query_pos).min(), p.sample.queries.iter().map(|q| q.query_pos).min());
        }
    }
    // The first run's moment-matched protocols: the same check, recorded, and far from 0.
    let old = TaskConfig::default();
    for proto in Protocol::ALL {
        let prompts = protocol::generate(&old, proto, 30, 3).unwrap();
        let gap = protocol::balance(&prompts, old.residue_modulus).depth_cdf_gap.unwrap();
        let samples: Vec<_> = prompts.iter().map(|p| p.sample.clone()).collect();
        assert_eq!(gap, layout::max_depth_cdf_gap(&old, &samples));
        eprintln!("default task, {}: largest depth-CDF difference {gap:.3}", proto.name());
        assert!(gap > 0.1, "{proto:?}: {gap}");
    }
}

/// E7's instrument (`analysis::gates::Reads`): what a head reads from each offset is the gate
/// times the norm of the slot's projection, per channel. Every read profile is a distribution
/// over the `W` offsets with its effective number in `[1, W]`; an offset whose key projection is
/// zero is not read by the key branch at all, although its gate weight is not zero.
#[test]
fn reads_weigh_the_gate_by_the_projected_norm() {
    use phasekv::analysis::gates::{gate_stats, gate_stats_batched, Branch};
    use phasekv::stop::Stop;
    let never = Stop::never();
    let cfg = tiny("w4s4");
    let m = Model::new(&cfg, &candle_core::Device::Cpu).unwrap();
    let samples: Vec<_> = (0..4).flat_map(|s| cfg.task.batch(2, s, 4)).collect();
    let w = 4;
    let before = gate_stats(&m.decoder, &samples, &never).unwrap();
    // The batch size of the forward passes changes no number (16 sequences: 1 at a time, the
    // default, all at once).
    for batch in [1, samples.len()] {
        assert_eq!(gate_stats_batched(&m.decoder, &samples, batch, &never).unwrap(), before, "batch {batch}");
    }
    // A requested stop ends it before any forward pass, naming the step.
    let stopped = Stop::when(|| true);
    let e = gate_stats(&m.decoder, &samples, &stopped).unwrap_err().to_string();
    assert!(e.contains("gates"), "{e}");
    assert!(!before.is_empty());
    for g in &before {
        let r = g.reads.as_ref().expect("reads of a compressed layer");
        assert_eq!(r.profile.len(), w);
        assert!((r.profile.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{:?}", r.profile);
        assert!(r.static_offsets >= 1.0 - 1e-9 && r.static_offsets <= w as f64 + 1e-9);
        assert!(r.input_offsets >= 1.0 - 1e-9 && r.input_offsets <= r.static_offsets + 1e-9);
    }
    // Zero the key projection of offset 0's group (w4s4 has one group per offset) in layer 0.
    for (name, var) in m.store.vars() {
        if name == "layer0.attn.kernel.proj_k" {
            let t = var.as_tensor();
            let rest = t.narrow(0, 1, t.dim(0).unwrap() - 1).unwrap();
            let zero = t.narrow(0, 0, 1).unwrap().zeros_like().unwrap();
            var.set(&candle_core::Tensor::cat(&[&zero, &rest], 0).unwrap()).unwrap();
        }
    }
    let after = gate_stats(&m.decoder, &samples, &never).unwrap();
    let key0: Vec<_> = after.iter().filter(|g| g.layer == 0 && g.branch == Branch::Key).collect();
    assert!(!key0.is_empty());
    for g in key0 {
        assert!(g.profile[0] > 0.0, "the gate still weighs offset 0");
        assert_eq!(g.reads.as_ref().unwrap().profile[0], 0.0, "a zero projection is not read");
    }
}

/// E7's pieces: a head's drift is the larger fall of its branches' static effective read
/// offsets from the first snapshot to the last, with each branch's peak read offset; a head is
/// dead when its knockout changes no cell of any map.
#[test]
fn head_drifts_and_dead_heads_follow_their_definitions() {
    use phasekv::analysis::eval::{dead_heads, KnockoutMap, KnockoutRow};
    use phasekv::analysis::gates::{head_drifts, Branch, GateSnapshot, GateStats, Reads};
    use phasekv::analysis::stats::GroupAccuracy;
    let stats = |branch, s: f64, peak: usize| GateStats {
        layer: 0,
        head: 1,
        branch,
        static_concentration: 8.0,
        input_concentration: 8.0,
        profile: vec![0.125; 8],
        windows: 10,
        reads: Some(Reads {
            static_offsets: s,
            input_offsets: 1.0,
            profile: (0..8).map(|i| if i == peak { 0.3 } else { 0.1 }).collect(),
        }),
    };
    let snaps = vec![
        GateSnapshot { step: 0, gates: vec![stats(Branch::Key, 7.0, 0), stats(Branch::Value, 6.0, 0)] },
        GateSnapshot { step: 100, gates: vec![stats(Branch::Key, 5.5, 2), stats(Branch::Value, 6.5, 3)] },
    ];
    let d = head_drifts(&snaps);
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].layer, d[0].head, d[0].key_peak, d[0].value_peak), (0, 1, 2, Some(3)));
    assert!((d[0].drift - 1.5).abs() < 1e-12);
    let no_reads: Vec<GateSnapshot> = snaps
        .iter()
        .map(|s| GateSnapshot {
            step: s.step,
            gates: s.gates.iter().map(|g| GateStats { reads: None, ..g.clone() }).collect(),
        })
        .collect();
    assert!(head_drifts(&no_reads).is_empty(), "no reads recorded: nothing to judge");

    let row = |layer, head, drop: Vec<f64>| KnockoutRow {
        layer,
        head,
        slot: None,
        replaced_entries: None,
        knocked: String::new(),
        groups: (0..drop.len()).map(|g| GroupAccuracy::new(g, 10, 10)).collect(),
        mean_drop_pp: drop.iter().sum::<f64>() / drop.len() as f64,
        drop_pp: drop,
    };
    let map = |rows| KnockoutMap {
        intervention: Intervention::KvHead,
        ids: vec![],
        prompt_groups: vec![],
        clean_correct: String::new(),
        modulus: 3,
        reference: 2,
        replaced_entries: 5,
        clean: (0..3).map(|g| GroupAccuracy::new(g, 10, 10)).collect(),
        rows,
    };
    let a = map(vec![row(0, 0, vec![0.0, 5.0, 0.0]), row(1, 0, vec![0.0; 3]), row(1, 1, vec![0.0; 3])]);
    let b = map(vec![row(0, 0, vec![0.0; 3]), row(1, 0, vec![0.0; 3]), row(1, 1, vec![0.0, -10.0, 0.0])]);
    assert_eq!(dead_heads(&[&a], 0.0), vec![(1, 0), (1, 1)]);
    assert_eq!(dead_heads(&[&a, &b], 0.0), vec![(1, 0)], "a gain is not dead either");
}
