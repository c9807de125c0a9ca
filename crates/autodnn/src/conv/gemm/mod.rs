//! The convolution as GEMMs, shared by `gemm` (explicit im2col into the workspace) and
//! `implicit_gemm` (panels packed straight from the image).
//!
//! One GEMM per (image, group, block of output positions): the depth is the C·R·S *taps* of a
//! group, one side is the output positions of the block, the other the group's output
//! channels. The engine's micro-kernel computes whole vectors of 32 rows (AVX-512) and
//! stores them fastest along y's contiguous direction, so which side is which ([`Frame`])
//! follows y's layout and the image size:
//!
//! - [`Frame::Positions`], y NCHW-like: C = positions × channels, A = the patches
//!   (positions × taps, the vector side), B = the filter (taps × channels).
//! - [`Frame::Channels`], y NHWC-like, and NCHW-like y with few positions (ResNet's 14x14
//!   and 7x7 layers, where 49 positions would be computed as 64): C = channels × positions,
//!   A = the filter (channels × taps), B = the patches (taps × positions); for NCHW-like y
//!   the engine transposes each tile before storing it. A cost model chooses
//!   ([`choose_frame`]).
//!
//! Taps are ordered to match x: channels outer, (r, s) inner for NCHW-like x (so a KCRS
//! filter is a plain strided matrix), (r, s) outer, channels inner for NHWC-like x (a KRSC
//! filter is, and a patch's taps are runs of contiguous channels).
//!
//! The epilogue maps onto the engine's (`C = act(alpha·A·B + beta·C + bias + residual)`):
//! bias per output channel becomes a per-row or per-column bias, a residual with beta = 1 the
//! engine's residual, y's prior contents with beta ≠ 0 the engine's beta·C; a residual with
//! another beta is first copied into y's block and then scaled as C.
//!
//! Prepared weights are each group's filter in the engine's packed panel format (A or B side,
//! by the frame), cut into the engine's depth blocks, so that the engine reads them in place
//! ([`PackA::prepacked_a`], [`PackB::prepacked_b`]) instead of packing the filter on every
//! call.

mod explicit_fwd;
mod implicit_fwd;

pub(crate) use explicit_fwd::GEMM;
pub(crate) use implicit_fwd::IMPLICIT_GEMM;

use crate::conv::{
    default_cost_features, AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext, COST_FEATURES,
};
use crate::cpu::Features;
use crate::desc::{ConvMode, ConvProblem};
use crate::error::{Error, Result};
use crate::gemm::{self, PackA, PackB, StridedMatrix};
use crate::runtime::Carve;

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
    xoff: usize,
    /// r · dilation (rows) and s · dilation (columns): the window offset.
    dh: i64,
    dw: i64,
    /// Offset of (c, r, s) in one output channel's filter (r, s flipped in convolution mode).
    woff: usize,
    /// The window offset's index r·S + s (its row part is `win_rows[r]`, its column part
    /// `win_cols[s]`).
    win: usize,
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
    h: i64,
    w: i64,
    stride: [i64; 2],
    pad: [i64; 2],
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
    win_rows: Vec<i64>,
    win_cols: Vec<i64>,
    /// x is packed NHWC-like (channel stride 1, column stride = channels per group) and the
    /// kernel columns are not dilated: a kernel row's taps are contiguous in x.
    rows_contiguous: bool,
    /// The filter's taps are consecutive in memory (`woff[t] == t`): a plain strided matrix.
    pub filter_contiguous: bool,
}

/// Register tile of the widest kernel family (AVX-512: 32 rows × 14 columns), used to weigh
/// the two frames; the frame is a property of the problem (prepared weights depend on it),
/// so it does not follow the instruction-set cap.
const FRAME_TILE: (usize, usize) = (32, 14);

/// Cost of writing one output element of a tile whose rows are not y's contiguous direction
/// (the engine transposes the tile before storing it), in multiply-adds of one lane (the
/// kernel does 16 lanes per cycle). Paid once per depth block (at most 512 deep).
const STRIDED_STORE_COST: usize = 24;

/// Cost of packing one tap of one strip of patches (a panel row of 32 or 14 positions, about
/// 20 cycles), in multiply-adds of one lane. Narrow strips (14 positions as B) cost as much
/// as wide ones (32 as A), so the channels-as-rows frame packs patches at over twice the cost.
const PACK_ROW_COST: usize = 320;

/// What one GEMM of a frame costs in the engine, in multiply-adds of one lane.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameCost {
    /// The micro-kernels' work: rows rounded up to whole vectors of the tile, plus transposed
    /// tile stores.
    pub work: usize,
    /// Packing the patches in strips of the frame's panel width.
    pub pack: usize,
    /// Elements of the packed patch operand (depth × positions rounded to the width).
    pub packed: usize,
}

/// Output positions one GEMM covers: the whole image when y's positions flatten, else one
/// output row.
fn gemm_positions(ys: [usize; 4], oh: usize, ow: usize) -> usize {
    if oh == 1 || ys[2] == ow * ys[3] {
        oh * ow
    } else {
        ow
    }
}

/// The cost of one GEMM of `positions` output positions, `kg` output channels and `depth`
/// taps in `frame`, packing patches (`patches_packed`) or reading x as the patch matrix.
fn frame_cost(
    frame: Frame,
    positions: usize,
    kg: usize,
    depth: usize,
    patches_packed: bool,
) -> FrameCost {
    let (mr, nr) = FRAME_TILE;
    // Saturating: the costs of absurd problems (10^17 positions of 10^8 taps) only compare.
    let up = |x: usize, to: usize| x.div_ceil(to).saturating_mul(to);
    let mul = |a: usize, b: usize| a.saturating_mul(b);
    let width = match frame {
        Frame::Positions => mr,
        Frame::Channels => nr,
    };
    let pack = if patches_packed {
        mul(mul(PACK_ROW_COST, positions.div_ceil(width)), depth)
    } else {
        0
    };
    let block = depth.min(crate::gemm::blocking::KC_MAX);
    // The engine computes whole vectors of mr rows, but only the valid columns of a ragged
    // last column panel.
    let work = match frame {
        Frame::Positions => mul(mul(up(positions, mr), kg), depth),
        Frame::Channels => mul(
            mul(mul(up(kg, mr), positions), depth) / block,
            block + STRIDED_STORE_COST,
        ),
    };
    FrameCost {
        work,
        pack,
        packed: mul(up(positions, width), depth),
    }
}

