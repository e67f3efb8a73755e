//! The report's `README.md`, in layers: the banner (what a reader must know before any number),
//! the top table (one row per claim, short cells), one section per claim with every test and
//! magnitude, then the appendix (models, arms over seeds, theory, a figure gallery by arm,
//! configuration and environment). The ledger part ([`render_ledger`]) renders from
//! `ledger.json` alone ([`Ledger`]); the appendix reads the run data. Renders only; computes no
//! verdict.

use super::banner::Ledger;
use super::claims::{fmt_p, period_word, Claim, Verdict};
use super::collect::{arms, Collected};
use super::screen::{self, cell};
use crate::analysis::protocol::Protocol;
use crate::{Error, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

fn to_json<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string_pretty(v).map(|s| s + "\n").map_err(|e| Error::invalid("report", e.to_string()))
}

/// `values` in percent, one per seed (`-` where missing), and the mean (min..max) of those present.
fn per_seed(per: &[Option<f64>]) -> (String, String) {
    let values: Vec<f64> = per.iter().flatten().copied().collect();
    if values.is_empty() {
        return ("-".into(), "-".into());
    }
    let each: Vec<String> =
        per.iter().map(|v| v.map(|v| format!("{:.1}", 100.0 * v)).unwrap_or_else(|| "-".into())).collect();
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let (lo, hi) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
    (format!("{} %", each.join(" / ")), format!("{:.1} % ({:.1}..{:.1})", 100.0 * mean, 100.0 * lo, 100.0 * hi))
}

/// The arms over their seeds: each seed's held-out and per-protocol accuracy, with their spread.
fn arm_table(md: &mut String, c: &Collected) {
    let arms = arms(c);
    if arms.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\n### Arms over seeds\n\nEach seed's accuracy (seeds in the order listed) and their mean (min..max); `extended` lists the seeds the training-success rule continued (`theory/phase-lab.md` {}: held-out accuracy before -> after), and `excluded` those it left out of every pooled test, reference line and mean, with what it made of them.\n",
        super::collect::rules(c).training_section()
    );
    let mut head = "| arm | seeds | extended | excluded | held-out accuracy | mean (min..max) |".to_string();
    let mut rule = "|---|---|---|---|---|---|".to_string();
    for p in Protocol::ALL {
        head += &format!(" {} accuracy | mean (min..max) |", p.name());
        rule += "---|---|";
    }
    let _ = writeln!(md, "{head}\n{rule}");
    for a in &arms {
        let seeds: Vec<String> = a.runs.iter().map(|r| r.seed.to_string()).collect();
        let held: Vec<Option<f64>> = a.runs.iter().map(|r| r.metrics.as_ref().map(|m| m.final_eval.accuracy)).collect();
        let (each, spread) = per_seed(&held);
        let extended: Vec<String> = a
            .runs
            .iter()
            .copied()
            .chain(a.excluded.iter().map(|e| e.0))
            .filter_map(|r| {
                let m = r.metrics.as_ref()?;
                let first = m.extensions.first()?;
                Some(format!(
                    "{} ({:.1} -> {:.1} %)",
                    r.seed,
                    100.0 * first.accuracy_before,
                    100.0 * m.final_eval.accuracy
                ))
            })
            .collect();
        let excluded: Vec<String> = a.excluded.iter().map(|(r, o)| format!("{} ({})", r.seed, o.words())).collect();
        let or_none = |v: Vec<String>| if v.is_empty() { "-".to_string() } else { v.join(", ") };
        let mut row = format!(
            "| {} | {} | {} | {} | {each} | {spread} |",
            a.name,
            seeds.join(", "),
            or_none(extended),
            or_none(excluded)
        );
        for p in Protocol::ALL {
            let acc: Vec<Option<f64>> =
                a.runs.iter().map(|r| r.evals.get(&p).map(|e| e.profile.mean_accuracy)).collect();
            let (each, spread) = per_seed(&acc);
            row += &format!(" {each} | {spread} |");
        }
        let _ = writeln!(md, "{row}");
    }
}

