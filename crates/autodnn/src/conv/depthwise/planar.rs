//! The NCHW-like frame: vectors along output rows, the column tables saying how each tap's
//! vector of inputs is read from a row, the work split into row blocks of channels.

use std::ptr;

use crate::conv::{EpilogueArgs, ExecContext};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::op::Tensor;
use crate::runtime::parallel::SharedOut;

use super::geometry::{activate, activates_after, for_ranges, Geo, GENERIC_ROWS, ITEMS_PER_THREAD};
use super::kernels::{KernelSet, PlaneSet};
use super::simd::{Elem, Simd};
use super::stage::{runs, stage_x, stage_z, YOut, STAGE_FLOATS};

/// One vector of a column table: its offset along the row and the lanes (or, for stride-2
/// loads, the elements of the two vectors read) that lie inside the row.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ColLoad {
    pub(super) off: isize,
    pub(super) m0: u32,
    pub(super) m1: u32,
}

/// How a tap's vector of inputs is read from a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Consecutive elements.
    One,
    /// Every other element: two loads and a permute.
    Two,
    /// Elements `sw` apart, lane by lane.
    Any,
    /// The three taps of a 3-wide stride-2 window at once (no dilation): one entry per
    /// column vector (after the outputs' entry) holds bit e of the elements 0..=2L read from
    /// its offset (low 32 bits in m0, the rest in m1), then two unused entries.
    Window3,
    /// The same for stride 1: elements 0..L + 2.
    Window3S1,
}

/// The column table: for each vector of output columns, one entry for the outputs (offset in
/// y's row and the lanes inside it) followed by one per kernel column (offset in x's row and
/// the lanes or elements inside it). Shared by every channel and row.
///
/// # Errors
/// [`Error::OutOfMemory`] when it cannot be allocated.
fn plane_cols(g: &Geo, lanes: usize, step: Step) -> Result<Vec<ColLoad>> {
    let low = |n: usize| if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
    let nv = g.ow.div_ceil(lanes);
    // One entry per vector, then one per kernel column (three for a 3-wide window).
    let per = 1 + g.s.max(3);
    let mut cols = crate::alloc::try_vec_with_capacity(nv * per, "depthwise's column table")?;
    for j in 0..nv {
        let ow0 = j * lanes;
        cols.push(ColLoad {
            off: ow0 as isize,
            m0: low(lanes.min(g.ow - ow0)),
            m1: 0,
        });
        if matches!(step, Step::Window3 | Step::Window3S1) {
            let (stride, span) = match step {
                Step::Window3 => (2, 2 * lanes + 1),
                _ => (1, lanes + 2),
            };
            let base = (ow0 * stride) as isize - g.pl;
            let raw = (0..span)
                .filter(|&e| (0..g.w).contains(&(base + e as isize)))
                .fold(0u64, |m, e| m | 1 << e);
            cols.push(ColLoad {
                off: base,
                m0: raw as u32,
                m1: (raw >> 32) as u32,
            });
            cols.extend([ColLoad::default(); 2]);
            continue;
        }
        for s in 0..g.s {
            let base = (ow0 * g.sw) as isize - g.pl + (s * g.dw) as isize;
            let inside = |e: usize| (0..g.w).contains(&(base + e as isize));
            let mut ld = ColLoad {
                off: base,
                m0: 0,
                m1: 0,
            };
            for l in 0..lanes {
                match step {
                    Step::One if inside(l) => ld.m0 |= 1 << l,
                    Step::Two if inside(2 * l) => {
                        if 2 * l < lanes {
                            ld.m0 |= 1 << (2 * l);
                        } else {
                            ld.m1 |= 1 << (2 * l - lanes);
                        }
                    }
                    Step::Any if inside(l * g.sw) => ld.m0 |= 1 << l,
                    _ => {}
                }
            }
            cols.push(ld);
        }
    }
    Ok(cols)
}

