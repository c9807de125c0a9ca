//! The AMX-BF16 kernel family: bf16 operands multiplied by the tile unit (`tdpbf16ps`), f32
//! accumulators, a 32 × 32 register tile held in four 16 × 16 accumulator tiles.
//!
//! One `tdpbf16ps` multiplies a 16-row tile of 16 bf16 pairs per row (32 depths) by a tile
//! of 16 pair rows of 16 columns and adds the 16 × 16 × 32 products to an f32 tile: per 32
//! depths the kernel loads two tiles of each operand and runs four multiplies, 32 768
//! multiply-adds, several times what the f32 vector units do in the same time (measured by
//! [`unit_peak`]; [`crate::Bf16Units::Auto`] asks for it).
//!
//! In the tile unit's terms the kernel computes the transposed tile, Cᵀ = B'ᵀ·A': its
//! "A" tiles are B's columns (one tile row per column of C, its depth pairs contiguous) and
//! its "B" tiles are A's pair panels as the other bf16 family packs them (one tile row per
//! pair step, 16 rows of A in it). Cᵀ's rows are then C's columns, whose elements are
//! contiguous where the vector side is (`rs_c = 1`): the kernel stores the accumulator tiles
//! straight into C there (and loads them from C to accumulate), elsewhere through the
//! AVX-512 family's store.
//!
//! Panels ([`super::PackFormat::AmxTiles`]):
//! - A: the pair panel (pair step q of row i at slot `q·32 + i`), its pair steps zero-filled
//!   from `ceil(kc / 2)` up to a multiple of 16, so that every tile is whole;
//! - B: for each block of 16 pair steps (32 depths), the panel's 32 columns one after the
//!   other, 16 slots each (column j of block b at slot `(b·32 + j)·16`), zero past the depth.
//!
//! Both fit the f32 panel's `kc·32` elements when `kc ≥ 16`, the family's least depth;
//! shallower products run on the next family.
//!
//! The tiles' shape is set once per block of micro-kernel calls ([`super::TileState`]):
//! loading a tile configuration takes about 100 ns here, a tenth of a kernel call.
//!
//! Rounding: the operands are rounded to bf16 (to nearest even, subnormals to zero) when
//! packed, each product is exact in f32, and the sums are f32 with subnormal results
//! flushed to zero, as for the AVX512-BF16 family; the order of the sums within a tile
//! multiply is the unit's.

use std::arch::asm;
use std::arch::x86_64::*;

use super::{KernelSet, PackFormat, PairsConversion, Tile, TileState};
use crate::cpu::Features;
use crate::desc::DataType;
use crate::gemm::blocking::{Blocking, ASSUMED_CACHES};

const MR: usize = 32;
const NR: usize = 32;
/// Pair steps per tile multiply (a tile row of 64 bytes holds 16 pairs).
const STEPS: usize = 16;
/// Bytes of one block of 16 pair steps of a panel (either operand): 16 × 32 slots.
const BLOCK_BYTES: usize = STEPS * 32 * 4;

pub(crate) fn kernel_set() -> KernelSet {
    KernelSet {
        name: "amx-bf16-32x32",
        requires: Features::AMX_BF16,
        operand: DataType::Bf16,
        accumulator: DataType::F32,
        packing: PackFormat::AmxTiles,
        blocking: Blocking::for_tile(MR, NR, ASSUMED_CACHES),
        ukr: kernel,
        edge: &[],
        epilogue: super::avx512::epilogue,
        transposer: Some(&super::avx512::TRANSPOSER),
        b_in_place: &[],
        b_in_place_rows: &[],
        packs_a: false,
        fuses_epilogue: false,
        pairs: Some(&PAIRS),
        tiles: Some(&TILES),
        min_depth: STEPS,
        unit_peak: Some(unit_peak),
    }
}

static PAIRS: PairsConversion = PairsConversion {
    a_from_f32,
    b_from_f32,
    a_from_pairs: Some(pad_a),
    b_from_pairs: Some(b_from_pairs),
};

