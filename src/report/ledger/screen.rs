//! The report's first screen and the pieces that keep it short (issue 43): the five-line
//! abstract, the claims' headline numbers beside the paper's ([`headline`]), one paragraph per
//! distinct flag ([`distinct_flags`]), one banner line per excluded arm ([`banner_lines`]),
//! table cells of at most [`CELL_LIMIT`] characters ([`cell`]), the setup against the paper and
//! the deviations table. Renders from `ledger.json` (and the plan for the setup); computes no
//! verdict and changes no number.

use super::banner::Ledger;
use super::changes::changes_for;
use super::claims::{Claim, Verdict};
use super::paper::{paper_baseline, paper_value, PaperValue, PAPER_SETUP};
use crate::analysis::stats::sample_variance;
use std::fmt::Write as _;

/// The most characters a table cell of the report may hold; the full text is in `ledger.json`.
pub const CELL_LIMIT: usize = 300;

/// The words that end a cut cell.
const CUT: &str = " … (full text: ledger.json)";

/// `s` as one table cell: `|` replaced, newlines joined, and cut at a word boundary so that it
/// holds at most [`CELL_LIMIT`] characters, ending in words that say where the rest is.
pub fn cell(s: &str) -> String {
    let s = s.replace('|', "/").replace('\n', " ");
    if s.chars().count() <= CELL_LIMIT {
        return s;
    }
    let keep = CELL_LIMIT - CUT.chars().count();
    let head: String = s.chars().take(keep).collect();
    let head = match head.rfind(' ') {
        Some(i) if i > keep / 2 => head[..i].to_string(),
        _ => head,
    };
    format!("{}{CUT}", head.trim_end_matches([',', ';', ' ']))
}

/// A claim's headline magnitude: the seed mean ± sd of one arm with its seed-level interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Headline {
    /// The arm.
    pub arm: String,
    /// What is measured.
    pub what: String,
    /// The mean over seeds, pp.
    pub mean: f64,
    /// The sample standard deviation over seeds, pp.
    pub sd: f64,
    /// Seeds.
    pub n: usize,
    /// The seed-level interval, pp, where the ledger has one.
    pub interval: Option<(f64, f64)>,
    /// The paper's number it is set beside.
    pub paper: Option<&'static PaperValue>,
}

impl Headline {
    /// Ours over the paper's, where the paper gives a number.
    pub fn ratio(&self) -> Option<f64> {
        self.paper.filter(|p| p.pp != 0.0).map(|p| self.mean / p.pp)
    }

    /// `mean ± sd pp [lo, hi] (arm, n seeds)`.
    pub fn words(&self) -> String {
        format!(
            "{:.1} ± {:.1} pp{} ({}, {} seeds)",
            self.mean,
            self.sd,
            self.interval
                .map(|(lo, hi)| format!(" [{lo:.1}, {hi:.1}]"))
                .unwrap_or_else(|| " (no seed-level interval)".into()),
            self.arm,
            self.n
        )
    }
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    (v.iter().sum::<f64>() / v.len().max(1) as f64, sample_variance(v).sqrt())
}

/// The headline of claim `c`: the deciding seed-level magnitude set beside the paper's number
/// (the largest where several are), else the deciding phase test's depth-adjusted spread of the
/// compressed arm with the largest seed mean (no interval: the ledger keeps none for it). `None`
/// for a claim with neither, or judged part by part.
pub fn headline(c: &Claim) -> Option<Headline> {
    if c.verdict == Verdict::PerPart {
        return None;
    }
    let paper = paper_value(&c.id);
    // A seed-level magnitude with its seeds' values, the paper's quantity where it has one.
    let measured = c
        .measures
        .iter()
        .filter(|m| m.decides && m.seeds.is_some() && !m.per_seed_pp.is_empty())
        .filter(|m| paper.is_none() || m.paper_pp == paper.map(|p| p.pp))
        .max_by(|a, b| a.value.pp.total_cmp(&b.value.pp));
    if let Some(m) = measured {
        let v: Vec<f64> = m.per_seed_pp.iter().map(|s| s.1).collect();
        let (mean, sd) = mean_sd(&v);
        return Some(Headline {
            arm: m.arm.clone(),
            what: m.what.clone(),
            mean,
            sd,
            n: v.len(),
            interval: Some((m.value.lo_pp, m.value.hi_pp)),
            paper,
        });
    }
    let mut best: Option<Headline> = None;
    for t in c.tests.iter().filter(|t| t.decides && t.arm != "full" && !t.seeds.is_empty()) {
        let v: Vec<f64> = t.seeds.iter().map(|s| s.adjusted_gap_pp).collect();
        let (mean, sd) = mean_sd(&v);
        if best.as_ref().is_none_or(|b| mean > b.mean) {
            best = Some(Headline {
                arm: t.arm.clone(),
                what: format!("depth-adjusted phase spread, {} (S = {})", t.protocol, t.stride),
                mean,
                sd,
                n: v.len(),
                interval: None,
                // Another quantity than the paper's number: never set beside it.
                paper: None,
            });
        }
    }
    best
}

