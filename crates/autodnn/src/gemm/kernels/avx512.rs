//! The AVX-512 kernel family: a 32 × 14 register tile. Per depth step, two 16-lane vectors
//! of A are loaded and each of 14 values of B is broadcast into 2 fused multiply-adds:
//! 28 accumulators + 2 A vectors + 1 broadcast = 31 of the 32 zmm registers, and 16 loads
//! per 28 FMAs, well inside the load ports' budget.

use std::arch::x86_64::*;

use super::{update_general, KernelSet, PackFormat, Tile, TilePost, Transposer};
use crate::cpu::Features;
use crate::desc::DataType;
use crate::gemm::blocking::{Blocking, ASSUMED_CACHES};
use crate::gemm::epilogue::{FrameEpilogue, TileView};
use crate::Activation;

/// Vectors of 16 lanes per column of the tile.
const MV: usize = 2;
const MR: usize = 16 * MV;
const NR: usize = 14;

pub(crate) fn kernel_set() -> KernelSet {
    KernelSet {
        name: "avx512-32x14",
        requires: Features::AVX512F,
        operand: DataType::F32,
        accumulator: DataType::F32,
        packing: PackFormat::F32Panels,
        blocking: Blocking::for_tile(MR, NR, ASSUMED_CACHES),
        ukr: kernel::<MV, NR, NR>,
        edge: &EDGE,
        epilogue,
        transposer: Some(&TRANSPOSER),
        b_in_place: &B_IN_PLACE,
        b_in_place_rows: &B_IN_PLACE_ROWS,
        pairs: None,
        tiles: None,
        min_depth: 1,
        unit_peak: None,
        packs_a: true,
        fuses_epilogue: true,
    }
}

pub(super) fn epilogue(e: &FrameEpilogue<'_>, t: &mut TileView<'_>, i0: usize, j0: usize) {
    #[target_feature(enable = "avx512f")]
    fn inner(e: &FrameEpilogue<'_>, t: &mut TileView<'_>, i0: usize, j0: usize) {
        e.apply_tile(t, i0, j0)
    }
    // SAFETY: this family is only chosen when the CPU has AVX-512F (kernel_set picks it
    // only where its `requires` are detected and usable).
    unsafe { inner(e, t, i0, j0) }
}

/// Depth steps before the end of the product at which the C tile is prefetched. Each step is
/// about 28 cycles and streams 184 bytes of A and B through L1, so 64 steps cover more than a
/// trip to L3 and leave the tile in L1 (12 KiB streamed meanwhile). Measured against 16 steps:
/// +0.5 to 1% at 1024³ and 2048³ on one thread, unchanged at 256³ and 512³.
const C_PREFETCH_STEPS: usize = 64;

/// Depth steps ahead at which a kernel packing A (`Tile::a_pack`) prefetches its source.
const A_SOURCE_PREFETCH_STEPS: usize = 16;

/// The lanes of vector `v` of an `m`-row column that are valid.
#[inline(always)]
fn lane_mask(m: usize, v: usize) -> __mmask16 {
    let valid = m.saturating_sub(v * 16).min(16);
    ((1u32 << valid) - 1) as __mmask16
}

/// Kernels for a ragged last column panel of n < NR columns (`EDGE[n − 1]`): they compute
/// only n columns of the packed panel (whose rows stay NR apart) instead of all NR.
static EDGE: [super::UKernel; NR - 1] = [
    kernel::<MV, 1, NR>,
    kernel::<MV, 2, NR>,
    kernel::<MV, 3, NR>,
    kernel::<MV, 4, NR>,
    kernel::<MV, 5, NR>,
    kernel::<MV, 6, NR>,
    kernel::<MV, 7, NR>,
    kernel::<MV, 8, NR>,
    kernel::<MV, 9, NR>,
    kernel::<MV, 10, NR>,
    kernel::<MV, 11, NR>,
    kernel::<MV, 12, NR>,
    kernel::<MV, 13, NR>,
];

/// Kernels reading n = 1 ..= NR columns of B in place (`B_IN_PLACE[n − 1]`).
static B_IN_PLACE: [super::UKernel; NR] = [
    kernel::<MV, 1, 0>,
    kernel::<MV, 2, 0>,
    kernel::<MV, 3, 0>,
    kernel::<MV, 4, 0>,
    kernel::<MV, 5, 0>,
    kernel::<MV, 6, 0>,
    kernel::<MV, 7, 0>,
    kernel::<MV, 8, 0>,
    kernel::<MV, 9, 0>,
    kernel::<MV, 10, 0>,
    kernel::<MV, 11, 0>,
    kernel::<MV, 12, 0>,
    kernel::<MV, 13, 0>,
    kernel::<MV, 14, 0>,
];