static TILES: TileState = TileState {
    begin: configure,
    end: release,
};

/// A tile configuration (palette 1): bytes per row and rows of each of the 8 tiles.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

/// Every tile 16 rows of 64 bytes: tmm0 to tmm3 accumulate Cᵀ (tile (g, h) = tmm(2g + h):
/// columns 16g .. 16g + 16 of C, rows 16h .. 16h + 16), tmm4 and tmm5 hold B's columns
/// 0 .. 16 and 16 .. 32, tmm6 and tmm7 A's rows 0 .. 16 and 16 .. 32.
static CONFIG: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// Loads the tile configuration.
///
/// # Safety
/// The CPU has AMX tiles and the operating system granted this process their state.
unsafe fn configure() {
    // SAFETY: the caller's contract; `CONFIG` is a valid 64-byte palette-1 configuration.
    unsafe { asm!("ldtilecfg [{0}]", in(reg) &CONFIG, options(nostack, readonly)) };
}

/// Returns the tiles to their initial state.
///
/// # Safety
/// As [`configure`].
unsafe fn release() {
    // SAFETY: the caller's contract.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// The micro-kernel, 32 × 32, on tile panels (see the module docs), depth `t.k`.
///
/// # Safety
/// The contract of [`super::UKernel`] with MR = NR = 32 and `t.k ≥ 16`, where A and B are
/// panels of [`PackFormat::AmxTiles`] of `ceil(ceil(k / 2) / 16)` blocks each, and
/// [`configure`] has run on this thread since the tiles were last used otherwise.
#[target_feature(enable = "avx512f")]
unsafe fn kernel(t: &Tile) {
    let blocks = t.k.div_ceil(2).div_ceil(STEPS);
    // C's columns contiguous and the whole tile wanted as it is: the accumulators go
    // straight to C (and start from it when accumulating).
    let direct =
        t.rs_c == 1 && t.m == MR && t.n == NR && t.alpha == 1.0 && (t.beta == 0.0 || t.beta == 1.0);
    let c_stride = t.cs_c.wrapping_mul(4);
    // Tile (g, h) of Cᵀ: columns 16g.., rows 16h.. of C.
    let c_at = |g: usize, h: usize| t.c.wrapping_add(16 * g * t.cs_c + 16 * h);
    // SAFETY (every block): the tiles are configured (contract); the loads and stores touch
    // 16 rows of 64 bytes: C's elements of the tile (rows i < 32 = m, columns j < 32 = n,
    // `stride` apart) when `direct`, the panels' blocks (each 2 KiB, `blocks` of them,
    // contract) or `acc` (4 KiB) otherwise.
    unsafe {
        if direct && t.beta == 1.0 {
            asm!(
                "tileloadd tmm0, [{c0} + {s}*1]",
                "tileloadd tmm1, [{c1} + {s}*1]",
                "tileloadd tmm2, [{c2} + {s}*1]",
                "tileloadd tmm3, [{c3} + {s}*1]",
                c0 = in(reg) c_at(0, 0),
                c1 = in(reg) c_at(0, 1),
                c2 = in(reg) c_at(1, 0),
                c3 = in(reg) c_at(1, 1),
                s = in(reg) c_stride,
                options(nostack, readonly),
            );
        } else {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
        }
        let (a, b) = (t.a.cast::<u8>(), t.b.cast::<u8>());
        for blk in 0..blocks {
            let (a, b) = (a.add(blk * BLOCK_BYTES), b.add(blk * BLOCK_BYTES));
            asm!(
                "tileloadd tmm4, [{b0} + {s64}*1]",
                "tileloadd tmm6, [{a0} + {s128}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tileloadd tmm7, [{a1} + {s128}*1]",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{b1} + {s64}*1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                // B's columns 0 .. 16 and 16 .. 32: rows of 16 slots.
                b0 = in(reg) b,
                b1 = in(reg) b.add(16 * STEPS * 4),
                // A's rows 0 .. 16 and 16 .. 32 of each pair step (32 slots a step).
                a0 = in(reg) a,
                a1 = in(reg) a.add(16 * 4),
                s64 = in(reg) STEPS * 4,
                s128 = in(reg) MR * 4,
                options(nostack, readonly),
            );
        }
        if direct {
            asm!(
                "tilestored [{c0} + {s}*1], tmm0",
                "tilestored [{c1} + {s}*1], tmm1",
                "tilestored [{c2} + {s}*1], tmm2",
                "tilestored [{c3} + {s}*1], tmm3",
                c0 = in(reg) c_at(0, 0),
                c1 = in(reg) c_at(0, 1),
                c2 = in(reg) c_at(1, 0),
                c3 = in(reg) c_at(1, 1),
                s = in(reg) c_stride,
                options(nostack),
            );
            return;
        }
        // acc[j][v]: column j of C, rows 16v .. 16v + 16, as the AVX-512 store takes it.
        let mut acc = [[_mm512_setzero_ps(); 2]; NR];
        let base = acc.as_mut_ptr().cast::<f32>();
        asm!(
            "tilestored [{c0} + {s}*1], tmm0",
            "tilestored [{c1} + {s}*1], tmm1",
            "tilestored [{c2} + {s}*1], tmm2",
            "tilestored [{c3} + {s}*1], tmm3",
            c0 = in(reg) base,
            c1 = in(reg) base.add(16),
            c2 = in(reg) base.add(16 * MR),
            c3 = in(reg) base.add(16 * MR + 16),
            s = in(reg) MR * 4,
            options(nostack),
        );
        super::avx512::store::<2, NR>(acc, t);
    }
}

/// One thread's peak loop: `iters` rounds of four independent tile multiplies; returns the
/// flops done (2 per multiply-add).
///
/// # Safety
/// The CPU has the family's features (AMX tiles granted by the operating system).
unsafe fn unit_peak(iters: u64) -> u64 {
    #[repr(align(64))]
    struct Zeros([u8; 1024]);
    let zeros = Zeros([0; 1024]);
    // SAFETY: the caller's contract; every tile load reads 16 rows of 64 bytes of `zeros`.
    unsafe {
        configure();
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tileloadd tmm4, [{z} + {s}*1]",
            "tileloadd tmm5, [{z} + {s}*1]",
            "tileloadd tmm6, [{z} + {s}*1]",
            "tileloadd tmm7, [{z} + {s}*1]",
            z = in(reg) zeros.0.as_ptr(),
            s = in(reg) 64usize,
            options(nostack, readonly),
        );
        for _ in 0..iters {
            asm!(
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                options(nostack, nomem),
            );
        }
        release();
    }
    iters * 4 * (16 * 16 * 32 * 2)
}

