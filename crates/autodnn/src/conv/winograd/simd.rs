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
    /// Lane-wise maximum, `b` where `a` is NaN (as `f32::max` with `b` not NaN).
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
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
            fn max(self, a: [f32; 8], b: [f32; 8]) -> [f32; 8] {
                std::array::from_fn(|i| a[i].max(b[i]))
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
        fn max(self, a: __m512, b: __m512) -> __m512 {
            // SAFETY: as above. (maxps returns its second operand where either is NaN.)
            unsafe { _mm512_max_ps(a, b) }
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
                // SAFETY: an Avx512 token (self) exists only when the CPU runs AVX-512F.
                let t = unsafe { crate::simd::transpose16(r) };
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

    family_entries!(Avx512, "avx512f");
}

/// The transformed-domain micro-kernel on f32 operands ([`Floats`]; see [`kernel`]), for a
/// runtime tile count `nr` (1 ..= `S::NR_MAX`, at most 12).
///
/// # Safety
/// As [`kernel`] with NR = `nr`.
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
    with_nr!(nr, N => unsafe {
        kernel::<S, Floats, N>(s, Floats, a, b, b_cb_stride, cbn, out, out_stride)
    })
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

/// How one depth step's products are added: the panel's `2·LANES` rows of one step of A
/// (a row of f32 values, or a row of bf16 pairs), loaded once per step as two halves, each
/// multiplied by one tile's element of B into an accumulator. [`Floats`] multiplies f32
/// operands, [`InF32`] widens bf16 pairs and runs any family's FMAs on them, [`DotPairs`]
/// runs `vdpbf16ps` on the pairs as they are.
pub(crate) trait Products<S: Simd>: Copy {
    /// Depth steps per block of [`CB`] input channels (one per channel, or per pair).
    const STEPS: usize;
    /// Half a step of A (`LANES` rows), as this form multiplies it.
    type A: Copy;
    /// One tile's element of B, broadcast.
    type B: Copy;
    /// Rows 0 .. LANES and LANES .. 2·LANES of the step of A at `p`.
    ///
    /// # Safety
    /// `2·LANES` slots are readable at `p`.
    unsafe fn load_a(self, s: S, p: *const f32) -> [Self::A; 2];
    /// The element (slot) `w` of B, broadcast.
    fn splat_b(self, s: S, w: f32) -> Self::B;
    /// `acc` plus the step's products (for a pair, the high values' first).
    fn add(self, s: S, acc: S::V, a: Self::A, b: Self::B) -> S::V;
}

/// f32 operands: one input channel per step, the family's FMAs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Floats;

impl<S: Simd> Products<S> for Floats {
    const STEPS: usize = CB;
    type A = S::V;
    type B = S::V;
    #[inline(always)]
    unsafe fn load_a(self, s: S, p: *const f32) -> [S::V; 2] {
        // SAFETY: 2·LANES floats are readable at p (contract).
        unsafe { [s.load_ptr(p), s.load_ptr(p.add(S::LANES))] }
    }
    #[inline(always)]
    fn splat_b(self, s: S, w: f32) -> S::V {
        s.splat(w)
    }
    #[inline(always)]
    fn add(self, s: S, acc: S::V, a: S::V, b: S::V) -> S::V {
        s.fma(a, b, acc)
    }
}

/// Pairs widened (exactly) to f32 and multiplied by the family's FMAs: the products of
/// `vdpbf16ps` on any CPU.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InF32;

impl<S: Simd> Products<S> for InF32 {
    const STEPS: usize = CB / 2;
    /// (low values, high values).
    type A = (S::V, S::V);
    type B = (S::V, S::V);
    #[inline(always)]
    unsafe fn load_a(self, s: S, p: *const f32) -> [(S::V, S::V); 2] {
        let (mut lo, mut hi) = ([0f32; 32], [0f32; 32]);
        for r in 0..2 * S::LANES {
            // SAFETY: r < 2·LANES slots are readable (contract).
            (lo[r], hi[r]) = unpair(unsafe { *p.add(r) });
        }
        [
            (s.load(&lo), s.load(&hi)),
            (s.load(&lo[S::LANES..]), s.load(&hi[S::LANES..])),
        ]
    }
    #[inline(always)]
    fn splat_b(self, s: S, w: f32) -> (S::V, S::V) {
        let (lo, hi) = unpair(w);
        (s.splat(lo), s.splat(hi))
    }
    #[inline(always)]
    fn add(self, s: S, acc: S::V, a: (S::V, S::V), b: (S::V, S::V)) -> S::V {
        s.fma(a.0, b.0, s.fma(a.1, b.1, acc))
    }
}

/// The transformed-domain micro-kernel: for one transform position, `2·LANES` output
/// channels × `NR` tiles, summed over `cbn` blocks of [`CB`] input channels, each block
/// `P::STEPS` depth steps whose products `p` adds.
///
/// - `a`: the transformed filter panel, step t (channel t, or pair of channels t) of row i at
///   `t·KP + i`, rows starting where the caller points (row 0 or, on 8-lane families, row
///   16);
/// - `b`: the transformed input, step t of tile j at
///   `(t / P::STEPS)·b_cb_stride + j·P::STEPS + t % P::STEPS`;
/// - `out`: tile j's `2·LANES` results at `out + j·out_stride`.
///
/// # Safety
/// The CPU supports `S` (it is a token) and `p`'s instructions; `a` is readable for
/// `cbn·P::STEPS·KP` slots, `b` at every offset above for t < cbn·P::STEPS, j < NR, and
/// `out` writable at every offset above and used by this thread alone.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel<S: Simd, P: Products<S>, const NR: usize>(
    s: S,
    p: P,
    a: *const f32,
    b: *const f32,
    b_cb_stride: usize,
    cbn: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let mut acc = [[s.zero(); 2]; NR];
    for cb in 0..cbn {
        let ab = a.wrapping_add(cb * P::STEPS * KP);
        let bb = b.wrapping_add(cb * b_cb_stride);
        for t in 0..P::STEPS {
            // SAFETY: step cb·STEPS + t < cbn·STEPS: rows 0 .. 2·LANES of its A row are
            // readable (contract).
            let [a0, a1] = unsafe { p.load_a(s, ab.add(t * KP)) };
            for (j, acc) in acc.iter_mut().enumerate() {
                // SAFETY: step t of tile j < NR in this block of B (contract).
                let bj = p.splat_b(s, unsafe { *bb.add(j * P::STEPS + t) });
                acc[0] = p.add(s, acc[0], a0, bj);
                acc[1] = p.add(s, acc[1], a1, bj);
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

/// The products of one transform position on bf16 pairs (see [`kernel`] for the layouts), `2·LANES` rows × `nr` tiles: on the bf16 dot-product units where `dp` is given
/// (32 rows: the caller points at row 0 and `S` has 16 lanes), else in f32 arithmetic on `S`.
///
/// # Safety
/// As [`kernel`] with pair steps and NR = `nr` (1 ..= `S::NR_MAX`, at most 12).
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
        kernel::<S, InF32, N>(s, InF32, a, b, b_cb_stride, cbn, out, out_stride)
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

    use super::{kernel as products_kernel, Avx512, DotPairs, Products, CB};

    /// The pairs as they are, on `vdpbf16ps`: two vectors of the panel's pairs per step and
    /// one broadcast pair per tile.
    impl Products<Avx512> for DotPairs {
        const STEPS: usize = CB / 2;
        type A = __m512bh;
        type B = __m512bh;
        #[inline(always)]
        unsafe fn load_a(self, _: Avx512, p: *const f32) -> [__m512bh; 2] {
            // SAFETY: 32 slots are readable at p (contract); AVX-512F (the token's features
            // include it).
            unsafe { [bh(_mm512_loadu_ps(p)), bh(_mm512_loadu_ps(p.add(16)))] }
        }
        #[inline(always)]
        fn splat_b(self, _: Avx512, w: f32) -> __m512bh {
            // SAFETY: AVX-512F, as above.
            bh(unsafe { _mm512_set1_ps(w) })
        }
        #[inline(always)]
        fn add(self, _: Avx512, acc: __m512, a: __m512bh, b: __m512bh) -> __m512 {
            // SAFETY: the token proves the CPU runs AVX512-BF16.
            unsafe { _mm512_dpbf16_ps(acc, a, b) }
        }
    }

    /// The micro-kernel on the bf16 units, compiled with their features.
    ///
    /// # Safety
    /// The CPU runs AVX512-BF16 (the token); the contract of `super::kernel` with pair
    /// steps and 32 rows.
    #[target_feature(enable = "avx512f,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn kernel<const NR: usize>(
        t: DotPairs,
        a: *const f32,
        b: *const f32,
        b_cb_stride: usize,
        cbn: usize,
        out: *mut f32,
        out_stride: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            products_kernel::<Avx512, DotPairs, NR>(
                t.avx512(),
                t,
                a,
                b,
                b_cb_stride,
                cbn,
                out,
                out_stride,
            )
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
        t: DotPairs,
        nr: usize,
        a: *const f32,
        b: *const f32,
        b_cb_stride: usize,
        cbn: usize,
        out: *mut f32,
        out_stride: usize,
    ) {
        // SAFETY: the caller's contract with NR = nr; the token proves the CPU's features.
        with_nr!(nr, N => unsafe { kernel::<N>(t, a, b, b_cb_stride, cbn, out, out_stride) })
    }
}
