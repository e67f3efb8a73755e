//! The ledger's banner: what a reader must know before any number (issue 31). Seeds that did
//! not train, arms at the ceiling, and criteria or methods changed after seeing the data, each
//! naming the claims it touches. Computed from the run data and the claims; renders from
//! `ledger.json`.

use super::claims::{Claim, Verdict};
use super::collect::{arms, Collected};
use crate::analysis::verdict::Rules;
use serde::{Deserialize, Serialize};

/// Held-out exact match below which a seed did not learn the task: it is named first in the
/// banner, drawn apart in the figures and pooled into no line. v1 has no rule for it (§7.3), so
/// it stays in every v1 test and verdict as run. The committed run's seeds are at 86.9 % or
/// more except `full-seed2` (35.6 %).
pub const FAILED_ACCURACY: f64 = 0.5;

/// The v2 training-success threshold (`theory/phase-lab.md` §8.2; the rule's one definition is
/// `analysis::training`): under v1 rules seeds below it are listed in the banner (reported
/// only), under v2 they are excluded.
pub use crate::analysis::training::SUCCESS_ACCURACY;

/// `ledger.json`: the banner and the claims.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    /// What a reader must know first.
    pub banner: Vec<BannerEntry>,
    /// The claims, in ledger order.
    pub claims: Vec<Claim>,
    /// Built with `--partial` from data holding unfinished runs (the banner's first entry
    /// names them); absent from the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

/// One entry of the banner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BannerEntry {
    /// `seed that did not train`, `at the ceiling` or `changed after seeing the data`.
    pub kind: String,
    /// What it says.
    pub text: String,
    /// The claims it touches (ids; each links its section).
    pub claims: Vec<String>,
    /// Entries of one kind sharing a group key render as one line (issue 43: one line per
    /// excluded arm, not one per seed); absent in a ledger written before, which renders one
    /// line per entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<BannerGroup>,
}

/// How an entry joins the one line of its group: the line is `head` followed by every member's
/// `item`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BannerGroup {
    /// Entries with equal keys (and kinds) share a line.
    pub key: String,
    /// The group's words, the same in every member.
    pub head: String,
    /// This entry's part of the line.
    pub item: String,
}

/// Where the training-success rule of `rules` is stated: §8.2 (v2, whose one extension the
/// committed report's words leave implicit), or §9.4 with its budget of extensions (v3).
fn rule_reference(rules: Rules) -> String {
    match (rules, rules.max_extensions()) {
        (Rules::V3, Some(n)) => format!("{}, a budget of {n} extensions", rules.training_section()),
        _ => rules.training_section().to_string(),
    }
}

/// The claims that rest on `arm` (an arm verdict or a per-seed line of it).
fn claims_of(claims: &[Claim], arm: &str) -> Vec<String> {
    claims
        .iter()
        .filter(|c| c.arms.iter().any(|a| a.arm == arm) || c.seeds.iter().any(|s| s.arm == arm))
        .map(|c| c.id.clone())
        .collect()
}

/// Whether claim `cl` names arm `arm` in a part or its measured words (a claim that rests on an
/// arm says so there, run or not).
fn names_arm(cl: &Claim, arm: &str) -> bool {
    let named = |t: &str| t.split(|ch: char| !(ch.is_alphanumeric() || ch == '-')).any(|w| w == arm);
    named(&cl.measured) || cl.arms.iter().any(|a| a.arm == arm || named(&a.text))
}