/// The GEMM frame: channels as rows where y's channels are contiguous (NHWC); otherwise the
/// cheaper of the two by [`frame_cost`]: rounding positions up to the tile's 32 rows
/// (positions as rows), or channels, plus transposed tile stores (channels as rows), each
/// plus packing the patches in strips of its width. Small images (ResNet's 7x7 and 14x14
/// layers) take channels as rows.
fn choose_frame(
    ys: [usize; 4],
    oh: usize,
    ow: usize,
    kg: usize,
    depth: usize,
    patches_packed: bool,
) -> Frame {
    if ys[1] < ys[3] {
        return Frame::Channels;
    }
    if let Some(f) = forced_frame() {
        return f;
    }
    let positions = gemm_positions(ys, oh, ow);
    let cost = |f| {
        let c = frame_cost(f, positions, kg, depth, patches_packed);
        c.work.saturating_add(c.pack)
    };
    if cost(Frame::Channels) < cost(Frame::Positions) {
        Frame::Channels
    } else {
        Frame::Positions
    }
}

/// Environment variable forcing the frame of NCHW-like outputs: `positions` or `channels`
/// (for tuning [`STRIDED_STORE_COST`]; read once per process).
pub const FRAME_ENV: &str = "AUTODNN_GEMM_CONV_FRAME";

