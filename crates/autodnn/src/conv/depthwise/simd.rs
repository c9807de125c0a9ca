//! The vector operations the kernels use, per instruction set.

/// One instruction set's vector of `L` f32 lanes, implemented for the crate's capability
/// tokens ([`crate::simd`]): the token proves the CPU has the set's features, so the
/// arithmetic is safe (and inlined into kernels compiled with those features). The
/// memory operations are `unsafe`: pointers must be valid for the lanes the mask enables.
/// Masked-off lanes are never accessed, so their addresses may lie outside any
/// allocation.
pub(super) trait Simd: crate::simd::Token {
    /// Lanes (at most 16).
    const L: usize;
    type V: Copy;
    fn zero(self) -> Self::V;
    fn splat(self, v: f32) -> Self::V;
    /// Lane l = p\[l\] where bit l of m is set, else 0.
    unsafe fn load(self, p: *const f32, m: u32) -> Self::V;
    /// Lane l = element 2l of the 2L from p, each read where its bit is set (bits of m0
    /// for elements 0..L, of m1 for L..2L), else 0.
    unsafe fn load_step2(self, p: *const f32, m0: u32, m1: u32) -> Self::V;
    /// Lane l = p\[l·step\] where bit l of m is set, else 0.
    #[inline(always)]
    unsafe fn load_strided(self, p: *const f32, step: isize, m: u32) -> Self::V {
        let mut a = [0f32; 16];
        for (l, v) in a.iter_mut().enumerate().take(Self::L) {
            if m >> l & 1 == 1 {
                // SAFETY: lane l is enabled: the caller's contract.
                *v = unsafe { *p.wrapping_offset(l as isize * step) };
            }
        }
        self.of_array(&a)
    }
    /// Lane l = p\[idx\[l\]\] where bit l of m is set, else 0.
    #[inline(always)]
    unsafe fn load_idx(self, p: *const f32, idx: &[isize; 16], m: u32) -> Self::V {
        let mut a = [0f32; 16];
        for (l, v) in a.iter_mut().enumerate().take(Self::L) {
            if m >> l & 1 == 1 {
                // SAFETY: lane l is enabled: the caller's contract.
                *v = unsafe { *p.wrapping_offset(idx[l]) };
            }
        }
        self.of_array(&a)
    }
    /// Lanes below L/2 as [`Simd::load`] from `lo`, the others from `hi` (lane l reads
    /// hi\[l − L/2\]); m holds the lanes of both halves.
    unsafe fn load_pair(self, lo: *const f32, hi: *const f32, m: u32) -> Self::V;
    /// Lanes below L/2 = elements 2l from `lo`, the others elements 2(l − L/2) from `hi`,
    /// each read where its bit of the L-element mask `em` is set, else 0.
    unsafe fn load_step2_pair(self, lo: *const f32, hi: *const f32, em: u32) -> Self::V;
    /// Stores lanes below L/2 at `lo`, the others at `hi` (lane l at hi\[l − L/2\]), where
    /// their bits of m are set.
    unsafe fn store_pair(self, lo: *mut f32, hi: *mut f32, v: Self::V, m: u32);
    /// Lanes below L/2 from a, the others from b.
    fn blend_hi(self, a: Self::V, b: Self::V) -> Self::V;
    /// The three stride-1 windows from `p`: lane l of window s is element l + s, read where
    /// bit l + s of `raw` (elements 0..L + 2) is set, else 0.
    #[inline(always)]
    unsafe fn windows3_s1(self, p: *const f32, raw: u32) -> [Self::V; 3] {
        let low = (1u32 << Self::L) - 1;
        // SAFETY: the caller's contract; window s reads elements s + l.
        unsafe {
            [
                self.load(p, raw & low),
                self.load(p.wrapping_add(1), raw >> 1 & low),
                self.load(p.wrapping_add(2), raw >> 2 & low),
            ]
        }
    }
    /// The three stride-2 windows from `p`: lane l of window s is element 2l + s, read
    /// where bit 2l + s of `raw` (elements 0..=2L) is set, else 0.
    #[inline(always)]
    unsafe fn windows3(self, p: *const f32, raw: u64) -> [Self::V; 3] {
        let low = (1u64 << Self::L) - 1;
        let m = |s: usize, hi: usize| (raw >> (s + hi * Self::L) & low) as u32;
        // SAFETY: the caller's contract; window s reads elements s + 2l.
        unsafe { std::array::from_fn(|s| self.load_step2(p.wrapping_add(s), m(s, 0), m(s, 1))) }
    }
    /// p\[l\] = lane l where bit l of m is set.
    unsafe fn store(self, p: *mut f32, v: Self::V, m: u32);
    /// `v`, computed here: the compiler may neither move its computation past this point
    /// (into the branches of the stores that use it) nor move loads across it. Pinning
    /// the accumulators after each input row keeps the compiler from hoisting every load
    /// of an unrolled kernel to its start, where they no longer fit in registers.
    #[inline(always)]
    fn pin(self, v: Self::V) -> Self::V {
        v
    }
    /// a · b + c (fused where the set has FMA).
    fn fma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    /// Lane-wise max, taking b where a is NaN (as `f32::max(a, b)` for a non-NaN b).
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    /// Lane-wise min, taking b where a is NaN.
    fn min(self, a: Self::V, b: Self::V) -> Self::V;
    /// The first L elements.
    fn of_array(self, a: &[f32; 16]) -> Self::V;
}

