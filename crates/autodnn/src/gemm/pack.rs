//! Packing: copying blocks of the operands into the micro-kernel's panel format.
//!
//! The engine works in its own frame (see [`super::loops`]): C is `m × n`, A is `m × k` (the
//! *vector side*: `MR` consecutive rows are one vector load per depth step) and B is `k × n`
//! (the *broadcast side*: `NR` values per depth step are broadcast). Packing is pluggable:
//! anything that can produce panels implements [`PackA`] or [`PackB`]. A strided matrix
//! ([`StridedMatrix`]) is the plain implementation; implicit-GEMM convolution implements the
//! same traits to pack panels straight from an input image (im2col on the fly), so nothing
//! is materialised.
//!
//! Formats (f32, whatever the input element type):
//! - A block of rows `i0 .. i0 + mc`, depth `p0 .. p0 + kc`: `ceil(mc / mr)` micro-panels one
//!   after the other, each `kc × mr` with element `(i, p)` at `p·mr + i`; rows past `mc` are
//!   zero.
//! - B panel of depth `p0 .. p0 + kc`, columns `j0 .. j0 + nc`: `ceil(nc / nr)` micro-panels,
//!   each `kc × nr` with element `(p, j)` at `p·nr + j`; columns past `nc` are zero.

use super::kernels::{PackFormat, Transposer};
use super::GemmInput;

/// Asks for the cache line holding `x` ahead of its use (a hint: never faults). Source rows
/// of a block are often a page or more apart, where hardware prefetchers stop.
#[inline(always)]
pub(super) fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86-64 baseline; a prefetch never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (x as *const T).cast(),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Source columns (or rows) fetched ahead while packing.
const PREFETCH_AHEAD: usize = 2;

/// Strips fetched ahead of the vectorised transpose, in each source row (a strip is one
/// 64-byte line of f32: the rows are far apart, each its own stream).
const TRANSPOSE_PREFETCH_STRIPS: usize = 4;

/// The widest transposer strip whose converted copy (operands of other types than f32)
/// packing keeps on the stack: W rows of this many floats.
const MAX_CONVERTED_STRIP: usize = 16;

/// Packs blocks of the vector-side operand A (`m × k` in the engine's frame).
pub trait PackA: Sync {
    /// Writes rows `i0 .. i0 + mc` and depth `p0 .. p0 + kc` into `dst` as `ceil(mc / mr)`
    /// micro-panels of `kc × mr` (element `(i, p)` of a panel at `p·mr + i`), zero-filling
    /// rows past `mc`. `dst` holds exactly `ceil(mc / mr)·mr·kc` elements. The engine only
    /// asks for ranges inside the problem.
    ///
    /// # Errors
    /// [`crate::Error::OutOfMemory`] when scratch the packing needs cannot be allocated.
    fn pack_a(
        &self,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
        dst: &mut [f32],
    ) -> crate::Result<()>;

    /// Writes what [`PackA::pack_a`] would write in the bf16-pair format of the families
    /// that read pairs (pair step q of a micro-panel, depths 2q and 2q + 1 in the low and
    /// high half of a 32-bit slot, at `q·mr + i` from the panel's start; the panel keeps its
    /// `kc·mr` elements), where this packer can without rounding anything (bf16 data), and
    /// returns true; false (the default) to have f32 panels packed and rounded into pairs.
    ///
    /// # Errors
    /// As [`PackA::pack_a`].
    fn pack_a_pairs(
        &self,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
        dst: &mut [f32],
    ) -> crate::Result<bool> {
        let _ = (i0, mc, p0, kc, mr, dst);
        Ok(false)
    }

    /// When A is f32 and unit-stride along rows, the whole operand and its depth stride:
    /// element `(i, p)` is at `i + p·lda`. The engine may then read full micro-panels in place
    /// instead of packing them. The default is `None` (always pack).
    fn in_place(&self) -> Option<(&[f32], usize)> {
        None
    }