fn forced_frame() -> Option<Frame> {
    static FORCED: std::sync::OnceLock<Option<Frame>> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| match std::env::var(FRAME_ENV).ok()?.trim() {
        "positions" => Some(Frame::Positions),
        "channels" => Some(Frame::Channels),
        _ => None,
    })
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
    pub fn x_matrix<'a>(
        &self,
        x: &'a [f32],
        b: &Block,
        features: Features,
    ) -> StridedMatrix<'a, f32> {
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

    /// Writes `dst[l]` = the input tap `tap` sees at output row `oh` (window origin row
    /// `ih0`), columns starting at window origin column `iw0`, for `l < dst.len()` (all in
    /// one output row); zero where the window is in the padding.
    #[inline]
    fn fill_seg(&self, x: &[f32], xbase: usize, tap: &Tap, ih0: i64, iw0: i64, dst: &mut [f32]) {
        let len = dst.len() as i64;
        let ih = ih0 + tap.dh;
        if ih < 0 || ih >= self.h {
            dst.fill(0.0);
            return;
        }
        let sw = self.stride[1];
        let first = iw0 + tap.dw; // column of lane l: first + l·sw
        let lo = if first >= 0 {
            0
        } else {
            ((-first + sw - 1) / sw).min(len)
        };
        let hi = if first >= self.w {
            lo
        } else {
            ((self.w - first + sw - 1) / sw).clamp(lo, len)
        };
        let (lo, hi) = (lo as usize, hi as usize);
        dst[..lo].fill(0.0);
        dst[hi..].fill(0.0);
        if hi > lo {
            let start = xbase
                + tap.xoff
                + ih as usize * self.xs[2]
                + (first + lo as i64 * sw) as usize * self.xs[3];
            // A lone column's stride may be anything: the step is used only between
            // columns inside x, so saturating is exact where it matters.
            let step = (sw as usize).saturating_mul(self.xs[3]);
            let out = &mut dst[lo..hi];
            if step == 1 {
                out.copy_from_slice(&x[start..start + out.len()]);
            } else {
                for (o, v) in out.iter_mut().zip(x[start..].iter().step_by(step)) {
                    *o = *v;
                }
            }
        }
    }

    /// Splits positions `p0 .. p0 + np` into runs inside one output row that do not cross a
    /// multiple of `unit` (relative to p0): (index relative to p0, length, window origin row,
    /// window origin column), into `out` (cleared first; at most `np / min(ow, unit) + 2`
    /// of them, which a [`StripScratch`] for `np` positions holds without growing).
    fn segments(&self, p0: usize, np: usize, unit: usize, out: &mut Vec<Seg>) {
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
        use rayon::prelude::*;
        let xbase = self.x_base(b);
        let np = b.np;
        let col = &mut col[..self.depth * np];
        let parallel = ctx.threads > 1 && col.len() >= PARALLEL_MIN_ELEMENTS;
        if self.channels_inner {
            let fill = |(i, row): (usize, &mut [f32])| {
                self.fill_patch(x, xbase, b.p0 + i, 0, row);
            };
            if parallel {
                ctx.pool
                    .install(|| col.par_chunks_mut(self.depth).enumerate().for_each(fill));
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
                ctx.pool
                    .install(|| col.par_chunks_mut(rows * np).enumerate().try_for_each(fill))
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

    /// The window origin (row, column; negative in the padding) of output position `p`.
    #[inline]
    fn origin(&self, p: usize) -> (i64, i64) {
        (
            (p / self.ow) as i64 * self.stride[0] - self.pad[0],
            (p % self.ow) as i64 * self.stride[1] - self.pad[1],
        )
    }

    /// [`Geometry::fill_patch`] for the position whose window origin is (ih0, iw0).
    fn fill_patch_at(
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

impl Geometry {
    /// Packs a strip of `n` consecutive output positions from `start` (row order) for each
    /// tap of `taps`: row i (tap i) at `dst[i·ld ..]` gets `width ≥ n` lanes, the positions'
    /// inputs then zeros. `sc` is scratch reused across calls, made for at least `width`
    /// positions (it then never grows here).
    #[allow(clippy::too_many_arguments)]
    fn pack_strip(
        &self,
        features: Features,
        x: &[f32],
        xbase: usize,
        start: usize,
        n: usize,
        width: usize,
        taps: &[Tap],
        dst: &mut [f32],
        ld: usize,
        sc: &mut StripScratch,
    ) {
        if taps.is_empty() {
            return;
        }
        assert!(n <= width && dst.len() >= (taps.len() - 1) * ld + width);
        let mut segs = std::mem::take(&mut sc.segs);
        self.segments(start, n, usize::MAX, &mut segs);
        self.pack_strip_segs(features, x, xbase, n, width, taps, dst, ld, &segs, sc);
        sc.segs = segs;
    }

    /// [`Geometry::pack_strip`] once the strip's segments are known.
    #[allow(clippy::too_many_arguments)]
    fn pack_strip_segs(
        &self,
        features: Features,
        x: &[f32],
        xbase: usize,
        n: usize,
        width: usize,
        taps: &[Tap],
        dst: &mut [f32],
        ld: usize,
        segs: &[Seg],
        sc: &mut StripScratch,
    ) {
        #[cfg(target_arch = "x86_64")]
        if features.contains_all(Features::AVX512F) && width <= STRIP {
            // Only the windows these taps use are described; taps whose windows would be far
            // more than the taps (a kernel of 10^6 windows, a depth block across a channel
            // or kernel-row boundary) are packed in pieces.
            if let Some(k) = self.window_split(taps) {
                let (a, b) = taps.split_at(k);
                self.pack_strip_segs(features, x, xbase, n, width, a, dst, ld, segs, sc);
                let rest = &mut dst[k * ld..];
                return self.pack_strip_segs(features, x, xbase, n, width, b, rest, ld, segs, sc);
            }
            let win0 = taps.iter().map(|t| t.win).min().unwrap_or(0);
            let win1 = taps.iter().map(|t| t.win).max().unwrap_or(0);
            if self.row_loads(segs, sc, win0, win1) {
                let loads = &sc.loads;
                let step = self.stride[1] as usize * self.xs[3];
                // Every enabled lane reads an in-range (c, ih, iw) of this image and group:
                // the largest such offset is inside x (checked by the caller against the
                // descriptor; asserted here because the kernel reads through raw pointers).
                let last_c = taps.iter().map(|t| t.xoff).max().unwrap_or(0);
                let last_w = loads.iter().map(|l| l.last).max().unwrap_or(0);
                assert!(xbase + last_c + last_w < x.len());
                return avx512::fill_rows(x, xbase, taps, loads, win0, step, dst, ld, width);
            }
        }
        let _ = (features, &sc);
        for (i, tap) in taps.iter().enumerate() {
            let row = &mut dst[i * ld..i * ld + width];
            for sg in segs {
                self.fill_seg(
                    x,
                    xbase,
                    tap,
                    sg.ih0,
                    sg.iw0,
                    &mut row[sg.at..sg.at + sg.len],
                );
            }
            row[n..].fill(0.0);
        }
    }

    /// Where to cut `taps` so that describing their windows costs no more than the taps:
    /// `None` when the windows from the lowest to the highest number at most the taps and, if
    /// they cross a kernel row, the kernel's columns do too; otherwise the first place where
    /// the windows wrap (the next channel) or leave the first tap's kernel row.
    fn window_split(&self, taps: &[Tap]) -> Option<usize> {
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

    /// Describes, for every window offset (r, s), how the strip of segments `segs` loads its
    /// lanes (relative to a channel's base), into `sc.loads`. False when a strip needs more
    /// than [`MAX_SEGMENTS`] runs or offsets the kernels cannot index. The column arithmetic
    /// (the only divisions) is done once per (segment, s), not per window.
    fn row_loads(&self, segs: &[Seg], sc: &mut StripScratch, win0: usize, win1: usize) -> bool {
        if segs.len() > MAX_SEGMENTS
            || (self.stride[1] as usize).saturating_mul(self.xs[3]) > 1 << 24
        {
            return false;
        }
        let sw = self.stride[1];
        let (xs2, xs3) = (self.xs[2] as i64, self.xs[3] as i64);
        let step = sw * xs3;
        let nseg = segs.len();
        // Per (s, segment): lanes inside the image, and the column part of the offset.
        // Window w = r·S + s for w in win0 ..= win1; within one kernel row, only its columns.
        let kw = self.win_cols.len();
        let (r0, r1) = (win0 / kw, win1 / kw);
        let (s0, s1) = if r0 == r1 {
            (win0 % kw, win1 % kw)
        } else {
            (0, kw - 1)
        };
        sc.cols.clear();
        for &dw in &self.win_cols[s0..=s1] {
            for sg in segs {
                let first = sg.iw0 + dw;
                let len = sg.len as i64;
                let ceil_div = |a: i64| match sw {
                    1 => a,
                    2 => (a + 1) >> 1,
                    _ => (a + sw - 1) / sw,
                };
                let lo = if first >= 0 {
                    0
                } else {
                    ceil_div(-first).min(len)
                };
                let hi = if first >= self.w {
                    lo
                } else {
                    ceil_div(self.w - first).clamp(lo, len)
                };
                sc.cols.push(if hi > lo {
                    let at = sg.at as i64;
                    let mask = lanes(sg.at + lo as usize, sg.at + hi as usize);
                    ColRun {
                        mask,
                        even: if step == 2 { even_masks(mask) } else { [0; 4] },
                        off: first * xs3 - at * step,
                        last: (first + (hi - 1) * sw) * xs3,
                    }
                } else {
                    ColRun::default()
                });
            }
        }
        // Entries past each load's `nseg` are never read: only the counts are reset.
        sc.loads.resize(win1 + 1 - win0, RowLoad::EMPTY);
        let mut loads = sc.loads.iter_mut();
        for win in win0..=win1 {
            let (dh, s) = (self.win_rows[win / kw], win % kw - s0);
            {
                let load = loads.next().expect("one load per window");
                load.nseg = 0;
                load.last = 0;
                for (sg, col) in segs.iter().zip(&sc.cols[s * nseg..(s + 1) * nseg]) {
                    let ih = sg.ih0 + dh;
                    if col.mask == 0 || ih < 0 || ih >= self.h {
                        continue;
                    }
                    let row = ih * xs2;
                    let i = load.nseg;
                    load.off[i] = (row + col.off) as isize;
                    load.mask[i] = col.mask;
                    load.even[i] = col.even;
                    load.last = load.last.max((row + col.last) as usize);
                    load.nseg += 1;
                }
            }
        }
        true
    }
}

/// Scratch of the strip packer, reused across strips.
#[derive(Debug, Default)]
pub(crate) struct StripScratch {
    loads: Vec<RowLoad>,
    cols: Vec<ColRun>,
    segs: Vec<Seg>,
}

impl StripScratch {
    /// Scratch for strips of at most `width` positions of `geo` and calls of at most `taps`
    /// taps, allocated at once: packing then never grows it (one load per window described,
    /// one column run per (window column, segment) of at most [`MAX_SEGMENTS`], at most
    /// `width + 2` segments).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when it cannot be allocated.
    fn new(geo: &Geometry, width: usize, taps: usize) -> Result<StripScratch> {
        let what = "the strip packer's scratch";
        // A call describes at most as many windows, and kernel columns, as it packs taps
        // (`Geometry::window_split`).
        let windows = (geo.win_rows.len() * geo.win_cols.len()).min(taps);
        let columns = geo.win_cols.len().min(taps);
        Ok(StripScratch {
            loads: crate::alloc::try_vec_with_capacity(windows, what)?,
            cols: crate::alloc::try_vec_with_capacity(columns * MAX_SEGMENTS, what)?,
            segs: crate::alloc::try_vec_with_capacity(width + 2, what)?,
        })
    }
}

/// The lanes of one run that a window column offset keeps inside the image, and the
/// column part of their offsets (see [`Geometry::row_loads`]).
#[derive(Debug, Clone, Copy, Default)]
struct ColRun {
    mask: u32,
    even: [u16; 4],
    off: i64,
    last: i64,
}

/// Taps of an explicit im2col packed per strip-packer call (the engine's depth blocks are
/// at most [`crate::gemm::blocking::KC_MAX`] taps likewise).
const IM2COL_TAP_CHUNK: usize = 1024;

/// Lanes of one packed strip the AVX-512 packer fills at once (two vectors).
const STRIP: usize = 32;
/// Most runs (one per output row crossed) one strip is assembled from.
const MAX_SEGMENTS: usize = 8;

/// How one strip's lanes are loaded for one window offset (r, s): lane l of run i reads
/// `channel base + off[i] + l·step` where `mask[i]` has bit l.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowLoad {
    nseg: usize,
    off: [isize; MAX_SEGMENTS],
    mask: [u32; MAX_SEGMENTS],
    /// For step 2: per run, the element masks of the two source vectors of each half of the
    /// lanes (see [`even_masks`]).
    even: [[u16; 4]; MAX_SEGMENTS],
    /// The largest offset an enabled lane reads (relative to the channel base).
    last: usize,
}

/// For lanes `mask` read at every other element: the masks of the elements to load, per
/// half of the lanes, from the half's first and second 16 elements.
fn even_masks(mask: u32) -> [u16; 4] {
    // Bit i of the low 8 bits to bit 2i.
    let spread = |m: u32| (0..8).fold(0u16, |out, i| out | (((m >> i & 1) as u16) << (2 * i)));
    let (h0, h1) = (mask & 0xffff, mask >> 16);
    [
        spread(h0 & 0xff),
        spread(h0 >> 8),
        spread(h1 & 0xff),
        spread(h1 >> 8),
    ]
}

impl RowLoad {
    const EMPTY: RowLoad = RowLoad {
        nseg: 0,
        off: [0; MAX_SEGMENTS],
        mask: [0; MAX_SEGMENTS],
        even: [[0; 4]; MAX_SEGMENTS],
        last: 0,
    };
}

/// Bits lo .. hi.
fn lanes(lo: usize, hi: usize) -> u32 {
    let upto = |n: usize| if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
    upto(hi) & !upto(lo)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{RowLoad, Tap, STRIP};

    /// Fills `width ≤ 32` lanes of row i (at `dst[i·ld ..]`) for each tap i from the load
    /// descriptors of its window offset; `step` is the element distance between lanes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fill_rows(
        x: &[f32],
        xbase: usize,
        taps: &[Tap],
        loads: &[RowLoad],
        win0: usize,
        step: usize,
        dst: &mut [f32],
        ld: usize,
        width: usize,
    ) {
        assert!(width <= STRIP && !taps.is_empty() && dst.len() >= (taps.len() - 1) * ld + width);
        assert!(taps
            .iter()
            .all(|t| t.win >= win0 && t.win - win0 < loads.len()));
        // SAFETY: the AVX-512 packer is chosen only when the usable features (always within
        // the detected ones) include AVX-512F; the caller asserted that every enabled lane's
        // element lies inside x (largest channel base + largest load offset < x.len()), and
        // rows are inside dst (asserted above).
        unsafe {
            match step {
                1 => rows::<1>(x, xbase, taps, loads, win0, step, dst, ld, width),
                2 => rows::<2>(x, xbase, taps, loads, win0, step, dst, ld, width),
                _ => rows::<0>(x, xbase, taps, loads, win0, step, dst, ld, width),
            }
        }
    }

    /// `STEP` 1 (contiguous), 2 (every other element) or 0 (any step: gathers).
    ///
    /// # Safety
    /// AVX-512F. Every lane a load enables addresses an element of x at
    /// `xbase + tap.xoff + off + l·step`; rows `i·ld .. i·ld + width` are inside dst.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    unsafe fn rows<const STEP: usize>(
        x: &[f32],
        xbase: usize,
        taps: &[Tap],
        loads: &[RowLoad],
        win0: usize,
        step: usize,
        dst: &mut [f32],
        ld: usize,
        width: usize,
    ) {
        let xp = x.as_ptr();
        let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let idx = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(step as i32),
        );
        let store = super::lanes(0, width);
        let (s0, s1) = (store as u16, (store >> 16) as u16);
        let op = dst.as_mut_ptr();
        for (i, tap) in taps.iter().enumerate() {
            let base = xp.wrapping_add(xbase + tap.xoff);
            let load = &loads[tap.win - win0];
            let mut v = [_mm512_setzero_ps(); 2];
            for s in 0..load.nseg {
                let p = base.wrapping_offset(load.off[s]);
                for (h, v) in v.iter_mut().enumerate() {
                    let m = (load.mask[s] >> (16 * h)) as u16;
                    if m == 0 {
                        continue;
                    }
                    let ph = p.wrapping_add(16 * h * step);
                    // SAFETY: the enabled lanes address elements of x (contract); masked-off
                    // lanes are not accessed and cannot fault.
                    *v = unsafe {
                        match STEP {
                            1 => _mm512_mask_loadu_ps(*v, m, ph),
                            2 => {
                                let e = &load.even[s][2 * h..2 * h + 2];
                                let lo = _mm512_maskz_loadu_ps(e[0], ph);
                                let hi = _mm512_maskz_loadu_ps(e[1], ph.wrapping_add(16));
                                _mm512_mask_mov_ps(*v, m, _mm512_permutex2var_ps(lo, evens, hi))
                            }
                            _ => _mm512_mask_i32gather_ps::<4>(*v, m, idx, ph),
                        }
                    };
                }
            }
            let out = op.wrapping_add(i * ld);
            // SAFETY: row i's first `width` elements are inside dst (contract); masked-off
            // lanes are not accessed.
            unsafe {
                if width == STRIP {
                    _mm512_storeu_ps(out, v[0]);
                    _mm512_storeu_ps(out.add(16), v[1]);
                } else {
                    _mm512_mask_storeu_ps(out, s0, v[0]);
                    _mm512_mask_storeu_ps(out.wrapping_add(16), s1, v[1]);
                }
            }
        }
    }
}

/// Elements of an im2col block below which it is filled on one thread.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

/// A run of positions inside one output row (see [`Geometry::segments`]).
#[derive(Debug, Clone, Copy)]
struct Seg {
    at: usize,
    len: usize,
    ih0: i64,
    iw0: i64,
}

/// The patches of one block packed straight from x, as the engine's A (positions × taps) or
/// as its B (taps × positions).
pub(crate) struct Patches<'a> {
    pub geo: &'a Geometry,
    pub x: &'a [f32],
    pub block: Block,
    /// The kernel family packing may use.
    pub features: Features,
}

