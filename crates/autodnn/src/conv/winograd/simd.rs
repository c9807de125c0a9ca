//! The vector layer of the Winograd algorithms: their vector operations ([`Simd`]) on the
//! crate's capability tokens ([`crate::simd`]), and the transformed-domain micro-kernel.
//!
//! A [`Simd`] value is a capability token: holding one proves the CPU runs its instructions,
//! so its methods are safe. The transforms and the micro-kernel are written once, generically,
//! as `#[inline(always)]` functions; each kernel family compiles them inside one
//! `#[target_feature]` entry point per phase ([`Family`]), so the generic code is vectorised
//! for that family's instruction set.
//!
//! Everything here works on channel blocks of [`CB`] = 16 floats, whatever the vector width:
//! an 8-lane family handles a block as two halves. The packed layouts (and so prepared
//! weights) are therefore the same under every instruction-set cap.

use super::bwd_filter::{self, DyArgs, FilterOutArgs, ProductArgs};
use super::{self as winograd, FilterArgs, InputArgs, OutputArgs, Tile};
pub(crate) use crate::simd::Scalar;
use crate::simd::Token;
#[cfg(target_arch = "x86_64")]
pub(crate) use crate::simd::{Avx2, Avx512};

/// Channels per block in every transformed-domain layout (one 64-byte line of f32).
pub(crate) const CB: usize = 16;
/// Output channels per panel of the transformed filter (the micro-kernel's rows).
pub(crate) const KP: usize = 32;

/// Evaluates `body` with `N` a constant equal to the runtime tile count `nr` (1 ..= 12):
/// dispatches to a micro-kernel monomorphised for it.
macro_rules! with_nr {
    ($nr:expr, $n:ident => $body:expr) => {
        match $nr {
            1 => {
                const $n: usize = 1;
                $body
            }
            2 => {
                const $n: usize = 2;
                $body
            }
            3 => {
                const $n: usize = 3;
                $body
            }
            4 => {
                const $n: usize = 4;
                $body
            }
            5 => {
                const $n: usize = 5;
                $body
            }
            6 => {
                const $n: usize = 6;
                $body
            }
            7 => {
                const $n: usize = 7;
                $body
            }
            8 => {
                const $n: usize = 8;
                $body
            }
            9 => {
                const $n: usize = 9;
                $body
            }
            10 => {
                const $n: usize = 10;
                $body
            }
            11 => {
                const $n: usize = 11;
                $body
            }
            12 => {
                const $n: usize = 12;
                $body
            }
            _ => unreachable!("1 ..= 12 tiles (the caller checks)"),
        }
    };
}

/// Vector operations on `LANES` f32 lanes. The implementing type is a capability token
/// ([`crate::simd::Token`]) that exists only when the CPU supports the instructions its
/// methods use.
pub(crate) trait Simd: Token {
    /// The vector type.
    type V: Copy;
    /// Lanes per vector (a divisor of [`CB`]).
    const LANES: usize;
    /// Most tiles per micro-kernel call (the register tile is `2·LANES × NR_MAX`).
    const NR_MAX: usize;
    fn zero(self) -> Self::V;
    fn splat(self, x: f32) -> Self::V;
    /// Loads `LANES` floats from the start of `src`.
    fn load(self, src: &[f32]) -> Self::V;
    /// Stores `LANES` floats at the start of `dst`.
    fn store(self, v: Self::V, dst: &mut [f32]);
    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    /// a·b + c (fused where the family has FMA).
    fn fma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// Interleaves up to 16 rows: element (l, c) of `src` at `base + l·stride + c` (l < rows,
    /// c < n) goes to `dst[c·CB + l]`, lanes from `rows` up to [`CB`] get zeros. Copies NCHW
    /// rows into the channel-interleaved layout.
    #[inline(always)]
    fn interleave16(
        self,
        src: &[f32],
        base: usize,
        stride: usize,
        rows: usize,
        n: usize,
        dst: &mut [f32],
    ) {
        let dst = &mut dst[..n * CB];
        for (c, d) in dst.chunks_exact_mut(CB).enumerate() {
            for (l, d) in d.iter_mut().enumerate() {
                *d = if l < rows {
                    src[base + l * stride + c]
                } else {
                    0.0
                };
            }
        }
    }
    /// Loads `LANES` floats at `p`.
    ///
    /// # Safety
    /// `p .. p + LANES` is readable.
    unsafe fn load_ptr(self, p: *const f32) -> Self::V;
    /// Stores `LANES` floats at `p`.
    ///
    /// # Safety
    /// `p .. p + LANES` is writable and not accessed by another thread.
    unsafe fn store_ptr(self, v: Self::V, p: *mut f32);
}

