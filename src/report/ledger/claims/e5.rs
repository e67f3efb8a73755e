//! E5: prefix-padding gaps, large for compressed models and small for full attention, each
//! magnitude beside the paper's (`theory/phase-lab.md` §7.5).

use super::arm::{arm_is_full, modulus, NO_OUTCOMES};
use super::claim::{not_run, Claim, Interval, LedgerClaim, Measure, INTERVAL_FLAG};
use super::files::{phase_data, phase_fig};
use super::gaps::{gap, seed_gap};
use super::judge::{ceiling, ceiling_part, holds, judge, reported, BASELINE_STRIDES, PRIMARY};
use super::parts::{combine, texts, Part, Reported};
use super::records::gap_measure;
use super::words::{ceiling_words, count_ours, gap_words, largest_seed, level_words};
use crate::analysis::phase_test::ALPHA;
use crate::analysis::protocol::Protocol;
use crate::analysis::stats::{self, GapSummary, Magnitude};
use crate::analysis::verdict::{self, Verdict, PAPER_BASELINE_GAP_PP, PAPER_COMPRESSED_GAP_PP};
use crate::report::ledger::collect::{arms, Arm, Collected};

/// The claim (registered in [`super::LEDGER`]).
pub struct E5;

const P: Protocol = Protocol::Prefix;

fn magnitude(g: &GapSummary) -> Magnitude {
    Magnitude { pp: g.gap_pp, lo_pp: g.ci_lo_pp, hi_pp: g.ci_hi_pp }
}

/// Under the v2 rules, an arm's folded prefix gap as the mean of its seeds' gaps (§8.7): the
/// magnitude judged (bias-corrected, basic interval), its measure and its words with the largest
/// seed; `None` under v1 (the seeds pooled, as before).
fn seed_mean(a: &Arm, s: usize, paper: Option<f64>, decides: bool) -> Option<(Magnitude, Measure, String)> {
    if !a.rules.has_training_rule() {
        return None;
    }
    let (b, each) = seed_gap(a, P, Some(s)).ok()?;
    // Issue 38 (§8.11): seed-level (seeds, then prompt families within each), never below 0.
    let v = Interval::of_nonneg(&b);
    let m = Magnitude { pp: v.pp, lo_pp: v.lo_pp, hi_pp: v.hi_pp };
    let measure = Measure {
        arm: a.name.clone(),
        protocol: P.name().into(),
        what: "folded gap, mean over seeds".into(),
        groups: s,
        value: v.clone(),
        noise_floor_pp: None,
        p: None,
        paper_pp: paper,
        decides,
        seeds: Some(each.len()),
        per_seed_pp: each.clone(),
    };
    let words = format!(
        "mean over seeds {} (seed-level: seeds, then prompt families; {}), largest seed {}",
        v.words(),
        stats::SeedCount { seeds: each.len() }.words(),
        largest_seed(&each)
    );
    Some((m, measure, words))
}

