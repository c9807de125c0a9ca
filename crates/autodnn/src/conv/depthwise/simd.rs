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
    unsafe fn load_step2<E: Elem<Self>>(self, p: *const E, m0: u32, m1: u32) -> Self::V;
    /// Lane l = p\[l·step\] where bit l of m is set, else 0.
    #[inline(always)]
    unsafe fn load_strided<E: Elem<Self>>(self, p: *const E, step: isize, m: u32) -> Self::V {
        let mut a = [0f32; 16];
        for (l, v) in a.iter_mut().enumerate().take(Self::L) {
            if m >> l & 1 == 1 {
                // SAFETY: lane l is enabled: the caller's contract.
                *v = unsafe { *p.wrapping_offset(l as isize * step) }.to_f32();
            }
        }
        self.of_array(&a)
    }
    /// Lane l = p\[idx\[l\]\] where bit l of m is set, else 0.
    #[inline(always)]
    unsafe fn load_idx<E: Elem<Self>>(self, p: *const E, idx: &[isize; 16], m: u32) -> Self::V {
        let mut a = [0f32; 16];
        for (l, v) in a.iter_mut().enumerate().take(Self::L) {
            if m >> l & 1 == 1 {
                // SAFETY: lane l is enabled: the caller's contract.
                *v = unsafe { *p.wrapping_offset(idx[l]) }.to_f32();
            }
        }
        self.of_array(&a)
    }
    /// Lanes below L/2 as [`Simd::load`] from `lo`, the others from `hi` (lane l reads
    /// hi\[l − L/2\]); m holds the lanes of both halves.
    unsafe fn load_pair<E: Elem<Self>>(self, lo: *const E, hi: *const E, m: u32) -> Self::V;
    /// Lanes below L/2 = elements 2l from `lo`, the others elements 2(l − L/2) from `hi`,
    /// each read where its bit of the L-element mask `em` is set, else 0.
    unsafe fn load_step2_pair<E: Elem<Self>>(self, lo: *const E, hi: *const E, em: u32) -> Self::V;
    /// Stores lanes below L/2 at `lo`, the others at `hi` (lane l at hi\[l − L/2\]), where
    /// their bits of m are set.
    unsafe fn store_pair<E: Elem<Self>>(self, lo: *mut E, hi: *mut E, v: Self::V, m: u32);
    /// Lanes below L/2 from a, the others from b.
    fn blend_hi(self, a: Self::V, b: Self::V) -> Self::V;
    /// The three stride-1 windows from `p`: lane l of window s is element l + s, read where
    /// bit l + s of `raw` (elements 0..L + 2) is set, else 0.
    #[inline(always)]
    unsafe fn windows3_s1<E: Elem<Self>>(self, p: *const E, raw: u32) -> [Self::V; 3] {
        let low = (1u32 << Self::L) - 1;
        // SAFETY: the caller's contract; window s reads elements s + l.
        unsafe {
            [
                E::load(self, p, raw & low),
                E::load(self, p.wrapping_add(1), raw >> 1 & low),
                E::load(self, p.wrapping_add(2), raw >> 2 & low),
            ]
        }
    }
    /// The three stride-2 windows from `p`: lane l of window s is element 2l + s, read
    /// where bit 2l + s of `raw` (elements 0..=2L) is set, else 0.
    #[inline(always)]
    unsafe fn windows3<E: Elem<Self>>(self, p: *const E, raw: u64) -> [Self::V; 3] {
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

/// An element type of x and y in memory: lanes are widened to f32 on load (exactly) and
/// rounded once on store (to nearest even), so that a kernel over reduced tensors sums in f32
/// exactly as over their widened copies. f32 on every instruction set; bf16 and f16 on
/// AVX-512 (their masked 16-bit accesses need AVX512-BW and VL: kernels over them are
/// compiled with those features and run only where the CPU has them).
pub(super) trait Elem<S: Simd>: Copy + Send + Sync + 'static {
    /// Lane l = p\[l\] widened, where bit l of m is set, else 0.
    ///
    /// # Safety
    /// The enabled lanes are readable; for bf16 and f16, the CPU has AVX512-BW and VL.
    unsafe fn load(s: S, p: *const Self, m: u32) -> S::V;
    /// p\[l\] = lane l rounded, where bit l of m is set.
    ///
    /// # Safety
    /// The enabled lanes are writable; for bf16 and f16, the CPU has AVX512-BW and VL.
    unsafe fn store(s: S, p: *mut Self, v: S::V, m: u32);
    /// One element, widened.
    fn to_f32(self) -> f32;
    /// The output as f32 when this type is f32 (the frames apply the activations that
    /// kernels leave to them only there).
    fn as_f32<'b, 'c>(out: &'b SharedOut<'c, Self>) -> Option<&'b SharedOut<'c, f32>> {
        let _ = out;
        None
    }
    /// `p` as an f32 pointer when this type is f32 (lets a kernel keep f32's merging loads,
    /// one instruction where other types load and blend).
    #[inline(always)]
    fn f32_ptr(p: *const Self) -> Option<*const f32> {
        let _ = p;
        None
    }
}