/// The symbol of a verdict in the top table's per-arm column.
pub fn symbol(v: Verdict) -> &'static str {
    match v {
        Verdict::Reproduced => "✓",
        Verdict::ReproducedSmaller => "◐",
        Verdict::NotReproduced => "✗",
        Verdict::NotTestableCeiling => "⊤",
        Verdict::NotRun => "·",
        Verdict::NotApplicable => "∅",
        Verdict::PerPart => "per part",
    }
}

/// The anchor of a claim's section.
fn anchor(id: &str) -> String {
    id.to_lowercase()
}

fn file_link(f: &str) -> String {
    format!("[{}]({f})", Path::new(f).file_name().and_then(|n| n.to_str()).unwrap_or(f))
}

fn pv(p: &crate::analysis::stats::PValue) -> String {
    p.to_string()
}

/// One claim's section: verdict, claim, criterion, flags, each arm's part, every test, every
/// magnitude, per-seed results, figures (thumbnails) and data.
fn section(md: &mut String, c: &Claim, flags: &[(String, Vec<String>)]) {
    let _ = writeln!(md, "<a id=\"{}\"></a>\n\n### {}: {}\n", anchor(&c.id), c.id, c.short);
    let _ = writeln!(md, "**Verdict: {}.** Ours: {}. Paper: {}.\n", c.verdict.word(), c.ours, c.paper);
    let _ = writeln!(md, "- **Claim** (the paper's): {}", c.claim);
    let judged_by = match c.section.as_str() {
        // A ledger written before claims named their section: its own words.
        "" => "pre-registered, `theory/phase-lab.md` §7.5".to_string(),
        "§6" => "the ledger's criterion, `theory/phase-lab.md` §6".to_string(),
        s => format!("pre-registered, judged by `theory/phase-lab.md` {s}"),
    };
    let _ = writeln!(md, "- **Criterion** ({judged_by}): {}", c.criterion);
    if !c.flags.is_empty() {
        let refs: Vec<String> = c
            .flags
            .iter()
            .filter_map(|f| flags.iter().position(|(t, _)| t == f))
            .map(|i| format!("[flag {}](#{})", i + 1, screen::flag_anchor(i)))
            .collect();
        let _ = writeln!(md, "- **Flags** (each stated once under [Flags](#flags)): {}", refs.join(", "));
    }
    for w in &c.with_excluded {
        let _ = writeln!(md, "- **With the excluded seeds** (issue 38): {w}");
    }
    if !c.arms.is_empty() {
        let _ = writeln!(
            md,
            "\n| arm | verdict | test | statistic | p | seeds significant (need) |\n|---|---|---|---|---|---|"
        );
        for a in &c.arms {
            // The deciding test of the arm (structured); the arm's words, cut to a cell, where
            // it has none. The full text is in ledger.json.
            let t = c.tests.iter().find(|t| t.decides && t.arm == a.arm);
            let (test, stat, p, seeds) = match t {
                Some(t) => (
                    format!("{} S = {}, {} at {}", t.protocol, t.stride, t.method, fmt_p(t.alpha)),
                    format!("LR {:.1}, df {}", t.statistic, t.df),
                    pv(&t.p),
                    format!("{}/{} ({})", t.significant_seeds, t.seeds.len(), t.required_seeds),
                ),
                None => (cell(&a.text), "-".into(), "-".into(), "-".into()),
            };
            let _ = writeln!(
                md,
                "| {} | {} {} | {test} | {stat} | {p} | {seeds} |",
                cell(&a.arm),
                symbol(a.verdict),
                a.verdict.word()
            );
        }
    }
    if !c.tests.is_empty() {
        let _ = writeln!(
            md,
            "\nPooled phase tests (depth-controlled, §7.2-§7.3; \"decides\": the claim's verdict reads it, otherwise reported):\n\n| arm | protocol | decides | S | level | pooled LR | df | method | pooled p | seeds: p | seeds: depth-adjusted spread (pp) | seeds significant (need) |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for t in &c.tests {
            let ps: Vec<String> = t.seeds.iter().map(|s| format!("{}: {}", s.seed, pv(&s.p))).collect();
            let gaps: Vec<String> = t.seeds.iter().map(|s| format!("{:.1}", s.adjusted_gap_pp)).collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {:.1} | {} | {} | {}{} | {} | {} | {}/{} ({}) |",
                t.arm,
                t.protocol,
                if t.decides { "yes" } else { "no" },
                t.stride,
                fmt_p(t.alpha),
                t.statistic,
                t.df,
                t.method,
                pv(&t.p),
                if t.pooled_significant { " (significant)" } else { "" },
                ps.join(" / "),
                gaps.join(" / "),
                t.significant_seeds,
                t.seeds.len(),
                t.required_seeds
            );
        }
    }
    if !c.measures.is_empty() {
        let _ = writeln!(
            md,
            "\nMagnitudes (estimate bias-corrected with its basic 95 % bootstrap interval, clamped at 0 for a quantity that cannot be negative; the raw statistic and its percentile interval, which the v1 verdict reads, beside it; \"resampled\": seeds then prompt families (seed-level, issue 38) or prompts within fixed seeds):\n\n| arm | protocol | what | phases | resampled | estimate [95 % interval] | raw | bias | percentile interval | noise floor | perm. p | paper | decides |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for m in &c.measures {
            let v = &m.value;
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | [{:.1}, {:.1}] | {} | {} | {} | {} |",
                m.arm,
                m.protocol,
                m.what,
                m.groups,
                match m.seeds {
                    Some(n) => format!("seeds ({})", crate::analysis::stats::SeedCount { seeds: n }.words()),
                    None => "prompts".into(),
                },
                v.words(),
                v.raw_pp,
                v.bias_pp,
                v.percentile_pp.0,
                v.percentile_pp.1,
                m.noise_floor_pp.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into()),
                m.p.as_ref().map(pv).unwrap_or_else(|| "-".into()),
                m.paper_pp.map(|x| format!("{x} pp")).unwrap_or_else(|| "-".into()),
                if m.decides { "yes" } else { "no" }
            );
        }
    }
    if !c.seeds.is_empty() {
        let _ = writeln!(md, "\nPer seed:\n\n| arm | seed | meets the rule | what was measured |\n|---|---|---|---|");
        for s in &c.seeds {
            let meets = match s.meets {
                Some(true) => "yes",
                Some(false) => "no",
                None => "not judged (see the text)",
            };
            let _ = writeln!(md, "| {} | {} | {meets} | {} |", s.arm, s.seed, cell(&s.text));
        }
    }
    if !c.figures.is_empty() {
        // A whole-report phase figure is shown as the crop of this claim's arms (linked to the
        // whole figure); other figures as thumbnails.
        let thumbs: Vec<String> = c
            .figures
            .iter()
            .take(THUMBNAILS)
            .enumerate()
            .map(|(i, f)| match screen::crop_of(c).filter(|_| i == 0) {
                Some(crop) => format!(
                    "<a href=\"{crop}\"><img src=\"{crop}\" width=\"520\"></a> ({}'s arms; whole figure: {})",
                    c.id,
                    file_link(f)
                ),
                None => format!("<a href=\"{f}\"><img src=\"{f}\" width=\"260\"></a>"),
            })
            .collect();
        let _ = writeln!(md, "\n{}", thumbs.join(" "));
        if c.figures.len() > THUMBNAILS {
            let rest: Vec<String> = c.figures[THUMBNAILS..].iter().map(|f| file_link(f)).collect();
            let _ = writeln!(md, "\nMore figures: {}", rest.join(", "));
        }
    }
    if !c.data.is_empty() {
        let _ = writeln!(md, "\nData: {}", c.data.iter().map(|f| file_link(f)).collect::<Vec<_>>().join(", "));
    }
    let _ = writeln!(md);
}