/// The compressed part: the model with the largest folded prefix gap (v2: mean over seeds) must
/// show an effect that holds, its gap beside the paper's. Every compressed gap goes to `gaps`
/// (words) and `measures`.
fn compressed_part(comp: &[&Arm], gaps: &mut Vec<String>, measures: &mut Vec<Measure>) -> Part {
    let mut best: Option<(&Arm, usize, GapSummary, f64)> = None;
    for &a in comp {
        let Some(s) = a.stride else { continue };
        let all = gap(a, P, None);
        let all_words = all.as_ref().map(gap_words).unwrap_or_else(|e| e.clone());
        if let Ok(g) = &all {
            measures.extend(gap_measure(a, P, g, None, false));
        }
        match gap(a, P, Some(s)) {
            Ok(g) => {
                let mean = seed_mean(a, s, None, false);
                gaps.push(format!(
                    "{}: folded by {s} {}{}; over {} groups {all_words}",
                    a.name,
                    gap_words(&g),
                    mean.as_ref().map(|m| format!(" ({})", m.2)).unwrap_or_default(),
                    modulus(a)
                ));
                let key = mean.as_ref().map(|m| m.0.pp).unwrap_or(g.gap_pp);
                if best.as_ref().is_none_or(|b| key > b.3) {
                    best = Some((a, s, g, key));
                }
            }
            Err(e) => gaps.push(format!("{}: {e}", a.name)),
        }
    }
    let Some((a, s, g, _)) = best else {
        return Part::new("compressed", Verdict::NotRun, format!("compressed: {NO_OUTCOMES}"));
    };
    let v2 = a.rules.has_training_rule();
    for &x in comp {
        if let Some(sx) = x.stride {
            if let Ok(gx) = gap(x, P, Some(sx)) {
                let paper = (x.name == a.name).then_some(PAPER_COMPRESSED_GAP_PP);
                measures.extend(gap_measure(x, P, &gx, paper, x.name == a.name && !v2));
                measures.extend(seed_mean(x, sx, paper, x.name == a.name).map(|m| m.1));
            }
        }
    }
    let mean = seed_mean(a, s, Some(PAPER_COMPRESSED_GAP_PP), true);
    let (mut part, judged) = holds(a, P, s);
    if let Some(j) = judged {
        let m = mean.as_ref().map(|m| m.0).unwrap_or_else(|| magnitude(&g));
        part.verdict = j.verdict(verdict::Claim::Effect { paper_pp: PAPER_COMPRESSED_GAP_PP }, m);
    }
    let (also, also_test) = reported(a, PRIMARY, s, ALPHA);
    let value = match &mean {
        Some(m) => format!("{}; seeds pooled {}", m.2, gap_words(&g)),
        None => g.boot().map(|b| Interval::of_nonneg(&b).full_words()).unwrap_or_else(|| format!("{:.1} pp", g.gap_pp)),
    };
    part.text = format!(
        "largest folded prefix gap {} ({value}, paper: up to {PAPER_COMPRESSED_GAP_PP} pp): {}; {}",
        a.name, part.text, also
    );
    part.tests.extend(also_test);
    part
}

/// The baseline part of one full-attention arm: no effect and a folded gap whose interval
/// reaches down to the paper's bound, at each of S = 4, 6, 8.
fn baseline_part(a: &Arm) -> Part {
    if a.rules == verdict::Rules::V1 && ceiling(a) == Some(true) {
        return ceiling_part(a);
    }
    let alpha = ALPHA / BASELINE_STRIDES.len() as f64;
    let mut parts = Vec::new();
    for s in BASELINE_STRIDES {
        let part = match (judge(a, P, s, alpha), gap(a, P, Some(s))) {
            (Ok(j), Ok(g)) => {
                let mean = seed_mean(a, s, Some(PAPER_BASELINE_GAP_PP), true);
                let mut measures: Vec<Measure> =
                    gap_measure(a, P, &g, Some(PAPER_BASELINE_GAP_PP), mean.is_none()).into_iter().collect();
                measures.extend(mean.as_ref().map(|m| m.1.clone()));
                let m = mean.as_ref().map(|m| m.0).unwrap_or_else(|| magnitude(&g));
                Part {
                    tests: j.records(a, P, true),
                    measures,
                    ..Part::new(
                        &a.name,
                        j.verdict(verdict::Claim::NoEffect { paper_max_pp: PAPER_BASELINE_GAP_PP }, m),
                        format!(
                            "{}; folded gap {}{} (paper: at most {PAPER_BASELINE_GAP_PP} pp)",
                            j.describe(),
                            gap_words(&g),
                            mean.as_ref().map(|m| format!("; {}", m.2)).unwrap_or_default()
                        ),
                    )
                }
            }
            (Err(e), _) | (_, Err(e)) => Part::new(&a.name, Verdict::NotRun, format!("S = {s}: {e}")),
        };
        parts.push(part);
    }
    Part {
        tests: parts.iter().flat_map(|p| p.tests.clone()).collect(),
        measures: parts.iter().flat_map(|p| p.measures.clone()).collect(),
        ..Part::new(&a.name, combine(&parts), format!("{} prefix: {}", a.name, texts(&parts).replace(" | ", "; ")))
    }
}

