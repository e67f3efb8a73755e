//! The committed `reports/` as a reader uses it (issue 31): the ledger part of its README renders
//! from `ledger.json` alone; every outcome line names its model and
//! prompt (`arm`, `preset`, training `seed`, `protocol`, `family`, `phase`) consistently with the
//! run's metadata; committed v1 results gain those columns through a deterministic, idempotent
//! upgrade (`lab::outcomes::upgrade_run`) that refuses disagreeing data; `runs/README.md`
//! documents every column; and `audit analyze` reads the files as they are.

use phasekv::analysis::phase::Outcome;
use phasekv::analysis::protocol::Protocol;
use phasekv::lab::outcomes::upgrade_run;
use phasekv::model::RunConfig;
use phasekv::report::ledger::{check_rendered, headline, render_ledger, Ledger, RenderProblem, Verdict, CELL_LIMIT};
use std::path::{Path, PathBuf};

const M: usize = 24;

fn tmp_dir(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("phasekv-report-runs-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn runs_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/runs")
}

fn run_dirs() -> Vec<PathBuf> {
    let mut d: Vec<PathBuf> =
        std::fs::read_dir(runs_root()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    d.sort();
    d
}

/// The v1 form of an outcome line: the columns written before issue 31 only.
fn v1(o: &Outcome) -> Outcome {
    Outcome {
        id: o.id,
        group: o.group,
        correct: o.correct,
        prob: o.prob,
        position: o.position,
        depth: o.depth,
        ..Outcome::default()
    }
}

/// Every committed outcome line carries every column, each agreeing with the run's
/// `config.json`, directory name and evaluation JSON: `id = group * n + family`, `phase =
/// position mod S`.
#[test]
fn committed_outcome_lines_name_their_model_and_prompt() {
    let dirs = run_dirs();
    assert!(dirs.len() >= 20, "{} run directories", dirs.len());
    let mut lines = 0;
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let config: RunConfig =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        for p in Protocol::ALL {
            let eval: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join(format!("eval-{}.json", p.name()))).unwrap())
                    .unwrap();
            assert!(eval.get("seed").is_none() && eval["eval_seed"] == 0, "{name}: eval_seed, not seed");
            assert_eq!(eval["arm"], phasekv::run_dir::arm_of(&name), "{name}");
            let n = eval["per_group"].as_u64().unwrap() as usize;
            let stride = eval["stride"].as_u64().map(|s| s as usize);
            let text = std::fs::read_to_string(dir.join(format!("eval-{}-outcomes.jsonl", p.name()))).unwrap();
            for line in text.lines() {
                let o: Outcome = serde_json::from_str(line).unwrap();
                assert_eq!(o.arm.as_deref(), Some(phasekv::run_dir::arm_of(&name)), "{name}: {line}");
                assert_eq!(o.preset.as_deref(), Some(config.model.preset.as_str()), "{name}: {line}");
                assert_eq!(o.seed, Some(config.train.seed), "{name}: {line}");
                assert_eq!(o.protocol.as_deref(), Some(p.name()), "{name}: {line}");
                assert_eq!(Some(o.id), o.family.map(|f| o.group * n + f), "{name}: {line}");
                assert!(o.family.unwrap() < n);
                assert_eq!(o.phase, stride.map(|s| o.position.unwrap() % s), "{name}: {line}");
                lines += 1;
            }
        }
    }
    assert!(lines > 100_000, "{lines} lines");
}

