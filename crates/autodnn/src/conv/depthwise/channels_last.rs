//! The NHWC-like frame: vectors across channels, the blocks of channels shifted to x's vector
//! alignment, the work split into output rows of channel blocks.

use std::ptr;

use crate::conv::{EpilogueArgs, ExecContext};
use crate::error::Result;
use crate::op::Tensor;
use crate::runtime::parallel::SharedOut;

use super::filter::ClWeights;
use super::geometry::{
    activate, activates_after, Geo, CL_CHUNK_BLOCKS, ITEMS_PER_THREAD, MIN_BLOCKS_TO_ALIGN,
};
use super::kernels::KernelSet;
#[cfg(doc)]
use super::planar::PlaneFn;
use super::simd::{Elem, Simd};
use super::stage::{runs, stage_x, stage_z, YOut, STAGE_FLOATS};

/// A run of an NHWC-like kernel: output rows `oh0..oh1` of the channel blocks `b0..b1` (of
/// one vector each). The kernels walk pixels outer and blocks inner, so that consecutive
/// loads read consecutive cache lines: a block's pixels alone lie C elements apart, which
/// for many channels maps them all to a few cache sets.
pub(super) struct ClJob<'a, X = f32, Y = f32> {
    /// Image n of x.
    pub(super) x: *const X,
    pub(super) xrow: isize,
    pub(super) xcol: isize,
    pub(super) h: isize,
    pub(super) w: isize,
    pub(super) pt: isize,
    pub(super) pl: isize,
    pub(super) sh: isize,
    pub(super) sw: isize,
    pub(super) dh: isize,
    pub(super) dw: isize,
    pub(super) r: usize,
    pub(super) s: usize,
    pub(super) ow: usize,
    pub(super) oh0: usize,
    pub(super) oh1: usize,
    /// Output channels.
    k: usize,
    /// Channel multiplier: output channel k reads input channel k / mult.
    pub(super) mult: usize,
    /// Block b covers channels b·L − shift .. b·L − shift + L (see [`align_shift`]).
    shift: usize,
    pub(super) b0: usize,
    pub(super) b1: usize,
    /// Image n of y and of z (the residual, or y itself).
    pub(super) y: *mut Y,
    pub(super) z: *const Y,
    pub(super) yrow: isize,
    pub(super) ycol: isize,
    /// Where accesses with no lane enabled go, inside x's and y's buffers (the image's, or a
    /// stage's): a masked access to an address in an unmapped page costs a microcode assist
    /// on some CPUs, and the job's x and y may point outside their stages. x's is channel
    /// 0's: a block parks at its own first channel, k0 on from it (near the lines it reads).
    pub(super) x_parked: *const X,
    pub(super) y_parked: *mut Y,
    /// Tap t's weights of block b0 + i at `wt + i·wblock + t·wstride`.
    pub(super) wt: *const f32,
    pub(super) wblock: usize,
    pub(super) wstride: usize,
    /// One value per output channel, or null.
    pub(super) bias: *const f32,
    /// With a channel multiplier M > 1, per block of the run: lane l reads input channel
    /// `idx[l]` counted from the block's first output channel's input channel.
    pub(super) idx: &'a [[isize; 16]],
    pub(super) epi: &'a EpilogueArgs<'a>,
}

impl<'a, X, Y> ClJob<'a, X, Y> {
    /// The job of output rows `oh0..oh1` of blocks `b0..b1` (shifted by `shift`): x at
    /// (pointer, row stride, column stride), y and z at (y, z, row stride, column stride),
    /// masked-off accesses parked at `parked` (inside x's and y's buffers), the weights as
    /// [`chunk_weights`] gives them; the geometry and bias from `g` and `epi`.
    #[allow(clippy::too_many_arguments)]
    fn new(
        g: &Geo,
        (x, xrow, xcol): (*const X, isize, isize),
        (y, z, yrow, ycol): (*mut Y, *const Y, isize, isize),
        (x_parked, y_parked): (*const X, *mut Y),
        (oh0, oh1): (usize, usize),
        (shift, b0, b1): (usize, usize, usize),
        (wt, wblock, wstride): (*const f32, usize, usize),
        idx: &'a [[isize; 16]],
        epi: &'a EpilogueArgs<'a>,
    ) -> ClJob<'a, X, Y> {
        ClJob {
            x,
            xrow,
            xcol,
            h: g.h,
            w: g.w,
            pt: g.pt,
            pl: g.pl,
            sh: g.sh as isize,
            sw: g.sw as isize,
            dh: g.dh as isize,
            dw: g.dw as isize,
            r: g.r,
            s: g.s,
            ow: g.ow,
            oh0,
            oh1,
            k: g.k,
            mult: g.mult,
            shift,
            b0,
            b1,
            y,
            z,
            yrow,
            ycol,
            x_parked,
            y_parked,
            wt,
            wblock,
            wstride,
            bias: epi.bias.map_or(ptr::null(), |b| b.as_ptr()),
            idx,
            epi,
        }
    }

    /// Channel block b's first channel (negative for a first block that starts before
    /// channel 0, see [`align_shift`]) and the lanes that hold channels.
    #[inline(always)]
    pub(super) fn block(&self, b: usize, lanes: usize) -> (isize, u32) {
        let k0 = (b * lanes) as isize - self.shift as isize;
        let lo = (-k0).max(0) as u32;
        let hi = (self.k as isize - k0).min(lanes as isize) as u32;
        let upto = |n: u32| if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
        (k0, upto(hi) & !upto(lo))
    }
}

