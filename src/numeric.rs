//! The scalar formulas every layer shares, written once: softmax and log-sum-exp over a slice,
//! and the one f32 GEMM of the CPU fast paths ([`gemm`]: the `gemm` crate, AVX-512 chosen at run
//! time, always single-threaded so that every reduction has one fixed order and results do not
//! depend on the thread count; the fast kernel and the fast training engine both call it).
//!
//! This is the bottom layer: it imports nothing from the crate. The kernel reference
//! ([`crate::kernel::reference`], [`crate::kernel::attention`]) and the
//! theory ([`crate::theory::task`]) all call these; the tensor twins (softmax over a tensor
//! axis, RMSNorm) live in [`crate::kernel::tensor::ops`].
//!
//! Both shift by the maximum before exponentiating (no overflow for any finite input), sum in
//! slice order and divide (not multiply by a reciprocal), so that every caller computes
//! bit-identical values for the same inputs; the streaming-equals-one-shot invariant (K11) and
//! the reference dumps rely on that.

pub mod formats;

use num_traits::Float;

/// The largest element (`-inf` for an empty slice).
#[inline]
pub fn max<F: Float>(xs: &[F]) -> F {
    xs.iter().copied().fold(F::neg_infinity(), F::max)
}

/// Softmax in place: `x[i] <- exp(x[i] - m) / sum_k exp(x[k] - m)` with `m = max(x)`.
#[inline]
pub fn softmax_in_place<F: Float>(xs: &mut [F]) {
    softmax_lanes(xs, &mut [F::zero()], &mut [F::zero()]);
}

/// [`softmax_in_place`] down each column of the row-major block `xs` (`[rows, cols]`, `xs.len()`
/// a multiple of `cols`): every column gets exactly its operations in row order, so its values
/// are bit for bit those of the column copied out, softmaxed and written back, while the block is
/// read row by row (contiguous), not column by column.
pub fn softmax_columns_in_place<F: Float>(xs: &mut [F], cols: usize) {
    if cols > 0 {
        softmax_lanes(xs, &mut vec![F::zero(); cols], &mut vec![F::zero(); cols]);
    }
}

/// The one softmax, on the `m.len()` interleaved lanes (columns) of `xs`: per lane the maximum
/// `m` (folded from `-inf` in order), `exp(x - m)` summed in order into `z`, then `x / z`;
/// `m` and `z` are the lanes' scratch.
#[inline]
fn softmax_lanes<F: Float>(xs: &mut [F], m: &mut [F], z: &mut [F]) {
    let cols = m.len();
    m.fill(F::neg_infinity());
    z.fill(F::zero());
    for row in xs.chunks_exact(cols) {
        for (m, &x) in m.iter_mut().zip(row) {
            *m = F::max(*m, x);
        }
    }
    for row in xs.chunks_exact_mut(cols) {
        for ((x, &m), z) in row.iter_mut().zip(m.iter()).zip(z.iter_mut()) {
            *x = (*x - m).exp();
            *z = *z + *x;
        }
    }
    for row in xs.chunks_exact_mut(cols) {
        for (x, &z) in row.iter_mut().zip(z.iter()) {
            *x = *x / z;
        }
    }
}

/// [`softmax_in_place`] of `logits` written into `out` (same length; a longer `out` keeps its
/// tail).
#[inline]
pub fn softmax_into<F: Float>(logits: &[F], out: &mut [F]) {
    let n = logits.len().min(out.len());
    out[..n].copy_from_slice(&logits[..n]);
    softmax_in_place(&mut out[..n]);
}