/// The upgrade turns a v1 outcome file into the committed one byte for byte, from the run's
/// metadata alone, and a second upgrade changes nothing; data that disagrees with the metadata
/// is refused and left as it was.
#[test]
fn the_upgrade_of_v1_results_is_deterministic_idempotent_and_refuses_disagreement() {
    let src = runs_root().join("w8s4-kv1-seed1");
    let tmp = tmp_dir("upgrade");
    let dir = tmp.join("w8s4-kv1-seed1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let committed = std::fs::read_to_string(src.join("eval-prefix-outcomes.jsonl")).unwrap();
    let old: String = committed
        .lines()
        .map(|l| serde_json::to_string(&v1(&serde_json::from_str(l).unwrap())).unwrap() + "\n")
        .collect();
    let eval_text = std::fs::read_to_string(src.join("eval-prefix.json")).unwrap();
    let mut eval: serde_json::Value = serde_json::from_str(&eval_text).unwrap();
    let old_eval = {
        let o = eval.as_object_mut().unwrap();
        o.remove("arm");
        let s = o.remove("eval_seed").unwrap();
        o.insert("seed".into(), s);
        serde_json::to_string_pretty(&eval).unwrap()
    };
    std::fs::write(dir.join("eval-prefix-outcomes.jsonl"), &old).unwrap();
    std::fs::write(dir.join("eval-prefix.json"), &old_eval).unwrap();
    let u = upgrade_run(&dir).unwrap();
    assert_eq!(u.lines, committed.lines().count());
    assert_eq!(std::fs::read_to_string(dir.join("eval-prefix-outcomes.jsonl")).unwrap(), committed);
    assert_eq!(std::fs::read_to_string(dir.join("eval-prefix.json")).unwrap(), eval_text);
    assert_eq!(upgrade_run(&dir).unwrap().files, Vec::<String>::new(), "a second upgrade changes nothing");

    // Negative controls: a line naming another arm, and an id that is not group * n + family.
    let other_arm = committed.replacen("\"arm\":\"w8s4-kv1\"", "\"arm\":\"w8s4\"", 1);
    std::fs::write(dir.join("eval-prefix-outcomes.jsonl"), &other_arm).unwrap();
    let e = upgrade_run(&dir).unwrap_err().to_string();
    assert!(e.contains("arm") && e.contains("line 1"), "{e}");
    assert_eq!(std::fs::read_to_string(dir.join("eval-prefix-outcomes.jsonl")).unwrap(), other_arm, "left as it was");
    let bad_id = old.replacen("{\"id\":0,\"group\":0", "{\"id\":9999,\"group\":0", 1);
    std::fs::write(dir.join("eval-prefix-outcomes.jsonl"), &bad_id).unwrap();
    let e = upgrade_run(&dir).unwrap_err().to_string();
    assert!(e.contains("id 9999"), "{e}");
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// `runs/README.md` documents every column an outcome line can carry (the serialised keys of
/// a line with every column), including `id = group * n + family`.
#[test]
fn the_runs_readme_documents_every_column() {
    let readme = std::fs::read_to_string(runs_root().join("README.md")).unwrap();
    let full = Outcome {
        prob: Some(0.5),
        position: Some(1),
        depth: Some(1),
        arm: Some("a".into()),
        preset: Some("p".into()),
        seed: Some(0),
        protocol: Some("prefix".into()),
        family: Some(0),
        phase: Some(0),
        predicted: Some("7 3".into()),
        ..Outcome::default()
    };
    let v = serde_json::to_value(&full).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 13);
    let documented: Vec<&str> = phasekv::report::ledger::OUTCOME_COLUMNS.iter().map(|c| c.0).collect();
    for k in &keys {
        assert!(documented.contains(&k.as_str()), "column {k} undocumented");
        assert!(readme.contains(&format!("| `{k}` |")), "column {k} not in runs/README.md");
    }
    assert!(readme.contains("id = group * n + family"));
}

/// `audit analyze` reads the suite's own outcome files (`correct` greedy, `prob` teacher-forced:
/// `correct: true` with `prob < 0.5` is legitimate) and, from their `position` and `depth`,
/// reproduces the ledger's depth-controlled test of that model (issue 31).
#[test]
fn audit_analyze_reads_a_committed_outcome_file_and_reproduces_the_ledgers_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports");
    let file = root.join("runs/w8s8-seed0/eval-in-sequence-outcomes.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let greedy_low = text
        .lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["correct"] == serde_json::json!(true) && v["prob"].as_f64().unwrap() < 0.5
        })
        .count();
    assert!(greedy_low > 0, "the file should hold correct lines with prob < 0.5, the case the audit refused");
    let dir = tmp_dir("audit-own");
    let a = phasekv::lab::audit_analyze(&file, M, Some(8), 0, &dir.join("out"), None, &phasekv::stop::Stop::never())
        .expect("audit reads it");
    let t = a.statistics.expect("positions and depths give the statistics").phase_test.expect("a stride was given");
    let ledger: Ledger = serde_json::from_str(&std::fs::read_to_string(root.join("ledger.json")).unwrap()).unwrap();
    let e4 = ledger.claims.iter().find(|c| c.id == "E4").unwrap();
    let rec = e4
        .tests
        .iter()
        .find(|t| t.decides && t.arm == "w8s8" && t.protocol == "in-sequence" && t.stride == 8)
        .expect("E4's deciding test");
    let seed0 = rec.seeds.iter().find(|s| s.seed == 0).unwrap();
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1e-300);
    assert!(close(t.p.value, seed0.p.value), "audit p {} vs ledger {}", t.p.value, seed0.p.value);
    assert!(close(t.adjusted_gap_pp, seed0.adjusted_gap_pp), "{} vs {}", t.adjusted_gap_pp, seed0.adjusted_gap_pp);
    // Negative control: another seed's file gives another test.
    let seed1 = rec.seeds.iter().find(|s| s.seed == 1).unwrap();
    assert!(!close(t.p.value, seed1.p.value));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The exact fit under separation (§8.6) on the v1 data where its LP is hardest: full attention
