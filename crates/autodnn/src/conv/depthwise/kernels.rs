//! Kernels: written once over the `Simd` operations, compiled per instruction set; then the
//! kernel sets, the kernels monomorphised per instruction set with their blocking.

use crate::conv::{Activation, EpilogueArgs};
use crate::simd::Scalar;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512};

use super::channels_last::{ClFn, ClJob};
#[cfg(doc)]
use super::geometry::activate;
use super::geometry::{GENERIC_COLS, GENERIC_ROWS, MAX_FAST_IN_ROWS, MAX_FAST_TAPS};
#[cfg(doc)]
use super::planar::Step;
use super::planar::{PlaneFn, PlaneJob};
use super::simd::{Elem, Simd};

/// The epilogue, splatted for one kernel call.
struct EpiV<S: Simd> {
    plain: bool,
    scale: bool,
    alpha: S::V,
    bias: bool,
    read_z: bool,
    beta: S::V,
    act: ActV<S>,
}

/// The activations kernels apply. The others (sigmoid, tanh, gelu, silu) call libm lane by
/// lane, and calls inside a kernel make the compiler keep its accumulators in memory: the
/// frames apply them in a pass over each work item's outputs ([`activate`]) just after its
/// kernel, which then stores the linear part only.
pub(super) enum ActV<S: Simd> {
    None,
    Relu(S::V),
    Clip(S::V, S::V),
}

impl<S: Simd> EpiV<S> {
    #[inline(always)]
    fn new(simd: S, e: &EpilogueArgs<'_>) -> EpiV<S> {
        let linear = !matches!(e.act, Activation::Relu | Activation::Clip { .. });
        EpiV {
            plain: e.alpha == 1.0 && e.beta == 0.0 && e.bias.is_none() && linear,
            scale: e.alpha != 1.0,
            alpha: simd.splat(e.alpha),
            bias: e.bias.is_some(),
            read_z: e.beta != 0.0,
            beta: simd.splat(e.beta),
            act: match e.act {
                Activation::Relu => ActV::Relu(simd.zero()),
                Activation::Clip { lo, hi } => ActV::Clip(simd.splat(lo), simd.splat(hi)),
                _ => ActV::None,
            },
        }
    }
}

/// act(alpha · acc + bias + beta · z), in the order and rounding of [`EpilogueArgs::value`]
/// (without the activations [`activate`] applies); `z` is called only when beta ≠ 0.
#[inline(always)]
fn finish<S: Simd>(simd: S, e: &EpiV<S>, acc: S::V, bias: S::V, z: impl FnOnce() -> S::V) -> S::V {
    let mut v = acc;
    if !e.plain {
        if e.scale {
            v = simd.mul(e.alpha, v);
        }
        if e.bias {
            v = simd.add(v, bias);
        }
        if e.read_z {
            v = simd.add(v, simd.mul(e.beta, z()));
        }
        v = match e.act {
            ActV::None => v,
            ActV::Relu(zero) => simd.max(v, zero),
            ActV::Clip(lo, hi) => simd.min(simd.max(v, lo), hi),
        };
    }
    v
}

/// Stores the epilogue's value of `acc` at `y` for the lanes of `m` (z read at `z`).
///
/// # Safety
/// The lanes of `m` at `y` (and at `z` when beta ≠ 0) are in bounds and accessed by no other
/// thread.
#[inline(always)]
unsafe fn store_out<S: Simd, Y: Elem<S>>(
    simd: S,
    e: &EpiV<S>,
    acc: S::V,
    bias: S::V,
    y: *mut Y,
    z: *const Y,
    m: u32,
) {
    // SAFETY: the caller's contract.
    unsafe {
        Y::store(
            simd,
            y,
            finish(simd, e, acc, bias, || Y::load(simd, z, m)),
            m,
        )
    }
}