/// `log sum_k exp(x[k])`, computed as `m + log sum_k exp(x[k] - m)` with `m = max(x)`.
#[inline]
pub fn log_sum_exp<F: Float>(xs: impl IntoIterator<Item = F> + Clone) -> F {
    let m = xs.clone().into_iter().fold(F::neg_infinity(), F::max);
    m + xs.into_iter().fold(F::zero(), |acc, x| acc + (x - m).exp()).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_sums_to_one_and_survives_large_logits() {
        let mut out = [0.0; 3];
        softmax_into(&[1000.0, 1000.0, 999.0], &mut out);
        assert!((out.iter().sum::<f64>() - 1.0).abs() < 1e-15);
        assert!((out[0] - out[1]).abs() < 1e-15 && out[2] < out[0]);
        let mut same = [1000.0, 1000.0, 999.0];
        softmax_in_place(&mut same);
        assert_eq!(same, out);
    }

    #[test]
    fn the_column_softmax_is_the_softmax_of_each_column_bit_for_bit() {
        // 5 rows x 3 columns: signed zeros, large and tiny logits, a tie.
        let block = [0.0f64, 1000.0, -3.25, -0.0, 999.0, 1e-300, 0.0, 1000.0, 7.5, -1e3, -2.0, 7.5, 0.125, 0.0, -0.0];
        let mut columns = block;
        softmax_columns_in_place(&mut columns, 3);
        for c in 0..3 {
            let mut col: Vec<f64> = (0..5).map(|r| block[r * 3 + c]).collect();
            softmax_in_place(&mut col);
            for r in 0..5 {
                assert_eq!(columns[r * 3 + c].to_bits(), col[r].to_bits(), "row {r}, column {c}");
            }
        }
        // One column is the plain softmax; no columns leave the block as it was.
        let mut one = [0.5f64, -1.0, 2.0];
        softmax_columns_in_place(&mut one, 1);
        let mut plain = [0.5f64, -1.0, 2.0];
        softmax_in_place(&mut plain);
        assert_eq!(one, plain);
        assert!((plain.iter().sum::<f64>() - 1.0).abs() < 1e-15 && plain[2] > plain[0]);
    }

    #[test]
    fn log_sum_exp_matches_the_definition() {
        let xs = [0.5f64, -1.0, 2.0];
        let direct = xs.iter().map(|x| x.exp()).sum::<f64>().ln();
        assert!((log_sum_exp(xs.iter().copied()) - direct).abs() < 1e-14);
        assert!((log_sum_exp([800.0f64, 800.0]) - (800.0 + 2f64.ln())).abs() < 1e-12);
    }
}

/// A matrix operand: a slice with its row and column strides (in elements).
#[derive(Clone, Copy)]
pub struct View<'a> {
    /// The elements.
    pub data: &'a [f32],
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

impl<'a> View<'a> {
    /// A contiguous row-major `[rows, cols]` matrix.
    pub fn rows(data: &'a [f32], cols: usize) -> Self {
        View { data, rs: cols, cs: 1 }
    }

    /// The transpose of a contiguous row-major matrix with `cols` columns.
    pub fn t(data: &'a [f32], cols: usize) -> Self {
        View { data, rs: 1, cs: cols }
    }

    /// Panics unless an `m x n` matrix fits (a bug, never input-dependent: shapes are derived
    /// from a validated config).
    fn check(&self, m: usize, n: usize) {
        if m > 0 && n > 0 {
            let last = (m - 1) * self.rs + (n - 1) * self.cs;
            assert!(last < self.data.len(), "fast engine: operand of {m}x{n} does not fit its buffer");
        }
    }
}

/// The 95 % normal quantile, `z_{0.975}`.
const Z95: f64 = 1.959_963_984_540_054;

/// Wilson score interval at 95 % for `k` successes in `n` trials (`(0, 1)` for `n = 0`).
pub fn wilson95(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// `dst[m, n] = (acc ? dst : 0) + a[m, k] @ b[k, n]`, `dst` with row stride `dst_rs`.
#[allow(clippy::too_many_arguments)] // the BLAS shape: sizes, output, flag, two operands
pub fn gemm(m: usize, n: usize, k: usize, dst: &mut [f32], dst_rs: usize, acc: bool, a: View, b: View) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !acc {
            for i in 0..m {
                dst[i * dst_rs..i * dst_rs + n].fill(0.0);
            }
        }
        return;
    }
    a.check(m, k);
    b.check(k, n);
    assert!((m - 1) * dst_rs + n <= dst.len(), "fast engine: gemm output does not fit its buffer");
    // SAFETY: every index the kernel touches was bounds-checked above (row/col strides and
    // extents of all three operands); `dst` is exclusively borrowed and does not alias `a`, `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            acc,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}
