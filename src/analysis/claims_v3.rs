//! The criteria of the claims the third pre-registration adds (`theory/phase-lab.md` §9.7,
//! issue 42): E11 (gate cycling), E12 (DeepSeek-V4's layout), E13 (DeepSeek-V4.1: even above
//! odd) and E14 (shifts flip answers). Their thresholds are the constants below, under the names
//! §9.7 gives them (a test holds §9's text to these values), and each claim's per-seed rule is
//! one function here; the ledger (`report::ledger::claims`, modules `e11`..`e14`) reads the
//! data, applies them and pools the seeds by `required_seeds(n)`.

use super::cycling::CycleResult;
use super::phase_test::required_seeds;
use crate::{Error, Result};

/// E12 (b): the largest knockout drop over the HCA layers is at most this times the largest
/// drop over the CSA layers ("HCA layers contribute little").
pub const E12_HCA_SHARE: f64 = 0.5;
/// E12 (b): a seed whose largest CSA-layer knockout drop is below this many percentage points is
/// not testable (no layer's knockout reaches retrieval).
pub const E12_MIN_CSA_DROP_PP: f64 = 10.0;
/// E12, E13: the stride the layouts' effect is tested at and their phases are folded by (the
/// CSA layers' rate).
pub const LAYOUT_STRIDE: usize = 4;
/// E12's arm: `dsv4-layout` with one KV head per layer.
pub const E12_PRESET: &str = "dsv4-layout";
/// E13's arm: `dsv41-layout` with one KV head per layer.
pub const E13_PRESET: &str = "dsv41-layout";
/// E11's arm.
pub const E11_PRESET: &str = "w8s8";
/// E14's parts: the paper-geometry arms, each set against full attention.
pub const E14_ARMS: [&str; 6] = ["w8s4", "w8s6", "w8s8", "w4s4", "w12s12", "dsv4-csa"];

/// Whether a rule met in `meeting` of `n` seeds holds: `n > 0` and at least `required_seeds(n)`
/// (§8.4, which §9.6 keeps).
pub fn holds_in_enough_seeds(meeting: usize, n: usize) -> bool {
    n > 0 && meeting >= required_seeds(n)
}

/// One seed's gate-cycling result as E11 reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct CyclingSeed {
    /// Cycle amounts `k` tested (the uncycled row left out).
    pub ks: Vec<usize>,
    /// Each `k`'s lag (`None`: a flat profile).
    pub lags: Vec<Option<usize>>,
    /// (a): the lag is non-zero for at least half of the `k`.
    pub shifts: bool,
    /// (b): for every `k` the uncycled model's weakest phase stays below the mean of the others.
    pub not_restored: bool,
}

impl CyclingSeed {
    /// Whether the seed meets E11's rule: (a) and (b).
    pub fn meets(&self) -> bool {
        self.shifts && self.not_restored
    }
}

/// E11's per-seed rule on a cycling experiment (§9.7): (a) the pattern shifts, the lag non-zero
/// (and defined) for at least half of the `k` other than 0; (b) the weakest phase is not
/// restored, under every such `k` its accuracy below the mean of the others. An experiment with
/// no `k` other than the uncycled one is refused.
pub fn e11_seed(c: &CycleResult) -> Result<CyclingSeed> {
    let rows: Vec<_> = c.rows.iter().filter(|r| r.k != 0).collect();
    if rows.is_empty() {
        return Err(Error::invalid("cycling", "no cycle amount k other than 0 was evaluated"));
    }
    let lags: Vec<Option<usize>> = rows.iter().map(|r| r.lag).collect();
    let moved = lags.iter().filter(|l| matches!(l, Some(l) if *l != 0)).count();
    Ok(CyclingSeed {
        ks: rows.iter().map(|r| r.k).collect(),
        shifts: 2 * moved >= rows.len(),
        not_restored: rows.iter().all(|r| r.weakest_accuracy < r.others_mean),
        lags,
    })
}