impl PackA for Patches<'_> {
    fn pack_a(
        &self,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        let geo = self.geo;
        let xbase = geo.x_base(&self.block);
        let taps = &geo.taps[p0..p0 + kc];
        let mut sc = StripScratch::new(geo, mr, kc)?;
        for (q, panel) in dst.chunks_exact_mut(kc * mr).enumerate() {
            let start = self.block.p0 + i0 + q * mr;
            let n = mr.min(mc - q * mr);
            geo.pack_strip(
                self.features,
                self.x,
                xbase,
                start,
                n,
                mr,
                taps,
                panel,
                mr,
                &mut sc,
            );
        }
        Ok(())
    }
}

impl PackB for Patches<'_> {
    fn pack_b(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        let geo = self.geo;
        let xbase = geo.x_base(&self.block);
        let taps = &geo.taps[p0..p0 + kc];
        let tr = crate::gemm::transposer_for(self.features).filter(|t| t.max_w >= nr);
        let chunk = tr.map_or(16, |t| t.strip);
        let what = "the patch packer's scratch";
        let (mut sc, mut tmp, mut origins) = if geo.channels_inner {
            (
                StripScratch::default(),
                crate::alloc::try_vec(nr * chunk, 0f32, what)?,
                crate::alloc::try_vec_with_capacity(nr, what)?,
            )
        } else {
            (StripScratch::new(geo, nr, kc)?, Vec::new(), Vec::new())
        };
        for (q, panel) in dst.chunks_exact_mut(kc * nr).enumerate() {
            let start = self.block.p0 + j0 + q * nr;
            let valid = nr.min(nc - q * nr);
            if !geo.channels_inner {
                // A panel row is one tap of nr positions: the strip packer's format.
                geo.pack_strip(
                    self.features,
                    self.x,
                    xbase,
                    start,
                    valid,
                    nr,
                    taps,
                    panel,
                    nr,
                    &mut sc,
                );
                continue;
            }
            geo.pack_panel_nhwc(
                self.x,
                xbase,
                (start, valid),
                p0,
                kc,
                panel,
                tr,
                (&mut tmp, &mut origins),
            );
        }
        Ok(())
    }
}

