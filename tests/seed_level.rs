//! Seed-level inference (issue 38): the two-stage bootstrap's ratio interval carries the
//! between-seed variance that the prompt-level one leaves out; the family-paired max-minus-min
//! interval never goes below 0 and still sees a planted effect; `phasekv analyze power` on a
//! small fixture cut from the committed run, and its one-line refusal of a bad `--from`.

use phasekv::analysis::phase_test::{spread_ratio, Level, PhaseRecord, SeedRecords};
use phasekv::analysis::stats::{family_gap_two_stage, seed_mean_gap, BootInterval, ResampleConfig};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One seed's records: `families` prompt families, each at every position 24..48 (so at every
/// phase mod 4) with a depth drawn from the family; phase 0 answered with accuracy `low`, the
/// others with `high`, decided per (family, position) by a fixed hash so that the counts are
/// exact to within one prompt.
fn seed(low: f64, high: f64, families: usize, salt: u64) -> (Vec<PhaseRecord>, Vec<usize>) {
    let (mut recs, mut fams) = (Vec::new(), Vec::new());
    for f in 0..families {
        let depth = 8 + 4 * (f % 8);
        for position in 24..48 {
            let acc = if position % 4 == 0 { low } else { high };
            // A low-discrepancy draw: the fraction of correct prompts is `acc` within 1/families.
            let u = ((f as u64 * 7919 + position as u64 * 104_729 + salt * 31) % 1000) as f64 / 1000.0;
            recs.push(PhaseRecord { position, depth, correct: u < acc });
            fams.push(f);
        }
    }
    (recs, fams)
}

fn ratio(a: &[(Vec<PhaseRecord>, Vec<usize>)], b: &[(Vec<PhaseRecord>, Vec<usize>)], level: Level) -> (f64, f64, f64) {
    fn input(x: &[(Vec<PhaseRecord>, Vec<usize>)]) -> Vec<SeedRecords<'_>> {
        x.iter().map(|(r, f)| SeedRecords { records: r, families: Some(f) }).collect()
    }
    let r = spread_ratio(&input(a), &input(b), true, 4, &[0, 1, 2, 3], level, 200, 11).unwrap();
    (r.r, r.lo, r.hi)
}

/// Seeds that disagree (the staggered arm's spreads 3 / 10 / 60 pp against a twin steady at
/// 40 pp): the prompt-level interval of R excludes 1, the seed-level one does not. The control:
/// seeds that agree (20 pp in every seed against 40) give intervals that both exclude 1.
#[test]
fn a_ratio_whose_seeds_disagree_is_undecided_at_the_seed_level_only() {
    let n = 160;
    let twin: Vec<_> = (0..3).map(|k| seed(0.5, 0.9, n, k)).collect();
    let disagree: Vec<_> =
        [0.87, 0.8, 0.3].iter().enumerate().map(|(k, &low)| seed(low, 0.9, n, 10 + k as u64)).collect();
    let (r, lo, hi) = ratio(&disagree, &twin, Level::Prompts);
    assert!(hi < 1.0 && r > 0.2 && r < 0.9, "prompt-level R {r:.2} [{lo:.2}, {hi:.2}] should exclude 1");
    let (rs, los, his) = ratio(&disagree, &twin, Level::Seeds);
    assert!(los <= 1.0 && his >= 1.0, "seed-level R {rs:.2} [{los:.2}, {his:.2}] should contain 1");
    assert!(los >= 0.0, "a ratio of spreads is never below 0: {los}");
    let agree: Vec<_> = (0..3).map(|k| seed(0.7, 0.9, n, 20 + k)).collect();
    for level in [Level::Prompts, Level::Seeds] {
        let (r, lo, hi) = ratio(&agree, &twin, level);
        assert!(hi < 1.0 && (r - 0.5).abs() < 0.15, "{level:?}: R {r:.2} [{lo:.2}, {hi:.2}] should exclude 1");
    }
}

