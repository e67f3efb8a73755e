//! [`KernelUnderTest`]: what a kernel implementation gives the harness to be checked.

use crate::kernel::attention::{AttentionInputs, AttentionOut};
use crate::kernel::params::KernelParams;
use crate::kernel::spec::{KernelDims, KernelSpec};
use crate::kernel::Compressed;
use crate::Result;
use candle_core::DType;
use ndarray::{Array2, ArrayView2};

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