/// Kernels reading n = 1 ..= NR columns of B in place by rows (`B_IN_PLACE_ROWS[n − 1]`).
static B_IN_PLACE_ROWS: [super::UKernel; NR] = [
    kernel::<MV, 1, ROWS>,
    kernel::<MV, 2, ROWS>,
    kernel::<MV, 3, ROWS>,
    kernel::<MV, 4, ROWS>,
    kernel::<MV, 5, ROWS>,
    kernel::<MV, 6, ROWS>,
    kernel::<MV, 7, ROWS>,
    kernel::<MV, 8, ROWS>,
    kernel::<MV, 9, ROWS>,
    kernel::<MV, 10, ROWS>,
    kernel::<MV, 11, ROWS>,
    kernel::<MV, 12, ROWS>,
    kernel::<MV, 13, ROWS>,
    kernel::<MV, 14, ROWS>,
];

/// `BS` of the kernels reading B in place by rows: each depth step's columns side by side,
/// steps `t.ldb` apart.
const ROWS: usize = usize::MAX;

/// The AVX-512 micro-kernel, `16·MVN × NRN`, reading a packed B panel whose rows are `BS ≥
/// NRN` apart, or (BS = 0) NRN columns of B in place, `t.ldb` apart and depth contiguous, or
/// (BS = [`ROWS`]) NRN contiguous columns of B in place, depth steps `t.ldb` apart.
///
/// # Safety
/// The contract of [`super::UKernel`] with MR = 16·MVN, NR = BS (or B in place when BS = 0
/// or [`ROWS`]), and n ≤ NRN.
#[target_feature(enable = "avx512f")]
unsafe fn kernel<const MVN: usize, const NRN: usize, const BS: usize>(t: &Tile) {
    // SAFETY: the caller keeps the contract, which `run` shares.
    unsafe {
        if t.a_pack.is_null() {
            run::<MVN, NRN, BS, false>(t)
        } else {
            run::<MVN, NRN, BS, true>(t)
        }
    }
}

/// [`kernel`], storing the A micro-panel it reads at `t.a_pack` when `PACK` (one loop each:
/// a branch between two loops in one function made the compiler keep the accumulators in
/// memory, so each is its own function).
///
/// # Safety
/// As [`kernel`]; with `PACK`, `t.a_pack` is writable for `k·16·MVN` floats.
#[target_feature(enable = "avx512f")]
#[inline(never)]
unsafe fn run<const MVN: usize, const NRN: usize, const BS: usize, const PACK: bool>(t: &Tile) {
    let mut acc = [[_mm512_setzero_ps(); MVN]; NRN];
    let (mut a, mut b, mut ap) = (t.a, t.b, t.a_pack);
    macro_rules! steps {
        ($count:expr) => {
            for _ in 0..$count {
                let mut av = [_mm512_setzero_ps(); MVN];
                for (v, x) in av.iter_mut().enumerate() {
                    // SAFETY: rows v·16 .. v·16 + 16 < MR of this depth step are readable
                    // (contract).
                    *x = unsafe { _mm512_loadu_ps(a.add(16 * v)) };
                }
                if PACK {
                    for (v, x) in av.iter().enumerate() {
                        // SAFETY: a_pack is writable for k·MR floats (contract); this step's
                        // MR = 16·MVN of them start at ap.
                        unsafe { _mm512_storeu_ps(ap.add(16 * v), *x) };
                    }
                    ap = ap.wrapping_add(16 * MVN);
                    // A read from its source: its rows are lda apart, often a page or more,
                    // where the hardware prefetchers stop. The first and last element of a
                    // step's MR rows and every 16th between cover its cache lines.
                    let ahead = a.wrapping_add(A_SOURCE_PREFETCH_STEPS.wrapping_mul(t.lda));
                    for r in (0..16 * MVN).step_by(16).chain([16 * MVN - 1]) {
                        // A prefetch is a hint: it never faults, whatever the address.
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(r).cast());
                    }
                } else {
                    let ahead = a.wrapping_add(super::A_PREFETCH_STEPS.wrapping_mul(t.lda));
                    for v in 0..MVN {
                        // A prefetch is a hint: it never faults, whatever the address.
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(16 * v).cast());
                    }
                }
                for (j, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: column j < NRN of this depth step of the B panel is readable
                    // (packed or in place by rows: at j; in place: at j·ldb).
                    let bj = _mm512_set1_ps(unsafe { *b.add(if BS == 0 { j * t.ldb } else { j }) });
                    for (c, x) in acc.iter_mut().zip(&av) {
                        *c = _mm512_fmadd_ps(*x, bj, *c);
                    }
                }
                // The last step moves past the panels; wrapping arithmetic keeps that defined.
                a = a.wrapping_add(t.lda);
                b = b.wrapping_add(match BS {
                    0 => 1,
                    ROWS => t.ldb,
                    _ => BS,
                });
            }
        };
    }
    // Fetch the C tile for writing C_PREFETCH_STEPS depth steps before the end: fetched at the
    // start of a long product, it would be evicted by the A panel streaming through L1.
    let tail = t.k.min(C_PREFETCH_STEPS);
    steps!(t.k - tail);
    if t.rs_c == 1 {
        for j in 0..t.n {
            let col = t.c.wrapping_add(j * t.cs_c);
            for v in 0..MVN {
                // A prefetch is a hint: it never faults, whatever the address. PREFETCHW
                // (a plain prefetch where absent): the tile is about to be written.
                _mm_prefetch::<_MM_HINT_ET0>(col.wrapping_add(16 * v).cast());
            }
        }
    } else if t.cs_c == 1 {
        // C's rows are contiguous (the transposed store): the first and last element of
        // each row cover its lines (a row of NRN ≤ 16 floats spans at most two).
        for i in 0..t.m {
            let row = t.c.wrapping_add(i * t.rs_c);
            _mm_prefetch::<_MM_HINT_ET0>(row.cast());
            _mm_prefetch::<_MM_HINT_ET0>(row.wrapping_add(t.n.saturating_sub(1)).cast());
        }
    }
    steps!(tail);
    // SAFETY: the contract of `run`, which `store` shares.
    unsafe { store::<MVN, NRN>(acc, t) }
}

