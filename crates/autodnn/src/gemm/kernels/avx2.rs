//! The AVX2 + FMA kernel family: a 16 × 6 register tile (two 8-lane vectors of A times six
//! broadcasts of B: 12 accumulators, 2 A vectors and 1 broadcast of the 16 ymm registers).
//! The same kernels as the AVX-512 family's, at half the width: narrower kernels for a ragged
//! last column panel, B read in place (by columns; not by rows, see `kernel_set`), A packed
//! on first use, the C tile fetched for writing before the last depth steps, and stores for
//! either orientation of C.

use std::arch::x86_64::*;

use super::{update_general, KernelSet, PackFormat, Tile, TilePost, Transposer};
use crate::cpu::Features;
use crate::desc::DataType;
use crate::gemm::blocking::{Blocking, ASSUMED_CACHES};
use crate::gemm::epilogue::{FrameEpilogue, TileView};
use crate::Activation;

/// Vectors of 8 lanes per column of the tile.
const MV: usize = 2;
const MR: usize = 8 * MV;
const NR: usize = 6;

pub(crate) fn kernel_set() -> KernelSet {
    KernelSet {
        name: "avx2-16x6",
        requires: Features::AVX2_FMA,
        operand: DataType::F32,
        accumulator: DataType::F32,
        packing: PackFormat::F32Panels,
        blocking: Blocking::for_tile(MR, NR, ASSUMED_CACHES),
        ukr: kernel::<MV, NR, NR>,
        edge: &EDGE,
        epilogue,
        transposer: Some(&TRANSPOSER),
        b_in_place: &B_IN_PLACE,
        // None by rows: a depth step's 6 columns (24 bytes) are too few to pay for a cache
        // line each; packed, the micro-panel stays in L1 for the whole row of A panels
        // (ResNet-50's 7x7 1x1 layers, prepared, 1 thread: 1.6 ms by rows, 1.25 packed).
        b_in_place_rows: &[],
        pairs: None,
        tiles: None,
        min_depth: 1,
        unit_peak: None,
        packs_a: true,
        fuses_epilogue: true,
    }
}

fn epilogue(e: &FrameEpilogue<'_>, t: &mut TileView<'_>, i0: usize, j0: usize) {
    #[target_feature(enable = "avx2,fma")]
    fn inner(e: &FrameEpilogue<'_>, t: &mut TileView<'_>, i0: usize, j0: usize) {
        e.apply_tile(t, i0, j0)
    }
    // SAFETY: this family is only chosen when the CPU has AVX2 and FMA (kernel_set picks it
    // only where its `requires` are detected and usable).
    unsafe { inner(e, t, i0, j0) }
}

/// Depth steps before the end of the product at which the C tile is fetched for writing.
/// Each step is about 6 cycles and streams 88 bytes of A and B through L1.
const C_PREFETCH_STEPS: usize = 64;

/// Depth steps ahead at which a kernel packing A (`Tile::a_pack`) prefetches its source.
const A_SOURCE_PREFETCH_STEPS: usize = 16;

/// Lanes `v·8 ..` of an `m`-row column that are valid, as a maskload mask.
///
/// # Safety
/// AVX2.
#[inline(always)]
unsafe fn lane_mask(m: usize, v: usize) -> __m256i {
    let valid = m.saturating_sub(v * 8).min(8) as i32;
    // SAFETY: AVX2 (the caller's contract).
    unsafe {
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), lanes)
    }
}

