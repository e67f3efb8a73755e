//! The catalogue's invariants ([`Invariant`]) and what checking one gives: a verdict per case
//! and a report per invariant.

use super::strategies::Case;
use serde::{Deserialize, Serialize};

/// The invariants of the catalogue (`theory/kernels.md`, "The catalogue and the tests").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Invariant {
    /// K1: the number of windows `n(T)` for the alignment.
    K1Count,
    /// K2: entry `j` changes only if a token inside window `j` changes (bit for bit).
    K2Locality,
    /// K3: prepending `S` tokens shifts entries by one window.
    K3StrideShift,
    /// K4: the support of `dK_j/dh_t` is the window; content-free retention has period `S`.
    K4PhaseNotWindow,
    /// K5: gate weights are positive, sum to 1 per channel, empty slots weigh 0.
    K5Normalisation,
    /// K6: each pooled channel lies between the min and max over slots of `C h`.
    K6Convexity,
    /// K7: `Z = 0` and equal biases give the uniform kernel.
    K7UniformLimit,
    /// K8: a bias going to `+inf` at offset `i*` gives `C_{g(i*)} h_{j,i*}`.
    K8OneHotLimit,
    /// K9: shared parameters and equal biases make an entry permutation invariant.
    K9Permutation,
    /// K10: tied gates give `a^K == a^V`; a vector gate with identical channels is the scalar gate.
    K10TiedScalar,
    /// K11: one-shot, token-by-token and chunked computation agree; prefix-closed; reset.
    K11Streaming,
    /// K12: attention at `q` ignores tokens after `q`; visibility follows the geometry.
    K12Causality,
    /// K13: the implementation meets the tolerance rule against the f64 reference.
    K13ReferenceAgreement,
    /// K14: on a grid with offset `o > 0`, prepending `o - o'` tokens maps it onto grid `o'`
    /// (staggered grids, issue 30; not applicable at offset 0).
    K14GridShift,
}

impl Invariant {
    /// All invariants in catalogue order.
    pub const ALL: [Invariant; 14] = [
        Invariant::K1Count,
        Invariant::K2Locality,
        Invariant::K3StrideShift,
        Invariant::K4PhaseNotWindow,
        Invariant::K5Normalisation,
        Invariant::K6Convexity,
        Invariant::K7UniformLimit,
        Invariant::K8OneHotLimit,
        Invariant::K9Permutation,
        Invariant::K10TiedScalar,
        Invariant::K11Streaming,
        Invariant::K12Causality,
        Invariant::K13ReferenceAgreement,
        Invariant::K14GridShift,
    ];

    /// The catalogue id, `K1` .. `K13`.
    pub fn id(&self) -> &'static str {
        ["K1", "K2", "K3", "K4", "K5", "K6", "K7", "K8", "K9", "K10", "K11", "K12", "K13", "K14"][*self as usize]
    }

    /// A short name.
    pub fn name(&self) -> &'static str {
        [
            "count",
            "locality",
            "stride shift",
            "phase not window",
            "normalisation",
            "convexity",
            "uniform limit",
            "one-hot limit",
            "permutation",
            "tied / scalar",
            "streaming",
            "causality",
            "reference agreement",
            "grid shift",
        ][*self as usize]
    }
}

/// What one check of one case found.
#[derive(Clone, Debug, PartialEq)]
pub enum CheckVerdict {
    /// The invariant holds; `error` is the worst measured deviation and `bound` what was allowed.
    Pass {
        /// Worst deviation measured.
        error: f64,
        /// Allowed deviation.
        bound: f64,
    },
    /// The invariant does not apply to this kernel or case (reason given).
    NotApplicable(String),
    /// The invariant is violated.
    Fail(String),
}

impl CheckVerdict {
    /// A pass with both figures.
    pub fn pass(error: f64, bound: f64) -> Self {
        CheckVerdict::Pass { error, bound }
    }
}

/// The status of one invariant over many cases, serialized `pass`, `fail` or `n/a` (the
/// kernel-invariant table of `kernels.json` stores it too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum InvariantStatus {
    /// Every case that applied held (and at least one applied).
    #[serde(rename = "pass")]
    Pass,
    /// Some case failed.
    #[serde(rename = "fail")]
    Fail,
    /// No case applied.
    #[serde(rename = "n/a")]
    NotApplicable,
}

impl InvariantStatus {
    /// As printed: `pass`, `fail` or `n/a`.
    pub fn word(self) -> &'static str {
        match self {
            InvariantStatus::Pass => "pass",
            InvariantStatus::Fail => "fail",
            InvariantStatus::NotApplicable => "n/a",
        }
    }
}

/// The summary of one invariant over many cases.
#[derive(Clone, Debug, Serialize)]
pub struct InvariantReport {
    /// The invariant.
    pub invariant: Invariant,
    /// Pass, fail, or not applicable to any case.
    pub status: InvariantStatus,
    /// Cases on which the invariant applied and held.
    pub cases_passed: usize,
    /// Cases on which it did not apply.
    pub cases_not_applicable: usize,
    /// Worst measured deviation over passing cases.
    pub worst_error: f64,
    /// The allowed deviation at that case.
    pub bound_at_worst: f64,
    /// The (shrunk) failure message, if any.
    pub failure: Option<String>,
    /// The shrunk case that failed (to replay it, e.g. as a dump of an external kernel).
    #[serde(skip)]
    pub counterexample: Option<Case>,
}