/// Repeats `body` with `i` = 0, 1, ... while `i < n`, `n` a constant after monomorphisation
/// of at most `max` (8, 12 or 16): unrolls loops whose accumulators must stay in registers, which
/// the compiler would otherwise keep as loops over arrays in memory.
macro_rules! unroll {
    (8: $i:ident < $n:expr, $body:block) => {
        unroll!(@ 8, $i, $n, $body, 0 1 2 3 4 5 6 7)
    };
    (12: $i:ident < $n:expr, $body:block) => {
        unroll!(@ 12, $i, $n, $body, 0 1 2 3 4 5 6 7 8 9 10 11)
    };
    (16: $i:ident < $n:expr, $body:block) => {
        unroll!(@ 16, $i, $n, $body, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@ $max:literal, $i:ident, $n:expr, $body:block, $($k:literal)*) => {{
        const { assert!($n <= $max) };
        $(
            if $k < $n {
                let $i: usize = $k;
                $body
            }
        )*
    }};
}

/// The unrolled NCHW-like kernel: R×C taps, row stride SH, lane step STEP (1 or 2; 3 and 4:
/// stride 2 and 1 with the 3 taps of a row read at once, [`Step::Window3`] and
/// [`Step::Window3S1`]), ROWS output rows per block (no row dilation). With PAIR, rows are at most half a vector long and
/// each vector holds a row of two channels (lanes below L/2 channel k, the others k + 1): the
/// column table then describes half vectors, and unit u = pair·blocks + b.
///
/// # Safety
/// That of [`PlaneFn`], and `a.r == R`, `a.s == C`, the units' blocks of ROWS rows.
#[inline(always)]
unsafe fn plane_fast<
    S: Simd,
    X: Elem<S>,
    Y: Elem<S>,
    const R: usize,
    const C: usize,
    const SH: usize,
    const STEP: usize,
    const ROWS: usize,
    const PAIR: bool,
>(
    simd: S,
    a: &PlaneJob<'_, X, Y>,
) {
    const {
        assert!(R * C <= MAX_FAST_TAPS && (ROWS - 1) * SH + R <= MAX_FAST_IN_ROWS);
        assert!(STEP < 3 || (C == 3 && !PAIR));
    }
    debug_assert!(a.r == R && a.s == C && a.blocks == a.oh.div_ceil(ROWS));
    let in_rows = (ROWS - 1) * SH + R;
    let half = S::L / 2;
    // SAFETY: the caller's contract (the token proves the CPU has S's features); rows are
    // read only inside the image, columns only where the table enables them; outputs go to
    // the units' rows.
    unsafe {
        let epi = EpiV::new(simd, a.epi);
        let mut u = a.u0;
        while u < a.u1 {
            let (b0, b1) = (u % a.blocks, a.blocks.min(u % a.blocks + a.u1 - u));
            let k = if PAIR {
                2 * (u / a.blocks)
            } else {
                u / a.blocks
            };
            u += b1 - b0;
            // The pair's second channel, or (at an odd end) k again with its lanes unused.
            let (k1, hi_on) = if PAIR && k + 1 < a.k {
                (k + 1, u32::MAX)
            } else {
                (k, 0)
            };
            // Lanes of both halves from a half-vector mask.
            let both = |m: u32| if PAIR { m | (m << half & hi_on) } else { m };
            let xk = a.x.wrapping_offset((k / a.mult) as isize * a.xc);
            let xk1 = a.x.wrapping_offset((k1 / a.mult) as isize * a.xc);
            let (yk, yk1) = (
                a.y.wrapping_offset(k as isize * a.yc),
                a.y.wrapping_offset(k1 as isize * a.yc),
            );
            let (zk, zk1) = (
                a.z.wrapping_offset(k as isize * a.yc),
                a.z.wrapping_offset(k1 as isize * a.yc),
            );
            let mut bias = simd.splat(a.bias(k));
            let mut wv = [simd.zero(); MAX_FAST_TAPS];
            for (t, v) in wv.iter_mut().enumerate().take(R * C) {
                *v = simd.splat(a.tap(k, t));
                if PAIR {
                    *v = simd.blend_hi(*v, simd.splat(a.tap(k1, t)));
                }
            }
            if PAIR {
                bias = simd.blend_hi(bias, simd.splat(a.bias(k1)));
            }
            for b in b0..b1 {
                let oh0 = b * ROWS;
                let nrows = ROWS.min(a.oh - oh0);
                let ih0 = (oh0 * SH) as isize - a.pt;
                if !PAIR {
                    a.fetch_ahead(k, b, ROWS, SH, in_rows);
                }
                // Rows outside the image (or needed by no written output) read nothing: their
                // loads have an empty mask. Masks rather than branches keep the accumulators
                // in registers; a bit set rather than arrays avoids stores the loads wait for.
                let valid = a.valid_rows(ih0, in_rows.min((nrows - 1) * SH + R));
                let row0 = oh0 as isize * a.yrow;
                // The column loop, for blocks at the image's top or bottom edge (EDGE: row
                // masks) or inside it (all rows read, masks straight from the table).
                macro_rules! columns {
                    ($edge:expr) => {
                        for col in a.cols.chunks_exact(C + 1) {
                            let mut acc = [simd.zero(); ROWS];
                            unroll!(16: d < (ROWS - 1) * SH + R, {
                                let rm = if $edge {
                                    (valid >> d & 1).wrapping_neg()
                                } else {
                                    u32::MAX
                                };
                                // Rows outside the image point at the plane: a masked access
                                // to an address in an unmapped page costs a microcode assist
                                // on some CPUs.
                                let roff = if rm != 0 { (ih0 + d as isize) * a.xrow } else { 0 };
                                let row = xk.wrapping_offset(roff);
                                let row1 = xk1.wrapping_offset(roff);
                                let window = if STEP >= 3 {
                                    let ld = col[1];
                                    let raw = (ld.m0 as u64 | (ld.m1 as u64) << 32)
                                        & (rm as u64 | (rm as u64) << 32);
                                    let p = row.wrapping_offset(ld.off);
                                    if STEP == 3 {
                                        simd.windows3(p, raw)
                                    } else {
                                        simd.windows3_s1(p, raw as u32)
                                    }
                                } else {
                                    [simd.zero(); 3]
                                };
                                for s in 0..C {
                                    let ld = col[1 + s];
                                    let p = row.wrapping_offset(ld.off);
                                    let p1 = row1.wrapping_offset(ld.off);
                                    let xv = match (PAIR, STEP) {
                                        (false, 3..) => window[s],
                                        (false, 1) => X::load(simd, p, ld.m0 & rm),
                                        (false, _) => simd.load_step2(p, ld.m0 & rm, ld.m1 & rm),
                                        (true, 1) => simd.load_pair(p, p1, both(ld.m0 & rm)),
                                        (true, _) => {
                                            let em = (ld.m0 | ld.m1 << half) & rm;
                                            simd.load_step2_pair(p, p1, em)
                                        }
                                    };
                                    for (i, acc) in acc.iter_mut().enumerate() {
                                        if d >= i * SH && d - i * SH < R {
                                            *acc = simd.fma(wv[(d - i * SH) * C + s], xv, *acc);
                                        }
                                    }
                                }
                                for acc in acc.iter_mut() {
                                    *acc = simd.pin(*acc);
                                }
                            });
                            for acc in acc.iter_mut() {
                                *acc = simd.pin(*acc);
                            }
                            let out = col[0];
                            let m = both(out.m0);
                            // Rows past the last are stored with an empty mask rather than
                            // skipped: a branch would let the compiler sink their sums into
                            // it and spill the loads they share.
                            unroll!(8: i < ROWS, {
                                let (m, off) = if i < nrows {
                                    (m, row0 + i as isize * a.yrow + out.off)
                                } else {
                                    (0, 0)
                                };
                                let (y, z) = (yk.wrapping_offset(off), zk.wrapping_offset(off));
                                if PAIR {
                                    let y1 = yk1.wrapping_offset(off);
                                    let z1 = zk1.wrapping_offset(off);
                                    let v = finish(simd, &epi, acc[i], bias, || simd.load_pair(z, z1, m));
                                    simd.store_pair(y, y1, v, m);
                                } else {
                                    store_out(simd, &epi, acc[i], bias, y, z, m);
                                }
                            });
                        }
                    };
                }
                if valid == (1u32 << in_rows) - 1 {
                    columns!(false);
                } else {
                    columns!(true);
                }
            }
        }
    }
}

/// The 3x3 NCHW-like kernel over bf16 x on the dot-product units (AVX512-BF16): ROWS output
/// rows per block, row stride SH (1 or 2), no dilation. Each input row gives two vectors of
/// 16 bf16 pairs, (x\[j\], x\[j + 1\]) and (x\[j + 2\], 0) at lane j's window, that one
/// `vdpbf16ps` each multiplies by a filter row's pairs (w₀, w₁) and (w₂, 0): 6 dot products
/// per output vector instead of 9 multiply-adds, on bf16 read as it lies. With stride 2 the
/// pairs are the row's own consecutive elements (two loads); with stride 1, two permutes of
/// one load, or (WIDE) two stride-2 windows, 32 output columns at a time: the even columns'
/// pairs load from the window's start, the odd ones' one element on, and two permutes
/// interleave each output row's sums before the store (4 loads and 2 permutes per 32
/// columns and row instead of 2 loads and 4 permutes, for rows that fill 32-column
/// vectors). But for WIDE, the (w₂, 0) products are summed apart (two chains of dependent
/// dot products per output row, added before the store). Column tables as
/// [`Step::Window3`] and [`Step::Window3S1`], of 16 columns per entry, 32 for WIDE. The
/// products are exact in f32, each instruction rounds twice, and subnormal inputs count as
/// zero (as in the bf16 GEMM family); the filter's values must be bf16 (the caller checks).
///
/// # Safety
/// That of [`PlaneFn`], `a.r == a.s == 3`, the units' blocks of ROWS rows; AVX512-BW, VL
/// and BF16.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn plane_dot3<Y: Elem<Avx512>, const SH: usize, const ROWS: usize, const WIDE: bool>(
    simd: Avx512,
    a: &PlaneJob<'_, half::bf16, Y>,
) {
    use std::arch::x86_64::*;
    const { assert!((ROWS - 1) * SH + 3 <= MAX_FAST_IN_ROWS && (SH == 1 || SH == 2 && !WIDE)) };
    debug_assert!(a.r == 3 && a.s == 3 && a.blocks == a.oh.div_ceil(ROWS));
    let in_rows = (ROWS - 1) * SH + 3;
    // The filter's pair (lo, hi) as one lane's 32 bits.
    let pair = |lo: f32, hi: f32| {
        let b = |v: f32| half::bf16::from_f32(v).to_bits() as u32;
        (b(lo) | b(hi) << 16) as i32
    };
    // SAFETY: the caller's contract (the token proves AVX-512F; BW, VL and BF16 by the
    // contract); rows are read only inside the image, elements only where the table's bits
    // are set; outputs go to the units' rows.
    unsafe {
        let epi = EpiV::new(simd, a.epi);
        // Lanes 0..16 (16..32) of a 32-column output row: its even columns' sums and its odd
        // ones', interleaved.
        let lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        let hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
        // Word 2l (2l + 1) of the 16-column stride-1 permutes: element l (l + 1), and l + 2.
        let idx0 = _mm512_set_epi16(
            16, 15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8, 7, 7, 6, 6, 5, 5, 4, 4,
            3, 3, 2, 2, 1, 1, 0,
        );
        let idx1 = _mm512_add_epi16(idx0, _mm512_set1_epi16(2));
        const EVEN: u32 = 0x5555_5555;
        // Lanes per half of a stride-1 table entry (columns 0..16 and 16..32).
        const HALF: u32 = 16;
        let bh = |v: __m512i| std::mem::transmute::<__m512i, __m512bh>(v);
        // The pairs at element e0 of `p` (bit e of `raw` for element e): (e0 + 2l, e0 + 2l + 1),
        // and (e0 + 2l + 2, 0).
        let pairs = |p: *const i16, raw: u64, e0: u32, rm: u32| {
            (
                bh(_mm512_maskz_loadu_epi16(
                    (raw >> e0) as u32 & rm,
                    p.wrapping_add(e0 as usize),
                )),
                bh(_mm512_maskz_loadu_epi16(
                    (raw >> (e0 + 2)) as u32 & EVEN & rm,
                    p.wrapping_add(e0 as usize + 2),
                )),
            )
        };
        let mut u = a.u0;
        while u < a.u1 {
            let (b0, b1) = (u % a.blocks, a.blocks.min(u % a.blocks + a.u1 - u));
            let k = u / a.blocks;
            u += b1 - b0;
            let xk = a.x.wrapping_offset((k / a.mult) as isize * a.xc);
            let yk = a.y.wrapping_offset(k as isize * a.yc);
            let zk = a.z.wrapping_offset(k as isize * a.yc);
            let bias = simd.splat(a.bias(k));
            let w01: [__m512bh; 3] = std::array::from_fn(|r| {
                bh(_mm512_set1_epi32(pair(
                    a.tap(k, 3 * r),
                    a.tap(k, 3 * r + 1),
                )))
            });
            let w2: [__m512bh; 3] =
                std::array::from_fn(|r| bh(_mm512_set1_epi32(pair(a.tap(k, 3 * r + 2), 0.0))));
            for b in b0..b1 {
                let oh0 = b * ROWS;
                let nrows = ROWS.min(a.oh - oh0);
                let ih0 = (oh0 * SH) as isize - a.pt;
                // As in `plane_fast`: rows outside the image read nothing (empty masks).
                let valid = a.valid_rows(ih0, in_rows.min((nrows - 1) * SH + 3));
                let row0 = oh0 as isize * a.yrow;
                for col in a.cols.chunks_exact(4) {
                    // The outputs' sums, WIDE: the even columns' (odd: the odd ones'); else
                    // the (w₂, 0) products apart in `odd`, two chains of dot products.
                    let mut acc = [simd.zero(); ROWS];
                    let mut odd = [simd.zero(); ROWS];
                    let ld = col[1];
                    let raw = ld.m0 as u64 | (ld.m1 as u64) << 32;
                    unroll!(16: d < (ROWS - 1) * SH + 3, {
                        let rm = (valid >> d & 1).wrapping_neg();
                        let roff = if rm != 0 { (ih0 + d as isize) * a.xrow } else { 0 };
                        let p = xk.wrapping_offset(roff).wrapping_offset(ld.off).cast::<i16>();
                        let (p0, p1) = if SH == 2 || WIDE {
                            pairs(p, raw, 0, rm)
                        } else {
                            // Stride 1, 16 columns: both from one load.
                            let v = _mm512_maskz_loadu_epi16(raw as u32 & rm, p);
                            (
                                bh(_mm512_permutexvar_epi16(idx0, v)),
                                bh(_mm512_maskz_permutexvar_epi16(EVEN, idx1, v)),
                            )
                        };
                        let (q0, q1) = if WIDE { pairs(p, raw, 1, rm) } else { (p0, p1) };
                        for i in 0..ROWS {
                            if d >= i * SH && d - i * SH < 3 {
                                let r = d - i * SH;
                                acc[i] = _mm512_dpbf16_ps(acc[i], p0, w01[r]);
                                if WIDE {
                                    acc[i] = _mm512_dpbf16_ps(acc[i], p1, w2[r]);
                                    odd[i] = _mm512_dpbf16_ps(odd[i], q0, w01[r]);
                                    odd[i] = _mm512_dpbf16_ps(odd[i], q1, w2[r]);
                                } else {
                                    odd[i] = _mm512_dpbf16_ps(odd[i], p1, w2[r]);
                                }
                            }
                        }
                        for i in 0..ROWS {
                            acc[i] = simd.pin(acc[i]);
                            odd[i] = simd.pin(odd[i]);
                        }
                    });
                    let m = col[0].m0;
                    unroll!(8: i < ROWS, {
                        let (m, off) = if i < nrows {
                            (m, row0 + i as isize * a.yrow + col[0].off)
                        } else {
                            (0, 0)
                        };
                        let (y, z) = (yk.wrapping_offset(off), zk.wrapping_offset(off));
                        if WIDE {
                            let v0 = _mm512_permutex2var_ps(acc[i], lo, odd[i]);
                            let v1 = _mm512_permutex2var_ps(acc[i], hi, odd[i]);
                            let h = HALF as usize;
                            store_out(simd, &epi, v0, bias, y, z, m & 0xffff);
                            let (y1, z1) = (y.wrapping_add(h), z.wrapping_add(h));
                            store_out(simd, &epi, v1, bias, y1, z1, m >> HALF);
                        } else {
                            let v = _mm512_add_ps(acc[i], odd[i]);
                            store_out(simd, &epi, v, bias, y, z, m);
                        }
                    });
                }
            }
        }
    }
}