/// The arms the plan cut before its run (§9.8), if any: one entry naming them, their seeds,
/// the plan's reason, and the claims that name them.
fn cut_entry(c: &Collected, claims: &[Claim]) -> Option<BannerEntry> {
    let plan = c.plan.as_ref()?;
    let cut = plan.cut.as_ref()?;
    let seeds = plan.seed_list();
    let arms: Vec<String> =
        cut.arms.iter().map(|a| format!("`{}` ({} seeds)", a.name, a.seeds.as_ref().unwrap_or(&seeds).len())).collect();
    Some(BannerEntry {
        kind: "arms cut before the run".into(),
        text: format!(
            "{} were cut from the end of the pre-registered list before the run (theory/phase-lab.md §9.8: arms are cut, never seeds, when the measured plan does not fit the run's time limit) and never trained; every claim or part that rests on them reads not run. Why: {}",
            arms.join(", "),
            cut.reason
        ),
        claims: claims
            .iter()
            .filter(|cl| cut.arms.iter().any(|a| names_arm(cl, &a.name)))
            .map(|cl| cl.id.clone())
            .collect(),
        group: None,
    })
}

/// The banner of a report.
pub fn banner(c: &Collected, claims: &[Claim]) -> Vec<BannerEntry> {
    let mut out = Vec::new();
    out.extend(cut_entry(c, claims));
    // v2 (§8.2): every seed the training-success rule excludes, with what it made of it.
    for a in arms(c) {
        for (r, o) in &a.excluded {
            let acc = r.metrics.as_ref().map(|m| (m.final_eval.accuracy, m.steps)).unwrap_or((f64::NAN, 0));
            out.push(BannerEntry {
                kind: "seed excluded by the training-success rule".into(),
                text: format!(
                    "`{}` ended at {:.1} % held-out exact match after {} steps, below {:.0} % ({}); by the {} rule (theory/phase-lab.md {}) it is excluded from every pooled test, reference line, mean and interval of `{}`, which is judged on its {} successful seed(s)",
                    r.label,
                    100.0 * acc.0,
                    acc.1,
                    100.0 * SUCCESS_ACCURACY,
                    o.words(),
                    a.rules.name(),
                    rule_reference(a.rules),
                    a.name,
                    a.runs.len()
                ),
                claims: claims_of(claims, &a.name),
                group: Some(BannerGroup {
                    key: a.name.clone(),
                    head: format!(
                        "`{}`: by the {} rule (theory/phase-lab.md {}: held-out exact match below {:.0} %) these seeds are excluded from every pooled test, reference line, mean and interval of the arm, which is judged on its {} successful seed(s)",
                        a.name,
                        a.rules.name(),
                        rule_reference(a.rules),
                        100.0 * SUCCESS_ACCURACY,
                        a.runs.len()
                    ),
                    item: format!("`{}` {:.1} % after {} steps ({})", r.label, 100.0 * acc.0, acc.1, o.words()),
                }),
            });
        }
    }
    for a in arms(c).into_iter().filter(|a| a.rules == Rules::V1) {
        for r in &a.runs {
            let Some(m) = &r.metrics else { continue };
            if m.final_eval.accuracy >= FAILED_ACCURACY {
                continue;
            }
            let others: Vec<String> = a
                .runs
                .iter()
                .filter(|o| o.label != r.label)
                .filter_map(|o| {
                    o.metrics.as_ref().map(|m| format!("{} {:.1} %", o.label, 100.0 * m.final_eval.accuracy))
                })
                .collect();
            out.push(BannerEntry {
                kind: "seed that did not train".into(),
                text: format!(
                    "`{}` reached {:.1} % held-out exact match after {} steps (other seeds of `{}`: {}). The v1 rules have no training-success criterion (theory/phase-lab.md §7.3, §7.9), so this seed stays in every pooled test of its arm and the verdicts are as computed. The figures draw it in a panel of its own and pool it into no line or reference; the v2 rule (held-out at least {:.0} %, §8.2) would exclude it",
                    r.label,
                    100.0 * m.final_eval.accuracy,
                    m.steps,
                    a.name,
                    if others.is_empty() { "none".to_string() } else { others.join(", ") },
                    100.0 * SUCCESS_ACCURACY
                ),
                claims: claims_of(claims, &a.name),
                group: None,
            });
        }
    }
    let below: Vec<String> = c
        .runs
        .iter()
        .filter_map(|r| r.metrics.as_ref().map(|m| (r, m.final_eval.accuracy)))
        .filter(|(_, a)| (FAILED_ACCURACY..SUCCESS_ACCURACY).contains(a))
        .map(|(r, a)| format!("`{}` {:.1} %", r.label, 100.0 * a))
        .collect();
    if !below.is_empty() && super::collect::rules(c) == Rules::V1 {
        out.push(BannerEntry {
            kind: "below the v2 training-success threshold".into(),
            text: format!(
                "{} learned the task but end below the {:.0} % held-out exact match that the v2 rules require (§8.2); v1 has no such rule, so they are used as run everywhere (reported only)",
                below.join(", "),
                100.0 * SUCCESS_ACCURACY
            ),
            claims: vec![],
            group: None,
        });
    }
    let mut ceiling: Vec<&str> = Vec::new();
    for cl in claims {
        for a in cl.arms.iter().filter(|a| a.verdict == Verdict::NotTestableCeiling) {
            if !ceiling.contains(&a.arm.as_str()) {
                ceiling.push(&a.arm);
            }
        }
    }
    if !ceiling.is_empty() {
        let ids: Vec<String> = claims
            .iter()
            .filter(|cl| cl.arms.iter().any(|a| a.verdict == Verdict::NotTestableCeiling))
            .map(|cl| cl.id.clone())
            .collect();
        out.push(BannerEntry {
            kind: "at the ceiling".into(),
            text: format!(
                "{} reach at least {:.0} % in every residue group under every protocol (seeds pooled): no phase can be more than {:.0} pp worse there, so neither an effect nor its absence can be shown, and they are not testable for any claim that rests on them alone (§7.5)",
                ceiling.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", "),
                100.0 * crate::analysis::verdict::CEILING_ACCURACY,
                100.0 * (1.0 - crate::analysis::verdict::CEILING_ACCURACY)
            ),
            claims: ids,
            group: None,
        });
    }
    // Every change made after seeing data, with its time, from its one list (§8.11), naming the
    // claims that carry its flag (none: it touched no verdict, and is listed all the same).
    let rules = super::collect::rules(c);
    let listed: Vec<String> = super::changes::changes_for(rules).map(|ch| ch.flag()).collect();
    for ch in super::changes::changes_for(rules) {
        let flag = ch.flag();
        out.push(BannerEntry {
            kind: "changed after seeing the data".into(),
            text: format!("{}, after seeing {}: {} (theory/phase-lab.md §8.11)", ch.time, ch.seen, ch.what),
            claims: claims.iter().filter(|cl| cl.flags.contains(&flag)).map(|cl| cl.id.clone()).collect(),
            group: None,
        });
    }
    // Issue 38: every claim that reads otherwise with the excluded seeds kept.
    for cl in claims.iter().filter(|cl| !cl.with_excluded.is_empty()) {
        out.push(BannerEntry {
            kind: "reads otherwise with an excluded seed".into(),
            text: format!("{}: {}", cl.id, cl.with_excluded.join(" | ")),
            claims: vec![cl.id.clone()],
            group: None,
        });
    }
    // Flags from elsewhere (the v1 run's, §7.9): one entry per distinct flag, naming every
    // claim that carries it.
    let mut flags: Vec<(&str, Vec<String>)> = Vec::new();
    for cl in claims {
        for f in cl.flags.iter().filter(|f| !listed.contains(f)) {
            match flags.iter_mut().find(|(t, _)| t == f) {
                Some((_, ids)) => ids.push(cl.id.clone()),
                None => flags.push((f, vec![cl.id.clone()])),
            }
        }
    }
    for (text, ids) in flags {
        out.push(BannerEntry {
            kind: "changed after seeing the data".into(),
            text: text.into(),
            claims: ids,
            group: None,
        });
    }
    out
}
