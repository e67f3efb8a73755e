//! A kernel in another process, checked live by the harness (`phasekv kernel check --external
//! CMD`): every invariant K1-K14 runs against it with proptest-drawn cases, failures shrink, and
//! a shrunk counterexample is written as a dump that `phasekv kernel validate` replays.
//!
//! The protocol (theory/dump-format.md, "Checking a live kernel"; the Python side is
//! `python/serve_kernel.py`): frames on the process's stdin and stdout, each an 8-byte
//! little-endian length followed by a safetensors buffer. phasekv sends `op = hello` once (the
//! reply names the spec and the dtype), then `op = compress` with `d_model`, `d_head`, the input
//! `[B, T, d]` and the parameters under phasekv's names, all in f64; the reply holds `keys` and
//! whatever else the kernel's `forward` returned. A reply with metadata `error` is an error. The
//! process is started once and ended (killed) when the kernel is dropped.
//!
//! What the process does not compute is taken from the reference, and said so: streaming is a
//! stateless caller recomputing prefixes ([`stream_by_prefixes`]), attention (K12) is the
//! reference attention over the kernel's entries, and K7/K10, which compare two specs, compare
//! the process (its own spec) with the reference under the other spec.

use super::subjects::{stream_by_prefixes, ReferenceSubject};
use super::{Case, KernelUnderTest};
use crate::conformance::dump::{read_safetensors, safetensors_bytes, Dump, RawTensor, Run};
use crate::kernel::attention::{compressed_attention, AttentionInputs, AttentionOut};
use crate::kernel::params::{KernelParams, ParamLayout};
use crate::kernel::spec::{KernelDims, KernelSpec};
use crate::kernel::Compressed;
use crate::{Error, Result};
use candle_core::DType;
use ndarray::{concatenate, Array2, Array3, Array4, ArrayView2, Axis};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::rc::Rc;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest reply frame accepted (a guard against a process writing garbage to stdout).
pub const MAX_FRAME: u64 = 1 << 30;
/// Lines of the process's stderr kept for the error line, and characters kept of each.
const STDERR_LINES: usize = 3;
const STDERR_LINE_CHARS: usize = 240;
/// Longest hello `label` accepted.
const MAX_LABEL: usize = 200;

/// How a live kernel is run.
#[derive(Clone, Copy, Debug)]
pub struct ExternalOptions {
    /// How long one reply may take.
    pub reply_timeout: Duration,
    /// The whole run's time: a request after it is spent ends the run (bounds the shrinking).
    pub budget: Duration,
    /// Polled while waiting for a reply: `true` stops the run at once (a signal arrived).
    pub stop: fn() -> bool,
}

impl ExternalOptions {
    /// The given reply timeout, a budget of ten minutes, no stop.
    pub fn with_timeout(reply_timeout: Duration) -> Self {
        ExternalOptions { reply_timeout, budget: Duration::from_secs(600), stop: || false }
    }
}

/// Why a request got no usable reply.
#[derive(Debug, PartialEq)]
pub enum Fault {
    /// The kernel answered with metadata `error`: this input failed (a FAIL row, the run goes on).
    Kernel(String),
    /// The process broke the protocol, died or went silent: the run ends (exit status 2).
    Protocol(String),
}

/// Reads one frame (8-byte little-endian length, then the body) from `r`: `Ok(None)` at a clean
/// end before a frame, an error for a frame over [`MAX_FRAME`] or cut short.
pub fn read_frame<R: Read>(r: &mut R) -> std::result::Result<Option<Vec<u8>>, String> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(format!("frame cut after {got} of the 8 length bytes")),
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot read its stdout ({e})")),
        }
    }
    let n = u64::from_le_bytes(head);
    if n > MAX_FRAME {
        return Err(format!(
            "sent a frame of {n} bytes (more than {MAX_FRAME}): does the process print to stdout? \
             The protocol owns stdout; log to stderr"
        ));
    }
    let mut buf = Vec::new();
    r.by_ref().take(n).read_to_end(&mut buf).map_err(|e| format!("cannot read its stdout ({e})"))?;
    if (buf.len() as u64) < n {
        return Err(format!("sent a frame of {n} bytes cut after {}", buf.len()));
    }
    Ok(Some(buf))
}

/// A decoded reply: its metadata and its tensors.
pub type Reply = (HashMap<String, String>, BTreeMap<String, RawTensor>);

