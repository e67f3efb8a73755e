//! The kernel process of `kernel check --external`: started through `sh -c` in a process group
//! with a guard, fed and read by threads (so a process that stops reading or writing cannot
//! block phasekv), one request and one reply at a time with the reply timeout and the run's
//! budget, and its whole group ended on every exit path.
//!
//! The guard is a second `sh` (`read x; kill -9 0`), the leader of the group the kernel joins,
//! reading a pipe that only phasekv holds open. When phasekv ends in any way, `kill -9`
//! included, the pipe closes, the guard's `read` returns and it kills its group: the kernel's
//! shell, the kernel and whatever they started in it. A normal end kills the group directly.

use super::frames::{decode_reply, frame, one_line, read_frame, Fault, Reply};
use super::options::ExternalOptions;
use crate::conformance::dump::{safetensors_bytes, RawTensor};
use crate::{Error, Result};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lines of the process's stderr kept for the error line, and characters kept of each.
const STDERR_LINES: usize = 3;
const STDERR_LINE_CHARS: usize = 240;

type Frames = Receiver<std::result::Result<Vec<u8>, String>>;

pub(super) struct Process {
    pub(super) command: String,
    /// The guard: leader of the process group, killing it when phasekv ends.
    guard: Child,
    /// The `sh -c COMMAND` that runs the kernel, in the guard's group.
    child: Child,
    /// Request frames, written by a thread so that a process that stops reading its stdin
    /// cannot block phasekv; dropping it closes the process's stdin.
    requests: Option<Sender<Vec<u8>>>,
    /// Reply frames, read by a thread so that a silent process times out instead of hanging.
    replies: Frames,
    /// The last lines the process wrote to its stderr.
    stderr: Arc<Mutex<VecDeque<String>>>,
    opts: ExternalOptions,
    started: Instant,
    /// The id of the last request sent (requests are numbered from 1).
    last_id: u64,
    /// Set by the first protocol fault: every later request fails with it, without the process.
    pub(super) broken: Option<String>,
}

/// Sends the frames of `rx` to the process's stdin until `rx` closes or a write fails.
fn write_frames(stdin: ChildStdin, rx: Receiver<Vec<u8>>) {
    let mut w = BufWriter::new(stdin);
    for body in rx {
        if w.write_all(&frame(&body)).and_then(|_| w.flush()).is_err() {
            return;
        }
    }
}

/// Reads frames from the process's stdout until it ends, sending each on `tx`.
fn read_frames(stdout: ChildStdout, tx: Sender<std::result::Result<Vec<u8>, String>>) {
    let mut r = BufReader::new(stdout);
    loop {
        let frame = match read_frame(&mut r) {
            Ok(Some(buf)) => Ok(buf),
            Ok(None) => Err("closed its stdout".to_string()),
            Err(e) => Err(e),
        };
        let end = frame.is_err();
        if tx.send(frame).is_err() || end {
            return;
        }
    }
}

/// Keeps the last [`STDERR_LINES`] lines of the process's stderr (each cut to
/// [`STDERR_LINE_CHARS`] characters; memory stays bounded whatever it writes).
fn keep_stderr(stderr: ChildStderr, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut r = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut chunk = [0u8; 4096];
    let push = |line: &mut Vec<u8>| {
        let text = one_line(String::from_utf8_lossy(line).trim_end(), STDERR_LINE_CHARS);
        line.clear();
        if text.trim().is_empty() {
            return;
        }
        if let Ok(mut t) = tail.lock() {
            if t.len() == STDERR_LINES {
                t.pop_front();
            }
            t.push_back(text);
        }
    };
    loop {
        let k = match r.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(k) => k,
        };
        for &b in &chunk[..k] {
            if b == b'\n' {
                push(&mut line);
            } else if line.len() < 4 * STDERR_LINE_CHARS {
                line.push(b);
            }
        }
    }
    push(&mut line);
}

/// Ends process group `pgid` (the guard, the shell and whatever it started), by its id; for a
/// caller that must end it without dropping the kernel (a signal handler's thread).
pub fn end_process_group(pgid: u32) {
    let group = format!("-{pgid}");
    let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
}

/// Kills and reaps `child`.
fn reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Process {
    fn drop(&mut self) {
        // End of stdin asks the server to exit; give it a moment, then end the process group.
        drop(self.requests.take());
        if self.broken.is_none() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.end();
    }
}