/// `c·x + y`, with `c` a compile-time constant after inlining.
#[inline(always)]
pub(crate) fn axpy<S: Simd>(s: S, c: f32, x: S::V, y: S::V) -> S::V {
    s.fma(s.splat(c), x, y)
}

/// `c·x`.
#[inline(always)]
pub(crate) fn scale<S: Simd>(s: S, c: f32, x: S::V) -> S::V {
    s.mul(s.splat(c), x)
}

/// A kernel family: a [`Simd`] token with the Winograd phases compiled for its instruction
/// set. Each method is a `#[target_feature]` entry around the generic code in
/// [`super`].
pub(crate) trait Family: Simd {
    /// Converts and input-transforms one channel block of one tile block.
    fn input_item<T: Tile>(self, a: &InputArgs<'_>, cb: usize, v: &mut [f32], xc: &mut [f32]);
    /// Products and output transform of one panel of output channels of one tile block.
    fn output_item<T: Tile>(self, a: &OutputArgs<'_>, u: &[f32], kp: usize, m: &mut [f32]);
    /// Transforms the filter of one panel of output channels (plain calls).
    fn filter_item<T: Tile>(self, a: &FilterArgs<'_>, u: &mut [f32]);
    /// Backward filter: transforms the dy tiles of one chunk of a block.
    fn bwdw_dy_item<T: Tile>(self, a: &DyArgs<'_>, q: usize, u: &mut [f32], dyc: &mut [f32]);
    /// Backward filter: the products of one transform position over one block.
    fn bwdw_product_item(self, a: &ProductArgs<'_>, xi: usize, m: &mut [f32]);
    /// Backward filter: transforms back and stores one output channel's filters.
    fn bwdw_filter_item<T: Tile>(self, a: &FilterOutArgs<'_>, k: usize, d: &mut [f32]);
}

macro_rules! family_entries {
    // A family whose generic code is compiled with extra target features.
    ($ty:ty, $features:literal) => {
        impl Family for $ty {
            fn input_item<T: Tile>(
                self,
                a: &InputArgs<'_>,
                cb: usize,
                v: &mut [f32],
                xc: &mut [f32],
            ) {
                #[target_feature(enable = $features)]
                fn inner<T: Tile>(
                    s: $ty,
                    a: &InputArgs<'_>,
                    cb: usize,
                    v: &mut [f32],
                    xc: &mut [f32],
                ) {
                    winograd::input_item::<$ty, T>(s, a, cb, v, xc)
                }
                // SAFETY: a token of this family is only made after detecting its features
                // (see its constructor).
                unsafe { inner::<T>(self, a, cb, v, xc) }
            }
            fn output_item<T: Tile>(self, a: &OutputArgs<'_>, u: &[f32], kp: usize, m: &mut [f32]) {
                #[target_feature(enable = $features)]
                fn inner<T: Tile>(s: $ty, a: &OutputArgs<'_>, u: &[f32], kp: usize, m: &mut [f32]) {
                    winograd::output_item::<$ty, T>(s, a, u, kp, m)
                }
                // SAFETY: as above.
                unsafe { inner::<T>(self, a, u, kp, m) }
            }
            fn filter_item<T: Tile>(self, a: &FilterArgs<'_>, u: &mut [f32]) {
                #[target_feature(enable = $features)]
                fn inner<T: Tile>(s: $ty, a: &FilterArgs<'_>, u: &mut [f32]) {
                    winograd::filter_item::<$ty, T>(s, a, u)
                }
                // SAFETY: as above.
                unsafe { inner::<T>(self, a, u) }
            }
            fn bwdw_dy_item<T: Tile>(
                self,
                a: &DyArgs<'_>,
                q: usize,
                u: &mut [f32],
                dyc: &mut [f32],
            ) {
                #[target_feature(enable = $features)]
                fn inner<T: Tile>(
                    s: $ty,
                    a: &DyArgs<'_>,
                    q: usize,
                    u: &mut [f32],
                    dyc: &mut [f32],
                ) {
                    bwd_filter::dy_item::<$ty, T>(s, a, q, u, dyc)
                }
                // SAFETY: as above.
                unsafe { inner::<T>(self, a, q, u, dyc) }
            }
            fn bwdw_product_item(self, a: &ProductArgs<'_>, xi: usize, m: &mut [f32]) {
                #[target_feature(enable = $features)]
                fn inner(s: $ty, a: &ProductArgs<'_>, xi: usize, m: &mut [f32]) {
                    bwd_filter::product_item::<$ty>(s, a, xi, m)
                }
                // SAFETY: as above.
                unsafe { inner(self, a, xi, m) }
            }
            fn bwdw_filter_item<T: Tile>(self, a: &FilterOutArgs<'_>, k: usize, d: &mut [f32]) {
                #[target_feature(enable = $features)]
                fn inner<T: Tile>(s: $ty, a: &FilterOutArgs<'_>, k: usize, d: &mut [f32]) {
                    bwd_filter::filter_out_item::<$ty, T>(s, a, k, d)
                }
                // SAFETY: as above.
                unsafe { inner::<T>(self, a, k, d) }
            }
        }
    };
}

/// The 8-lane families: plain Rust on lane arrays, which the compiler vectorises for the
/// baseline target ([`Scalar`], `FUSED = false`) or, compiled with AVX2 and FMA enabled, for
/// AVX2 ([`Avx2`], `FUSED = true`: `mul_add` is one instruction there, a slow library call
/// elsewhere).
macro_rules! lane_array_simd {
    ($ty:ty, $fused:literal) => {
        impl Simd for $ty {
            type V = [f32; 8];
            const LANES: usize = 8;
            const NR_MAX: usize = 6;
            #[inline(always)]
            fn zero(self) -> [f32; 8] {
                [0.0; 8]
            }
            #[inline(always)]
            fn splat(self, x: f32) -> [f32; 8] {
                [x; 8]
            }
            #[inline(always)]
            fn load(self, src: &[f32]) -> [f32; 8] {
                src[..8].try_into().unwrap()
            }
            #[inline(always)]
            fn store(self, v: [f32; 8], dst: &mut [f32]) {
                dst[..8].copy_from_slice(&v);
            }
            #[inline(always)]
            fn add(self, a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
                std::array::from_fn(|i| a[i] + b[i])
            }
            #[inline(always)]
            fn sub(self, a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
                std::array::from_fn(|i| a[i] - b[i])
            }
            #[inline(always)]
            fn mul(self, a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
                std::array::from_fn(|i| a[i] * b[i])
            }
            #[inline(always)]
            fn fma(self, a: [f32; 8], b: [f32; 8], c: [f32; 8]) -> [f32; 8] {
                if $fused {
                    std::array::from_fn(|i| a[i].mul_add(b[i], c[i]))
                } else {
                    std::array::from_fn(|i| a[i] * b[i] + c[i])
                }
            }
            #[inline(always)]
            unsafe fn load_ptr(self, p: *const f32) -> [f32; 8] {
                // SAFETY: the caller guarantees 8 readable floats at p.
                unsafe { p.cast::<[f32; 8]>().read_unaligned() }
            }
            #[inline(always)]
            unsafe fn store_ptr(self, v: [f32; 8], p: *mut f32) {
                // SAFETY: the caller guarantees 8 writable floats at p, used by this thread only.
                unsafe { p.cast::<[f32; 8]>().write_unaligned(v) }
            }
        }
    };
}

lane_array_simd!(Scalar, false);
#[cfg(target_arch = "x86_64")]
lane_array_simd!(Avx2, true);

/// The portable family runs the generic code as compiled for the baseline target.
impl Family for Scalar {
    fn input_item<T: Tile>(self, a: &InputArgs<'_>, cb: usize, v: &mut [f32], xc: &mut [f32]) {
        winograd::input_item::<Self, T>(self, a, cb, v, xc)
    }
    fn output_item<T: Tile>(self, a: &OutputArgs<'_>, u: &[f32], kp: usize, m: &mut [f32]) {
        winograd::output_item::<Self, T>(self, a, u, kp, m)
    }
    fn filter_item<T: Tile>(self, a: &FilterArgs<'_>, u: &mut [f32]) {
        winograd::filter_item::<Self, T>(self, a, u)
    }
    fn bwdw_dy_item<T: Tile>(self, a: &DyArgs<'_>, q: usize, u: &mut [f32], dyc: &mut [f32]) {
        bwd_filter::dy_item::<Self, T>(self, a, q, u, dyc)
    }
    fn bwdw_product_item(self, a: &ProductArgs<'_>, xi: usize, m: &mut [f32]) {
        bwd_filter::product_item::<Self>(self, a, xi, m)
    }
    fn bwdw_filter_item<T: Tile>(self, a: &FilterOutArgs<'_>, k: usize, d: &mut [f32]) {
        bwd_filter::filter_out_item::<Self, T>(self, a, k, d)
    }
}

#[cfg(target_arch = "x86_64")]
family_entries!(Avx2, "avx2,fma");

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Avx512, Simd};

    /// The AVX-512 family: 16 lanes, a 32 × 12 register tile.
    impl Simd for Avx512 {
        type V = __m512;
        const LANES: usize = 16;
        const NR_MAX: usize = 12;
        #[inline(always)]
        fn zero(self) -> __m512 {
            // SAFETY (every intrinsic of this impl): an Avx512 token exists only when the
            // CPU has AVX-512F (`crate::simd::Avx512`).
            unsafe { _mm512_setzero_ps() }
        }
        #[inline(always)]
        fn splat(self, x: f32) -> __m512 {
            // SAFETY: as above.
            unsafe { _mm512_set1_ps(x) }
        }
        #[inline(always)]
        fn load(self, src: &[f32]) -> __m512 {
            let src = &src[..16];
            // SAFETY: AVX-512F (as above); 16 floats readable (checked by slicing).
            unsafe { _mm512_loadu_ps(src.as_ptr()) }
        }
        #[inline(always)]
        fn store(self, v: __m512, dst: &mut [f32]) {
            let dst = &mut dst[..16];
            // SAFETY: AVX-512F (as above); 16 floats writable (checked by slicing).
            unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), v) }
        }
        #[inline(always)]
        fn add(self, a: __m512, b: __m512) -> __m512 {
            // SAFETY: as above.
            unsafe { _mm512_add_ps(a, b) }
        }
        #[inline(always)]
        fn sub(self, a: __m512, b: __m512) -> __m512 {
            // SAFETY: as above.
            unsafe { _mm512_sub_ps(a, b) }
        }
        #[inline(always)]
        fn mul(self, a: __m512, b: __m512) -> __m512 {
            // SAFETY: as above.
            unsafe { _mm512_mul_ps(a, b) }
        }
        #[inline(always)]
        fn fma(self, a: __m512, b: __m512, c: __m512) -> __m512 {
            // SAFETY: as above.
            unsafe { _mm512_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        unsafe fn load_ptr(self, p: *const f32) -> __m512 {
            // SAFETY: AVX-512F (as above); the caller guarantees 16 readable floats.
            unsafe { _mm512_loadu_ps(p) }
        }
        /// 16 × 16 blocks transposed in registers (unpacks within 128-bit lanes, then lane
        /// shuffles), masked loads and stores for a last block under 16 columns.
        #[inline(always)]
        fn interleave16(
            self,
            src: &[f32],
            base: usize,
            stride: usize,
            rows: usize,
            n: usize,
            dst: &mut [f32],
        ) {
            if n == 0 {
                return;
            }
            assert!(rows <= CB);
            if rows > 0 {
                // Every row's run lies in src (the last row checked, rows evenly spaced).
                let _ = &src[base + (rows - 1) * stride..base + (rows - 1) * stride + n];
            }
            let dst = &mut dst[..n * CB];
            let mut c = 0;
            while c < n {
                let w = (n - c).min(CB);
                let mask = ((1u32 << w) - 1) as __mmask16;
                let mut r = [self.zero(); CB];
                for (l, r) in r.iter_mut().enumerate().take(rows) {
                    // SAFETY: AVX-512F (as above); columns c .. c + w of row l are inside src
                    // (checked above); the mask leaves the others untouched.
                    *r = unsafe {
                        _mm512_maskz_loadu_ps(mask, src.as_ptr().add(base + l * stride + c))
                    };
                }
                let t = transpose16(r);
                for (q, t) in t.iter().enumerate().take(w) {
                    self.store(*t, &mut dst[(c + q) * CB..]);
                }
                c += w;
            }
        }
        #[inline(always)]
        unsafe fn store_ptr(self, v: __m512, p: *mut f32) {
            // SAFETY: AVX-512F (as above); the caller guarantees 16 writable floats.
            unsafe { _mm512_storeu_ps(p, v) }
        }
    }

    use super::{bwd_filter, winograd, Family, FilterArgs, InputArgs, OutputArgs, Tile, CB};
    use super::{DyArgs, FilterOutArgs, ProductArgs};

    /// Transposes 16 vectors: output q holds element q of every input, in order.
    #[inline(always)]
    fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
        // SAFETY (all intrinsics): only called from AVX-512 code paths (an Avx512 token's
        // methods).
        unsafe {
            // Within each 128-bit lane: pairs of rows interleaved, then quads.
            let mut t = [_mm512_setzero_ps(); 16];
            for i in 0..8 {
                t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
            }
            let (pd, ps) = (_mm512_castps_pd, _mm512_castpd_ps);
            // u[4g + j], 128-bit lane L: element 4L + j of rows 4g .. 4g + 4.
            let mut u = [_mm512_setzero_ps(); 16];
            for g in 0..4 {
                let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
                u[4 * g] = ps(_mm512_unpacklo_pd(pd(a), pd(c)));
                u[4 * g + 1] = ps(_mm512_unpackhi_pd(pd(a), pd(c)));
                u[4 * g + 2] = ps(_mm512_unpacklo_pd(pd(b), pd(d)));
                u[4 * g + 3] = ps(_mm512_unpackhi_pd(pd(b), pd(d)));
            }
            // Gather lane L of u[j], u[4 + j], u[8 + j], u[12 + j]: element 4L + j of all 16.
            let mut out = [_mm512_setzero_ps(); 16];
            for j in 0..4 {
                let v0 = _mm512_shuffle_f32x4::<0x88>(u[j], u[4 + j]);
                let v1 = _mm512_shuffle_f32x4::<0xDD>(u[j], u[4 + j]);
                let w0 = _mm512_shuffle_f32x4::<0x88>(u[8 + j], u[12 + j]);
                let w1 = _mm512_shuffle_f32x4::<0xDD>(u[8 + j], u[12 + j]);
                out[j] = _mm512_shuffle_f32x4::<0x88>(v0, w0);
                out[8 + j] = _mm512_shuffle_f32x4::<0xDD>(v0, w0);
                out[4 + j] = _mm512_shuffle_f32x4::<0x88>(v1, w1);
                out[12 + j] = _mm512_shuffle_f32x4::<0xDD>(v1, w1);
            }
            out
        }
    }
    family_entries!(Avx512, "avx512f");
}

/// The transformed-domain micro-kernel: for one transform position, `2·LANES` output
/// channels × `NR` tiles, summed over `cbn` blocks of [`CB`] input channels.
///
/// - `a`: the transformed filter panel, element (channel c, row i) at `c·KP + i`, rows
///   starting where the caller points (row 0 or, on 8-lane families, row 16);
/// - `b`: the transformed input, element (c, tile j) at
///   `(c / CB)·b_cb_stride + j·CB + c % CB`;
/// - `out`: tile j's `2·LANES` results at `out + j·out_stride`.
///
/// # Safety
/// The CPU supports `S` (it is a token); `a` is readable for `cbn·CB·KP` floats, `b` at
/// every offset above for c < cbn·CB, j < NR, and `out` writable at every offset above and
/// used by this thread alone.
#[inline(always)]
pub(crate) unsafe fn micro_kernel<S: Simd, const NR: usize>(
    s: S,
    a: *const f32,
    b: *const f32,
    b_cb_stride: usize,
    cbn: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let mut acc = [[s.zero(); 2]; NR];
    for cb in 0..cbn {
        let ab = a.wrapping_add(cb * CB * KP);
        let bb = b.wrapping_add(cb * b_cb_stride);
        for cc in 0..CB {
            // SAFETY: depth c = cb·CB + cc < cbn·CB: rows 0 .. 2·LANES of its A row are
            // readable (contract).
            let (a0, a1) = unsafe {
                (
                    s.load_ptr(ab.add(cc * KP)),
                    s.load_ptr(ab.add(cc * KP + S::LANES)),
                )
            };
            for (j, acc) in acc.iter_mut().enumerate() {
                // SAFETY: element (c, j) of B, j < NR (contract).
                let bj = s.splat(unsafe { *bb.add(j * CB + cc) });
                acc[0] = s.fma(a0, bj, acc[0]);
                acc[1] = s.fma(a1, bj, acc[1]);
            }
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        let o = out.wrapping_add(j * out_stride);
        // SAFETY: tile j's 2·LANES results are writable and this thread's (contract).
        unsafe {
            s.store_ptr(acc[0], o);
            s.store_ptr(acc[1], o.add(S::LANES));
        }
    }
}

/// Dispatches a runtime tile count `nr` (1 ..= `S::NR_MAX`, at most 12) to the
/// monomorphised micro-kernel.
///
/// # Safety
/// As [`micro_kernel`] with NR = `nr`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn micro_kernel_n<S: Simd>(
    s: S,
    nr: usize,
    a: *const f32,
    b: *const f32,
    b_cb_stride: usize,
    cbn: usize,
    out: *mut f32,
    out_stride: usize,
) {
    assert!(nr >= 1 && nr <= S::NR_MAX.min(12));
    // SAFETY: the caller's contract with NR = nr.
    with_nr!(nr, N => unsafe { micro_kernel::<S, N>(s, a, b, b_cb_stride, cbn, out, out_stride) })
}

/// Two bf16 values (their bits, rounded to nearest even from f32) in one 32-bit slot: `lo`
/// in the low half, `hi` in the high half, as `vdpbf16ps` reads a pair.
#[inline(always)]
pub(crate) fn pair_bits(lo: f32, hi: f32) -> f32 {
    use crate::op::tensor::bf16_bits;
    f32::from_bits(u32::from(bf16_bits(lo.to_bits())) | (u32::from(bf16_bits(hi.to_bits())) << 16))
}

/// The low and high bf16 values of a pair slot, widened (exactly) to f32.
#[inline(always)]
fn unpair(w: f32) -> (f32, f32) {
    let w = w.to_bits();
    (f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000))
}

/// [`micro_kernel`] on bf16 pairs, in f32 arithmetic (any family): the same products,
/// each pair summed high value first as `vdpbf16ps` sums it.
///
/// - `a`: pair slot (pair q of the panel's channels, row i) at `q·KP + i`, rows from where
///   the caller points;
/// - `b`: pair slot (pair q, tile j) at `(q / (CB/2))·b_cb_stride + j·CB/2 + q % (CB/2)`;
/// - `out`: as in [`micro_kernel`].
///
/// # Safety
/// As [`micro_kernel`], with `cbn·CB/2` pair rows of `KP` slots readable at `a`.
#[inline(always)]
unsafe fn pair_kernel_portable<S: Simd, const NR: usize>(
    s: S,
    a: *const f32,
    b: *const f32,
    b_cb_stride: usize,
    cbn: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let mut acc = [[s.zero(); 2]; NR];
    let rows = 2 * S::LANES;
    for q in 0..cbn * CB / 2 {
        let (mut lo, mut hi) = ([0f32; 32], [0f32; 32]);
        for r in 0..rows {
            // SAFETY: row r < 2·LANES of pair row q (contract).
            (lo[r], hi[r]) = unpair(unsafe { *a.add(q * KP + r) });
        }
        let (lo0, lo1) = (s.load(&lo), s.load(&lo[S::LANES..]));
        let (hi0, hi1) = (s.load(&hi), s.load(&hi[S::LANES..]));
        let bq = b.wrapping_add((q / (CB / 2)) * b_cb_stride + q % (CB / 2));
        for (j, acc) in acc.iter_mut().enumerate() {
            // SAFETY: pair q of tile j < NR (contract).
            let (bl, bh) = unpair(unsafe { *bq.add(j * CB / 2) });
            let (bl, bh) = (s.splat(bl), s.splat(bh));
            acc[0] = s.fma(lo0, bl, s.fma(hi0, bh, acc[0]));
            acc[1] = s.fma(lo1, bl, s.fma(hi1, bh, acc[1]));
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        let o = out.wrapping_add(j * out_stride);
        // SAFETY: tile j's 2·LANES results are writable and this thread's (contract).
        unsafe {
            s.store_ptr(acc[0], o);
            s.store_ptr(acc[1], o.add(S::LANES));
        }
    }
}

/// The products of one transform position on bf16 pairs (see [`pair_kernel_portable`] for
/// the layouts), `2·LANES` rows × `nr` tiles: on the bf16 dot-product units where `dp` is
/// given (32 rows: the caller points at row 0 and `S` has 16 lanes), else in f32 arithmetic
/// on `S`.
///
/// # Safety
/// As [`pair_kernel_portable`] with NR = `nr` (1 ..= `S::NR_MAX`, at most 12).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn pair_kernel_n<S: Simd>(
    s: S,
    dp: Option<DotPairs>,
    nr: usize,
    a: *const f32,
    b: *const f32,
    b_cb_stride: usize,
    cbn: usize,
    out: *mut f32,
    out_stride: usize,
) {
    assert!(nr >= 1 && nr <= S::NR_MAX.min(12));
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = dp {
        assert_eq!(S::LANES, 16, "the bf16 units' kernel takes 32 rows");
        // SAFETY: the caller's contract, 32 rows (checked above); the token proves the CPU
        // runs AVX512-BF16.
        return unsafe { dot_pairs::kernel_n(t, nr, a, b, b_cb_stride, cbn, out, out_stride) };
    }
    let _ = dp;
    // SAFETY: the caller's contract with NR = nr.
    with_nr!(nr, N => unsafe {
        pair_kernel_portable::<S, N>(s, a, b, b_cb_stride, cbn, out, out_stride)
    })
}

/// The bf16 dot-product units' token, where the build has them.
#[cfg(target_arch = "x86_64")]
pub(crate) use crate::simd::Avx512Bf16 as DotPairs;
/// No bf16 dot-product units on other architectures.
#[cfg(not(target_arch = "x86_64"))]
#[derive(Debug, Clone, Copy)]
pub(crate) enum DotPairs {}

#[cfg(target_arch = "x86_64")]
mod dot_pairs {
    use std::arch::x86_64::*;