/// Thumbnails per claim section; further figures are linked.
const THUMBNAILS: usize = 4;

/// The ledger part of the README: banner, top table and one section per claim, from
/// `ledger.json` alone.
pub fn render_ledger(l: &Ledger) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "## Abstract\n");
    for line in screen::abstract_lines(l) {
        let _ = writeln!(md, "{line}  ");
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "## Claims ledger\n");
    let _ = writeln!(
        md,
        "| id | claim | paper | paper value (pp) | ours [95 % interval] (arm) | ours: seed mean ± sd [seed-level interval] | ours / paper | verdict | per arm | figure |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for c in &l.claims {
        // Up to 8 arms named one by one; more are grouped by verdict, the common one counted
        // (the claim's section names every arm).
        let arms: Vec<String> = if c.arms.len() <= 8 {
            c.arms.iter().map(|a| format!("{} {}", a.arm, symbol(a.verdict))).collect()
        } else {
            let mut by: Vec<(Verdict, Vec<&str>)> = Vec::new();
            for a in &c.arms {
                match by.iter_mut().find(|g| g.0 == a.verdict) {
                    Some(g) => g.1.push(&a.arm),
                    None => by.push((a.verdict, vec![&a.arm])),
                }
            }
            by.iter()
                .map(|(v, names)| match names.len() {
                    1..=2 => format!("{} {}", names.join(", "), symbol(*v)),
                    n => format!("{n} arms {}", symbol(*v)),
                })
                .collect()
        };
        let h = screen::headline(c);
        let paper_value = match h.as_ref().and_then(|h| h.paper).or_else(|| super::paper::paper_value(&c.id)) {
            Some(p) => format!("{:.1} ({})", p.pp, p.kind.words()),
            None => "-".into(),
        };
        let _ = writeln!(
            md,
            "| [{}](#{}) | {} | {} | {} | {} | {} | {} | **{}** | {} | {} |",
            c.id,
            anchor(&c.id),
            cell(&c.short),
            cell(&c.paper),
            paper_value,
            cell(&c.ours),
            h.as_ref().map(|h| h.words()).unwrap_or_else(|| "-".into()),
            h.as_ref().and_then(|h| h.ratio()).map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into()),
            c.verdict.word(),
            if arms.is_empty() { "-".into() } else { cell(&arms.join(", ")) },
            c.figures.first().map(|f| file_link(f)).unwrap_or_else(|| "-".into())
        );
    }
    let _ = writeln!(
        md,
        "\nPer arm: {} reproduced, {} reproduced qualitatively (smaller), {} not reproduced, {} not testable (ceiling), {} not run. Intervals: bias-corrected bootstrap (flagged, issue 31). \"ours: seed mean ± sd\": the deciding seed-level magnitude (each seed's value, its mean and sample sd, with the seed-level interval), or where the claim has none the deciding phase test's depth-adjusted spread of the compressed arm with the largest mean (no interval). The paper's numbers and what kind each is: `src/report/ledger/paper.rs`, citing `seed/paper-summary.txt`; how our setup differs from the paper's: [Setup against the paper](#setup-against-the-paper), after the claims. Each id links its section.\n",
        symbol(Verdict::Reproduced),
        symbol(Verdict::ReproducedSmaller),
        symbol(Verdict::NotReproduced),
        symbol(Verdict::NotTestableCeiling),
        symbol(Verdict::NotRun)
    );
    if !screen::forest_rows(l).is_empty() {
        let f = screen::FOREST_FIGURE;
        let _ = writeln!(
            md,
            "Summary figure: every arm's folded prefix gap (mean over seeds, seed-level interval) beside the paper's numbers and full attention ([data](figures/summary-forest.csv)).\n\n<a href=\"{f}\"><img src=\"{f}\" width=\"900\"></a>\n"
        );
    }
    if !l.banner.is_empty() {
        let _ = writeln!(md, "## Read this first\n");
        for line in screen::banner_lines(l) {
            let _ = writeln!(md, "{line}");
        }
        let _ = writeln!(md);
    }
    screen::deviations(&mut md, l);
    let flags = screen::distinct_flags(l);
    let _ = writeln!(md, "## Claims in detail\n");
    for c in &l.claims {
        section(&mut md, c, &flags);
    }
    if !flags.is_empty() {
        let _ = writeln!(md, "<a id=\"flags\"></a>\n\n### Flags\n\nEach flag once, with the claims that carry it.\n");
        for (i, (text, ids)) in flags.iter().enumerate() {
            let links: Vec<String> = ids.iter().map(|id| format!("[{id}](#{})", anchor(id))).collect();
            let _ = writeln!(
                md,
                "<a id=\"{}\"></a>**Flag {}** ({}): {text}\n",
                screen::flag_anchor(i),
                i + 1,
                links.join(", ")
            );
        }
    }
    md
}