impl LedgerClaim for E5 {
    fn id(&self) -> &'static str {
        "E5"
    }

    fn short(&self) -> &'static str {
        "prefix gaps: large when compressed, small for full attention"
    }

    fn paper(&self) -> &'static str {
        "compressed up to 78 pp; full at most 6.1 pp"
    }

    fn check(&self, c: &Collected) -> Claim {
        let c_data = c;
        let claim = "prefix-padding gaps are large for compressed models (paper: up to 78 pp) and small for baselines (paper: at most 6.1 pp)";
        let arms = arms(c);
        let has_prefix = |a: &&Arm| a.runs.iter().any(|r| r.evals.contains_key(&P));
        let full: Vec<&Arm> = arms.iter().filter(|a| arm_is_full(a)).filter(has_prefix).collect();
        let comp: Vec<&Arm> = arms.iter().filter(|a| !arm_is_full(a)).filter(has_prefix).collect();
        if full.is_empty() || comp.is_empty() {
            return not_run(self, claim, vec![]);
        }
        let mut gaps = Vec::new();
        let mut measures = Vec::new();
        let mut parts = vec![compressed_part(&comp, &mut gaps, &mut measures)];
        for a in full {
            let all = gap(a, P, None);
            if let Ok(g) = &all {
                measures.extend(gap_measure(a, P, g, None, false));
            }
            gaps.push(format!(
                "{}: over {} groups {}",
                a.name,
                modulus(a),
                all.as_ref().map(gap_words).unwrap_or_else(|e| e.clone())
            ));
            parts.push(baseline_part(a));
        }
        let mut rep = Reported::default();
        rep.texts.push(format!("gaps (seeds pooled, 95 % bootstrap interval): {}", gaps.join("; ")));
        let mut c = Claim::from_parts(
            self,
            claim,
            format!(
                "prefix protocol, seeds pooled: the compressed model with the largest folded-by-S gap has a phase effect that holds ({}), reproduced when that gap is at least {} of {PAPER_COMPRESSED_GAP_PP} pp, else reproduced qualitatively (smaller); full attention: the effect is absent at each of S = 4, 6, 8 ({}) and the lower end of each folded gap's interval is at most {PAPER_BASELINE_GAP_PP} pp; {}",
                level_words(super::super::collect::rules(c_data), 1),
                verdict::MAGNITUDE_FRACTION,
                level_words(super::super::collect::rules(c_data), 3),
                ceiling_words(super::super::collect::rules(c_data))
            ),
            parts,
            rep,
        );
        // Every measure once: the compressed ones were gathered apart from the parts.
        c.measures.extend(measures);
        c.measures.sort_by(|x, y| (&x.arm, x.groups, &x.what).cmp(&(&y.arm, y.groups, &y.what)));
        c.measures
            .dedup_by(|x, y| x.arm == y.arm && x.groups == y.groups && x.protocol == y.protocol && x.what == y.what);
        let head = c.measures.iter().find(|m| m.decides && m.paper_pp == Some(PAPER_COMPRESSED_GAP_PP));
        let full_max = c
            .measures
            .iter()
            .filter(|m| m.decides && m.paper_pp == Some(PAPER_BASELINE_GAP_PP))
            .max_by(|x, y| x.value.pp.total_cmp(&y.value.pp));
        c.ours = match (head, full_max) {
            (Some(h), Some(f)) => {
                format!("{} ({}); full: largest folded {} (S = {})", h.value.words(), h.arm, f.value.words(), f.groups)
            }
            (Some(h), None) => format!("{} ({})", h.value.words(), h.arm),
            _ => count_ours(&c),
        };
        // The interval method came after the v1 run; the v2 rules pre-registered it (§8.7).
        if super::super::collect::rules(c_data) == verdict::Rules::V1 {
            c.flags.push(INTERVAL_FLAG.into());
        }
        c.figures = vec![phase_fig(P)];
        c.data = vec![phase_data(P)];
        c
    }
}