/// `(family, group, correct)` prompts of one seed with `M = 24` groups: `families` families,
/// each at every group; `effect(family, group)` says whether it is answered.
fn family_prompts(families: usize, effect: impl Fn(usize, usize) -> bool) -> Vec<(usize, usize, bool)> {
    (0..families).flat_map(|f| (0..24).map(move |g| (f, g))).map(|(f, g)| (f, g, effect(f, g))).collect()
}

fn words(b: &BootInterval) -> (f64, f64, f64) {
    b.corrected_nonneg()
}

/// No effect: every family scores the same at every shift (238 of 240 all correct, 2 all
/// wrong, as E5's full attention): the family-paired seed-level gap is 0 with an interval that
/// contains 0 and never goes below it; the negative control is the prompt-within-group
/// bootstrap (v2's), whose bias correction takes the same data below 0. A planted effect (the
/// groups at phase 0 mod 4 answered 30 % less often) gives an interval that excludes 0.
#[test]
fn the_family_paired_gap_never_goes_below_zero_and_sees_a_planted_effect() {
    let flat: Vec<Vec<_>> = (0..3).map(|k| family_prompts(240, move |f, _| f % 120 != k)).collect();
    let (b, each) = family_gap_two_stage(&flat, 24, Some(4), 500, 3).unwrap();
    assert!(each.iter().all(|&g| g == 0.0), "{each:?}");
    let (m, lo, hi) = words(&b);
    assert!(m == 0.0 && lo == 0.0 && hi >= 0.0, "{m} [{lo}, {hi}]");
    // Noisy, independent prompts with no effect: the interval still contains 0 or sits above.
    let noisy: Vec<Vec<_>> =
        (0..3).map(|k| family_prompts(240, move |f, g| (f * 31 + g * 17 + k * 7) % 10 != 0)).collect();
    let (b, _) = family_gap_two_stage(&noisy, 24, Some(4), 500, 3).unwrap();
    let (m, lo, hi) = words(&b);
    assert!(m >= 0.0 && lo >= 0.0 && lo <= m && m <= hi, "{m} [{lo}, {hi}]");
    // The control: v2's prompts-within-groups bootstrap with the bias correction crosses 0.
    let pairs: Vec<Vec<(usize, bool)>> = flat.iter().map(|s| s.iter().map(|&(_, g, c)| (g, c)).collect()).collect();
    let cfg = ResampleConfig { bootstrap_rounds: 500, seed: 3, ..ResampleConfig::default() };
    let (old, _) = seed_mean_gap(&pairs, 24, Some(4), &cfg).unwrap();
    assert!(old.corrected().1 < 0.0, "v2's interval goes below 0 here: {:?}", old.corrected());
    // A planted effect.
    let planted: Vec<Vec<_>> = (0..3)
        .map(|k| family_prompts(240, move |f, g| if g % 4 == 0 { (f + k) % 10 >= 3 } else { f % 120 != k }))
        .collect();
    let (b, each) = family_gap_two_stage(&planted, 24, Some(4), 500, 3).unwrap();
    let (m, lo, hi) = words(&b);
    assert!(each.iter().all(|&g| (g - 30.0).abs() < 2.0), "{each:?}");
    assert!(lo > 20.0 && m > 25.0 && hi < 40.0, "{m} [{lo}, {hi}]");
    assert_eq!(family_gap_two_stage(&planted, 24, Some(4), 500, 3).unwrap().0, b, "same seed, same numbers");
    assert!(family_gap_two_stage(&planted, 24, Some(5), 10, 3).is_err());
    assert!(family_gap_two_stage(&[], 24, Some(4), 10, 3).is_err());
}

