//! The crate's SIMD style: capability tokens.
//!
//! A token ([`Token`]) is a zero-sized value that exists only when the CPU runs the features
//! its family needs ([`Token::REQUIRES`]) and the handle's cap admits them: it is made from
//! the usable features ([`Token::new`]), checked against the detected ones, so holding one
//! proves the instructions run. Algorithms define their vector operations as a trait
//! implemented for the tokens, each method taking the token (`self`): arithmetic is then safe,
//! and only memory access through raw pointers stays `unsafe`, for its bounds alone.
//!
//! Kernels are written once, generically over the operations, as `#[inline(always)]`
//! functions taking the token; each family compiles them inside one `#[target_feature]` entry
//! point per kernel, which also takes the token, so the generic code is vectorised for that
//! family's instruction set and calling the entry needs no proof of the features beyond the
//! token. Dispatch is asking for the
//! widest token first:
//!
//! ```text
//! if let Some(s) = Avx512::new(ctx.features()) { return run(s, ...) }
//! if let Some(s) = Avx2::new(ctx.features()) { return run(s, ...) }
//! run(Scalar::new(), ...)
//! ```
//!
//! Winograd (`conv/winograd/simd.rs`), depthwise, direct and spectral convolution share this
//! style; the GEMM micro-kernels are data (`gemm/kernels`) chosen by the same requirements.

use crate::cpu::Features;

/// A capability token: a zero-sized proof that the CPU runs a family's features.
pub(crate) trait Token: Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The processor features the family's code uses.
    const REQUIRES: Features;
    /// The token, when `usable` (features the caller may use) includes [`Token::REQUIRES`]
    /// and this CPU has them.
    fn new(usable: Features) -> Option<Self>;
}

/// Whether the family of `T` may run with the usable features: they include its
/// requirements, and so does this CPU.
fn admits<T: Token>(usable: Features) -> bool {
    usable
        .intersection(Features::detected())
        .contains_all(T::REQUIRES)
}

/// The portable family: plain Rust, no target-specific code; runs everywhere.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scalar(());

impl Scalar {
    /// The portable token (it needs no feature).
    pub(crate) fn new() -> Scalar {
        Scalar(())
    }
}

impl Token for Scalar {
    const REQUIRES: Features = Features::EMPTY;
    fn new(_: Features) -> Option<Scalar> {
        Some(Scalar(()))
    }
}

/// The AVX2 + FMA family.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx2(());

#[cfg(target_arch = "x86_64")]
impl Token for Avx2 {
    const REQUIRES: Features = Features::AVX2_FMA;
    fn new(usable: Features) -> Option<Avx2> {
        admits::<Avx2>(usable).then_some(Avx2(()))
    }
}

/// The AVX-512 (F) family.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx512(());

#[cfg(target_arch = "x86_64")]
impl Token for Avx512 {
    const REQUIRES: Features = Features::AVX512F;
    fn new(usable: Features) -> Option<Avx512> {
        admits::<Avx512>(usable).then_some(Avx512(()))
    }
}

/// AVX-512 (F) with the bf16 dot products of AVX512-BF16 (`vdpbf16ps`).
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx512Bf16(());

#[cfg(target_arch = "x86_64")]
impl Avx512Bf16 {
    /// The AVX-512 (F) token its features include.
    pub(crate) fn avx512(self) -> Avx512 {
        Avx512(())
    }
}

#[cfg(target_arch = "x86_64")]
impl Token for Avx512Bf16 {
    const REQUIRES: Features = Features::of(&[
        crate::cpu::Feature::Avx512F,
        crate::cpu::Feature::Avx512Bf16,
    ]);
    fn new(usable: Features) -> Option<Avx512Bf16> {
        admits::<Avx512Bf16>(usable).then_some(Avx512Bf16(()))
    }
}

#[cfg(target_arch = "x86_64")]
/// The 8 × 8 transpose of registers: lane i of output q is lane q of input i. Unpacks
/// within 128-bit lanes, then lane permutes. Used by the AVX2 GEMM's packing and transposed
/// stores, the depthwise backward filter's channel blocks and the layout transform's tiles.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) fn transpose8(r: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    let mut t = [_mm256_setzero_ps(); 8];
    for i in 0..4 {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let pd = _mm256_castps_pd;
    let ps = _mm256_castpd_ps;
    // u[4g + c]: column c (+ 4 in the high lane) of rows 4g .. 4g + 4.
    let mut u = [_mm256_setzero_ps(); 8];
    for g in 0..2 {
        let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
        u[4 * g] = ps(_mm256_unpacklo_pd(pd(a), pd(c)));
        u[4 * g + 1] = ps(_mm256_unpackhi_pd(pd(a), pd(c)));
        u[4 * g + 2] = ps(_mm256_unpacklo_pd(pd(b), pd(d)));
        u[4 * g + 3] = ps(_mm256_unpackhi_pd(pd(b), pd(d)));
    }
    let mut out = [_mm256_setzero_ps(); 8];
    for c in 0..4 {
        out[c] = _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c]);
        out[c + 4] = _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c]);
    }
    out
}

