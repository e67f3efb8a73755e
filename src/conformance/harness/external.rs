//! A kernel in another process, checked live by the harness (`phasekv kernel check --external
//! CMD`): every invariant K1-K13 runs against it with proptest-drawn cases, failures shrink, and
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
use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::rc::Rc;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

/// Largest reply frame accepted (a guard against a process writing garbage to stdout).
const MAX_FRAME: u64 = 1 << 30;

struct Process {
    command: String,
    child: Child,
    stdin: Option<BufWriter<ChildStdin>>,
    /// Reply frames, read by a thread so that a silent process times out instead of hanging.
    replies: Receiver<std::result::Result<Vec<u8>, String>>,
    timeout: Duration,
}

/// Reads frames from the process's stdout until it ends, sending each on `tx`.
fn read_frames(stdout: ChildStdout, tx: Sender<std::result::Result<Vec<u8>, String>>) {
    let mut r = BufReader::new(stdout);
    loop {
        let mut head = [0u8; 8];
        if let Err(e) = r.read_exact(&mut head) {
            let _ = tx.send(Err(format!("no reply on stdout ({e}); did it exit? see its stderr")));
            return;
        }
        let n = u64::from_le_bytes(head);
        if n > MAX_FRAME {
            let _ = tx.send(Err(format!(
                "reply frame of {n} bytes announced (more than {MAX_FRAME}): does the process print to stdout? \
                 The protocol owns stdout; log to stderr"
            )));
            return;
        }
        let mut buf = vec![0u8; n as usize];
        if let Err(e) = r.read_exact(&mut buf) {
            let _ = tx.send(Err(format!("reply cut short after the length ({e})")));
            return;
        }
        if tx.send(Ok(buf)).is_err() {
            return;
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // End of stdin asks the server to exit; give it a moment, then end the process group
        // we started it in (the shell and whatever it started), by its id.
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    fn err(&self, reason: String) -> Error {
        Error::File { path: PathBuf::from(format!("external kernel `{}`", self.command)), reason }
    }

    /// One request, one reply.
    fn request(
        &mut self,
        meta: HashMap<String, String>,
        tensors: &BTreeMap<String, RawTensor>,
    ) -> Result<(HashMap<String, String>, BTreeMap<String, RawTensor>)> {
        let body = safetensors_bytes(&meta, tensors).map_err(|r| self.err(format!("cannot encode a request: {r}")))?;
        let Some(stdin) = self.stdin.as_mut() else { return Err(self.err("its stdin is closed".into())) };
        let sent = stdin
            .write_all(&(body.len() as u64).to_le_bytes())
            .and_then(|_| stdin.write_all(&body))
            .and_then(|_| stdin.flush());
        if let Err(e) = sent {
            // It may have exited after writing something: its stdout says more than the pipe.
            let reason = match self.replies.recv_timeout(Duration::from_millis(500)) {
                Ok(Err(reason)) => reason,
                _ => format!("the process does not read its stdin ({e}); did it exit? see its stderr"),
            };
            return Err(self.err(reason));
        }
        let buf = match self.replies.recv_timeout(self.timeout) {
            Ok(Ok(buf)) => buf,
            Ok(Err(reason)) => return Err(self.err(reason)),
            Err(RecvTimeoutError::Timeout) => {
                return Err(self.err(format!("no reply within {} s (--reply-timeout)", self.timeout.as_secs_f64())))
            }
            Err(RecvTimeoutError::Disconnected) => return Err(self.err("its stdout is closed".into())),
        };
        let path = PathBuf::from(format!("reply of `{}`", self.command));
        let (meta, tensors) = read_safetensors(&path, &buf)?;
        if let Some(e) = meta.get("error") {
            return Err(self.err(format!("the kernel failed: {e}")));
        }
        Ok((meta, tensors))
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
    /// arguments and environment assignments) and asks it which kernel it serves. A request not answered within `timeout`
    /// is an error (the process is then killed when the kernel is dropped).
    pub fn start(command: &str, timeout: Duration) -> Result<Self> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::io(PathBuf::from("sh"), e))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::invalid("--external", "cannot open the process's stdin and stdout"));
        };
        let (tx, replies) = channel();
        std::thread::spawn(move || read_frames(stdout, tx));
        let mut process =
            Process { command: command.to_string(), child, stdin: Some(BufWriter::new(stdin)), replies, timeout };
        let hello = HashMap::from([("op".to_string(), "hello".to_string())]);
        let (meta, _) = process.request(hello, &BTreeMap::new())?;
        let spec = match (meta.get("preset"), meta.get("spec")) {
            (Some(p), None) => KernelSpec::preset(p)?,
            (None, Some(j)) => KernelSpec::from_json(j).map_err(|e| process.err(format!("its spec: {e}")))?,
            _ => return Err(process.err("the hello reply must carry exactly one of preset and spec".into())),
        };
        let dtype = match meta.get("dtype") {
            Some(d) => crate::conformance::dump::parse_dtype(d)
                .ok_or_else(|| process.err(format!("hello reply dtype '{d}' is not f64, f32, f16 or bf16")))?,
            None => return Err(process.err("the hello reply must carry dtype".into())),
        };
        let label = format!("external:{}", meta.get("label").cloned().unwrap_or_else(|| command.to_string()));
        // Optional: the narrowest head the kernel runs (cases then draw d_h from it on).
        let min_d_head = match meta.get("min_d_head") {
            None => 1,
            Some(v) => {
                v.parse::<usize>().ok().filter(|&m| (1..=crate::limits::MAX_D_HEAD).contains(&m)).ok_or_else(|| {
                    process.err(format!("hello reply min_d_head '{v}' is not in 1..={}", crate::limits::MAX_D_HEAD))
                })?
            }
        };
        Ok(ExternalKernel { process: Rc::new(RefCell::new(process)), spec, dtype, label, min_d_head })
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
            ("op".to_string(), "compress".to_string()),
            ("d_model".to_string(), dims.d_model.to_string()),
            ("d_head".to_string(), dims.d_head.to_string()),
        ]);
        let mut process = self.process.borrow_mut();
        let (_, mut out) = process.request(meta, &tensors)?;
        let (b, dh, w) = (x.shape()[0], dims.d_head, self.spec.geometry.window());
        let mut take = |name: &str, rank: usize| -> Result<Option<RawTensor>> {
            match out.remove(name) {
                None => Ok(None),
                Some(t) if t.shape.len() == rank && t.shape[0] == b => Ok(Some(t)),
                Some(t) => {
                    Err(process.err(format!("output {name} has shape {:?}; expected {rank} axes, batch {b}", t.shape)))
                }
            }
        };
        let keys = take("keys", 3)?.ok_or_else(|| process.err("the reply has no keys".into()))?;
        let n = keys.shape[1];
        let arr3 = |name: &str, t: RawTensor| -> Result<Array3<f64>> {
            if t.shape != [b, n, dh] {
                return Err(process.err(format!("output {name} has shape {:?}; expected [{b}, {n}, {dh}]", t.shape)));
            }
            Ok(Array3::from_shape_vec((b, n, dh), t.data).expect("checked shape"))
        };
        let arr4 = |name: &str, t: RawTensor| -> Result<Array4<f64>> {
            let c = t.shape.get(3).copied().unwrap_or(0);
            if t.shape[..3] != [b, n, w] || !(c == 1 || c == dh) {
                return Err(process.err(format!(
                    "output {name} has shape {:?}; expected [{b}, {n}, {w}, c] with c = {dh} or 1",
                    t.shape
                )));
            }
            Ok(Array4::from_shape_vec((b, n, w, c), t.data).expect("checked shape"))
        };
        let values = take("values", 3)?.map(|t| arr3("values", t)).transpose()?;
        let pooled_keys = take("pooled_keys", 3)?.map(|t| arr3("pooled_keys", t)).transpose()?;
        let pooled_values = take("pooled_values", 3)?.map(|t| arr3("pooled_values", t)).transpose()?;
        let gate_k = take("gate_k", 4)?.map(|t| arr4("gate_k", t)).transpose()?;
        let gate_v = take("gate_v", 4)?.map(|t| arr4("gate_v", t)).transpose()?;
        if let Some(name) = out.keys().next() {
            return Err(process.err(format!("unknown output {name}")));
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
