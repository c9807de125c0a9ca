//! The convolution in GEMM terms: the problem's [`Geometry`] (shape, tap tables, window
//! offsets, frame), its blocks of output positions, and how positions split into runs of one
//! output row ([`Geometry::segments`]) and taps into pieces of few windows
//! ([`Geometry::window_split`]).

use crate::cpu::Features;
use crate::desc::{ConvMode, ConvProblem};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::gemm::{GemmInput, StridedMatrix};

use super::cost::choose_frame;
#[cfg(doc)]
use super::patches::StripScratch;

/// Which engine operand holds the image patches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Frame {
    /// C's rows are output positions (y's positions are its contiguous direction): A = the
    /// patches, B = the filter.
    Positions,
    /// C's rows are output channels (y's channels are contiguous): A = the filter, B = the
    /// patches.
    Channels,
}

/// One tap (c, r, s) of the GEMM's depth: where it reads in x and in the filter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tap {
    /// c · x's channel stride.
    pub(super) xoff: usize,
    /// r · dilation (rows) and s · dilation (columns): the window offset.
    pub(super) dh: i64,
    pub(super) dw: i64,
    /// Offset of (c, r, s) in one output channel's filter (r, s flipped in convolution mode).
    pub(super) woff: usize,
    /// The window offset's index r·S + s (its row part is `win_rows[r]`, its column part
    /// `win_cols[s]`).
    pub(super) win: usize,
}

/// A problem in GEMM terms.
pub(crate) struct Geometry {
    pub n: usize,
    pub groups: usize,
    pub cg: usize,
    pub kg: usize,
    pub ow: usize,
    /// Output positions per image (OH·OW).
    pub positions: usize,
    /// GEMM depth: C·R·S per group.
    pub depth: usize,
    pub(super) h: i64,
    pub(super) w: i64,
    pub(super) stride: [i64; 2],
    pub(super) pad: [i64; 2],
    pub xs: [usize; 4],
    pub ys: [usize; 4],
    pub ws: [usize; 4],
    pub frame: Frame,
    /// Taps ordered (r, s, c) (else (c, r, s)).
    pub channels_inner: bool,
    /// y's positions flatten (row stride = OW · column stride, or one row): a GEMM may span
    /// rows. Otherwise every GEMM covers one output row.
    pub y_flat: bool,
    /// 1x1, stride 1, no leading padding, positions matching x's: x is already the patch
    /// matrix.
    pub x_is_matrix: bool,
    pub taps: Vec<Tap>,
    /// r · dilation for each kernel row r, and s · dilation for each kernel column s (window
    /// offset r·S + s is the pair).
    pub(super) win_rows: Vec<i64>,
    pub(super) win_cols: Vec<i64>,
    /// x is packed NHWC-like (channel stride 1, column stride = channels per group) and the
    /// kernel columns are not dilated: a kernel row's taps are contiguous in x.
    pub(super) rows_contiguous: bool,
    /// The filter's taps are consecutive in memory (`woff[t] == t`): a plain strided matrix.
    pub filter_contiguous: bool,
}

/// One GEMM: output positions `p0 .. p0 + np` of image `n`, group `g`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    pub n: usize,
    pub g: usize,
    pub p0: usize,
    pub np: usize,
}

impl Geometry {
    /// The problem's GEMM shape without its tap tables: O(1) in memory, for workspace
    /// queries and cost features (a problem's C·R·S taps may be far more than its tensors).
    pub fn shape(p: &ConvProblem) -> Geometry {
        let c = p.conv();
        let (x, y, w) = (p.x(), p.y(), p.w());
        let (xs, ys, ws) = (x.strides(), y.strides(), w.strides());
        let (cg, r, s) = (p.c_per_group(), w.r(), w.s());
        let (oh, ow) = (y.h(), y.w());
        let channels_inner = xs[1] < xs[3];
        let flip = c.mode() == ConvMode::Convolution;
        let [_, dw] = c.dilation();
        // woff[t] == t for every tap: the filter's taps are consecutive in memory, in the
        // order of the taps (channels inner for NHWC-like x, else (r, s) inner), unflipped or
        // a single window.
        let single = r * s == 1;
        let filter_contiguous = (!flip || single)
            && if channels_inner {
                (cg == 1 || ws[1] == 1) && (s == 1 || ws[3] == cg) && (r == 1 || ws[2] == s * cg)
            } else {
                (s == 1 || ws[3] == 1) && (r == 1 || ws[2] == s) && (cg == 1 || ws[1] == r * s)
            };
        let y_flat = oh == 1 || ys[2] == ow * ys[3];
        let pad = c.padding();
        let x_is_matrix = r == 1
            && s == 1
            && c.stride() == [1, 1]
            && pad.top == 0
            && pad.left == 0
            // Every output position reads a pixel of x: no bottom or right padding past the
            // image (those positions see only zeros, and x holds no row or column for them).
            && oh <= x.h()
            && ow <= x.w()
            && (!y_flat || oh == 1 || (ow == x.w() && xs[2] == ow * xs[3]));
        Geometry {
            n: x.n(),
            groups: p.groups(),
            cg,
            kg: p.k_per_group(),
            ow,
            positions: oh * ow,
            depth: cg * r * s,
            h: x.h() as i64,
            w: x.w() as i64,
            stride: [c.stride()[0] as i64, c.stride()[1] as i64],
            pad: [pad.top, pad.left],
            xs,
            ys,
            ws,
            frame: choose_frame(ys, oh, ow, p.k_per_group(), cg * r * s, !x_is_matrix),
            channels_inner,
            y_flat,
            x_is_matrix,
            taps: Vec::new(),
            rows_contiguous: channels_inner && xs[1] == 1 && xs[3] == cg && (s == 1 || dw == 1),
            win_rows: Vec::new(),
            win_cols: Vec::new(),
            filter_contiguous,
        }
    }