/// The generic NCHW-like kernel: any taps, strides and dilations; GENERIC_ROWS output rows
/// per block; lane step 1, 2 or any (STEP = 0).
///
/// # Safety
/// That of [`PlaneFn`], and the units' blocks of GENERIC_ROWS rows.
#[inline(always)]
unsafe fn plane_generic<S: Simd, X: Elem<S>, Y: Elem<S>, const STEP: usize>(
    simd: S,
    a: &PlaneJob<'_, X, Y>,
) {
    debug_assert!(a.blocks == a.oh.div_ceil(GENERIC_ROWS));
    // SAFETY: as in `plane_fast`.
    unsafe {
        let epi = EpiV::new(simd, a.epi);
        let mut u = a.u0;
        while u < a.u1 {
            let k = u / a.blocks;
            let (b0, b1) = (u % a.blocks, a.blocks.min(u % a.blocks + a.u1 - u));
            u += b1 - b0;
            let xk = a.x.wrapping_offset((k / a.mult) as isize * a.xc);
            let yk = a.y.wrapping_offset(k as isize * a.yc);
            let zk = a.z.wrapping_offset(k as isize * a.yc);
            let bias = simd.splat(a.bias(k));
            for b in b0..b1 {
                let oh0 = b * GENERIC_ROWS;
                let nrows = GENERIC_ROWS.min(a.oh - oh0);
                let row0 = oh0 as isize * a.yrow;
                for col in a.cols.chunks_exact(a.s + 1) {
                    let mut acc = [simd.zero(); GENERIC_ROWS];
                    for r in 0..a.r {
                        let ih0 = (oh0 * a.sh as usize) as isize - a.pt + r as isize * a.dh;
                        for s in 0..a.s {
                            let wv = simd.splat(a.tap(k, r * a.s + s));
                            let ld = col[1 + s];
                            for (i, acc) in acc.iter_mut().enumerate() {
                                let ih = ih0 + i as isize * a.sh;
                                let rm = if i < nrows && (0..a.h).contains(&ih) {
                                    u32::MAX
                                } else {
                                    0
                                };
                                let p = if rm != 0 {
                                    xk.wrapping_offset(ih * a.xrow + ld.off)
                                } else {
                                    xk
                                };
                                let xv = match STEP {
                                    1 => X::load(simd, p, ld.m0 & rm),
                                    2 => simd.load_step2(p, ld.m0 & rm, ld.m1 & rm),
                                    _ => simd.load_strided(p, a.sw, ld.m0 & rm),
                                };
                                *acc = simd.fma(wv, xv, *acc);
                            }
                        }
                    }
                    let out = col[0];
                    for (i, acc) in acc.iter().enumerate() {
                        if i < nrows {
                            let off = row0 + i as isize * a.yrow + out.off;
                            let (y, z) = (yk.wrapping_offset(off), zk.wrapping_offset(off));
                            store_out(simd, &epi, *acc, bias, y, z, out.m0);
                        }
                    }
                }
            }
        }
    }
}

