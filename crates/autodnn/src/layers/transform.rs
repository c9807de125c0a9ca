//! Layout transforms (cudnnTransformTensor): y = alpha · x + beta · y with x and y of the same
//! dimensions and any strides each: NCHW ↔ NHWC, padded rows, views into larger buffers.
//!
//! The dimensions that are contiguous in both tensors are merged first; then one of two
//! blocked copies runs, both writing y in its own memory order:
//!
//! - **runs**: when y's innermost dimension is also x's (packed to packed of one layout, a
//!   padded view of it), the elements are walked as runs ([`super::Runs`]) and each run
//!   contiguous in both is one vectorised copy (a `memcpy` for alpha = 1, beta = 0), split
//!   among the threads in pieces of about 16 Ki elements (short runs grouped);
//! - **tiles**: when the innermost dimensions differ (NCHW ↔ NHWC: (c, h·w) against
//!   (h·w, c)), the two inner dimensions are transposed in tiles, each tile read as
//!   contiguous rows of x and written as contiguous rows of y: 16 × 16 by AVX-512 (partial
//!   tiles masked; an output past the caches written with non-temporal stores, line by
//!   line; x's sixteen rows prefetched ahead), 8 × 8 by AVX2 shuffles (in pairs, a whole
//!   line of y per row; not streamed), else by plain loops
//!   (`multiversion!`); the threads take blocks of 16 by 2048 elements of the plane (times
//!   the outer dimensions; where the rows of a tensor share their offset in a cache line,
//!   blocks start on lines), each writing its own elements; edges and non-unit inner
//!   strides element by element.
//!
//! Exact: with alpha = 1, beta = 0 the transform is a pure copy (no arithmetic touches a
//! value, so −0 and NaN payloads come through bit for bit); otherwise each element is
//! `alpha · x + beta · y` rounded once per operation in f32, the same on every instruction set
//! and thread count.
//!
//! [`copy_bandwidth`] measures the machine's copy bandwidth with the same contiguous kernel,
//! the yardstick of the memory-bound operators (`autodnn peak --memory`).

use super::{check_buffer, check_same_dims, Blend, Runs};
use crate::desc::{DataType, Layout, TensorDesc};
use crate::error::{Error, Result};
use crate::runtime::parallel::{for_each_with, SharedOut};
use crate::runtime::ExecContext;
use crate::simd::multiversion;

/// Side of the transposed tiles (elements).
const TILE: usize = 8;
/// The blocks the threads take in the tiled transform: BLOCK_SHORT elements (one cache line
/// of floats) along one of the two transposed dimensions by BLOCK_LONG along the other, the
/// long side along the dimension whose stride in the other tensor is the smaller one (NCHW
/// to NHWC: 16 channels by 2048 positions; back: 2048 positions by 16 channels). The
/// tensor that is packed along the short side is then read or written in 16 long runs, the
/// other in whole lines at its smaller stride. 64 × 64 blocks, 64 short runs each way,
/// took twice the time on 1 thread.
const BLOCK_SHORT: usize = 16;
/// See [`BLOCK_SHORT`].
const BLOCK_LONG: usize = 2048;
/// Bytes [`copy_bandwidth`] copies when the caller has no preference (256 MiB).
pub const DEFAULT_BANDWIDTH_BYTES: usize = 256 << 20;

multiversion! {
    /// y = blend(x, y) over contiguous slices of the same length (alpha 1, beta 0: a copy).
    fn blend_run(blend: Blend, x: &[f32], y: &mut [f32]) {
        let (a, b) = (blend.alpha, blend.beta);
        if b == 0.0 {
            if a == 1.0 {
                y.copy_from_slice(x);
            } else {
                for (o, &v) in y.iter_mut().zip(x) {
                    *o = a * v;
                }
            }
        } else {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = a * v + b * *o;
            }
        }
    }
}

