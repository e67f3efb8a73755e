//! How a report reaches its directory: one writer, whole inputs, and a swap that leaves either
//! the old report or the new one (issue 46).
//!
//! **Locks.** A report takes its output directory's [`DirLock`] (`.lock`: one report per
//! directory; a second is refused naming the holder's pid) and, for the output and every
//! input, the [`OutputLock`] of a reproduction output whole (`.reproduce.lock`: every live
//! `reproduce` holds it shared, so a report of an output still being reproduced is refused
//! naming the reproduce's pid, and a reproduce started during a report is refused naming the
//! report's). Every run directory of an input is looked at before anything is read
//! ([`check_runs`]): one a writer holds (a training, an extension, an analysis) is refused,
//! and so is an unfinished one (no [`METRICS_FILE`]) unless a partial report was asked for.
//!
//! **The swap.** The report owns the entries [`OUTPUTS`] of its directory (`runs/` itself and
//! every other file are inputs or someone else's and are never moved). It is built whole in a
//! staging directory `.report-new-<pid>` inside the output (same file system, so renames are
//! atomic), which an [`Owned`] guard removes on every error, panic and stop. Then:
//!
//! 1. the staging directory gets a `manifest` (the entries the new report has) and is renamed
//!    `.report-ready-<pid>`: the commit point. Before it the old report is untouched; after it
//!    the new one is complete on disk and will be put in place.
//! 2. entry by entry, `figures/` first and `README.md` last (a reader who sees the new README
//!    finds the new figures): the old entry is kept aside in `.report-old-<pid>` (a directory
//!    renamed there, a file hard-linked there) and the new one renamed into place (a file
//!    replaces the old one in one rename); an old entry the new report lacks is removed, so
//!    nothing of the old report survives beside the new one.
//! 3. the two dot-directories are removed.
//!
//! A failure in step 2 puts the kept-aside entries back (the old report); if that fails too,
//! the ready directory stays for the next report to finish. A `kill -9` (or a second signal,
//! which exits at once) leaves a staging directory (before 1: the old report is intact) or a
//! ready one (during 2, a window of a few renames). The next report, holding the same locks,
//! knows that whoever left them is dead and first cleans up ([`recover`]): a staging
//! directory is removed, a ready one is rolled forward (the swap finished from its
//! manifest), a kept-aside one removed, and temporary files of a report's outputs
//! ([`crate::run_dir::temp_sibling`] names) deleted. A reader that opens files across the
//! few renames of step 2 can see old and new files together; only one rename could prevent
//! that, which the layout (outputs beside the input `runs/`) does not allow.

use crate::run_dir::{lock_holder, DirLock, OutputLock, Owned, CONFIG_FILE, METRICS_FILE};
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// The entries of a report directory that a report owns and replaces whole, in swap order
/// (figures first, `README.md` last).
pub const OUTPUTS: [&str; 6] =
    ["figures", "theory/theory.json", "kernels/kernels.json", "runs/README.md", "ledger.json", "README.md"];

const NEW: &str = ".report-new-";
const READY: &str = ".report-ready-";
const OLD: &str = ".report-old-";
const MANIFEST: &str = "manifest";

/// What a report holds while it runs: the output's lock and every input's.
#[derive(Debug)]
pub struct Held {
    _out: DirLock,
    _inputs: Vec<OutputLock>,
}

/// Takes the locks of a report from `from` into `out` (see the module doc), refusing in one
/// line a directory another report writes or a live reproduce holds.
pub fn lock(from: &[PathBuf], out: &Path) -> Result<Held> {
    if let Some(d) = from.iter().find(|d| !d.is_dir()) {
        return Err(Error::invalid("--from", format!("{} is not a directory", d.display())));
    }
    let out_lock = DirLock::acquire(out).map_err(|e| match e {
        Error::Busy { holder, .. } => Error::invalid(
            "--out",
            format!(
                "{} is being written by another report ({holder}); wait for it to finish or choose another --out",
                out.display()
            ),
        ),
        e => e,
    })?;
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut inputs = Vec::new();
    for (field, dir) in from.iter().map(|d| ("--from", d.as_path())).chain([("--out", out)]) {
        let key = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let busy = |e| match e {
            Error::Busy { holder, .. } => Error::invalid(
                field,
                format!("{} is in use by {holder}; build the report when it has finished", dir.display()),
            ),
            e => e,
        };
        inputs.extend(OutputLock::reader(dir).map_err(busy)?);
    }
    Ok(Held { _out: out_lock, _inputs: inputs })
}