/// Decodes the reply `buf` to request `id`: a safetensors buffer whose metadata carries the
/// request's `id`; metadata `error` is the kernel's failure on that input.
pub fn decode_reply(buf: &[u8], id: u64) -> std::result::Result<Reply, Fault> {
    let (meta, tensors) = read_safetensors(Path::new("reply"), buf)
        .map_err(|e| Fault::Protocol(format!("sent a reply that is not a safetensors buffer ({e})")))?;
    match meta.get("id") {
        None => return Err(Fault::Protocol("sent a reply without `id` (each reply echoes its request's id)".into())),
        Some(got) if got.parse::<u64>().ok() != Some(id) => {
            return Err(Fault::Protocol(format!(
                "sent a reply with id {:?}, expected {id} (a late reply to an earlier request?)",
                got.chars().take(40).collect::<String>()
            )))
        }
        Some(_) => {}
    }
    if let Some(e) = meta.get("error") {
        return Err(Fault::Kernel(format!("the kernel failed: {}", one_line(e, 500))));
    }
    Ok((meta, tensors))
}

/// `s` on one line, at most `max` characters.
fn one_line(s: &str, max: usize) -> String {
    let t: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(max).collect();
    if s.chars().count() > max {
        format!("{t}...")
    } else {
        t
    }
}

type Frames = Receiver<std::result::Result<Vec<u8>, String>>;

struct Process {
    command: String,
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
    broken: Option<String>,
}