multiversion! {
    /// Full TILE × TILE tiles over `ni` × `nj` elements (multiples of TILE):
    /// y[oy + jj·ldy + ii] = blend(x[ox + ii·ldx + jj]), both inner steps 1. Each tile is
    /// read as TILE rows of x and written as TILE rows of y, the transpose in registers.
    /// `y` is the shared output; the caller checked that every element written is in bounds
    /// and belongs to this caller alone.
    fn transpose_tiles(blend: Blend, x: &[f32], ox: usize, ldx: usize, y: *mut f32, oy: usize, ldy: usize, ni: usize, nj: usize) {
        let (a, b) = (blend.alpha, blend.beta);
        let copy = a == 1.0 && b == 0.0;
        let mut jt = 0;
        while jt < nj {
            let mut it = 0;
            while it < ni {
                let mut rows = [[0.0f32; TILE]; TILE];
                for (r, row) in rows.iter_mut().enumerate() {
                    let s = ox + (it + r) * ldx + jt;
                    row.copy_from_slice(&x[s..s + TILE]);
                }
                #[allow(clippy::needless_range_loop)] // jj picks a column of every row
                for jj in 0..TILE {
                    let col: [f32; TILE] = std::array::from_fn(|r| rows[r][jj]);
                    // SAFETY: the caller checked that every element of the ni × nj region
                    // is in bounds of y's buffer and that no other thread touches it.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(y.add(oy + (jt + jj) * ldy + it), TILE)
                    };
                    if copy {
                        dst.copy_from_slice(&col);
                    } else if b == 0.0 {
                        for (o, &v) in dst.iter_mut().zip(&col) {
                            *o = a * v;
                        }
                    } else {
                        for (o, &v) in dst.iter_mut().zip(&col) {
                            *o = a * v + b * *o;
                        }
                    }
                }
                it += TILE;
            }
            jt += TILE;
        }
    }
}

/// The tiles' transpose by AVX2 shuffles: 8 rows of x loaded as vectors, transposed in
/// registers ([`crate::simd::transpose8`]), stored as 8 rows of y; the same data movement
/// (and blend arithmetic, unfused) as [`transpose_tiles`]. Tiles are taken two at a time
/// along y's rows where the block allows, so that each row of y gets a whole 64-byte line
/// at once, and x's rows are prefetched ahead: NCHW → NHWC of 8x256x56x56 on 1 thread
/// 5.2-7.2 → 3.4-4.4 ms. Not streamed: non-temporal stores of those lines (two 8-lane
/// stores each, a row of y apart) took 6.5-7.0 ms on an AVX2-only Zen 3.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Blend, TILE};
    use crate::simd::{transpose8, Avx2};
    use std::arch::x86_64::*;

    /// Elements ahead in each of a tile's source rows at which the loop asks for x's lines
    /// (as AVX-512's `PF_AHEAD`).
    const PF_AHEAD: usize = 128;

    /// [`super::transpose_tiles`] for 8 × 8 tiles.
    ///
    /// # Safety
    /// Every x[i·ldx + j] and y[j·ldy + i] with i < ni, j < nj must be in bounds of the
    /// buffers `x` and `y` point to, and no other thread may access those elements of y
    /// meanwhile.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn transpose_tiles(
        _: Avx2,
        blend: Blend,
        x: *const f32,
        ldx: usize,
        y: *mut f32,
        ldy: usize,
        ni: usize,
        nj: usize,
    ) {
        debug_assert_eq!(TILE, 8);
        let (a, b) = (_mm256_set1_ps(blend.alpha), _mm256_set1_ps(blend.beta));
        let copy = blend.alpha == 1.0 && blend.beta == 0.0;
        let scale_only = blend.beta == 0.0;
        let value = |v: __m256, d: *const f32| {
            if copy {
                v
            } else if scale_only {
                _mm256_mul_ps(a, v)
            } else {
                // SAFETY: d is an element of y's region (the callers' stores go there).
                _mm256_add_ps(
                    _mm256_mul_ps(a, v),
                    _mm256_mul_ps(b, unsafe { _mm256_loadu_ps(d) }),
                )
            }
        };
        let mut jt = 0;
        while jt < nj {
            let mut it = 0;
            while it < ni {
                let pair = it + 2 * TILE <= ni;
                let rows = if pair { 2 * TILE } else { TILE };
                if jt + PF_AHEAD + TILE <= nj {
                    for k in 0..rows {
                        // A prefetch is a hint: it never faults, whatever the address.
                        _mm_prefetch::<_MM_HINT_T0>(
                            x.wrapping_add((it + k) * ldx + jt + PF_AHEAD).cast(),
                        );
                    }
                }
                // SAFETY: rows it .. it + rows, columns jt .. jt + 8 of x's region and the
                // transposed ones of y's, which the caller vouches for.
                unsafe {
                    let p = x.add(it * ldx + jt);
                    let lo = transpose8(std::array::from_fn(|k| _mm256_loadu_ps(p.add(k * ldx))));
                    let q = y.add(jt * ldy + it);
                    if pair {
                        let p = p.add(TILE * ldx);
                        let hi =
                            transpose8(std::array::from_fn(|k| _mm256_loadu_ps(p.add(k * ldx))));
                        for k in 0..TILE {
                            let d = q.add(k * ldy);
                            _mm256_storeu_ps(d, value(lo[k], d));
                            _mm256_storeu_ps(d.add(TILE), value(hi[k], d.add(TILE)));
                        }
                    } else {
                        for (k, &v) in lo.iter().enumerate() {
                            let d = q.add(k * ldy);
                            _mm256_storeu_ps(d, value(v, d));
                        }
                    }
                }
                it += rows;
            }
            jt += TILE;
        }
    }
}