/// The run directories of the inputs (`<from>/runs/*` holding a [`CONFIG_FILE`], the ones a
/// report reads), in order.
fn runs_of(from: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut all = Vec::new();
    for src in from {
        let runs = src.join("runs");
        if !runs.is_dir() {
            continue;
        }
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&runs)
            .map_err(|e| Error::io(&runs, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir() && p.join(CONFIG_FILE).exists())
            .collect();
        dirs.sort();
        all.extend(dirs);
    }
    Ok(all)
}

/// Looks at every run of the inputs before a report reads them: one that a writer holds is
/// refused, always; unfinished ones (no [`METRICS_FILE`]) are refused unless `partial`, and
/// are returned (their directories) when it is.
pub fn check_runs(from: &[PathBuf], partial: bool) -> Result<Vec<PathBuf>> {
    let mut unfinished = Vec::new();
    for run in runs_of(from)? {
        if let Some(holder) = lock_holder(&run)? {
            return Err(Error::invalid(
                "--from",
                format!(
                    "{} is being written by {holder} (a training, an extension or an analysis); build the report when it has finished",
                    run.display()
                ),
            ));
        }
        if !run.join(METRICS_FILE).exists() {
            unfinished.push(run);
        }
    }
    if let (Some(first), false) = (unfinished.first(), partial) {
        let more = match unfinished.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        return Err(Error::invalid(
            "--from",
            format!(
                "{}{more} holds an unfinished run (metrics: no {METRICS_FILE}); finish it (rerun the reproduce or the training) or pass --partial for a report marked partial",
                first.display()
            ),
        ));
    }
    Ok(unfinished)
}

/// The banner's first entry of a partial report: the unfinished runs it was built from.
pub fn partial_entry(unfinished: &[PathBuf]) -> super::banner::BannerEntry {
    let names: Vec<String> = unfinished.iter().map(|r| format!("`{}`", r.display())).collect();
    super::banner::BannerEntry {
        kind: "partial report".into(),
        text: format!(
            "built with --partial while {} run(s) had not finished ({}: no {METRICS_FILE}); every verdict, figure and number below may change when they finish, and none of them is the reproduction's result",
            unfinished.len(),
            names.join(", ")
        ),
        claims: vec![],
        group: None,
    }
}

/// A new staging directory in `out` for this process (removed unless kept).
pub fn stage(out: &Path) -> Result<Owned> {
    Owned::new_dir(&out.join(format!("{NEW}{}", std::process::id())))
}

/// Whether `path` (a file or a directory) exists, without following a final symlink.
fn exists(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}

fn remove(path: &Path) -> Result<()> {
    let r = match path.symlink_metadata() {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
    };
    r.map_err(|e| Error::io(path, e))
}

fn parent_dir(path: &Path) -> Result<()> {
    match path.parent() {
        Some(d) => std::fs::create_dir_all(d).map_err(|e| Error::io(d, e)),
        None => Ok(()),
    }
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    parent_dir(to)?;
    std::fs::rename(from, to).map_err(|e| Error::io(to, e))
}

/// Puts the report built in the staging directory `staged` in place of the old one in `out`
/// (steps 1 to 3 of the module doc).
pub fn swap(staged: Owned, out: &Path) -> Result<()> {
    let have: Vec<&str> = OUTPUTS.iter().copied().filter(|e| exists(&staged.path().join(e))).collect();
    crate::run_dir::atomic_write(&staged.path().join(MANIFEST), have.join("\n").as_bytes())?;
    let pid = std::process::id();
    let ready = out.join(format!("{READY}{pid}"));
    let old = out.join(format!("{OLD}{pid}"));
    remove(&old)?;
    staged.persist(&ready)?;
    let mut done: Vec<(&str, bool)> = Vec::new();
    for e in OUTPUTS {
        if let Err(err) = swap_one(out, &ready, &old, e, have.contains(&e)) {
            // Put the old report back (this entry too where it was kept aside; otherwise it
            // was not touched); if that fails too, the next report rolls forward.
            if exists(&old.join(e)) {
                done.push((e, true));
            }
            if done.iter().rev().all(|&(e, had)| restore(out, &old, e, had).is_ok()) {
                let _ = remove(&ready);
                let _ = remove(&old);
            }
            return Err(err);
        }
        done.push((e, exists(&old.join(e))));
    }
    remove(&ready)?;
    remove(&old)
}

