//! The AVX2 + FMA kernel family: a 16 × 6 register tile (two 8-lane vectors of A times six
//! broadcasts of B: 12 accumulators, 2 A vectors and 1 broadcast of the 16 ymm registers).

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
        ukr: kernel::<MV, NR>,
        edge: &[],
        epilogue,
        transposer: Some(&TRANSPOSER),
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
    #[target_feature(enable = "avx2,fma")]
    fn inner(e: &FrameEpilogue<'_>, t: &mut TileView<'_>, i0: usize, j0: usize) {
        e.apply_tile(t, i0, j0)
    }
    // SAFETY: this family is only chosen when the CPU has AVX2 and FMA (kernel_set picks it
    // only where its `requires` are detected and usable).
    unsafe { inner(e, t, i0, j0) }
}

/// Lanes `v·8 ..` of an `m`-row column that are valid, as a maskload/maskstore mask.
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

/// The AVX2 micro-kernel, `8·MVN × NRN`.
///
/// # Safety
/// The contract of [`super::UKernel`] with MR = 8·MVN, NR = NRN.
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel<const MVN: usize, const NRN: usize>(t: &Tile) {
    let mut acc = [[_mm256_setzero_ps(); MVN]; NRN];
    let (mut a, mut b) = (t.a, t.b);
    for _ in 0..t.k {
        let mut av = [_mm256_setzero_ps(); MVN];
        for (v, x) in av.iter_mut().enumerate() {
            // SAFETY: rows v·8 .. v·8 + 8 < MR of depth step p are readable (contract).
            *x = unsafe { _mm256_loadu_ps(a.add(8 * v)) };
        }
        let ahead = a.wrapping_add(super::A_PREFETCH_STEPS.wrapping_mul(t.lda));
        for v in (0..MVN).step_by(2) {
            // A prefetch is a hint: it never faults, whatever the address.
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(8 * v).cast());
        }
        for (j, acc) in acc.iter_mut().enumerate() {
            // SAFETY: column j < NR of depth step p of the packed B panel is readable.
            let bj = unsafe { _mm256_broadcast_ss(&*b.add(j)) };
            for (c, x) in acc.iter_mut().zip(&av) {
                *c = _mm256_fmadd_ps(*x, bj, *c);
            }
        }
        // The last step moves past the panels; wrapping arithmetic keeps that defined.
        a = a.wrapping_add(t.lda);
        b = b.wrapping_add(NRN);
    }
    if t.rs_c == 1 {
        let alpha = _mm256_set1_ps(t.alpha);
        let beta = _mm256_set1_ps(t.beta);
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
                if t.m >= v * 8 + 8 {
                    // SAFETY: rows v·8 .. v·8 + 8 of column j are inside the tile
                    // (contract: i < m, rs_c = 1).
                    unsafe {
                        if t.beta != 0.0 {
                            y = _mm256_fmadd_ps(_mm256_loadu_ps(p), beta, y);
                        }
                        if let Some(act) = t.post.act {
                            y = post_rows(y, &t.post, act, 8 * v, j, None);
                        }
                        _mm256_storeu_ps(p, y);
                    }
                } else {
                    // SAFETY: AVX2 masked loads and stores touch only the enabled lanes,
                    // rows below m of column j, inside the tile.
                    unsafe {
                        let mask = lane_mask(t.m, v);
                        if t.beta != 0.0 {
                            y = _mm256_fmadd_ps(_mm256_maskload_ps(p, mask), beta, y);
                        }
                        if let Some(act) = t.post.act {
                            y = post_rows(y, &t.post, act, 8 * v, j, Some(mask));
                        }
                        _mm256_maskstore_ps(p, mask, y);
                    }
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
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn post_rows(
    mut y: __m256,
    p: &TilePost,
    act: Activation,
    i: usize,
    j: usize,
    mask: Option<__m256i>,
) -> __m256 {
    // SAFETY: the caller's contract; masked-off lanes are not read and cannot fault.
    let load = |x: *const f32| unsafe {
        match mask {
            Some(m) => _mm256_maskload_ps(x, m),
            None => _mm256_loadu_ps(x),
        }
    };
    // SAFETY: the caller's contract (row i's and column j's operands are readable).
    unsafe {
        if !p.row_bias.is_null() {
            y = _mm256_add_ps(y, load(p.row_bias.add(i)));
        }
        if !p.col_bias.is_null() {
            y = _mm256_add_ps(y, _mm256_set1_ps(*p.col_bias.add(j)));
        }
        if !p.res.is_null() {
            y = _mm256_add_ps(y, load(p.res.add(i * p.res_rs + j * p.res_cs)));
        }
    }
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
            // SAFETY: `lanes` holds 8 floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), y) };
            for v in &mut lanes {
                *v = a.apply(*v);
            }
            // SAFETY: as above.
            unsafe { _mm256_loadu_ps(lanes.as_ptr()) }
        }
    }
}

static TRANSPOSER: Transposer = Transposer {
    strip: 8,
    max_w: 8,
    run: transpose,
};

/// Transposes `w ≤ 8` rows of 8 floats into 8 rows of `w` floats, `ldd` apart (unpacks, then lane
/// permutes).
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
    // SAFETY: AVX2 (this function's target features).
    let mask = unsafe { lane_mask(w, 0) };
    for c in 0..4 {
        let lo = _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c]);
        let hi = _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c]);
        for (q, x) in [(c, lo), (c + 4, hi)] {
            // SAFETY: output row q < 8 is w writable floats at dst + q·ldd (contract); the
            // mask enables exactly those lanes.
            unsafe { _mm256_maskstore_ps(dst.add(q * ldd), mask, x) };
        }
    }
}