impl Geometry {
    /// One B panel of NHWC-like patches: `nr` positions from `start` (`valid` of them real),
    /// taps `t0 .. t0 + kc`, row k of the panel holding tap t0 + k of the nr positions. Taps
    /// go in chunks of the transposer's strip: when a chunk is contiguous in x and inside the
    /// image for every position of a panel lying in one output row, it is transposed straight
    /// from x (the positions are evenly spaced there); otherwise each position's taps are
    /// copied into `tmp` first. `origins` holds room for `nr` window origins.
    #[allow(clippy::too_many_arguments)]
    fn pack_panel_nhwc(
        &self,
        x: &[f32],
        xbase: usize,
        (start, valid): (usize, usize),
        t0: usize,
        kc: usize,
        panel: &mut [f32],
        tr: Option<&crate::gemm::Transposer>,
        (tmp, origins): (&mut [f32], &mut Vec<(i64, i64)>),
    ) {
        let nr = panel.len() / kc;
        let chunk = tmp.len() / nr;
        origins.clear();
        origins.extend((start..start + valid).map(|p| self.origin(p)));
        let origins = &origins[..];
        let one_row = valid == nr && start / self.ow == (start + nr - 1) / self.ow;
        let row_len = self.win_cols.len() * self.cg;
        tmp[valid * chunk..].fill(0.0);
        let mut t = 0;
        while t < kc {
            let n = chunk.min(kc - t);
            let out = &mut panel[t * nr..(t + n) * nr];
            if let Some(tr) = tr.filter(|_| n == chunk && one_row && self.rows_contiguous) {
                let tt = t0 + t;
                let (r, rem) = (tt / row_len, tt % row_len);
                let (ih, first, last) = (
                    origins[0].0 + self.win_rows[r],
                    origins[0].1,
                    origins[nr - 1].1,
                );
                let kw = self.win_cols.len() as i64;
                let lo = (-first).clamp(0, kw) as usize * self.cg;
                let hi = (self.w - last).clamp(0, kw) as usize * self.cg;
                if ih >= 0 && ih < self.h && rem >= lo && rem + n <= hi.min(row_len) {
                    // The first position's tap `rem` (its column inside the image: rem ≥ lo).
                    let src = (xbase as i64
                        + ih * self.xs[2] as i64
                        + first * self.xs[3] as i64
                        + rem as i64) as usize;
                    let ld = self.stride[1] as usize * self.xs[3];
                    let src = &x[src..src + (nr - 1) * ld + n];
                    // SAFETY: the family's features are this CPU's (transposer_for caps them); nr ≤
                    // max_w rows of `strip` = n floats, ld apart, all inside `src` (a checked
                    // slice); `out` holds strip · nr floats.
                    unsafe { (tr.run)(src.as_ptr(), ld, nr, out.as_mut_ptr()) };
                    t += n;
                    continue;
                }
            }
            for (j, &(ih0, iw0)) in origins.iter().enumerate() {
                self.fill_patch_at(
                    x,
                    xbase,
                    ih0,
                    iw0,
                    t0 + t,
                    &mut tmp[j * chunk..j * chunk + n],
                );
            }
            match tr {
                Some(tr) if n == chunk => {
                    // SAFETY: as above, the source being tmp: nr rows of chunk floats.
                    unsafe { (tr.run)(tmp.as_ptr(), chunk, nr, out.as_mut_ptr()) }
                }
                _ => {
                    for (k, row) in out.chunks_exact_mut(nr).enumerate() {
                        for (j, o) in row.iter_mut().enumerate() {
                            *o = tmp[j * chunk + k];
                        }
                    }
                }
            }
            t += n;
        }
    }
}

/// Magic number opening prepared weights of the GEMM-based algorithms.
const PREPARED_MAGIC: f32 = 7405.0;
/// Floats before the packed panels: magic, panel width, depth block, frame.
const PREPARED_HEADER: usize = 4;

