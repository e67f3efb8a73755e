//! The period estimate over the divisors of `M` (one F test per candidate period) and the
//! chi-square test of independence between group and correctness.

use super::groups::GroupAccuracy;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ChiSquared, ContinuousCDF, FisherSnedecor};

/// The F test of one candidate period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeriodFit {
    /// The candidate period `p` (a proper divisor of `M`, at least 2).
    pub period: usize,
    /// Fraction of the between-group variance explained by folding modulo `p`.
    pub explained: f64,
    /// The F statistic.
    #[serde(with = "super::non_finite")]
    pub f: f64,
    /// Its p-value (small: accuracy depends on `rho mod p`).
    pub p_value: f64,
}

/// The period estimate: best and runner-up candidates, and whether the best is significant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeriodEstimate {
    /// Every candidate, best first.
    pub candidates: Vec<PeriodFit>,
    /// The significance level used to declare a period.
    pub alpha: f64,
    /// The estimated period, if the best candidate's p-value is below `alpha`.
    pub period: Option<usize>,
}

impl PeriodEstimate {
    /// The best candidate.
    pub fn best(&self) -> Option<&PeriodFit> {
        self.candidates.first()
    }

    /// The runner-up candidate.
    pub fn runner_up(&self) -> Option<&PeriodFit> {
        self.candidates.get(1)
    }
}

/// Estimates the period of group accuracies `acc[0..M]` (see the module doc). Needs every
/// group non-empty and `M >= 4`.
pub fn estimate_period(groups: &[GroupAccuracy], alpha: f64) -> Result<PeriodEstimate> {
    let m = groups.len();
    if m < 4 {
        return Err(Error::invalid("residue modulus M", format!("needs at least 4 groups, got {m}")));
    }
    if let Some(g) = groups.iter().find(|g| g.n == 0) {
        return Err(Error::invalid("samples", format!("residue group {} has no samples", g.group)));
    }
    if !(alpha > 0.0 && alpha < 1.0) {
        return Err(Error::invalid("alpha", format!("must be in (0, 1), got {alpha}")));
    }
    let acc: Vec<f64> = groups.iter().map(|g| g.accuracy).collect();
    let mean = acc.iter().sum::<f64>() / m as f64;
    let ss_total: f64 = acc.iter().map(|a| (a - mean).powi(2)).sum();
    let mut candidates = Vec::new();
    for p in (2..m).filter(|p| m.is_multiple_of(*p)) {
        let mut fold_mean = vec![0.0; p];
        for (rho, a) in acc.iter().enumerate() {
            fold_mean[rho % p] += a / (m / p) as f64;
        }
        let ss_within: f64 = acc.iter().enumerate().map(|(rho, a)| (a - fold_mean[rho % p]).powi(2)).sum();
        let ss_between = ss_total - ss_within;
        let (df1, df2) = ((p - 1) as f64, (m - p) as f64);
        let (f, p_value) = if ss_total <= 1e-15 {
            (0.0, 1.0) // perfectly flat: no period
        } else if ss_within <= 1e-15 * ss_total {
            (f64::INFINITY, 0.0)
        } else {
            let f = (ss_between / df1) / (ss_within / df2);
            let dist = FisherSnedecor::new(df1, df2)
                .map_err(|e| Error::Numerical { what: "F distribution".into(), reason: e.to_string() })?;
            (f, dist.sf(f))
        };
        let explained = if ss_total > 0.0 { ss_between / ss_total } else { 0.0 };
        candidates.push(PeriodFit { period: p, explained, f, p_value });
    }
    // Smallest p-value first; ties (e.g. exact fits) go to the smaller period.
    candidates.sort_by(|a, b| a.p_value.total_cmp(&b.p_value).then(a.period.cmp(&b.period)));
    let period = candidates.first().filter(|c| c.p_value < alpha).map(|c| c.period);
    Ok(PeriodEstimate { candidates, alpha, period })
}

/// Chi-square test of independence between residue group and correctness (groups with no
/// samples are dropped). Returns `(statistic, degrees of freedom, p-value)`; a p-value of 1
/// when every sample is correct or every sample is wrong.
pub fn chi_square_independence(groups: &[GroupAccuracy]) -> Result<(f64, usize, f64)> {
    let used: Vec<&GroupAccuracy> = groups.iter().filter(|g| g.n > 0).collect();
    let total: usize = used.iter().map(|g| g.n).sum();
    let correct: usize = used.iter().map(|g| g.correct).sum();
    if used.len() < 2 || correct == 0 || correct == total {
        return Ok((0.0, used.len().saturating_sub(1), 1.0));
    }
    let rate = correct as f64 / total as f64;
    let mut stat = 0.0;
    for g in &used {
        let n = g.n as f64;
        let (e1, e0) = (n * rate, n * (1.0 - rate));
        let (o1, o0) = (g.correct as f64, n - g.correct as f64);
        stat += (o1 - e1).powi(2) / e1 + (o0 - e0).powi(2) / e0;
    }
    let df = used.len() - 1;
    let dist = ChiSquared::new(df as f64)
        .map_err(|e| Error::Numerical { what: "chi-square distribution".into(), reason: e.to_string() })?;
    Ok((stat, df, dist.sf(stat)))
}