/// The tiles' transpose with AVX-512: 16 × 16 tiles (the partial ones at the block's edges by
/// masked loads and stores), the transpose in registers ([`crate::simd::transpose16`]), the
/// same blend arithmetic as [`transpose_tiles`]. Where the output streams, each whole row of
/// a tile on a 64-byte line is written with a non-temporal store: a transposing copy whose
/// stores fetched y's lines first moved a third more bytes than a copy.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::Blend;
    use crate::simd::{transpose16, Avx512};
    use std::arch::x86_64::*;

    /// Elements ahead in each of a tile's 16 source rows at which the loop asks for x's
    /// lines: sixteen rows a plane apart are more streams than the hardware prefetchers
    /// follow. NCHW → NHWC of 8x256x56x56 on 1 thread, alternated: 3.13-3.61 ms against
    /// 3.37-4.35 without (256 and 1024 ahead: no better).
    const PF_AHEAD: usize = 128;

    /// y[j·ldy + i] = blend(x[i·ldx + j]) for i < ni, j < nj; `stream` only where the blend
    /// does not read y.
    ///
    /// # Safety
    /// Every x[i·ldx + j] and y[j·ldy + i] with i < ni, j < nj must be in bounds of the
    /// buffers `x` and `y` point to, and no other thread may access those elements of y
    /// meanwhile.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn transpose_tiles(
        _: Avx512,
        blend: Blend,
        x: *const f32,
        ldx: usize,
        y: *mut f32,
        ldy: usize,
        ni: usize,
        nj: usize,
        stream: bool,
    ) {
        let (a, b) = (_mm512_set1_ps(blend.alpha), _mm512_set1_ps(blend.beta));
        let copy = blend.alpha == 1.0 && blend.beta == 0.0;
        let scale_only = blend.beta == 0.0;
        let mask = |w: usize| ((1u32 << w) - 1) as __mmask16;
        let mut jt = 0;
        while jt < nj {
            let wj = (nj - jt).min(16);
            let mut it = 0;
            while it < ni {
                let wi = (ni - it).min(16);
                let mut r = [_mm512_setzero_ps(); 16];
                // Only inside this block's part of the rows (where rows are short, as
                // NHWC → NCHW's, the next lines are the next rows').
                if jt + PF_AHEAD + 16 <= nj {
                    for k in 0..wi {
                        // A prefetch is a hint: it never faults, whatever the address.
                        _mm_prefetch::<_MM_HINT_T0>(
                            x.wrapping_add((it + k) * ldx + jt + PF_AHEAD).cast(),
                        );
                    }
                }
                if wi == 16 && wj == 16 {
                    // SAFETY: rows it .. it + 16, columns jt .. jt + 16 of the region the
                    // caller vouches for.
                    r = std::array::from_fn(|k| unsafe {
                        _mm512_loadu_ps(x.add((it + k) * ldx + jt))
                    });
                } else {
                    for (k, r) in r.iter_mut().enumerate().take(wi) {
                        // SAFETY: row it + k, columns jt .. jt + wj of the region the caller
                        // vouches for; the mask leaves the others unread.
                        *r = unsafe { _mm512_maskz_loadu_ps(mask(wj), x.add((it + k) * ldx + jt)) };
                    }
                }
                let o = transpose16(r);
                for (q, &v) in o.iter().enumerate().take(wj) {
                    // SAFETY: row jt + q, columns it .. it + wi of y's region (as above),
                    // masked to them; a streamed row is whole (16 elements) on its line.
                    unsafe {
                        let d = y.add((jt + q) * ldy + it);
                        let v = if copy {
                            v
                        } else if scale_only {
                            _mm512_mul_ps(a, v)
                        } else {
                            let prior = _mm512_maskz_loadu_ps(mask(wi), d);
                            _mm512_add_ps(_mm512_mul_ps(a, v), _mm512_mul_ps(b, prior))
                        };
                        if stream && wi == 16 && (d as usize).is_multiple_of(64) {
                            _mm512_stream_ps(d, v);
                        } else {
                            _mm512_mask_storeu_ps(d, mask(wi), v);
                        }
                    }
                }
                it += 16;
            }
            jt += 16;
        }
        if stream {
            // The streamed lines are ordered before anything this thread stores next (the
            // work item's completion, which the caller's join reads).
            _mm_sfence();
        }
    }
}

