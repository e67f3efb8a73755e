//! Progress for every long command, in one place: an indicatif bar when stderr is a terminal,
//! and otherwise (a batch job, a Slurm task log, a pipe) one plain line at the start, then at
//! most one line every `PHASEKV_PROGRESS_SECS` seconds (default 10), and one at the end, so a
//! scheduler's log shows how far a job has come. Shareable across threads (`&self` methods).

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Seconds between two progress lines when stderr is not a terminal.
fn line_interval() -> Duration {
    let secs = std::env::var("PHASEKV_PROGRESS_SECS").ok().and_then(|s| s.parse::<f64>().ok());
    Duration::from_secs_f64(secs.filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e9).unwrap_or(10.0))
}

struct Lines {
    pos: u64,
    msg: String,
    last_line: Option<Instant>,
    last_pos: Option<u64>,
    finished: bool,
}

/// A progress display: a bar on a terminal, timed lines elsewhere.
pub struct Progress {
    bar: Option<ProgressBar>,
    label: String,
    len: u64,
    start: Instant,
    interval: Duration,
    lines: Mutex<Lines>,
}

impl Progress {
    /// A progress display for `len` units of work, labelled `label`.
    pub fn new(len: u64, label: &str) -> Self {
        Self::with_bar(len, label, std::io::stderr().is_terminal())
    }

    /// Timed lines even on a terminal: for displays that run side by side (`reproduce
    /// --jobs`), where two bars would overwrite each other.
    pub fn lines(len: u64, label: &str) -> Self {
        Self::with_bar(len, label, false)
    }

    fn with_bar(len: u64, label: &str, bar: bool) -> Self {
        let bar = bar.then(|| {
            let b = ProgressBar::new(len);
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix:>14} {bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.set_prefix(label.to_string());
            b
        });
        Self {
            bar,
            label: label.to_string(),
            len,
            start: Instant::now(),
            interval: line_interval(),
            lines: Mutex::new(Lines { pos: 0, msg: String::new(), last_line: None, last_pos: None, finished: false }),
        }
    }

    /// Sets the number of units done.
    pub fn set_position(&self, pos: u64) {
        match &self.bar {
            Some(b) => b.set_position(pos),
            None => self.update(|l| l.pos = pos, false),
        }
    }

    /// Adds `n` units done.
    pub fn inc(&self, n: u64) {
        match &self.bar {
            Some(b) => b.inc(n),
            None => self.update(|l| l.pos = l.pos.saturating_add(n), false),
        }
    }

    /// Sets the free-text message shown after the counts.
    pub fn set_message(&self, msg: impl Into<String>) {
        let msg = msg.into();
        match &self.bar {
            Some(b) => b.set_message(msg),
            None => {
                if let Ok(mut l) = self.lines.lock() {
                    l.msg = msg;
                }
            }
        }
    }

    /// Prints a line above the bar (or plainly).
    pub fn println(&self, line: impl AsRef<str>) {
        match &self.bar {
            Some(b) => b.println(line.as_ref()),
            None => eprintln!("{}", line.as_ref()),
        }
    }

    /// Ends the display (a final line when not on a terminal, unless one was just printed for
    /// the last position).
    pub fn finish(&self) {
        match &self.bar {
            Some(b) => b.finish_and_clear(),
            None => self.update(|_| {}, true),
        }
    }

    fn update(&self, f: impl FnOnce(&mut Lines), finish: bool) {
        let Ok(mut l) = self.lines.lock() else { return };
        if l.finished {
            return;
        }
        f(&mut l);
        let now = Instant::now();
        let due = match l.last_line {
            None => true,
            Some(t) => now.duration_since(t) >= self.interval || (l.pos >= self.len && l.last_pos != Some(l.pos)),
        };
        if finish {
            l.finished = true;
            if l.last_pos == Some(l.pos) {
                return;
            }
        } else if !due {
            return;
        }
        l.last_line = Some(now);
        l.last_pos = Some(l.pos);
        let elapsed = self.start.elapsed().as_secs_f64();
        let pct = if self.len == 0 { 100.0 } else { 100.0 * l.pos as f64 / self.len as f64 };
        let eta = if l.pos > 0 && l.pos < self.len {
            format!(" eta {:.0} s", elapsed * (self.len - l.pos) as f64 / l.pos as f64)
        } else {
            String::new()
        };
        let msg = if l.msg.is_empty() { String::new() } else { format!(" {}", l.msg) };
        eprintln!("progress {}: {}/{} ({pct:.0} %) elapsed {elapsed:.0} s{eta}{msg}", self.label, l.pos, self.len);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