/// Sends the frames of `rx` to the process's stdin until `rx` closes or a write fails.
fn write_frames(stdin: ChildStdin, rx: Receiver<Vec<u8>>) {
    let mut w = BufWriter::new(stdin);
    for body in rx {
        let sent =
            w.write_all(&(body.len() as u64).to_le_bytes()).and_then(|_| w.write_all(&body)).and_then(|_| w.flush());
        if sent.is_err() {
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

/// Ends process group `pgid` (the shell and whatever it started), by its id; for a caller that
/// must end it without dropping the kernel (a signal handler's thread).
pub fn end_process_group(pgid: u32) {
    let group = format!("-{pgid}");
    let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
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
    fn err(&self, reason: String) -> Error {
        Error::File { path: PathBuf::from(format!("external kernel `{}`", self.command)), reason }
    }

    /// Kills the process group and reaps the shell.
    fn end(&mut self) {
        end_process_group(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    fn request(
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

/// A kernel served by another process. Clones made by [`KernelUnderTest::with_spec`] share the
/// process.
pub struct ExternalKernel {
    process: Rc<RefCell<Process>>,
    spec: KernelSpec,
    dtype: DType,
    label: String,
    min_d_head: usize,
}

impl ExternalKernel {
    /// Starts `command` (through `sh -c`, in a process group of its own, so it may carry
    /// arguments and environment assignments) and asks it which kernel it serves. The hello is
    /// held to the limits of `kernel check` ([`super::checkable`]). A process that breaks the
    /// protocol, dies, or does not answer within `opts.reply_timeout` is an error naming the
    /// request and quoting its last stderr lines; its process group is then ended at once
    /// (otherwise when the kernel is dropped).
    pub fn start(command: &str, opts: ExternalOptions) -> Result<Self> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io(PathBuf::from("sh"), e))?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            end_process_group(child.id());
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::invalid("--external", "cannot open the process's stdin, stdout and stderr"));
        };
        let (tx, replies) = channel();
        std::thread::spawn(move || read_frames(stdout, tx));
        let (requests, rx) = channel();
        std::thread::spawn(move || write_frames(stdin, rx));
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let keep = Arc::clone(&tail);
        std::thread::spawn(move || keep_stderr(stderr, keep));
        let mut process = Process {
            command: command.to_string(),
            child,
            requests: Some(requests),
            replies,
            stderr: tail,
            opts,
            started: Instant::now(),
            last_id: 0,
            broken: None,
        };
        let (meta, _) = process.request("hello", HashMap::new(), &BTreeMap::new())?;
        let hello = |what: String| process.err(format!("its hello reply: {what}"));
        let spec = match (meta.get("preset"), meta.get("spec")) {
            (Some(p), None) => KernelSpec::preset(p).map_err(|e| hello(e.to_string()))?,
            (None, Some(j)) => KernelSpec::from_json(j).map_err(|e| hello(format!("its spec: {e}")))?,
            _ => return Err(hello("must carry exactly one of preset and spec".into())),
        };
        super::checkable(&spec).map_err(|e| hello(e.to_string()))?;
        let dtype = match meta.get("dtype") {
            Some(d) => crate::conformance::dump::parse_dtype(d)
                .ok_or_else(|| hello(format!("dtype '{}' is not f64, f32, f16 or bf16", one_line(d, 40))))?,
            None => return Err(hello("must carry dtype".into())),
        };
        let label = match meta.get("label") {
            Some(l) if l.chars().count() > MAX_LABEL || l.chars().any(char::is_control) => {
                return Err(hello(format!(
                    "label '{}' is longer than {MAX_LABEL} characters or holds control characters",
                    one_line(l, 40)
                )))
            }
            Some(l) => l.clone(),
            None => command.to_string(),
        };
        let label = format!("external:{label}");
        // Optional: the narrowest head the kernel runs (cases then draw d_h from it on).
        let min_d_head = match meta.get("min_d_head") {
            None => 1,
            Some(v) => {
                v.parse::<usize>().ok().filter(|&m| (1..=crate::limits::MAX_D_HEAD).contains(&m)).ok_or_else(|| {
                    hello(format!("min_d_head '{}' is not in 1..={}", one_line(v, 40), crate::limits::MAX_D_HEAD))
                })?
            }
        };
        Ok(ExternalKernel { process: Rc::new(RefCell::new(process)), spec, dtype, label, min_d_head })
    }

    /// The process group the kernel runs in (the id of the shell that started it).
    pub fn process_group(&self) -> u32 {
        self.process.borrow().child.id()
    }

    /// Runs the process on `x: [B, T, d]`: its outputs, checked against the spec's shapes.
    pub fn run(&self, dims: KernelDims, params: &KernelParams<f64>, x: &Array3<f64>) -> Result<Run> {
        let mut tensors = BTreeMap::new();
        let layout = ParamLayout::of(&self.spec, dims);
        let flat = params.to_flat();
        let mut at = 0;
        for (name, shape) in &layout.pieces {
            let len: usize = shape.iter().product();
            let data = flat.get(at..at + len).ok_or_else(|| Error::shape("parameters", "the layout", "fewer"))?;
            tensors
                .insert(name.to_string(), RawTensor { dtype: DType::F64, shape: shape.clone(), data: data.to_vec() });
            at += len;
        }
        tensors.insert(
            "input".to_string(),
            RawTensor { dtype: DType::F64, shape: x.shape().to_vec(), data: x.iter().copied().collect() },
        );
        let meta = HashMap::from([
            ("d_model".to_string(), dims.d_model.to_string()),
            ("d_head".to_string(), dims.d_head.to_string()),
        ]);
        let mut process = self.process.borrow_mut();
        let (_, mut out) = process.request("compress", meta, &tensors)?;
        let (b, t, dh, w) = (x.shape()[0], x.shape()[1], dims.d_head, self.spec.geometry.window());
        let mut take = |name: &str, rank: usize| -> Result<Option<RawTensor>> {
            match out.remove(name) {
                None => Ok(None),
                Some(r) if r.shape.len() == rank && r.shape[0] == b => Ok(Some(r)),
                Some(r) => {
                    Err(process.err(format!("output {name} has shape {:?}; expected {rank} axes, batch {b}", r.shape)))
                }
            }
        };
        let keys = take("keys", 3)?.ok_or_else(|| process.err("the reply has no keys".into()))?;
        // The count is checked against the geometry before any check indexes by it (K1 then
        // reports a wrong count as a failure of the kernel).
        let n = keys.shape[1];
        let expected = self.spec.geometry.num_windows(t);
        if n != expected {
            return Err(process.err(format!(
                "the reply has {n} windows (keys {:?}) for T = {t} tokens; the geometry gives {expected}",
                keys.shape
            )));
        }
        let shaped = |name: &str, e: ndarray::ShapeError| process.err(format!("output {name}: {e}"));
        let arr3 = |name: &str, t: RawTensor| -> Result<Array3<f64>> {
            if t.shape != [b, n, dh] {
                return Err(process.err(format!("output {name} has shape {:?}; expected [{b}, {n}, {dh}]", t.shape)));
            }
            Array3::from_shape_vec((b, n, dh), t.data).map_err(|e| shaped(name, e))
        };
        let arr4 = |name: &str, t: RawTensor| -> Result<Array4<f64>> {
            let c = t.shape.get(3).copied().unwrap_or(0);
            if t.shape[..3] != [b, n, w] || !(c == 1 || c == dh) {
                return Err(process.err(format!(
                    "output {name} has shape {:?}; expected [{b}, {n}, {w}, c] with c = {dh} or 1",
                    t.shape
                )));
            }
            Array4::from_shape_vec((b, n, w, c), t.data).map_err(|e| shaped(name, e))
        };
        let values = take("values", 3)?.map(|t| arr3("values", t)).transpose()?;
        let pooled_keys = take("pooled_keys", 3)?.map(|t| arr3("pooled_keys", t)).transpose()?;
        let pooled_values = take("pooled_values", 3)?.map(|t| arr3("pooled_values", t)).transpose()?;
        let gate_k = take("gate_k", 4)?.map(|t| arr4("gate_k", t)).transpose()?;
        let gate_v = take("gate_v", 4)?.map(|t| arr4("gate_v", t)).transpose()?;
        if let Some(name) = out.keys().next() {
            return Err(process.err(format!("unknown output {}", one_line(name, 60))));
        }
        Ok(Run { input: x.clone(), keys: arr3("keys", keys)?, values, pooled_keys, pooled_values, gate_k, gate_v })
    }

    /// The entries of sequence `b` of a run, as the harness sees them: values default to the
    /// keys (shared K/V), value gates to the key gates. The harness needs the pooled keys and
    /// the key gates.
    fn entries(&self, run: &Run, b: usize) -> Result<Compressed<f64>> {
        let need = |what: &str| {
            Error::invalid(
                "--external",
                format!("{}: forward() must return {what} for the harness (K5, K6, K13 look at it)", self.label),
            )
        };
        let pk = run.pooled_keys.as_ref().ok_or_else(|| need("pooled_keys"))?;
        let gk = run.gate_k.as_ref().ok_or_else(|| need("gate_k"))?;
        let at3 = |a: &Array3<f64>| a.index_axis(Axis(0), b).to_owned();
        let n = run.entries();
        Ok(Compressed {
            keys: at3(&run.keys),
            values: at3(run.values_or_keys()),
            pooled_k: at3(pk),
            pooled_v: at3(run.pooled_values.as_ref().unwrap_or(pk)),
            gate_k: gk.index_axis(Axis(0), b).to_owned(),
            gate_v: run.gate_v.as_ref().unwrap_or(gk).index_axis(Axis(0), b).to_owned(),
            positions: (0..n).map(|j| self.spec.entry_position(j)).collect(),
        })
    }

    /// A dump of the process on a (shrunk) case: the case's sequence as a batch of one, the
    /// shifted run (its `S` prefix tokens prepended) and, when `T > 0`, the perturbed run (the
    /// case's token replaced by its perturbation). `phasekv kernel validate` replays it.
    pub fn counterexample_dump(&self, case: &Case) -> Result<Dump> {
        let dims = case.dims;
        let batch = |x: &Array2<f64>| x.clone().insert_axis(Axis(0));
        let main = self.run(dims, &case.params, &batch(&case.x))?;
        let shifted_x = concatenate(Axis(0), &[case.prefix.view(), case.x.view()]).expect("same width");
        let shifted = Some(self.run(dims, &case.params, &batch(&shifted_x))?);
        let perturbed = if case.x.nrows() > 0 {
            let mut xp = case.x.clone();
            xp.row_mut(case.token).assign(&case.perturb);
            Some((self.run(dims, &case.params, &batch(&xp))?, case.token))
        } else {
            None
        };
        Ok(Dump {
            spec: self.spec.clone(),
            dims,
            dtype: self.dtype,
            deterministic: true,
            params: case.params.clone(),
            main,
            shifted,
            perturbed,
            batched: true,
            cache_format: None,
        })
    }

    /// Writes [`Self::counterexample_dump`] to `path`.
    pub fn save_counterexample(&self, case: &Case, path: &Path) -> Result<()> {
        self.counterexample_dump(case)?.save(path)
    }
}

impl KernelUnderTest for ExternalKernel {
    fn label(&self) -> String {
        self.label.clone()
    }

    fn spec(&self) -> &KernelSpec {
        &self.spec
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn min_d_head(&self) -> usize {
        self.min_d_head
    }

    fn broken(&self) -> Option<Error> {
        let p = self.process.borrow();
        p.broken.as_ref().map(|b| p.err(b.clone()))
    }

    fn with_spec(&self, spec: KernelSpec) -> Box<dyn KernelUnderTest> {
        if spec == self.spec {
            Box::new(ExternalKernel {
                process: Rc::clone(&self.process),
                spec,
                dtype: self.dtype,
                label: self.label.clone(),
                min_d_head: self.min_d_head,
            })
        } else {
            // The process implements one spec; the other side of K7/K10 is the reference.
            Box::new(ReferenceSubject::new(&spec))
        }
    }

    fn compress(&self, dims: KernelDims, params: &KernelParams<f64>, x: ArrayView2<f64>) -> Result<Compressed<f64>> {
        Ok(self.compress_many(dims, params, &[x.to_owned()])?.remove(0))
    }

    fn compress_many(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        xs: &[Array2<f64>],
    ) -> Result<Vec<Compressed<f64>>> {
        let Some(first) = xs.first() else { return Ok(Vec::new()) };
        if xs.iter().any(|x| x.dim() != first.dim()) {
            return Err(Error::shape("sequences of one batch", format!("{:?} each", first.dim()), "different lengths"));
        }
        let views: Vec<_> = xs.iter().map(|x| x.view()).collect();
        let x = ndarray::stack(Axis(0), &views).expect("same shapes");
        let run = self.run(dims, params, &x)?;
        (0..xs.len()).map(|b| self.entries(&run, b)).collect()
    }

    fn stream(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        seqs: &[(ArrayView2<f64>, Vec<usize>)],
    ) -> Result<Vec<Compressed<f64>>> {
        stream_by_prefixes(self, dims, params, seqs)
    }

    fn attend(
        &self,
        dims: KernelDims,
        params: &KernelParams<f64>,
        x: ArrayView2<f64>,
        inputs: &AttentionInputs<f64>,
    ) -> Result<AttentionOut<f64>> {
        let c = self.compress(dims, params, x)?;
        compressed_attention(&self.spec.geometry, self.spec.visibility, c.keys.view(), c.values.view(), inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(meta: &[(&str, &str)]) -> Vec<u8> {
        let meta = meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        safetensors_bytes(&meta, &BTreeMap::new()).unwrap()
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        [&(body.len() as u64).to_le_bytes()[..], body].concat()
    }

    #[test]
    fn frames_are_read_whole_and_bad_lengths_refused_without_allocating_them() {
        let body = reply(&[("id", "1")]);
        let mut two = framed(&body);
        two.extend(framed(&body));
        let mut r = std::io::Cursor::new(two);
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), body);
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), body);
        assert_eq!(read_frame(&mut r).unwrap(), None, "a clean end");
        // 2^40 bytes announced: refused before reading (no allocation of the announced size).
        let e = read_frame(&mut std::io::Cursor::new((1u64 << 40).to_le_bytes())).unwrap_err();
        assert!(e.contains("print to stdout"), "{e}");
        // A frame one byte short of MAX_FRAME announced, 3 bytes sent: cut, not a huge buffer.
        let mut cut = (MAX_FRAME - 1).to_le_bytes().to_vec();
        cut.extend([1, 2, 3]);
        assert!(read_frame(&mut std::io::Cursor::new(cut)).unwrap_err().contains("cut after 3"));
        assert!(read_frame(&mut std::io::Cursor::new([1u8, 2, 3])).unwrap_err().contains("3 of the 8 length bytes"));
    }

    #[test]
    fn a_reply_pairs_only_with_its_request() {
        assert!(decode_reply(&reply(&[("id", "7")]), 7).is_ok());
        for (meta, needle) in [
            (&[("id", "6")][..], "id \"6\", expected 7"),
            (&[("op", "compressed")][..], "without `id`"),
            (&[("id", "seven")][..], "expected 7"),
        ] {
            match decode_reply(&reply(meta), 7) {
                Err(Fault::Protocol(m)) => assert!(m.contains(needle), "{m}"),
                other => panic!("{meta:?}: {other:?}"),
            }
        }
        // The kernel's own error on an input is a kernel fault (a FAIL row), once the id matches.
        match decode_reply(&reply(&[("id", "7"), ("error", "ValueError: bad\nshape")]), 7) {
            Err(Fault::Kernel(m)) => assert_eq!(m, "the kernel failed: ValueError: bad shape"),
            other => panic!("{other:?}"),
        }
        match decode_reply(b"not safetensors", 1) {
            Err(Fault::Protocol(m)) => assert!(m.contains("not a safetensors buffer"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