/// The dimensions of a transform, merged where contiguous in both tensors and ordered by y's
/// strides, outermost first.
#[derive(Debug, Clone, Copy)]
struct Plan {
    ext: [usize; 4],
    sy: [usize; 4],
    sx: [usize; 4],
    nd: usize,
}

impl Plan {
    fn new(dims: [usize; 4], sy: [usize; 4], sx: [usize; 4]) -> Plan {
        let mut order: Vec<usize> = (0..4).filter(|&d| dims[d] > 1).collect();
        order.sort_by_key(|&d| std::cmp::Reverse((sy[d], dims[d])));
        let mut p = Plan {
            ext: [1; 4],
            sy: [1; 4],
            sx: [1; 4],
            nd: 0,
        };
        for &d in &order {
            if p.nd > 0 {
                let o = p.nd - 1;
                if p.sy[o] == sy[d] * dims[d] && p.sx[o] == sx[d] * dims[d] {
                    p.ext[o] *= dims[d];
                    p.sy[o] = sy[d];
                    p.sx[o] = sx[d];
                    continue;
                }
            }
            p.ext[p.nd] = dims[d];
            p.sy[p.nd] = sy[d];
            p.sx[p.nd] = sx[d];
            p.nd += 1;
        }
        p
    }

    /// (y's innermost dimension, x's innermost dimension) when they differ.
    fn transposed(&self) -> Option<(usize, usize)> {
        if self.nd < 2 {
            return None;
        }
        let i = self.nd - 1;
        let j = (0..self.nd).min_by_key(|&d| self.sx[d])?;
        (j != i).then_some((i, j))
    }
}

