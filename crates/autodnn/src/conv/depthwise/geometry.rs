//! What both frames share: their blocking constants, the layout [`Mode`], the problem's
//! geometry in the kernels' terms ([`Geo`]), the split of the work over the threads and the
//! pass applying the activations the kernels leave out.

use crate::runtime::parallel::for_each;

use crate::conv::{Activation, EpilogueArgs, ExecContext};
use crate::desc::{ConvMode, ConvProblem};
use crate::runtime::parallel::SharedOut;

#[cfg(doc)]
use super::kernels::ActV;

/// Work items per thread to aim for, so that uneven items still balance.
pub(super) const ITEMS_PER_THREAD: usize = 4;
/// Channel blocks (of one vector each) per NHWC-like work item: the weights of these blocks are
/// reordered once per item and stay in L1 while the kernel, for each group of outputs, walks
/// all of them.
pub(super) const CL_CHUNK_BLOCKS: usize = 8;
/// Fewest channel blocks for which NHWC-like blocks are shifted to x's vector alignment: the
/// shift adds a block, which unaligned loads cost more than from about 4 blocks on.
pub(super) const MIN_BLOCKS_TO_ALIGN: usize = 4;
/// Output rows per pass of the generic NCHW-like kernel.
pub(super) const GENERIC_ROWS: usize = 4;
/// Outputs per group of the generic NHWC-like kernel.
pub(super) const GENERIC_COLS: usize = 4;
/// Largest R·S of the unrolled kernels (5x5).
pub(super) const MAX_FAST_TAPS: usize = 25;
/// Largest number of input rows one unrolled NCHW-like pass reads.
pub(super) const MAX_FAST_IN_ROWS: usize = 16;

/// How the tensors are laid out, as far as this algorithm cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// x and y unit-stride along W: vectors along output rows.
    Planar,
    /// x and y unit-stride along C: vectors across channels.
    ChannelsLast,
}

pub(super) fn mode_of(p: &ConvProblem) -> std::result::Result<Mode, String> {
    let (xs, ys) = (p.x().strides(), p.y().strides());
    if xs[3] == 1 && ys[3] == 1 {
        Ok(Mode::Planar)
    } else if xs[1] == 1 && ys[1] == 1 {
        Ok(Mode::ChannelsLast)
    } else {
        Err(format!(
            "needs x and y both unit-stride along W (NCHW-like) or both along C (NHWC-like), \
             got x strides {xs:?} and y strides {ys:?} (NCHW order)"
        ))
    }
}

/// Problem geometry in the kernels' terms.
pub(super) struct Geo {
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) mult: usize,
    pub(super) h: isize,
    pub(super) w: isize,
    pub(super) oh: usize,
    pub(super) ow: usize,
    pub(super) r: usize,
    pub(super) s: usize,
    pub(super) sh: usize,
    pub(super) sw: usize,
    pub(super) dh: usize,
    pub(super) dw: usize,
    pub(super) pt: isize,
    pub(super) pl: isize,
    pub(super) xs: [usize; 4],
    pub(super) ys: [usize; 4],
    pub(super) flip: bool,
}

impl Geo {
    pub(super) fn new(p: &ConvProblem) -> Geo {
        let c = p.conv();
        Geo {
            n: p.x().n(),
            k: p.w().k(),
            mult: p.k_per_group(),
            h: p.x().h() as isize,
            w: p.x().w() as isize,
            oh: p.y().h(),
            ow: p.y().w(),
            r: p.w().r(),
            s: p.w().s(),
            sh: c.stride()[0],
            sw: c.stride()[1],
            dh: c.dilation()[0],
            dw: c.dilation()[1],
            pt: c.padding().top as isize,
            pl: c.padding().left as isize,
            xs: p.x().strides(),
            ys: p.y().strides(),
            flip: c.mode() == ConvMode::Convolution,
        }
    }

    pub(super) fn taps(&self) -> usize {
        self.r * self.s
    }

    /// Index in a channel's R·S weights of tap `t` (row-major over r, s) after flipping.
    pub(super) fn tap_index(&self, t: usize) -> usize {
        if self.flip {
            self.taps() - 1 - t
        } else {
            t
        }
    }
}

/// Runs `f` on contiguous ranges covering the units `0..units`, split over the worker threads
/// (one range when there is one thread).
pub(super) fn for_ranges(ctx: &ExecContext<'_>, units: usize, f: impl Fn(usize, usize) + Sync) {
    if ctx.threads <= 1 || units <= 1 {
        f(0, units);
        return;
    }
    let per = units.div_ceil((ctx.threads * ITEMS_PER_THREAD).min(units));
    let items = units.div_ceil(per);
    for_each(ctx, items, |i| f(i * per, ((i + 1) * per).min(units)));
}

/// Whether the activation is applied by [`activate`] rather than in the kernels (see
/// [`ActV`]).
pub(super) fn activates_after(epi: &EpilogueArgs<'_>) -> bool {
    !matches!(
        epi.act,
        Activation::None | Activation::Relu | Activation::Clip { .. }
    )
}

/// Applies the activation to the outputs at `offsets` of y, which the calling work item just
/// wrote (in its cache) and alone accesses.
pub(super) fn activate(out: &SharedOut<'_>, act: Activation, offsets: impl Iterator<Item = usize>) {
    for off in offsets {
        // SAFETY: the caller's work item alone reads and writes these outputs.
        unsafe { out.write(off, act.apply(out.read(off))) };
    }
}
