//! X1 (issue 30, beyond the paper): does staggering the compression grid across KV heads or
//! layers remove the phase effect at the same compression and parameter count, without
//! lowering accuracy? Three pairs, each a staggered arm against its unstaggered twin trained
//! with the same seeds; the rule, the ratio and the cost are `theory/phase-lab.md` §8.8's,
//! registered before any staggered model was trained. Each pair is one part with its own
//! verdict; the claim is never pooled across pairs.

use super::arm::{budget_difference, evaluated, same_seeds, seed_families, seed_records, stat_seed, NO_OUTCOMES};
use super::claim::{not_run, Claim, Interval, LedgerClaim, Measure, TestRecord};
use super::gaps::{period, seed_level_input};
use super::judge::{judge, PRIMARY};
use super::parts::{texts, Part, Reported};
use super::words::{level_words, section_of};
use crate::analysis::phase_test::ALPHA;
use crate::analysis::phase_test::{adjusted_phase_accuracies, spread_ratio, Level, SpreadRatio};
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::{
    self, accuracy_difference, accuracy_difference_two_stage, BootInterval, BOOTSTRAP_ROUNDS,
};
use crate::analysis::verdict::{Combination, Rules, Verdict};
use crate::analysis::verdict::{Effect, StaggerEffect, X1_ACCURACY_MARGIN_PP, X1_HALF};
use crate::report::ledger::collect::{arms, Arm, Collected};
use crate::Result;
use serde::Serialize;
use std::path::Path;

/// The claim (registered in [`super::LEDGER`]).
pub struct X1;

/// `(staggered arm, unstaggered twin, what is staggered)`, §8.8.
pub const PAIRS: [(&str, &str, &str); 3] = [
    ("w8s8-stagger-heads", "w8s8", "KV heads"),
    ("w8s8-stagger-layers", "w8s8", "layers"),
    ("w8s4-kv1-stagger-layers", "w8s4-kv1", "one-KV-head layers"),
];

const CLAIM: &str = "staggering the compression grid across KV heads (or layers) removes at least half of the phase effect at the same compression and the same parameter count, without lowering mean accuracy";
const FIGURE: &str = "figures/x1-stagger.png";
const DATA: &str = "figures/x1-stagger.csv";

/// The evaluated arm named `name`.
fn named<'a>(arms: &'a [Arm<'a>], name: &str) -> Option<&'a Arm<'a>> {
    arms.iter().find(|a| a.name == name && evaluated(a))
}

/// The ratio `R` of the staggered arm's mean depth-adjusted spread at `s` to the twin's (§8.8:
/// the ratio of the bias-corrected means, with the basic bootstrap interval of the replicate
/// ratios; `analysis::phase_test::spread_ratio`), at `level`: prompts within seeds (v2 as
/// run) or seed-level (issue 38; paired by seed where the arms share their seeds).
fn ratio(a: &Arm, twin: &Arm, s: usize, level: Level) -> std::result::Result<SpreadRatio, String> {
    let phases: Vec<usize> = (0..s).collect();
    let (ra, rb) = (
        seed_records(a, PRIMARY).ok_or_else(|| NO_OUTCOMES.to_string())?,
        seed_records(twin, PRIMARY).ok_or_else(|| NO_OUTCOMES.to_string())?,
    );
    let (fa, fb) = (seed_families(a, PRIMARY), seed_families(twin, PRIMARY));
    spread_ratio(
        &seed_level_input(&ra, &fa),
        &seed_level_input(&rb, &fb),
        same_seeds(a, twin),
        s,
        &phases,
        level,
        BOOTSTRAP_ROUNDS,
        stat_seed(a),
    )
    .map_err(|e| e.to_string())
}

/// A ratio in words, with its level and seeds.
fn ratio_words(r: &SpreadRatio) -> String {
    let how = match r.level {
        Level::Prompts => "prompts within seeds".to_string(),
        Level::Seeds => format!(
            "seed-level, {}, {}",
            stats::SeedCount { seeds: r.seeds }.words(),
            if r.paired { "paired by seed" } else { "unpaired: the seeds differ" }
        ),
    };
    format!("{:.2} [{:.2}, {:.2}] ({how})", r.r, r.lo, r.hi)
}

