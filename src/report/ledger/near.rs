//! The near-query measurement of a v3 report (`theory/phase-lab.md` §9.2, last bullet): each
//! arm's accuracy by (depth, phase) on the families whose depth is below its own floor
//! (`near-<protocol>-outcomes.jsonl`), in its own section under the name "near-query accuracy",
//! with §9.2's words. Reported, never a verdict: no claim reads it.

use super::collect::{arms, rules, Collected};
use crate::analysis::protocol::Protocol;
use std::collections::BTreeMap;
use std::fmt::Write;

/// §9.2's words on what the near-query measurement is (quoted exactly; a test holds §9.2 to them).
pub const NEAR_QUERY_WORDS: &str = "it measures how a kernel treats the tokens beside the query (the local window and the entries not yet closed), not phase sensitivity in the compressed context";

/// One arm's near-query accuracy under one protocol: `(depth, phase) -> (correct, prompts)`,
/// seeds pooled (the arm's successful seeds); phase is the target's position mod the arm's
/// stride (0 for full attention).
pub fn near_query_cells(c: &Collected, arm: &str, p: Protocol) -> BTreeMap<(usize, usize), (usize, usize)> {
    let mut cells: BTreeMap<(usize, usize), (usize, usize)> = BTreeMap::new();
    for a in arms(c).iter().filter(|a| a.name == arm) {
        let s = a.stride.unwrap_or(1).max(1);
        for r in &a.runs {
            for o in r.near.get(&p).into_iter().flatten() {
                let (Some(depth), Some(position)) = (o.depth, o.position) else { continue };
                let e = cells.entry((depth, position % s)).or_default();
                e.0 += usize::from(o.correct);
                e.1 += 1;
            }
        }
    }
    cells
}

/// The section, under v3 only (nothing otherwise): one table per arm and protocol with
/// near-query outcome lines, rows by depth and columns by phase.
pub fn near_query_section(md: &mut String, c: &Collected) {
    if !rules(c).scores_beyond_floor() {
        return;
    }
    let _ = writeln!(
        md,
        "## Near-query accuracy\n\nEach arm is also evaluated on families whose depth is below its own depth floor (`theory/phase-lab.md` §9.2), under both protocols: accuracy by (depth, phase), seeds pooled, correct / prompts. This is reported, never a verdict: {NEAR_QUERY_WORDS}.\n"
    );
    let mut any = false;
    for a in arms(c) {
        let s = a.stride.unwrap_or(1).max(1);
        for p in Protocol::ALL {
            let cells = near_query_cells(c, &a.name, p);
            if cells.is_empty() {
                continue;
            }
            any = true;
            let _ = writeln!(md, "**{}**, {} ({} seeds)\n", a.name, p.name(), a.runs.len());
            let head: Vec<String> = (0..s).map(|r| format!("phase {r}")).collect();
            let _ = writeln!(md, "| depth | {} |\n|---|{}", head.join(" | "), "---|".repeat(s));
            let depths: Vec<usize> = {
                let mut d: Vec<usize> = cells.keys().map(|k| k.0).collect();
                d.dedup();
                d
            };
            for d in depths {
                let row: Vec<String> = (0..s)
                    .map(|r| match cells.get(&(d, r)) {
                        Some(&(k, n)) => format!("{:.0} % ({k} / {n})", 100.0 * k as f64 / n as f64),
                        None => "-".into(),
                    })
                    .collect();
                let _ = writeln!(md, "| {d} | {} |", row.join(" | "));
            }
            let _ = writeln!(md);
        }
    }
    if !any {
        let _ =
            writeln!(md, "No run of this report holds near-query outcome lines (`near-<protocol>-outcomes.jsonl`).\n");
    }
}