/// Portable Rust over lane arrays (no target-specific code), 8 lanes.
impl Simd for crate::simd::Scalar {
    const L: usize = 8;
    type V = [f32; 8];
    #[inline(always)]
    fn zero(self) -> Self::V {
        [0.0; 8]
    }
    #[inline(always)]
    fn splat(self, v: f32) -> Self::V {
        [v; 8]
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32, m: u32) -> Self::V {
        let mut v = [0.0; 8];
        if m & 0xff == 0xff {
            // SAFETY: all 8 lanes are enabled.
            unsafe { ptr::copy_nonoverlapping(p, v.as_mut_ptr(), 8) };
        } else {
            for (l, v) in v.iter_mut().enumerate() {
                if m >> l & 1 == 1 {
                    // SAFETY: lane l is enabled.
                    *v = unsafe { *p.wrapping_add(l) };
                }
            }
        }
        v
    }
    #[inline(always)]
    unsafe fn load_step2(self, p: *const f32, m0: u32, m1: u32) -> Self::V {
        let bits = m0 as u64 | (m1 as u64) << 8;
        let mut v = [0.0; 8];
        for (l, v) in v.iter_mut().enumerate() {
            if bits >> (2 * l) & 1 == 1 {
                // SAFETY: element 2l is enabled.
                *v = unsafe { *p.wrapping_add(2 * l) };
            }
        }
        v
    }
    #[inline(always)]
    unsafe fn load_pair(self, lo: *const f32, hi: *const f32, m: u32) -> Self::V {
        // SAFETY: the caller's contract.
        unsafe {
            self.blend_hi(
                self.load(lo, m & 0xf),
                self.load(hi.wrapping_sub(4), m & 0xf0),
            )
        }
    }
    #[inline(always)]
    unsafe fn load_step2_pair(self, lo: *const f32, hi: *const f32, em: u32) -> Self::V {
        // SAFETY: the caller's contract; elements 2l of the two halves are elements 0..8
        // of lo and of hi.
        unsafe {
            self.blend_hi(
                self.load_step2(lo, em, 0),
                self.load_step2(hi.wrapping_sub(8), 0, em),
            )
        }
    }
    #[inline(always)]
    unsafe fn store_pair(self, lo: *mut f32, hi: *mut f32, v: Self::V, m: u32) {
        // SAFETY: the caller's contract.
        unsafe {
            self.store(lo, v, m & 0xf);
            self.store(hi.wrapping_sub(4), v, m & 0xf0);
        }
    }
    #[inline(always)]
    fn blend_hi(self, a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| if l < 4 { a[l] } else { b[l] })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: Self::V, m: u32) {
        if m & 0xff == 0xff {
            // SAFETY: all 8 lanes are enabled.
            unsafe { ptr::copy_nonoverlapping(v.as_ptr(), p, 8) };
        } else {
            for (l, v) in v.iter().enumerate() {
                if m >> l & 1 == 1 {
                    // SAFETY: lane l is enabled.
                    unsafe { *p.wrapping_add(l) = *v };
                }
            }
        }
    }
    #[inline(always)]
    fn fma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        std::array::from_fn(|l| a[l] * b[l] + c[l])
    }
    #[inline(always)]
    fn mul(self, a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| a[l] * b[l])
    }
    #[inline(always)]
    fn add(self, a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| a[l] + b[l])
    }
    #[inline(always)]
    fn max(self, a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| if a[l] > b[l] { a[l] } else { b[l] })
    }
    #[inline(always)]
    fn min(self, a: Self::V, b: Self::V) -> Self::V {
        std::array::from_fn(|l| if a[l] < b[l] { a[l] } else { b[l] })
    }
    #[inline(always)]
    fn of_array(self, a: &[f32; 16]) -> Self::V {
        std::array::from_fn(|l| a[l])
    }
}

