//! Phase statistics of per-sample retrieval results (`theory/phase-lab.md` §3): per residue group
//! accuracy with Wilson 95 % intervals, the max phase gap, accuracy folded by phase, a period
//! estimate over the divisors of `M`, a chi-square test of independence between group and
//! correctness, and a seeded permutation test.
//!
//! **Period estimate.** For each proper divisor `p` of `M`, the group accuracies `acc[rho]` are
//! modelled as a function of `rho mod p` (a one-way layout with `p` folds of `M/p` groups). The
//! F statistic `F = (SS_between / (p-1)) / (SS_within / (M-p))` has `(p-1, M-p)` degrees of
//! freedom under "no dependence on `rho mod p`". The estimate is the divisor with the smallest
//! p-value of that F test; the runner-up is the next smallest; the confidence is the p-value
//! itself (a period is *declared* only when it is below `alpha`). Smaller divisors of a true
//! period fit worse, multiples fit as well but spend more degrees of freedom, so the true period
//! wins. `p = M` is excluded (it always fits perfectly); `p = 1` is the flat model.
//!
//! **The corrected period scan** ([`period_scan`], issue 17). Taking the smallest of the six
//! F-test p-values over the divisors of 24 declares a period in about 5 % of flat profiles at a
//! nominal 1 %. The scan therefore calibrates that smallest p-value by permutation: correctness is
//! shuffled across samples (group sizes kept) and the corrected p-value is the fraction of
//! shuffles whose smallest candidate p-value is at least as small. It is exact under "no
//! dependence on the group" at any count, the ceiling included. [`period_stability`] gives the
//! fraction of stratified bootstrap resamples whose best candidate is the same period. The scan
//! is exploratory; the pre-registered test is [`super::phase_test`].
//!
//! **Gaps** ([`gap_summary`]): the max gap with a stratified-bootstrap percentile interval, its
//! noise floor (the 95th percentile of the gap over permutations: what the gap reaches with no
//! dependence at these counts) and its permutation p-value. **p-values** print through
//! [`PValue`] / [`format_p`]: a resampled p-value at its floor prints as `< 1/(rounds+1)`.

mod difference;
mod groups;
mod interval;
pub mod non_finite;
mod period;
mod permutation;
mod power;
mod resample;
mod seed_level;

pub use difference::accuracy_difference;
pub use groups::{fold_by_phase, group_accuracies, max_gap_pp, GroupAccuracy};
pub use interval::{quantile_sorted, BootInterval, Magnitude};
pub use period::{chi_square_independence, estimate_period, PeriodEstimate, PeriodFit};
pub use permutation::{format_p, permutation_test, permutation_test_stopping, PValue};
pub use power::*;
pub use resample::*;
pub use seed_level::*;