/// Full attention's largest deciding seed-level magnitude under claim `c`, beside the paper's
/// bound for baselines: `(pp, lo, hi, paper)`.
pub fn baseline(c: &Claim) -> Option<(f64, f64, f64, &'static PaperValue)> {
    let paper = paper_baseline(&c.id)?;
    c.measures
        .iter()
        .filter(|m| m.decides && m.arm == "full" && m.seeds.is_some())
        .max_by(|a, b| a.value.pp.total_cmp(&b.value.pp))
        .map(|m| (m.value.pp, m.value.lo_pp, m.value.hi_pp, paper))
}

/// The distinct flags of the ledger, in first-seen order, each with the claims carrying it.
pub fn distinct_flags(l: &Ledger) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for c in &l.claims {
        for f in &c.flags {
            match out.iter_mut().find(|(t, _)| t == f) {
                Some((_, ids)) => ids.push(c.id.clone()),
                None => out.push((f.clone(), vec![c.id.clone()])),
            }
        }
    }
    out
}

/// The anchor of flag paragraph `i` (0-based).
pub fn flag_anchor(i: usize) -> String {
    format!("flag-{}", i + 1)
}

fn ids(v: &[String]) -> String {
    v.iter().map(|id| format!("[{id}](#{})", id.to_lowercase())).collect::<Vec<_>>().join(", ")
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The five lines of the abstract, from the ledger alone: what holds, how large beside the
/// paper, full attention beside its bound, what to distrust, and what lies beyond the paper.
pub fn abstract_lines(l: &Ledger) -> Vec<String> {
    let by = |v: Verdict| -> Vec<String> { l.claims.iter().filter(|c| c.verdict == v).map(|c| c.id.clone()).collect() };
    let mut out = Vec::new();
    out.push(format!(
        "**What holds**: {} of {} claims reproduced ({}); reproduced but smaller: {}; not reproduced: {}; not run: {}.",
        by(Verdict::Reproduced).len(),
        l.claims.len(),
        list(&by(Verdict::Reproduced)),
        list(&by(Verdict::ReproducedSmaller)),
        list(&by(Verdict::NotReproduced)),
        list(&by(Verdict::NotRun))
    ));
    let sized: Vec<String> = l
        .claims
        .iter()
        .filter_map(|c| headline(c).filter(|h| h.paper.is_some() && h.interval.is_some()).map(|h| (c, h)))
        .map(|(c, h)| {
            let p = h.paper.expect("filtered");
            format!(
                "{}: {} seed mean ± sd {:.1} ± {:.1} pp (seed-level interval [{:.1}, {:.1}]) against {} of {:.1} pp, ratio {:.2}",
                c.id,
                h.arm,
                h.mean,
                h.sd,
                h.interval.map(|i| i.0).unwrap_or(f64::NAN),
                h.interval.map(|i| i.1).unwrap_or(f64::NAN),
                p.kind.words(),
                p.pp,
                h.ratio().unwrap_or(f64::NAN)
            )
        })
        .collect();
    out.push(format!(
        "**How large beside the paper**: {}.",
        if sized.is_empty() { "no claim with a paper number was measured".to_string() } else { sized.join("; ") }
    ));
    let base: Vec<String> = l
        .claims
        .iter()
        .filter_map(|c| baseline(c).map(|b| (c, b)))
        .map(|(c, (pp, lo, hi, p))| {
            format!(
                "{}: full attention's largest folded gap {:.1} pp [{:.1}, {:.1}] against {} of {:.1} pp",
                c.id,
                pp,
                lo,
                hi,
                p.kind.words(),
                p.pp
            )
        })
        .collect();
    out.push(format!(
        "**Full attention**: {}.",
        if base.is_empty() { "no baseline magnitude in the ledger".to_string() } else { base.join("; ") }
    ));
    let excluded: Vec<String> =
        banner_groups(l).into_iter().filter(|(k, _)| k.starts_with("seed excluded")).map(|(_, v)| v).collect();
    let changed = l.banner.iter().filter(|b| b.kind == CHANGED).count();
    let otherwise: Vec<String> =
        l.claims.iter().filter(|c| !c.with_excluded.is_empty()).map(|c| c.id.clone()).collect();
    out.push(format!(
        "**What to distrust**: {} change(s) made after seeing the data (the deviations table); {} arm(s) with seeds excluded by the training-success rule; claims that read otherwise with the excluded seeds: {}; every seed-level interval rests on {} or fewer.",
        changed,
        excluded.len(),
        list(&otherwise),
        match l.claims.iter().flat_map(|c| c.measures.iter().filter_map(|m| m.seeds)).max().unwrap_or(0) {
            1 => "1 seed".to_string(),
            n => format!("{n} seeds"),
        }
    ));
    let beyond: Vec<String> =
        l.claims.iter().filter(|c| c.verdict == Verdict::PerPart).map(|c| format!("{}: {}", c.id, c.ours)).collect();
    out.push(format!(
        "**Beyond the paper**: {}.",
        if beyond.is_empty() { "none".to_string() } else { beyond.join("; ") }
    ));
    out
}

/// The banner kind of a change made after seeing the data.
pub const CHANGED: &str = "changed after seeing the data";

/// The banner as rendered lines, each with its kind: entries sharing a group render as one
/// line; the changes after seeing the data as one line pointing at the deviations table.
fn banner_groups(l: &Ledger) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut done = vec![false; l.banner.len()];
    let mut changes: Vec<String> = Vec::new();
    for (i, b) in l.banner.iter().enumerate() {
        if done[i] {
            continue;
        }
        done[i] = true;
        if b.kind == CHANGED {
            for id in &b.claims {
                if !changes.contains(id) {
                    changes.push(id.clone());
                }
            }
            if out.iter().all(|(k, _)| k != CHANGED) {
                out.push((CHANGED.into(), String::new()));
            }
            continue;
        }
        let links = |claims: &[String]| if claims.is_empty() { String::new() } else { format!(" ({})", ids(claims)) };
        match &b.group {
            Some(g) => {
                let mut items = vec![g.item.clone()];
                let mut claims = b.claims.clone();
                for (j, o) in l.banner.iter().enumerate().skip(i + 1) {
                    if let Some(og) = o.group.as_ref().filter(|og| og.key == g.key && o.kind == b.kind) {
                        done[j] = true;
                        items.push(og.item.clone());
                        claims.extend(o.claims.iter().filter(|c| !b.claims.contains(c)).cloned());
                    }
                }
                out.push((b.kind.clone(), format!("{}: {}{}", g.head, items.join("; "), links(&claims))));
            }
            None => out.push((b.kind.clone(), format!("{}{}", b.text, links(&b.claims)))),
        }
    }
    let n = l.banner.iter().filter(|b| b.kind == CHANGED).count();
    if let Some(e) = out.iter_mut().find(|(k, _)| k == CHANGED) {
        e.1 = format!(
            "{n} change(s) of rules or of how the code reads them, each dated in the [deviations table](#deviations-from-the-pre-registration) with what had been seen{}",
            if changes.is_empty() { String::new() } else { format!(" ({})", ids(&changes)) }
        );
    }
    out
}

