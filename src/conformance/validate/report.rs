//! What validation reports: a row per check with its status, the phase profile's points, and
//! the [`Validation`] table the CLI prints.

use serde::Serialize;

/// The outcome of one row of the verdict table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The check holds.
    Pass,
    /// The check fails: the kernel is wrong.
    Fail,
    /// The dump does not carry what the check needs.
    NotCheckable,
}

/// One row of the verdict table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckRow {
    /// Invariant id (`K1`, `K13` ...).
    pub id: &'static str,
    /// What is checked.
    pub name: String,
    /// Outcome.
    pub status: Status,
    /// The measured error (0 when not applicable).
    pub error: f64,
    /// The bound it is held to.
    pub bound: f64,
    /// Detail: both sides of the rule, or why the check could not run.
    pub note: String,
}

/// One point of the phase profile.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhasePoint {
    /// Displacement of the window starts in tokens (`-(S-1) ..= S-1`).
    pub delta: i64,
    /// Phase `(start + delta) mod S` of the displaced window starts.
    pub phase: usize,
    /// `max |impl - ref_delta|` over keys and values of the compared entries.
    pub error: f64,
    /// Number of entries compared.
    pub entries: usize,
}

/// Everything `phasekv kernel validate` reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Validation {
    /// The spec's name.
    pub spec: String,
    /// The spec's knobs in one line.
    pub describe: String,
    /// The compute dtype the rule is applied in.
    pub dtype: String,
    /// The quantized cache format the keys and values were checked in (`None`: plain dtype).
    pub cache_format: Option<String>,
    /// Sequences, tokens, model and head widths.
    pub shape: [usize; 4],
    /// Entries the kernel produced and entries the geometry demands.
    pub entries: (usize, usize),
    /// The verdict table.
    pub rows: Vec<CheckRow>,
    /// `e_j` for every entry `j` (see the module docs).
    pub window_errors: Vec<f64>,
    /// The end-to-end tolerance on keys (for the window plot).
    pub window_bound: f64,
    /// The phase profile.
    pub phase_profile: Vec<PhasePoint>,
    /// The displacement with the smallest error.
    pub best_delta: i64,
    /// A diagnosis when the best displacement is not 0 (an indexing bug), else `None`.
    pub diagnosis: Option<String>,
    /// Named hints from the shape of the error (RoPE, RMSNorm, dtype), see `validate::hints`.
    pub hints: Vec<String>,
    /// Max error of each rotated channel pair of the keys (empty without RoPE or without a
    /// failure to explain).
    pub rope_pair_errors: Vec<f64>,
    /// What the dump cannot see (a warning, never a failure): token indices no main-run
    /// window reaches, YaRN below its original context (`coverage`).
    pub warnings: Vec<String>,
    /// Whether every checkable row passes.
    pub passed: bool,
}

impl Validation {
    /// At most `max` rows of the phase profile worth showing, by displacement: all of them
    /// when they fit, else delta 0 and the smallest errors (large `S` makes long profiles).
    pub fn phase_rows(&self, max: usize) -> Vec<&PhasePoint> {
        if self.phase_profile.len() <= max {
            return self.phase_profile.iter().collect();
        }
        let mut by_error: Vec<_> = self.phase_profile.iter().filter(|p| p.entries > 0).collect();
        by_error.sort_by(|a, b| a.error.total_cmp(&b.error));
        let mut keep: Vec<_> = by_error.into_iter().take(max.saturating_sub(1)).collect();
        keep.extend(self.phase_profile.iter().filter(|p| p.delta == 0));
        keep.sort_by_key(|p| p.delta);
        keep.dedup_by_key(|p| p.delta);
        keep
    }
}

pub(super) fn not_checkable(id: &'static str, name: &str, why: &str) -> CheckRow {
    CheckRow { id, name: name.into(), status: Status::NotCheckable, error: 0.0, bound: 0.0, note: why.into() }
}