/// The unrolled NHWC-like kernel: R×C taps, stride SW (rows and columns), a group of TR×T
/// outputs per block (no dilation, M = 1). Each input pixel of the group is loaded once and
/// used for every output of the group that needs it; several rows per group cut the reloads
/// of input rows, which do not stay in L1 between output rows (3 rows of W·C elements are
/// more than L1 holds for most layers).
///
/// # Safety
/// That of [`ClFn`], and `a.r == R`, `a.s == C`.
#[inline(always)]
unsafe fn cl_fast<
    S: Simd,
    X: Elem<S>,
    Y: Elem<S>,
    const R: usize,
    const C: usize,
    const SW: usize,
    const TR: usize,
    const T: usize,
>(
    simd: S,
    a: &ClJob<'_, X, Y>,
) {
    const {
        assert!(R * C <= MAX_FAST_TAPS && TR * T <= 16);
        assert!((TR - 1) * SW + R <= 8 && (T - 1) * SW + C <= 12);
    }
    debug_assert!(a.r == R && a.s == C && a.mult == 1 && a.sh == SW as isize);
    let in_rows = (TR - 1) * SW + R;
    // SAFETY: the caller's contract (the token proves the CPU has S's features); pixels are
    // read only inside the image, for each block's lanes; outputs go to the job's rows and
    // blocks.
    unsafe {
        let epi = EpiV::new(simd, a.epi);
        let mut oh0 = a.oh0;
        while oh0 < a.oh1 {
            let nrows = TR.min(a.oh1 - oh0);
            // Pixels outside the image read nothing: their loads have an empty mask. Masks
            // rather than branches keep the accumulators in registers; bit sets rather than
            // arrays avoid stores that the loads would wait for.
            let ih0 = (oh0 * SW) as isize - a.pt;
            let mut vrows = 0u32;
            for d in 0..in_rows.min((nrows - 1) * SW + R) {
                if (0..a.h).contains(&(ih0 + d as isize)) {
                    vrows |= 1 << d;
                }
            }
            let mut ow0 = 0;
            while ow0 < a.ow {
                let nt = T.min(a.ow - ow0);
                let span = (nt - 1) * SW + C;
                let iw0 = (ow0 * SW) as isize - a.pl;
                // Columns of the group inside the image (and needed by a written output).
                let mut vcols = 0u32;
                for e in 0..span {
                    if (0..a.w).contains(&(iw0 + e as isize)) {
                        vcols |= 1 << e;
                    }
                }
                for b in a.b0..a.b1 {
                    let (k0, m) = a.block(b, S::L);
                    let wb = a.wt.wrapping_add((b - a.b0) * a.wblock);
                    let mut wv = [simd.zero(); MAX_FAST_TAPS];
                    for (t, v) in wv.iter_mut().enumerate().take(R * C) {
                        *v = simd.load(wb.wrapping_add(t * a.wstride), m);
                    }
                    let bias = if a.bias.is_null() {
                        simd.zero()
                    } else {
                        simd.load(a.bias.wrapping_offset(k0), m)
                    };
                    let xb = a.x.wrapping_offset(k0);
                    let parked = a.x_parked.wrapping_offset(k0);
                    let mut acc = [[simd.zero(); T]; TR];
                    unroll!(8: d < (TR - 1) * SW + R, {
                        let rm = (vrows >> d & 1).wrapping_neg() & m;
                        let row = xb.wrapping_offset((ih0 + d as isize) * a.xrow);
                        unroll!(12: e < (T - 1) * SW + C, {
                            // Pixels outside the image read nothing, at x's parked address
                            // (see `ClJob::x_parked`).
                            let mm = rm & (vcols >> e & 1).wrapping_neg();
                            let p = if mm != 0 {
                                row.wrapping_offset((iw0 + e as isize) * a.xcol)
                            } else {
                                parked
                            };
                            let xv = X::load(simd, p, mm);
                            for (i, acc) in acc.iter_mut().enumerate() {
                                if d >= i * SW && d - i * SW < R {
                                    let r = d - i * SW;
                                    for (t, acc) in acc.iter_mut().enumerate() {
                                        if e >= t * SW && e - t * SW < C {
                                            let w = wv[r * C + e - t * SW];
                                            *acc = simd.fma(w, xv, *acc);
                                        }
                                    }
                                }
                            }
                        });
                        for acc in acc.iter_mut() {
                            for acc in acc.iter_mut() {
                                *acc = simd.pin(*acc);
                            }
                        }
                    });
                    // Outputs past the image's end: an empty mask, not a branch (see
                    // `plane_fast`).
                    unroll!(16: j < TR * T, {
                        let (i, t) = (j / T, j % T);
                        let (y, z, m) = if i < nrows && t < nt {
                            let off =
                                (oh0 + i) as isize * a.yrow + (ow0 + t) as isize * a.ycol + k0;
                            (a.y.wrapping_offset(off), a.z.wrapping_offset(off), m)
                        } else {
                            (a.y_parked, a.y_parked.cast_const(), 0)
                        };
                        store_out(simd, &epi, acc[i][t], bias, y, z, m);
                    });
                }
                ow0 += T;
            }
            oh0 += TR;
        }
    }
}