/// A run of an NCHW-like kernel: units `u0..u1` of one image, unit u = k·blocks + b being row
/// block b (output rows b·rows .. b·rows + rows, every column) of output channel k (of
/// channels 2k and 2k + 1 for kernels that hold two channels per vector).
pub(super) struct PlaneJob<'a, X = f32, Y = f32> {
    /// Image n of x.
    pub(super) x: *const X,
    /// x's channel and row strides.
    pub(super) xc: isize,
    pub(super) xrow: isize,
    /// Output channels, and the multiplier: output channel k reads input channel k / mult.
    pub(super) k: usize,
    pub(super) mult: usize,
    /// Input rows.
    pub(super) h: isize,
    pub(super) pt: isize,
    pub(super) sh: isize,
    pub(super) sw: isize,
    pub(super) dh: isize,
    pub(super) r: usize,
    pub(super) s: usize,
    /// Image n of y, and of z: the residual, or y itself (its prior contents).
    pub(super) y: *mut Y,
    pub(super) z: *const Y,
    /// y's (and z's) channel and row strides.
    pub(super) yc: isize,
    pub(super) yrow: isize,
    /// Output rows.
    pub(super) oh: usize,
    /// Row blocks per channel.
    pub(super) blocks: usize,
    pub(super) u0: usize,
    pub(super) u1: usize,
    pub(super) cols: &'a [ColLoad],
    /// Every channel's R·S weights, channel after channel.
    w: *const f32,
    flip: bool,
    /// One value per output channel, or null.
    bias: *const f32,
    pub(super) epi: &'a EpilogueArgs<'a>,
}

impl<'a, X, Y> PlaneJob<'a, X, Y> {
    /// The job of units `u0..u1` (of `blocks` row blocks per channel) of `k` output channels
    /// from channel `k0` on (the filter and bias addressed from there): x at (pointer,
    /// channel stride, row stride), y and z at (y, z, channel stride, row stride); the rest
    /// of the geometry from `g`.
    #[allow(clippy::too_many_arguments)]
    fn new(
        g: &Geo,
        (x, xc, xrow): (*const X, usize, usize),
        (y, z, yc, yrow): (*mut Y, *const Y, usize, usize),
        (k, k0): (usize, usize),
        (blocks, u0, u1): (usize, usize, usize),
        cols: &'a [ColLoad],
        w: &[f32],
        epi: &'a EpilogueArgs<'a>,
    ) -> PlaneJob<'a, X, Y> {
        PlaneJob {
            x,
            xc: xc as isize,
            xrow: xrow as isize,
            k,
            mult: g.mult,
            h: g.h,
            pt: g.pt,
            sh: g.sh as isize,
            sw: g.sw as isize,
            dh: g.dh as isize,
            r: g.r,
            s: g.s,
            y,
            z,
            yc: yc as isize,
            yrow: yrow as isize,
            oh: g.oh,
            blocks,
            u0,
            u1,
            cols,
            w: w.as_ptr().wrapping_add(k0 * g.taps()),
            flip: g.flip,
            bias: epi
                .bias
                .map_or(ptr::null(), |b| b.as_ptr().wrapping_add(k0)),
            epi,
        }
    }

    /// Weight of tap `t` (row-major over r, s) of channel `k`, flipped in convolution mode.
    ///
    /// # Safety
    /// `t < r·s`, k < K.
    #[inline(always)]
    pub(super) unsafe fn tap(&self, k: usize, t: usize) -> f32 {
        let taps = self.r * self.s;
        let i = if self.flip { taps - 1 - t } else { t };
        // SAFETY: k·taps + i < K·taps, the filter's length (the caller's contract).
        unsafe { *self.w.add(k * taps + i) }
    }

    /// Bit d set for each of the `rows` input rows from row `ih0` on that lie inside the
    /// image.
    #[inline(always)]
    pub(super) fn valid_rows(&self, ih0: isize, rows: usize) -> u32 {
        (0..rows)
            .filter(|&d| (0..self.h).contains(&(ih0 + d as isize)))
            .fold(0, |m, d| m | 1 << d)
    }

    /// Asks for the input rows that block `b` + [`FETCH_BLOCKS_AHEAD`] of channel `k` reads
    /// first (those its predecessor did not read; all of a channel's first block's), in the
    /// next channel's plane past
    /// the last block: each block reads its `in_rows` rows a column vector at a time, a
    /// dozen short runs at once, which the hardware prefetchers do not follow (MobileNet's
    /// 112x112 stride-2 layer at batch 8 waited on memory for most of its time).
    #[inline(always)]
    pub(super) fn fetch_ahead(&self, k: usize, b: usize, rows: usize, sh: usize, in_rows: usize) {
        let row_bytes = self.xrow.unsigned_abs() * std::mem::size_of::<X>();
        if row_bytes * self.h.unsigned_abs() < FETCH_MIN_PLANE_BYTES {
            return;
        }
        let (mut k, mut b) = (k, b + FETCH_BLOCKS_AHEAD);
        if b >= self.blocks {
            (k, b) = (k + 1, b - self.blocks);
            if k >= self.k || b >= self.blocks {
                return;
            }
        }
        // Rows ih0 + in_rows − rows·sh .. ih0 + in_rows: those the block before did not read.
        let ih0 = (b * rows * sh) as isize - self.pt;
        let fresh = if b == 0 {
            ih0
        } else {
            ih0 + in_rows as isize - (rows * sh) as isize
        };
        let first = fresh.max(ih0).max(0);
        let last = (ih0 + in_rows as isize).min(self.h);
        let xk = self.x.wrapping_offset((k / self.mult) as isize * self.xc);
        for ih in first..last {
            let row = xk.wrapping_offset(ih * self.xrow);
            crate::simd::fetch_range_to_l2(row.cast(), row_bytes);
        }
    }

    /// Channel k's bias (0 without one).
    ///
    /// # Safety
    /// k < K.
    #[inline(always)]
    pub(super) unsafe fn bias(&self, k: usize) -> f32 {
        if self.bias.is_null() {
            0.0
        } else {
            // SAFETY: the bias holds K values (the caller's contract).
            unsafe { *self.bias.add(k) }
        }
    }
}