use std::ptr;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Simd;
    use crate::simd::{Avx2, Avx512};

    /// An empty `asm!` that takes and returns `v` in a register: a value the optimiser
    /// cannot see through, so the code computing it stays before it; as it may access
    /// memory (for all the compiler knows), loads stay on their side of it. Inlined into
    /// the AVX-512 kernels.
    ///
    /// # Safety
    /// AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn pin512(mut v: __m512) -> __m512 {
        // SAFETY: an empty template: nothing runs.
        unsafe {
            std::arch::asm!("/* {0} */", inout(zmm_reg) v, options(nostack, preserves_flags))
        };
        v
    }

    /// [`pin512`] for AVX2 kernels.
    ///
    /// # Safety
    /// AVX.
    #[target_feature(enable = "avx")]
    #[inline]
    unsafe fn pin256(mut v: __m256) -> __m256 {
        // SAFETY: an empty template: nothing runs.
        unsafe {
            std::arch::asm!("/* {0} */", inout(ymm_reg) v, options(nostack, preserves_flags))
        };
        v
    }

    /// Lanes of `m` as an AVX2 mask (all ones where enabled).
    ///
    /// # Safety
    /// AVX2.
    #[inline(always)]
    unsafe fn mask8(m: u32) -> __m256i {
        // SAFETY: AVX2 (the caller's contract).
        unsafe {
            let bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
            let v = _mm256_and_si256(_mm256_set1_epi32(m as i32), bits);
            _mm256_cmpeq_epi32(v, bits)
        }
    }

    // SAFETY (every method): the CPU has AVX2 and FMA (an Avx2 token exists); masked-off
    // lanes of vmaskmov are not accessed.
    impl Simd for Avx2 {
        const L: usize = 8;
        type V = __m256;
        #[inline(always)]
        fn zero(self) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_setzero_ps() }
        }
        #[inline(always)]
        fn splat(self, v: f32) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_set1_ps(v) }
        }
        #[inline(always)]
        unsafe fn load(self, p: *const f32, m: u32) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_maskload_ps(p, mask8(m)) }
        }
        #[inline(always)]
        unsafe fn load_step2(self, p: *const f32, m0: u32, m1: u32) -> __m256 {
            // SAFETY: see the impl.
            unsafe {
                let lo = self.load(p, m0);
                let hi = self.load(p.wrapping_add(8), m1);
                // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then 64-bit pairs in order 0 2 1 3.
                let even = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(
                    even,
                )))
            }
        }
        #[inline(always)]
        unsafe fn load_pair(self, lo: *const f32, hi: *const f32, m: u32) -> __m256 {
            // SAFETY: see the impl.
            unsafe {
                let a = self.load(lo, m & 0xf);
                let b = self.load(hi.wrapping_sub(4), m & 0xf0);
                _mm256_blend_ps::<0xf0>(a, b)
            }
        }
        #[inline(always)]
        unsafe fn load_step2_pair(self, lo: *const f32, hi: *const f32, em: u32) -> __m256 {
            // SAFETY: see the impl. Evens of (a, b) are [a0 a2 a4 a6 b0 b2 b4 b6].
            unsafe {
                let a = self.load(lo, em);
                let b = self.load(hi, em);
                let even = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(
                    even,
                )))
            }
        }
        #[inline(always)]
        unsafe fn store_pair(self, lo: *mut f32, hi: *mut f32, v: __m256, m: u32) {
            // SAFETY: see the impl.
            unsafe {
                self.store(lo, v, m & 0xf);
                self.store(hi.wrapping_sub(4), v, m & 0xf0);
            }
        }
        #[inline(always)]
        fn blend_hi(self, a: __m256, b: __m256) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_blend_ps::<0xf0>(a, b) }
        }
        #[inline(always)]
        fn pin(self, v: __m256) -> __m256 {
            // SAFETY: see the impl.
            unsafe { pin256(v) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32, v: __m256, m: u32) {
            // SAFETY: see the impl.
            unsafe {
                if m & 0xff == 0xff {
                    _mm256_storeu_ps(p, v)
                } else {
                    _mm256_maskstore_ps(p, mask8(m), v)
                }
            }
        }
        #[inline(always)]
        fn fma(self, a: __m256, b: __m256, c: __m256) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        fn mul(self, a: __m256, b: __m256) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_mul_ps(a, b) }
        }
        #[inline(always)]
        fn add(self, a: __m256, b: __m256) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_add_ps(a, b) }
        }
        #[inline(always)]
        fn max(self, a: __m256, b: __m256) -> __m256 {
            // SAFETY: see the impl. maxps returns the second operand when either is NaN.
            unsafe { _mm256_max_ps(a, b) }
        }
        #[inline(always)]
        fn min(self, a: __m256, b: __m256) -> __m256 {
            // SAFETY: see the impl.
            unsafe { _mm256_min_ps(a, b) }
        }
        #[inline(always)]
        fn of_array(self, a: &[f32; 16]) -> __m256 {
            // SAFETY: see the impl; a holds 16 elements.
            unsafe { _mm256_loadu_ps(a.as_ptr()) }
        }
    }

    // AVX-512 (F), 16 lanes.
    // SAFETY (every method): the CPU has AVX-512F (an Avx512 token exists); masked-off lanes
    // of AVX-512 masked loads and stores are not accessed.
    impl Simd for Avx512 {
        const L: usize = 16;
        type V = __m512;
        #[inline(always)]
        fn zero(self) -> __m512 {
            // SAFETY: see the impl.
            unsafe { _mm512_setzero_ps() }
        }
        #[inline(always)]
        fn splat(self, v: f32) -> __m512 {
            // SAFETY: see the impl.
            unsafe { _mm512_set1_ps(v) }
        }
        #[inline(always)]
        unsafe fn load(self, p: *const f32, m: u32) -> __m512 {
            // SAFETY: see the impl.
            unsafe { _mm512_maskz_loadu_ps(m as __mmask16, p) }
        }
        #[inline(always)]
        unsafe fn load_step2(self, p: *const f32, m0: u32, m1: u32) -> __m512 {
            // SAFETY: see the impl.
            unsafe {
                let evens =
                    _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
                let lo = _mm512_maskz_loadu_ps(m0 as __mmask16, p);
                let hi = _mm512_maskz_loadu_ps(m1 as __mmask16, p.wrapping_add(16));
                _mm512_permutex2var_ps(lo, evens, hi)
            }
        }
        #[inline(always)]
        unsafe fn windows3_s1(self, p: *const f32, raw: u32) -> [__m512; 3] {
            // SAFETY: see the impl. Elements 0..18: two loads, two lane shifts.
            unsafe {
                let a = _mm512_castps_si512(_mm512_maskz_loadu_ps(raw as __mmask16, p));
                let b = _mm512_castps_si512(_mm512_maskz_loadu_ps(
                    (raw >> 16) as __mmask16 & 3,
                    p.wrapping_add(16),
                ));
                [
                    _mm512_castsi512_ps(a),
                    _mm512_castsi512_ps(_mm512_alignr_epi32::<1>(b, a)),
                    _mm512_castsi512_ps(_mm512_alignr_epi32::<2>(b, a)),
                ]
            }
        }
        #[inline(always)]
        unsafe fn windows3(self, p: *const f32, raw: u64) -> [__m512; 3] {
            // SAFETY: see the impl. Elements 0..32 are two loads; element 32 (window 2's
            // lane 15) one masked lane of a third.
            unsafe {
                let ev =
                    _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
                let od =
                    _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
                let e2 =
                    _mm512_setr_epi32(2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 0);
                let a = _mm512_maskz_loadu_ps(raw as __mmask16, p);
                let b = _mm512_maskz_loadu_ps((raw >> 16) as __mmask16, p.wrapping_add(16));
                let w2 = _mm512_maskz_permutex2var_ps(0x7fff, a, e2, b);
                let last = ((raw >> 32) as __mmask16 & 1) << 15;
                [
                    _mm512_permutex2var_ps(a, ev, b),
                    _mm512_permutex2var_ps(a, od, b),
                    _mm512_mask_loadu_ps(w2, last, p.wrapping_add(17)),
                ]
            }
        }
        #[inline(always)]
        unsafe fn load_pair(self, lo: *const f32, hi: *const f32, m: u32) -> __m512 {
            // SAFETY: see the impl.
            unsafe {
                let a = _mm512_maskz_loadu_ps((m & 0xff) as __mmask16, lo);
                _mm512_mask_loadu_ps(a, (m & 0xff00) as __mmask16, hi.wrapping_sub(8))
            }
        }
        #[inline(always)]
        unsafe fn load_step2_pair(self, lo: *const f32, hi: *const f32, em: u32) -> __m512 {
            // SAFETY: see the impl. Lane l picks element 2l of (a, b): a's evens, then b's.
            unsafe {
                let evens =
                    _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
                let a = _mm512_maskz_loadu_ps(em as __mmask16, lo);
                let b = _mm512_maskz_loadu_ps(em as __mmask16, hi);
                _mm512_permutex2var_ps(a, evens, b)
            }
        }
        #[inline(always)]
        unsafe fn store_pair(self, lo: *mut f32, hi: *mut f32, v: __m512, m: u32) {
            // SAFETY: see the impl.
            unsafe {
                _mm512_mask_storeu_ps(lo, (m & 0xff) as __mmask16, v);
                _mm512_mask_storeu_ps(hi.wrapping_sub(8), (m & 0xff00) as __mmask16, v);
            }
        }
        #[inline(always)]
        fn blend_hi(self, a: __m512, b: __m512) -> __m512 {
            // SAFETY: see the impl.
            unsafe { _mm512_mask_mov_ps(a, 0xff00, b) }
        }
        #[inline(always)]
        fn pin(self, v: __m512) -> __m512 {
            // SAFETY: see the impl.
            unsafe { pin512(v) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32, v: __m512, m: u32) {
            // SAFETY: see the impl.
            unsafe { _mm512_mask_storeu_ps(p, m as __mmask16, v) }
        }
        #[inline(always)]
        fn fma(self, a: __m512, b: __m512, c: __m512) -> __m512 {
            // SAFETY: see the impl.
            unsafe { _mm512_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        fn mul(self, a: __m512, b: __m512) -> __m512 {
            // SAFETY: see the impl.
            unsafe { _mm512_mul_ps(a, b) }
        }
        #[inline(always)]
        fn add(self, a: __m512, b: __m512) -> __m512 {
            // SAFETY: see the impl.
            unsafe { _mm512_add_ps(a, b) }
        }
        #[inline(always)]
        fn max(self, a: __m512, b: __m512) -> __m512 {
            // SAFETY: see the impl. maxps returns the second operand when either is NaN.
            unsafe { _mm512_max_ps(a, b) }
        }
        #[inline(always)]
        fn min(self, a: __m512, b: __m512) -> __m512 {
            // SAFETY: see the impl.
            unsafe { _mm512_min_ps(a, b) }
        }
        #[inline(always)]
        fn of_array(self, a: &[f32; 16]) -> __m512 {
            // SAFETY: see the impl; a holds 16 elements.
            unsafe { _mm512_loadu_ps(a.as_ptr()) }
        }
    }
}
