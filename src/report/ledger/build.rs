//! [`build_report_with`]: one report built from run data in a staging directory, the claims on
//! a thread of their own, and swapped in whole.

use super::banner::{banner, Ledger};
use super::claims::{self, claims, Claim};
use super::collect::{self, collect, Collected};
use super::write::{write, write_json};
use super::{figures, markdown, publish, runs_doc};
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// How [`build_report_with`] runs.
pub struct ReportOptions<'a> {
    /// Accept unfinished runs (no `metrics.json`); the report is then marked partial in its
    /// banner and in `ledger.json` ([`Ledger::partial`]). Without it they are refused.
    pub partial: bool,
    /// Asked between steps (and every 100 ms while the claims are computed): `true` stops the
    /// report, leaving the old one as it was and no temporary file.
    pub stop: &'a dyn Fn() -> bool,
}

fn never() -> bool {
    false
}

impl Default for ReportOptions<'_> {
    fn default() -> Self {
        ReportOptions { partial: false, stop: &never }
    }
}

/// What [`build_report_with`] did.
#[derive(Debug)]
pub enum ReportOutcome {
    /// The report is in place; its claims.
    Written(Vec<Claim>),
    /// [`ReportOptions::stop`] said stop: the old report is as it was.
    Stopped,
}

/// Rebuilds the report in `out` from the outputs `from`; returns the claims. Refuses
/// unfinished runs ([`build_report_with`] with the default options).
pub fn build_report(from: &[PathBuf], out: &Path) -> Result<Vec<Claim>> {
    match build_report_with(from, out, &ReportOptions::default())? {
        ReportOutcome::Written(claims) => Ok(claims),
        ReportOutcome::Stopped => Err(Error::invalid("report", "stopped")),
    }
}

/// Rebuilds the report in `out` from the outputs `from` with one writer and whole inputs,
/// and puts it in place whole (`publish`'s doc): `out`'s lock and every input's are taken
/// (another report or a live reproduce refused, naming its pid), every run is looked at
/// (one being written refused; unfinished ones refused unless `opts.partial`), what dead
/// reports left is cleaned up, and the report is built in a staging directory, then swapped
/// in. The claims are computed on a thread of their own while the figures are drawn; when
/// `opts.stop` says stop, this returns at once and that thread's result (it writes nothing)
/// is dropped when it ends.
pub fn build_report_with(from: &[PathBuf], out: &Path, opts: &ReportOptions) -> Result<ReportOutcome> {
    let _held = publish::lock(from, out)?;
    let unfinished = publish::check_runs(from, opts.partial)?;
    // Provenance first (issue 44): every run directory as its writers left it.
    collect::verify_provenance(from, &unfinished)?;
    publish::recover(out)?;
    let staged = publish::stage(out)?;
    let stage = staged.path();
    // The worker: collect, then the claims (pure: nothing written).
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = {
        let from = from.to_vec();
        std::thread::Builder::new()
            .name("report-claims".into())
            .spawn(move || {
                let c = match collect(&from) {
                    Ok(c) => std::sync::Arc::new(c),
                    Err(e) => return drop(tx.send(Err(e))),
                };
                if tx.send(Ok(Work::Collected(c.clone()))).is_ok() {
                    let _ = tx.send(Ok(Work::Claims(claims(&c))));
                }
            })
            .map_err(|e| Error::io(stage, e))?
    };
    let mut worker = Some(worker);
    let Some(Work::Collected(c)) = wait(&rx, &mut worker, opts.stop)? else { return Ok(ReportOutcome::Stopped) };
    // Theory and kernel data travel with the report.
    if let Some(t) = &c.theory {
        write_json(stage, "theory/theory.json", t)?;
    }
    if let Some(k) = &c.kernels {
        write_json(stage, "kernels/kernels.json", k)?;
    }
    let Some(mut caps) = figures::build_figures(&c, stage, opts.stop)? else { return Ok(ReportOutcome::Stopped) };
    let Some(claim_caps) = claims::draw_claim_figures(&c, stage, opts.stop)? else {
        return Ok(ReportOutcome::Stopped);
    };
    caps.extend(claim_caps);
    let Some(Work::Claims(claims)) = wait(&rx, &mut worker, opts.stop)? else { return Ok(ReportOutcome::Stopped) };
    let mut banner = banner(&c, &claims);
    if !unfinished.is_empty() {
        banner.insert(0, publish::partial_entry(&unfinished));
    }
    let ledger = Ledger { banner, claims, partial: !unfinished.is_empty() };
    write_json(stage, "ledger.json", &ledger)?;
    if let Some(cap) = figures::summary_forest(&ledger, stage)? {
        caps.insert(0, cap);
    }
    caps.extend(figures::claim_crops(&c, &ledger, stage)?);
    write(stage, "README.md", &markdown::render(&c, &ledger, &caps)?)?;
    if !c.runs.is_empty() {
        write(stage, "runs/README.md", &runs_doc::runs_readme(&c))?;
    }
    if (opts.stop)() {
        return Ok(ReportOutcome::Stopped);
    }
    publish::swap(staged, out)?;
    Ok(ReportOutcome::Written(ledger.claims))
}

/// What the worker of [`build_report_with`] sends.
enum Work {
    Collected(std::sync::Arc<Collected>),
    Claims(Vec<Claim>),
}

/// The worker's next result, `None` when `stop` said stop first. A worker that panicked
/// passes its panic on.
fn wait(
    rx: &std::sync::mpsc::Receiver<Result<Work>>,
    worker: &mut Option<std::thread::JoinHandle<()>>,
    stop: &dyn Fn() -> bool,
) -> Result<Option<Work>> {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        if stop() {
            return Ok(None);
        }
        match rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(r) => return r.map(Some),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                if let Some(Err(panic)) = worker.take().map(|w| w.join()) {
                    std::panic::resume_unwind(panic);
                }
                return Err(Error::invalid("report", "the claims worker ended without a result"));
            }
        }
    }
}