/// Channels by which the NHWC-like blocks are shifted (block b starts at channel
/// b·lanes − shift) so that their vectors of x start on a vector boundary: unaligned loads
/// straddle two cache lines. 0 unless every pixel of x starts at the same offset within a
/// vector (its strides are multiples of `lanes`), M = 1, and there are at least
/// [`MIN_BLOCKS_TO_ALIGN`] blocks (a shift adds one, partly empty).
fn align_shift<X>(g: &Geo, x: &[X], lanes: usize) -> usize {
    let (addr, size) = (x.as_ptr() as usize, size_of::<X>());
    let strides_ok = [g.xs[0], g.xs[2], g.xs[3]]
        .iter()
        .all(|s| s.is_multiple_of(lanes));
    if g.mult != 1 || !strides_ok || !addr.is_multiple_of(size) || g.k < MIN_BLOCKS_TO_ALIGN * lanes
    {
        return 0;
    }
    (addr / size) % lanes
}

/// An NHWC-like kernel; its safety contract is that of [`PlaneFn`].
pub(super) type ClFn<S, X = f32, Y = f32> = unsafe fn(S, &ClJob<'_, X, Y>);

/// The NHWC-like frame over x of `X` and y of `Y`, z being the residual (f32 y only) or y
/// itself. Activations that kernels leave to the frame ([`activates_after`]) are applied
/// where y is f32 only: callers with a reduced y have the staged frame apply them.
#[allow(clippy::too_many_arguments)]
pub(super) fn channels_last<S: Simd, X: Elem<S>, Y: Elem<S>>(
    simd: S,
    ctx: &ExecContext<'_>,
    g: &Geo,
    set: &KernelSet<S, X, Y>,
    x: &[X],
    weights: ClWeights<'_>,
    out: &SharedOut<'_, Y>,
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
    debug_assert!(Y::as_f32(out).is_some() || (!activates_after(epi) && epi.residual.is_none()));
    let lanes = set.plane.lanes;
    let kernel = cl_kernel(g, set);
    let shift = align_shift(g, x, lanes);
    let (blocks, chunks, parts, rows_per) = cl_split(ctx, g, lanes, shift);

    let run_item = |(scratch, idx): &mut Scratch, item: usize| {
        let part = item % parts;
        let chunk = (item / parts) % chunks;
        let n = item / parts / chunks;
        let (b0, b1) = (
            chunk * CL_CHUNK_BLOCKS,
            ((chunk + 1) * CL_CHUNK_BLOCKS).min(blocks),
        );
        let (wt, wblock, wstride) = chunk_weights(g, lanes, shift, weights, (b0, b1), scratch);
        lane_indices(g, lanes, (b0, b1), idx);
        let y = out.as_mut_ptr().wrapping_add(n * g.ys[0]);
        let z = match (Y::as_f32(out), epi.residual) {
            (Some(_), Some(z)) => z.as_ptr().wrapping_add(n * g.ys[0]).cast::<Y>(),
            _ => y.cast_const(),
        };
        let job = ClJob::new(
            g,
            (
                x.as_ptr().wrapping_add(n * g.xs[0]),
                g.xs[2] as isize,
                g.xs[3] as isize,
            ),
            (y, z, g.ys[2] as isize, g.ys[3] as isize),
            (x.as_ptr().wrapping_add(n * g.xs[0]), y),
            (part * rows_per, ((part + 1) * rows_per).min(g.oh)),
            (shift, b0, b1),
            (wt, wblock, wstride),
            idx,
            epi,
        );
        // SAFETY: the kernel set matches ctx.isa, which the handle caps at what the CPU has.
        // Each block's lanes are channels below K of image n (input channels below C), the
        // weights hold `taps` rows of them (scratch: zero-filled to whole blocks; prepared:
        // [taps][K]); the kernel reads only in-image pixels and writes rows oh0 .. oh1 of the
        // chunk's channels, which this item alone covers.
        unsafe { kernel(simd, &job) };
        if let (true, Some(out)) = (activates_after(epi), Y::as_f32(out)) {
            let ks = (b0 * lanes).saturating_sub(shift)..(b1 * lanes - shift).min(g.k);
            // One pixel's channels at a time: plain loops around a plain range (nested
            // flat_maps held their state in a frame that valgrind took for uninitialised).
            for oh in job.oh0..job.oh1 {
                for ow in 0..g.ow {
                    let at = n * g.ys[0] + oh * g.ys[2] + ow * g.ys[3];
                    activate(out, epi.act, ks.clone().map(|k| at + k * g.ys[1]));
                }
            }
        }
    };

    let items = g.n * chunks * parts;
    let scratch = || chunk_scratch(g, lanes, weights);
    crate::runtime::parallel::for_each_with(ctx, items, scratch, run_item)
}

/// Per thread: one chunk's reordered weights (plain ones only) and lane indices.
type Scratch = (Vec<f32>, Vec<[isize; 16]>);

/// # Errors
/// [`crate::error::Error::OutOfMemory`].
fn chunk_scratch(g: &Geo, lanes: usize, weights: ClWeights<'_>) -> Result<Scratch> {
    let what = "depthwise's weight scratch";
    let w = if matches!(weights, ClWeights::Plain(_)) {
        CL_CHUNK_BLOCKS * g.taps() * lanes
    } else {
        0
    };
    let i = if g.mult > 1 { CL_CHUNK_BLOCKS } else { 0 };
    Ok((
        crate::alloc::try_vec_with_capacity(w, what)?,
        crate::alloc::try_vec_with_capacity(i, what)?,
    ))
}

/// The kernel of the problem's geometry.
fn cl_kernel<S: Simd, X, Y>(g: &Geo, set: &KernelSet<S, X, Y>) -> ClFn<S, X, Y> {
    let fast = match (g.r, g.s) {
        (3, 3) => Some(0),
        (5, 5) => Some(1),
        _ => None,
    }
    .filter(|_| g.sh == g.sw && (1..=2).contains(&g.sw) && g.dh == 1 && g.dw == 1 && g.mult == 1);
    match fast {
        Some(f) => set.cl_fast[f][g.sw - 1],
        None => set.cl_generic,
    }
}

/// Channel blocks, chunks of them, row parts (enough items for the threads) and rows per
/// part.
fn cl_split(
    ctx: &ExecContext<'_>,
    g: &Geo,
    lanes: usize,
    shift: usize,
) -> (usize, usize, usize, usize) {
    let blocks = (g.k + shift).div_ceil(lanes);
    let chunks = blocks.div_ceil(CL_CHUNK_BLOCKS);
    let parts = if ctx.threads > 1 {
        (ctx.threads * ITEMS_PER_THREAD)
            .div_ceil((g.n * chunks).max(1))
            .min(g.oh)
    } else {
        1
    };
    let rows_per = g.oh.div_ceil(parts.max(1));
    (blocks, chunks, g.oh.div_ceil(rows_per.max(1)), rows_per)
}

/// The weights of blocks `b0..b1` as the kernels read them: `(tap 0 of block b0, block
/// stride, tap stride)`. Plain ones are reordered tap-major per block, [block][tap][lane],
/// into `scratch` (within the capacity reserved for a whole chunk: nothing is allocated).
fn chunk_weights(
    g: &Geo,
    lanes: usize,
    shift: usize,
    weights: ClWeights<'_>,
    (b0, b1): (usize, usize),
    scratch: &mut Vec<f32>,
) -> (*const f32, usize, usize) {
    let taps = g.taps();
    match weights {
        ClWeights::Plain(w) => {
            scratch.clear();
            scratch.resize((b1 - b0) * taps * lanes, 0.0);
            for (bi, b) in (b0..b1).enumerate() {
                for lane in 0..lanes {
                    let Some(k) = (b * lanes + lane).checked_sub(shift).filter(|&k| k < g.k) else {
                        continue;
                    };
                    let src = &w[k * taps..][..taps];
                    for t in 0..taps {
                        scratch[(bi * taps + t) * lanes + lane] = src[g.tap_index(t)];
                    }
                }
            }
            (scratch.as_ptr(), taps * lanes, lanes)
        }
        // Lanes before channel 0 (a shifted first block) are never read.
        ClWeights::Prepared(p) => (
            p.as_ptr().wrapping_add(b0 * lanes).wrapping_sub(shift),
            lanes,
            g.k,
        ),
    }
}

/// With a channel multiplier M > 1, per block: lane l's input channel counted from the
/// block's first output channel's input channel (see [`ClJob::idx`]).
fn lane_indices(g: &Geo, lanes: usize, (b0, b1): (usize, usize), idx: &mut Vec<[isize; 16]>) {
    idx.clear();
    if g.mult > 1 {
        idx.extend((b0..b1).map(|b| {
            let k0 = b * lanes;
            std::array::from_fn(|l| ((k0 + l) / g.mult - k0 / g.mult) as isize)
        }));
    }
}

/// [`channels_last`] on bf16 or f16 tensors (see [`super::stage`]): the items of the f32 call
/// (blocks unshifted), each run in bands of output rows: the band's input rows of the chunk's
/// channels widened into a stage ([row][column][channel]), its outputs staged too when y is
/// reduced (with z where beta reads it), the f32 kernel run on the stages and the outputs
/// rounded into y.
#[allow(clippy::too_many_arguments)]
pub(super) fn channels_last_staged<S: Simd>(
    simd: S,
    ctx: &ExecContext<'_>,
    g: &Geo,
    set: &KernelSet<S>,
    x: Tensor<'_>,
    weights: ClWeights<'_>,
    y: &YOut<'_>,
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
    let lanes = set.plane.lanes;
    let kernel = cl_kernel(g, set);
    let (blocks, chunks, parts, rows_per) = cl_split(ctx, g, lanes, 0);
    let (h, wd) = (g.h as usize, g.w as usize);
    let c = g.k / g.mult;
    let staged_y = y.in_place().is_none();
    // Widest chunk: output channels, and the input channels they read.
    let ky_max = (CL_CHUNK_BLOCKS * lanes).min(g.k);
    let kx_max = (ky_max.div_ceil(g.mult) + 1).min(c);
    // Output rows per band: the input rows they read (and their outputs, when staged) within
    // the stage, at least one.
    let span = (g.r - 1) * g.dh + 1;
    let in_rows = |rows: usize| ((rows - 1) * g.sh + span).min(h);
    let out_row = if staged_y { g.ow * ky_max } else { 0 };
    let mut band = 1;
    while band < rows_per && in_rows(band + 1) * wd * kx_max + (band + 1) * out_row <= STAGE_FLOATS
    {
        band += 1;
    }
    let (xs_len, ys_len) = (in_rows(band) * wd * kx_max, band * out_row);
    let scratch = || -> Result<(Scratch, Vec<f32>, Vec<f32>)> {
        let what = "depthwise's stage";
        Ok((
            chunk_scratch(g, lanes, weights)?,
            crate::alloc::try_vec(xs_len, 0.0, what)?,
            crate::alloc::try_vec(ys_len, 0.0, what)?,
        ))
    };
    let run_item = |((wsc, idx), xs, ys): &mut (Scratch, Vec<f32>, Vec<f32>), item: usize| {
        let part = item % parts;
        let chunk = (item / parts) % chunks;
        let n = item / parts / chunks;
        let (b0, b1) = (
            chunk * CL_CHUNK_BLOCKS,
            ((chunk + 1) * CL_CHUNK_BLOCKS).min(blocks),
        );
        let (wt, wblock, wstride) = chunk_weights(g, lanes, 0, weights, (b0, b1), wsc);
        lane_indices(g, lanes, (b0, b1), idx);
        // Output channels k0 .. k1 of the chunk, input channels kx0 .. kx1 they read.
        let (k0, k1) = (b0 * lanes, (b1 * lanes).min(g.k));
        let (kx0, kx1) = (k0 / g.mult, (k1 - 1) / g.mult + 1);
        let (cwx, cwy) = (kx1 - kx0, k1 - k0);
        let (oh_start, oh_end) = (part * rows_per, ((part + 1) * rows_per).min(g.oh));
        let mut o0 = oh_start;
        while o0 < oh_end {
            let o1 = (o0 + band).min(oh_end);
            // Input rows the band reads: ih0 .. ih1, inside the image.
            let first = (o0 * g.sh) as isize - g.pt;
            let last = ((o1 - 1) * g.sh + (g.r - 1) * g.dh) as isize - g.pt;
            let ih0 = first.clamp(0, g.h) as usize;
            let ih1 = (last + 1).clamp(0, g.h) as usize;
            let start = n * g.xs[0] + ih0 * g.xs[2] + kx0 * g.xs[1];
            let rows = (ih1.saturating_sub(ih0), g.xs[2]);
            runs(start, rows, (wd, g.xs[3]), cwx, |src, at, len| {
                stage_x(x, src, &mut xs[at..][..len], ctx.features)
            });
            let (xrow, xcol) = ((wd * cwx) as isize, cwx as isize);
            // x at (channel 0, row 0) of the stage's coordinates: the kernels add the
            // channel, row and column offsets of the pixels they read, all inside the stage.
            let xp = xs
                .as_ptr()
                .wrapping_offset(-(kx0 as isize) - ih0 as isize * xrow);
            let y_at = |oh: usize, ow: usize| n * g.ys[0] + oh * g.ys[2] + ow * g.ys[3] + k0;
            // The band's outputs as runs of y: [row][column][channel].
            let y_runs = |f: &mut dyn FnMut(usize, usize, usize)| {
                runs(y_at(o0, 0), (o1 - o0, g.ys[2]), (g.ow, g.ys[3]), cwy, f)
            };
            let (yp, zp, yrow, ycol, y_parked) = match y.in_place() {
                Some(o) => {
                    let yp = o.as_mut_ptr().wrapping_add(n * g.ys[0]);
                    let zp = epi
                        .residual
                        .map_or(yp.cast_const(), |z| z.as_ptr().wrapping_add(n * g.ys[0]));
                    (yp, zp, g.ys[2] as isize, g.ys[3] as isize, yp)
                }
                None => {
                    y_runs(&mut |off, at, len| {
                        // SAFETY: this item alone covers rows oh_start .. oh_end of channels
                        // k0 .. k1 of image n.
                        unsafe { stage_z(y, epi, off, &mut ys[at..][..len], ctx.features) }
                    });
                    let (yrow, ycol) = ((g.ow * cwy) as isize, cwy as isize);
                    let yp = ys
                        .as_mut_ptr()
                        .wrapping_offset(-(k0 as isize) - o0 as isize * yrow);
                    (yp, yp.cast_const(), yrow, ycol, ys.as_mut_ptr())
                }
            };
            let job = ClJob::new(
                g,
                (xp, xrow, xcol),
                (yp, zp, yrow, ycol),
                (xs.as_ptr().wrapping_sub(kx0), y_parked),
                (o0, o1),
                (0, b0, b1),
                (wt, wblock, wstride),
                idx,
                epi,
            );
            // SAFETY: as in `channels_last`, with x's rows ih0 .. ih1 (all the band reads:
            // rows outside the image are never read) of channels kx0 .. kx1 (all the
            // chunk's blocks read: lanes past K are masked) in the stage, and the band's
            // outputs in y (rows o0 .. o1 of the item's) or in the output stage, which the
            // job's pointer and strides address as y's coordinates.
            unsafe { kernel(simd, &job) };
            match y.in_place() {
                Some(o) => {
                    if activates_after(epi) {
                        let offsets = (o0..o1).flat_map(|oh| {
                            (0..g.ow).flat_map(move |ow| (0..cwy).map(move |kk| y_at(oh, ow) + kk))
                        });
                        activate(o, epi.act, offsets);
                    }
                }
                None => {
                    let outs = &mut ys[..(o1 - o0) * g.ow * cwy];
                    if activates_after(epi) {
                        outs.iter_mut().for_each(|v| *v = epi.act.apply(*v));
                    }
                    y_runs(&mut |off, at, len| {
                        // SAFETY: as for the stage of z above.
                        unsafe { y.store_run(off, &outs[at..][..len], ctx.features) }
                    });
                }
            }
            o0 = o1;
        }
    };
    crate::runtime::parallel::for_each_with(ctx, g.n * chunks * parts, scratch, run_item)
}
