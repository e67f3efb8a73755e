//! How the ledger writes its numbers: p-values, tests and gaps in one line, a claim's headline
//! value, and the levels and ceiling rule in the criteria's words.

use super::claim::{Claim, Interval, SeedLine};
use super::parts::Part;
use super::records::method_word;
use crate::analysis::phase_test::{PooledContinuousTest, PooledPhaseTest, ALPHA};
use crate::analysis::stats::GapSummary;
use crate::analysis::verdict::{Rules, Verdict};
use crate::lab::EvalResult;

/// A p-value as the ledger writes it.
pub(in crate::report::ledger) fn fmt_p(p: f64) -> String {
    if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

/// The estimated period, or `none`.
pub(in crate::report::ledger) fn period_word(e: &EvalResult) -> String {
    e.profile.period().map(|p| p.to_string()).unwrap_or_else(|| "none".into())
}

/// A pooled test in one line: statistic, df, method, p, each seed's p and the agreement.
pub(super) fn describe(t: &PooledPhaseTest) -> String {
    let method = method_word(t.method);
    let ps: Vec<String> = t.seeds.iter().map(|s| s.p.to_string()).collect();
    let gaps: Vec<String> = t.seeds.iter().map(|s| format!("{:.1}", s.adjusted_gap_pp)).collect();
    format!(
        "S = {}: pooled LR {:.1}, df {}, {method} p {}; seeds p {} (depth-adjusted phase spread {} pp); {} at {}",
        t.stride,
        t.statistic,
        t.df,
        t.p,
        ps.join(" / "),
        gaps.join(" / "),
        t.agreement.describe(),
        fmt_p(t.agreement.alpha)
    )
}

/// A pooled continuous test in one line.
pub(super) fn describe_nll(t: &PooledContinuousTest) -> String {
    let ps: Vec<String> = t.seeds.iter().map(|s| s.p.to_string()).collect();
    let spread: Vec<String> = t
        .seeds
        .iter()
        .map(|s| {
            let (lo, hi) =
                s.mean_nll.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| (l.min(x), h.max(x)));
            format!("{:.3}", hi - lo)
        })
        .collect();
    format!(
        "NLL S = {}: pooled F {:.2}, within-family permutation p {}; seeds p {} (phase spread of mean NLL {} nats); {} at {}",
        t.stride,
        t.statistic,
        t.p,
        ps.join(" / "),
        spread.join(" / "),
        t.agreement.describe(),
        fmt_p(t.agreement.alpha)
    )
}

/// A gap in words: value, interval (bias-corrected, with the raw value and the percentile
/// interval beside it), noise floor, permutation p.
pub(super) fn gap_words(g: &GapSummary) -> String {
    let value = match g.boot() {
        Some(b) => Interval::of_nonneg(&b).full_words(),
        None => format!("{:.1} pp [{:.1}, {:.1}]", g.gap_pp, g.ci_lo_pp, g.ci_hi_pp),
    };
    format!("{value}, noise floor {:.1} pp, perm. p {}", g.noise_floor_pp, g.p)
}

/// The largest of per-seed values `(seed, pp)` in words: `x pp (seed k)`.
pub(super) fn largest_seed(each: &[(u64, f64)]) -> String {
    match each.iter().max_by(|x, y| x.1.total_cmp(&y.1)) {
        Some((k, v)) => format!("{v:.1} pp (seed {k})"),
        None => "-".into(),
    }
}

/// The largest per-seed depth-adjusted spread of a part's deciding binary tests (§8.7: E2 and
/// E5 report it with its seed), in words.
pub(super) fn largest_seed_spread(part: &Part) -> Option<String> {
    let each: Vec<(u64, f64)> = part
        .tests
        .iter()
        .filter(|t| t.decides && t.method != "NLL permutation F")
        .flat_map(|t| t.seeds.iter().map(|s| (s.seed, s.adjusted_gap_pp)))
        .collect();
    (!each.is_empty()).then(|| largest_seed(&each))
}

/// Our value of a claim without a magnitude: its arms counted by verdict.
pub(super) fn count_ours(c: &Claim) -> String {
    let states = [
        (Verdict::Reproduced, "reproduced"),
        (Verdict::ReproducedSmaller, "smaller"),
        (Verdict::NotReproduced, "not reproduced"),
        (Verdict::NotTestableCeiling, "at the ceiling"),
        (Verdict::NotRun, "not run"),
        (Verdict::NotApplicable, "not applicable"),
    ];
    let bits: Vec<String> = states
        .iter()
        .map(|&(v, w)| (c.arms.iter().filter(|a| a.verdict == v).count(), w))
        .filter(|(n, _)| *n > 0)
        .map(|(n, w)| format!("{n} {w}"))
        .collect();
    format!("arms: {}", bits.join(", "))
}