/// The Markdown of the report.
pub fn render(c: &Collected, ledger: &Ledger, caps: &[(String, String)]) -> Result<String> {
    let mut md = String::new();
    let _ = writeln!(md, "# phasekv reproduction report\n");
    let _ = writeln!(
        md,
        "Generated by `phasekv report` from run data; every number and verdict below is computed from the files linked here. Do not edit by hand: rerun `phasekv report`. The ledger below renders from `ledger.json` alone; the data files are documented in [runs/README.md](runs/README.md).\n"
    );
    if let Some(p) = &c.plan {
        let arms: Vec<String> = p.arms()?.into_iter().map(|(name, _)| name).collect();
        let _ = writeln!(md, "Scale: **{:?}** (presets: {}).\n", p.scale, arms.join(", "));
        if p.scale == crate::reproduce::Scale::Quick {
            let _ = writeln!(
                md,
                "This is a smoke run: every model trains for {} steps only (full attention leaves its plateau later) and is evaluated on {} prompts per group, so the E verdicts below test the pipeline, not the paper. The full-scale run is `phasekv reproduce` (committed in the repository's `reports/`).\n",
                p.run.train.steps, p.lab.eval_per_group
            );
        }
    }
    md += &render_ledger(ledger);
    // The setup reads the plan, so it follows the ledger part (which renders from ledger.json
    // alone).
    screen::setup_table(&mut md, c);
    super::near::near_query_section(&mut md, c);
    let _ = writeln!(md, "## Appendix A: models\n");
    let _ = writeln!(
        md,
        "One row per run and protocol. Held-out exact match is the training run's final evaluation; the other columns are the protocol's evaluation: mean of the per-group accuracies, their max minus min, the uncorrected period estimate, the chi-square test of equal accuracy across groups and the permutation p of the max gap (exploratory, §7.4; the verdicts use the depth-controlled test of the claim sections). The last column is the balance of the prompt set: the spread across residue groups of the *target position* (largest minus smallest group mean, in tokens; largest minus smallest group std over the largest), the same for every model of a protocol because the prompts are.\n"
    );
    let _ = writeln!(
        md,
        "| run | training steps | held-out exact match | training minutes | protocol | mean group accuracy | max - min group accuracy (pp) | period, uncorrected (runner-up) | chi-square p, equal groups | permutation p, max gap | target-position spread: mean (tokens) / std (%) |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in &c.runs {
        let (steps, acc, mins) = match &r.metrics {
            Some(m) => (
                m.steps.to_string(),
                format!("{:.1} %", 100.0 * m.final_eval.accuracy),
                format!("{:.1}", m.train_seconds / 60.0),
            ),
            None => ("unfinished".into(), "-".into(), "-".into()),
        };
        if r.evals.is_empty() {
            let _ = writeln!(md, "| {} | {steps} | {acc} | {mins} | - | - | - | - | - | - | - |", r.label);
        }
        for (p, e) in &r.evals {
            let runner = e.profile.period.runner_up().map(|x| x.period.to_string()).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                md,
                "| {} | {steps} | {acc} | {mins} | {} | {:.1} % | {:.1} | {} ({runner}) | {} | {} | {:.2} tokens / {:.1} % |",
                r.label,
                p.name(),
                100.0 * e.profile.mean_accuracy,
                e.profile.max_gap_pp,
                period_word(e),
                fmt_p(e.profile.chi_square.p_value),
                fmt_p(e.profile.permutation_p),
                e.balance.mean_spread,
                100.0 * e.balance.std_spread
            );
        }
    }
    arm_table(&mut md, c);
    if let Some(t) = &c.theory {
        let _ = writeln!(
            md,
            "\n## Appendix B: theory\n\nTheorem 1 phase diagram ('+' holds, 'k' vertex not KKT, 'g' KKT but beaten):\n\n```\n{}```",
            t.diagram
        );
    }
    gallery(&mut md, c, caps);
    let _ = writeln!(md, "\n## Appendix D: configuration and environment\n");
    if let Some(p) = &c.plan {
        let _ = writeln!(md, "Plan (`plan.json`):\n\n```json\n{}```\n", to_json(p)?);
    }
    let _ = writeln!(md, "| unit | seconds | git | source |\n|---|---|---|---|");
    let mut total = 0.0;
    if let Some(k) = &c.kernels {
        total += k.seconds;
        let _ = writeln!(md, "| kernels | {:.0} | - | - |", k.seconds);
    }
    if let Some(t) = &c.theory {
        total += t.seconds;
        let _ = writeln!(md, "| theory | {:.0} | - | - |", t.seconds);
    }
    for r in &c.runs {
        let train = r.metrics.as_ref().map(|m| m.train_seconds).unwrap_or(0.0);
        let analysis = r.unit.as_ref().map(|u| u.analysis_seconds).unwrap_or(0.0);
        total += train + analysis;
        let git = r.environment.as_ref().and_then(|e| e.get("git_hash")).and_then(|g| g.as_str()).unwrap_or("-");
        let _ = writeln!(
            md,
            "| model {} (train {:.0} s + analyses {:.0} s) | {:.0} | {} | {} |",
            r.label,
            train,
            analysis,
            train + analysis,
            git,
            r.dir.display()
        );
    }
    let _ = writeln!(
        md,
        "\nSum of unit times: {:.1} min (one core each; shards run in parallel divide the wall time).",
        total / 60.0
    );
    for t in &c.timings {
        let _ = writeln!(md, "\n- reproduce invocation: `{}`", serde_json::to_string(t).unwrap_or_default());
    }
    Ok(md)
}