/// Row blocks ahead of the one being computed whose input rows [`PlaneJob::fetch_ahead`]
/// asks for.
pub(super) const FETCH_BLOCKS_AHEAD: usize = 2;

/// Smallest input plane (bytes) whose rows [`PlaneJob::fetch_ahead`] asks for. MobileNet's
/// layers at batch 8 on an AVX2 Zen 3, 1 thread: from 28x28 planes up 0.4 to 0.8x the time
/// (112x112: 0.4x), at 14x14 level or slower (0.8 KB planes: the 7x7 outputs' 1.2x), whose
/// channels follow each other in a few lines the hardware prefetchers do follow.
const FETCH_MIN_PLANE_BYTES: usize = 2048;

/// An NCHW-like kernel.
///
/// # Safety
/// The job's pointers address images of the tensors whose every element at in-tensor
/// coordinates is in bounds, and the caller is the only thread accessing the output rows its
/// units name. (The token `S` proves that the CPU has the kernel set's features.)
pub(super) type PlaneFn<S, X = f32, Y = f32> = unsafe fn(S, &PlaneJob<'_, X, Y>);

/// The kernel an NCHW-like problem runs, its blocking and its column table.
struct PlanePlan<S: 'static, X: 'static, Y: 'static> {
    kernel: PlaneFn<S, X, Y>,
    /// Output rows per unit, and units (row blocks) per channel.
    rows: usize,
    blocks: usize,
    /// Two channels per vector.
    pair: bool,
    cols: Vec<ColLoad>,
}

impl<S: Simd, X, Y> PlanePlan<S, X, Y> {
    /// # Errors
    /// [`Error::OutOfMemory`] for the column table.
    fn new(g: &Geo, set: &PlaneSet<S, X, Y>) -> Result<PlanePlan<S, X, Y>> {
        let fast = match (g.r, g.s) {
            (3, 3) => Some(0),
            (5, 5) => Some(1),
            _ => None,
        }
        .filter(|_| g.sh == g.sw && (1..=2).contains(&g.sh) && g.dh == 1);
        // Rows of at most half a vector: two channels per vector (see `plane_fast`).
        let pair = fast.is_some() && g.ow <= set.lanes / 2 && g.k > 1;
        let window3 = fast == Some(0) && g.dw == 1 && !pair;
        let step = match g.sw {
            2 if window3 => Step::Window3,
            1 if window3 => Step::Window3S1,
            1 => Step::One,
            2 => Step::Two,
            _ => Step::Any,
        };
        // Stride 1 over two vectors' columns per pass where the set has it and the passes
        // cost less: a pass over two vectors took about 7/4 of one over one vector on
        // MobileNet's rows (AVX512-BF16's dot products, Zen 4).
        let wide = set.win3_wide.filter(|_| {
            step == Step::Window3S1
                && 7 * g.ow.div_ceil(2 * set.lanes) < 4 * g.ow.div_ceil(set.lanes)
        });
        let (kernel, rows) = match (wide, fast) {
            (Some(kernel), _) => (kernel, set.plane_rows[0]),
            _ if window3 => (set.plane_win3[g.sw - 1], set.plane_rows[0]),
            (_, Some(f)) if pair => (set.plane_pair[f][g.sh - 1], set.plane_rows[f]),
            (_, Some(f)) => (set.plane_fast[f][g.sh - 1], set.plane_rows[f]),
            (_, None) => (set.plane_generic[step as usize], GENERIC_ROWS),
        };
        let cols = match wide {
            Some(_) => plane_cols(g, 2 * set.lanes, step)?,
            None => plane_cols(g, set.lanes / if pair { 2 } else { 1 }, step)?,
        };
        Ok(PlanePlan {
            kernel,
            rows,
            blocks: g.oh.div_ceil(rows),
            pair,
            cols,
        })
    }