/// Stores the first `n ≤ 8` lanes of `x` at `p` with plain stores (8, or 4, 2 and 1 lanes):
/// AMD's cores run masked stores (`vmaskmovps` to memory) as microcode, a dozen cycles each,
/// even with every lane enabled.
///
/// # Safety
/// AVX; `p` is writable for `n` floats.
#[inline(always)]
unsafe fn store_lanes(p: *mut f32, x: __m256, n: usize) {
    // SAFETY: the caller's contract; each store writes lanes below n only.
    unsafe {
        if n >= 8 {
            _mm256_storeu_ps(p, x);
            return;
        }
        let (mut p, mut rest, mut lo) = (p, n, _mm256_castps256_ps128(x));
        if rest >= 4 {
            _mm_storeu_ps(p, lo);
            (p, rest, lo) = (p.add(4), rest - 4, _mm256_extractf128_ps::<1>(x));
        }
        if rest >= 2 {
            _mm_store_sd(p.cast(), _mm_castps_pd(lo));
            (p, rest, lo) = (p.add(2), rest - 2, _mm_movehl_ps(lo, lo));
        }
        if rest == 1 {
            _mm_store_ss(p, lo);
        }
    }
}

/// Kernels for a ragged last column panel of n < NR columns (`EDGE[n − 1]`): they compute
/// only n columns of the packed panel (whose rows stay NR apart) instead of all NR.
static EDGE: [super::UKernel; NR - 1] = [
    kernel::<MV, 1, NR>,
    kernel::<MV, 2, NR>,
    kernel::<MV, 3, NR>,
    kernel::<MV, 4, NR>,
    kernel::<MV, 5, NR>,
];

/// Kernels reading n = 1 ..= NR columns of B in place (`B_IN_PLACE[n − 1]`).
static B_IN_PLACE: [super::UKernel; NR] = [
    kernel::<MV, 1, 0>,
    kernel::<MV, 2, 0>,
    kernel::<MV, 3, 0>,
    kernel::<MV, 4, 0>,
    kernel::<MV, 5, 0>,
    kernel::<MV, 6, 0>,
];

/// The AVX2 micro-kernel, `8·MVN × NRN`, reading a packed B panel whose rows are `BS ≥ NRN`
/// apart, or (BS = 0) NRN columns of B in place, `t.ldb` apart and depth contiguous.
///
/// # Safety
/// The contract of [`super::UKernel`] with MR = 8·MVN, NR = BS (or B in place when BS = 0),
/// and n ≤ NRN.
#[target_feature(enable = "avx2,fma")]
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

