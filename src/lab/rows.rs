//! The rows of the lab's CSV tables (written with `run_dir::write_csv_atomic`).

use super::results::{GatesResult, KnockoutResult};
use crate::analysis::stats::GroupAccuracy;
use serde::Serialize;

/// A float as the committed tables print it (six decimals).
pub(super) fn f6(x: f64) -> String {
    format!("{x:.6}")
}

/// One row of `eval-<protocol>.csv` and of an audit's `groups.csv`.
#[derive(Serialize, Default)]
pub(super) struct GroupCsvRow {
    group: usize,
    n: usize,
    correct: usize,
    accuracy: String,
    wilson_lo: String,
    wilson_hi: String,
}

pub(super) fn group_rows(groups: &[GroupAccuracy]) -> Vec<GroupCsvRow> {
    groups
        .iter()
        .map(|g| GroupCsvRow {
            group: g.group,
            n: g.n,
            correct: g.correct,
            accuracy: f6(g.accuracy),
            wilson_lo: f6(g.wilson_lo),
            wilson_hi: f6(g.wilson_hi),
        })
        .collect()
}

/// One row of `knockout.csv`.
#[derive(Serialize, Default)]
pub(super) struct KnockoutCsvRow {
    layer: usize,
    head: usize,
    /// The window slot of a window-slot row (empty on a KV-head row).
    slot: Option<usize>,
    group: usize,
    clean_accuracy: String,
    knocked_accuracy: String,
    drop_pp: String,
}

/// One row of `gates.csv`.
#[derive(Serialize, Default)]
pub(super) struct GatesCsvRow {
    step: usize,
    layer: usize,
    head: usize,
    branch: String,
    static_concentration: String,
    input_concentration: String,
    profile: String,
}

pub(super) fn knockout_rows(result: &KnockoutResult) -> Vec<KnockoutCsvRow> {
    let mut csv = Vec::new();
    for r in &result.map.rows {
        for (g, k) in r.groups.iter().enumerate() {
            csv.push(KnockoutCsvRow {
                layer: r.layer,
                head: r.head,
                slot: r.slot,
                group: g,
                clean_accuracy: f6(result.map.clean[g].accuracy),
                knocked_accuracy: f6(k.accuracy),
                drop_pp: format!("{:.3}", r.drop_pp[g]),
            });
        }
    }
    csv
}

pub(super) fn gates_rows(result: &GatesResult) -> Vec<GatesCsvRow> {
    let mut csv = Vec::new();
    for snap in &result.snapshots {
        for g in &snap.gates {
            let profile: Vec<String> = g.profile.iter().map(|&a| f6(a)).collect();
            csv.push(GatesCsvRow {
                step: snap.step,
                layer: g.layer,
                head: g.head,
                branch: format!("{:?}", g.branch),
                static_concentration: f6(g.static_concentration),
                input_concentration: f6(g.input_concentration),
                profile: profile.join(" "),
            });
        }
    }
    csv
}

/// One row of `cycle-<protocol>-layer<L>.csv`: one (k, phase).
#[derive(Serialize, Default)]
pub(super) struct CycleCsvRow {
    k: usize,
    phase: usize,
    n: usize,
    correct: usize,
    accuracy: String,
    /// The row's best circular lag against k = 0 (empty when a profile is flat).
    lag: String,
}

pub(super) fn cycle_rows(result: &crate::analysis::cycling::CycleResult) -> Vec<CycleCsvRow> {
    let mut csv = Vec::new();
    for r in &result.rows {
        for p in &r.phases {
            csv.push(CycleCsvRow {
                k: r.k,
                phase: p.group,
                n: p.n,
                correct: p.correct,
                accuracy: f6(p.accuracy),
                lag: r.lag.map(|l| l.to_string()).unwrap_or_default(),
            });
        }
    }
    csv
}

#[cfg(test)]
mod csv_tests {
    use super::super::results::EvalResult;
    use super::*;
    use crate::analysis::protocol::Protocol;
    use crate::run_dir::csv_bytes;
    use std::path::Path;

    /// The committed run directories' CSVs are exactly what the CSV rows of this module make
    /// of the committed JSON next to them (so the `csv` crate changed no byte). Runs where only
    /// the JSON is committed are skipped.
    #[test]
    fn committed_run_csvs_are_reproduced_byte_for_byte() {
        let runs = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/runs");
        let mut checked = 0;
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        for entry in std::fs::read_dir(&runs).unwrap() {
            let run = entry.unwrap().path();
            for p in Protocol::ALL {
                let json = run.join(format!("eval-{}.json", p.name()));
                if json.is_file() && json.with_extension("csv").is_file() {
                    let r: EvalResult = serde_json::from_str(&read(&json)).unwrap();
                    let want = read(&json.with_extension("csv"));
                    assert_eq!(csv_bytes(&group_rows(&r.profile.groups)).unwrap(), want.as_bytes(), "{json:?}");
                    checked += 1;
                }
            }
            if run.join("knockout.json").is_file() && run.join("knockout.csv").is_file() {
                let r: KnockoutResult = serde_json::from_str(&read(&run.join("knockout.json"))).unwrap();
                assert_eq!(
                    csv_bytes(&knockout_rows(&r)).unwrap(),
                    read(&run.join("knockout.csv")).as_bytes(),
                    "{run:?}"
                );
                checked += 1;
            }
            if run.join("gates.json").is_file() && run.join("gates.csv").is_file() {
                let r: GatesResult = serde_json::from_str(&read(&run.join("gates.json"))).unwrap();
                assert_eq!(csv_bytes(&gates_rows(&r)).unwrap(), read(&run.join("gates.csv")).as_bytes(), "{run:?}");
                checked += 1;
            }
        }
        assert!(checked >= 18, "only {checked} committed CSVs found under {runs:?}");
    }
}
