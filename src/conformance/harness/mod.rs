//! The invariant harness: the catalogue K1-K14 of `theory/kernels.md`, usable on any kernel
//! that implements [`KernelUnderTest`] (the reference, the candle implementation in any dtype,
//! deliberately broken mutants, and later kernels loaded from dumps).
//!
//! Every random input comes from a proptest strategy ([`strategies::case_strategy`]), so
//! failures shrink to a minimal case and replay from a seed. The same code runs in
//! `cargo test` (`tests/kernel_invariants.rs`) and behind `phasekv kernel check`.

pub mod checks;
pub mod external;
pub mod fast_subject;
pub mod strategies;
pub mod subjects;
pub mod tolerance;

use crate::kernel::attention::{AttentionInputs, AttentionOut};
use crate::kernel::params::KernelParams;
use crate::kernel::spec::{KernelDims, KernelSpec};
use crate::kernel::Compressed;
use crate::Result;
use candle_core::DType;
use ndarray::{Array2, ArrayView2};
use proptest::test_runner::{Config, TestCaseError, TestError, TestRng, TestRunner};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;

pub use strategies::Case;

/// A kernel implementation the harness can check. Inputs and outputs cross the boundary in
/// f64; an implementation may compute in a lower precision ([`KernelUnderTest::dtype`]).
pub trait KernelUnderTest {
    /// A label for reports, naming the path that ran (`reference-f64`, `candle-autodiff-f32-cpu`,
    /// `fast-f32-cpu`, `mutant:bias-by-window` ...).
    fn label(&self) -> String;
    /// The spec being implemented.
    fn spec(&self) -> &KernelSpec;
    /// The precision the implementation computes in.
    fn dtype(&self) -> DType;
    /// Whether this is the f64 reference itself (K13, agreement with the reference, then has
    /// nothing to compare and is not applicable rather than a pass against itself).
    fn is_reference(&self) -> bool {
        false
    }
    /// The narrowest head width `d_h` the implementation runs (cases draw `d_h` from it on).
    fn min_d_head(&self) -> usize {
        1
    }
    /// A fault of the implementation's transport that ends the run (an external process that
    /// broke the protocol, died or went silent): no verdict can be given after it.
    fn broken(&self) -> Option<crate::Error> {
        None
    }
    /// The same implementation for another spec (used by K7 and K10, which compare two specs).
    fn with_spec(&self, spec: KernelSpec) -> Box<dyn KernelUnderTest>;
    /// Compresses several sequences of the same length, one [`Compressed`] per sequence in
    /// order (implementations batch them: one tensor call, one request to a process).
    fn compress_many(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        xs: &[Array2<f64>],
    ) -> Result<Vec<Compressed<f64>>>;
    /// Compresses one sequence `x: [T, d]`: [`KernelUnderTest::compress_many`] of a batch of
    /// one.
    fn compress(&self, dims: KernelDims, params: &KernelParams<f64>, x: ArrayView2<f64>) -> Result<Compressed<f64>> {
        let got = self.compress_many(dims, params, &[x.to_owned()])?;
        let n = got.len();
        got.into_iter().next().filter(|_| n == 1).ok_or_else(|| {
            crate::Error::invalid("kernel output", format!("{} returned {n} results for one sequence", self.label()))
        })
    }
    /// Streams the sequences one after another through one stream, resetting between them;
    /// each sequence is fed in chunks of the given sizes. Returns the entries of each sequence.
    fn stream(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        seqs: &[(ArrayView2<f64>, Vec<usize>)],
    ) -> Result<Vec<Compressed<f64>>>;
    /// Compressed attention of one head over the entries of `x`.
    fn attend(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        x: ArrayView2<f64>,
        inputs: &AttentionInputs<f64>,
    ) -> Result<AttentionOut<f64>>;
}

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

