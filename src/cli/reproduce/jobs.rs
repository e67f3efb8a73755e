//! `phasekv reproduce --jobs N`: a shard's units side by side, each on a thread of its own.
//!
//! Training (the fast engine) runs on one thread, so one process used one core of a
//! multi-core machine however many units it had; `--jobs` runs up to N units at once. Each
//! unit writes only its own directory and draws only from its own seeds, so the results are
//! those of the same units one after another (`tests/reproduce_jobs.rs` compares them); only
//! the order of the log's lines differs.

use super::bars::Bars;
use phasekv::reproduce::{self, Plan, Unit};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// `--jobs` for a process that runs one of `shards` parts ([`reproduce::jobs::jobs`]).
pub fn resolve(given: Option<usize>, shards: usize) -> phasekv::Result<usize> {
    let cpus = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1);
    reproduce::jobs::jobs(given, cpus, shards, reproduce::jobs::available_memory())
}

/// How a batch of units ended.
pub struct Ran<'a> {
    /// The units that did work (not merely reused), in the plan's order.
    pub worked: Vec<&'a Unit>,
    /// Whether a signal stopped the run (finished units and checkpoints are kept).
    pub interrupted: bool,
}

/// Runs `units` into `out`, at most `jobs` at once. One job runs them in order on this thread
/// with one progress display, as before `--jobs`. With more, a unit starts whenever a job is
/// free, and none starts after a signal or another unit's error; the units already running
/// finish (training stops at its next step on a signal, after a checkpoint). The first error
/// in the plan's order is returned, once every running unit has ended.
pub fn run<'a>(out: &Path, plan: &Plan, units: &'a [Unit], jobs: usize) -> anyhow::Result<Ran<'a>> {
    let interrupted = crate::cli::signals::interrupted;
    if jobs <= 1 || units.len() <= 1 {
        let mut bars = Bars::new();
        let mut worked = Vec::new();
        for u in units {
            let done = reproduce::run_unit(out, plan, u, &mut bars);
            if interrupted() {
                return Ok(Ran { worked, interrupted: true });
            }
            if done? {
                worked.push(u);
            }
        }
        return Ok(Ran { worked, interrupted: false });
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<phasekv::Result<bool>>>> = Mutex::new(units.iter().map(|_| None).collect());
    let failed = || results.lock().map(|r| r.iter().any(|x| matches!(x, Some(Err(_))))).unwrap_or(true);
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(units.len()) {
            scope.spawn(|| loop {
                if interrupted() || failed() {
                    return;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(u) = units.get(i) else { return };
                let mut bars = Bars::for_unit(&u.name());
                let done = reproduce::run_unit(out, plan, u, &mut bars);
                if let Ok(mut r) = results.lock() {
                    r[i] = Some(done);
                }
            });
        }
    });
    let results = results.into_inner().map_err(|_| anyhow::anyhow!("a unit's thread panicked"))?;
    // After a signal the units' errors are the interruption itself, as in the loop above.
    let interrupted = interrupted();
    let mut worked = Vec::new();
    for (u, r) in units.iter().zip(results) {
        match r {
            Some(Ok(true)) => worked.push(u),
            Some(Err(e)) if !interrupted => return Err(e.into()),
            _ => {}
        }
    }
    Ok(Ran { worked, interrupted })
}