/// Step 2 for one entry: the old one aside into `old`, the new one (if `new`) from `ready`.
fn swap_one(out: &Path, ready: &Path, old: &Path, e: &str, new: bool) -> Result<()> {
    let (dest, aside) = (out.join(e), old.join(e));
    if let Ok(m) = dest.symlink_metadata() {
        parent_dir(&aside)?;
        if m.is_dir() {
            std::fs::rename(&dest, &aside).map_err(|x| Error::io(&dest, x))?;
        } else {
            std::fs::hard_link(&dest, &aside).map_err(|x| Error::io(&dest, x))?;
        }
    }
    if new {
        rename(&ready.join(e), &dest)
    } else {
        remove(&dest)
    }
}

/// Undoes [`swap_one`] for `e`: the kept-aside old entry back, or, where there was none
/// (`had` false), the new one removed.
fn restore(out: &Path, old: &Path, e: &str, had: bool) -> Result<()> {
    let dest = out.join(e);
    if !had {
        return remove(&dest);
    }
    if dest.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        remove(&dest)?;
    }
    rename(&old.join(e), &dest)
}

/// Whether `name` is a temporary sibling ([`crate::run_dir::temp_sibling`]) of `file`:
/// `.<pid>-<n>.tmp.<file>`.
fn is_temp_of(name: &str, file: &str) -> bool {
    let Some(rest) = name.strip_prefix('.') else { return false };
    let Some((ids, tail)) = rest.split_once(".tmp.") else { return false };
    let Some((pid, n)) = ids.split_once('-') else { return false };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    tail == file && digits(pid) && digits(n)
}

/// Cleans up what dead reports left in `out` (see the module doc): staging directories
/// removed, ready ones rolled forward, kept-aside ones removed, temporary files of the output
/// files deleted. Call only while holding the locks of [`lock`]: they prove every earlier
/// report writer and every reproduce of `out` dead.
pub fn recover(out: &Path) -> Result<()> {
    let mut names: Vec<String> = std::fs::read_dir(out)
        .map_err(|e| Error::io(out, e))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().to_string()))
        .collect();
    names.sort();
    for n in names.iter().filter(|n| n.starts_with(NEW)) {
        remove(&out.join(n))?;
    }
    for n in names.iter().filter(|n| n.starts_with(READY)) {
        roll_forward(out, &out.join(n))?;
    }
    for n in names.iter().filter(|n| n.starts_with(OLD)) {
        remove(&out.join(n))?;
    }
    for e in OUTPUTS.iter().filter(|e| e.contains('.')) {
        let path = out.join(e);
        let (Some(dir), Some(file)) = (path.parent(), path.file_name().and_then(|f| f.to_str())) else { continue };
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        for entry in entries.filter_map(|x| x.ok()) {
            if is_temp_of(&entry.file_name().to_string_lossy(), file) {
                remove(&entry.path())?;
            }
        }
    }
    Ok(())
}

