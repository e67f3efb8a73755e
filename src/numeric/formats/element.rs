//! The element formats (OCP FP8 E4M3 "fn", FP4 E2M1) and the block scales stored beside them:
//! rounding to the nearest element, ties to even, saturating at the largest finite value.

use serde::{Deserialize, Serialize};

/// An element format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Element {
    /// OCP FP8 E4M3 ("fn"): 4 exponent bits (bias 7), 3 mantissa bits, subnormals, no
    /// infinities, largest finite 448 (`1.75 * 2^8`).
    E4m3,
    /// OCP FP4 E2M1: 2 exponent bits (bias 1), 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
    E2m1,
}

impl Element {
    /// Mantissa bits.
    fn mantissa_bits(self) -> i32 {
        match self {
            Element::E4m3 => 3,
            Element::E2m1 => 1,
        }
    }

    /// Exponent of the smallest normal number (`1 - bias`); below it the spacing is constant
    /// (subnormals).
    fn min_exponent(self) -> i32 {
        match self {
            Element::E4m3 => -6,
            Element::E2m1 => 0,
        }
    }

    /// Exponent of the largest normal binade (`emax` of the OCP MX spec: 8 for E4M3, 2 for E2M1).
    pub fn emax(self) -> i32 {
        match self {
            Element::E4m3 => 8,
            Element::E2m1 => 2,
        }
    }

    /// The largest finite value (448 for E4M3, 6 for E2M1).
    pub fn max(self) -> f64 {
        match self {
            Element::E4m3 => 448.0,
            Element::E2m1 => 6.0,
        }
    }

    /// The spacing of the element grid at magnitude `|x|` (the quantum of its binade; the
    /// subnormal spacing below the smallest normal).
    pub fn spacing(self, x: f64) -> f64 {
        let e = if x == 0.0 { self.min_exponent() } else { (x.abs().log2().floor() as i32).max(self.min_exponent()) };
        2f64.powi(e.min(self.emax()) - self.mantissa_bits())
    }

    /// `x` rounded to the nearest element (ties to even), saturating at `+-max` (NaN stays NaN).
    pub fn round(self, x: f64) -> f64 {
        if x.is_nan() {
            return x;
        }
        let a = x.abs().min(self.max() * 2.0);
        let q = self.spacing(a);
        let r = (a / q).round_ties_even() * q;
        r.min(self.max()).copysign(x)
    }

    /// Whether `x` is an element exactly.
    pub fn holds(self, x: f64) -> bool {
        x.is_finite() && x.abs() <= self.max() && self.round(x) == x
    }
}

/// How a block's scale is chosen from its largest magnitude `a` (`E` the element's maximum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleKind {
    /// `s = a / E` in f32.
    F32,
    /// `s = 2^ceil(log2(a / E))`: the smallest power of two with `a / s <= E` (DeepSeek's
    /// "ue8m0" scales, rounded up: no element saturates).
    Pow2,
    /// OCP MX's shared E8M0 scale: `s = 2^(floor(log2 a) - emax)`; elements above `E` saturate.
    E8m0,
    /// `s = a / E` rounded to the nearest E4M3 (NVFP4-style block scales of FP4).
    E4m3,
}

impl ScaleKind {
    /// The scale of a block whose largest magnitude is `a` (1 for an all-zero block).
    pub fn choose(self, a: f64, element: Element) -> f64 {
        if a == 0.0 || !a.is_finite() {
            return 1.0;
        }
        match self {
            ScaleKind::F32 => (a / element.max()) as f32 as f64,
            ScaleKind::Pow2 => {
                let mut k = (a / element.max()).log2().ceil() as i32;
                // log2 rounding can be off by one at exact powers of two.
                while a / 2f64.powi(k) > element.max() {
                    k += 1;
                }
                while k > -1074 && a / 2f64.powi(k - 1) <= element.max() {
                    k -= 1;
                }
                2f64.powi(k)
            }
            ScaleKind::E8m0 => 2f64.powi((a.log2().floor() as i32 - element.emax()).clamp(-127, 127)),
            ScaleKind::E4m3 => {
                let s = Element::E4m3.round(a / element.max());
                if s > 0.0 {
                    s
                } else {
                    Element::E4m3.spacing(0.0)
                }
            }
        }
    }