impl<S: Simd> Elem<S> for f32 {
    #[inline(always)]
    unsafe fn load(s: S, p: *const f32, m: u32) -> S::V {
        // SAFETY: the caller's contract.
        unsafe { s.load(p, m) }
    }
    #[inline(always)]
    unsafe fn store(s: S, p: *mut f32, v: S::V, m: u32) {
        // SAFETY: the caller's contract.
        unsafe { s.store(p, v, m) }
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    fn as_f32<'b, 'c>(out: &'b SharedOut<'c, f32>) -> Option<&'b SharedOut<'c, f32>> {
        Some(out)
    }
    #[inline(always)]
    fn f32_ptr(p: *const f32) -> Option<*const f32> {
        Some(p)
    }
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
    unsafe fn load_step2<E: Elem<Self>>(self, p: *const E, m0: u32, m1: u32) -> Self::V {
        let bits = m0 as u64 | (m1 as u64) << 8;
        let mut v = [0.0; 8];
        for (l, v) in v.iter_mut().enumerate() {
            if bits >> (2 * l) & 1 == 1 {
                // SAFETY: element 2l is enabled.
                *v = unsafe { *p.wrapping_add(2 * l) }.to_f32();
            }
        }
        v
    }
    #[inline(always)]
    unsafe fn load_pair<E: Elem<Self>>(self, lo: *const E, hi: *const E, m: u32) -> Self::V {
        // SAFETY: the caller's contract.
        unsafe {
            self.blend_hi(
                E::load(self, lo, m & 0xf),
                E::load(self, hi.wrapping_sub(4), m & 0xf0),
            )
        }
    }
    #[inline(always)]
    unsafe fn load_step2_pair<E: Elem<Self>>(self, lo: *const E, hi: *const E, em: u32) -> Self::V {
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
    unsafe fn store_pair<E: Elem<Self>>(self, lo: *mut E, hi: *mut E, v: Self::V, m: u32) {
        // SAFETY: the caller's contract.
        unsafe {
            E::store(self, lo, v, m & 0xf);
            E::store(self, hi.wrapping_sub(4), v, m & 0xf0);
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

use crate::runtime::parallel::SharedOut;

#[cfg(target_arch = "x86_64")]
pub(super) use x86::Bf16Cvt;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Elem, Simd};
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
        unsafe fn load_step2<E: Elem<Self>>(self, p: *const E, m0: u32, m1: u32) -> __m256 {
            // SAFETY: see the impl.
            unsafe {
                let lo = E::load(self, p, m0);
                let hi = E::load(self, p.wrapping_add(8), m1);
                // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then 64-bit pairs in order 0 2 1 3.
                let even = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(
                    even,
                )))
            }
        }
        #[inline(always)]
        unsafe fn load_pair<E: Elem<Self>>(self, lo: *const E, hi: *const E, m: u32) -> __m256 {
            // SAFETY: see the impl.
            unsafe {
                let a = E::load(self, lo, m & 0xf);
                let b = E::load(self, hi.wrapping_sub(4), m & 0xf0);
                _mm256_blend_ps::<0xf0>(a, b)
            }
        }
        #[inline(always)]
        unsafe fn load_step2_pair<E: Elem<Self>>(
            self,
            lo: *const E,
            hi: *const E,
            em: u32,
        ) -> __m256 {
            // SAFETY: see the impl. Evens of (a, b) are [a0 a2 a4 a6 b0 b2 b4 b6].
            unsafe {
                let a = E::load(self, lo, em);
                let b = E::load(self, hi, em);
                let even = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
                _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(
                    even,
                )))
            }
        }
        #[inline(always)]
        unsafe fn store_pair<E: Elem<Self>>(self, lo: *mut E, hi: *mut E, v: __m256, m: u32) {
            // SAFETY: see the impl.
            unsafe {
                E::store(self, lo, v, m & 0xf);
                E::store(self, hi.wrapping_sub(4), v, m & 0xf0);
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
        unsafe fn load_step2<E: Elem<Self>>(self, p: *const E, m0: u32, m1: u32) -> __m512 {
            // SAFETY: see the impl.
            unsafe {
                let evens =
                    _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
                let lo = E::load(self, p, m0);
                let hi = E::load(self, p.wrapping_add(16), m1);
                _mm512_permutex2var_ps(lo, evens, hi)
            }
        }
        #[inline(always)]
        unsafe fn windows3_s1<E: Elem<Self>>(self, p: *const E, raw: u32) -> [__m512; 3] {
            // SAFETY: see the impl. Elements 0..18: two loads, two lane shifts.
            unsafe {
                let a = _mm512_castps_si512(E::load(self, p, raw & 0xffff));
                let b = _mm512_castps_si512(E::load(self, p.wrapping_add(16), raw >> 16 & 3));
                [
                    _mm512_castsi512_ps(a),
                    _mm512_castsi512_ps(_mm512_alignr_epi32::<1>(b, a)),
                    _mm512_castsi512_ps(_mm512_alignr_epi32::<2>(b, a)),
                ]
            }
        }
        #[inline(always)]
        unsafe fn windows3<E: Elem<Self>>(self, p: *const E, raw: u64) -> [__m512; 3] {
            // SAFETY: see the impl. Elements 0..32 are two loads; element 32 (window 2's
            // lane 15) one masked lane of a third.
            unsafe {
                let ev =
                    _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
                let od =
                    _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
                let e2 =
                    _mm512_setr_epi32(2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 0);
                let a = E::load(self, p, raw as u32 & 0xffff);
                let b = E::load(self, p.wrapping_add(16), (raw >> 16) as u32 & 0xffff);
                let w2 = _mm512_maskz_permutex2var_ps(0x7fff, a, e2, b);
                let last = (raw >> 32) as u32 & 1;
                let m = (last << 15) as __mmask16;
                let w2 = match E::f32_ptr(p) {
                    Some(pf) => _mm512_mask_loadu_ps(w2, m, pf.wrapping_add(17)),
                    None => {
                        _mm512_mask_mov_ps(w2, m, E::load(self, p.wrapping_add(17), last << 15))
                    }
                };
                [
                    _mm512_permutex2var_ps(a, ev, b),
                    _mm512_permutex2var_ps(a, od, b),
                    w2,
                ]
            }
        }
        #[inline(always)]
        unsafe fn load_pair<E: Elem<Self>>(self, lo: *const E, hi: *const E, m: u32) -> __m512 {
            // SAFETY: see the impl.
            unsafe {
                let a = E::load(self, lo, m & 0xff);
                let (hm, hi) = ((m & 0xff00) as __mmask16, hi.wrapping_sub(8));
                match E::f32_ptr(hi) {
                    Some(hf) => _mm512_mask_loadu_ps(a, hm, hf),
                    None => _mm512_mask_mov_ps(a, hm, E::load(self, hi, m & 0xff00)),
                }
            }
        }
        #[inline(always)]
        unsafe fn load_step2_pair<E: Elem<Self>>(
            self,
            lo: *const E,
            hi: *const E,
            em: u32,
        ) -> __m512 {
            // SAFETY: see the impl. Lane l picks element 2l of (a, b): a's evens, then b's.
            unsafe {
                let evens =
                    _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
                let a = E::load(self, lo, em);
                let b = E::load(self, hi, em);
                _mm512_permutex2var_ps(a, evens, b)
            }
        }
        #[inline(always)]
        unsafe fn store_pair<E: Elem<Self>>(self, lo: *mut E, hi: *mut E, v: __m512, m: u32) {
            // SAFETY: see the impl.
            unsafe {
                E::store(self, lo, v, m & 0xff);
                E::store(self, hi.wrapping_sub(8), v, m & 0xff00);
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

    // bf16 and f16 lanes: 16-bit masked accesses (AVX512-BW and VL), widened and rounded in
    // registers (AVX-512F).
    // SAFETY (every method): the CPU has AVX-512F (an Avx512 token exists) and, by the
    // methods' contract, AVX512-BW and VL; masked-off lanes are not accessed.
    impl Elem<Avx512> for half::bf16 {
        #[inline(always)]
        unsafe fn load(_: Avx512, p: *const half::bf16, m: u32) -> __m512 {
            // SAFETY: see the impl; bf16 widens exactly by a shift into the upper half.
            unsafe {
                let h = load16(p.cast(), m);
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
            }
        }
        #[inline(always)]
        unsafe fn store(_: Avx512, p: *mut half::bf16, v: __m512, m: u32) {
            // SAFETY: see the impl.
            unsafe { store16(p.cast(), bf16_round(v), m) }
        }
        #[inline(always)]
        fn to_f32(self) -> f32 {
            self.to_f32()
        }
    }

    /// The 16 16-bit lanes at `p` where their bits of m are set, else 0 (a whole vector read
    /// unmasked: its load then folds into the widening that follows).
    ///
    /// # Safety
    /// The enabled lanes are readable; AVX512-BW and VL.
    #[inline(always)]
    unsafe fn load16(p: *const u16, m: u32) -> __m256i {
        // SAFETY: the caller's contract.
        unsafe {
            if m & 0xffff == 0xffff {
                _mm256_loadu_si256(p.cast())
            } else {
                _mm256_maskz_loadu_epi16(m as __mmask16, p.cast())
            }
        }
    }

    /// Stores the 16 16-bit lanes of `v` at `p` where their bits of m are set (a whole
    /// vector unmasked).
    ///
    /// # Safety
    /// The enabled lanes are writable; AVX512-BW and VL.
    #[inline(always)]
    unsafe fn store16(p: *mut u16, v: __m256i, m: u32) {
        // SAFETY: the caller's contract.
        unsafe {
            if m & 0xffff == 0xffff {
                _mm256_storeu_si256(p.cast(), v)
            } else {
                _mm256_mask_storeu_epi16(p.cast(), m as __mmask16, v)
            }
        }
    }

    /// The lanes rounded to bf16 bits, to nearest even as `op::tensor::bf16_bits` rounds:
    /// the bits plus 0x7fff plus the kept part's last bit, the upper half; a NaN keeps its
    /// upper half, made quiet.
    ///
    /// # Safety
    /// AVX-512F.
    #[inline(always)]
    unsafe fn bf16_round(v: __m512) -> __m256i {
        // SAFETY: the caller's contract.
        unsafe {
            let b = _mm512_castps_si512(v);
            let upper = _mm512_srli_epi32::<16>(b);
            let odd = _mm512_and_si512(upper, _mm512_set1_epi32(1));
            let bias = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff));
            let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(b, bias));
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
            let bits = _mm512_mask_or_epi32(rounded, nan, upper, _mm512_set1_epi32(0x40));
            _mm512_cvtepi32_epi16(bits)
        }
    }

    /// bf16 in memory, rounded on store by the CPU's `vcvtneps2bf16` (AVX512-BF16), which
    /// rounds as [`bf16_round`] does except that it takes subnormal inputs for zero: vectors
    /// holding one are rounded by [`bf16_round`] instead, so the bits are the same.
    #[derive(Debug, Clone, Copy)]
    #[repr(transparent)]
    pub(crate) struct Bf16Cvt(pub(crate) half::bf16);

    impl Bf16Cvt {
        /// The same elements, as this type.
        pub(crate) fn slice_mut(v: &mut [half::bf16]) -> &mut [Bf16Cvt] {
            // SAFETY: Bf16Cvt is a transparent bf16 (same size, alignment and bits); the
            // borrow moves to the result.
            unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len()) }
        }
    }

    // SAFETY (every method): as for bf16; stores also need AVX512-BF16 (the contract).
    impl Elem<Avx512> for Bf16Cvt {
        #[inline(always)]
        unsafe fn load(s: Avx512, p: *const Bf16Cvt, m: u32) -> __m512 {
            // SAFETY: see the impl; the same bits as bf16.
            unsafe { <half::bf16 as Elem<Avx512>>::load(s, p.cast(), m) }
        }
        #[inline(always)]
        unsafe fn store(_: Avx512, p: *mut Bf16Cvt, v: __m512, m: u32) {
            // SAFETY: see the impl. Subnormal lanes: exponent zero, magnitude not.
            unsafe {
                let b = _mm512_castps_si512(v);
                let normal_or_zero = _mm512_test_epi32_mask(b, _mm512_set1_epi32(0x7f80_0000))
                    | !_mm512_test_epi32_mask(b, _mm512_set1_epi32(0x7fff_ffff));
                let bits = if normal_or_zero == 0xffff {
                    std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(v))
                } else {
                    bf16_round(v)
                };
                store16(p.cast(), bits, m);
            }
        }
        #[inline(always)]
        fn to_f32(self) -> f32 {
            self.0.to_f32()
        }
    }

    // SAFETY (every method): as for bf16.
    impl Elem<Avx512> for half::f16 {
        #[inline(always)]
        unsafe fn load(_: Avx512, p: *const half::f16, m: u32) -> __m512 {
            // SAFETY: see the impl; every f16 is exact in f32.
            unsafe { _mm512_cvtph_ps(load16(p.cast(), m)) }
        }
        #[inline(always)]
        unsafe fn store(_: Avx512, p: *mut half::f16, v: __m512, m: u32) {
            // SAFETY: see the impl; rounded to nearest even.
            unsafe {
                let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
                store16(p.cast(), h, m);
            }
        }
        #[inline(always)]
        fn to_f32(self) -> f32 {
            self.to_f32()
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use half::bf16;

    use super::{Bf16Cvt, Elem};
    use crate::cpu::{Feature, Features};
    use crate::simd::{Avx512, Token};

    /// Rounds `v` through `E`'s AVX-512 store, 16 lanes at a time (one masked tail).
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW and VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn store_all<E: Elem<Avx512>>(s: Avx512, v: &[f32], out: &mut [E]) {
        for (i, c) in v.chunks(16).enumerate() {
            let m = (1u32 << c.len()) - 1;
            // SAFETY: the enabled lanes are c's elements and the same ones of `out`.
            unsafe {
                let x = std::arch::x86_64::_mm512_maskz_loadu_ps(m as u16, c.as_ptr());
                E::store(s, out.as_mut_ptr().add(16 * i), x, m);
            }
        }
    }

    /// The AVX-512 kernels' bf16 stores, rounded in integer lanes (CPUs without AVX512-BF16)
    /// or by `vcvtneps2bf16` with subnormal vectors rounded as before, give the portable
    /// conversion's bits on ties both ways, carries into the exponent, overflow to
    /// infinity, subnormals, zeros, infinities, NaNs and a sweep of bit patterns.
    #[test]
    fn avx512_bf16_stores_round_as_the_portable_conversion() {
        let mut v = crate::op::tensor::bf16_rounding_cases();
        let mut r = 0x9e37_79b9_7f4a_7c15u64;
        v.extend((0..20_011).map(|_| {
            r = r.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            f32::from_bits((r >> 32) as u32)
        }));
        let want: Vec<u16> = v.iter().map(|&x| bf16::from_f32(x).to_bits()).collect();
        let usable = Features::detected();
        let Some(s) = Avx512::new(usable) else {
            eprintln!("no AVX-512 here: the portable conversion alone is tested elsewhere");
            return;
        };
        if !usable.contains_all(Features::of(&[Feature::Avx512Bw, Feature::Avx512Vl])) {
            eprintln!("no AVX512-BW and VL here: the kernels over bf16 do not run");
            return;
        }
        let mut plain = vec![bf16::ZERO; v.len()];
        // SAFETY: the features are checked above.
        unsafe { store_all(s, &v, &mut plain) };
        for (i, x) in v.iter().enumerate() {
            assert_eq!(
                plain[i].to_bits(),
                want[i],
                "integer rounding of {:#x}",
                x.to_bits()
            );
        }
        if !usable.contains(Feature::Avx512Bf16) {
            eprintln!("no AVX512-BF16 here: the integer rounding alone was tested");
            return;
        }
        let mut cvt = vec![Bf16Cvt(bf16::ZERO); v.len()];
        // SAFETY: the features are checked above, AVX512-BF16 too.
        unsafe { store_all_cvt(s, &v, &mut cvt) };
        for (i, x) in v.iter().enumerate() {
            assert_eq!(
                cvt[i].0.to_bits(),
                want[i],
                "vcvtneps2bf16 of {:#x}",
                x.to_bits()
            );
        }
    }

    /// [`store_all`] compiled with AVX512-BF16.
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW, VL and BF16.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    unsafe fn store_all_cvt(s: Avx512, v: &[f32], out: &mut [Bf16Cvt]) {
        // SAFETY: the caller's contract.
        unsafe { store_all(s, v, out) }
    }
}
