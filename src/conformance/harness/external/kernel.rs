//! [`ExternalKernel`]: a kernel in another process, spoken to over frames, checked like any
//! [`KernelUnderTest`].

use super::frames::{one_line, reply_outputs};
use super::options::ExternalOptions;
use super::process::Process;
use crate::conformance::dump::{Dump, RawTensor, Run};
use crate::conformance::harness::checkable::checkable;
use crate::conformance::harness::strategies::Case;
use crate::conformance::harness::subject::KernelUnderTest;
use crate::conformance::harness::subjects::{stream_by_prefixes, ReferenceSubject};
use crate::kernel::attention::{compressed_attention, AttentionInputs, AttentionOut};
use crate::kernel::params::{KernelParams, ParamLayout};
use crate::kernel::spec::{KernelDims, KernelSpec, Named};
use crate::kernel::Compressed;
use crate::{Error, Result};
use candle_core::DType;
use ndarray::{concatenate, Array2, Array3, ArrayView2, Axis};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::rc::Rc;

/// Longest hello `label` accepted.
const MAX_LABEL: usize = 200;

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
    /// Starts `command` (through `sh -c`, in a process group of its own with a guard that ends
    /// the group if phasekv dies, so it may carry
    /// arguments and environment assignments) and asks it which kernel it serves. The hello is
    /// held to the limits of `kernel check` ([`crate::conformance::harness::checkable`]). A process that breaks the
    /// protocol, dies, or does not answer within `opts.reply_timeout` is an error naming the
    /// request and quoting its last stderr lines; its process group is then ended at once
    /// (otherwise when the kernel is dropped).
    pub fn start(command: &str, opts: ExternalOptions) -> Result<Self> {
        let mut process = Process::start(command, opts)?;
        let (meta, _) = process.request("hello", HashMap::new(), &BTreeMap::new())?;
        let hello = |what: String| process.err(format!("its hello reply: {what}"));
        let spec = KernelSpec::named(meta.get("preset").map(String::as_str), meta.get("spec").map(String::as_str))
            .map_err(|e| match e {
                Named::Preset(e) => hello(e.to_string()),
                Named::Spec(e) => hello(format!("its spec: {e}")),
                Named::Both | Named::Neither => hello("must carry exactly one of preset and spec".into()),
            })?;
        checkable(&spec).map_err(|e| hello(e.to_string()))?;
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
        self.process.borrow().group()
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
        let (_, out) = process.request("compress", meta, &tensors)?;
        reply_outputs(&self.spec, dims.d_head, x, out).map_err(|e| process.err(e))
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