/// Runs one invariant over cases drawn by `runner` (proptest: failures shrink to a minimal case).
pub fn run_invariant(subject: &dyn KernelUnderTest, invariant: Invariant, runner: &mut TestRunner) -> InvariantReport {
    let spec = subject.spec().clone();
    let stats = RefCell::new((0usize, 0usize, 0.0f64, 0.0f64));
    let result = runner.run(&strategies::case_strategy_min_head(&spec, subject.min_d_head()), |case| {
        match checks::check(invariant, subject, &case) {
            Ok(CheckVerdict::Pass { error, bound }) => {
                let mut s = stats.borrow_mut();
                s.0 += 1;
                if error >= s.2 {
                    s.2 = error;
                    s.3 = bound;
                }
                Ok(())
            }
            Ok(CheckVerdict::NotApplicable(_)) => {
                stats.borrow_mut().1 += 1;
                Ok(())
            }
            Ok(CheckVerdict::Fail(msg)) => Err(TestCaseError::fail(msg)),
            // A broken subject fails every later case at once: no case is a verdict and
            // nothing shrinks; `run_catalogue` reports the fault.
            Err(_) if subject.broken().is_some() => Ok(()),
            Err(e) => Err(TestCaseError::fail(format!("error: {e}"))),
        }
    });
    let (passed, na, worst, bound) = *stats.borrow();
    let (failure, counterexample) = match result {
        Ok(()) => (None, None),
        Err(TestError::Fail(msg, case)) => {
            let (msg, case) = match subject.broken() {
                Some(_) => (msg.to_string(), case),
                None => shrink_tokens(subject, invariant, msg.to_string(), case),
            };
            (
                Some(format!(
                    "{msg} [minimal case: T={}, d={}, d_h={}, {} window(s)]",
                    case.x.nrows(),
                    case.dims.d_model,
                    case.dims.d_head,
                    spec.geometry.num_windows(case.x.nrows())
                )),
                Some(case),
            )
        }
        Err(TestError::Abort(msg)) => (Some(format!("aborted: {msg}")), None),
    };
    let status = match (&failure, passed) {
        (Some(_), _) => InvariantStatus::Fail,
        (None, 0) => InvariantStatus::NotApplicable,
        (None, _) => InvariantStatus::Pass,
    };
    InvariantReport {
        invariant,
        status,
        cases_passed: passed,
        cases_not_applicable: na,
        worst_error: worst,
        bound_at_worst: bound,
        failure,
        counterexample,
    }
}

/// After proptest's shrinking (which spends its iterations on the many drawn values, rarely
/// reaching the sequence length): the shortest prefix of the failing case's sequences that still
/// fails, with its message. Each shorter length is tried once, shortest first.
fn shrink_tokens(subject: &dyn KernelUnderTest, invariant: Invariant, msg: String, case: Case) -> (String, Case) {
    use ndarray::s;
    for t in 0..case.x.nrows() {
        let mut c = case.clone();
        c.x = case.x.slice(s![..t, ..]).to_owned();
        c.other = case.other.slice(s![..t, ..]).to_owned();
        c.token = case.token.min(t.saturating_sub(1));
        c.attention.queries = case.attention.queries.slice(s![..t, ..]).to_owned();
        c.attention.raw_keys = case.attention.raw_keys.slice(s![..t, ..]).to_owned();
        c.attention.raw_values = case.attention.raw_values.slice(s![..t, ..]).to_owned();
        match checks::check(invariant, subject, &c) {
            Ok(CheckVerdict::Fail(m)) => return (m, c),
            Err(e) => return (format!("error: {e}"), c),
            Ok(_) => {}
        }
    }
    (msg, case)
}

/// A proptest runner with `cases` cases, seeded (the same seed draws the same cases), with no
/// failure persistence (the CLI's runs are reproduced with `--seed`).
pub fn seeded_runner(cases: u32, seed: u64) -> TestRunner {
    seeded_runner_shrinking(cases, seed, 256)
}

/// [`seeded_runner`] with at most `max_shrink_iters` shrinking steps (an external kernel pays
/// a process round trip per step).
pub fn seeded_runner_shrinking(cases: u32, seed: u64, max_shrink_iters: u32) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config { cases, failure_persistence: None, max_shrink_iters, ..Config::default() };
    TestRunner::new_with_rng(config, TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &bytes))
}

