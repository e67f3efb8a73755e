//! The binomial logistic log-likelihood and its link: `softplus`, `sigmoid` and the
//! log-likelihood of a design at given coefficients.

use nalgebra::{DMatrix, DVector};

pub(super) fn softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

pub(super) fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

pub(super) fn loglik(x: &DMatrix<f64>, beta: &DVector<f64>, n: &[f64], y: &[f64]) -> (f64, DVector<f64>) {
    let eta = x * beta;
    let ll = eta.iter().zip(n).zip(y).map(|((&e, &n), &y)| y * e - n * softplus(e)).sum();
    (ll, eta)
}