/// The banner's lines (`- **kind**: text`).
pub fn banner_lines(l: &Ledger) -> Vec<String> {
    banner_groups(l).into_iter().map(|(k, t)| format!("- **{k}**: {t}")).collect()
}

/// The deviations table: every change after seeing the data, dated (the §8.11 list), then the
/// other flags of that kind (v1's, §7.9, undated), from the ledger's banner.
pub fn deviations(md: &mut String, l: &Ledger) {
    let entries: Vec<&super::banner::BannerEntry> = l.banner.iter().filter(|b| b.kind == CHANGED).collect();
    if entries.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "<a id=\"deviations-from-the-pre-registration\"></a>\n\n### Deviations from the pre-registration\n\nEvery change made after some data were seen (`theory/phase-lab.md` §8.11; v1's in §7.9), oldest first.\n\n| # | date (UTC) | after seeing | what changed | claims |\n|---|---|---|---|---|"
    );
    let mut row = 0;
    for b in entries {
        row += 1;
        let dated = [crate::analysis::verdict::Rules::V1, crate::analysis::verdict::Rules::V2]
            .into_iter()
            .flat_map(changes_for)
            .find(|ch| b.text.starts_with(ch.time));
        let (time, seen, what) = match dated {
            Some(ch) => (ch.time.trim_end_matches(" UTC").to_string(), ch.seen.to_string(), ch.what.to_string()),
            None => ("- (v1, §7.9)".into(), "-".into(), b.text.clone()),
        };
        let _ = writeln!(
            md,
            "| {row} | {} | {} | {} | {} |",
            cell(&time),
            cell(&seen),
            cell(&what),
            if b.claims.is_empty() { "none".into() } else { ids(&b.claims) }
        );
    }
    let _ = writeln!(md);
}

