//! The portable kernel family: plain Rust, no target-specific code, so the crate builds and
//! runs everywhere. The compiler vectorises the fixed-size accumulator loops for whatever
//! the target's baseline offers (SSE2 on x86-64, NEON on AArch64).

use super::{update_general, KernelSet, PackFormat, Tile};
use crate::cpu::Features;
use crate::desc::DataType;
use crate::gemm::blocking::{Blocking, ASSUMED_CACHES};
use crate::gemm::epilogue::{FrameEpilogue, TileView};

/// Register tile: 8 × 4 = 32 accumulators (8 SSE registers).
const MR: usize = 8;
const NR: usize = 4;

pub(crate) fn kernel_set() -> KernelSet {
    KernelSet {
        name: "scalar-8x4",
        requires: Features::EMPTY,
        operand: DataType::F32,
        accumulator: DataType::F32,
        packing: PackFormat::F32Panels,
        blocking: Blocking::for_tile(MR, NR, ASSUMED_CACHES),
        ukr: kernel,
        edge: &[],
        epilogue,
        transposer: None,
        b_in_place: &[],
        b_in_place_rows: &[],
        pairs: None,
        tiles: None,
        min_depth: 1,
        unit_peak: None,
        packs_a: false,
        fuses_epilogue: true,
    }
}

fn epilogue(e: &FrameEpilogue<'_>, t: &mut TileView<'_>, i0: usize, j0: usize) {
    e.apply_tile(t, i0, j0)
}

/// The portable micro-kernel.
///
/// # Safety
/// The contract of [`super::UKernel`].
unsafe fn kernel(t: &Tile) {
    debug_assert!(t.k >= 1 && t.m <= MR && t.n <= NR);
    // SAFETY: the caller guarantees these extents are readable (UKernel's contract).
    let a = unsafe { std::slice::from_raw_parts(t.a, (t.k - 1) * t.lda + MR) };
    // SAFETY: as above.
    let b = unsafe { std::slice::from_raw_parts(t.b, t.k * NR) };
    let mut acc = [[0f32; MR]; NR];
    for p in 0..t.k {
        let av: &[f32; MR] = a[p * t.lda..p * t.lda + MR].try_into().unwrap();
        let bv: &[f32; NR] = b[p * NR..p * NR + NR].try_into().unwrap();
        for (acc, &bj) in acc.iter_mut().zip(bv) {
            for (c, &ai) in acc.iter_mut().zip(av) {
                *c += ai * bj;
            }
        }
    }
    let flat: [f32; MR * NR] = std::array::from_fn(|x| acc[x / MR][x % MR]);
    // SAFETY: the tile contract is the caller's; flat holds MR·NR ≥ MR·n values.
    unsafe { update_general::<false>(&flat, MR, t) }
}
