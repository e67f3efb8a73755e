//! `phasekv report` and `phasekv reproduce` (issue 6): the ledger is rebuilt from a fixture run
//! set, each verdict follows the data (flipping the data flips it), and sharded reproductions
//! merge to the same ledger as one run.

use phasekv::analysis::gates::{Branch, GateSnapshot, GateStats, Reads};
use phasekv::analysis::phase::{self, Outcome};
use phasekv::analysis::protocol::{Balance, Protocol};
use phasekv::kernel::KernelSpec;
use phasekv::lab::{EvalResult, GatesResult, KnockoutResult, LabSettings};
use phasekv::report::ledger::{
    build_report, build_report_with, render_ledger, Claim, Ledger, ReportOptions, ReportOutcome, Verdict, LEDGER,
};
use phasekv::reproduce::{self, InvariantRow, KernelsResult, Plan, Scale, TheoryResult};
use phasekv::theory::flow::FlowSummary;
use std::path::{Path, PathBuf};

use crate::common;

const M: usize = 24;
const N: usize = 60;

fn tmp_dir(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("phasekv-report-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write<T: serde::Serialize>(path: &Path, v: &T) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// Copies of each (position, depth) cell: the cell's accuracy is exact to a tenth.
const COPIES: usize = 10;

/// Outcomes at every target position 24..72 (two per residue group) crossed with 8 depths,
/// `COPIES` each, the first `round(acc(group) * COPIES)` of a cell correct: accuracy depends on
/// the group alone, exactly, so a flat profile has no phase effect at all and a planted one is
/// the only effect (no randomness, so no seed).
fn outcomes(acc: impl Fn(usize) -> f64) -> Vec<Outcome> {
    let mut out = Vec::new();
    for position in M..3 * M {
        let group = position % M;
        let k = (acc(group) * COPIES as f64).round() as usize;
        for (d, depth) in (8..40).step_by(4).enumerate() {
            for j in 0..COPIES {
                // The loader's numbering: id = group x per_group + family (160 prompts a group).
                let family = (position / M - 1) * 8 * COPIES + d * COPIES + j;
                let id = group * 16 * COPIES + family;
                let (position, depth) = (Some(position), Some(depth));
                out.push(Outcome { id, group, correct: j < k, prob: None, position, depth, ..Outcome::default() });
            }
        }
    }
    out
}

fn stride(preset: &str) -> Option<usize> {
    phasekv::model::ModelConfig { preset: preset.into(), ..Default::default() }.phase_stride().unwrap()
}

/// Periodic accuracy: high on the first half of each stride, low on the rest.
fn periodic(s: usize) -> impl Fn(usize) -> f64 {
    move |g| if g % s < s / 2 { 0.95 } else { 0.4 }
}

/// `eval-<protocol>.json` and its per-prompt outcomes, accuracy `acc(group)`.
fn write_eval(dir: &Path, preset: &str, protocol: Protocol, acc: &dyn Fn(usize) -> f64) {
    let s = stride(preset);
    let outcomes = outcomes(acc);
    let profile = phase::profile(&outcomes, M, s, 0).unwrap();
    let balance = Balance { groups: vec![], mean_spread: 0.0, std_spread: 0.0, depth_cdf_gap: Some(0.0) };
    let r = EvalResult {
        preset: preset.into(),
        protocol,
        per_group: outcomes.len() / M,
        eval_seed: 0,
        arm: None,
        stride: s,
        balance,
        profile,
        statistics: None,
        elimination_baseline: None,
        run_id: None,
        depths: None,
    };
    write(&dir.join(format!("eval-{}.json", protocol.name())), &r);
    let lines: Vec<String> = outcomes.iter().map(|o| serde_json::to_string(o).unwrap()).collect();
    std::fs::write(dir.join(format!("eval-{}-outcomes.jsonl", protocol.name())), lines.join("\n") + "\n").unwrap();
}

/// A knockout map whose clean accuracy is 80 % in every group and whose two rows drop
/// `drop(group)` pp (down to 0 %).
fn write_knockout(dir: &Path, preset: &str, drop: impl Fn(usize) -> f64) {
    let map = common::knockouts::map_at_80(M, N, &[&drop, &drop]);
    write(
        &dir.join("knockout.json"),
        &KnockoutResult {
            preset: preset.into(),
            protocol: Protocol::InSequence,
            per_group: N,
            seed: 0,
            map,
            run_id: None,
            depths: None,
        },
    );
}

/// Gates whose key gate ends at `end_static` (peak at offset 2) and whose value gate ends
/// peaking at `value_peak`.
fn write_gates(dir: &Path, preset: &str, end_static: f64, value_peak: usize) {
    let gate = |s: f64, branch, peak: usize| GateStats {
        layer: 0,
        head: 0,
        branch,
        static_concentration: s,
        input_concentration: 3.0,
        profile: (0..8).map(|i| if i == peak { 0.6 } else { 0.4 / 7.0 }).collect(),
        windows: 100,
        // What the head reads follows its gate here.
        reads: Some(Reads {
            static_offsets: s,
            input_offsets: 3.0,
            profile: (0..8).map(|i| if i == peak { 0.6 } else { 0.4 / 7.0 }).collect(),
        }),
    };
    let snaps = vec![
        GateSnapshot { step: 0, gates: vec![gate(7.5, Branch::Key, 2), gate(7.5, Branch::Value, 5)] },
        GateSnapshot { step: 200, gates: vec![gate(end_static, Branch::Key, 2), gate(7.0, Branch::Value, value_peak)] },
    ];
    write(
        &dir.join("gates.json"),
        &GatesResult { preset: preset.into(), window: 8, samples: 16, seed: 0, snapshots: snaps, run_id: None },
    );
}

/// The model unit of `preset` (the first seed).
fn model(plan: &Plan, preset: &str) -> reproduce::ModelUnit {
    plan.models().unwrap().into_iter().find(|m| m.preset() == preset).unwrap()
}

fn run_dir(plan: &Plan, preset: &str) -> PathBuf {
    model(plan, preset).dir()
}

/// A finished run's `metrics.json` (97 % held-out), as the trainer writes it for `preset`
/// and `seed`.
fn write_metrics(dir: &Path, preset: &str, seed: u64) {
    write(
        &dir.join("metrics.json"),
        &serde_json::json!({
            "preset": preset, "seed": seed, "steps": 2500, "best_accuracy": 0.97, "chance_in_context": 0.125,
            "train_seconds": 300.0, "tokens_per_second": 1e4, "parameters": 1000,
            "final_eval": {"step": 2500, "loss": 0.1, "accuracy": 0.97, "token_accuracy": 0.97, "queries": 100},
            "evals": [{"step": 2500, "loss": 0.1, "accuracy": 0.97, "token_accuracy": 0.97, "queries": 100}]
        }),
    );
}

/// Records the provenance manifest of a hand-made run, after the report's loader checked it
/// (`phasekv analyze manifest`), as a finished run of the trainer carries one.
fn seal(dir: &Path) {
    phasekv::reproduce::write_manifest(dir).unwrap();
}

/// The report of `dir` after the test edited its runs by hand: each run's manifest is written
/// again through the documented path (the loader's checks, then `analyze manifest`).
fn rebuild(dir: &Path) -> phasekv::Result<Vec<Claim>> {
    if let Ok(runs) = std::fs::read_dir(dir.join("runs")) {
        for run in runs.map(|r| r.unwrap().path()).filter(|p| p.is_dir()) {
            let _ = std::fs::remove_file(run.join("manifest.json"));
            seal(&run);
        }
    }
    build_report(std::slice::from_ref(&dir.to_path_buf()), dir)
}

fn write_run(out: &Path, plan: &Plan, preset: &str) {
    let dir = out.join(run_dir(plan, preset));
    let config = model(plan, preset).config;
    write(&dir.join("config.json"), &config);
    write_metrics(&dir, preset, config.train.seed);
    if preset == "full" {
        for p in Protocol::ALL {
            write_eval(&dir, preset, p, &|_| 0.9);
        }
        write_knockout(&dir, preset, |_| 50.0);
    } else {
        let s = stride(preset).unwrap();
        for p in Protocol::ALL {
            write_eval(&dir, preset, p, &periodic(s));
        }
        write_knockout(&dir, preset, move |g| if g % s < s / 2 { 80.0 } else { 0.0 });
        write_gates(&dir, preset, 2.0, 3);
    }
    seal(&dir);
}

/// The first pre-registration's plan (`plans/v1.json`, judged by the v1 rules), which these
/// fixtures were built on; the v2 rules have their own tests (`tests/ledger_v2.rs`).
fn v1_plan() -> Plan {
    Plan::from_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("plans/v1.json")).unwrap()
}

/// A complete fixture: every claim's data present and supporting it.
fn fixture(out: &Path) -> Plan {
    let plan = v1_plan();
    write(&out.join("plan.json"), &plan);
    for p in &plan.presets {
        write_run(out, &plan, p);
    }
    write(
        &out.join("theory/theory.json"),
        &TheoryResult {
            t1_verdict: phasekv::theory::oracle::PointVerdict::Holds,
            t1_f1: 3.3,
            t1_best_loss: 3.3,
            t1_restarts: 10,
            diagram: "beta\\gamma  0.5    1\n      0.25    +    k\n         1    g    +\n".into(),
            diagram_agree: (48, 48),
            t2: FlowSummary {
                runs: 64,
                converged_fraction: 1.0,
                median_t_conv: Some(400.0),
                t_conv_range: Some((300.0, 500.0)),
                coincide_fraction: 0.2,
                offset_counts: vec![10, 10, 10],
                max_content_norm: 0.0,
            },
            t2_curves: vec![],
            seconds: 2.0,
        },
    );
    let rows = ["w8s4", "full"]
        .iter()
        .flat_map(|p| {
            (1..=13).map(move |k| InvariantRow {
                preset: p.to_string(),
                implementation: "reference-f64".into(),
                invariant: format!("K{k}"),
                status: reproduce::InvariantStatus::Pass,
                cases_passed: 4,
                failure: None,
            })
        })
        .collect();
    write(&out.join("kernels/kernels.json"), &KernelsResult { cases: 4, rows, seconds: 1.0 });
    plan
}

fn verdict(claims: &[Claim], id: &str) -> Verdict {
    claims.iter().find(|c| c.id == id).unwrap_or_else(|| panic!("no claim {id}")).verdict
}

#[test]
fn the_ledger_is_rebuilt_from_a_fixture_and_every_verdict_follows_the_data() {
    let dir = tmp_dir("fixture");
    let plan = fixture(&dir);
    let claims = rebuild(&dir).unwrap();
    let ids: Vec<&str> = claims.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["T1", "T2", "E1", "E2", "E3", "E4", "E5", "E6", "E7", "E8", "E9", "E10", "X1", "K"]);
    for c in &claims {
        // The v2 claims' arms (w8s4-scalar, w8s4-tied, dsv4-csa, the staggered arms) are not
        // in the v1 plan.
        if ["E8", "E9", "E10", "X1"].contains(&c.id.as_str()) {
            assert_eq!(c.verdict, Verdict::NotRun, "{}: {}", c.id, c.measured);
            assert!(c.measured.starts_with("no data yet"), "{}: {}", c.id, c.measured);
            continue;
        }
        assert_eq!(c.verdict, Verdict::Reproduced, "{}: {}", c.id, c.measured);
        for f in c.figures.iter().chain(&c.data) {
            assert!(dir.join(f).exists(), "{}: linked file {f} missing", c.id);
        }
    }
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(readme.contains("| [E4](#e4) |") && readme.contains("**reproduced**"));
    assert!(readme.contains("figures/phase-prefix.png") && dir.join("figures/phase-prefix.svg").exists());
    // T1 and T2 draw their own figures from theory.json, and the README lists them.
    for f in ["figures/t1-phase-diagram", "figures/t2-offsets"] {
        assert!(dir.join(format!("{f}.svg")).exists() && readme.contains(&format!("[{f}.png]({f}.png)")), "{f}");
    }
    let ledger: Ledger = serde_json::from_str(&std::fs::read_to_string(dir.join("ledger.json")).unwrap()).unwrap();
    assert_eq!(ledger.claims, claims);
    // The ledger part of the README renders from ledger.json alone.
    assert!(readme.contains(&render_ledger(&ledger)), "README's ledger is not render_ledger(ledger.json)");
    // Every number is structured: each phase claim records its deciding tests with per-seed p.
    for id in ["E1", "E2", "E3", "E4", "E5"] {
        let cl = claims.iter().find(|c| c.id == id).unwrap();
        assert!(cl.tests.iter().any(|t| t.decides && !t.seeds.is_empty()), "{id}: no deciding test recorded");
        assert!(!cl.arms.is_empty() && !cl.ours.is_empty() && !cl.paper.is_empty(), "{id}");
    }

    // Flip the data, one claim at a time. E1 decides on the in-sequence protocol, E5 on prefix
    // (theory/phase-lab.md §7.5).
    let full = dir.join(run_dir(&plan, "full"));
    write_eval(&full, "full", Protocol::Prefix, &periodic(4));
    let c = rebuild(&dir).unwrap();
    assert_eq!(verdict(&c, "E5"), Verdict::NotReproduced, "a large baseline prefix gap breaks E5");
    assert_eq!(verdict(&c, "E1"), Verdict::Reproduced, "E1 is decided in-sequence");
    write_eval(&full, "full", Protocol::Prefix, &|_| 0.9);
    write_eval(&full, "full", Protocol::InSequence, &periodic(4));
    let c = rebuild(&dir).unwrap();
    assert_eq!(verdict(&c, "E1"), Verdict::NotReproduced, "a periodic baseline breaks E1");
    assert_eq!(verdict(&c, "E2"), Verdict::Reproduced);
    write_eval(&full, "full", Protocol::InSequence, &|_| 0.9);

    let w8s6 = dir.join(run_dir(&plan, "w8s6"));
    for p in Protocol::ALL {
        write_eval(&w8s6, "w8s6", p, &periodic(4)); // period 4 where the stride is 6
    }
    assert_eq!(verdict(&rebuild(&dir).unwrap(), "E2"), Verdict::NotReproduced);
    std::fs::remove_dir_all(&w8s6).unwrap();
    let c = rebuild(&dir).unwrap();
    assert_eq!(verdict(&c, "E2"), Verdict::NotRun, "a missing model is 'not run'");

    // E4: a flat w8s8 has no effect; one phase 10 pp low is an effect smaller than half the
    // paper's 50 pp spread.
    let w8s8 = dir.join(run_dir(&plan, "w8s8"));
    for p in Protocol::ALL {
        write_eval(&w8s8, "w8s8", p, &|_| 0.9);
    }
    assert_eq!(verdict(&rebuild(&dir).unwrap(), "E4"), Verdict::NotReproduced);
    for p in Protocol::ALL {
        write_eval(&w8s8, "w8s8", p, &|g| if g % 8 == 7 { 0.8 } else { 0.9 });
    }
    let c = rebuild(&dir).unwrap();
    assert_eq!(verdict(&c, "E4"), Verdict::ReproducedSmaller, "{}", c[5].measured);

    write_knockout(&dir.join(run_dir(&plan, "full")), "full", |g| if g % 4 == 0 { 90.0 } else { 0.0 });
    assert_eq!(verdict(&rebuild(&dir).unwrap(), "E6"), Verdict::NotReproduced);

    for p in ["w8s4", "w8s8", "w8s4-norope", "w8s4-uniform"] {
        write_gates(&dir.join(run_dir(&plan, p)), p, 2.0, 5);
    }
    let c = rebuild(&dir).unwrap();
    assert_eq!(verdict(&c, "E7"), Verdict::NotReproduced, "drift without a value gate one offset after its key gate");
    for p in ["w8s4", "w8s8", "w8s4-norope", "w8s4-uniform"] {
        write_gates(&dir.join(run_dir(&plan, p)), p, 7.4, 3);
    }
    assert_eq!(verdict(&rebuild(&dir).unwrap(), "E7"), Verdict::NotReproduced);

    let mut t: TheoryResult = phasekv::lab::read_json(&dir.join("theory/theory.json")).unwrap();
    t.t2.converged_fraction = 0.5;
    t.t1_verdict = phasekv::theory::oracle::PointVerdict::Beaten;
    write(&dir.join("theory/theory.json"), &t);
    let c = rebuild(&dir).unwrap();
    assert_eq!((verdict(&c, "T1"), verdict(&c, "T2")), (Verdict::NotReproduced, Verdict::NotReproduced));
    // A diagram that is not the text layout of the phase diagram is one clear error, no panic.
    t.diagram = "beta\\gamma 1 2\n 0.5 + x\n".into();
    write(&dir.join("theory/theory.json"), &t);
    let err = rebuild(&dir).unwrap_err().to_string();
    assert!(err.contains("diagram") && err.contains("\"x\""), "{err}");
    t.diagram = "beta\\gamma 1 2\n 0.5 + g\n".into();
    write(&dir.join("theory/theory.json"), &t);

    let mut k: KernelsResult = phasekv::lab::read_json(&dir.join("kernels/kernels.json")).unwrap();
    k.rows[3].status = reproduce::InvariantStatus::Fail;
    write(&dir.join("kernels/kernels.json"), &k);
    assert_eq!(verdict(&rebuild(&dir).unwrap(), "K"), Verdict::NotReproduced);

    // Runs evaluated before per-prompt outcomes were written (the first committed run) still
    // render: the phase claims say what is missing, E6 needs only the knockout maps.
    for run in std::fs::read_dir(dir.join("runs")).unwrap().map(|r| r.unwrap().path()) {
        for p in Protocol::ALL {
            let _ = std::fs::remove_file(run.join(format!("eval-{}-outcomes.jsonl", p.name())));
        }
    }
    let c = rebuild(&dir).unwrap();
    for id in ["E1", "E2", "E3", "E4", "E5"] {
        let cl = c.iter().find(|x| x.id == id).unwrap();
        assert_eq!(cl.verdict, Verdict::NotRun, "{id}: {}", cl.measured);
        assert!(cl.measured.contains("not testable: no per-prompt outcomes; rerun eval"), "{id}: {}", cl.measured);
    }
    assert_eq!(verdict(&c, "E6"), Verdict::NotReproduced, "E6 still reads the knockout maps");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A plan of full attention and w8s4 with three seeds each; w8s4's seed `k` has accuracy
/// `w8s4(k, group)` under both protocols, full attention is flat at 90 %. Returns E1 and, when
/// `readme`, the report's README.
fn seeded_e1(label: &str, readme: bool, w8s4: impl Fn(usize, usize) -> f64) -> (Claim, String) {
    let dir = tmp_dir(label);
    let mut plan = v1_plan();
    plan.presets = vec!["full".into(), "w8s4".into()];
    plan.seeds = vec![0, 1, 2];
    write(&dir.join("plan.json"), &plan);
    for unit in plan.models().unwrap() {
        let run = dir.join(unit.dir());
        write(&run.join("config.json"), &unit.config);
        let k = plan.seeds.iter().position(|&s| s == unit.seed).unwrap();
        for p in Protocol::ALL {
            if unit.preset() == "full" {
                write_eval(&run, "full", p, &|_| 0.9);
            } else {
                write_eval(&run, unit.preset(), p, &|g| w8s4(k, g));
            }
        }
        write_metrics(&run, unit.preset(), unit.seed);
        seal(&run);
    }
    let collected = phasekv::report::ledger::collect(std::slice::from_ref(&dir)).unwrap();
    let e1 = LEDGER.iter().map(|l| l.check(&collected)).find(|c| c.id == "E1").unwrap();
    let text = if readme {
        build_partial(&dir, &dir.join("out")).unwrap();
        std::fs::read_to_string(dir.join("out/README.md")).unwrap()
    } else {
        String::new()
    };
    std::fs::remove_dir_all(&dir).unwrap();
    (e1, text)
}

/// The report of a fixture whose runs have evaluations but no `metrics.json` (unfinished, so
/// only a partial report takes them).
fn build_partial(from: &Path, out: &Path) -> phasekv::Result<Vec<Claim>> {
    let opts = ReportOptions { partial: true, ..Default::default() };
    match build_report_with(&[from.to_path_buf()], out, &opts)? {
        ReportOutcome::Written(claims) => Ok(claims),
        ReportOutcome::Stopped => unreachable!("nothing stops it"),
    }
}

/// One phase of `S = 4` 25 pp below the others.
fn planted(g: usize) -> f64 {
    if g % 4 == 1 {
        0.65
    } else {
        0.9
    }
}

#[test]
fn e1_over_three_seeds_follows_the_pooled_test_the_seed_rule_and_the_ceiling() {
    let (e1, readme) = seeded_e1("seeds-planted", true, |_, g| planted(g));
    assert_eq!(e1.verdict, Verdict::Reproduced, "{}", e1.measured);
    assert!(e1.measured.contains("pooled significant, 3/3 seeds significant (need 2)"), "{}", e1.measured);
    // The arms table: one row per arm, its seeds and their spread.
    assert!(readme.contains("### Arms over seeds") && readme.contains("| w8s4 | 0, 1, 2 |"), "{readme}");
    assert!(readme.contains("| full | 0, 1, 2 |") && readme.contains("90.0 / 90.0 / 90.0 %"), "{readme}");

    let (e1, _) = seeded_e1("seeds-flat", false, |_, _| 0.9);
    assert_eq!(e1.verdict, Verdict::NotReproduced, "{}", e1.measured);

    let (e1, _) = seeded_e1("seeds-ceiling", false, |_, _| 0.99);
    assert_eq!(e1.verdict, Verdict::NotTestableCeiling, "{}", e1.measured);
    assert!(e1.measured.contains("w8s4: at the ceiling"), "{}", e1.measured);

    // Two of three seeds with the effect satisfy the seed rule; one does not, although the
    // pooled test rejects.
    let (e1, _) = seeded_e1("seeds-two", false, |k, g| if k < 2 { planted(g) } else { 0.9 });
    assert_eq!(e1.verdict, Verdict::Reproduced, "{}", e1.measured);
    assert!(e1.measured.contains("2/3 seeds significant (need 2)"), "{}", e1.measured);
    let (e1, _) = seeded_e1("seeds-one", false, |k, g| if k < 1 { planted(g) } else { 0.9 });
    assert_eq!(e1.verdict, Verdict::NotReproduced, "{}", e1.measured);
    assert!(e1.measured.contains("pooled significant, 1/3 seeds significant (need 2)"), "{}", e1.measured);
}

#[test]
fn an_empty_run_set_gives_not_run_everywhere_and_bad_input_one_error() {
    let dir = tmp_dir("empty");
    let claims = build_report(std::slice::from_ref(&dir), &dir.join("out")).unwrap();
    assert!(claims.iter().all(|c| c.verdict == Verdict::NotRun));
    let e = build_report(&[dir.join("missing")], &dir.join("out")).unwrap_err().to_string();
    assert!(e.contains("--from") && e.contains("not a directory"), "{e}");
    assert!(reproduce::parse_shard("3/3").is_err() && reproduce::parse_shard("a/2").is_err());
    assert_eq!(reproduce::parse_shard("1/4").unwrap(), (1, 4));
    // An outcomes file with a line that is not an outcome: one error naming the file and line.
    let plan = v1_plan();
    let run = dir.join(run_dir(&plan, "w8s4"));
    write(&run.join("config.json"), &model(&plan, "w8s4").config);
    std::fs::write(run.join("eval-prefix-outcomes.jsonl"), "{\"id\": 0}\n").unwrap();
    // A full report refuses the unfinished run (no metrics.json), naming the field;
    let e = build_report(std::slice::from_ref(&dir), &dir.join("out")).unwrap_err().to_string();
    assert!(e.contains("metrics"), "{e}");
    // a partial report takes it without a manifest (none is written before the run ends), and
    // the one loader refuses its outcomes file in one error naming the file (here: without
    // its evaluation);
    let e = build_partial(&dir, &dir.join("out")).unwrap_err().to_string();
    assert!(e.contains("eval-prefix-outcomes.jsonl") && e.contains("eval-prefix.json is missing"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    // and the migration's loader refuses it the same way.
    let e = phasekv::reproduce::write_manifest(&run).unwrap_err().to_string();
    assert!(e.contains("eval-prefix-outcomes.jsonl"), "{e}");
    assert!(!run.join("manifest.json").exists(), "no manifest for corrupted data");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A plan small enough to run twice in a test: two tiny models, a few prompts, one proptest
/// case per invariant.
fn tiny_plan() -> Plan {
    let mut run = common::configs::tiny_config("full");
    run.task.residue_modulus = 4;
    run.train.steps = 6;
    run.train.batch_size = 2;
    run.train.warmup_steps = 2;
    run.train.eval_every = 6;
    run.train.eval_samples = 4;
    run.train.checkpoint_every = 3;
    Plan {
        scale: Scale::Quick,
        presets: vec!["full".into(), "w4s4".into()],
        run,
        lab: LabSettings { eval_per_group: 2, knockout_per_group: 1, knockout_reference: 2, gate_samples: 2, seed: 0 },
        t2_seeds: 2,
        kernel_cases: 1,
        arms: vec![],
        sweep: None,
        seeds: vec![],
        theory: true,
        kernels: true,
        minutes: Default::default(),
        rules: Default::default(),
        depth_floor: None,
        cut: None,
    }
}

struct Quiet(phasekv::model::train::Silent);
impl reproduce::Progress for Quiet {
    fn message(&mut self, _: &str) {}
    fn trainer(&mut self) -> &mut dyn phasekv::model::train::Observer {
        &mut self.0
    }
    fn step(&mut self, _: &str, _: usize, _: usize) {}
}

/// Runs the units; returns which of them did work.
fn run_units(out: &Path, plan: &Plan, units: &[reproduce::Unit]) -> Vec<bool> {
    reproduce::write_plan(out, plan).unwrap();
    units
        .iter()
        .map(|u| reproduce::run_unit(out, plan, u, &mut Quiet(phasekv::model::train::Silent)).unwrap())
        .collect()
}

#[test]
fn sharded_reproductions_merge_to_the_ledger_of_one_run() {
    let dir = tmp_dir("shards");
    let plan = tiny_plan();
    let units = plan.units().unwrap();
    let single = dir.join("single");
    assert!(run_units(&single, &plan, &units).iter().all(|&w| w));
    // The kernel table: one row per grid, path and invariant, each path named for what ran; a
    // staggered preset has a grid per offset its heads sit on in the default model shape
    // (`NAME@o{k}` beside `NAME`), as `kernel check` runs them.
    let k: KernelsResult = phasekv::lab::read_json(&single.join("kernels/kernels.json")).unwrap();
    let mut paths: Vec<&str> = k.rows.iter().map(|r| r.implementation.as_str()).collect();
    paths.dedup();
    let shape = phasekv::model::config::ModelConfig::default();
    let grids: Vec<String> = phasekv::kernel::spec::preset_names()
        .iter()
        .flat_map(|n| KernelSpec::preset(n).unwrap().head_kernels(shape.n_layer, shape.n_kv_head).unwrap())
        .map(|g| g.grid_label())
        .collect();
    assert!(grids.iter().any(|g| g.contains("@o")), "the staggered presets' other grids are listed");
    let one = ["reference-f64", "candle-autodiff-f32-cpu", "fast-f32-cpu"];
    assert_eq!(paths, one.repeat(grids.len()), "{paths:?}");
    let mut labels: Vec<&str> = k.rows.iter().map(|r| r.preset.as_str()).collect();
    labels.dedup();
    assert_eq!(labels, grids, "rows named for their grid");
    let one = build_report(std::slice::from_ref(&single), &single).unwrap();
    let n = 3;
    let shards: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("shard{i}"))).collect();
    let mut covered = Vec::new();
    for (i, s) in shards.iter().enumerate() {
        let part = reproduce::shard(&units, i, n).unwrap();
        covered.extend(part.clone());
        let _ = run_units(s, &plan, &part);
    }
    covered.sort_by_key(|u| u.name());
    let mut all = units.clone();
    all.sort_by_key(|u| u.name());
    assert_eq!(covered, all, "shards are disjoint and cover the plan");
    let merged_dir = dir.join("merged");
    let merged = build_report(&shards, &merged_dir).unwrap();
    assert_eq!(merged, one, "sharded runs merge to the same ledger");
    assert_ne!(merged.iter().filter(|c| c.verdict == Verdict::NotRun).count(), merged.len());
    for f in [
        "figures/phase-prefix.csv",
        "figures/knockout-w4s4-in-sequence.json",
        "figures/knockout-w4s4-prefix.json",
        "figures/gates-w4s4.json",
    ] {
        assert_eq!(
            std::fs::read_to_string(single.join(f)).unwrap(),
            std::fs::read_to_string(merged_dir.join(f)).unwrap(),
            "{f} differs"
        );
    }
    // A second run of the same plan reuses everything; another plan in the same place is refused.
    assert!(run_units(&single, &plan, &units).iter().all(|&w| !w), "a rerun must reuse every unit");
    let mut other = plan.clone();
    other.t2_seeds = 3;
    let e = reproduce::write_plan(&single, &other).unwrap_err().to_string();
    assert!(e.contains("different plan"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
