//! The AVX-512 kernel family: a 32 × 14 register tile. Per depth step, two 16-lane vectors
//! of A are loaded and each of 14 values of B is broadcast into 2 fused multiply-adds:
//! 28 accumulators + 2 A vectors + 1 broadcast = 31 of the 32 zmm registers, and 16 loads
//! per 28 FMAs, well inside the load ports' budget.

use std::arch::x86_64::*;

use super::{update_general, KernelSet, Tile};
use crate::gemm::blocking::{Blocking, ASSUMED_CACHES};
use crate::gemm::epilogue::{FrameEpilogue, TileView};

/// Vectors of 16 lanes per column of the tile.
const MV: usize = 2;
const MR: usize = 16 * MV;
const NR: usize = 14;

pub(crate) fn kernel_set() -> KernelSet {
    KernelSet {
        name: "avx512-32x14",
        blocking: Blocking::for_tile(MR, NR, ASSUMED_CACHES),
        ukr: kernel::<MV, NR>,
        epilogue,
    }
}

fn epilogue(e: &FrameEpilogue<'_>, t: &mut TileView<'_>, i0: usize, j0: usize) {
    #[target_feature(enable = "avx512f")]
    fn inner(e: &FrameEpilogue<'_>, t: &mut TileView<'_>, i0: usize, j0: usize) {
        e.apply_tile(t, i0, j0)
    }
    // SAFETY: this family is only chosen when the CPU has AVX-512F (kernel_set never
    // exceeds Isa::best_available).
    unsafe { inner(e, t, i0, j0) }
}

/// The lanes of vector `v` of an `m`-row column that are valid.
#[inline(always)]
fn lane_mask(m: usize, v: usize) -> __mmask16 {
    let valid = m.saturating_sub(v * 16).min(16);
    ((1u32 << valid) - 1) as __mmask16
}

/// The AVX-512 micro-kernel, `16·MVN × NRN`.
///
/// # Safety
/// The contract of [`super::UKernel`] with MR = 16·MVN, NR = NRN.
#[target_feature(enable = "avx512f")]
unsafe fn kernel<const MVN: usize, const NRN: usize>(t: &Tile) {
    let mut acc = [[_mm512_setzero_ps(); MVN]; NRN];
    let (mut a, mut b) = (t.a, t.b);
    if t.rs_c == 1 {
        // Bring the C tile towards L1 while the product is computed.
        for j in 0..t.n {
            let col = t.c.wrapping_add(j * t.cs_c);
            for v in 0..MVN {
                // A prefetch is a hint: it never faults, whatever the address.
                _mm_prefetch::<_MM_HINT_T0>(col.wrapping_add(16 * v).cast());
            }
        }
    }
    for _ in 0..t.k {
        let mut av = [_mm512_setzero_ps(); MVN];
        for (v, x) in av.iter_mut().enumerate() {
            // SAFETY: rows v·16 .. v·16 + 16 < MR of this depth step are readable (contract).
            *x = unsafe { _mm512_loadu_ps(a.add(16 * v)) };
        }
        for (j, acc) in acc.iter_mut().enumerate() {
            // SAFETY: column j < NR of this depth step of the packed B panel is readable.
            let bj = _mm512_set1_ps(unsafe { *b.add(j) });
            for (c, x) in acc.iter_mut().zip(&av) {
                *c = _mm512_fmadd_ps(*x, bj, *c);
            }
        }
        // The last step moves past the panels; wrapping arithmetic keeps that defined.
        a = a.wrapping_add(t.lda);
        b = b.wrapping_add(NRN);
    }
    if t.rs_c == 1 {
        let alpha = _mm512_set1_ps(t.alpha);
        let beta = _mm512_set1_ps(t.beta);
        for (j, acc) in acc.iter().enumerate() {
            if j >= t.n {
                break;
            }
            let col = t.c.wrapping_add(j * t.cs_c);
            for (v, x) in acc.iter().enumerate() {
                let mask = lane_mask(t.m, v);
                if mask == 0 {
                    break;
                }
                let p = col.wrapping_add(v * 16);
                let mut y = _mm512_mul_ps(*x, alpha);
                // SAFETY: masked loads and stores touch only the enabled lanes: rows below
                // m of column j, inside the tile (contract, rs_c = 1); disabled lanes are
                // not accessed and cannot fault.
                unsafe {
                    if t.beta != 0.0 {
                        y = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, p), beta, y);
                    }
                    _mm512_mask_storeu_ps(p, mask, y);
                }
            }
        }
    } else {
        let mut flat = [[[0f32; 16]; MVN]; NRN];
        for (f, acc) in flat.iter_mut().zip(&acc) {
            for (f, x) in f.iter_mut().zip(acc) {
                // SAFETY: f is 16 writable floats.
                unsafe { _mm512_storeu_ps(f.as_mut_ptr(), *x) };
            }
        }
        // SAFETY: the tile contract is the caller's; flat holds MR·NR values.
        unsafe { update_general::<true>(flat.as_flattened().as_flattened(), 16 * MVN, t) }
    }
}