/// y = alpha · x + beta · y, element by element, x and y of the same dimensions and any
/// strides each (cudnnTransformTensor): layout changes (NCHW ↔ NHWC), padding or unpadding
/// rows, copies between views. With alpha = 1, beta = 0 a pure copy, bit for bit.
///
/// # Errors
/// [`Error::BadParam`] naming `y` for other dimensions, `alpha`/`beta` when not finite;
/// [`Error::BufferTooSmall`] naming `x` or `y`; [`Error::Unsupported`] for types other than
/// f32.
///
/// # Examples
/// ```
/// use autodnn::{layers::Blend, DataType, Handle, Layout, TensorDesc};
/// let h = Handle::with_threads(1)?;
/// let nchw = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 1, 3])?;
/// let nhwc = TensorDesc::new(DataType::F32, Layout::Nhwc, [1, 2, 1, 3])?;
/// let x = [1.0, 2.0, 3.0, 10.0, 20.0, 30.0]; // c0: 1 2 3, c1: 10 20 30
/// let mut y = [0.0; 6];
/// h.transform_tensor(Blend::default(), &nchw, &x, &nhwc, &mut y)?;
/// assert_eq!(y, [1.0, 10.0, 2.0, 20.0, 3.0, 30.0]);
/// # let _ = autodnn::layers::transform::forward;
/// # Ok::<(), autodnn::Error>(())
/// ```
pub fn forward(
    ctx: &ExecContext<'_>,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &mut [f32],
) -> Result<()> {
    blend.check()?;
    check_same_dims("y", x_desc, y_desc)?;
    check_buffer("x", x_desc, x.len())?;
    check_buffer("y", y_desc, y.len())?;
    let plan = Plan::new(y_desc.dims(), y_desc.strides(), x_desc.strides());
    match plan.transposed() {
        Some((i, j)) => {
            let stream = super::streams(blend.reads_output(), y_desc);
            tiled(ctx, blend, &plan, (i, j), stream, x, y)
        }
        None => by_runs(ctx, blend, x_desc, x, y_desc, y),
    }
}

/// The runs path: y's inner dimension is x's too.
fn by_runs(
    ctx: &ExecContext<'_>,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &mut [f32],
) -> Result<()> {
    let runs = Runs::new(y_desc.dims(), [y_desc.strides(), x_desc.strides()]);
    let features = ctx.features();
    super::tensor_ops::for_each_grouped(ctx, &runs, y, |out, r, first, len| {
        let [oy, ox] = runs.start(r);
        let [sy, sx] = runs.inner;
        if sy == 1 && sx == 1 {
            // SAFETY: the piece's elements are its own (runs of distinct coordinates,
            // descriptors that do not alias); no other piece touches them.
            let dst = unsafe { out.slice_mut(oy + first, len) };
            blend_run(features, blend, &x[ox + first..ox + first + len], dst);
        } else {
            for j in first..first + len {
                let v = x[ox + j * sx];
                let at = oy + j * sy;
                // SAFETY: element `at` belongs to this piece alone (as above).
                unsafe {
                    let prior = if blend.reads_output() {
                        out.read(at)
                    } else {
                        0.0
                    };
                    out.write(at, apply(blend, v, prior));
                }
            }
        }
    })
}

/// alpha · v + beta · prior, a pure copy for alpha 1, beta 0.
#[inline(always)]
fn apply(blend: Blend, v: f32, prior: f32) -> f32 {
    if blend.beta == 0.0 && blend.alpha == 1.0 {
        v
    } else {
        blend.apply(v, prior)
    }
}

/// Blocks of `block` elements over `0..n`, after a first one of `head` elements when `head`
/// is not 0 (so that the others start at a cache line).
struct Grid {
    n: usize,
    block: usize,
    head: usize,
}

impl Grid {
    fn new(n: usize, block: usize, head: usize) -> Grid {
        Grid {
            n,
            block,
            head: head.min(n),
        }
    }

    fn count(&self) -> usize {
        usize::from(self.head > 0) + (self.n - self.head).div_ceil(self.block)
    }

    /// Block `b`'s range.
    fn block(&self, b: usize) -> (usize, usize) {
        if self.head > 0 && b == 0 {
            return (0, self.head);
        }
        let k = b - usize::from(self.head > 0);
        let start = self.head + k * self.block;
        (start, (start + self.block).min(self.n))
    }
}