/// Our value of X1: each grid's answer (§8.8 states the claim per grid).
fn per_grid(c: &Claim) -> String {
    let bits: Vec<String> = PAIRS
        .iter()
        .filter_map(|&(stag, twin, grid)| {
            let label = format!("{stag} vs {twin}");
            let a = c.arms.iter().find(|a| a.arm == label)?;
            let word = match a.verdict {
                Verdict::Reproduced => "holds",
                Verdict::NotReproduced => "does not hold",
                v => v.word(),
            };
            Some(format!("{grid}: {word}"))
        })
        .collect();
    format!("per grid: {}", bits.join("; "))
}

/// `(correct, n)` per seed of an arm under `p` (its per-prompt records), or of its held-out set
/// (`None`: the final evaluation's accuracy of `queries` prompts).
fn counts(a: &Arm, p: Option<Protocol>) -> Option<Vec<(usize, usize)>> {
    a.runs
        .iter()
        .map(|r| match p {
            Some(p) => r.records.get(&p).map(|rs| (rs.iter().filter(|x| x.correct).count(), rs.len())),
            None => r.metrics.as_ref().map(|m| {
                let n = m.final_eval.queries;
                ((m.final_eval.accuracy * n as f64).round() as usize, n)
            }),
        })
        .collect()
}

/// The accuracy differences (staggered minus twin), pp with intervals: held-out, then each
/// protocol; at `level` prompts within seeds or seed-level (issue 38; paired by seed where the
/// arms share their seeds); `Err` names what is missing.
fn cost(a: &Arm, twin: &Arm, level: Level) -> std::result::Result<Vec<(String, BootInterval)>, String> {
    let mut out = Vec::new();
    let what: [(String, Option<Protocol>); 3] = [
        ("held-out exact match".into(), None),
        (format!("{} accuracy", Protocol::Prefix.name()), Some(Protocol::Prefix)),
        (format!("{} accuracy", Protocol::InSequence.name()), Some(Protocol::InSequence)),
    ];
    for (i, (name, p)) in what.into_iter().enumerate() {
        let (Some(ca), Some(cb)) = (counts(a, p), counts(twin, p)) else {
            return Err(format!("{name}: missing for a seed"));
        };
        let seed = stat_seed(a) ^ i as u64;
        let d = match level {
            Level::Prompts => accuracy_difference(&ca, &cb, BOOTSTRAP_ROUNDS, seed),
            Level::Seeds => accuracy_difference_two_stage(&ca, &cb, same_seeds(a, twin), BOOTSTRAP_ROUNDS, seed),
        }
        .map_err(|e| e.to_string())?;
        out.push((name, d));
    }
    Ok(out)
}

/// The effect of `a` at `s` in words, and the effect (`None`: not judged).
fn effect_at(a: &Arm, s: usize) -> (Option<Effect>, String, Vec<TestRecord>) {
    match judge(a, PRIMARY, s, ALPHA) {
        Ok(j) => (Some(j.effect), format!("S = {s}: {}", j.describe()), j.records(a, PRIMARY, true)),
        Err(e) => (None, format!("S = {s}: {e}"), vec![]),
    }
}

/// One pair's part.
/// The rules X1's criterion is stated by: §8.8's (X1 was first pre-registered there, and a v1
/// run set reads it by them too), §9.7's in a v3 run set.
fn x1_rules(c: &Collected) -> Rules {
    match crate::report::ledger::collect::rules(c) {
        Rules::V3 => Rules::V3,
        _ => Rules::V2,
    }
}