    /// The problem's GEMM shape with its tap tables, for running or preparing.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the tables cannot be allocated.
    pub fn new(p: &ConvProblem) -> Result<Geometry> {
        let mut geo = Geometry::shape(p);
        let c = p.conv();
        let (xs, ws) = (geo.xs, geo.ws);
        let (cg, r, s) = (geo.cg, p.w().r(), p.w().s());
        let flip = c.mode() == ConvMode::Convolution;
        let [dh, dw] = c.dilation();
        let mut taps = crate::alloc::try_vec_with_capacity(cg * r * s, "implicit GEMM tap table")?;
        for t in 0..cg * r * s {
            let (ci, ri, si) = if geo.channels_inner {
                (t % cg, t / cg / s, t / cg % s)
            } else {
                (t / (r * s), t / s % r, t % s)
            };
            let (fr, fs) = if flip {
                (r - 1 - ri, s - 1 - si)
            } else {
                (ri, si)
            };
            taps.push(Tap {
                xoff: ci * xs[1],
                dh: (ri * dh) as i64,
                dw: (si * dw) as i64,
                woff: ci * ws[1] + fr * ws[2] + fs * ws[3],
                win: ri * s + si,
            });
        }
        debug_assert_eq!(
            geo.filter_contiguous,
            taps.iter().enumerate().all(|(t, tap)| tap.woff == t)
        );
        let mut win_rows = crate::alloc::try_vec_with_capacity(r, "implicit GEMM window rows")?;
        win_rows.extend((0..r).map(|i| (i * dh) as i64));
        let mut win_cols = crate::alloc::try_vec_with_capacity(s, "implicit GEMM window columns")?;
        win_cols.extend((0..s).map(|i| (i * dw) as i64));
        geo.taps = taps;
        geo.win_rows = win_rows;
        geo.win_cols = win_cols;
        Ok(geo)
    }

    /// The most positions one GEMM covers when blocks hold at most `max` positions.
    pub fn block_positions(&self, max: usize) -> usize {
        let cap = if self.y_flat { self.positions } else { self.ow };
        cap.min(max.max(1))
    }

    /// The GEMMs of the problem, blocks of at most `max` positions (never crossing an output
    /// row unless y's positions flatten).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the list cannot be allocated.
    pub fn blocks(&self, max: usize) -> Result<Vec<Block>> {
        let bp = self.block_positions(max);
        // At most one block per `bp` positions, plus one per output row a block ends early at.
        let per = self.positions.div_ceil(bp) + self.positions.div_ceil(self.ow.max(1));
        let mut out = crate::alloc::try_vec_with_capacity(
            self.n.saturating_mul(self.groups).saturating_mul(per),
            "the GEMM blocks",
        )?;
        for n in 0..self.n {
            for g in 0..self.groups {
                let mut p0 = 0;
                while p0 < self.positions {
                    let mut end = (p0 + bp).min(self.positions);
                    if !self.y_flat {
                        end = end.min((p0 / self.ow + 1) * self.ow);
                    }
                    out.push(Block {
                        n,
                        g,
                        p0,
                        np: end - p0,
                    });
                    p0 = end;
                }
            }
        }
        Ok(out)
    }

    /// Offset of image n, group g's first input channel in x.
    pub fn x_base(&self, b: &Block) -> usize {
        b.n * self.xs[0] + b.g * self.cg * self.xs[1]
    }