/// One group's filter as the engine's operand: the filter side of the frame (B, taps ×
/// channels, for [`Frame::Positions`]; A, channels × taps, for [`Frame::Channels`]).
pub(crate) enum Filter<'a> {
    /// Taps consecutive in memory: a strided matrix.
    Strided(StridedMatrix<'a, f32>),
    /// The same as the vector side (A, [`Frame::Channels`]): rows of channels `ks` apart,
    /// taps contiguous; packed with two transposes per panel where the panel is twice the
    /// transposer's width (AVX-512's 32 rows), as the strided matrix otherwise.
    Rows {
        m: StridedMatrix<'a, f32>,
        w: &'a [f32],
        base: usize,
        ks: usize,
        tr: Option<&'static crate::gemm::Transposer>,
    },
    /// Any filter layout and mode: element (tap t, channel k) at `base + k·ks + woff[t]`.
    Table {
        w: &'a [f32],
        base: usize,
        ks: usize,
        taps: &'a [Tap],
    },
    /// Prepared: the engine's panels, cut into depth blocks (see [`prepare`]).
    Packed(PackedFilter<'a>),
}

impl Filter<'_> {
    /// Filter element (tap t, channel k).
    #[inline]
    fn at(&self, t: usize, k: usize) -> f32 {
        match self {
            Filter::Strided(_) | Filter::Rows { .. } => {
                unreachable!("strided filters pack themselves")
            }
            Filter::Table { w, base, ks, taps } => w[base + k * ks + taps[t].woff],
            Filter::Packed(p) => p.at(t, k),
        }
    }

    /// Packs channels `k0 .. k0 + nk` (zero beyond) of taps `t0 .. t0 + kt` as panels of
    /// `width` channels: element (t, k) at panel `(k − k0) / width`, `(t − t0)·width +
    /// (k − k0) % width`.
    fn pack_generic(
        &self,
        t0: usize,
        kt: usize,
        k0: usize,
        nk: usize,
        width: usize,
        dst: &mut [f32],
    ) {
        for (q, panel) in dst.chunks_exact_mut(kt * width).enumerate() {
            let valid = width.min(nk - q * width);
            for (i, row) in panel.chunks_exact_mut(width).enumerate() {
                for (j, o) in row.iter_mut().enumerate() {
                    *o = if j < valid {
                        self.at(t0 + i, k0 + q * width + j)
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// Packs rows `i0 .. i0 + mc` (`ks` apart from `base`), columns `p0 .. p0 + kc` of a
/// row-major matrix as A panels of `mr = 2 · strip` rows, each strip of `strip` columns
/// transposed as two `strip × strip` halves; ragged panels through `m`.
fn pack_rows_twice(
    m: &StridedMatrix<'_, f32>,
    (w, base, ks): (&[f32], usize, usize),
    tr: &crate::gemm::Transposer,
    (i0, mc, p0, kc, mr): (usize, usize, usize, usize, usize),
    dst: &mut [f32],
) -> Result<()> {
    let sw = tr.strip;
    let mut halves = crate::alloc::try_vec(2 * sw * sw, 0f32, "the filter packer's scratch")?;
    for (q, panel) in dst.chunks_exact_mut(kc * mr).enumerate() {
        let r0 = i0 + q * mr;
        if mc - q * mr < mr {
            m.pack_a(r0, mc - q * mr, p0, kc, mr, panel)?;
            continue;
        }
        let mut c = 0;
        while c + sw <= kc {
            let start = base + r0 * ks + p0 + c;
            let src = &w[start..start + (mr - 1) * ks + sw];
            let (lo, hi) = halves.split_at_mut(sw * sw);
            // SAFETY: the family's features are this CPU's (transposer_for caps them); each call
            // reads sw ≤ max_w rows of `strip` floats, ks apart, inside `src` (a checked
            // slice of rows 0 .. mr); `lo` and `hi` hold strip · sw floats each.
            unsafe {
                (tr.run)(src.as_ptr(), ks, sw, lo.as_mut_ptr());
                (tr.run)(src[sw * ks..].as_ptr(), ks, sw, hi.as_mut_ptr());
            }
            let out = &mut panel[c * mr..(c + sw) * mr];
            for (qq, row) in out.chunks_exact_mut(mr).enumerate() {
                row[..sw].copy_from_slice(&lo[qq * sw..(qq + 1) * sw]);
                row[sw..].copy_from_slice(&hi[qq * sw..(qq + 1) * sw]);
            }
            c += sw;
        }
        for cc in c..kc {
            for (i, o) in panel[cc * mr..(cc + 1) * mr].iter_mut().enumerate() {
                *o = w[base + (r0 + i) * ks + p0 + cc];
            }
        }
    }
    Ok(())
}

impl PackA for Filter<'_> {
    fn pack_a(
        &self,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        match self {
            Filter::Strided(m) => m.pack_a(i0, mc, p0, kc, mr, dst),
            Filter::Rows {
                m,
                w,
                base,
                ks,
                tr: Some(tr),
            } if mr == 2 * tr.strip && tr.max_w >= tr.strip => {
                pack_rows_twice(m, (w, *base, *ks), tr, (i0, mc, p0, kc, mr), dst)
            }
            Filter::Rows { m, .. } => m.pack_a(i0, mc, p0, kc, mr, dst),
            _ => {
                self.pack_generic(p0, kc, i0, mc, mr, dst);
                Ok(())
            }
        }
    }
    fn in_place(&self) -> Option<(&[f32], usize)> {
        match self {
            Filter::Strided(m) | Filter::Rows { m, .. } => m.in_place(),
            _ => None,
        }
    }
    fn prepacked_a(&self, i0: usize, mc: usize, p0: usize, kc: usize, mr: usize) -> Option<&[f32]> {
        match self {
            Filter::Packed(p) => p.panels(p0, kc, i0, mc, mr),
            _ => None,
        }
    }
}

impl PackB for Filter<'_> {
    fn pack_b(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        match self {
            Filter::Strided(m) | Filter::Rows { m, .. } => m.pack_b(p0, kc, j0, nc, nr, dst),
            _ => {
                self.pack_generic(p0, kc, j0, nc, nr, dst);
                Ok(())
            }
        }
    }
    fn prepacked_b(&self, p0: usize, kc: usize, j0: usize, nc: usize, nr: usize) -> Option<&[f32]> {
        match self {
            Filter::Packed(p) => p.panels(p0, kc, j0, nc, nr),
            _ => None,
        }
    }
}

/// One group's prepared filter: for each depth block of `kcb` taps (the last one shorter),
/// `ceil(channels / width)` panels of `(block depth) × width`, channels past the end zero.
pub(crate) struct PackedFilter<'a> {
    data: &'a [f32],
    width: usize,
    kcb: usize,
    depth: usize,
    channels: usize,
}

impl PackedFilter<'_> {
    fn padded(&self) -> usize {
        self.channels.div_ceil(self.width) * self.width
    }

    /// The panels the engine asks for, when they are cut as these were.
    fn panels(&self, t0: usize, kt: usize, k0: usize, nk: usize, width: usize) -> Option<&[f32]> {
        let fits = width == self.width
            && t0.is_multiple_of(self.kcb)
            && kt == self.kcb.min(self.depth - t0)
            && k0.is_multiple_of(width)
            && k0 + nk <= self.channels;
        fits.then(|| {
            let off = t0 * self.padded() + k0 / width * kt * width;
            &self.data[off..off + nk.div_ceil(width) * width * kt]
        })
    }

    /// Element (tap t, channel k).
    fn at(&self, t: usize, k: usize) -> f32 {
        let (b0, d) = (t / self.kcb * self.kcb, t % self.kcb);
        let kt = self.kcb.min(self.depth - b0);
        self.data[b0 * self.padded()
            + k / self.width * kt * self.width
            + d * self.width
            + k % self.width]
    }
}

impl Geometry {
    /// Group g's plain filter as the engine operand of the frame.
    pub fn filter<'a>(&'a self, w: &'a [f32], g: usize, features: Features) -> Filter<'a> {
        let base = g * self.kg * self.ws[0];
        if self.filter_contiguous {
            let (k, ks) = (self.depth, self.ws[0]);
            let inside = "inside w: checked against the descriptor";
            match self.frame {
                Frame::Positions => Filter::Strided(
                    StridedMatrix::new(&w[base..], k, self.kg, 1, ks)
                        .expect(inside)
                        .for_features(features),
                ),
                Frame::Channels => Filter::Rows {
                    m: StridedMatrix::new(&w[base..], self.kg, k, ks, 1)
                        .expect(inside)
                        .for_features(features),
                    w,
                    base,
                    ks,
                    tr: crate::gemm::transposer_for(features),
                },
            }
        } else {
            Filter::Table {
                w,
                base,
                ks: self.ws[0],
                taps: &self.taps,
            }
        }
    }

    /// Group g's prepared filter, made by [`Geometry::prepare`].
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `prepared` when the data was not made by `prepare` for a
    /// problem of this shape.
    pub fn prepared_filter<'a>(&self, data: &'a [f32], g: usize) -> Result<Filter<'a>> {
        let bad = || Error::bad("prepared", "data", "not made by this algorithm's prepare");
        if data.len() < PREPARED_HEADER || data[0] != PREPARED_MAGIC {
            return Err(bad());
        }
        let (width, kcb) = (data[1] as usize, data[2] as usize);
        let frame = if data[3] == 0.0 {
            Frame::Positions
        } else {
            Frame::Channels
        };
        if width == 0 || kcb == 0 || frame != self.frame {
            return Err(bad());
        }
        let per_group = self.depth * self.kg.div_ceil(width) * width;
        if data.len() != PREPARED_HEADER + self.groups * per_group {
            return Err(bad());
        }
        let start = PREPARED_HEADER + g * per_group;
        Ok(Filter::Packed(PackedFilter {
            data: &data[start..start + per_group],
            width,
            kcb,
            depth: self.depth,
            channels: self.kg,
        }))
    }

    /// The filter packed once into the engine's panels for the kernel family of `features`: a
    /// header, then every group's panels.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the buffer cannot be allocated.
    pub fn prepare(&self, w: &[f32], features: Features) -> Result<Vec<f32>> {
        let bl = gemm::blocking_with(features);
        let width = match self.frame {
            Frame::Positions => bl.nr,
            Frame::Channels => bl.mr,
        };
        let kcb = gemm::depth_block(self.depth, bl.kc);
        let padded = self.kg.div_ceil(width) * width;
        let len = PREPARED_HEADER + self.groups * self.depth * padded;
        let mut data = crate::alloc::try_vec(len, 0.0, "packed filter")?;
        data[..PREPARED_HEADER].copy_from_slice(&[
            PREPARED_MAGIC,
            width as f32,
            kcb as f32,
            if self.frame == Frame::Positions {
                0.0
            } else {
                1.0
            },
        ]);
        for (g, dst) in data[PREPARED_HEADER..]
            .chunks_exact_mut(self.depth * padded)
            .enumerate()
        {
            let f = self.filter(w, g, features);
            let mut t0 = 0;
            while t0 < self.depth {
                let kt = kcb.min(self.depth - t0);
                let out = &mut dst[t0 * padded..(t0 + kt) * padded];
                match self.frame {
                    Frame::Positions => f.pack_b(t0, kt, 0, self.kg, width, out)?,
                    Frame::Channels => f.pack_a(0, self.kg, t0, kt, width, out)?,
                }
                t0 += kt;
            }
        }
        Ok(data)
    }

    /// Runs one block's GEMM: C (the block of y) = epilogue(alpha · patches · filter), with
    /// the patches and the filter as the frame's operands.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        ctx: &ExecContext<'_>,
        b: &Block,
        patches: Operand<'_>,
        filter: &Filter<'_>,
        y: &mut [f32],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let (base, m, n, [rs, cs]) = self.c_view(b);
        let bias = epi.bias.map(|v| &v[b.g * self.kg..(b.g + 1) * self.kg]);
        let mut ge = gemm::Epilogue::new().with_activation(epi.act);
        ge = match (bias, self.frame) {
            (Some(v), Frame::Positions) => ge.with_bias_per_col(v),
            (Some(v), Frame::Channels) => ge.with_bias_per_row(v),
            (None, _) => ge,
        };
        let mut beta = epi.beta;
        if beta != 0.0 {
            if let Some(z) = epi.residual {
                if beta == 1.0 {
                    ge = ge.with_residual(&z[base..], rs, cs);
                    beta = 0.0;
                } else {
                    // beta·z through the engine's beta·C: z copied into the block first.
                    for i in 0..m {
                        for j in 0..n {
                            let o = base + i * rs + j * cs;
                            y[o] = z[o];
                        }
                    }
                }
            }
        }
        let k = self.depth;
        let c = &mut y[base..];
        match (patches, self.frame) {
            (Operand::A(a), Frame::Positions) => {
                gemm::gemm_engine(ctx, m, n, k, epi.alpha, a, filter, beta, c, [rs, cs], &ge)
            }
            (Operand::B(p), Frame::Channels) => {
                gemm::gemm_engine(ctx, m, n, k, epi.alpha, filter, p, beta, c, [rs, cs], &ge)
            }
            _ => unreachable!("the patches operand follows the frame"),
        }
    }
}