/// [`kernel`], storing the A micro-panel it reads at `t.a_pack` when `PACK` (one loop each,
/// as in the AVX-512 family: the accumulators stay in registers).
///
/// # Safety
/// As [`kernel`]; with `PACK`, `t.a_pack` is writable for `k·8·MVN` floats.
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn run<const MVN: usize, const NRN: usize, const BS: usize, const PACK: bool>(t: &Tile) {
    let mut acc = [[_mm256_setzero_ps(); MVN]; NRN];
    let (mut a, mut b, mut ap) = (t.a, t.b, t.a_pack);
    macro_rules! steps {
        ($count:expr) => {
            for _ in 0..$count {
                let mut av = [_mm256_setzero_ps(); MVN];
                for (v, x) in av.iter_mut().enumerate() {
                    // SAFETY: rows v·8 .. v·8 + 8 < MR of this depth step are readable
                    // (contract).
                    *x = unsafe { _mm256_loadu_ps(a.add(8 * v)) };
                }
                if PACK {
                    for (v, x) in av.iter().enumerate() {
                        // SAFETY: a_pack is writable for k·MR floats (contract); this step's
                        // MR = 8·MVN of them start at ap.
                        unsafe { _mm256_storeu_ps(ap.add(8 * v), *x) };
                    }
                    ap = ap.wrapping_add(8 * MVN);
                    // A read from its source: its rows are lda apart, often a page or more,
                    // where the hardware prefetchers stop. The first and last element of a
                    // step's MR rows and every 16th between cover its cache lines.
                    let ahead = a.wrapping_add(A_SOURCE_PREFETCH_STEPS.wrapping_mul(t.lda));
                    for r in (0..8 * MVN).step_by(16).chain([8 * MVN - 1]) {
                        // A prefetch is a hint: it never faults, whatever the address.
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(r).cast());
                    }
                } else {
                    let ahead = a.wrapping_add(super::A_PREFETCH_STEPS.wrapping_mul(t.lda));
                    for v in (0..MVN).step_by(2) {
                        // A prefetch is a hint: it never faults, whatever the address.
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(8 * v).cast());
                    }
                }
                for (j, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: column j < NRN of this depth step of the B panel is readable
                    // (packed: at j; in place: at j·ldb).
                    let bj = unsafe {
                        _mm256_broadcast_ss(&*b.add(if BS == 0 { j * t.ldb } else { j }))
                    };
                    for (c, x) in acc.iter_mut().zip(&av) {
                        *c = _mm256_fmadd_ps(*x, bj, *c);
                    }
                }
                // The last step moves past the panels; wrapping arithmetic keeps that defined.
                a = a.wrapping_add(t.lda);
                b = b.wrapping_add(if BS == 0 { 1 } else { BS });
            }
        };
    }
    // Fetch the C tile for writing C_PREFETCH_STEPS depth steps before the end: fetched at the
    // start of a long product, it would be evicted by the panels streaming through L1.
    let tail = t.k.min(C_PREFETCH_STEPS);
    steps!(t.k - tail);
    if t.rs_c == 1 {
        for j in 0..t.n {
            let col = t.c.wrapping_add(j * t.cs_c);
            // The first and last row of the column cover its lines (16 floats span two at
            // most).
            for r in [0, 8 * MVN - 1] {
                // A prefetch is a hint: it never faults, whatever the address. PREFETCHW
                // (a plain prefetch where absent): the tile is about to be written.
                _mm_prefetch::<_MM_HINT_ET0>(col.wrapping_add(r).cast());
            }
        }
    } else if t.cs_c == 1 {
        // C's rows are contiguous (the transposed store): the first and last element of
        // each row cover its lines (a row of NRN ≤ 8 floats spans at most two).
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

/// Writes the accumulators of an MR × NRN tile (`acc[j][v]`: column j, rows 8·v .. 8·v + 8)
/// into C as `C = alpha·acc + beta·C` (C unread when beta is 0), for any strides.
///
/// # Safety
/// The C tile of `t` as in [`super::UKernel`]'s contract, with m ≤ 8·MVN, n ≤ NRN.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn store<const MVN: usize, const NRN: usize>(acc: [[__m256; MVN]; NRN], t: &Tile) {
    let alpha = _mm256_set1_ps(t.alpha);
    let beta = _mm256_set1_ps(t.beta);
    if t.rs_c == 1 {
        if t.m == 8 * MVN && t.n == NRN {
            // A full tile: plain loads and stores.
            for (j, acc) in acc.iter().enumerate() {
                let col = t.c.wrapping_add(j * t.cs_c);
                for (v, x) in acc.iter().enumerate() {
                    let p = col.wrapping_add(v * 8);
                    let mut y = _mm256_mul_ps(*x, alpha);
                    // SAFETY: rows v·8 .. v·8 + 8 ≤ m of column j < n are inside the tile
                    // (contract, rs_c = 1).
                    unsafe {
                        if t.beta != 0.0 {
                            y = _mm256_fmadd_ps(_mm256_loadu_ps(p), beta, y);
                        }
                        if let Some(act) = t.post.act {
                            y = post_rows(y, &t.post, act, 8 * v, j, None);
                        }
                        _mm256_storeu_ps(p, y);
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
                if v * 8 >= t.m {
                    break;
                }
                let p = col.wrapping_add(v * 8);
                let mut y = _mm256_mul_ps(*x, alpha);
                // SAFETY: the masked loads and the stores touch only rows below m of column
                // j, inside the tile; masked-off lanes are not read and cannot fault.
                unsafe {
                    let mask = lane_mask(t.m, v);
                    if t.beta != 0.0 {
                        y = _mm256_fmadd_ps(_mm256_maskload_ps(p, mask), beta, y);
                    }
                    if let Some(act) = t.post.act {
                        y = post_rows(y, &t.post, act, 8 * v, j, Some(mask));
                    }
                    store_lanes(p, y, t.m - 8 * v);
                }
            }
        }
    } else if t.cs_c == 1 && NRN <= 8 {
        // C's rows are contiguous (row-major C whose vector direction the caller chose
        // across rows): transpose the tile 8 rows at a time in registers and update whole
        // rows (masked loads, plain stores of their n lanes) instead of element by element.
        // SAFETY: AVX2 (this function's target features).
        let cols = unsafe { lane_mask(t.n, 0) };
        for v in 0..MVN {
            let rows = t.m.saturating_sub(8 * v).min(8);
            if rows == 0 {
                break;
            }
            let mut r = [_mm256_setzero_ps(); 8];
            for (x, acc) in r.iter_mut().zip(&acc) {
                *x = acc[v];
            }
            let tr = crate::simd::transpose8(r);
            for (q, x) in tr.iter().enumerate().take(rows) {
                let p = t.c.wrapping_add((8 * v + q) * t.rs_c);
                let mut y = _mm256_mul_ps(*x, alpha);
                // SAFETY: columns j < n of tile row 8·v + q < m are inside the tile
                // (contract, cs_c = 1): the mask enables exactly those for the loads
                // (masked-off lanes are not read and cannot fault), the store writes n.
                unsafe {
                    if t.beta != 0.0 {
                        y = _mm256_fmadd_ps(_mm256_maskload_ps(p, cols), beta, y);
                    }
                    if let Some(act) = t.post.act {
                        y = post_columns(y, &t.post, act, 8 * v + q, cols);
                    }
                    store_lanes(p, y, t.n);
                }
            }
        }
    } else {
        let mut flat = [[[0f32; 8]; MVN]; NRN];
        for (f, acc) in flat.iter_mut().zip(&acc) {
            for (f, x) in f.iter_mut().zip(acc) {
                // SAFETY: f is 8 writable floats.
                unsafe { _mm256_storeu_ps(f.as_mut_ptr(), *x) };
            }
        }
        // SAFETY: the tile contract is the caller's; flat holds MR·NR values.
        unsafe { update_general::<true>(flat.as_flattened().as_flattened(), 8 * MVN, t) }
    }
}

/// The store's epilogue ([`Tile::post`]) on rows `i .. i + 8` of column `j` (all eight, or
/// the lanes of `mask`): the row biases, column j's bias, the residual's lanes (contiguous
/// along rows), then the activation, in [`TilePost::apply`]'s order.
///
/// # Safety
/// The lanes loaded are elements of the tile, where the epilogue's operands are readable.
#[inline(always)]
unsafe fn post_rows(
    mut y: __m256,
    p: &TilePost,
    act: Activation,
    i: usize,
    j: usize,
    mask: Option<__m256i>,
) -> __m256 {
    // SAFETY: the caller's contract (row i's and column j's operands are readable;
    // masked-off lanes are not read and cannot fault; an AVX2 caller).
    unsafe {
        if !p.row_bias.is_null() {
            let x = p.row_bias.add(i);
            let v = match mask {
                Some(m) => _mm256_maskload_ps(x, m),
                None => _mm256_loadu_ps(x),
            };
            y = _mm256_add_ps(y, v);
        }
        if !p.col_bias.is_null() {
            y = _mm256_add_ps(y, _mm256_set1_ps(*p.col_bias.add(j)));
        }
        if !p.res.is_null() {
            let x = p.res.add(i * p.res_rs + j * p.res_cs);
            let v = match mask {
                Some(m) => _mm256_maskload_ps(x, m),
                None => _mm256_loadu_ps(x),
            };
            y = _mm256_add_ps(y, v);
        }
        activate(y, act)
    }
}

/// The store's epilogue on row `i`'s columns (the lanes of `mask`; the transposed store):
/// row i's bias, the column biases, the residual's lanes (contiguous along columns), then
/// the activation, in [`TilePost::apply`]'s order.
///
/// # Safety
/// As [`post_rows`].
#[inline(always)]
unsafe fn post_columns(
    mut y: __m256,
    p: &TilePost,
    act: Activation,
    i: usize,
    mask: __m256i,
) -> __m256 {
    // SAFETY: the caller's contract; masked-off lanes are not read and cannot fault.
    unsafe {
        if !p.row_bias.is_null() {
            y = _mm256_add_ps(y, _mm256_set1_ps(*p.row_bias.add(i)));
        }
        if !p.col_bias.is_null() {
            y = _mm256_add_ps(y, _mm256_maskload_ps(p.col_bias, mask));
        }
        if !p.res.is_null() {
            y = _mm256_add_ps(y, _mm256_maskload_ps(p.res.add(i * p.res_rs), mask));
        }
        activate(y, act)
    }
}

/// The activation on 8 lanes, with the same results as [`Activation::apply`] (a NaN through
/// ReLU or clip gives the bound, as `f32::max` does): vector instructions for those
/// [`TilePost::vectorised`] names, lane by lane for the others.
///
/// Not a `target_feature` function, so that it (and the store's epilogue functions) can be
/// always inlined: called once per vector, it had stayed a call, around which the whole
/// tile's accumulators were spilled (a 64 → 256 1x1 convolution at 56x56 with ReLU took
/// 1.26x the time without).
///
/// # Safety
/// The caller runs with AVX2 and FMA (this family's functions).
#[inline(always)]
unsafe fn activate(y: __m256, act: Activation) -> __m256 {
    // SAFETY: called only from this family's AVX2 + FMA functions (inlined into them),
    // so the CPU runs AVX; the stack copy below holds 8 floats.
    unsafe {
        let zero = _mm256_setzero_ps();
        match act {
            // maxps returns its second operand for a NaN, as f32::max returns the bound.
            Activation::Relu => _mm256_max_ps(y, zero),
            Activation::Clip { lo, hi } => {
                _mm256_min_ps(_mm256_max_ps(y, _mm256_set1_ps(lo)), _mm256_set1_ps(hi))
            }
            Activation::LeakyRelu { slope } => {
                let keep = _mm256_cmp_ps::<_CMP_GE_OQ>(y, zero);
                _mm256_blendv_ps(_mm256_mul_ps(y, _mm256_set1_ps(slope)), y, keep)
            }
            Activation::None => y,
            // The others lane by lane (the frame fuses only the ones above).
            a => {
                let mut lanes = [0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), y);
                for v in &mut lanes {
                    *v = a.apply(*v);
                }
                _mm256_loadu_ps(lanes.as_ptr())
            }
        }
    }
}

static TRANSPOSER: Transposer = Transposer {
    strip: 8,
    max_w: 8,
    run: transpose,
};

/// Transposes `w ≤ 8` rows of 8 floats into 8 rows of `w` floats, `ldd` apart.
///
/// # Safety
/// The contract of [`Transposer::run`] with strip = max_w = 8.
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose(src: *const f32, ld: usize, w: usize, dst: *mut f32, ldd: usize) {
    debug_assert!(w <= 8);
    let mut r = [_mm256_setzero_ps(); 8];
    // A constant trip count (not `take(w)`) keeps `r` in registers.
    for (i, x) in r.iter_mut().enumerate() {
        if i < w {
            // SAFETY: row i < w has 8 readable floats at src + i·ld (contract).
            *x = unsafe { _mm256_loadu_ps(src.add(i * ld)) };
        }
    }
    let out = crate::simd::transpose8(r);
    for (q, x) in out.iter().enumerate() {
        // SAFETY: output row q < 8 is w writable floats at dst + q·ldd (contract).
        unsafe { store_lanes(dst.add(q * ldd), *x, w) };
    }
}
