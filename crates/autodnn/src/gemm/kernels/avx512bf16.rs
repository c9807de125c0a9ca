//! The AVX512-BF16 kernel family: bf16 operands, f32 accumulators, a 32 × 14 register tile.
//!
//! `vdpbf16ps` multiplies 16 pairs of bf16 values by 16 pairs and adds both products to 16
//! f32 lanes: per pair of depth steps, two 32-element vectors of A (32 rows × 2 depths) are
//! loaded and each of 14 pairs of B is broadcast into 2 dot products, 28 accumulators as in
//! the f32 family but twice the multiply-adds per instruction. The panels hold pairs along
//! the depth ([`super::PackFormat::Bf16Pairs`]): the frame packs f32 panels as for every
//! family and [`to_pairs`] rounds them to bf16 (to nearest even) in place.
//!
//! The instruction computes each lane as `acc + a₁·b₁ + a₀·b₀` with the products exact in f32
//! (8-bit significands) and two f32 roundings, and treats subnormal bf16 inputs as zero, as
//! its conversion from f32 does; outputs below the normal range flush to zero.

use std::arch::x86_64::*;

use super::{KernelSet, PackFormat, Tile};
use crate::cpu::{Feature, Features};
use crate::desc::DataType;
use crate::gemm::blocking::{Blocking, ASSUMED_CACHES};

/// Vectors of 16 lanes per column of the tile.
const MV: usize = 2;
const MR: usize = 16 * MV;
const NR: usize = 14;

/// The features the family's kernels use.
const REQUIRES: Features = Features::of(&[Feature::Avx512F, Feature::Avx512Bf16]);

pub(crate) fn kernel_set() -> KernelSet {
    let f32_blocks = Blocking::for_tile(MR, NR, ASSUMED_CACHES);
    KernelSet {
        name: "avx512bf16-32x14",
        requires: REQUIRES,
        operand: DataType::Bf16,
        accumulator: DataType::F32,
        packing: PackFormat::Bf16Pairs,
        // Packed pairs take half the bytes of f32 panels: twice the depth per block keeps
        // the same bytes in L1 and L2 (and halves the passes over C).
        blocking: Blocking {
            kc: f32_blocks.kc * 2,
            ..f32_blocks
        },
        ukr: kernel::<NR>,
        edge: &EDGE,
        epilogue: super::avx512::epilogue,
        transposer: Some(&super::avx512::TRANSPOSER),
        b_in_place: &[],
        b_in_place_rows: &[],
        packs_a: false,
        fuses_epilogue: true,
        pairs: Some(&PAIRS),
        tiles: None,
        min_depth: 1,
        unit_peak: Some(crate::gemm::peak::avx512_bf16_chains),
    }
}

/// Both operands' panels are plain pair panels.
static PAIRS: super::PairsConversion = super::PairsConversion {
    a_from_f32: to_pairs,
    b_from_f32: to_pairs,
    a_from_pairs: None,
    b_from_pairs: None,
};

/// Kernels for a ragged last column panel of n < NR columns (`EDGE[n − 1]`).
static EDGE: [super::UKernel; NR - 1] = [
    kernel::<1>,
    kernel::<2>,
    kernel::<3>,
    kernel::<4>,
    kernel::<5>,
    kernel::<6>,
    kernel::<7>,
    kernel::<8>,
    kernel::<9>,
    kernel::<10>,
    kernel::<11>,
    kernel::<12>,
    kernel::<13>,
];

/// The micro-kernel, `32 × NRN`, on pair panels: A's pair step q holds rows 0 .. 32 at
/// `a + q·32` (32-bit slots, each the bf16 pair of depths 2q and 2q + 1), B's at `b + q·NR`.
///
/// # Safety
/// The contract of [`super::UKernel`] with MR = 32, NR = 14, n ≤ NRN, where A and B are pair
/// panels of `ceil(k / 2)` steps (`t.lda` = MR).
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn kernel<const NRN: usize>(t: &Tile) {
    let mut acc = [[_mm512_setzero_ps(); MV]; NRN];
    let (mut a, mut b) = (t.a.cast::<i32>(), t.b.cast::<i32>());
    for _ in 0..t.k.div_ceil(2) {
        let mut av = [_mm512_setzero_si512(); MV];
        for (v, x) in av.iter_mut().enumerate() {
            // SAFETY: slots v·16 .. v·16 + 16 < MR of this pair step are readable (contract).
            *x = unsafe { _mm512_loadu_si512(a.add(16 * v).cast()) };
        }
        for (j, acc) in acc.iter_mut().enumerate() {
            // SAFETY: column j < NRN ≤ NR of this pair step is readable (contract).
            let bj = _mm512_set1_epi32(unsafe { *b.add(j) });
            for (c, x) in acc.iter_mut().zip(&av) {
                *c = _mm512_dpbf16_ps(*c, bh(*x), bh(bj));
            }
        }
        // The last step moves past the panels; wrapping arithmetic keeps that defined.
        a = a.wrapping_add(MR);
        b = b.wrapping_add(NR);
    }
    // SAFETY: the C tile is the caller's contract, with m ≤ MR and n ≤ NRN.
    unsafe { super::avx512::store::<MV, NRN>(acc, t) }
}