/// Arms sharing one count: (seeds meeting the rule, seeds, not applicable) and their names.
type SeedCountGroup<'a> = ((usize, usize, bool), Vec<&'a str>);

/// Our value of a claim judged seed by seed: per arm, the seeds that meet its rule.
pub(super) fn seeds_ours(c: &Claim) -> String {
    // Arms with the same count share one entry; more than two of them are counted, not named
    // (the top table's cells stay short; the claim's section names every arm).
    // An arm the rule does not apply to reads `n/a`, never a count of seeds that "meet" it.
    let mut groups: Vec<SeedCountGroup> = Vec::new();
    for a in &c.arms {
        let of: Vec<&SeedLine> = c.seeds.iter().filter(|s| s.arm == a.arm).collect();
        let key = (of.iter().filter(|s| s.meets == Some(true)).count(), of.len(), a.verdict == Verdict::NotApplicable);
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => g.1.push(&a.arm),
            None => groups.push((key, vec![&a.arm])),
        }
    }
    let bits: Vec<String> = groups
        .iter()
        .map(|((ok, n, na), arms)| {
            let count = if *na { "n/a".to_string() } else { format!("{ok}/{n}") };
            if arms.len() > 2 {
                format!("{} arms {count}", arms.len())
            } else {
                format!("{} {count}", arms.join(", "))
            }
        })
        .collect();
    format!("seeds meeting the rule: {}", bits.join("; "))
}

/// A level as the criteria print it (`0.005`, `0.00167`).
pub(super) fn fmt_level(x: f64) -> String {
    let s = format!("{x:.5}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The level a phase effect of one model is judged at under `rules`, each of `strides` strides
/// Bonferroni-corrected, in the criteria's words: v1 one test at `ALPHA / strides` (§7.3); v2
/// either of two tests at `ALPHA / strides / 2` (§8.3-8.4); v3 as v2 on the scored families
/// (§9.2, §9.6).
pub(super) fn level_words(rules: Rules, strides: usize) -> String {
    let per = ALPHA / strides as f64;
    let over = if strides > 1 { format!(" (ALPHA / {strides})") } else { String::new() };
    match rules {
        Rules::V1 => format!("pooled p < {}{over} and in at least required_seeds(n) seeds (§7.3)", fmt_level(per)),
        Rules::V2 => format!(
            "the binary or the continuous test, each at p < {} (ALPHA{} / 2), pooled and in at least required_seeds(n) successful seeds (§8.3-8.4)",
            fmt_level(per / 2.0),
            if strides > 1 { format!(" / {strides}") } else { String::new() }
        ),
        Rules::V3 => format!(
            "the binary or the continuous test, each at p < {} (ALPHA{} / 2), pooled and in at least required_seeds(n) successful seeds, on the families scored beyond the depth floor (§9.2, §9.6: §8.3-8.4 unchanged)",
            fmt_level(per / 2.0),
            if strides > 1 { format!(" / {strides}") } else { String::new() }
        ),
    }
}

/// The ceiling rule in the criteria's words: v1 a model at the ceiling is not tested (§7.5);
/// v2 only an absent effect at both ceilings is not testable (§8.5); v3 as v2 (§9.6).
pub(super) fn ceiling_words(rules: Rules) -> &'static str {
    match rules {
        Rules::V1 => "a model at the ceiling is not testable (§7.5)",
        Rules::V2 => "an effect that holds counts at the ceiling; an absent one is not testable when every group is at both the accuracy and the probability ceiling (§8.5)",
        Rules::V3 => "an effect that holds counts at the ceiling; an absent one is not testable when every group is at both the accuracy and the probability ceiling, read on the scored families (§9.6: §8.5's rule)",
    }
}

/// The section of `theory/phase-lab.md` whose criterion judges claim `id` under `rules`: the
/// pre-registrations' criteria for the phase claims (§7.5 for v1, §8.8 for v2, §9.7 for v3), §6 for the
/// theorems and the kernels' invariants (criteria of the ledger, not pre-registered).
pub fn section_of(id: &str, rules: Rules) -> &'static str {
    match (id, rules) {
        ("T1" | "T2" | "K", _) => "§6",
        (_, Rules::V1) => "§7.5",
        (_, Rules::V2) => "§8.8",
        (_, Rules::V3) => "§9.7",
    }
}
