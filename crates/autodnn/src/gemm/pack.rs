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

use super::GemmInput;

/// Packs blocks of the vector-side operand A (`m × k` in the engine's frame).
pub trait PackA: Sync {
    /// Writes rows `i0 .. i0 + mc` and depth `p0 .. p0 + kc` into `dst` as `ceil(mc / mr)`
    /// micro-panels of `kc × mr` (element `(i, p)` of a panel at `p·mr + i`), zero-filling
    /// rows past `mc`. `dst` holds exactly `ceil(mc / mr)·mr·kc` elements. The engine only
    /// asks for ranges inside the problem.
    fn pack_a(&self, i0: usize, mc: usize, p0: usize, kc: usize, mr: usize, dst: &mut [f32]);

    /// When A is f32 and unit-stride along rows, the whole operand and its depth stride:
    /// element `(i, p)` is at `i + p·lda`. The engine may then read full micro-panels in place
    /// instead of packing them. The default is `None` (always pack).
    fn in_place(&self) -> Option<(&[f32], usize)> {
        None
    }
}

/// Packs panels of the broadcast-side operand B (`k × n` in the engine's frame).
pub trait PackB: Sync {
    /// Writes depth `p0 .. p0 + kc` and columns `j0 .. j0 + nc` into `dst` as
    /// `ceil(nc / nr)` micro-panels of `kc × nr` (element `(p, j)` of a panel at `p·nr + j`),
    /// zero-filling columns past `nc`. `dst` holds exactly `ceil(nc / nr)·nr·kc` elements.
    fn pack_b(&self, p0: usize, kc: usize, j0: usize, nc: usize, nr: usize, dst: &mut [f32]);
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
        })
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

    /// Packs rows `r0 .. r0 + nr_valid` (zero-padding to `w`) of columns `c0 .. c0 + len`
    /// into `dst` with element `(r, c)` at `(c − c0)·w + (r − r0)`: a micro-panel whose
    /// vector runs along this matrix's rows.
    fn pack_panel(&self, r0: usize, rv: usize, c0: usize, len: usize, w: usize, dst: &mut [f32]) {
        debug_assert!(rv <= w && dst.len() == len * w);
        debug_assert!(r0 + rv <= self.rows && c0 + len <= self.cols);
        let d = self.data;
        if rv == 0 || len == 0 {
            dst.fill(0.0);
            return;
        }
        if self.rs == 1 {
            // Each column of the panel is a contiguous run of the source.
            for (c, out) in dst.chunks_exact_mut(w).enumerate() {
                let start = r0 + (c0 + c) * self.cs;
                let src = &d[start..start + rv];
                for (o, s) in out[..rv].iter_mut().zip(src) {
                    *o = s.to_f32();
                }
                out[rv..].fill(0.0);
            }
        } else if self.cs == 1 {
            // Each row of the panel is a contiguous run of the source: a transpose, done in
            // strips of rows so that reads stay sequential.
            if rv < w {
                dst.fill(0.0);
            }
            for r in 0..rv {
                let start = (r0 + r) * self.rs + c0;
                let src = &d[start..start + len];
                for (c, s) in src.iter().enumerate() {
                    dst[c * w + r] = s.to_f32();
                }
            }
        } else {
            for (c, out) in dst.chunks_exact_mut(w).enumerate() {
                let base = (c0 + c) * self.cs;
                for (r, o) in out[..rv].iter_mut().enumerate() {
                    *o = d[base + (r0 + r) * self.rs].to_f32();
                }
                out[rv..].fill(0.0);
            }
        }
    }
}

impl<T: GemmInput> PackA for StridedMatrix<'_, T> {
    fn pack_a(&self, i0: usize, mc: usize, p0: usize, kc: usize, mr: usize, dst: &mut [f32]) {
        for (q, panel) in dst.chunks_exact_mut(mr * kc).enumerate() {
            let r0 = i0 + q * mr;
            let rv = mr.min((i0 + mc).saturating_sub(r0));
            self.pack_panel(r0, rv, p0, kc, mr, panel);
        }
    }

    fn in_place(&self) -> Option<(&[f32], usize)> {
        if self.rs != 1 {
            return None;
        }
        T::as_f32(self.data).map(|d| (d, self.cs))
    }
}

impl<T: GemmInput> PackB for StridedMatrix<'_, T> {
    fn pack_b(&self, p0: usize, kc: usize, j0: usize, nc: usize, nr: usize, dst: &mut [f32]) {
        // B's micro-panel is A's format for the transpose.
        let t = self.t();
        for (q, panel) in dst.chunks_exact_mut(nr * kc).enumerate() {
            let r0 = j0 + q * nr;
            let rv = nr.min((j0 + nc).saturating_sub(r0));
            t.pack_panel(r0, rv, p0, kc, nr, panel);
        }
    }
}