/// The patches of a block as the engine operand of the frame.
pub(crate) enum Operand<'a> {
    /// [`Frame::Positions`]: A.
    A(&'a dyn PackA),
    /// [`Frame::Channels`]: B.
    B(&'a dyn PackB),
}

/// How a [`GemmConv`]'s patches reach the engine (x itself when it already is the patch
/// matrix, 1x1 stride-1 convolutions, either way).
#[derive(Clone, Copy)]
pub(crate) enum PatchSource {
    /// Copied into the workspace a block of output positions at a time (`gemm`); the function
    /// gives the positions per block.
    Copied(fn(&Geometry) -> usize),
    /// Packed by the engine straight from x ([`Patches`]: `implicit_gemm`).
    Packed,
}

/// The convolution as GEMMs (`gemm`, `implicit_gemm`): one [`ConvAlgorithm`] given how the
/// patches reach the engine.
pub(crate) struct GemmConv {
    /// The algorithm's name.
    pub(crate) name: &'static str,
    /// How the patches reach the engine.
    pub(crate) patches: PatchSource,
}

impl GemmConv {
    /// Workspace bytes of a problem of geometry `geo`: one copied block of patches.
    fn workspace_for(&self, geo: &Geometry) -> usize {
        self.copied_positions(geo)
            .map_or(0, |bp| geo.depth * bp * std::mem::size_of::<f32>())
    }

    /// Output positions per block copied into the workspace; `None` when nothing is copied.
    fn copied_positions(&self, geo: &Geometry) -> Option<usize> {
        match self.patches {
            PatchSource::Copied(positions) if !geo.x_is_matrix => Some(positions(geo)),
            _ => None,
        }
    }
}

impl ConvAlgorithm for GemmConv {
    fn name(&self) -> &'static str {
        self.name
    }

    fn check(&self, _: &ConvProblem) -> std::result::Result<(), String> {
        Ok(())
    }

    fn workspace_bytes(&self, problem: &ConvProblem) -> usize {
        self.workspace_for(&Geometry::shape(problem))
    }

    fn deterministic(&self) -> bool {
        true
    }

    /// The selection heuristic's features: the defaults, except three that follow the engine
    /// ([`frame_cost`] in the frame the problem takes):
    ///
    /// 1. the micro-kernels' work as GFLOP: the GEMM's rows rounded up to whole vectors of the
    ///    register tile and the transposed tile stores (narrow outputs pay for whole vectors);
    /// 6. the engine calls, in thousands (one per image and group, or per output row): each
    ///    sets up its loops, buffers and threads (grouped and depthwise problems make many
    ///    small ones);
    /// 7. MB of the packed patch operand, which every call packs (from x itself for a 1x1
    ///    convolution): with few output channels, each packed element serves few
    ///    multiply-adds and the packing weighs as much as the products.
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        let geo = Geometry::shape(p);
        let mut f = default_cost_features(p, self.workspace_for(&geo));
        let oh = geo.positions / geo.ow.max(1);
        let per = gemm_positions(geo.ys, oh, geo.ow).max(1);
        let gemms = (geo.n * geo.groups * (geo.positions / per)) as f64;
        let c = frame_cost(geo.frame, per, geo.kg, geo.depth, !geo.x_is_matrix);
        f[1] = 2.0 * c.work as f64 * gemms / 1e9;
        f[6] = gemms / 1e3;
        f[7] = c.packed as f64 * 4.0 * gemms / 1e6;
        f
    }

    fn prepare(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        Geometry::new(problem)?.prepare(w, ctx.features).map(Some)
    }

    fn run(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let geo = Geometry::new(problem)?;
        let features = ctx.features;
        let copied = self.copied_positions(&geo);
        let (bp, col) = match copied {
            Some(bp) => (bp, Carve::new(workspace).take::<f32>(geo.depth * bp)?),
            None => (usize::MAX, &mut [][..]),
        };
        for block in geo.blocks(bp)? {
            let filter = match w {
                AlgoWeights::Plain(w) => geo.filter(w, block.g, features),
                AlgoWeights::Prepared(d) => geo.prepared_filter(d, block.g)?,
            };
            if geo.x_is_matrix || copied.is_some() {
                let m = if geo.x_is_matrix {
                    geo.x_matrix(x, &block, features)
                } else {
                    geo.im2col(ctx, x, &block, col)?;
                    geo.col_matrix(col, block.np, features)
                };
                let patches = match geo.frame {
                    Frame::Positions => Operand::A(&m),
                    Frame::Channels => Operand::B(&m),
                };
                geo.gemm(ctx, &block, patches, &filter, y, epi)?;
            } else {
                let patches = Patches {
                    geo: &geo,
                    x,
                    block,
                    features,
                };
                let operand = match geo.frame {
                    Frame::Positions => Operand::A(&patches),
                    Frame::Channels => Operand::B(&patches),
                };
                geo.gemm(ctx, &block, operand, &filter, y, epi)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Layout, ProblemSpec};

    fn geo(spec: &str, layout: Layout) -> Geometry {
        Geometry::new(
            &ProblemSpec::parse(spec)
                .unwrap()
                .to_problem(layout)
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn frames_follow_layout_and_image_size() {
        if forced_frame().is_some() {
            return; // AUTODNN_GEMM_CONV_FRAME set for tuning: the model is bypassed.
        }
        // NHWC: channels are y's contiguous direction.
        assert_eq!(
            geo("mb1ic64ih56oc64oh56kh1ph0", Layout::Nhwc).frame,
            Frame::Channels
        );
        // NCHW: large images by positions; 14x14 and 7x7 by channels (49 positions would be
        // computed as 64).
        for (spec, frame) in [
            ("mb1ic64ih56oc64oh56kh1ph0", Frame::Positions),
            (
                "g1mb1ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3",
                Frame::Positions,
            ),
            ("mb1ic128ih28oc512oh28kh1ph0", Frame::Positions),
            ("mb1ic1024ih14oc256oh14kh1ph0", Frame::Channels),
            ("mb1ic512ih7oc2048oh7kh1ph0", Frame::Channels),
            ("mb1ic512ih7oc512oh7kh3ph1", Frame::Channels),
        ] {
            assert_eq!(geo(spec, Layout::Nchw).frame, frame, "{spec}");
        }
    }

    #[test]
    fn cost_features_follow_the_engine() {
        if forced_frame().is_some() {
            return; // AUTODNN_GEMM_CONV_FRAME set for tuning: the model is bypassed.
        }
        let algo = GemmConv {
            name: "implicit_gemm",
            patches: PatchSource::Packed,
        };
        let features = |spec: &str| {
            let p = ProblemSpec::parse(spec)
                .unwrap()
                .to_problem(Layout::Nchw)
                .unwrap();
            (p.flops() / 1e9, algo.cost_features(&p))
        };
        // 16 output channels: as rows they would fill half of each 32-row vector, so the
        // frame takes the 196 positions as rows, rounded up to 224 (one engine call; its
        // packed patches are x, positions rounded up the same way).
        let (gflop, f) = features("mb1ic512ih14oc16oh14kh1ph0");
        assert_eq!(f[1], 2.0 * (224 * 16 * 512) as f64 / 1e9);
        assert!(f[1] > gflop * 224.0 / 196.0 * 0.999);
        assert_eq!(f[6], 1e-3);
        assert_eq!(f[7], (224 * 512 * 4) as f64 / 1e6);
        // 49 positions by positions as rows would round to 64: this frame takes channels,
        // and 256 channels fill their vectors (only the transposed stores remain).
        let (gflop, f) = features("mb2ic1024ih7oc256oh7kh1ph0");
        assert!(f[1] >= gflop && f[1] < 1.1 * gflop, "{} vs {gflop}", f[1]);
        assert_eq!(f[6], 2e-3, "one engine call per image");
        // Grouped: one call per image and group.
        let (_, f) = features("mb1g8ic64ih14oc64oh14kh3ph1");
        assert_eq!(f[6], 8e-3);
    }

    #[test]
    fn image_is_the_matrix_for_1x1_stride_1() {
        assert!(geo("mb1ic64ih56oc64oh56kh1ph0", Layout::Nchw).x_is_matrix);
        assert!(geo("mb1ic64ih56oc64oh56kh1ph0", Layout::Nhwc).x_is_matrix);
        assert!(!geo("mb1ic64ih56oc64oh28kh1sh2ph0", Layout::Nchw).x_is_matrix);
        assert!(!geo("mb1ic64ih56oc64oh56kh3ph1", Layout::Nchw).x_is_matrix);
    }

    #[test]
    fn strip_runs_and_lanes() {
        assert_eq!(lanes(0, 32), u32::MAX);
        assert_eq!(lanes(3, 5), 0b11000);
        assert_eq!(lanes(4, 4), 0);
        // 7-wide rows: a 32-position strip from position 5 crosses 6 rows.
        let g = geo("mb1ic4ih7oc4oh7kh3ph1", Layout::Nchw);
        let mut segs = Vec::new();
        g.segments(5, 32, usize::MAX, &mut segs);
        assert_eq!(
            segs.iter().map(|s| s.len).collect::<Vec<_>>(),
            [2, 7, 7, 7, 7, 2]
        );
        assert_eq!((segs[1].at, segs[1].ih0, segs[1].iw0), (2, 0, -1));
        // Panel boundaries (unit 8) split runs too.
        g.segments(0, 16, 8, &mut segs);
        assert_eq!(segs.iter().map(|s| s.len).collect::<Vec<_>>(), [7, 1, 6, 2]);
    }
}
