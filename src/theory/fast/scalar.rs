//! [`FastStatic`]: the lanes kernel with one lane, in scalar code (one run of the flow,
//! `flow::FlowKernel::Fast`), using FMA when the CPU has it.

use super::lanes::Kernel;
use super::simd;
use crate::theory::task::TaskParams;

/// Buffers of the fast static kernel for one parameter vector, `H` heads and stride `S`;
/// after [`FastStatic::eval`] they also hold the gates `pK`, `pV` of the evaluated logits.
#[derive(Debug, Clone)]
pub struct FastStatic {
    heads: usize,
    stride: usize,
    kernel: Kernel<1>,
    theta: Vec<[f64; 1]>,
    out: Vec<[f64; 1]>,
    /// `[pK (H S) | pV (H S)]` of the last evaluation.
    gates: Vec<f64>,
    /// The CPU has FMA (`f64::mul_add` in one instruction instead of a library call).
    fma: bool,
}

impl FastStatic {
    /// Buffers for `H` heads and stride `S`.
    pub fn new(heads: usize, stride: usize) -> Self {
        let n = 2 * heads * stride;
        FastStatic {
            heads,
            stride,
            kernel: Kernel::new(heads, stride),
            theta: vec![[0.0]; n],
            out: vec![[0.0]; n],
            gates: vec![0.0; n],
            fma: fma_available(),
        }
    }

    /// Gates `pK` (`H x S`) of the last evaluation.
    pub fn key(&self) -> &[f64] {
        &self.gates[..self.heads * self.stride]
    }

    /// Gates `pV` (`H x S`) of the last evaluation.
    pub fn value(&self) -> &[f64] {
        &self.gates[self.heads * self.stride..]
    }

    /// Loss `F` (T-6) at logits `theta = [thetaK (H S) | thetaV (H S)]` and its gradient with
    /// respect to the logits (T-6g pulled back through T-8) into `out` (length `2 H S`).
    /// Parameters are assumed valid and of this workspace's `H`, `S`.
    pub fn eval(&mut self, p: &TaskParams, theta: &[f64], out: &mut [f64]) -> f64 {
        for (t, &x) in self.theta.iter_mut().zip(theta) {
            *t = [x];
        }
        let [f] = if self.fma {
            // SAFETY: `fma` is true only when the running CPU reports FMA.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                self.eval_fma(p)
            }
            #[cfg(not(target_arch = "x86_64"))]
            unreachable!()
        } else {
            self.kernel.eval::<simd::Lanes<1>>(p, &self.theta, &mut self.out, true)
        };
        for (o, x) in out.iter_mut().zip(&self.out) {
            *o = x[0];
        }
        for (g, x) in self.gates.iter_mut().zip(&self.kernel.gates) {
            *g = x[0];
        }
        f
    }

    /// The scalar kernel with `f64::mul_add` as one instruction (the same bits as without).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    unsafe fn eval_fma(&mut self, p: &TaskParams) -> [f64; 1] {
        self.kernel.eval::<simd::Lanes<1>>(p, &self.theta, &mut self.out, true)
    }
}

fn fma_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