/// Runs every invariant of the catalogue on `subject`, each over a fresh runner from `runner`;
/// each report goes to `on_report` with its wall-clock seconds as soon as it is done. A subject
/// that breaks ([`KernelUnderTest::broken`]) ends the run with that error, before the report of
/// the invariant it broke in (which would be a FAIL of the transport, not of the kernel).
pub fn run_catalogue(
    subject: &dyn KernelUnderTest,
    runner: &dyn Fn() -> TestRunner,
    on_report: &mut dyn FnMut(&InvariantReport, f64),
) -> Result<Vec<InvariantReport>> {
    Invariant::ALL
        .iter()
        .map(|&inv| {
            let start = std::time::Instant::now();
            let r = run_invariant(subject, inv, &mut runner());
            if let Some(e) = subject.broken() {
                return Err(e);
            }
            on_report(&r, start.elapsed().as_secs_f64());
            Ok(r)
        })
        .collect()
}

/// Whether the harness can draw cases for `spec` (cases hold up to `2W + 2S + 3` tokens, so
/// the window is capped at [`crate::limits::MAX_CHECK_WINDOW`]); a one-line error otherwise.
pub fn checkable(spec: &KernelSpec) -> Result<()> {
    let w = spec.geometry.window();
    if w > crate::limits::MAX_CHECK_WINDOW {
        return Err(crate::Error::invalid(
            "--preset",
            format!(
                "window W = {w} of {} is above the harness's limit of {} (cases hold up to 2W + 2S + 3 tokens)",
                spec.name,
                crate::limits::MAX_CHECK_WINDOW
            ),
        ));
    }
    Ok(())
}

/// Widest model width `d` a case draws ([`strategies::case_strategy`]).
const MAX_CASE_D_MODEL: usize = 4;

/// The work of `cases` cases per invariant on `spec` with heads from `min_d_head` on, in units
/// of `(W + 2T + 16) * n(T) * W * d * d_h` at the longest case (`T = 2W + 2S + 3` tokens,
/// `n(T)` windows, the widest `d` and `d_h` drawn): K4 runs `W` probes of `T` tokens, K11 the
/// `T` prefixes of a sequence, and the other invariants a few runs each, every run costing
/// about `n(T) * W * d * d_h`. `None` when it overflows 64 bits.
pub fn check_work(spec: &KernelSpec, cases: u32, min_d_head: usize) -> Option<u64> {
    let (w, s) = (spec.geometry.window(), spec.geometry.stride());
    let t = 2 * w + 2 * s + 3;
    let d_head = strategies::head_widths(spec, min_d_head).into_iter().max().unwrap_or(min_d_head);
    let per_case = [w + 2 * t + 16, spec.geometry.num_windows(t).max(1), w, MAX_CASE_D_MODEL, d_head];
    crate::limits::product(&per_case)?.checked_mul(u64::from(cases))
}

/// [`checkable`], and the work of `cases` cases per invariant ([`check_work`]) at most
/// [`crate::limits::MAX_CHECK_WORK`]: a one-line error naming the preset, `--cases` and the
/// most cases that fit otherwise.
pub fn checkable_with(spec: &KernelSpec, cases: u32, min_d_head: usize) -> Result<()> {
    checkable(spec)?;
    // The spec check `kernel validate` makes at the dump's width, over the widths cases draw:
    // a spec no width holds is bad input (exit 2), not a kernel failing every invariant.
    spec.head_widths(min_d_head, 1)?;
    let max = crate::limits::MAX_CHECK_WORK;
    match check_work(spec, cases, min_d_head) {
        Some(work) if work <= max => Ok(()),
        work => {
            let one = check_work(spec, 1, min_d_head).unwrap_or(u64::MAX);
            let fit = max / one.max(1);
            let work = work.map_or("more than 2^64".to_string(), |v| v.to_string());
            Err(crate::Error::invalid(
                "--cases",
                format!(
                    "{cases} cases per invariant on {} ({}) are {work} units of work, above the limit of {max} \
                     (MAX_CHECK_WORK); {}",
                    spec.name,
                    spec.describe(),
                    if fit == 0 {
                        "not even one case fits: choose a smaller window or stride".to_string()
                    } else {
                        format!("at most {fit} cases fit")
                    }
                ),
            ))
        }
    }
}

/// Runs every invariant on a subject.
pub fn run_all(subject: &dyn KernelUnderTest, cases: u32, seed: u64) -> Vec<InvariantReport> {
    Invariant::ALL.iter().map(|&inv| run_invariant(subject, inv, &mut seeded_runner(cases, seed))).collect()
}