fn pair_part(arms: &[Arm], (stag, twin_name, grid): (&str, &str, &str)) -> Part {
    let label = format!("{stag} vs {twin_name}");
    let (Some(a), Some(twin)) = (named(arms, stag), named(arms, twin_name)) else {
        return Part::new(&label, Verdict::NotRun, format!("{label} ({grid}): not trained in this run set"));
    };
    let s = match twin.stride {
        Some(s) if s >= 2 => s,
        _ => return Part::new(&label, Verdict::NotRun, format!("{label}: the twin {} has no stride", twin.preset)),
    };
    let mut tests = Vec::new();
    let mut lines = Vec::new();
    let mut effects = Vec::new();
    for x in [a, twin] {
        for st in [s, s / 2] {
            let (e, text, t) = effect_at(x, st);
            lines.push(format!("{} {text}", x.name));
            // The staggered arm's tests decide; the twin's are reported beside them.
            tests.extend(t.into_iter().map(|r| TestRecord { decides: x.name == a.name, ..r }));
            effects.push(e);
        }
    }
    let (Some(at_s), Some(at_half)) = (effects[0], effects[1]) else {
        return Part { tests, ..Part::new(&label, Verdict::NotRun, format!("{label} ({grid}): {}", lines.join("; "))) };
    };
    let period = match period(a, PRIMARY) {
        Ok((scan, _)) => scan.period,
        Err(e) => {
            lines.push(format!("period scan: {e}"));
            None
        }
    };
    // Issue 38 (§8.11): the seed-level ratio and costs decide; the prompt-level ones (v2 as
    // run) are reported beside them.
    let (rs, rp) = match (ratio(a, twin, s, Level::Seeds), ratio(a, twin, s, Level::Prompts)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => {
            let text = format!("{label} ({grid}): {}; ratio: {e}", lines.join("; "));
            return Part { tests, ..Part::new(&label, Verdict::NotRun, text) };
        }
    };
    let effect = StaggerEffect::of(at_s, at_half, period == Some(s / 2), rs.r, (rs.lo, rs.hi));
    let prompt_effect = StaggerEffect::of(at_s, at_half, period == Some(s / 2), rp.r, (rp.lo, rp.hi));
    let (costs, prompt_costs) = match (cost(a, twin, Level::Seeds), cost(a, twin, Level::Prompts)) {
        (Ok(c), Ok(p)) => (c, p),
        (Err(e), _) | (_, Err(e)) => {
            let text = format!("{label} ({grid}): {}; cost: {e}", lines.join("; "));
            return Part { tests, ..Part::new(&label, Verdict::NotRun, text) };
        }
    };
    let lows = |c: &[(String, BootInterval)]| -> Vec<f64> { c.iter().map(|(_, d)| d.corrected().1).collect() };
    let cost_lo = lows(&costs);
    let holds = effect.x1_holds(&cost_lo);
    let prompt_holds = prompt_effect.x1_holds(&lows(&prompt_costs));
    let no_cost = cost_lo.iter().all(|&l| l >= -X1_ACCURACY_MARGIN_PP);
    let words = |c: &[(String, BootInterval)]| -> String {
        c.iter().map(|(n, d)| format!("{n} {}", Interval::of(d).words())).collect::<Vec<_>>().join(", ")
    };
    let budget = budget_difference(a, twin).map(|b| format!("; {b}")).unwrap_or_default();
    let text = format!(
        "{label} ({grid}, S = {s}): {}; spread (mean over seeds, in-sequence; seed-level) {} against {}, ratio R = {}; period scan declares {}; staggering {}; accuracy difference (staggered minus twin) {} (seed-level, {}): {}; X1 {}{budget}; prompts within seeds (v2 as run, reported): R = {}, accuracy difference {}, X1 would {}",
        lines.join("; "),
        Interval::of_nonneg(&rs.a).words(),
        Interval::of_nonneg(&rs.b).words(),
        ratio_words(&rs),
        period.map(|p| p.to_string()).unwrap_or_else(|| "none".into()),
        effect.words(),
        words(&costs),
        if same_seeds(a, twin) { "paired by seed" } else { "unpaired: the seeds differ" },
        if no_cost { "no cost" } else { "a cost beyond the margin" },
        if holds { "holds" } else { "does not hold" },
        ratio_words(&rp),
        words(&prompt_costs),
        if prompt_holds { "hold" } else { "not hold" }
    );
    let mut part = Part::new(&label, if holds { Verdict::Reproduced } else { Verdict::NotReproduced }, text);
    part.tests = tests;
    let n = rs.seeds;
    for (arm, v, seeds) in [(&a.name, rs.a, a.runs.len()), (&twin.name, rs.b, twin.runs.len())] {
        part.measures.push(Measure {
            arm: arm.clone(),
            protocol: PRIMARY.name().into(),
            what: "depth-adjusted phase spread (mean over seeds)".into(),
            groups: s,
            value: Interval::of_nonneg(&v),
            noise_floor_pp: None,
            p: None,
            paper_pp: None,
            decides: true,
            seeds: Some(seeds),
            per_seed_pp: Vec::new(),
        });
    }
    for (what, d) in &costs {
        part.measures.push(Measure {
            arm: label.clone(),
            protocol: what.split(' ').next().unwrap_or("-").into(),
            what: format!("{what} difference, staggered minus twin"),
            groups: s,
            value: Interval::of(d),
            noise_floor_pp: None,
            p: None,
            paper_pp: None,
            decides: true,
            seeds: Some(n),
            per_seed_pp: Vec::new(),
        });
    }
    part
}

