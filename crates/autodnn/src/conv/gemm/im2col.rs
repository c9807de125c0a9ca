//! The explicit im2col of `gemm`: a block's patches copied into the workspace (NCHW-like x
//! a strip of positions per tap through the strip packer, NHWC-like x a patch per position),
//! and the copy read as the engine operand of the frame.

use crate::conv::ExecContext;
use crate::cpu::Features;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::gemm::StridedMatrix;

use super::geometry::{Block, Frame, Geometry, Tap};
use super::patches::{StripScratch, STRIP};

/// Taps of an explicit im2col packed per strip-packer call (the engine's depth blocks are
/// at most [`crate::gemm::blocking::KC_MAX`] taps likewise).
const IM2COL_TAP_CHUNK: usize = 1024;

/// Elements of an im2col block below which it is filled on one thread.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

impl Geometry {
    /// Explicit im2col of a block, laid out to suit x: for NCHW-like x ([`Geometry::channels_inner`]
    /// false) row t holds tap t of the `np` positions (`col[t·np + i]`); for NHWC-like x row i
    /// holds the `depth` taps of position i (`col[i·depth + t]`). Every element of
    /// `col[.. depth·np]` is written. Rows are shared among the context's threads.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the packer's scratch cannot be allocated.
    pub fn im2col(
        &self,
        ctx: &ExecContext<'_>,
        x: &[f32],
        b: &Block,
        col: &mut [f32],
    ) -> Result<()> {
        let xbase = self.x_base(b);
        let np = b.np;
        let col = &mut col[..self.depth * np];
        let parallel = ctx.threads > 1 && col.len() >= PARALLEL_MIN_ELEMENTS;
        if self.channels_inner {
            let fill = |(i, row): (usize, &mut [f32])| {
                self.fill_patch(x, xbase, b.p0 + i, 0, row);
            };
            if parallel {
                crate::runtime::parallel::for_each_chunk(ctx, col, self.depth, |i, r| fill((i, r)));
            } else {
                col.chunks_mut(self.depth).enumerate().for_each(fill);
            }
            Ok(())
        } else {
            let strip = if ctx.features.contains_all(Features::AVX512F) {
                STRIP
            } else {
                np
            };
            let parts = if parallel { ctx.threads * 4 } else { 1 };
            let rows = self.depth.div_ceil(parts);
            let fill = |(i, part): (usize, &mut [f32])| -> Result<()> {
                let taps = &self.taps[i * rows..i * rows + part.len() / np];
                let mut sc = StripScratch::new(self, strip, IM2COL_TAP_CHUNK)?;
                // Taps in chunks, so that the strip packer describes the windows of one
                // chunk at a time (bounded scratch whatever the kernel's size).
                for (c, chunk) in taps.chunks(IM2COL_TAP_CHUNK).enumerate() {
                    let rows = &mut part[c * IM2COL_TAP_CHUNK * np..];
                    for at in (0..np).step_by(strip) {
                        let n = strip.min(np - at);
                        let dst = &mut rows[at..];
                        self.pack_strip(
                            ctx.features,
                            x,
                            xbase,
                            b.p0 + at,
                            n,
                            n,
                            chunk,
                            dst,
                            np,
                            &mut sc,
                        );
                    }
                }
                Ok(())
            };
            if parts > 1 {
                crate::runtime::parallel::try_for_each_chunk(ctx, col, rows * np, |i, r| {
                    fill((i, r))
                })
            } else {
                fill((0, col))
            }
        }
    }

    /// The block's im2col buffer (see [`Geometry::im2col`]) as the engine operand of the
    /// frame.
    pub fn col_matrix<'a>(
        &self,
        col: &'a [f32],
        np: usize,
        features: Features,
    ) -> StridedMatrix<'a, f32> {
        let k = self.depth;
        // (position stride, tap stride) in the buffer.
        let (ps, ts) = if self.channels_inner { (k, 1) } else { (1, np) };
        let m = match self.frame {
            Frame::Positions => StridedMatrix::new(col, np, k, ps, ts),
            Frame::Channels => StridedMatrix::new(col, k, np, ts, ps),
        };
        m.expect("the block fits the buffer").for_features(features)
    }

    /// Writes taps `t0 .. t0 + dst.len()` of output position `p` to `dst` (fewer when the
    /// depth ends first). For NHWC-like x the taps come as runs of contiguous channels, whole
    /// kernel rows at once when x is packed and the columns are not dilated.
    fn fill_patch(&self, x: &[f32], xbase: usize, p: usize, t0: usize, dst: &mut [f32]) {
        let (ih0, iw0) = self.origin(p);
        self.fill_patch_at(x, xbase, ih0, iw0, t0, dst)
    }

    /// [`Geometry::fill_patch`] for the position whose window origin is (ih0, iw0).
    pub(super) fn fill_patch_at(
        &self,
        x: &[f32],
        xbase: usize,
        ih0: i64,
        iw0: i64,
        t0: usize,
        dst: &mut [f32],
    ) {
        let count = dst.len().min(self.depth - t0);
        let inside = |tap: &Tap| {
            let (ih, iw) = (ih0 + tap.dh, iw0 + tap.dw);
            (ih >= 0 && ih < self.h && iw >= 0 && iw < self.w)
                .then(|| xbase + ih as usize * self.xs[2] + iw as usize * self.xs[3])
        };
        if !(self.channels_inner && self.xs[1] == 1) {
            for (i, o) in dst[..count].iter_mut().enumerate() {
                let tap = &self.taps[t0 + i];
                *o = inside(tap).map_or(0.0, |at| x[at + tap.xoff]);
            }
            return;
        }
        let kw = self.win_cols.len();
        let row_len = kw * self.cg; // taps per kernel row
        let mut i = 0;
        while i < count {
            let t = t0 + i;
            let (run, src) = if self.rows_contiguous {
                // Taps (s, c) of kernel row r are contiguous in x for the columns s inside
                // the image.
                let (r, rem) = (t / row_len, t % row_len);
                let ih = ih0 + self.win_rows[r];
                let s_lo = (-iw0).clamp(0, kw as i64) as usize;
                let s_hi = (self.w - iw0).clamp(s_lo as i64, kw as i64) as usize;
                let (lo, hi) = (s_lo * self.cg, s_hi * self.cg);
                if ih < 0 || ih >= self.h || rem >= hi {
                    (row_len - rem, None)
                } else if rem < lo {
                    (lo - rem, None)
                } else {
                    let at = xbase as i64 + ih * self.xs[2] as i64 + iw0 * self.xs[3] as i64;
                    (hi - rem, Some((at + rem as i64) as usize))
                }
            } else {
                let c = t % self.cg;
                (self.cg - c, inside(&self.taps[t]).map(|at| at + c))
            };
            let run = run.min(count - i);
            match src {
                Some(at) => dst[i..i + run].copy_from_slice(&x[at..at + run]),
                None => dst[i..i + run].fill(0.0),
            }
            i += run;
        }
    }
}