    /// Whether `s` is a value this scale kind can store.
    pub(super) fn holds(self, s: f64) -> bool {
        match self {
            ScaleKind::F32 => s > 0.0 && s as f32 as f64 == s,
            ScaleKind::Pow2 | ScaleKind::E8m0 => s > 0.0 && s.log2().fract() == 0.0,
            ScaleKind::E4m3 => s > 0.0 && Element::E4m3.holds(s),
        }
    }
}

/// Rounds to bf16 (round to nearest even) and back.
pub(super) fn bf16(x: f64) -> f64 {
    half::bf16::from_f64(x).to_f64()
}

/// Every non-negative value of an element format, ascending.
pub fn element_values(element: Element) -> Vec<f64> {
    let q0 = element.spacing(0.0);
    let mut out = vec![0.0];
    let mut x = q0;
    while x <= element.max() {
        out.push(x);
        x += element.spacing(x);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2m1_is_the_ocp_value_set() {
        assert_eq!(element_values(Element::E2m1), [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        // Round to nearest, ties to even, saturating at 6.
        for (x, want) in [
            (0.24, 0.0),
            (0.25, 0.0),
            (0.26, 0.5),
            (0.75, 1.0),
            (1.25, 1.0),
            (2.5, 2.0),
            (3.5, 4.0),
            (5.0, 4.0),
            (5.1, 6.0),
            (7.0, 6.0),
            (1e9, 6.0),
            (-2.6, -3.0),
        ] {
            assert_eq!(Element::E2m1.round(x), want, "{x}");
        }
    }

    #[test]
    fn e4m3_follows_the_fn_definition() {
        let v = element_values(Element::E4m3);
        // 8 subnormals (0 and 7 nonzero: k * 2^-9) then 15 binades of 8 (exponents -6..=8), the
        // last one without its top value (S.1111.111 is NaN in the fn variant): 127 values.
        assert_eq!(v.len(), 127);
        assert_eq!(v[1], 2f64.powi(-9));
        assert_eq!(*v.last().unwrap(), 448.0);
        assert!(v.contains(&416.0) && !v.contains(&480.0));
        // No infinities: everything above 448 saturates.
        assert_eq!(Element::E4m3.round(1e300), 448.0);
        assert_eq!(Element::E4m3.round(-500.0), -448.0);
        assert_eq!(Element::E4m3.round(464.0), 448.0);
        // Ties to even in a binade of spacing 2^(e-3): 1.0625 is halfway between 1 and 1.125.
        assert_eq!(Element::E4m3.round(1.0625), 1.0);
        assert_eq!(Element::E4m3.round(1.1875), 1.25);
        // Every element rounds to itself, and halfway points to a neighbour.
        for w in v.windows(2) {
            assert_eq!(Element::E4m3.round(w[0]), w[0]);
            let mid = 0.5 * (w[0] + w[1]);
            assert!([w[0], w[1]].contains(&Element::E4m3.round(mid)));
        }
    }

    #[test]
    fn scales_follow_their_definitions() {
        // pow2: the smallest power of two that brings the maximum within 448.
        assert_eq!(ScaleKind::Pow2.choose(448.0, Element::E4m3), 1.0);
        assert_eq!(ScaleKind::Pow2.choose(449.0, Element::E4m3), 2.0);
        assert_eq!(ScaleKind::Pow2.choose(1.0, Element::E4m3), 2f64.powi(-8));
        // OCP MX E8M0: 2^(floor(log2 a) - emax).
        assert_eq!(ScaleKind::E8m0.choose(1.0, Element::E4m3), 2f64.powi(-8));
        assert_eq!(ScaleKind::E8m0.choose(500.0, Element::E4m3), 1.0); // 500 saturates to 448
        assert_eq!(ScaleKind::E8m0.choose(512.0, Element::E4m3), 2.0);
        assert_eq!(ScaleKind::E8m0.choose(6.0, Element::E2m1), 1.0);
        // NVFP4-style E4M3 scale of amax / 6, and f32.
        assert_eq!(ScaleKind::E4m3.choose(6.0, Element::E2m1), 1.0);
        assert_eq!(ScaleKind::E4m3.choose(7.0, Element::E2m1), Element::E4m3.round(7.0 / 6.0));
        assert_eq!(ScaleKind::F32.choose(3.0, Element::E2m1), 0.5);
        assert_eq!(ScaleKind::Pow2.choose(0.0, Element::E4m3), 1.0);
    }
}