impl LedgerClaim for X1 {
    fn id(&self) -> &'static str {
        "X1"
    }

    fn short(&self) -> &'static str {
        "staggered grids remove half the phase effect at no cost"
    }

    fn paper(&self) -> &'static str {
        "- (beyond the paper: its open question)"
    }

    fn check(&self, c: &Collected) -> Claim {
        let arms = arms(c);
        let parts: Vec<Part> = PAIRS.iter().map(|&p| pair_part(&arms, p)).collect();
        if parts.iter().all(|p| p.verdict == Verdict::NotRun && p.tests.is_empty()) {
            let mut n = not_run(self, CLAIM, vec![DATA.into()]);
            n.measured = format!("no data yet: {}", texts(&parts));
            return n;
        }
        // §8.8: "the claim is stated per grid (heads, layers, one-KV-head layers), never pooled
        // across pairs": each pair's verdict is the claim's answer for its grid.
        let mut claim = Claim::from_parts_by(
            Combination::PerPart,
            self,
            CLAIM,
            format!(
                "per pair, in-sequence, seeds pooled ({}): the staggered arm's effect at S and S/2 ({}), the ratio R of mean depth-adjusted spreads at S (staggered over twin, basic bootstrap interval), the first verdict that applies of removes (absent at S and S/2, R's upper end <= {X1_HALF}), moves the period, reduces (R <= {X1_HALF}, upper end < 1), no effect (interval contains 1), worse, reduces (less than half); X1 holds for a pair when it removes or reduces and no accuracy difference's lower end is below -{X1_ACCURACY_MARGIN_PP} pp; never pooled across pairs; the claim is stated per grid (KV heads, layers, one-KV-head layers), each pair's verdict its answer",
                section_of("X1", x1_rules(c)),
                level_words(x1_rules(c), 1)
            ),
            parts,
            Reported::default(),
        );
        claim.ours = per_grid(&claim);
        claim.figures = vec![FIGURE.into()];
        claim.data = vec![DATA.into()];
        claim
    }

    fn draw(&self, c: &Collected, out: &Path) -> Result<Vec<(String, String)>> {
        use crate::figures::plot::{Panel, Series};
        let arms = arms(c);
        let mut panels = Vec::new();
        let mut rows: Vec<ProfileRow> = Vec::new();
        for &pair @ (stag, twin_name, grid) in &PAIRS {
            let (Some(a), Some(twin)) = (named(&arms, stag), named(&arms, twin_name)) else { continue };
            let Some(s) = twin.stride else { continue };
            let mut series = Vec::new();
            for (colour, x) in [a, twin].into_iter().enumerate() {
                // The seeds the claim pools, then the excluded ones (issue 43: shown, apart).
                let drawn = x.runs.iter().map(|r| (*r, false)).chain(x.excluded.iter().map(|e| (e.0, true)));
                for (r, excluded) in drawn {
                    let Some(recs) = r.records.get(&PRIMARY) else { continue };
                    let Ok(acc) = adjusted_phase_accuracies(recs, s) else { continue };
                    if !excluded {
                        for (phase, v) in acc.iter().enumerate() {
                            rows.push(ProfileRow {
                                pair: format!("{stag} vs {twin_name}"),
                                arm: x.name.clone(),
                                seed: r.seed,
                                phase,
                                adjusted_accuracy: format!("{v:.6}"),
                            });
                        }
                    }
                    let pts = acc.iter().enumerate().map(|(p, v)| (p as f64, 100.0 * v)).collect();
                    // Each seed its own line pattern, so the legend tells seeds apart (issue 43);
                    // an excluded seed thin and light, named so.
                    let pattern = [None, Some((8, 4)), Some((2, 3)), Some((12, 3))][r.seed as usize % 4];
                    let name = if excluded {
                        format!("{} seed {} (excluded by the training-success rule; in no R)", x.name, r.seed)
                    } else {
                        format!("{} seed {}", x.name, r.seed)
                    };
                    series.push(Series {
                        markers: !excluded,
                        thin: excluded,
                        pattern,
                        ..Series::line(name, pts, colour)
                    });
                }
            }
            if series.is_empty() {
                continue;
            }
            panels.push(Panel {
                title: format!("{stag} (staggered {grid}) vs {twin_name}: {}", pair_result(&arms, pair, s)),
                x_label: format!("phase (position mod {s})"),
                y_label: "depth-adjusted accuracy (%)".into(),
                series,
                ..Panel::default()
            });
        }
        if panels.is_empty() {
            return Ok(vec![]);
        }
        crate::run_dir::write_csv_atomic(&out.join(DATA), &rows)?;
        // One y range for every panel, so that the same pp is the same height (issue 43).
        let ys = panels.iter().flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|q| q.1)));
        let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), y| (lo.min(y), hi.max(y)));
        if lo.is_finite() {
            let pad = 0.05 * (hi - lo).max(1.0);
            for p in &mut panels {
                p.y_range = Some((lo - pad, hi + pad));
            }
        }
        let n = panels.len() as u32;
        crate::figures::plot::line_panels(
            &out.join(FIGURE.trim_end_matches(".png")),
            "X1: staggered grids against their unstaggered twins, in-sequence, per seed: ratio R of spreads (staggered / twin), held-out accuracy cost, and X1's verdict per pair",
            &panels,
            1,
            (1500, 60 + 400 * n),
        )?;
        Ok(vec![(
            FIGURE.into(),
            format!("X1: the depth-adjusted accuracy of each phase (in-sequence), one line per seed (line pattern by seed), of each staggered arm (colour 0) and its unstaggered twin (colour 1), every panel on one y range. Each panel's title gives what X1 decides on for its pair, computed as X1's section computes it (seed-level): the ratio R of mean depth-adjusted spreads (staggered over twin) with its interval, the held-out accuracy difference (staggered minus twin, pp) and the verdict; a seed the training-success rule excluded is drawn thin and named in the legend, and is in no R or cost. The data are {DATA}."),
        )])
    }
}