    /// Units of `k` output channels.
    fn units(&self, k: usize) -> usize {
        k.div_ceil(if self.pair { 2 } else { 1 }) * self.blocks
    }
}

/// The NCHW-like frame over x of `X` and y of `Y`, z being the residual (f32 y only) or y
/// itself. Activations that kernels leave to the frame ([`activates_after`]) are applied
/// where y is f32 only: callers with a reduced y have the staged frame apply them.
#[allow(clippy::too_many_arguments)]
pub(super) fn planar<S: Simd, X: Elem<S>, Y: Elem<S>>(
    simd: S,
    ctx: &ExecContext<'_>,
    g: &Geo,
    set: &PlaneSet<S, X, Y>,
    x: &[X],
    w: &[f32],
    out: &SharedOut<'_, Y>,
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
    debug_assert!(Y::as_f32(out).is_some() || (!activates_after(epi) && epi.residual.is_none()));
    let plan = PlanePlan::new(g, set)?;
    let (kernel, rows, blocks, pair, cols) =
        (plan.kernel, plan.rows, plan.blocks, plan.pair, &plan.cols);
    let per_image = plan.units(g.k);
    for_ranges(ctx, g.n * per_image, |start, end| {
        let mut u = start;
        while u < end {
            let n = u / per_image;
            let u1 = end.min((n + 1) * per_image);
            let y = out.as_mut_ptr().wrapping_add(n * g.ys[0]);
            let z = match (Y::as_f32(out), epi.residual) {
                (Some(_), Some(z)) => z.as_ptr().wrapping_add(n * g.ys[0]).cast::<Y>(),
                _ => y.cast_const(),
            };
            let job = PlaneJob::new(
                g,
                (x.as_ptr().wrapping_add(n * g.xs[0]), g.xs[1], g.xs[2]),
                (y, z, g.ys[1], g.ys[2]),
                (g.k, 0),
                (blocks, u - n * per_image, u1 - n * per_image),
                cols,
                w,
                epi,
            );
            // SAFETY: the kernel set matches ctx.isa, which the handle caps at what the CPU
            // has. The images are image n of x, y and z, inside the buffers (checked in
            // `run`), as are the filter and the bias; the column table only enables lanes
            // inside a row, the kernels only read rows inside the image and write the rows of
            // units start .. end, which this range alone covers.
            unsafe { kernel(simd, &job) };
            if let (true, Some(out)) = (activates_after(epi), Y::as_f32(out)) {
                // Units u .. u1 of image n: row blocks of (pairs of) channels.
                let per_unit = if pair { 2 } else { 1 };
                let offsets = (u - n * per_image..u1 - n * per_image).flat_map(|unit| {
                    let (kk, b) = (unit / blocks * per_unit, unit % blocks);
                    let ohs = b * rows..((b + 1) * rows).min(g.oh);
                    (kk..(kk + per_unit).min(g.k)).flat_map(move |k| {
                        ohs.clone().flat_map(move |oh| {
                            (0..g.ow).map(move |ow| {
                                n * g.ys[0] + k * g.ys[1] + oh * g.ys[2] + ow * g.ys[3]
                            })
                        })
                    })
                });
                activate(out, epi.act, offsets);
            }
            u = u1;
        }
    });
    Ok(())
}

