//! Vocabulary geometry (theory/induction-model.md, eq. T-1): `N` token embeddings with inner
//! products `x.x' = kappa + 1{x = x'} + e`, `|e| <= eps`.
//!
//! * [`Vocabulary::exact`] builds `eps = 0` exactly (T-1a): `x_i = sqrt(kappa) u + e_i` in
//!   dimension `N + 1`, or, in dimension exactly `N`, the Cholesky factor of the Gram matrix
//!   `kappa 11^T + I` (which is positive definite of rank `N`, so no smaller dimension exists).
//! * [`Vocabulary::random`] builds `x_i = sqrt(kappa) u + g_i` with `g_i` random unit vectors
//!   orthogonal to `u` (T-1b) and reports the `eps` it actually achieved.

use crate::{Error, Result};
use nalgebra::{DMatrix, DVector};
use ndarray_rand::rand_distr::{Distribution, StandardNormal};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// A vocabulary: one embedding per column.
#[derive(Debug, Clone)]
pub struct Vocabulary {
    /// Embeddings, `d x N`; column `i` is token `x_i`.
    pub embeddings: DMatrix<f64>,
    /// The common component `kappa`.
    pub kappa: f64,
    /// The achieved `eps = max_{i,j} |x_i.x_j - kappa - 1{i=j}|` (0 up to rounding when exact).
    pub eps: f64,
}

fn check_common(n: usize, kappa: f64) -> Result<()> {
    if n < 2 {
        return Err(Error::invalid("vocab", format!("need N >= 2 tokens, got {n}")));
    }
    if !(kappa.is_finite() && kappa > 0.0) {
        return Err(Error::invalid("kappa", format!("must be finite and > 0, got {kappa}")));
    }
    Ok(())
}

impl Vocabulary {
    /// Exact construction for `eps = 0` (T-1a) in dimension `dim` (`None`: `N + 1`).
    ///
    /// Errors: `N < 2`, `kappa <= 0`, or `dim < N` (the Gram matrix has rank `N`).
    pub fn exact(n: usize, kappa: f64, dim: Option<usize>) -> Result<Self> {
        check_common(n, kappa)?;
        let d = dim.unwrap_or(n + 1);
        if d < n {
            return Err(Error::invalid(
                "dim",
                format!(
                    "an exact construction of {n} tokens needs dimension >= N = {n} \
                     (the Gram matrix kappa*11^T + I has rank N), got {d}"
                ),
            ));
        }
        let mut x = DMatrix::<f64>::zeros(d, n);
        if d > n {
            // x_i = sqrt(kappa) u + e_i with u = coordinate 0 and e_i = coordinate i + 1.
            for i in 0..n {
                x[(0, i)] = kappa.sqrt();
                x[(i + 1, i)] = 1.0;
            }
        } else {
            let gram = DMatrix::<f64>::from_fn(n, n, |i, j| kappa + if i == j { 1.0 } else { 0.0 });
            let chol = gram.cholesky().ok_or_else(|| Error::Numerical {
                what: "exact vocabulary".into(),
                reason: "Gram matrix not positive definite".into(),
            })?;
            // G = L L^T, so the columns of L^T have Gram matrix G.
            x = chol.l().transpose();
        }
        let mut v = Vocabulary { embeddings: x, kappa, eps: 0.0 };
        v.eps = v.max_deviation();
        Ok(v)
    }

    /// Random construction (T-1b) in dimension `dim >= 2`: `x_i = sqrt(kappa) u + g_i`, `g_i`
    /// uniform on the unit sphere of the `dim - 1` coordinates orthogonal to `u`. The field
    /// [`Vocabulary::eps`] holds the achieved `eps = max_{i != j} |g_i.g_j|`.
    pub fn random(n: usize, kappa: f64, dim: usize, seed: u64) -> Result<Self> {
        check_common(n, kappa)?;
        if dim < 2 {
            return Err(Error::invalid("dim", format!("random construction needs dim >= 2, got {dim}")));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut x = DMatrix::<f64>::zeros(dim, n);
        for i in 0..n {
            x[(0, i)] = kappa.sqrt();
            let mut g = DVector::<f64>::from_fn(dim - 1, |_, _| StandardNormal.sample(&mut rng));
            let norm = g.norm();
            if norm == 0.0 {
                return Err(Error::Numerical { what: "random vocabulary".into(), reason: "zero vector drawn".into() });
            }
            g /= norm;
            for k in 0..dim - 1 {
                x[(k + 1, i)] = g[k];
            }
        }
        let mut v = Vocabulary { embeddings: x, kappa, eps: 0.0 };
        v.eps = v.max_deviation();
        Ok(v)
    }

    /// A random construction whose dimension is chosen for a target `eps` by the
    /// Johnson-Lindenstrauss rate `d - 1 = ceil(4 ln N / eps^2)`; the achieved eps (which may
    /// exceed the target) is in [`Vocabulary::eps`].
    pub fn random_for_eps(n: usize, kappa: f64, target_eps: f64, seed: u64) -> Result<Self> {
        if !(target_eps.is_finite() && target_eps > 0.0) {
            return Err(Error::invalid(
                "eps",
                format!("target must be > 0 (use Vocabulary::exact for 0), got {target_eps}"),
            ));
        }
        let d = ((4.0 * (n.max(2) as f64).ln()) / (target_eps * target_eps)).ceil() as usize + 1;
        Self::random(n, kappa, d.max(2), seed)
    }

    /// Number of tokens `N`.
    pub fn len(&self) -> usize {
        self.embeddings.ncols()
    }

    /// Whether the vocabulary is empty (never, for a constructed one).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Embedding dimension `d`.
    pub fn dim(&self) -> usize {
        self.embeddings.nrows()
    }

    /// The Gram matrix `X^T X` (`N x N`).
    pub fn gram(&self) -> DMatrix<f64> {
        self.embeddings.tr_mul(&self.embeddings)
    }

    /// `max_{i,j} |x_i.x_j - kappa - 1{i=j}|`, computed from the Gram matrix.
    pub fn max_deviation(&self) -> f64 {
        let g = self.gram();
        let mut m = 0.0f64;
        for i in 0..g.nrows() {
            for j in 0..g.ncols() {
                let target = self.kappa + if i == j { 1.0 } else { 0.0 };
                m = m.max((g[(i, j)] - target).abs());
            }
        }
        m
    }
}