    /// The block's output as the engine's C: offset in y, rows, columns, strides.
    pub fn c_view(&self, b: &Block) -> (usize, usize, usize, [usize; 2]) {
        let base = b.n * self.ys[0]
            + b.g * self.kg * self.ys[1]
            + (b.p0 / self.ow) * self.ys[2]
            + (b.p0 % self.ow) * self.ys[3];
        match self.frame {
            Frame::Positions => (base, b.np, self.kg, [self.ys[3], self.ys[1]]),
            Frame::Channels => (base, self.kg, b.np, [self.ys[1], self.ys[3]]),
        }
    }

    /// When [`Geometry::x_is_matrix`]: the block's patches read in place from x, as the
    /// engine operand of the frame.
    pub fn x_matrix<'a, T: GemmInput>(
        &self,
        x: &'a [T],
        b: &Block,
        features: Features,
    ) -> StridedMatrix<'a, T> {
        debug_assert!(self.x_is_matrix);
        let base = self.x_base(b) + (b.p0 / self.ow) * self.xs[2] + (b.p0 % self.ow) * self.xs[3];
        let m = match self.frame {
            Frame::Positions => {
                StridedMatrix::new(&x[base..], b.np, self.cg, self.xs[3], self.xs[1])
            }
            Frame::Channels => {
                StridedMatrix::new(&x[base..], self.cg, b.np, self.xs[1], self.xs[3])
            }
        };
        m.expect("inside x: the problem's descriptors were checked against x")
            .for_features(features)
    }

    /// Splits positions `p0 .. p0 + np` into runs inside one output row that do not cross a
    /// multiple of `unit` (relative to p0): (index relative to p0, length, window origin row,
    /// window origin column), into `out` (cleared first; at most `np / min(ow, unit) + 2`
    /// of them, which a [`StripScratch`] for `np` positions holds without growing).
    pub(super) fn segments(&self, p0: usize, np: usize, unit: usize, out: &mut Vec<Seg>) {
        out.clear();
        let mut i = 0;
        while i < np {
            let p = p0 + i;
            let (oh, ow) = (p / self.ow, p % self.ow);
            let len = (self.ow - ow).min(np - i).min(unit - i % unit);
            out.push(Seg {
                at: i,
                len,
                ih0: oh as i64 * self.stride[0] - self.pad[0],
                iw0: ow as i64 * self.stride[1] - self.pad[1],
            });
            i += len;
        }
    }

    /// The window origin (row, column; negative in the padding) of output position `p`.
    #[inline]
    pub(super) fn origin(&self, p: usize) -> (i64, i64) {
        (
            (p / self.ow) as i64 * self.stride[0] - self.pad[0],
            (p % self.ow) as i64 * self.stride[1] - self.pad[1],
        )
    }

    /// Where to cut `taps` so that describing their windows costs no more than the taps:
    /// `None` when the windows from the lowest to the highest number at most the taps and, if
    /// they cross a kernel row, the kernel's columns do too; otherwise the first place where
    /// the windows wrap (the next channel) or leave the first tap's kernel row.
    pub(super) fn window_split(&self, taps: &[Tap]) -> Option<usize> {
        let kw = self.win_cols.len().max(1);
        let lo = taps.iter().map(|t| t.win).min()?;
        let hi = taps.iter().map(|t| t.win).max()?;
        let wide = hi - lo + 1 > taps.len() || (lo / kw != hi / kw && kw > taps.len());
        if !wide {
            return None;
        }
        let row = taps[0].win / kw;
        taps.windows(2)
            .position(|p| p[1].win < p[0].win || p[1].win / kw != row)
            .map(|k| k + 1)
    }
}

/// A run of positions inside one output row (see [`Geometry::segments`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Seg {
    pub(super) at: usize,
    pub(super) len: usize,
    pub(super) ih0: i64,
    pub(super) iw0: i64,
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::{Layout, ProblemSpec};

    pub(crate) fn geo(spec: &str, layout: Layout) -> Geometry {
        Geometry::new(
            &ProblemSpec::parse(spec)
                .unwrap()
                .to_problem(layout)
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn image_is_the_matrix_for_1x1_stride_1() {
        assert!(geo("mb1ic64ih56oc64oh56kh1ph0", Layout::Nchw).x_is_matrix);
        assert!(geo("mb1ic64ih56oc64oh56kh1ph0", Layout::Nhwc).x_is_matrix);
        assert!(!geo("mb1ic64ih56oc64oh28kh1sh2ph0", Layout::Nchw).x_is_matrix);
        assert!(!geo("mb1ic64ih56oc64oh56kh3ph1", Layout::Nchw).x_is_matrix);
    }
}
