//! The paper's numbers and setup, in one place (issue 43): what the report sets our values
//! beside. Every entry cites the section of `seed/paper-summary.txt` it comes from; where the
//! paper gives no number the entry says so, and the report prints "-" (never an invented one).
//! The magnitudes the verdicts judge against are [`crate::analysis::verdict`]'s constants,
//! named here, not typed twice.

use crate::analysis::verdict::{PAPER_BASELINE_GAP_PP, PAPER_COMPRESSED_GAP_PP, PAPER_WITHIN_WINDOW_PP};

/// What kind of number the paper gives: the report must not set our mean beside the paper's
/// maximum without saying so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaperKind {
    /// "up to": the largest value over the paper's models.
    Maximum,
    /// "more than": a lower bound.
    LowerBound,
    /// "at most": an upper bound.
    UpperBound,
}

impl PaperKind {
    /// The words printed beside the number.
    pub fn words(self) -> &'static str {
        match self {
            PaperKind::Maximum => "the paper's maximum over its models",
            PaperKind::LowerBound => "the paper's lower bound",
            PaperKind::UpperBound => "the paper's upper bound",
        }
    }

    /// The same, short, for a figure's legend.
    pub fn short(self) -> &'static str {
        match self {
            PaperKind::Maximum => "maximum",
            PaperKind::LowerBound => "lower bound",
            PaperKind::UpperBound => "upper bound",
        }
    }
}

/// One number of the paper that a claim's magnitude is set beside.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PaperValue {
    /// The claim (ledger id).
    pub claim: &'static str,
    /// Whether it is the compressed models' number (`false`: full attention's).
    pub compressed: bool,
    /// The number, pp.
    pub pp: f64,
    /// What kind of number it is.
    pub kind: PaperKind,
    /// Where it is, in `seed/paper-summary.txt`.
    pub source: &'static str,
}

/// The paper's magnitudes, one per claim and model family that has one.
pub const PAPER_VALUES: &[PaperValue] = &[
    PaperValue {
        claim: "E4",
        compressed: true,
        pp: PAPER_WITHIN_WINDOW_PP,
        kind: PaperKind::LowerBound,
        source: "Controlled Pretraining Results: \"In W8/S8, accuracy varies by more than 50 percentage points among phases 0-6\"",
    },
    PaperValue {
        claim: "E5",
        compressed: true,
        pp: PAPER_COMPRESSED_GAP_PP,
        kind: PaperKind::Maximum,
        source: "Controlled Pretraining Results: \"Prefix Padding gaps: up to 78 percentage points for compressed models\"",
    },
    PaperValue {
        claim: "E5",
        compressed: false,
        pp: PAPER_BASELINE_GAP_PP,
        kind: PaperKind::UpperBound,
        source: "Controlled Pretraining Results: \"vs. at most 6.1 for baselines\"",
    },
];

/// The paper's number for the compressed models of claim `id`, if it gives one.
pub fn paper_value(id: &str) -> Option<&'static PaperValue> {
    PAPER_VALUES.iter().find(|v| v.claim == id && v.compressed)
}

/// The paper's number for full attention under claim `id`, if it gives one.
pub fn paper_baseline(id: &str) -> Option<&'static PaperValue> {
    PAPER_VALUES.iter().find(|v| v.claim == id && !v.compressed)
}

/// The paper's setup, row by row (`what`, the paper's, its section): `-` where the summary
/// does not state it.
pub const PAPER_SETUP: &[(&str, &str, &str)] = &[
    ("model", "Qwen3-derived transformers pretrained from scratch; size not stated", "Overview"),
    ("training steps", "not stated", "-"),
    (
        "data",
        "pretraining corpus not stated; evaluation: needle-in-a-haystack retrieval, 16k key-value pairs (DeepSeek-V4)",
        "Empirical Validation: NIAH retrieval results",
    ),
    ("context", "128K tokens (DeepSeek-V4 NIAH); the pretrained family's context not stated", "NIAH retrieval results"),
    ("phase groups", "source-key position modulo 24, both padding protocols", "Evaluation Protocols"),
];
