//! The few vector operations the lane kernel needs, for `W` independent lanes: plain per-lane
//! arrays (any target), and AVX-512 and AVX2 registers (x86_64). Every operation is one IEEE
//! operation per lane, the same in every implementation (fused multiply-add rounded once,
//! max, clamp and the exponent-bit trick included, NaN cases too), so a lane's result does not depend on the implementation.
//!
//! The register implementations are only sound to use inside a function compiled with the
//! instruction set (`#[target_feature]`), after checking the CPU has it (`lanes::Isa`).

/// Operations on `W` lanes of `f64`.
pub(crate) trait Vector<const W: usize>: Copy {
    fn splat(x: f64) -> Self;
    fn load(a: &[f64; W]) -> Self;
    fn store(self, a: &mut [f64; W]);
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    /// Per lane `self * a + b` rounded once (`f64::mul_add`).
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// Per lane `if self > o { self } else { o }` (NaN in `self` gives `o`).
    fn max_gt(self, o: Self) -> Self;
    /// Per lane `f64::clamp(self, lo, hi)` (NaN stays NaN).
    fn clamp(self, lo: f64, hi: f64) -> Self;
    /// Per lane `f64::from_bits(self.to_bits().wrapping_add(1023) << 52)`.
    fn exponent_bits(self) -> Self;
}

/// Plain arrays, one scalar operation per lane (`f64::mul_add` is an instruction where the
/// function is compiled with FMA, a correctly rounded library call otherwise: the same bits).
#[derive(Clone, Copy)]
pub(crate) struct Lanes<const W: usize>(pub [f64; W]);