/// near the ceiling, prefix protocol, folded at S = 6 and 8 (185 LP rows). Before the simplex took
/// Dantzig's rule and the perceptron witness, it ran out of pivots there ("no optimum after 47600
/// pivots") and E5's baseline read "not testable: numerical failure". The file is v1's committed
/// `reports/runs/full-seed1/eval-prefix-outcomes.jsonl` (commit 52bf46b), kept as a fixture when
/// the v2 run replaced `reports/`.
#[test]
fn the_separation_fit_decides_full_attention_at_strides_6_and_8() {
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-runs/full-seed1-eval-prefix-outcomes.jsonl");
    for s in [6, 8] {
        let dir = tmp_dir(&format!("audit-sep-{s}"));
        let a =
            phasekv::lab::audit_analyze(&file, M, Some(s), 0, &dir.join("out"), None, &phasekv::stop::Stop::never())
                .unwrap_or_else(|e| panic!("S = {s}: {e}"));
        let t = a.statistics.expect("statistics").phase_test.expect("a stride was given");
        assert!(t.p.value > 0.1, "S = {s}: full attention has no phase effect here, p {}", t.p.value);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The committed report (`reports/`): its ledger part renders from its `ledger.json` alone, the
/// top table is short, every interval contains its estimate, and the banner names what a reader
/// must know first (issue 31).
#[test]
fn the_committed_ledger_renders_from_its_json_in_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports");
    let ledger: Ledger =
        serde_json::from_str(&std::fs::read_to_string(root.join("ledger.json")).unwrap()).expect("ledger.json parses");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let part = render_ledger(&ledger);
    assert!(
        readme.contains(&part),
        "reports/README.md's ledger is not render_ledger(reports/ledger.json): rerun `phasekv report`"
    );
    // The top table: one row per claim, no cell over about 200 characters.
    let table: Vec<&str> = part
        .lines()
        .skip_while(|l| !l.starts_with("| id | claim | paper |"))
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert_eq!(table.len(), 2 + ledger.claims.len(), "{table:?}");
    for row in &table {
        for cell in row.split(" | ") {
            assert!(cell.chars().count() <= 220, "top-table cell of {} chars: {cell}", cell.chars().count());
        }
    }
    // Every magnitude's interval contains its estimate; the raw statistic is kept beside it.
    let mut n = 0;
    for c in &ledger.claims {
        for m in &c.measures {
            let v = &m.value;
            assert!(
                v.lo_pp <= v.pp && v.pp <= v.hi_pp,
                "{} {} {}: {} not in [{}, {}]",
                c.id,
                m.arm,
                m.what,
                v.pp,
                v.lo_pp,
                v.hi_pp
            );
            // A non-negative quantity's estimate is clamped at 0 (issue 38), never otherwise moved.
            let unclamped = v.raw_pp - v.bias_pp;
            assert!((v.pp - unclamped).abs() < 1e-9 || (v.pp == 0.0 && unclamped < 0.0));
            assert!(v.percentile_pp.0 <= v.percentile_pp.1);
            n += 1;
        }
    }
    assert!(n >= 10, "only {n} magnitudes");
    // The banner: the seed that did not train, the arms at the ceiling, the flags, each linking
    // its claims.
    // The v2 run (theory/phase-lab.md §8): the seeds the training-success rule excluded, and the
    // task rule amended after the probes, on every claim judged on trained models.
    let kinds: Vec<&str> = ledger.banner.iter().map(|b| b.kind.as_str()).collect();
    let excluded = "seed excluded by the training-success rule";
    assert!(kinds.contains(&excluded) && kinds.contains(&"changed after seeing the data"), "{kinds:?}");
    let failed = ledger.banner.iter().find(|b| b.kind == excluded && b.text.contains("`w12s12-seed0`")).unwrap();
    assert!(failed.claims.contains(&"E1".to_string()), "{failed:?}");
    let flagged: Vec<&String> =
        ledger.banner.iter().filter(|b| b.kind == "changed after seeing the data").flat_map(|b| &b.claims).collect();
    for id in ["E1", "E4", "E6", "X1"] {
        assert!(flagged.iter().any(|f| *f == id), "{id} not flagged: {flagged:?}");
    }
    // An arm none of whose seeds trained is a part that was not run, never dropped.
    let e1 = ledger.claims.iter().find(|c| c.id == "E1").unwrap();
    let w12 = e1.arms.iter().find(|a| a.arm == "w12s12").expect("w12s12 in E1");
    assert_eq!((w12.verdict, e1.verdict), (Verdict::NotRun, Verdict::NotRun), "{}", w12.text);
    assert!(
        part.starts_with("## Abstract")
            && part.contains("## Read this first")
            && part.contains("(#e1)")
            && part.contains("<a id=\"e1\"></a>")
    );
}

/// Negative controls of the rendering check: a ledger whose numbers differ renders differently,
/// and the bias-corrected interval follows its formula.
#[test]
fn a_changed_ledger_does_not_render_to_the_committed_readme() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports");
    let mut ledger: Ledger = serde_json::from_str(&std::fs::read_to_string(root.join("ledger.json")).unwrap()).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let e5 = ledger.claims.iter_mut().find(|c| c.id == "E5").unwrap();
    e5.measures[0].value.pp += 1.0;
    assert!(!readme.contains(&render_ledger(&ledger)), "a changed magnitude must change the ledger");
    let b = phasekv::analysis::stats::BootInterval::from_sorted(1.0, &[3.0, 4.0, 5.0, 6.0, 7.0]);
    assert_eq!(b.bias(), 4.0);
    let (pp, lo, hi) = b.corrected();
    assert!((pp + 3.0).abs() < 1e-12 && (lo + 4.9).abs() < 1e-12 && (hi + 1.1).abs() < 1e-12, "{pp} {lo} {hi}");
    // The percentile interval [3.1, 6.9] misses the estimate 1.0, and so does it shifted by the
    // bias ([-0.9, 2.9] against -3.0); the basic interval contains the corrected estimate.
    assert!(!(b.lo - b.bias() <= pp && pp <= b.hi - b.bias()));
    assert!(!(b.lo <= b.estimate && b.estimate <= b.hi) && lo <= pp && pp <= hi);
}