/// Whether layer `l` of `kernel` is an HCA layer for E12: one whose stride is above the CSA
/// layers' [`LAYOUT_STRIDE`], read from the layout and not from the layer's parity, so a model
/// whose layers share one kernel by mistake has no HCA layer and (b) cannot be judged. In
/// `dsv4-layout` these are the odd layers (§9.7: CSA, HCA16, CSA, HCA16).
pub fn is_hca_layer(kernel: &crate::kernel::spec::KernelSpec, l: usize) -> bool {
    kernel.layer(l).geometry.stride() > LAYOUT_STRIDE
}

/// One seed's knockouts as E12 (b) reads them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayoutSeed {
    /// The largest drop over the CSA layers, pp.
    pub csa_drop_pp: f64,
    /// The largest drop over the HCA layers, pp.
    pub hca_drop_pp: f64,
}

impl LayoutSeed {
    /// Whether the seed can be judged: its CSA drop reaches [`E12_MIN_CSA_DROP_PP`].
    pub fn testable(&self) -> bool {
        self.csa_drop_pp >= E12_MIN_CSA_DROP_PP
    }

    /// Whether the seed meets E12 (b): testable and the HCA drop at most [`E12_HCA_SHARE`] times
    /// the CSA drop.
    pub fn meets(&self) -> bool {
        self.testable() && self.hca_drop_pp <= E12_HCA_SHARE * self.csa_drop_pp
    }
}

/// E12 (b)'s quantities of one seed from its knockout rows `(layer, drop pp)` (several rows of
/// one layer: its largest) and whether layer `l` is an HCA layer. Needs a row of each kind.
pub fn e12_seed(rows: &[(usize, f64)], is_hca: impl Fn(usize) -> bool) -> Result<LayoutSeed> {
    let largest = |hca: bool| {
        rows.iter()
            .filter(|(l, _)| is_hca(*l) == hca)
            .map(|r| r.1)
            .fold(None, |m: Option<f64>, d| Some(m.map_or(d, |m| m.max(d))))
    };
    match (largest(false), largest(true)) {
        (Some(csa_drop_pp), Some(hca_drop_pp)) if csa_drop_pp.is_finite() && hca_drop_pp.is_finite() => {
            Ok(LayoutSeed { csa_drop_pp, hca_drop_pp })
        }
        _ => Err(Error::invalid("knockout map", "E12 needs finite drops of at least one CSA and one HCA layer")),
    }
}

/// E13's per-seed rule: every even phase's depth-adjusted accuracy above every odd phase's
/// (`adjusted[r]`: phase `r`). Needs an even and an odd phase, every value finite.
pub fn even_above_odd(adjusted: &[f64]) -> bool {
    if adjusted.len() < 2 || adjusted.iter().any(|v| !v.is_finite()) {
        return false;
    }
    let even = adjusted.iter().step_by(2).copied().fold(f64::INFINITY, f64::min);
    let odd = adjusted.iter().skip(1).step_by(2).copied().fold(f64::NEG_INFINITY, f64::max);
    even > odd
}