/// What X1 decides on for one pair, in a title's words: the seed-level ratio `R`, the held-out
/// accuracy cost and the pair's verdict, computed by the functions the claim uses
/// ([`ratio`], [`cost`], [`pair_part`]), so the figure states the ledger's numbers.
fn pair_result(arms: &[Arm], pair: (&str, &str, &str), s: usize) -> String {
    let (Some(a), Some(twin)) = (named(arms, pair.0), named(arms, pair.1)) else { return "not run".into() };
    let part = pair_part(arms, pair);
    let r = match ratio(a, twin, s, Level::Seeds) {
        Ok(r) => format!("R = {:.2} [{:.2}, {:.2}]", r.r, r.lo, r.hi),
        Err(e) => format!("R: {e}"),
    };
    let held = match cost(a, twin, Level::Seeds) {
        Ok(c) => c.first().map(|(_, d)| format!("held-out cost {}", Interval::of(d).words())).unwrap_or_default(),
        Err(e) => format!("cost: {e}"),
    };
    let verdict = match part.verdict {
        Verdict::Reproduced => "X1 holds".to_string(),
        Verdict::NotReproduced => "X1 does not hold".to_string(),
        v => format!("X1 {}", v.word()),
    };
    format!("{r}, {held}: {verdict}")
}

/// One line of `figures/x1-stagger.csv`.
#[derive(Serialize, Default)]
struct ProfileRow {
    pair: String,
    arm: String,
    seed: u64,
    phase: usize,
    adjusted_accuracy: String,
}