/// Finishes the swap of a ready directory whose writer died during step 2: every entry its
/// manifest lists and that is still in it replaces the one in `out` (which is old, since the
/// new one was not moved yet); every entry it lacks is removed from `out` (old too).
fn roll_forward(out: &Path, ready: &Path) -> Result<()> {
    let manifest = ready.join(MANIFEST);
    let text = crate::limits::read_text(&manifest, 4096)?;
    let have: Vec<&str> = text.lines().collect();
    if let Some(bad) = have.iter().find(|e| !OUTPUTS.contains(e)) {
        return Err(Error::File { path: manifest.clone(), reason: format!("lists {bad:?}, not a report output") });
    }
    for e in OUTPUTS {
        let (src, dest) = (ready.join(e), out.join(e));
        if !have.contains(&e) {
            remove(&dest)?;
        } else if exists(&src) {
            if dest.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                remove(&dest)?;
            }
            rename(&src, &dest)?;
        }
    }
    remove(ready)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(label: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("phasekv-publish-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn put(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Every file under `dir`, relative, with its text (sorted).
    fn tree(dir: &Path) -> Vec<(String, String)> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(root, &p, out);
                } else {
                    let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
                    out.push((rel, std::fs::read_to_string(&p).unwrap_or_default()));
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    /// An old report (with a figure and a theory file the new one lacks) beside input runs.
    fn old_report(out: &Path) {
        put(&out.join("README.md"), "old readme");
        put(&out.join("ledger.json"), "old ledger");
        put(&out.join("figures/a.png"), "old a");
        put(&out.join("figures/gone.png"), "old only");
        put(&out.join("theory/theory.json"), "old theory");
        put(&out.join("runs/README.md"), "old runs readme");
        put(&out.join("runs/x/metrics.json"), "input");
        put(&out.join("plan.json"), "input plan");
    }

    fn new_report(staged: &Path) {
        put(&staged.join("README.md"), "new readme");
        put(&staged.join("ledger.json"), "new ledger");
        put(&staged.join("figures/a.png"), "new a");
        put(&staged.join("figures/b.png"), "new b");
        put(&staged.join("runs/README.md"), "new runs readme");
    }

    fn expected_new() -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = [
            ("README.md", "new readme"),
            ("ledger.json", "new ledger"),
            ("figures/a.png", "new a"),
            ("figures/b.png", "new b"),
            ("runs/README.md", "new runs readme"),
            ("runs/x/metrics.json", "input"),
            ("plan.json", "input plan"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        v.sort();
        v
    }

    #[test]
    fn a_swap_replaces_every_output_whole_and_leaves_the_inputs() {
        let out = scratch("swap");
        old_report(&out);
        let old = tree(&out);
        let staged = stage(&out).unwrap();
        new_report(staged.path());
        // Negative control: before the commit point the old report is untouched.
        let with_staging: Vec<_> = tree(&out).into_iter().filter(|(p, _)| !p.starts_with(NEW)).collect();
        assert_eq!(with_staging, old);
        swap(staged, &out).unwrap();
        assert_eq!(tree(&out), expected_new(), "the old figure and theory file must be gone, the inputs kept");
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn a_staging_directory_left_by_a_dead_report_is_removed_and_the_old_report_kept() {
        let out = scratch("dead-staging");
        old_report(&out);
        let old = tree(&out);
        let staged = out.join(format!("{NEW}999999999"));
        new_report(&staged);
        put(&out.join(".12-3.tmp.ledger.json"), "half");
        put(&out.join("runs/.7-0.tmp.README.md"), "half");
        put(&out.join(".12-3.tmp.plan.json"), "not a report output: kept");
        recover(&out).unwrap();
        let mut want = old.clone();
        want.push((".12-3.tmp.plan.json".into(), "not a report output: kept".into()));
        want.sort();
        assert_eq!(tree(&out), want);
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn a_swap_killed_halfway_is_rolled_forward_by_the_next_report() {
        // Every point at which step 2 can stop: after k entries were swapped, with or without
        // the old entry already kept aside.
        for k in 0..=OUTPUTS.len() {
            for aside in [false, true] {
                let out = scratch(&format!("halfway-{k}-{aside}"));
                old_report(&out);
                let staged = out.join(format!("{NEW}1"));
                new_report(&staged);
                let have: Vec<&str> = OUTPUTS.iter().copied().filter(|e| staged.join(e).exists()).collect();
                put(&staged.join(MANIFEST), &have.join("\n"));
                let ready = out.join(format!("{READY}1"));
                std::fs::rename(&staged, &ready).unwrap();
                let old = out.join(format!("{OLD}1"));
                for e in &OUTPUTS[..k] {
                    swap_one(&out, &ready, &old, e, have.contains(e)).unwrap();
                }
                if aside && k < OUTPUTS.len() && out.join(OUTPUTS[k]).is_file() {
                    put(&old.join(OUTPUTS[k]), "kept aside");
                }
                recover(&out).unwrap();
                assert_eq!(tree(&out), expected_new(), "stopped after {k} entries (aside: {aside})");
                std::fs::remove_dir_all(&out).unwrap();
            }
        }
    }

    #[test]
    fn temporary_names_are_recognised_exactly() {
        assert!(is_temp_of(".123-4.tmp.README.md", "README.md"));
        assert!(!is_temp_of(".123-4.tmp.README.md.x", "README.md"));
        assert!(!is_temp_of("123-4.tmp.README.md", "README.md"));
        assert!(!is_temp_of(".12a-4.tmp.README.md", "README.md"));
        assert!(!is_temp_of(".123-.tmp.README.md", "README.md"));
        assert!(!is_temp_of(".report-new-5", "README.md"));
    }
}