/// E14's part rule: the seed-level interval `(lo, hi)` of the arm's flip rate minus full
/// attention's lies above 0.
pub fn flips_more_than_full(lo: f64) -> bool {
    lo > 0.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::cycling::CycleRow;

    fn row(k: usize, lag: Option<usize>, weakest: f64, others: f64) -> CycleRow {
        CycleRow {
            k,
            groups: vec![],
            phases: vec![],
            lag,
            weakest_accuracy: weakest,
            others_mean: others,
            correct: vec![],
        }
    }

    fn cycle(rows: Vec<CycleRow>) -> CycleResult {
        CycleResult { layer: 1, heads: vec![0], window: 8, stride: 8, weakest_phase: 7, rows }
    }

    /// E11's rule met, and each half refused on its own near miss: the lag zero for more than
    /// half of the k, one k whose weakest phase reaches the others' mean.
    #[test]
    fn e11_needs_the_pattern_to_move_and_the_weak_phase_to_stay_weak() {
        let base = row(0, Some(0), 0.5, 0.9);
        let ok =
            cycle(vec![base.clone(), row(1, Some(1), 0.6, 0.9), row(2, Some(2), 0.5, 0.8), row(3, Some(0), 0.5, 0.9)]);
        let s = e11_seed(&ok).unwrap();
        assert!(s.shifts && s.not_restored && s.meets(), "{s:?}");
        assert_eq!(s.ks, vec![1, 2, 3]);
        let still =
            cycle(vec![base.clone(), row(1, Some(0), 0.5, 0.9), row(2, None, 0.5, 0.9), row(3, Some(3), 0.5, 0.9)]);
        assert!(!e11_seed(&still).unwrap().shifts, "one of three k moved");
        let restored = cycle(vec![base.clone(), row(1, Some(1), 0.5, 0.9), row(2, Some(2), 0.9, 0.9)]);
        let r = e11_seed(&restored).unwrap();
        assert!(r.shifts && !r.not_restored && !r.meets());
        assert!(e11_seed(&cycle(vec![base])).is_err());
    }

    /// E12 (b): CSA drop 40 pp and HCA 20 pp meets; HCA 20.1 does not; a CSA drop of 9.9 pp is
    /// not testable, whatever the HCA drop.
    #[test]
    fn e12_compares_the_largest_drops_and_needs_a_csa_drop_that_reaches_retrieval() {
        let odd = |l: usize| l % 2 == 1;
        let s = e12_seed(&[(0, 40.0), (1, 20.0), (2, 5.0), (3, 1.0)], odd).unwrap();
        assert_eq!(s, LayoutSeed { csa_drop_pp: 40.0, hca_drop_pp: 20.0 });
        assert!(s.testable() && s.meets());
        assert!(!e12_seed(&[(0, 40.0), (1, 20.1)], odd).unwrap().meets());
        let weak = e12_seed(&[(0, 9.9), (1, 0.0)], odd).unwrap();
        assert!(!weak.testable() && !weak.meets());
        assert!(e12_seed(&[(0, 40.0), (2, 20.0)], odd).is_err(), "no HCA layer");
        assert!(e12_seed(&[(0, f64::NAN), (1, 2.0)], odd).is_err());
    }

    /// The HCA layers of `dsv4-layout` are its odd ones, read from its kernels; a model whose
    /// layers share one kernel by mistake (`dsv4-csa` everywhere) has none, so E12 (b) refuses it.
    #[test]
    fn hca_layers_are_read_from_the_layout() {
        use crate::kernel::spec::KernelSpec;
        let layout = KernelSpec::preset(E12_PRESET).unwrap();
        assert_eq!((0..4).map(|l| is_hca_layer(&layout, l)).collect::<Vec<_>>(), vec![false, true, false, true]);
        let one = KernelSpec::preset("dsv4-csa").unwrap();
        assert!((0..4).all(|l| !is_hca_layer(&one, l)));
        let rows = [(0, 40.0), (1, 10.0), (2, 20.0), (3, 5.0)];
        assert!(e12_seed(&rows, |l| is_hca_layer(&layout, l)).unwrap().meets());
        assert!(e12_seed(&rows, |l| is_hca_layer(&one, l)).is_err());
    }

    #[test]
    fn e13_needs_every_even_phase_above_every_odd_one() {
        assert!(even_above_odd(&[0.9, 0.5, 0.8, 0.6]));
        assert!(!even_above_odd(&[0.9, 0.5, 0.8, 0.81]), "one odd phase above one even phase");
        assert!(!even_above_odd(&[0.9, 0.5, 0.6, 0.6]), "a tie is not above");
        assert!(!even_above_odd(&[0.9]));
        assert!(!even_above_odd(&[0.9, f64::NAN]));
        assert!(holds_in_enough_seeds(3, 4) && !holds_in_enough_seeds(2, 4) && !holds_in_enough_seeds(0, 0));
        assert!(holds_in_enough_seeds(6, 8) && !holds_in_enough_seeds(5, 8));
        assert!(flips_more_than_full(0.001) && !flips_more_than_full(0.0));
    }
}