    use super::{DotPairs, CB, KP};

    /// 32 rows × NR tiles on `vdpbf16ps`: per pair of channels, two vectors of the panel's
    /// pairs and one broadcast pair per tile.
    ///
    /// # Safety
    /// The CPU runs AVX512-BF16 (the caller holds a token); the layouts and bounds of
    /// `super::pair_kernel_portable` with 32 rows.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn kernel<const NR: usize>(
        a: *const f32,
        b: *const f32,
        b_cb_stride: usize,
        cbn: usize,
        out: *mut f32,
        out_stride: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; NR];
        for q in 0..cbn * CB / 2 {
            // SAFETY: rows 0 .. 32 of pair row q are readable (contract).
            let (a0, a1) = unsafe {
                let p = a.add(q * KP);
                (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)))
            };
            let (a0, a1) = (bh(a0), bh(a1));
            let bq = b.wrapping_add((q / (CB / 2)) * b_cb_stride + q % (CB / 2));
            for (j, acc) in acc.iter_mut().enumerate() {
                // SAFETY: pair q of tile j < NR (contract).
                let bj = bh(_mm512_set1_ps(unsafe { *bq.add(j * CB / 2) }));
                acc[0] = _mm512_dpbf16_ps(acc[0], a0, bj);
                acc[1] = _mm512_dpbf16_ps(acc[1], a1, bj);
            }
        }
        for (j, acc) in acc.iter().enumerate() {
            // SAFETY: tile j's 32 results are writable and this thread's (contract).
            unsafe {
                let o = out.add(j * out_stride);
                _mm512_storeu_ps(o, acc[0]);
                _mm512_storeu_ps(o.add(16), acc[1]);
            }
        }
    }

    /// 32 bf16 values (16 pairs) from the bits of a vector of slots.
    #[inline(always)]
    fn bh(x: __m512) -> __m512bh {
        // SAFETY: both are 64-byte vectors of plain bits; every bit pattern is a valid value
        // of either.
        unsafe { std::mem::transmute::<__m512, __m512bh>(x) }
    }

    /// Dispatches a runtime tile count to [`kernel`].
    ///
    /// # Safety
    /// As [`kernel`] with NR = `nr` (1 ..= 12).
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn kernel_n(
        _: DotPairs,
        nr: usize,
        a: *const f32,
        b: *const f32,
        b_cb_stride: usize,
        cbn: usize,
        out: *mut f32,
        out_stride: usize,
    ) {
        // SAFETY: the caller's contract with NR = nr; the token proves the CPU's features.
        with_nr!(nr, N => unsafe { kernel::<N>(a, b, b_cb_stride, cbn, out, out_stride) })
    }
}