impl Process {
    /// Starts the guard, then `command` through `sh -c` in the guard's process group, and the
    /// threads that feed and read it.
    pub(super) fn start(command: &str, opts: ExternalOptions) -> Result<Process> {
        let mut guard = Command::new("sh")
            .args(["-c", "read x; kill -9 0"])
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::io(PathBuf::from("sh"), e))?;
        let spawned = Command::new("sh")
            .arg("-c")
            .arg(command)
            .process_group(guard.id() as i32)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                reap(&mut guard);
                return Err(Error::io(PathBuf::from("sh"), e));
            }
        };
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            end_process_group(guard.id());
            reap(&mut child);
            reap(&mut guard);
            return Err(Error::invalid("--external", "cannot open the process's stdin, stdout and stderr"));
        };
        let (tx, replies) = channel();
        std::thread::spawn(move || read_frames(stdout, tx));
        let (requests, rx) = channel();
        std::thread::spawn(move || write_frames(stdin, rx));
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let keep = Arc::clone(&tail);
        std::thread::spawn(move || keep_stderr(stderr, keep));
        Ok(Process {
            command: command.to_string(),
            guard,
            child,
            requests: Some(requests),
            replies,
            stderr: tail,
            opts,
            started: Instant::now(),
            last_id: 0,
            broken: None,
        })
    }

    /// The process group (the guard's id).
    pub(super) fn group(&self) -> u32 {
        self.guard.id()
    }

    pub(super) fn err(&self, reason: String) -> Error {
        Error::File { path: PathBuf::from(format!("external kernel `{}`", self.command)), reason }
    }

    /// Kills the process group and reaps the shell and the guard.
    fn end(&mut self) {
        let reaped = |c: &mut Child| matches!(c.try_wait(), Ok(Some(_)));
        if reaped(&mut self.guard) && reaped(&mut self.child) {
            return; // ended before (a protocol fault), and the group with the guard
        }
        end_process_group(self.group());
        reap(&mut self.child);
        reap(&mut self.guard);
    }

    /// `; its last stderr lines: ...` when it wrote any.
    fn stderr_note(&self) -> String {
        // Let the stderr thread catch up with what the process wrote just before it failed.
        std::thread::sleep(Duration::from_millis(50));
        let tail = self.stderr.lock().map(|t| t.iter().cloned().collect::<Vec<_>>()).unwrap_or_default();
        if tail.is_empty() {
            "; it wrote nothing to stderr".into()
        } else {
            format!("; its last stderr lines: {}", tail.join(" | "))
        }
    }

    /// How the process ended, if it did.
    fn exit_note(&mut self) -> String {
        std::thread::sleep(Duration::from_millis(50));
        match self.child.try_wait() {
            Ok(Some(s)) => match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                (Some(c), _) => format!(" (exit status {c})"),
                (None, Some(sig)) => format!(" (killed by signal {sig})"),
                _ => String::new(),
            },
            _ => String::new(),
        }
    }

    /// One request, one reply. A protocol fault marks the process broken (every later request
    /// fails at once) and ends it.
    pub(super) fn request(
        &mut self,
        op: &str,
        mut meta: HashMap<String, String>,
        tensors: &BTreeMap<String, RawTensor>,
    ) -> Result<Reply> {
        if let Some(b) = &self.broken {
            return Err(self.err(b.clone()));
        }
        self.last_id += 1;
        let id = self.last_id;
        meta.insert("op".into(), op.into());
        meta.insert("id".into(), id.to_string());
        match self.exchange(id, meta, tensors) {
            Ok(reply) => Ok(reply),
            Err(Fault::Kernel(reason)) => Err(self.err(reason)),
            Err(Fault::Protocol(what)) => {
                let exit = self.exit_note();
                let line = format!("{what}{exit} at request {id} ({op}){}", self.stderr_note());
                self.broken = Some(line.clone());
                self.end();
                Err(self.err(line))
            }
        }
    }

    fn exchange(
        &mut self,
        id: u64,
        meta: HashMap<String, String>,
        tensors: &BTreeMap<String, RawTensor>,
    ) -> std::result::Result<Reply, Fault> {
        let spent = |o: &ExternalOptions| {
            Fault::Protocol(format!(
                "did not finish within the run's time budget of {} s (--budget)",
                o.budget.as_secs_f64()
            ))
        };
        let Some(left) = self.opts.budget.checked_sub(self.started.elapsed()) else { return Err(spent(&self.opts)) };
        let body =
            safetensors_bytes(&meta, tensors).map_err(|r| Fault::Protocol(format!("cannot encode a request: {r}")))?;
        let sent = self.requests.as_ref().is_some_and(|tx| tx.send(body).is_ok());
        if !sent {
            return Err(Fault::Protocol("stopped reading its stdin".into()));
        }
        let wait = self.opts.reply_timeout.min(left);
        let deadline = Instant::now() + wait;
        let buf = loop {
            if (self.opts.stop)() {
                return Err(Fault::Protocol("stopped by a signal".into()));
            }
            let now = Instant::now();
            if now >= deadline {
                if wait < self.opts.reply_timeout {
                    return Err(spent(&self.opts));
                }
                return Err(Fault::Protocol(format!(
                    "sent no reply within {} s (--reply-timeout)",
                    self.opts.reply_timeout.as_secs_f64()
                )));
            }
            // Whether it exited, asked before waiting, so that a reply it wrote just before
            // exiting is still read.
            let exited = matches!(self.child.try_wait(), Ok(Some(_)));
            match self.replies.recv_timeout((deadline - now).min(Duration::from_millis(100))) {
                Ok(Ok(buf)) => break buf,
                Ok(Err(reason)) => return Err(Fault::Protocol(reason)),
                // Its stdout may stay open in a process it started: its exit is the end.
                Err(RecvTimeoutError::Timeout) if exited => {
                    return Err(Fault::Protocol("exited before replying".into()))
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(Fault::Protocol("closed its stdout".into())),
            }
        };
        decode_reply(&buf, id)
    }
}
