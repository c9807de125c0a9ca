//! The NHWC-like frame: vectors across channels, the blocks of channels shifted to x's vector
//! alignment, the work split into output rows of channel blocks.

use std::ptr;

use crate::conv::{EpilogueArgs, ExecContext};
use crate::error::Result;
use crate::runtime::parallel::SharedOut;

use super::filter::ClWeights;
use super::geometry::{
    activate, activates_after, Geo, CL_CHUNK_BLOCKS, ITEMS_PER_THREAD, MIN_BLOCKS_TO_ALIGN,
};
use super::kernels::KernelSet;
#[cfg(doc)]
use super::planar::PlaneFn;
use super::simd::Simd;

/// A run of an NHWC-like kernel: output rows `oh0..oh1` of the channel blocks `b0..b1` (of
/// one vector each). The kernels walk pixels outer and blocks inner, so that consecutive
/// loads read consecutive cache lines: a block's pixels alone lie C elements apart, which
/// for many channels maps them all to a few cache sets.
pub(super) struct ClJob<'a> {
    /// Image n of x.
    pub(super) x: *const f32,
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
    pub(super) y: *mut f32,
    pub(super) z: *const f32,
    pub(super) yrow: isize,
    pub(super) ycol: isize,
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

impl ClJob<'_> {
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
fn align_shift(g: &Geo, x: &[f32], lanes: usize) -> usize {
    let addr = x.as_ptr() as usize;
    let strides_ok = [g.xs[0], g.xs[2], g.xs[3]]
        .iter()
        .all(|s| s.is_multiple_of(lanes));
    if g.mult != 1 || !strides_ok || !addr.is_multiple_of(4) || g.k < MIN_BLOCKS_TO_ALIGN * lanes {
        return 0;
    }
    (addr / 4) % lanes
}

/// An NHWC-like kernel; its safety contract is that of [`PlaneFn`].
pub(super) type ClFn<S> = unsafe fn(S, &ClJob<'_>);

#[allow(clippy::too_many_arguments)]
pub(super) fn channels_last<S: Simd>(
    simd: S,
    ctx: &ExecContext<'_>,
    g: &Geo,
    set: &KernelSet<S>,
    x: &[f32],
    weights: ClWeights<'_>,
    out: &SharedOut<'_>,
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
    let lanes = set.lanes;
    let taps = g.taps();
    let fast = match (g.r, g.s) {
        (3, 3) => Some(0),
        (5, 5) => Some(1),
        _ => None,
    }
    .filter(|_| g.sh == g.sw && (1..=2).contains(&g.sw) && g.dh == 1 && g.dw == 1 && g.mult == 1);
    let kernel = match fast {
        Some(f) => set.cl_fast[f][g.sw - 1],
        None => set.cl_generic,
    };
    let shift = align_shift(g, x, lanes);
    let blocks = (g.k + shift).div_ceil(lanes);
    let chunks = blocks.div_ceil(CL_CHUNK_BLOCKS);
    // Row parts: enough items for the threads.
    let parts = if ctx.threads > 1 {
        (ctx.threads * ITEMS_PER_THREAD)
            .div_ceil(g.n * chunks)
            .min(g.oh)
    } else {
        1
    };
    let rows_per = g.oh.div_ceil(parts);
    let parts = g.oh.div_ceil(rows_per);

    let run_item = |(scratch, idx): &mut (Vec<f32>, Vec<[isize; 16]>), item: usize| {
        let part = item % parts;
        let chunk = (item / parts) % chunks;
        let n = item / parts / chunks;
        let (b0, b1) = (
            chunk * CL_CHUNK_BLOCKS,
            ((chunk + 1) * CL_CHUNK_BLOCKS).min(blocks),
        );
        let (wt, wblock, wstride) = match weights {
            ClWeights::Plain(w) => {
                // Reorder this chunk's weights tap-major per block: [block][tap][lane]
                // (within the capacity reserved for a whole chunk: nothing is allocated).
                scratch.clear();
                scratch.resize((b1 - b0) * taps * lanes, 0.0);
                for (bi, b) in (b0..b1).enumerate() {
                    for lane in 0..lanes {
                        let Some(k) = (b * lanes + lane).checked_sub(shift).filter(|&k| k < g.k)
                        else {
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
        };
        idx.clear();
        if g.mult > 1 {
            idx.extend((b0..b1).map(|b| {
                let k0 = b * lanes;
                std::array::from_fn(|l| ((k0 + l) / g.mult - k0 / g.mult) as isize)
            }));
        }
        let y = out.as_mut_ptr().wrapping_add(n * g.ys[0]);
        let job = ClJob {
            x: x.as_ptr().wrapping_add(n * g.xs[0]),
            xrow: g.xs[2] as isize,
            xcol: g.xs[3] as isize,
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
            oh0: part * rows_per,
            oh1: ((part + 1) * rows_per).min(g.oh),
            k: g.k,
            mult: g.mult,
            shift,
            b0,
            b1,
            y,
            z: epi
                .residual
                .map_or(y.cast_const(), |z| z.as_ptr().wrapping_add(n * g.ys[0])),
            yrow: g.ys[2] as isize,
            ycol: g.ys[3] as isize,
            wt,
            wblock,
            wstride,
            bias: epi.bias.map_or(ptr::null(), |b| b.as_ptr()),
            idx,
            epi,
        };
        // SAFETY: the kernel set matches ctx.isa, which the handle caps at what the CPU has.
        // Each block's lanes are channels below K of image n (input channels below C), the
        // weights hold `taps` rows of them (scratch: zero-filled to whole blocks; prepared:
        // [taps][K]); the kernel reads only in-image pixels and writes rows oh0 .. oh1 of the
        // chunk's channels, which this item alone covers.
        unsafe { kernel(simd, &job) };
        if activates_after(epi) {
            let ks = (b0 * lanes).saturating_sub(shift)..(b1 * lanes - shift).min(g.k);
            let offsets = (job.oh0..job.oh1).flat_map(|oh| {
                let ks = ks.clone();
                (0..g.ow).flat_map(move |ow| {
                    ks.clone()
                        .map(move |k| n * g.ys[0] + k * g.ys[1] + oh * g.ys[2] + ow * g.ys[3])
                })
            });
            activate(out, epi.act, offsets);
        }
    };

    let items = g.n * chunks * parts;
    // Per thread: one chunk's reordered weights (plain ones only) and lane indices.
    let plain = matches!(weights, ClWeights::Plain(_));
    let scratch = || -> Result<(Vec<f32>, Vec<[isize; 16]>)> {
        let what = "depthwise's weight scratch";
        let w = if plain {
            CL_CHUNK_BLOCKS * taps * lanes
        } else {
            0
        };
        let i = if g.mult > 1 { CL_CHUNK_BLOCKS } else { 0 };
        Ok((
            crate::alloc::try_vec_with_capacity(w, what)?,
            crate::alloc::try_vec_with_capacity(i, what)?,
        ))
    };
    crate::runtime::parallel::for_each_with(ctx, items, scratch, run_item)
}