/// The setup against the paper's: ours from the plan and the runs, the paper's from
/// [`PAPER_SETUP`].
pub fn setup_table(md: &mut String, c: &super::collect::Collected) {
    let Some(p) = &c.plan else { return };
    let m = &p.run.model;
    let t = &p.run.task;
    let steps: Vec<usize> = c.runs.iter().filter_map(|r| r.metrics.as_ref().map(|m| m.steps)).collect();
    let (lo, hi) = (steps.iter().min().copied(), steps.iter().max().copied());
    let ours = |what: &str| -> String {
        match what {
            "model" => format!(
                "{} layers, d_model {}, {} query / {} KV heads of d_head {}, d_ff {}",
                m.n_layer, m.d_model, m.n_head, m.n_kv_head, m.d_head, m.d_ff
            ),
            "training steps" => match (lo, hi) {
                (Some(lo), Some(hi)) if lo != hi => format!(
                    "{} planned (batch {}); {lo}..{hi} run (the training-success rule extends a seed, {})",
                    p.run.train.steps,
                    p.run.train.batch_size,
                    p.rules.training_section()
                ),
                _ => format!("{} (batch {})", p.run.train.steps, p.run.train.batch_size),
            },
            "data" => format!(
                "synthetic key-value retrieval: {} records of {} keys × {} values, {} queries",
                t.n_records, t.n_key, t.n_val, t.n_queries
            ),
            "context" => format!("{} tokens", t.seq_len()),
            "phase groups" => format!("source-key position modulo {}, both padding protocols", t.residue_modulus),
            _ => "-".into(),
        }
    };
    let _ = writeln!(
        md,
        "<a id=\"setup-against-the-paper\"></a>\n\n## Setup against the paper\n\nOurs from `plan.json` and the runs; the paper's from `seed/paper-summary.txt` (one table in `src/report/ledger/paper.rs`).\n\n| | ours | paper | paper section |\n|---|---|---|---|"
    );
    for (what, paper, section) in PAPER_SETUP {
        let _ = writeln!(md, "| {what} | {} | {} | {} |", cell(&ours(what)), cell(paper), section);
    }
    let _ = writeln!(md);
}

/// One arm of the summary figure: its seed-level magnitude under the claim the paper gives a
/// number for.
#[derive(Clone, Debug, PartialEq)]
pub struct ForestRow {
    /// The arm.
    pub arm: String,
    /// The claim it is read from.
    pub claim: String,
    /// What is measured.
    pub what: String,
    /// Estimate and seed-level interval, pp.
    pub pp: f64,
    /// Lower end, pp.
    pub lo: f64,
    /// Upper end, pp.
    pub hi: f64,
    /// Each seed's value, pp.
    pub per_seed: Vec<(u64, f64)>,
}

/// The claim the summary figure draws: the first with the paper's number for both the
/// compressed models and full attention (E5, the prefix gap).
pub fn forest_claim(l: &Ledger) -> Option<&Claim> {
    l.claims.iter().find(|c| paper_value(&c.id).is_some() && paper_baseline(&c.id).is_some())
}

/// The rows of the summary figure: per arm, the largest seed-level magnitude of
/// [`forest_claim`] (full attention first, then by estimate).
pub fn forest_rows(l: &Ledger) -> Vec<ForestRow> {
    let Some(c) = forest_claim(l) else { return vec![] };
    let mut rows: Vec<ForestRow> = Vec::new();
    for m in c.measures.iter().filter(|m| m.seeds.is_some()) {
        let row = ForestRow {
            arm: m.arm.clone(),
            claim: c.id.clone(),
            what: format!("{} ({}, {} phases)", m.what, m.protocol, m.groups),
            pp: m.value.pp,
            lo: m.value.lo_pp,
            hi: m.value.hi_pp,
            per_seed: m.per_seed_pp.clone(),
        };
        match rows.iter_mut().find(|r| r.arm == m.arm) {
            Some(r) if r.pp < row.pp => *r = row,
            Some(_) => {}
            None => rows.push(row),
        }
    }
    rows.sort_by(|a, b| (b.arm == "full").cmp(&(a.arm == "full")).then(b.pp.total_cmp(&a.pp)));
    rows
}

/// The summary figure's file (relative to the report directory).
pub const FOREST_FIGURE: &str = "figures/summary-forest.png";

/// The per-claim crop of a whole-report phase figure (issue 43: a 23-panel thumbnail cannot be
/// read): `figures/claim-<id>-phase-<protocol>.png` with the panels of the claim's arms only,
/// for a claim with arms whose first figure is `figures/phase-<protocol>.png`.
pub fn crop_of(c: &Claim) -> Option<String> {
    let first = c.figures.first()?;
    let protocol = first.strip_prefix("figures/phase-")?.strip_suffix(".png")?;
    (!c.arms.is_empty()).then(|| format!("figures/claim-{}-phase-{protocol}.png", c.id.to_lowercase()))
}