/// 32 bf16 values (16 pairs) from their bits.
#[inline(always)]
fn bh(x: __m512i) -> __m512bh {
    // SAFETY: both are 64-byte vectors of plain bits; every bit pattern is a valid value of
    // either.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(x) }
}

/// Rounds a packed f32 panel of `kc` rows of `w` floats (element (p, j) at `p·w + j`) to bf16
/// pairs in place: 32-bit slot (q, j) at `q·w + j` holds element (2q, j) in its low half and
/// (2q + 1, j) in its high half (zero past `kc`), `ceil(kc / 2)·w` slots in all. Round to
/// nearest even; NaN stays NaN; subnormal inputs become zero.
///
/// # Safety
/// The CPU has AVX512F and AVX512-BF16; `buf` is readable and writable for `kc·w` floats.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) unsafe fn to_pairs(buf: *mut f32, w: usize, kc: usize) {
    // In place, front to back: slot (q, j) is written after its two sources (2q, j) and
    // (2q + 1, j) are read, and every later source, (2q', j') with q' ≥ q, lies at or past
    // 2q·w ≥ q·w + w for q ≥ 1 (for q = 0, past the chunk being written): nothing unread is
    // overwritten.
    for q in 0..kc.div_ceil(2) {
        let r0 = buf.wrapping_add(2 * q * w);
        let r1 = buf.wrapping_add((2 * q + 1) * w);
        let second = 2 * q + 1 < kc;
        let dst = buf.wrapping_add(q * w).cast::<i32>();
        for c in (0..w).step_by(16) {
            let mask = ((1u32 << (w - c).min(16)) - 1) as __mmask16;
            // SAFETY: the enabled lanes are columns c .. min(c + 16, w) of rows 2q and
            // (when `second`) 2q + 1 < kc: inside the buffer; the store writes the same
            // columns of slot row q ≤ 2q, also inside.
            unsafe {
                let v0 = _mm512_maskz_loadu_ps(mask, r0.add(c));
                let v1 = if second {
                    _mm512_maskz_loadu_ps(mask, r1.add(c))
                } else {
                    _mm512_setzero_ps()
                };
                let lo = _mm512_cvtepu16_epi32(bits16(_mm512_cvtneps_pbh(v0)));
                let hi =
                    _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits16(_mm512_cvtneps_pbh(v1))));
                _mm512_mask_storeu_epi32(dst.add(c), mask, _mm512_or_si512(lo, hi));
            }
        }
    }
}

/// Pair panels straight from f32 columns (what [`to_pairs`] makes of their f32 panels, the
/// same bits), walked by [`crate::gemm::pack::pair_steps`] (rows contiguous in `src`, column c
/// at `c·cs`, the columns `ahead` steps on prefetched; `w ≤ 32`).
///
/// # Safety
/// The CPU has AVX512F and AVX512-BF16 (the token proves it). Every index is checked
/// against the slices.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) unsafe fn pairs_from_f32_columns(
    _: crate::simd::Avx512Bf16,
    src: &[f32],
    cs: usize,
    geometry: (usize, usize, usize, usize, usize),
    ahead: usize,
    dst: &mut [f32],
) {
    let low = |n: usize| ((1u32 << n.min(16)) - 1) as __mmask16;
    crate::gemm::pack::pair_steps(src, cs, geometry, ahead, dst, |out, lo, hi| {
        let (rv, w) = (lo.len(), out.len());
        let hi = hi.unwrap_or(&[]);
        for e in (0..w).step_by(16) {
            let m_in = low(rv.saturating_sub(e));
            let m_hi = if hi.is_empty() { 0 } else { m_in };
            // SAFETY: the token proves AVX512F and AVX512-BF16; the enabled input lanes are
            // elements e .. rv of `lo` (and of `hi` where it is present), the enabled output
            // lanes elements e .. w of `out`; masked-off lanes are not accessed.
            unsafe {
                let a = _mm512_maskz_loadu_ps(m_in, lo.as_ptr().wrapping_add(e));
                let b = _mm512_maskz_loadu_ps(m_hi, hi.as_ptr().wrapping_add(e));
                let l = _mm512_cvtepu16_epi32(bits16(_mm512_cvtneps_pbh(a)));
                let h =
                    _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits16(_mm512_cvtneps_pbh(b))));
                let o = out.as_mut_ptr().wrapping_add(e).cast::<i32>();
                _mm512_mask_storeu_epi32(o, low(w - e), _mm512_or_si512(l, h));
            }
        }
    });
}

/// The bits of 16 bf16 values.
#[inline(always)]
fn bits16(x: __m256bh) -> __m256i {
    // SAFETY: both are 32-byte vectors of plain bits.
    unsafe { std::mem::transmute::<__m256bh, __m256i>(x) }
}