    /// When the operand is already packed (prepared weights), the block `pack_a` would write
    /// for these arguments, to be read in place; `None` (the default) to have it packed.
    /// The slice must hold exactly what `pack_a` would write: `ceil(mc / mr)·mr·kc`
    /// elements in the same format.
    fn prepacked_a(&self, i0: usize, mc: usize, p0: usize, kc: usize, mr: usize) -> Option<&[f32]> {
        let _ = (i0, mc, p0, kc, mr);
        None
    }

    /// As [`PackA::prepacked_a`], for the bf16 `format` of the kernel families that read
    /// pairs (for [`PackFormat::Bf16Pairs`], the `ceil(kc / 2)` pair steps of each
    /// micro-panel at its start, in the same `mr·kc` elements; [`PackFormat::AmxTiles`] as
    /// that family lays them out): what prepared weights made for such a family hold. `None`
    /// for panels of another format.
    fn prepacked_pairs_a(
        &self,
        format: PackFormat,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
    ) -> Option<&[f32]> {
        let _ = (format, i0, mc, p0, kc, mr);
        None
    }
}

/// Packs panels of the broadcast-side operand B (`k × n` in the engine's frame).
pub trait PackB: Sync {
    /// Writes depth `p0 .. p0 + kc` and columns `j0 .. j0 + nc` into `dst` as
    /// `ceil(nc / nr)` micro-panels of `kc × nr` (element `(p, j)` of a panel at `p·nr + j`),
    /// zero-filling columns past `nc`. `dst` holds exactly `ceil(nc / nr)·nr·kc` elements.
    ///
    /// # Errors
    /// [`crate::Error::OutOfMemory`] when scratch the packing needs cannot be allocated.
    fn pack_b(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
        dst: &mut [f32],
    ) -> crate::Result<()>;

    /// As [`PackA::pack_a_pairs`], for B's panels.
    ///
    /// # Errors
    /// As [`PackB::pack_b`].
    fn pack_b_pairs(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
        dst: &mut [f32],
    ) -> crate::Result<bool> {
        let _ = (p0, kc, j0, nc, nr, dst);
        Ok(false)
    }

    /// When the operand is already packed (prepared weights), the panel `pack_b` would write
    /// for these arguments, to be read in place; `None` (the default) to have it packed.
    /// The slice must hold exactly what `pack_b` would write: `ceil(nc / nr)·nr·kc`
    /// elements in the same format.
    fn prepacked_b(&self, p0: usize, kc: usize, j0: usize, nc: usize, nr: usize) -> Option<&[f32]> {
        let _ = (p0, kc, j0, nc, nr);
        None
    }

    /// As [`PackB::prepacked_b`], for a bf16 format (see [`PackA::prepacked_pairs_a`]).
    fn prepacked_pairs_b(
        &self,
        format: PackFormat,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
    ) -> Option<&[f32]> {
        let _ = (format, p0, kc, j0, nc, nr);
        None
    }

    /// When B is f32 and unit-stride along the depth, the whole operand and its column
    /// stride: element `(p, j)` is at `p + j·ldb`. The engine may then read micro-panels in
    /// place instead of packing them. The default is `None` (always pack).
    fn in_place_b(&self) -> Option<(&[f32], usize)> {
        None
    }

    /// When B is f32 and unit-stride along its columns, the whole operand and its depth
    /// stride: element `(p, j)` is at `p·ldb + j`. The engine may then read micro-panels in
    /// place by rows instead of packing them. The default is `None` (always pack).
    fn in_place_b_rows(&self) -> Option<(&[f32], usize)> {
        None
    }
}

/// A matrix given by a slice, its shape and a stride per dimension, in elements. The
/// constructor checks that every element lies inside the slice, so packing never reads out
/// of bounds.
#[derive(Debug, Clone, Copy)]
pub struct StridedMatrix<'a, T> {
    data: &'a [T],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
    transposer: Option<&'static Transposer>,
}

impl<'a, T: GemmInput> StridedMatrix<'a, T> {
    /// A `rows × cols` matrix with element `(r, c)` at `data[r·rs + c·cs]`; `None` when an
    /// element would lie outside `data` (or the offset overflows).
    pub fn new(data: &'a [T], rows: usize, cols: usize, rs: usize, cs: usize) -> Option<Self> {
        let span = super::desc::span(rows, cols, rs, cs)?;
        (span <= data.len()).then_some(StridedMatrix {
            data,
            rows,
            cols,
            rs,
            cs,
            transposer: None,
        })
    }