#[cfg(target_arch = "x86_64")]
/// The 16 × 16 transpose of registers: lane i of output q is lane q of input i. Two unpack
/// stages within 128-bit lanes, then two stages of lane shuffles. Used by the GEMM's
/// transposed stores, the Winograd transforms' channel blocks and the layout transform.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) fn transpose16(r: [std::arch::x86_64::__m512; 16]) -> [std::arch::x86_64::__m512; 16] {
    use std::arch::x86_64::*;
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4g + c]: column c (+ 4 per lane) of rows 4g .. 4g + 4, one row group per lane.
    let mut u = [_mm512_setzero_ps(); 16];
    for g in 0..4 {
        let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
        let pd = _mm512_castps_pd;
        let ps = _mm512_castpd_ps;
        u[4 * g] = ps(_mm512_unpacklo_pd(pd(a), pd(c)));
        u[4 * g + 1] = ps(_mm512_unpackhi_pd(pd(a), pd(c)));
        u[4 * g + 2] = ps(_mm512_unpacklo_pd(pd(b), pd(d)));
        u[4 * g + 3] = ps(_mm512_unpackhi_pd(pd(b), pd(d)));
    }
    let mut res = [_mm512_setzero_ps(); 16];
    for c in 0..4 {
        let v0 = _mm512_shuffle_f32x4::<0x88>(u[c], u[4 + c]);
        let v1 = _mm512_shuffle_f32x4::<0xDD>(u[c], u[4 + c]);
        let w0 = _mm512_shuffle_f32x4::<0x88>(u[8 + c], u[12 + c]);
        let w1 = _mm512_shuffle_f32x4::<0xDD>(u[8 + c], u[12 + c]);
        let out = [
            (c, _mm512_shuffle_f32x4::<0x88>(v0, w0)),
            (c + 8, _mm512_shuffle_f32x4::<0xDD>(v0, w0)),
            (c + 4, _mm512_shuffle_f32x4::<0x88>(v1, w1)),
            (c + 12, _mm512_shuffle_f32x4::<0xDD>(v1, w1)),
        ];
        for (q, x) in out {
            res[q] = x;
        }
    }
    res
}

/// Asks for the cache lines of the `bytes` bytes from `at` in L2: [`fetch_to_l2`] for a
/// range known only by address (a hint: any address, even outside every allocation, is
/// fine: the pointer is never dereferenced).
#[inline(always)]
pub(crate) fn fetch_range_to_l2(at: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    for off in (0..bytes).step_by(64) {
        // SAFETY: SSE is part of the x86-64 baseline; a prefetch never faults, whatever the
        // address (wrapping arithmetic: no pointer is created out of an allocation's
        // provenance in a way that is read).
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(
                at.wrapping_add(off).cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, bytes);
}

/// Asks for `run`'s cache lines in L2 (a hint: never faults), for data a loop reads next
/// from a place the hardware prefetchers cannot guess: the depthwise backward filter's next
/// image, the batch norm's next plane of a channel.
#[inline(always)]
pub(crate) fn fetch_to_l2(run: &[f32]) {
    fetch_range_to_l2(run.as_ptr().cast(), std::mem::size_of_val(run));
}

/// Defines `fn NAME(features: Features, ARGS...) -> R` that runs BODY compiled for the widest
/// family within `features` (AVX-512, AVX2 + FMA, else the portable build): BODY is written
/// once, as plain loops the compiler vectorises (see `crate::vmath` for the functions that
/// vectorise inside them), and instantiated inside one `#[target_feature]` entry point per
/// family. This is the style of the memory-bound operators (`crate::layers`), whose loops
/// need no hand-written intrinsics to reach the memory's bandwidth.
macro_rules! multiversion {
    ($(#[$attr:meta])* $vis:vis fn $name:ident ( $($arg:ident : $t:ty),* $(,)? ) $(-> $ret:ty)? $body:block) => {
        $(#[$attr])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name(features: $crate::cpu::Features, $($arg: $t),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body($($arg: $t),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f")]
            #[allow(clippy::too_many_arguments)]
            fn avx512(_: $crate::simd::Avx512, $($arg: $t),*) $(-> $ret)? {
                body($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            fn avx2(_: $crate::simd::Avx2, $($arg: $t),*) $(-> $ret)? {
                body($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            {
                use $crate::simd::Token;
                if let Some(t) = $crate::simd::Avx512::new(features) {
                    // SAFETY: the token proves the CPU runs AVX-512F.
                    return unsafe { avx512(t, $($arg),*) };
                }
                if let Some(t) = $crate::simd::Avx2::new(features) {
                    // SAFETY: the token proves the CPU runs AVX2 and FMA.
                    return unsafe { avx2(t, $($arg),*) };
                }
            }
            let _ = features;
            body($($arg),*)
        }
    };
}
pub(crate) use multiversion;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::Isa;

    #[test]
    fn tokens_follow_the_usable_features() {
        assert!(<Scalar as Token>::new(Features::EMPTY).is_some());
        #[cfg(target_arch = "x86_64")]
        for isa in Isa::ALL {
            let usable = isa.usable();
            assert_eq!(
                Avx2::new(usable).is_some(),
                usable.contains_all(Avx2::REQUIRES)
            );
            assert_eq!(
                Avx512::new(usable).is_some(),
                usable.contains_all(Avx512::REQUIRES)
            );
            // Asking for more than the CPU has never makes a token it cannot honour.
            assert_eq!(
                Avx512::new(Features::all()).is_some(),
                Features::detected().contains(crate::cpu::Feature::Avx512F)
            );
            assert!(Avx2::new(Features::EMPTY).is_none());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = Isa::ALL;
    }
}