/// Zero-fills the pair steps of a pair panel (`w` wide, depth `kc`) from `ceil(kc / 2)` up
/// to a multiple of 16, within the panel's `kc·w` elements.
///
/// # Safety
/// `buf` is readable and writable for `kc·w` floats.
unsafe fn pad_a(buf: *mut f32, w: usize, kc: usize) {
    let steps = kc.div_ceil(2);
    let end = (steps.div_ceil(STEPS) * STEPS).min(kc);
    if end > steps {
        // SAFETY: slots steps·w .. end·w ≤ kc·w lie in the buffer (contract).
        unsafe { std::ptr::write_bytes(buf.add(steps * w), 0, (end - steps) * w) };
    }
}

/// An f32 A panel into the A tile format: pairs, then the padding steps zeroed.
///
/// # Safety
/// As [`super::PairsFn`].
unsafe fn a_from_f32(buf: *mut f32, w: usize, kc: usize) {
    // SAFETY: the family requires AVX512-BF16 (the caller's contract); same buffer.
    unsafe {
        super::avx512bf16::to_pairs(buf, w, kc);
        pad_a(buf, w, kc);
    }
}

/// An f32 B panel (`w ≤ 32` columns, element (p, j) at `p·w + j`) into the B tile format:
/// block b of 32 depths holds column j's 32 values rounded to bf16 (to nearest even) at
/// slots `(b·w + j)·16 ..`, zero past `kc`. Panels shallower than 16 (never run by the
/// kernel) are left as they are.
///
/// # Safety
/// As [`super::PairsFn`], with `w ≤ 32`.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn b_from_f32(buf: *mut f32, w: usize, kc: usize) {
    if kc < STEPS || w > NR || w == 0 {
        return;
    }
    // In place, block after block: block b's output (16·w slots at 16·w·b) ends where its
    // source (rows 32b ..) starts, for b ≥ 1, and overlaps only earlier blocks' sources,
    // already read; block 0's source is copied out first. 16·w·ceil(kc / 32) ≤ kc·w for
    // kc ≥ 16: the output stays inside the panel.
    let mut src = [0f32; 32 * NR];
    let idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(w as i32),
    );
    for b in 0..kc.div_ceil(32) {
        let rows = (kc - 32 * b).min(32);
        // SAFETY: rows 32b .. 32b + rows ≤ kc of the panel are inside it (contract); `src`
        // holds 32·w ≥ rows·w floats.
        unsafe { std::ptr::copy_nonoverlapping(buf.add(32 * b * w), src.as_mut_ptr(), rows * w) };
        src[rows * w..32 * w].fill(0.0);
        for j in 0..w {
            // SAFETY: the gathers read src[p·w + j] for p < 32, inside its 32·w floats; the
            // store writes 16 slots at (b·w + j)·16 < 16·w·ceil(kc / 32) ≤ kc·w (above).
            unsafe {
                let lo = _mm512_i32gather_ps::<4>(idx, src.as_ptr().add(j).cast());
                let hi = _mm512_i32gather_ps::<4>(idx, src.as_ptr().add(16 * w + j).cast());
                let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
                _mm512_storeu_si512(buf.add((b * w + j) * STEPS).cast(), v);
            }
        }
    }
}