/// Writes the accumulators of an MR × NRN tile (`acc[j][v]`: column j, rows 16·v ..
/// 16·v + 16) into C as `C = alpha·acc + beta·C` (C unread when beta is 0), for any strides:
/// the store of every AVX-512 family (once per kernel call: whether it is inlined makes no
/// measurable difference).
///
/// # Safety
/// The C tile of `t` as in [`super::UKernel`]'s contract, with m ≤ 16·MVN, n ≤ NRN.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn store<const MVN: usize, const NRN: usize>(
    acc: [[__m512; MVN]; NRN],
    t: &Tile,
) {
    if t.rs_c == 1 {
        let alpha = _mm512_set1_ps(t.alpha);
        let beta = _mm512_set1_ps(t.beta);
        if t.m == 16 * MVN && t.n == NRN {
            // A full tile: plain loads and stores.
            for (j, acc) in acc.iter().enumerate() {
                let col = t.c.wrapping_add(j * t.cs_c);
                for (v, x) in acc.iter().enumerate() {
                    let p = col.wrapping_add(v * 16);
                    let mut y = _mm512_mul_ps(*x, alpha);
                    // SAFETY: rows v·16 .. v·16 + 16 ≤ m of column j < n are inside the tile
                    // (contract, rs_c = 1).
                    unsafe {
                        if t.beta != 0.0 {
                            y = _mm512_fmadd_ps(_mm512_loadu_ps(p), beta, y);
                        }
                        if let Some(act) = t.post.act {
                            y = post_rows(y, &t.post, act, 16 * v, j, u16::MAX);
                        }
                        _mm512_storeu_ps(p, y);
                    }
                }
            }
            return;
        }
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
                    if let Some(act) = t.post.act {
                        y = post_rows(y, &t.post, act, 16 * v, j, mask);
                    }
                    _mm512_mask_storeu_ps(p, mask, y);
                }
            }
        }
    } else if t.cs_c == 1 && NRN <= 16 {
        // C's rows are contiguous (row-major C whose vector direction the caller chose
        // across rows): transpose the tile 16 rows at a time in registers and update whole
        // rows with masked vector loads and stores instead of element by element.
        let alpha = _mm512_set1_ps(t.alpha);
        let beta = _mm512_set1_ps(t.beta);
        let cols = lane_mask(t.n, 0);
        for v in 0..MVN {
            let rows = t.m.saturating_sub(16 * v).min(16);
            if rows == 0 {
                break;
            }
            let mut r = [_mm512_setzero_ps(); 16];
            for (x, acc) in r.iter_mut().zip(&acc) {
                *x = acc[v];
            }
            let tr = crate::simd::transpose16(r);
            for (q, x) in tr.iter().enumerate().take(rows) {
                let p = t.c.wrapping_add((16 * v + q) * t.rs_c);
                let mut y = _mm512_mul_ps(*x, alpha);
                // SAFETY: columns j < n of tile row 16·v + q < m are inside the tile
                // (contract, cs_c = 1) and the mask enables exactly those; masked-off lanes
                // are not accessed and cannot fault.
                unsafe {
                    if t.beta != 0.0 {
                        y = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(cols, p), beta, y);
                    }
                    if let Some(act) = t.post.act {
                        y = post_columns(y, &t.post, act, 16 * v + q, cols);
                    }
                    _mm512_mask_storeu_ps(p, cols, y);
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

/// The store's epilogue ([`Tile::post`]) on rows `i .. i + 16` of column `j` (the lanes of
/// `mask`): the row biases, column j's bias, the residual's lanes (contiguous along rows),
/// then the activation, in [`TilePost::apply`]'s order.
///
/// # Safety
/// The lanes of `mask` are elements of the tile, where the epilogue's operands are readable.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn post_rows(
    mut y: __m512,
    p: &TilePost,
    act: Activation,
    i: usize,
    j: usize,
    mask: __mmask16,
) -> __m512 {
    // SAFETY: the caller's contract; masked-off lanes are not read and cannot fault.
    unsafe {
        if !p.row_bias.is_null() {
            y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, p.row_bias.add(i)));
        }
        if !p.col_bias.is_null() {
            y = _mm512_add_ps(y, _mm512_set1_ps(*p.col_bias.add(j)));
        }
        if !p.res.is_null() {
            let r = p.res.add(i * p.res_rs + j * p.res_cs);
            y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, r));
        }
    }
    activate(y, act)
}