/// [`planar`] on bf16 or f16 tensors (see [`super::stage`]): work items of (image, block of
/// input channels), each widening its channels' planes of x into a stage and its outputs'
/// planes of a reduced y (with z where beta reads it) into another, then running the f32
/// kernel over the stages and rounding the outputs into y.
#[allow(clippy::too_many_arguments)]
pub(super) fn planar_staged<S: Simd>(
    simd: S,
    ctx: &ExecContext<'_>,
    g: &Geo,
    set: &KernelSet<S>,
    x: Tensor<'_>,
    w: &[f32],
    y: &YOut<'_>,
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
    let plan = PlanePlan::new(g, &set.plane)?;
    let (h, wd) = (g.h as usize, g.w as usize);
    let (plane_in, plane_out) = (h * wd, g.oh * g.ow);
    let c = g.k / g.mult;
    let staged_y = y.in_place().is_none();
    let per_channel = plane_in + if staged_y { g.mult * plane_out } else { 0 };
    // Input channels per item: what the stage holds, fewer when the threads need items.
    let mut cc = (STAGE_FLOATS / per_channel.max(1)).clamp(1, c.max(1));
    if ctx.threads > 1 {
        let per_image = (ctx.threads * ITEMS_PER_THREAD).div_ceil(g.n.max(1));
        cc = cc.min(c.div_ceil(per_image)).max(1);
    }
    let chunks = c.div_ceil(cc);
    let scratch = || -> Result<(Vec<f32>, Vec<f32>)> {
        let what = "depthwise's stage";
        let ys = if staged_y { cc * g.mult * plane_out } else { 0 };
        Ok((
            crate::alloc::try_vec(cc * plane_in, 0.0, what)?,
            crate::alloc::try_vec(ys, 0.0, what)?,
        ))
    };
    crate::runtime::parallel::for_each_with(ctx, g.n * chunks, scratch, |(xs, ys), item| {
        let (n, c0) = (item / chunks, item % chunks * cc);
        let c1 = (c0 + cc).min(c);
        let chans = (c1 - c0, g.xs[1]);
        runs(
            n * g.xs[0] + c0 * g.xs[1],
            chans,
            (h, g.xs[2]),
            wd,
            |src, at, len| stage_x(x, src, &mut xs[at..][..len], ctx.features),
        );
        let (k0, kn) = (c0 * g.mult, (c1 - c0) * g.mult);
        let y_at = |kk: usize, oh: usize| n * g.ys[0] + (k0 + kk) * g.ys[1] + oh * g.ys[2];
        // The item's outputs as runs of y: [channel][row][column].
        let y_runs = |f: &mut dyn FnMut(usize, usize, usize)| {
            runs(y_at(0, 0), (kn, g.ys[1]), (g.oh, g.ys[2]), g.ow, f)
        };
        let (yp, zp, yc, yrow) = match y.in_place() {
            Some(o) => {
                let yp = o.as_mut_ptr().wrapping_add(y_at(0, 0));
                let zp = epi
                    .residual
                    .map_or(yp.cast_const(), |z| z.as_ptr().wrapping_add(y_at(0, 0)));
                (yp, zp, g.ys[1], g.ys[2])
            }
            None => {
                y_runs(&mut |off, at, len| {
                    // SAFETY: this item alone covers output channels k0 .. k0 + kn of image n.
                    unsafe { stage_z(y, epi, off, &mut ys[at..][..len], ctx.features) }
                });
                (ys.as_mut_ptr(), ys.as_ptr(), plane_out, g.ow)
            }
        };
        let job = PlaneJob::new(
            g,
            (xs.as_ptr(), plane_in, wd),
            (yp, zp, yc, yrow),
            (kn, k0),
            (plan.blocks, 0, plan.units(kn)),
            &plan.cols,
            w,
            epi,
        );
        // SAFETY: as in `planar`: the stage holds planes c0 .. c1 of x (channel stride
        // plane_in, row stride W), the outputs are the stage's kn planes or output channels
        // k0 .. k0 + kn of image n of y, which this item alone covers; the filter and bias
        // pointers start at channel k0 and the job addresses kn channels.
        unsafe { (plan.kernel)(simd, &job) };
        match y.in_place() {
            Some(o) => {
                if activates_after(epi) {
                    let offsets = (0..kn).flat_map(|kk| {
                        (0..g.oh).flat_map(move |oh| {
                            (0..g.ow).map(move |ow| y_at(kk, oh) + ow * g.ys[3])
                        })
                    });
                    activate(o, epi.act, offsets);
                }
            }
            None => {
                let outs = &mut ys[..kn * plane_out];
                if activates_after(epi) {
                    outs.iter_mut().for_each(|v| *v = epi.act.apply(*v));
                }
                y_runs(&mut |off, at, len| {
                    // SAFETY: as for the stage of z above.
                    unsafe { y.store_run(off, &outs[at..][..len], ctx.features) }
                });
            }
        }
    })
}