/// A pair B panel (`w ≤ 32` columns, pair step q of column j at slot `q·w + j`) into the B
/// tile format, moving the slots only; panels shallower than 16 are left as they are.
///
/// # Safety
/// As [`super::PairsFn`], with `w ≤ 32`.
#[target_feature(enable = "avx512f")]
unsafe fn b_from_pairs(buf: *mut f32, w: usize, kc: usize) {
    if kc < STEPS || w > NR || w == 0 {
        return;
    }
    // In place: block b's output occupies exactly its source's 16·w slots (copied out
    // first); the last block's output may reach past its source, still inside kc·w.
    let steps = kc.div_ceil(2);
    let slots = buf.cast::<i32>();
    let mut src = [0i32; STEPS * NR];
    let idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(w as i32),
    );
    for b in 0..steps.div_ceil(STEPS) {
        let n = (steps - STEPS * b).min(STEPS);
        // SAFETY: pair steps 16b .. 16b + n ≤ ceil(kc / 2) lie in the panel (contract).
        unsafe { std::ptr::copy_nonoverlapping(slots.add(STEPS * b * w), src.as_mut_ptr(), n * w) };
        src[n * w..STEPS * w].fill(0);
        for j in 0..w {
            // SAFETY: the gather reads src[q·w + j], q < 16, inside its 16·w slots; the
            // store writes 16 slots at (b·w + j)·16 < 16·w·ceil(steps / 16) ≤ kc·w.
            unsafe {
                let v = _mm512_i32gather_epi32::<4>(idx, src.as_ptr().add(j).cast());
                _mm512_storeu_si512(slots.add((b * w + j) * STEPS).cast(), v);
            }
        }
    }
}

/// Where depth `d` of column (or row) `j` of a panel `w` wide lies in this family's
/// format, for the B side (`b_side`) or the A side: (slot, whether in the high half).
pub(crate) fn slot_of(d: usize, j: usize, w: usize, b_side: bool) -> (usize, bool) {
    let half = d % 2 == 1;
    if b_side {
        ((d / 32 * w + j) * STEPS + d % 32 / 2, half)
    } else {
        (d / 2 * w + j, half)
    }
}