    /// Uses the vectorised transpose of the kernel family GEMM runs with the usable
    /// `features`, where packing transposes (as the engine's own entry points do).
    pub(crate) fn for_features(self, features: crate::cpu::Features) -> Self {
        self.with_transposer(super::kernels::kernel_set(features).transposer)
    }

    /// Uses a kernel family's vectorised transpose where packing transposes.
    pub(crate) fn with_transposer(mut self, t: Option<&'static Transposer>) -> Self {
        self.transposer = t;
        self
    }

    /// The transpose (a view: strides swapped).
    pub fn t(self) -> Self {
        StridedMatrix {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// When the data is f32 with contiguous columns (`rs == 1`), the data and the column
    /// stride: what either operand is read in place from.
    fn f32_columns(&self) -> Option<(&'a [f32], usize)> {
        if self.rs != 1 {
            return None;
        }
        T::as_f32(self.data).map(|d| (d, self.cs))
    }

    /// Packs rows `r0 .. r0 + rows` and columns `c0 .. c0 + len` as `ceil(rows / w)`
    /// micro-panels of `len × w` (see [`StridedMatrix::pack_panel`]).
    fn pack_block(&self, r0: usize, rows: usize, c0: usize, len: usize, w: usize, dst: &mut [f32]) {
        if self.rs == 1 && rows >= w {
            if let Some(d) = T::as_f32(self.data) {
                // Rows of the panels are contiguous in the source: read each source column
                // once, sequentially, scattering it over all panels. (Panel by panel, each
                // depth step would touch a new source line, often a new page, which the
                // hardware prefetchers do not follow.)
                macro_rules! fixed {
                    ($($w:literal)*) => {
                        match w {
                            $($w => return Self::pack_block_f32::<$w>(d, self.cs, r0, rows, c0, len, dst),)*
                            _ => {}
                        }
                    };
                }
                fixed!(4 6 8 14 16 32);
            }
        }
        for (q, panel) in dst.chunks_exact_mut(w * len).enumerate() {
            let p0 = r0 + q * w;
            let rv = w.min(r0 + rows - p0);
            self.pack_panel(p0, rv, c0, len, w, panel);
        }
    }

    /// `pack_block` for f32 data whose rows are contiguous (`rs == 1`), width `W`.
    fn pack_block_f32<const W: usize>(
        d: &[f32],
        cs: usize,
        r0: usize,
        rows: usize,
        c0: usize,
        len: usize,
        dst: &mut [f32],
    ) {
        let full = rows / W;
        let rest = rows - full * W;
        let panel = W * len;
        for c in 0..len {
            let start = r0 + (c0 + c) * cs;
            let src = &d[start..start + rows];
            if c + PREFETCH_AHEAD < len {
                let ahead = start + PREFETCH_AHEAD * cs;
                for x in d[ahead..ahead + rows].iter().step_by(16) {
                    prefetch(x);
                }
            }
            for (q, chunk) in src.chunks_exact(W).enumerate() {
                let chunk: &[f32; W] = chunk.try_into().unwrap();
                let out: &mut [f32; W] = (&mut dst[q * panel + c * W..q * panel + (c + 1) * W])
                    .try_into()
                    .unwrap();
                *out = *chunk;
            }
            if rest > 0 {
                let out = &mut dst[full * panel + c * W..full * panel + (c + 1) * W];
                out[..rest].copy_from_slice(&src[full * W..]);
                out[rest..].fill(0.0);
            }
        }
    }

    /// Packs rows `r0 .. r0 + rv` (zero-padding to `w`) of columns `c0 .. c0 + len` into
    /// `dst` with element `(r, c)` at `(c − c0)·w + (r − r0)`: a micro-panel whose vector
    /// runs along this matrix's rows. Full panels of the kernels' widths take loops with a
    /// compile-time width (no per-row library calls, unrolled transposes).
    pub(crate) fn pack_panel(
        &self,
        r0: usize,
        rv: usize,
        c0: usize,
        len: usize,
        w: usize,
        dst: &mut [f32],
    ) {
        macro_rules! fixed {
            ($($w:literal)*) => {
                match w {
                    $($w if rv == $w => return self.pack_fixed::<$w>(r0, c0, len, dst),)*
                    _ => {}
                }
            };
        }
        fixed!(4 6 8 14 16 32);
        self.pack_any(r0, rv, c0, len, w, dst)
    }

    /// `pack_panel` for a full panel of compile-time width `W`.
    fn pack_fixed<const W: usize>(&self, r0: usize, c0: usize, len: usize, dst: &mut [f32]) {
        debug_assert!(dst.len() == len * W && r0 + W <= self.rows && c0 + len <= self.cols);
        let d = self.data;
        if len == 0 {
            return;
        }
        if self.rs == 1 {
            if let Some(d) = T::as_f32(d) {
                return Self::pack_block_f32::<W>(d, self.cs, r0, W, c0, len, dst);
            }
            for (c, out) in dst.chunks_exact_mut(W).enumerate() {
                let start = r0 + (c0 + c) * self.cs;
                T::to_f32_slice(&d[start..start + W], out);
            }
        } else if self.cs == 1 {
            // A transpose: W source rows read side by side, in strips of S columns (one
            // 64-byte line of f32) so that each source line is used whole at once (rows a
            // power of two apart share L1 sets) and the writes fill whole panel rows.
            const S: usize = 16;
            let rows: [&[T]; W] = std::array::from_fn(|r| {
                let start = (r0 + r) * self.rs + c0;
                &d[start..start + len]
            });
            let mut c = 0;
            // Other element types than f32: each strip of the W rows converted to f32
            // (contiguous runs, in vectors) into a copy on the stack, transposed from there.
            let d32 = T::as_f32(d);
            // Panels wider than the transposer's rows (A's panels: MR is two vectors) go
            // through it in blocks of `max_w` rows, each writing its part of the panel rows.
            let transposer = self
                .transposer
                .filter(|tr| d32.is_some() || tr.strip <= MAX_CONVERTED_STRIP);
            if let Some(tr) = transposer {
                let base = r0 * self.rs + c0;
                let last = base + (W - 1) * self.rs;
                let mut copy: Option<[[f32; MAX_CONVERTED_STRIP]; W]> = None;
                let ahead = TRANSPOSE_PREFETCH_STRIPS * tr.strip;
                while c + tr.strip <= len {
                    if c + ahead + tr.strip <= len {
                        for row in &rows {
                            prefetch(&row[c + ahead]);
                        }
                    }
                    let (src, ld) = match d32 {
                        Some(d32) => {
                            // Bounds: every row's strip lies in d (last row checked by
                            // slicing).
                            let _ = &d32[last + c..last + c + tr.strip];
                            (d32[base + c..].as_ptr(), self.rs)
                        }
                        None => {
                            // Lazily, once: f32 operands never pay for zeroing the copy.
                            #[allow(clippy::unnecessary_lazy_evaluations)]
                            let copy = copy.get_or_insert_with(|| [[0f32; MAX_CONVERTED_STRIP]; W]);
                            for (t, row) in copy.iter_mut().zip(&rows) {
                                T::to_f32_slice(&row[c..c + tr.strip], &mut t[..tr.strip]);
                            }
                            (copy.as_ptr().cast::<f32>(), MAX_CONVERTED_STRIP)
                        }
                    };
                    let out = &mut dst[c * W..(c + tr.strip) * W];
                    // SAFETY: the family's features are this CPU's (kernel_set caps them);
                    // rows r < W of the strip are at src + r·ld .. + strip: in d (the last
                    // row is checked above and rows are evenly spaced from the first) or in
                    // the copy (strip ≤ MAX_CONVERTED_STRIP floats a row); `out` is a checked
                    // slice of W·strip floats, output row q at q·W.
                    unsafe { tr.strip_rows(src, ld, W, out.as_mut_ptr(), W) };
                    c += tr.strip;
                }
            }
            while c + S <= len {
                if c + 2 * S <= len {
                    for row in &rows {
                        prefetch(&row[c + S]);
                    }
                }
                let mut strip = [[0f32; W]; S];
                for (r, row) in rows.iter().enumerate() {
                    let src: &[T; S] = row[c..c + S].try_into().unwrap();
                    for (q, s) in src.iter().enumerate() {
                        strip[q][r] = s.to_f32();
                    }
                }
                dst[c * W..(c + S) * W].copy_from_slice(strip.as_flattened());
                c += S;
            }
            for c in c..len {
                let out: &mut [f32; W] = (&mut dst[c * W..(c + 1) * W]).try_into().unwrap();
                for (o, row) in out.iter_mut().zip(&rows) {
                    *o = row[c].to_f32();
                }
            }
        } else {
            for (c, out) in dst.chunks_exact_mut(W).enumerate() {
                let base = (c0 + c) * self.cs + r0 * self.rs;
                let out: &mut [f32; W] = out.try_into().unwrap();
                for (r, o) in out.iter_mut().enumerate() {
                    *o = d[base + r * self.rs].to_f32();
                }
            }
        }
    }

    /// `pack_panel` for any width and a possibly ragged panel.
    fn pack_any(&self, r0: usize, rv: usize, c0: usize, len: usize, w: usize, dst: &mut [f32]) {
        debug_assert!(rv <= w && dst.len() == len * w);
        debug_assert!(r0 + rv <= self.rows && c0 + len <= self.cols);
        let d = self.data;
        for (c, out) in dst.chunks_exact_mut(w).enumerate() {
            let base = (c0 + c) * self.cs + r0 * self.rs;
            for (r, o) in out[..rv].iter_mut().enumerate() {
                *o = d[base + r * self.rs].to_f32();
            }
            out[rv..].fill(0.0);
        }
    }
}

impl<T: GemmInput> StridedMatrix<'_, T> {
    /// [`StridedMatrix::pack_block`] in the bf16-pair format, for bf16 data: pair step q of
    /// panel p holds columns `c0 + 2q` (low half) and `c0 + 2q + 1` (high half, zero past
    /// `len`) of its `w` rows (zero past `rows`). False for other types.
    fn pack_pairs_block(
        &self,
        r0: usize,
        rows: usize,
        c0: usize,
        len: usize,
        w: usize,
        dst: &mut [f32],
    ) -> bool {
        let Some(bits) = T::as_bf16_bits(self.data) else {
            // f32 data whose rows are contiguous, for the families that read pairs (all need
            // AVX512-BF16): rounded while packing, as their conversion of f32 panels rounds.
            #[cfg(target_arch = "x86_64")]
            if let (1, Some(data), Some(t)) = (
                self.rs,
                T::as_f32(self.data),
                <crate::simd::Avx512Bf16 as crate::simd::Token>::new(
                    crate::cpu::Features::detected(),
                ),
            ) {
                let geometry = (r0, rows, c0, len, w);
                // SAFETY: the token proves the CPU runs AVX512F and AVX512-BF16.
                unsafe {
                    super::kernels::avx512bf16::pairs_from_f32_columns(
                        t,
                        data,
                        self.cs,
                        geometry,
                        PAIR_STEPS_AHEAD,
                        dst,
                    )
                };
                return true;
            }
            return false;
        };
        let steps = len.div_ceil(2);
        #[cfg(target_arch = "x86_64")]
        let avx512 =
            <crate::simd::Avx512 as crate::simd::Token>::new(crate::cpu::Features::detected());
        if self.rs == 1 {
            // Rows contiguous: each pair of source columns is read once across every panel,
            // two sequential streams, rather than a cache line of each column per panel
            // (as many streams as columns, which the prefetchers do not follow).
            #[cfg(target_arch = "x86_64")]
            if let Some(t) = avx512 {
                // SAFETY: the token proves the CPU runs AVX-512F.
                unsafe { pairs_by_columns_avx512(t, self, bits, (r0, rows, c0, len, w), dst) };
                return true;
            }
            pairs_by_columns(self, bits, (r0, rows, c0, len, w), dst);
            return true;
        }
        for (q, panel) in dst.chunks_exact_mut(w * len).enumerate() {
            let p0 = r0 + q * w;
            let rv = w.min(r0 + rows - p0);
            let slots = &mut panel[..steps * w];
            #[cfg(target_arch = "x86_64")]
            if let Some(t) = avx512 {
                // SAFETY: the token proves the CPU runs AVX-512F.
                unsafe { pairs_panel_avx512(t, self, bits, (p0, rv, c0, len, w), slots) };
                continue;
            }
            pairs_panel(self, bits, (p0, rv, c0, len, w), slots);
        }
        true
    }
}

/// Pair steps fetched ahead by [`pairs_by_columns`] (2 to 8 measured alike within noise on
/// the AMD Zen 4, 4 the best: 256 channels of 56x56 bf16, batch 8, 6.5 -> 4.8 ms).
const PAIR_STEPS_AHEAD: usize = 4;

/// The walk of pair panels whose rows are contiguous in `src` (`rs` = 1), column c at `c·cs`:
/// pair step by pair step, each across every panel (two sequential streams, rather than a
/// line of each column per panel), the columns `ahead` steps on asked for first (short runs
/// of far-apart columns, where the hardware prefetchers barely start before a run ends).
/// Panel q holds rows `r0 + q·w ..` (`rows` in all); `fill(out, lo, hi)` writes pair step s
/// of a panel (`w` slots, zero past the rows) from its rows of columns `c0 + 2s` and, within
/// `len`, `c0 + 2s + 1`. Shared by the bf16 columns ([`pairs_by_columns`]) and the f32 ones
/// rounded while packing (`kernels::avx512bf16::pairs_from_f32_columns`).
#[inline(always)]
pub(crate) fn pair_steps<E>(
    src: &[E],
    cs: usize,
    (r0, rows, c0, len, w): (usize, usize, usize, usize, usize),
    ahead: usize,
    dst: &mut [f32],
    mut fill: impl FnMut(&mut [f32], &[E], Option<&[E]>),
) {
    let line = (64 / std::mem::size_of::<E>().max(1)).max(1);
    let steps = len.div_ceil(2);
    for s in 0..steps {
        let lo_col = (c0 + 2 * s) * cs;
        let hi_col = (2 * s + 1 < len).then(|| lo_col + cs);
        let next = (s + ahead < steps).then(|| (c0 + 2 * (s + ahead)) * cs);
        for (q, panel) in dst.chunks_exact_mut(w * len).enumerate() {
            let p0 = r0 + q * w;
            let rv = w.min(r0 + rows - p0);
            if let Some(a) = next {
                for l in (0..rv).step_by(line) {
                    prefetch(&src[a + p0 + l]);
                    if let Some(b) = src.get(a + cs + p0 + l) {
                        prefetch(b);
                    }
                }
            }
            let hi = hi_col.map(|h| &src[h + p0..][..rv]);
            fill(
                &mut panel[s * w..(s + 1) * w],
                &src[lo_col + p0..][..rv],
                hi,
            );
        }
    }
}

/// [`StridedMatrix::pack_pairs_block`] where rows are contiguous in the source (`rs` = 1),
/// by [`pair_steps`].
#[inline(always)]
fn pairs_by_columns<T>(
    m: &StridedMatrix<'_, T>,
    bits: &[u16],
    geometry: (usize, usize, usize, usize, usize),
    dst: &mut [f32],
) {
    pair_steps(
        bits,
        m.cs,
        geometry,
        PAIR_STEPS_AHEAD,
        dst,
        |out, lo, hi| {
            let rv = lo.len();
            match hi {
                Some(hi) => {
                    for ((o, &a), &b) in out.iter_mut().zip(lo).zip(hi) {
                        *o = f32::from_bits(a as u32 | (b as u32) << 16);
                    }
                }
                None => {
                    for (o, &a) in out.iter_mut().zip(lo) {
                        *o = f32::from_bits(a as u32);
                    }
                }
            }
            out[rv..].fill(0.0);
        },
    );
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn pairs_by_columns_avx512<T>(
    _: crate::simd::Avx512,
    m: &StridedMatrix<'_, T>,
    bits: &[u16],
    geometry: (usize, usize, usize, usize, usize),
    dst: &mut [f32],
) {
    pairs_by_columns(m, bits, geometry, dst)
}

/// The most rows a pair panel reads side by side (the widest register tile's).
const MAX_PAIR_ROWS: usize = 32;

/// One panel of [`StridedMatrix::pack_pairs_block`] whose rows are not contiguous in the
/// source ([`pairs_by_columns`] packs those): rows `r0 .. r0 + rv` of `w`, columns
/// `c0 .. c0 + len`, into `ceil(len / 2)·w` slots. Columns contiguous (`cs` = 1) read each
/// row's pairs as 32-bit words.
#[inline(always)]
fn pairs_panel<T>(
    m: &StridedMatrix<'_, T>,
    bits: &[u16],
    (r0, rv, c0, len, w): (usize, usize, usize, usize, usize),
    slots: &mut [f32],
) {
    let at = |r: usize, c: usize| bits[r * m.rs + c * m.cs] as u32;
    let steps = len.div_ceil(2);
    debug_assert!(
        m.rs != 1,
        "pairs_by_columns packs rows contiguous in the source"
    );
    if m.cs == 1 && rv <= MAX_PAIR_ROWS {
        // The rows side by side, each read sequentially: a 32-bit transpose of the pairs.
        let rows: [&[u16]; MAX_PAIR_ROWS] = std::array::from_fn(|i| {
            if i < rv {
                let start = (r0 + i) * m.rs + c0;
                &bits[start..start + len]
            } else {
                &[]
            }
        });
        let full = len / 2;
        for (s, out) in slots.chunks_exact_mut(w).enumerate().take(full) {
            for (o, row) in out[..rv].iter_mut().zip(&rows) {
                *o = f32::from_bits(row[2 * s] as u32 | (row[2 * s + 1] as u32) << 16);
            }
            out[rv..].fill(0.0);
        }
        if full < steps {
            let out = &mut slots[full * w..];
            for (o, row) in out[..rv].iter_mut().zip(&rows) {
                *o = f32::from_bits(row[2 * full] as u32);
            }
            out[rv..].fill(0.0);
        }
    } else {
        for (i, r) in (r0..r0 + rv).enumerate() {
            for s in 0..steps {
                let c = c0 + 2 * s;
                let hi = if 2 * s + 1 < len { at(r, c + 1) } else { 0 };
                slots[s * w + i] = f32::from_bits(at(r, c) | hi << 16);
            }
        }
        for s in 0..steps {
            slots[s * w + rv..(s + 1) * w].fill(0.0);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn pairs_panel_avx512<T>(
    _: crate::simd::Avx512,
    m: &StridedMatrix<'_, T>,
    bits: &[u16],
    geometry: (usize, usize, usize, usize, usize),
    slots: &mut [f32],
) {
    pairs_panel(m, bits, geometry, slots)
}

impl<T: GemmInput> PackA for StridedMatrix<'_, T> {
    fn pack_a(
        &self,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
        dst: &mut [f32],
    ) -> crate::Result<()> {
        self.pack_block(i0, mc, p0, kc, mr, dst);
        Ok(())
    }

    fn pack_a_pairs(
        &self,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
        dst: &mut [f32],
    ) -> crate::Result<bool> {
        Ok(self.pack_pairs_block(i0, mc, p0, kc, mr, dst))
    }

    fn in_place(&self) -> Option<(&[f32], usize)> {
        self.f32_columns()
    }
}

impl<T: GemmInput> PackB for StridedMatrix<'_, T> {
    fn pack_b(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
        dst: &mut [f32],
    ) -> crate::Result<()> {
        // B's micro-panel is A's format for the transpose.
        self.t().pack_block(j0, nc, p0, kc, nr, dst);
        Ok(())
    }

    fn pack_b_pairs(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
        dst: &mut [f32],
    ) -> crate::Result<bool> {
        Ok(self.t().pack_pairs_block(j0, nc, p0, kc, nr, dst))
    }

    fn in_place_b(&self) -> Option<(&[f32], usize)> {
        self.f32_columns()
    }

    fn in_place_b_rows(&self) -> Option<(&[f32], usize)> {
        self.t().f32_columns()
    }
}