/// Every figure with its caption, grouped by arm (figures of one run under its arm; the rest
/// under "whole report").
fn gallery(md: &mut String, c: &Collected, caps: &[(String, String)]) {
    let _ = writeln!(md, "\n## Appendix C: figures by arm\n");
    // A run's figures name it: `<kind>-<label>-<rest>` or `<kind>-<label>.png`.
    let of_run = |f: &str, label: &str| {
        let name = Path::new(f).file_name().and_then(|n| n.to_str()).unwrap_or(f);
        name.contains(&format!("-{label}-")) || name.ends_with(&format!("-{label}.png"))
    };
    let mut used = vec![false; caps.len()];
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for a in arms(c) {
        let mut idx = Vec::new();
        for r in &a.runs {
            for (i, (f, _)) in caps.iter().enumerate() {
                if !used[i] && of_run(f, &r.label) {
                    used[i] = true;
                    idx.push(i);
                }
            }
        }
        if !idx.is_empty() {
            groups.push((a.name.clone(), idx));
        }
    }
    let rest: Vec<usize> = (0..caps.len()).filter(|&i| !used[i]).collect();
    if !rest.is_empty() {
        groups.insert(0, ("whole report".into(), rest));
    }
    for (name, idx) in groups {
        let _ = writeln!(md, "### {name}\n");
        for i in idx {
            let (f, cap) = &caps[i];
            let _ = writeln!(md, "- [{f}]({f}): {cap}");
        }
        let _ = writeln!(md);
    }
}