/// The generic NHWC-like kernel: any taps, strides, dilations and channel multiplier.
///
/// # Safety
/// That of [`ClFn`].
#[inline(always)]
unsafe fn cl_generic<S: Simd, X: Elem<S>, Y: Elem<S>>(simd: S, a: &ClJob<'_, X, Y>) {
    // SAFETY: as in `cl_fast`; with a multiplier, lane l reads input channel idx[l] of the
    // block, inside the tensor for every enabled lane.
    unsafe {
        let epi = EpiV::new(simd, a.epi);
        for oh in a.oh0..a.oh1 {
            let ih0 = (oh * a.sh as usize) as isize - a.pt;
            let yrow = a.y.wrapping_offset(oh as isize * a.yrow);
            let zrow = a.z.wrapping_offset(oh as isize * a.yrow);
            let mut ow0 = 0;
            while ow0 < a.ow {
                let nt = GENERIC_COLS.min(a.ow - ow0);
                for b in a.b0..a.b1 {
                    let (k0, m) = a.block(b, S::L);
                    let wb = a.wt.wrapping_add((b - a.b0) * a.wblock);
                    let bias = if a.bias.is_null() {
                        simd.zero()
                    } else {
                        simd.load(a.bias.wrapping_offset(k0), m)
                    };
                    // M > 1 has no shift: k0 >= 0.
                    let xb = a.x.wrapping_add(k0 as usize / a.mult);
                    let mut acc = [simd.zero(); GENERIC_COLS];
                    for r in 0..a.r {
                        let ih = ih0 + r as isize * a.dh;
                        if !(0..a.h).contains(&ih) {
                            continue;
                        }
                        let row = xb.wrapping_offset(ih * a.xrow);
                        for s in 0..a.s {
                            let wv = simd.load(wb.wrapping_add((r * a.s + s) * a.wstride), m);
                            for (t, acc) in acc.iter_mut().enumerate() {
                                let iw = ((ow0 + t) as isize) * a.sw - a.pl + s as isize * a.dw;
                                let (mt, p) = if t < nt && (0..a.w).contains(&iw) {
                                    (m, row.wrapping_offset(iw * a.xcol))
                                } else {
                                    (0, row)
                                };
                                let xv = match a.idx.get(b - a.b0) {
                                    None => X::load(simd, p, mt),
                                    Some(idx) => simd.load_idx(p, idx, mt),
                                };
                                *acc = simd.fma(wv, xv, *acc);
                            }
                        }
                    }
                    for (t, acc) in acc.iter().enumerate() {
                        if t < nt {
                            let off = (ow0 + t) as isize * a.ycol + k0;
                            let (y, z) = (yrow.wrapping_offset(off), zrow.wrapping_offset(off));
                            store_out(simd, &epi, *acc, bias, y, z, m);
                        }
                    }
                }
                ow0 += GENERIC_COLS;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel sets: the kernels above monomorphised per instruction set, with their blocking.

/// One instruction set's NCHW-like kernels over x of `X` and y of `Y`, and their blocking;
/// `S` is its token, which each kernel takes.
pub(super) struct PlaneSet<S: 'static, X: 'static = f32, Y: 'static = f32> {
    pub(super) lanes: usize,
    /// Output rows per pass of the unrolled NCHW-like kernels: 3x3, 5x5.
    pub(super) plane_rows: [usize; 2],
    /// [3x3, 5x5][stride 1, 2].
    pub(super) plane_fast: [[PlaneFn<S, X, Y>; 2]; 2],
    /// The same, two channels per vector.
    pub(super) plane_pair: [[PlaneFn<S, X, Y>; 2]; 2],
    /// 3x3, stride 1 and 2, no column dilation: [`Step::Window3S1`], [`Step::Window3`].
    pub(super) plane_win3: [PlaneFn<S, X, Y>; 2],
    /// 3x3 stride 1 over two vectors' columns per entry of its table, where the set has it.
    pub(super) win3_wide: Option<PlaneFn<S, X, Y>>,
    /// By [`Step`]: 1, 2, any.
    pub(super) plane_generic: [PlaneFn<S, X, Y>; 3],
}

/// One instruction set's kernels over x of `X` and y of `Y`, and their blocking; `S` is its
/// token, which each kernel takes.
pub(super) struct KernelSet<S: 'static, X: 'static = f32, Y: 'static = f32> {
    pub(super) plane: PlaneSet<S, X, Y>,
    /// [3x3, 5x5][stride 1, 2].
    pub(super) cl_fast: [[ClFn<S, X, Y>; 2]; 2],
    pub(super) cl_generic: ClFn<S, X, Y>,
}

/// Defines a kernel entry point: a non-generic function (with the instruction set's
/// `target_feature`) taking the set's token, whose body is one monomorphised kernel.
macro_rules! entry {
    ($simd:ty, $(#[$attr:meta])* fn $name:ident($job:ty) = $($kernel:tt)+) => {
        $(#[$attr])*
        unsafe fn $name(s: $simd, a: &$job) {
            // SAFETY: forwarded: the token proves the CPU has the set's features, and the job
            // satisfies the kernel's contract (see `PlaneFn`).
            unsafe { $($kernel)+(s, a) }
        }
    };
}

/// The [`PlaneSet`] of `$simd` over x of `$x` and y of `$y`, compiled with the attributes
/// given: ROWS of the 3x3 and 5x5 kernels.
macro_rules! plane_set {
    ($simd:ty, $x:ty, $y:ty, [$(#[$attr:meta])*], rows = [$p3:literal, $p5:literal]) => {{
        type Job<'a> = PlaneJob<'a, $x, $y>;
        entry!($simd, $(#[$attr])* fn p3s1(Job<'_>) = plane_fast::<$simd, $x, $y, 3, 3, 1, 1, $p3, false>);
        entry!($simd, $(#[$attr])* fn p3s2(Job<'_>) = plane_fast::<$simd, $x, $y, 3, 3, 2, 2, $p3, false>);
        entry!($simd, $(#[$attr])* fn p5s1(Job<'_>) = plane_fast::<$simd, $x, $y, 5, 5, 1, 1, $p5, false>);
        entry!($simd, $(#[$attr])* fn p5s2(Job<'_>) = plane_fast::<$simd, $x, $y, 5, 5, 2, 2, $p5, false>);
        entry!($simd, $(#[$attr])* fn w3s1(Job<'_>) = plane_fast::<$simd, $x, $y, 3, 3, 1, 4, $p3, false>);
        entry!($simd, $(#[$attr])* fn w3s2(Job<'_>) = plane_fast::<$simd, $x, $y, 3, 3, 2, 3, $p3, false>);
        entry!($simd, $(#[$attr])* fn q3s1(Job<'_>) = plane_fast::<$simd, $x, $y, 3, 3, 1, 1, $p3, true>);
        entry!($simd, $(#[$attr])* fn q3s2(Job<'_>) = plane_fast::<$simd, $x, $y, 3, 3, 2, 2, $p3, true>);
        entry!($simd, $(#[$attr])* fn q5s1(Job<'_>) = plane_fast::<$simd, $x, $y, 5, 5, 1, 1, $p5, true>);
        entry!($simd, $(#[$attr])* fn q5s2(Job<'_>) = plane_fast::<$simd, $x, $y, 5, 5, 2, 2, $p5, true>);
        entry!($simd, $(#[$attr])* fn pg1(Job<'_>) = plane_generic::<$simd, $x, $y, 1>);
        entry!($simd, $(#[$attr])* fn pg2(Job<'_>) = plane_generic::<$simd, $x, $y, 2>);
        entry!($simd, $(#[$attr])* fn pgn(Job<'_>) = plane_generic::<$simd, $x, $y, 0>);
        PlaneSet {
            lanes: <$simd as Simd>::L,
            plane_rows: [$p3, $p5],
            plane_fast: [[p3s1, p3s2], [p5s1, p5s2]],
            plane_pair: [[q3s1, q3s2], [q5s1, q5s2]],
            plane_win3: [w3s1, w3s2],
            win3_wide: None,
            plane_generic: [pg1, pg2, pgn],
        }
    }};
}

/// The [`KernelSet`] of `$simd` over x of `$x` and y of `$y`, compiled with the attributes
/// given: ROWS of the NCHW-like 3x3 and 5x5 kernels; output groups (rows, columns) of the
/// NHWC-like 3x3 stride 1, 3x3 stride 2, 5x5 stride 1 and 5x5 stride 2 kernels.
macro_rules! kernel_set {
    ($simd:ty, $x:ty, $y:ty, [$(#[$attr:meta])*], rows = [$p3:literal, $p5:literal],
     groups = [($ar:literal, $ac:literal), ($br:literal, $bc:literal), ($cr:literal, $cc:literal),
               ($dr:literal, $dc:literal)]) => {{
        type Job<'a> = ClJob<'a, $x, $y>;
        entry!($simd, $(#[$attr])* fn c3s1(Job<'_>) = cl_fast::<$simd, $x, $y, 3, 3, 1, $ar, $ac>);
        entry!($simd, $(#[$attr])* fn c3s2(Job<'_>) = cl_fast::<$simd, $x, $y, 3, 3, 2, $br, $bc>);
        entry!($simd, $(#[$attr])* fn c5s1(Job<'_>) = cl_fast::<$simd, $x, $y, 5, 5, 1, $cr, $cc>);
        entry!($simd, $(#[$attr])* fn c5s2(Job<'_>) = cl_fast::<$simd, $x, $y, 5, 5, 2, $dr, $dc>);
        entry!($simd, $(#[$attr])* fn cg(Job<'_>) = cl_generic::<$simd, $x, $y>);
        KernelSet {
            plane: plane_set!($simd, $x, $y, [$(#[$attr])*], rows = [$p3, $p5]),
            cl_fast: [[c3s1, c3s2], [c5s1, c5s2]],
            cl_generic: cg,
        }
    }};
}

// AVX-512: 32 registers hold 9 weights and 7 rows (MobileNet's sizes are multiples of 7) or
// 3x4 outputs of accumulators.
#[cfg(target_arch = "x86_64")]
pub(super) mod avx512_set {
    use super::*;
    pub(crate) static SET: KernelSet<Avx512> = kernel_set!(Avx512, f32, f32,
        [#[target_feature(enable = "avx512f")]], rows = [7, 4],
        groups = [(3, 4), (2, 4), (1, 4), (1, 4)]);
}
// AVX2: 16 registers.
#[cfg(target_arch = "x86_64")]
pub(super) mod avx2_set {
    use super::*;
    pub(crate) static SET: KernelSet<Avx2> = kernel_set!(Avx2, f32, f32,
        [#[target_feature(enable = "avx2,fma")]], rows = [4, 2],
        groups = [(1, 4), (1, 4), (1, 2), (1, 2)]);
}
pub(super) mod portable_set {
    use super::*;
    pub(crate) static SET: KernelSet<Scalar> = kernel_set!(
        Scalar,
        f32,
        f32,
        [],
        rows = [4, 2],
        groups = [(1, 4), (1, 4), (1, 2), (1, 2)]
    );
}

/// The kernels of AVX-512 over bf16 and f16 tensors (x and y of one type), read and written
/// in their own types: the lanes are widened as they are loaded and rounded as they are
/// stored (AVX512-BW and VL for the 16-bit masked accesses; the caller checks them).
#[cfg(target_arch = "x86_64")]
pub(super) mod avx512_reduced {
    use half::{bf16, f16};

    use super::super::simd::Bf16Cvt;
    use super::*;

    pub(crate) static BF16: KernelSet<Avx512, bf16, bf16> = kernel_set!(Avx512, bf16, bf16,
        [#[target_feature(enable = "avx512f,avx512bw,avx512vl")]], rows = [7, 4],
        groups = [(3, 4), (2, 4), (1, 4), (1, 4)]);
    /// bf16 with `vcvtneps2bf16` (AVX512-BF16) rounding the stores.
    pub(crate) static BF16_CVT: KernelSet<Avx512, bf16, Bf16Cvt> = kernel_set!(Avx512, bf16,
        Bf16Cvt, [#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]],
        rows = [7, 4], groups = [(3, 4), (2, 4), (1, 4), (1, 4)]);

    type DotJob<'a> = PlaneJob<'a, bf16, Bf16Cvt>;
    entry!(Avx512, #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
        fn dot3s1(DotJob<'_>) = plane_dot3::<Bf16Cvt, 1, 7, false>);
    entry!(Avx512, #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
        fn dot3s1w(DotJob<'_>) = plane_dot3::<Bf16Cvt, 1, 7, true>);
    entry!(Avx512, #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
        fn dot3s2(DotJob<'_>) = plane_dot3::<Bf16Cvt, 2, 7, false>);

    /// [`BF16_CVT`] whose 3x3 NCHW-like windows run on the dot-product units
    /// ([`plane_dot3`]): for filters whose values are bf16.
    pub(crate) static BF16_DOT: KernelSet<Avx512, bf16, Bf16Cvt> = {
        let set = kernel_set!(Avx512, bf16,
            Bf16Cvt, [#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]],
            rows = [7, 4], groups = [(3, 4), (2, 4), (1, 4), (1, 4)]);
        KernelSet {
            plane: PlaneSet {
                plane_win3: [dot3s1, dot3s2],
                win3_wide: Some(dot3s1w),
                ..set.plane
            },
            ..set
        }
    };
    pub(crate) static F16: KernelSet<Avx512, f16, f16> = kernel_set!(Avx512, f16, f16,
        [#[target_feature(enable = "avx512f,avx512bw,avx512vl")]], rows = [7, 4],
        groups = [(3, 4), (2, 4), (1, 4), (1, 4)]);
}