/// Issue 39 (the kernel carried as data): every committed run's `config.json` reads into a
/// [`RunConfig`] and writes back byte for byte as a run directory writes it (pretty JSON of its
/// value, one newline), its identity is still the `config_hash` its `metrics.json` recorded, and
/// its kernel resolves once ([`phasekv::model::ModelConfig::kernel`]) to the preset its name
/// says. Negative controls: a config that carries a custom spec, or another engine, writes other
/// bytes and has another identity; a custom spec under a listed preset's name with another knob
/// is refused naming `spec.name`.
#[test]
fn committed_configs_round_trip_byte_for_byte_with_their_identities() {
    let mut checked = 0;
    for dir in run_dirs() {
        let path = dir.join("config.json");
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let config = RunConfig::from_json(&text).unwrap();
        let written = format!("{}\n", serde_json::to_string_pretty(&serde_json::to_value(&config).unwrap()).unwrap());
        assert_eq!(written, text, "{path:?}");
        let metrics: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("metrics.json")).unwrap()).unwrap();
        assert_eq!(metrics["config_hash"].as_str(), Some(config.identity().as_str()), "{dir:?}");
        let kernel = config.model.kernel().unwrap();
        assert_eq!(kernel, phasekv::kernel::KernelSpec::preset(&config.model.preset).unwrap(), "{dir:?}");
        assert!(config.model.spec.is_none(), "{dir:?}: a preset run carries no spec");

        let mut custom = config.clone();
        let mut spec = kernel.clone();
        spec.name = format!("{}-custom", config.model.preset);
        spec.tied = !spec.tied;
        custom.model.preset = spec.name.clone();
        custom.model.spec = Some(spec.clone());
        assert_ne!(custom.identity(), config.identity());
        assert!(serde_json::to_string(&custom).unwrap().contains("\"spec\""));
        let mut candle = config.clone();
        candle.train.engine = phasekv::model::Engine::Candle;
        assert_ne!(candle.identity(), config.identity());
        let mut squatter = custom.clone();
        spec.name = config.model.preset.clone();
        squatter.model.preset = spec.name.clone();
        squatter.model.spec = Some(spec);
        let err = squatter.model.kernel().unwrap_err().to_string();
        assert!(err.contains("spec.name"), "{err}");
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} committed configs found");
}

