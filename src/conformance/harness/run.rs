//! Running the catalogue: each invariant over seeded proptest cases, failures shrunk.

use super::checks;
use super::invariant::{CheckVerdict, Invariant, InvariantReport, InvariantStatus};
use super::strategies::{self, Case};
use super::subject::KernelUnderTest;
use crate::Result;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRng, TestRunner};
use std::cell::RefCell;

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

/// Runs every invariant on a subject.
pub fn run_all(subject: &dyn KernelUnderTest, cases: u32, seed: u64) -> Vec<InvariantReport> {
    Invariant::ALL.iter().map(|&inv| run_invariant(subject, inv, &mut seeded_runner(cases, seed))).collect()
}