impl<const W: usize> Vector<W> for Lanes<W> {
    #[inline(always)]
    fn splat(x: f64) -> Self {
        Lanes([x; W])
    }
    #[inline(always)]
    fn load(a: &[f64; W]) -> Self {
        Lanes(*a)
    }
    #[inline(always)]
    fn store(self, a: &mut [f64; W]) {
        *a = self.0;
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Lanes(std::array::from_fn(|l| self.0[l] + o.0[l]))
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Lanes(std::array::from_fn(|l| self.0[l] - o.0[l]))
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        Lanes(std::array::from_fn(|l| self.0[l] * o.0[l]))
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        Lanes(std::array::from_fn(|l| self.0[l] / o.0[l]))
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|l| self.0[l].mul_add(a.0[l], b.0[l])))
    }
    #[inline(always)]
    fn max_gt(self, o: Self) -> Self {
        Lanes(std::array::from_fn(|l| if self.0[l] > o.0[l] { self.0[l] } else { o.0[l] }))
    }
    #[inline(always)]
    fn clamp(self, lo: f64, hi: f64) -> Self {
        Lanes(std::array::from_fn(|l| self.0[l].clamp(lo, hi)))
    }
    #[inline(always)]
    fn exponent_bits(self) -> Self {
        Lanes(std::array::from_fn(|l| f64::from_bits(self.0[l].to_bits().wrapping_add(1023) << 52)))
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2x2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use crate::theory::fast::simd::Vector;
    use std::arch::x86_64::*;

    /// One AVX-512 register of 8 doubles.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx512(__m512d);

    // SAFETY (every block below): these are used only inside functions compiled with AVX-512F
    // on a CPU that reports it (`lanes::Isa::available`); loads and stores go through
    // references to `[f64; 8]`, valid for 64 bytes (unaligned access).
    impl Vector<8> for Avx512 {
        #[inline(always)]
        fn splat(x: f64) -> Self {
            Avx512(unsafe { _mm512_set1_pd(x) })
        }
        #[inline(always)]
        fn load(a: &[f64; 8]) -> Self {
            Avx512(unsafe { _mm512_loadu_pd(a.as_ptr()) })
        }
        #[inline(always)]
        fn store(self, a: &mut [f64; 8]) {
            unsafe { _mm512_storeu_pd(a.as_mut_ptr(), self.0) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            Avx512(unsafe { _mm512_add_pd(self.0, o.0) })
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            Avx512(unsafe { _mm512_sub_pd(self.0, o.0) })
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            Avx512(unsafe { _mm512_mul_pd(self.0, o.0) })
        }
        #[inline(always)]
        fn div(self, o: Self) -> Self {
            Avx512(unsafe { _mm512_div_pd(self.0, o.0) })
        }
        #[inline(always)]
        fn mul_add(self, a: Self, b: Self) -> Self {
            Avx512(unsafe { _mm512_fmadd_pd(self.0, a.0, b.0) })
        }
        #[inline(always)]
        fn max_gt(self, o: Self) -> Self {
            // MAXPD a, b = a > b ? a : b (b when either is NaN).
            Avx512(unsafe { _mm512_max_pd(self.0, o.0) })
        }
        #[inline(always)]
        fn clamp(self, lo: f64, hi: f64) -> Self {
            // lo > x ? lo : x, then hi < x ? hi : x: NaN x falls through both.
            unsafe {
                let x = _mm512_max_pd(_mm512_set1_pd(lo), self.0);
                Avx512(_mm512_min_pd(_mm512_set1_pd(hi), x))
            }
        }
        #[inline(always)]
        fn exponent_bits(self) -> Self {
            unsafe {
                let bits = _mm512_add_epi64(_mm512_castpd_si512(self.0), _mm512_set1_epi64(1023));
                Avx512(_mm512_castsi512_pd(_mm512_slli_epi64::<52>(bits)))
            }
        }
    }

    /// Two AVX2 registers of 4 doubles (with FMA).
    #[derive(Clone, Copy)]
    pub(crate) struct Avx2x2([__m256d; 2]);

    impl Avx2x2 {
        #[inline(always)]
        fn map2(self, o: Self, f: impl Fn(__m256d, __m256d) -> __m256d) -> Self {
            Avx2x2([f(self.0[0], o.0[0]), f(self.0[1], o.0[1])])
        }
    }

    // SAFETY (every block below): used only inside functions compiled with AVX2 on a CPU
    // that reports it; loads and stores through references to `[f64; 8]` (two halves of 32
    // bytes each, unaligned access).
    impl Vector<8> for Avx2x2 {
        #[inline(always)]
        fn splat(x: f64) -> Self {
            let v = unsafe { _mm256_set1_pd(x) };
            Avx2x2([v, v])
        }
        #[inline(always)]
        fn load(a: &[f64; 8]) -> Self {
            unsafe { Avx2x2([_mm256_loadu_pd(a.as_ptr()), _mm256_loadu_pd(a.as_ptr().add(4))]) }
        }
        #[inline(always)]
        fn store(self, a: &mut [f64; 8]) {
            unsafe {
                _mm256_storeu_pd(a.as_mut_ptr(), self.0[0]);
                _mm256_storeu_pd(a.as_mut_ptr().add(4), self.0[1]);
            }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            self.map2(o, |a, b| unsafe { _mm256_add_pd(a, b) })
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            self.map2(o, |a, b| unsafe { _mm256_sub_pd(a, b) })
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            self.map2(o, |a, b| unsafe { _mm256_mul_pd(a, b) })
        }
        #[inline(always)]
        fn div(self, o: Self) -> Self {
            self.map2(o, |a, b| unsafe { _mm256_div_pd(a, b) })
        }
        #[inline(always)]
        fn mul_add(self, a: Self, b: Self) -> Self {
            let f = |i: usize| unsafe { _mm256_fmadd_pd(self.0[i], a.0[i], b.0[i]) };
            Avx2x2([f(0), f(1)])
        }
        #[inline(always)]
        fn max_gt(self, o: Self) -> Self {
            self.map2(o, |a, b| unsafe { _mm256_max_pd(a, b) })
        }
        #[inline(always)]
        fn clamp(self, lo: f64, hi: f64) -> Self {
            let (lo, hi) = (Self::splat(lo), Self::splat(hi));
            let x = lo.map2(self, |a, b| unsafe { _mm256_max_pd(a, b) });
            hi.map2(x, |a, b| unsafe { _mm256_min_pd(a, b) })
        }
        #[inline(always)]
        fn exponent_bits(self) -> Self {
            let f = |v: __m256d| unsafe {
                let bits = _mm256_add_epi64(_mm256_castpd_si256(v), _mm256_set1_epi64x(1023));
                _mm256_castsi256_pd(_mm256_slli_epi64::<52>(bits))
            };
            Avx2x2([f(self.0[0]), f(self.0[1])])
        }
    }
}