/// Issue 43: the committed README passes every check of the rendered report (cells of at most
/// `CELL_LIMIT` characters, every linked file present, no flag paragraph twice, the abstract's
/// numbers those of `ledger.json`), and each check rejects the committed README broken its way
/// (negative controls at the size users read).
#[test]
fn the_committed_readme_passes_the_rendered_report_checks_and_each_break_is_caught() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports");
    let ledger: Ledger = serde_json::from_str(&std::fs::read_to_string(root.join("ledger.json")).unwrap()).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert_eq!(check_rendered(&readme, &root, &ledger), vec![], "the committed README");
    let problems = |md: &str| check_rendered(md, &root, &ledger);
    // A cell one character over the limit.
    let long = readme.replacen("| [E4](#e4) |", &format!("| [E4](#e4) {} |", "x".repeat(CELL_LIMIT - 9)), 1);
    assert!(
        problems(&long).iter().any(|p| matches!(p, RenderProblem::LongCell { chars, .. } if *chars == CELL_LIMIT + 1)),
        "{:?}",
        problems(&long)
    );
    // A link to a file that is not there.
    let missing = readme.replacen("(figures/summary-forest.csv)", "(figures/no-such-file.csv)", 1);
    assert_ne!(missing, readme);
    assert_eq!(
        problems(&missing),
        vec![RenderProblem::MissingFile {
            line: readme.lines().position(|l| l.contains("(figures/summary-forest.csv)")).unwrap() + 1,
            target: "figures/no-such-file.csv".into()
        }]
    );
    // The second flag paragraph made the first's twin.
    let first = readme.lines().find(|l| l.contains("**Flag 1** (")).unwrap();
    let second = readme.lines().find(|l| l.contains("**Flag 2** (")).unwrap();
    let text = &first[first.find("): ").unwrap()..];
    let twin = readme.replacen(second, &format!("{}{text}", &second[..second.find("): ").unwrap()]), 1);
    assert!(problems(&twin).iter().any(|p| matches!(p, RenderProblem::DuplicateFlag { .. })), "{:?}", problems(&twin));
    // A headline number of the abstract changed.
    let e4 = headline(ledger.claims.iter().find(|c| c.id == "E4").unwrap()).expect("E4 has a headline");
    let mean = format!("{:.1} ± ", e4.mean);
    let start = readme.find("## Abstract").unwrap();
    let at = start + readme[start..].find(&mean).expect("E4's mean in the abstract");
    let changed = format!("{}123.4 ± {}", &readme[..at], &readme[at + mean.len()..]);
    let found = problems(&changed);
    assert!(found.contains(&RenderProblem::AbstractNumber { number: "123.4".into() }), "{found:?}");
    // One banner line per arm with excluded seeds, one paragraph per distinct flag.
    let excluded: Vec<&str> =
        readme.lines().filter(|l| l.starts_with("- **seed excluded by the training-success rule**")).collect();
    assert_eq!(excluded.len(), 2, "{excluded:?}");
    assert!(excluded[0].contains("`w12s12-seed0`") && excluded[0].contains("`w12s12-seed2`"), "{}", excluded[0]);
    let mut distinct: Vec<&String> = ledger.claims.iter().flat_map(|c| &c.flags).collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(readme.matches("**Flag ").count(), distinct.len());
}