/// The store's epilogue on row `i`'s columns (the lanes of `mask`; the transposed store):
/// row i's bias, the column biases, the residual's lanes (contiguous along columns), then
/// the activation, in [`TilePost::apply`]'s order.
///
/// # Safety
/// As [`post_rows`].
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn post_columns(
    mut y: __m512,
    p: &TilePost,
    act: Activation,
    i: usize,
    mask: __mmask16,
) -> __m512 {
    // SAFETY: the caller's contract; masked-off lanes are not read and cannot fault.
    unsafe {
        if !p.row_bias.is_null() {
            y = _mm512_add_ps(y, _mm512_set1_ps(*p.row_bias.add(i)));
        }
        if !p.col_bias.is_null() {
            y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, p.col_bias));
        }
        if !p.res.is_null() {
            y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, p.res.add(i * p.res_rs)));
        }
    }
    activate(y, act)
}

/// The activation on 16 lanes, with the same results as [`Activation::apply`] (a NaN
/// through ReLU or clip gives the bound, as `f32::max` does): vector instructions for those
/// [`TilePost::vectorised`] names, lane by lane for the others.
#[target_feature(enable = "avx512f")]
#[inline]
fn activate(y: __m512, act: Activation) -> __m512 {
    let zero = _mm512_setzero_ps();
    match act {
        Activation::Relu => _mm512_max_ps(y, zero),
        Activation::Clip { lo, hi } => {
            _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(lo)), _mm512_set1_ps(hi))
        }
        Activation::LeakyRelu { slope } => {
            let keep = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(y, zero);
            _mm512_mask_mul_ps(y, !keep, y, _mm512_set1_ps(slope))
        }
        Activation::None => y,
        a => {
            let mut lanes = [0f32; 16];
            // SAFETY: `lanes` holds 16 floats.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), y) };
            for v in &mut lanes {
                *v = a.apply(*v);
            }
            // SAFETY: as above.
            unsafe { _mm512_loadu_ps(lanes.as_ptr()) }
        }
    }
}

pub(super) static TRANSPOSER: Transposer = Transposer {
    strip: 16,
    max_w: 16,
    run: transpose,
};

/// Transposes `w ≤ 16` rows of 16 floats into 16 rows of `w` floats, `ldd` apart: two unpack stages
/// within 128-bit lanes, then two stages of lane shuffles.
///
/// # Safety
/// The contract of [`Transposer::run`] with strip = max_w = 16.
#[target_feature(enable = "avx512f")]
unsafe fn transpose(src: *const f32, ld: usize, w: usize, dst: *mut f32, ldd: usize) {
    debug_assert!(w <= 16);
    let mut r = [_mm512_setzero_ps(); 16];
    // A constant trip count (not `take(w)`) keeps `r` in registers.
    for (i, x) in r.iter_mut().enumerate() {
        if i < w {
            // SAFETY: row i < w has 16 readable floats at src + i·ld (contract).
            *x = unsafe { _mm512_loadu_ps(src.add(i * ld)) };
        }
    }
    let out = crate::simd::transpose16(r);
    let mask = ((1u32 << w) - 1) as __mmask16;
    for (q, x) in out.iter().enumerate() {
        // SAFETY: output row q < 16 is w writable floats at dst + q·ldd (contract); the
        // mask enables exactly those lanes.
        unsafe { _mm512_mask_storeu_ps(dst.add(q * ldd), mask, *x) };
    }
}