/// The tiled path: dimension `i` is y's innermost, `j` x's; the others (at most two) are
/// outer loops.
fn tiled(
    ctx: &ExecContext<'_>,
    blend: Blend,
    p: &Plan,
    (i, j): (usize, usize),
    stream: bool,
    x: &[f32],
    y: &mut [f32],
) -> Result<()> {
    let outer: Vec<usize> = (0..p.nd).filter(|&d| d != i && d != j).collect();
    let (ni, nj) = (p.ext[i], p.ext[j]);
    let (syi, syj, sxi, sxj) = (p.sy[i], p.sy[j], p.sx[i], p.sx[j]);
    let fast = syi == 1 && sxj == 1;
    // Where every row of y (of x) starts at the same offset within a cache line, the
    // blocks along its inner dimension start at line boundaries after a first partial block.
    let lines = |base: *const f32, row: usize, outer_strides: &[usize; 4]| {
        let even = |s: usize| s.is_multiple_of(super::LINE / 4);
        if fast && even(row) && outer.iter().all(|&d| even(outer_strides[d])) {
            super::to_line(base as usize)
        } else {
            0
        }
    };
    let (block_i, block_j) = if sxi < syj {
        (BLOCK_LONG, BLOCK_SHORT)
    } else {
        (BLOCK_SHORT, BLOCK_LONG)
    };
    let gi = Grid::new(ni, block_i, lines(y.as_ptr(), syj, &p.sy));
    let gj = Grid::new(nj, block_j, lines(x.as_ptr(), sxi, &p.sx));
    let (bi, bj) = (gi.count(), gj.count());
    let n_outer: usize = outer.iter().map(|&d| p.ext[d]).product();
    let items = n_outer * bi * bj;
    let features = ctx.features();
    #[cfg(target_arch = "x86_64")]
    let (avx512, avx2) = (
        <crate::simd::Avx512 as crate::simd::Token>::new(features),
        <crate::simd::Avx2 as crate::simd::Token>::new(features),
    );
    #[cfg(target_arch = "x86_64")]
    let masked_tiles = avx512.is_some();
    #[cfg(not(target_arch = "x86_64"))]
    let masked_tiles = false;
    let out = SharedOut::new(y);
    let ylen = out.len();
    let one = |_: &mut (), item: usize| {
        let (mut o, b) = (item / (bi * bj), item % (bi * bj));
        let ((i0, i1), (j0, j1)) = (gi.block(b / bj), gj.block(b % bj));
        let (mut oy, mut ox) = (0, 0);
        for &d in outer.iter().rev() {
            let k = o % p.ext[d];
            o /= p.ext[d];
            oy += k * p.sy[d];
            ox += k * p.sx[d];
        }
        // Every element of the block lies inside y's span (the descriptor was checked
        // against the buffer); this guards the unchecked stores below.
        assert!(oy + (i1 - 1) * syi + (j1 - 1) * syj < ylen);
        // The tiles in a kernel (with AVX-512 the whole block, its partial tiles masked;
        // else the whole 8 × 8 tiles); the rest, and strided inner steps, element by element.
        let (fi, fj) = match (fast, masked_tiles) {
            (false, _) => (0, 0),
            (true, true) => (i1 - i0, j1 - j0),
            (true, false) => ((i1 - i0) / TILE * TILE, (j1 - j0) / TILE * TILE),
        };
        if fi > 0 && fj > 0 {
            let (ty, tx) = (oy + i0 + j0 * syj, ox + i0 * sxi + j0);
            // The tiles read inside x's span (checked against the buffer).
            assert!(tx + (fi - 1) * sxi + fj - 1 < x.len());
            let mut done = false;
            #[cfg(target_arch = "x86_64")]
            {
                let (xp, yp) = (
                    x.as_ptr().wrapping_add(tx),
                    out.as_mut_ptr().wrapping_add(ty),
                );
                // SAFETY: the region's elements are in bounds of x and y (asserted above),
                // and this item alone writes them; each token proves its instruction set.
                unsafe {
                    if let Some(t) = avx512 {
                        avx512::transpose_tiles(t, blend, xp, sxi, yp, syj, fi, fj, stream);
                        done = true;
                    } else if let Some(t) = avx2 {
                        avx2::transpose_tiles(t, blend, xp, sxi, yp, syj, fi, fj);
                        done = true;
                    }
                }
            }
            if !done {
                transpose_tiles(
                    features,
                    blend,
                    x,
                    tx,
                    sxi,
                    out.as_mut_ptr(),
                    ty,
                    syj,
                    fi,
                    fj,
                );
            }
        }
        let scalar = |ia: usize, ib: usize, ja: usize, jb: usize| {
            for jj in ja..jb {
                for ii in ia..ib {
                    let at = oy + ii * syi + jj * syj;
                    let v = x[ox + ii * sxi + jj * sxj];
                    // SAFETY: element `at` is in this block, which only this item writes
                    // (distinct coordinates never share memory).
                    unsafe {
                        let prior = if blend.reads_output() {
                            out.read(at)
                        } else {
                            0.0
                        };
                        out.write(at, apply(blend, v, prior));
                    }
                }
            }
        };
        if fi == 0 || fj == 0 {
            scalar(i0, i1, j0, j1);
        } else {
            // Right of the full tiles (all of j), then below them (the full tiles' j).
            scalar(i0 + fi, i1, j0, j1);
            scalar(i0, i0 + fi, j0 + fj, j1);
        }
    };
    let total = n_outer * ni * nj;
    if ctx.threads <= 1 || total < super::PARALLEL_MIN_ELEMENTS {
        (0..items).for_each(|it| one(&mut (), it));
        return Ok(());
    }
    for_each_with(ctx, items, || Ok(()), one)
}