fn tmp_dir(label: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("phasekv-seed-level-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A reproduction output with the committed w8s8 seeds, each cut to its first `families`
/// families (every residue group keeps them); `same_seed`: every seed a copy of seed 0 (no
/// between-seed variance).
fn fixture(label: &str, families: usize, same_seed: bool) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports");
    let out = tmp_dir(label);
    std::fs::copy(root.join("plan.json"), out.join("plan.json")).unwrap();
    for k in 0..3 {
        let src = root.join(format!("runs/w8s8-seed{}", if same_seed { 0 } else { k }));
        let dst = out.join(format!("runs/w8s8-seed{k}"));
        std::fs::create_dir_all(&dst).unwrap();
        // Cut as the loader expects a run of `families` prompts a group to be: every file
        // names seed k, ids are `group x families + family`, each evaluation says its
        // per_group, and a copied seed is no longer the same model twice (no run_id).
        let json = |f: &str| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(src.join(f)).unwrap()).unwrap()
        };
        let put = |f: &str, v: &serde_json::Value| std::fs::write(dst.join(f), v.to_string()).unwrap();
        let mut config = json("config.json");
        config["train"]["seed"] = k.into();
        put("config.json", &config);
        let mut metrics = json("metrics.json");
        metrics["seed"] = k.into();
        put("metrics.json", &metrics);
        for p in ["prefix", "in-sequence"] {
            let mut eval = json(&format!("eval-{p}.json"));
            eval["per_group"] = families.into();
            eval["run_id"] = serde_json::Value::Null;
            put(&format!("eval-{p}.json"), &eval);
            let name = format!("eval-{p}-outcomes.jsonl");
            let text = std::fs::read_to_string(src.join(&name)).unwrap();
            let kept: Vec<String> = text
                .lines()
                .filter_map(|l| {
                    let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                    let family = v["family"].as_u64().unwrap();
                    (family < families as u64).then(|| {
                        v["id"] = (v["group"].as_u64().unwrap() * families as u64 + family).into();
                        v["seed"] = k.into();
                        v.to_string()
                    })
                })
                .collect();
            std::fs::write(dst.join(&name), kept.join("\n") + "\n").unwrap();
        }
    }
    out
}

fn phasekv(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_phasekv")).args(args).output().expect("run phasekv");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

/// The power command on three committed w8s8 seeds cut to 24 families: an E4 row and an E5
/// row, each with 3 seeds, a between-seed spread and a seed count; the control, the same seed
/// three times, finds no between-seed variance. A `--from` that is not a directory is refused
/// in one line naming it, exit 2.
#[test]
fn the_power_command_reads_per_seed_effects_and_refuses_a_bad_from() {
    let dir = fixture("power", 24, false);
    let (code, out, err) = phasekv(&["analyze", "power", "--from", dir.to_str().unwrap(), "--rounds", "20"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("| E")).collect();
    assert!(rows.iter().any(|l| l.starts_with("| E4 | w8s8 spread")), "{out}");
    assert!(rows.iter().any(|l| l.starts_with("| E5 | w8s8 prefix gap folded by 8")), "{out}");
    let e4: Vec<&str> = rows[0].split('|').map(str::trim).collect();
    assert_eq!(e4[3], "3", "{out}");
    assert!(e4[6].parse::<f64>().unwrap() > 1.0, "seeds differ: a between-seed sd, {out}");
    let same = fixture("power-same", 24, true);
    let (code, out, err) = phasekv(&["analyze", "power", "--from", same.to_str().unwrap(), "--rounds", "20"]);
    assert_eq!(code, 0, "{err}");
    let e4 = out.lines().find(|l| l.starts_with("| E4")).unwrap();
    assert!(e4.contains("no between-seed variance"), "{out}");
    let (code, out, err) = phasekv(&["analyze", "power", "--from", "/nonexistent/reports"]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--from") && err.contains("/nonexistent/reports"), "{err}");
    let (code, _, err) = phasekv(&["analyze", "power", "--from", dir.to_str().unwrap(), "--rounds", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--rounds"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(same);
}