/// The copy bandwidth in GB/s (10⁹ bytes per second, bytes read plus bytes written): the
/// median over `reps` timed copies of a buffer of `bytes` (rounded down to whole f32s) into
/// another, split among the context's threads, with the kernel a contiguous [`forward`] runs
/// (after one untimed copy that touches both buffers). [`DEFAULT_BANDWIDTH_BYTES`] (256 MiB)
/// is well past any cache.
///
/// # Errors
/// [`Error::BadParam`] naming `bytes` (under 4) or `reps` (0); [`Error::OutOfMemory`] when
/// the buffers cannot be allocated.
pub fn copy_bandwidth(ctx: &ExecContext<'_>, bytes: usize, reps: usize) -> Result<f64> {
    let n = bytes / 4;
    if n == 0 {
        return Err(Error::bad("bytes", bytes, "must be at least 4"));
    }
    if reps == 0 {
        return Err(Error::bad("reps", reps, "must be at least 1"));
    }
    let desc = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 1, 1, n])?;
    let x = crate::alloc::try_vec(n, 1.0f32, "copy_bandwidth source")?;
    let mut y = crate::alloc::try_vec(n, 0.0f32, "copy_bandwidth destination")?;
    forward(ctx, Blend::default(), &desc, &x, &desc, &mut y)?;
    let mut times = crate::alloc::try_vec_with_capacity(reps, "copy_bandwidth times")?;
    for _ in 0..reps {
        let t = std::time::Instant::now();
        forward(ctx, Blend::default(), &desc, &x, &desc, &mut y)?;
        times.push(t.elapsed().as_secs_f64().max(1e-9));
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    Ok(2.0 * (n * 4) as f64 / median / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_merge_and_find_the_transposed_pair() {
        let d = [2, 3, 4, 5];
        let nchw = [60, 20, 5, 1];
        let nhwc = [60, 1, 15, 3];
        // Same layout: one merged dimension, no transpose.
        let p = Plan::new(d, nchw, nchw);
        assert_eq!((p.nd, p.ext[0]), (1, 120));
        assert!(p.transposed().is_none());
        // NCHW into NHWC: (n, hw, c) in y's order; y's inner is c, x's inner is hw.
        let p = Plan::new(d, nhwc, nchw);
        assert_eq!(&p.ext[..p.nd], &[2, 20, 3]);
        assert_eq!(p.transposed(), Some((2, 1)));
    }
}
