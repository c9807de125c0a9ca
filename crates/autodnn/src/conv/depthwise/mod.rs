//! `depthwise`: one input channel per group (groups == input channels), as in MobileNet.
//!
//! Computes y\[n, k, oh, ow\] = Σ over r, s of
//! x\[n, k / M, oh·sh − pt + r·dh, ow·sw − pl + s·dw\] · w\[k, 0, r, s\] (r, s flipped in
//! convolution mode), M = K / groups being the channel multiplier (any M ≥ 1).
//!
//! - **Wins** on depthwise problems: each output sums only R·S products of one input plane,
//!   so GEMM-based algorithms have nothing to block and `direct`'s channel-blocked tiles run
//!   with one channel per group (MobileNet's layers: 5 to 20 times faster than `direct`).
//! - **Workspace:** none. **Deterministic:** every output is accumulated by one thread, tap by
//!   tap in (r, s) order, by the same kernel whatever the thread count.
//! - **Declines:** groups ≠ input channels; x and y not both unit-stride along W (NCHW-like)
//!   or both along C (NHWC-like) (`direct` covers these).
//! - **Prepared weights:** for NHWC-like problems the filter reordered tap-major, [R·S][K]
//!   (flipped in convolution mode); NCHW-like problems have nothing to prepare.
//!
//! How, NCHW-like (x and y unit-stride along W): vectors run along output rows. A pass of a
//! kernel computes a block of `rows` output rows × one vector of columns of one channel: the
//! channel's R·S weights sit in registers and each input row is loaded once per kernel column
//! and used for every output row of the block that needs it. Rows of at most half a vector
//! (7x7 images) hold two channels per vector. Stride-2 taps are two loads and a permute; a
//! 3-wide stride-2 window reads its row once for all three taps. Borders are masked loads; a
//! table built once per call holds each column vector's offsets and masks.
//!
//! NHWC-like (x and y unit-stride along C): vectors run across channels, like oneDNN's and
//! onnxruntime's blocked layouts. A kernel computes groups of TR×T outputs; for each group it
//! walks every channel block of its work item, so consecutive loads read consecutive cache
//! lines, and each input pixel of a group is loaded once for all the outputs that need it.
//! The weights of a block are reordered tap-major ([R·S][lanes]) once per work item, or come
//! prepared. When x is not vector-aligned, the blocks start where its vectors are.
//!
//! 3x3 and 5x5 kernels with stride 1 or 2 (and no row dilation; NHWC-like, no dilation and
//! M = 1) have unrolled kernels whose accumulators stay in registers; other geometries run
//! generic kernels with runtime taps. The epilogue (alpha, bias, beta·z, relu or clip) is
//! applied to each vector as it is stored; sigmoid, tanh, gelu and silu (libm, lane by lane)
//! in a pass over each work item's outputs right after its kernel. Masked-off lanes are never
//! given an address outside the tensor's rows (some CPUs run a slow microcode assist for a
//! masked access to an unmapped page), except for partial vectors at the very start or end of
//! a buffer.
//!
//! Kernels are written once over the vector operations of `simd::Simd`, implemented for the
//! crate's capability tokens ([`crate::simd`]): arithmetic is safe on a token, memory access
//! through raw pointers is not. Each instruction set's kernel set is a table of
//! `#[target_feature]` entries that take its token; `run` uses the widest set whose token the
//! usable features make (AVX-512F, then AVX2 + FMA, then portable).

use std::ptr;

use rayon::prelude::*;

use crate::conv::{Activation, AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext};
use crate::desc::{ConvMode, ConvProblem};
use crate::error::{Error, Result};
use crate::runtime::parallel::SharedOut;

use crate::simd::Scalar;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512, Token};
use simd::Simd;

/// The depthwise convolution.
pub struct Depthwise;

/// Work items per thread to aim for, so that uneven items still balance.
const ITEMS_PER_THREAD: usize = 4;
/// Channel blocks (of one vector each) per NHWC-like work item: the weights of these blocks are
/// reordered once per item and stay in L1 while the kernel, for each group of outputs, walks
/// all of them.
const CL_CHUNK_BLOCKS: usize = 8;
/// Fewest channel blocks for which NHWC-like blocks are shifted to x's vector alignment: the
/// shift adds a block, which unaligned loads cost more than from about 4 blocks on.
const MIN_BLOCKS_TO_ALIGN: usize = 4;
/// Output rows per pass of the generic NCHW-like kernel.
const GENERIC_ROWS: usize = 4;
/// Outputs per group of the generic NHWC-like kernel.
const GENERIC_COLS: usize = 4;
/// Largest R·S of the unrolled kernels (5x5).
const MAX_FAST_TAPS: usize = 25;
/// Largest number of input rows one unrolled NCHW-like pass reads.
const MAX_FAST_IN_ROWS: usize = 16;

/// How the tensors are laid out, as far as this algorithm cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// x and y unit-stride along W: vectors along output rows.
    Planar,
    /// x and y unit-stride along C: vectors across channels.
    ChannelsLast,
}

fn mode_of(p: &ConvProblem) -> std::result::Result<Mode, String> {
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
struct Geo {
    n: usize,
    k: usize,
    mult: usize,
    h: isize,
    w: isize,
    oh: usize,
    ow: usize,
    r: usize,
    s: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    pt: isize,
    pl: isize,
    xs: [usize; 4],
    ys: [usize; 4],
    flip: bool,
}

impl Geo {
    fn new(p: &ConvProblem) -> Geo {
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

    fn taps(&self) -> usize {
        self.r * self.s
    }

    /// Index in a channel's R·S weights of tap `t` (row-major over r, s) after flipping.
    fn tap_index(&self, t: usize) -> usize {
        if self.flip {
            self.taps() - 1 - t
        } else {
            t
        }
    }
}

impl ConvAlgorithm for Depthwise {
    fn name(&self) -> &'static str {
        "depthwise"
    }

    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        if p.c_per_group() != 1 {
            return Err(format!(
                "needs groups == input channels (one input channel per group), got {} groups \
                 for {} input channels",
                p.groups(),
                p.x().c()
            ));
        }
        mode_of(p).map(|_| ())
    }

    fn workspace_bytes(&self, _: &ConvProblem) -> usize {
        0
    }

    fn deterministic(&self) -> bool {
        true
    }

    fn prepare(
        &self,
        _ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        let mode = mode_of(problem).map_err(|reason| self.declined(reason))?;
        if mode == Mode::Planar {
            return Ok(None);
        }
        let g = Geo::new(problem);
        let (k, taps) = (g.k, g.taps());
        let mut out =
            crate::alloc::try_vec_with_capacity(k * taps, "depthwise's prepared weights")?;
        for t in 0..taps {
            let ti = g.tap_index(t);
            out.extend((0..k).map(|kk| w[kk * taps + ti]));
        }
        Ok(Some(out))
    }

    fn run(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        _workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let mode = mode_of(problem).map_err(|reason| self.declined(reason))?;
        let g = Geo::new(problem);
        let weights = match (mode, w) {
            (_, AlgoWeights::Plain(w)) => ClWeights::Plain(w),
            (Mode::ChannelsLast, AlgoWeights::Prepared(w)) => ClWeights::Prepared(w),
            (Mode::Planar, AlgoWeights::Prepared(_)) => {
                return Err(self.declined("has no prepared form of an NCHW-like filter".into()))
            }
        };
        // The kernels address memory through raw pointers: check once that every coordinate
        // they may touch lies inside the buffers.
        let wlen = g.k * g.taps();
        let w_ok = match weights {
            ClWeights::Plain(w) | ClWeights::Prepared(w) => w.len() >= wlen,
        };
        assert!(
            x.len() >= problem.x().span()
                && y.len() >= problem.y().span()
                && w_ok
                && epi.bias.is_none_or(|b| b.len() >= g.k)
                && epi.residual.is_none_or(|z| z.len() >= problem.y().span()),
            "depthwise: buffers shorter than the problem (the handle checks them)"
        );
        let out = SharedOut::new(y);
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(s) = Avx512::new(ctx.features) {
                return run_set(s, &avx512_set::SET, ctx, mode, &g, x, weights, &out, epi);
            }
            if let Some(s) = Avx2::new(ctx.features) {
                return run_set(s, &avx2_set::SET, ctx, mode, &g, x, weights, &out, epi);
            }
        }
        run_set(
            Scalar::new(),
            &portable_set::SET,
            ctx,
            mode,
            &g,
            x,
            weights,
            &out,
            epi,
        )
    }
}

/// Runs the frame of `mode` with the kernel set of token `simd`.
#[allow(clippy::too_many_arguments)]
fn run_set<S: Simd>(
    simd: S,
    set: &KernelSet<S>,
    ctx: &ExecContext<'_>,
    mode: Mode,
    g: &Geo,
    x: &[f32],
    weights: ClWeights<'_>,
    out: &SharedOut<'_>,
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
    match mode {
        Mode::Planar => planar(simd, ctx, g, set, x, weights.data(), out, epi),
        Mode::ChannelsLast => channels_last(simd, ctx, g, set, x, weights, out, epi),
    }
}

impl Depthwise {
    fn declined(&self, reason: String) -> Error {
        Error::Declined {
            algo: self.name().into(),
            reason,
        }
    }
}

/// The filter as the NHWC-like frame receives it.
#[derive(Clone, Copy)]
enum ClWeights<'a> {
    /// [K][R·S], unflipped.
    Plain(&'a [f32]),
    /// [R·S][K], flipped (see [`Depthwise::prepare`]).
    Prepared(&'a [f32]),
}

impl<'a> ClWeights<'a> {
    fn data(self) -> &'a [f32] {
        match self {
            ClWeights::Plain(w) | ClWeights::Prepared(w) => w,
        }
    }
}

/// Runs `f` on contiguous ranges covering the units `0..units`, split over the worker threads
/// (one range when there is one thread).
fn for_ranges(ctx: &ExecContext<'_>, units: usize, f: impl Fn(usize, usize) + Sync) {
    if ctx.threads <= 1 || units <= 1 {
        f(0, units);
        return;
    }
    let per = units.div_ceil((ctx.threads * ITEMS_PER_THREAD).min(units));
    let items = units.div_ceil(per);
    ctx.pool.install(|| {
        (0..items)
            .into_par_iter()
            .for_each(|i| f(i * per, ((i + 1) * per).min(units)))
    });
}

/// Whether the activation is applied by [`activate`] rather than in the kernels (see
/// [`ActV`]).
fn activates_after(epi: &EpilogueArgs<'_>) -> bool {
    !matches!(
        epi.act,
        Activation::None | Activation::Relu | Activation::Clip { .. }
    )
}

/// Applies the activation to the outputs at `offsets` of y, which the calling work item just
/// wrote (in its cache) and alone accesses.
fn activate(out: &SharedOut<'_>, act: Activation, offsets: impl Iterator<Item = usize>) {
    for off in offsets {
        // SAFETY: the caller's work item alone reads and writes these outputs.
        unsafe { out.write(off, act.apply(out.read(off))) };
    }
}

// ---------------------------------------------------------------------------------------------
// NCHW-like frame

/// One vector of a column table: its offset along the row and the lanes (or, for stride-2
/// loads, the elements of the two vectors read) that lie inside the row.
#[derive(Debug, Clone, Copy, Default)]
struct ColLoad {
    off: isize,
    m0: u32,
    m1: u32,
}

/// How a tap's vector of inputs is read from a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
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
struct PlaneJob<'a> {
    /// Image n of x.
    x: *const f32,
    /// x's channel and row strides.
    xc: isize,
    xrow: isize,
    /// Output channels, and the multiplier: output channel k reads input channel k / mult.
    k: usize,
    mult: usize,
    /// Input rows.
    h: isize,
    pt: isize,
    sh: isize,
    sw: isize,
    dh: isize,
    r: usize,
    s: usize,
    /// Image n of y, and of z: the residual, or y itself (its prior contents).
    y: *mut f32,
    z: *const f32,
    /// y's (and z's) channel and row strides.
    yc: isize,
    yrow: isize,
    /// Output rows.
    oh: usize,
    /// Row blocks per channel.
    blocks: usize,
    u0: usize,
    u1: usize,
    cols: &'a [ColLoad],
    /// Every channel's R·S weights, channel after channel.
    w: *const f32,
    flip: bool,
    /// One value per output channel, or null.
    bias: *const f32,
    epi: &'a EpilogueArgs<'a>,
}

impl PlaneJob<'_> {
    /// Weight of tap `t` (row-major over r, s) of channel `k`, flipped in convolution mode.
    ///
    /// # Safety
    /// `t < r·s`, k < K.
    #[inline(always)]
    unsafe fn tap(&self, k: usize, t: usize) -> f32 {
        let taps = self.r * self.s;
        let i = if self.flip { taps - 1 - t } else { t };
        // SAFETY: k·taps + i < K·taps, the filter's length (the caller's contract).
        unsafe { *self.w.add(k * taps + i) }
    }

    /// Channel k's bias (0 without one).
    ///
    /// # Safety
    /// k < K.
    #[inline(always)]
    unsafe fn bias(&self, k: usize) -> f32 {
        if self.bias.is_null() {
            0.0
        } else {
            // SAFETY: the bias holds K values (the caller's contract).
            unsafe { *self.bias.add(k) }
        }
    }
}

/// An NCHW-like kernel.
///
/// # Safety
/// The job's pointers address images of the tensors whose every element at in-tensor
/// coordinates is in bounds, and the caller is the only thread accessing the output rows its
/// units name. (The token `S` proves that the CPU has the kernel set's features.)
type PlaneFn<S> = unsafe fn(S, &PlaneJob<'_>);

#[allow(clippy::too_many_arguments)]
fn planar<S: Simd>(
    simd: S,
    ctx: &ExecContext<'_>,
    g: &Geo,
    set: &KernelSet<S>,
    x: &[f32],
    w: &[f32],
    out: &SharedOut<'_>,
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
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
    let (kernel, rows) = match fast {
        _ if window3 => (set.plane_win3[g.sw - 1], set.plane_rows[0]),
        Some(f) if pair => (set.plane_pair[f][g.sh - 1], set.plane_rows[f]),
        Some(f) => (set.plane_fast[f][g.sh - 1], set.plane_rows[f]),
        None => (set.plane_generic[step as usize], GENERIC_ROWS),
    };
    let cols = plane_cols(g, set.lanes / if pair { 2 } else { 1 }, step)?;
    let blocks = g.oh.div_ceil(rows);
    let per_image = g.k.div_ceil(if pair { 2 } else { 1 }) * blocks;
    for_ranges(ctx, g.n * per_image, |start, end| {
        let mut u = start;
        while u < end {
            let n = u / per_image;
            let u1 = end.min((n + 1) * per_image);
            let y = out.as_mut_ptr().wrapping_add(n * g.ys[0]);
            let job = PlaneJob {
                x: x.as_ptr().wrapping_add(n * g.xs[0]),
                xc: g.xs[1] as isize,
                xrow: g.xs[2] as isize,
                k: g.k,
                mult: g.mult,
                h: g.h,
                pt: g.pt,
                sh: g.sh as isize,
                sw: g.sw as isize,
                dh: g.dh as isize,
                r: g.r,
                s: g.s,
                y,
                z: epi
                    .residual
                    .map_or(y.cast_const(), |z| z.as_ptr().wrapping_add(n * g.ys[0])),
                yc: g.ys[1] as isize,
                yrow: g.ys[2] as isize,
                oh: g.oh,
                blocks,
                u0: u - n * per_image,
                u1: u1 - n * per_image,
                cols: &cols,
                w: w.as_ptr(),
                flip: g.flip,
                bias: epi.bias.map_or(ptr::null(), |b| b.as_ptr()),
                epi,
            };
            // SAFETY: the kernel set matches ctx.isa, which the handle caps at what the CPU
            // has. The images are image n of x, y and z, inside the buffers (checked in
            // `run`), as are the filter and the bias; the column table only enables lanes
            // inside a row, the kernels only read rows inside the image and write the rows of
            // units start .. end, which this range alone covers.
            unsafe { kernel(simd, &job) };
            if activates_after(epi) {
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

// ---------------------------------------------------------------------------------------------
// NHWC-like frame

/// A run of an NHWC-like kernel: output rows `oh0..oh1` of the channel blocks `b0..b1` (of
/// one vector each). The kernels walk pixels outer and blocks inner, so that consecutive
/// loads read consecutive cache lines: a block's pixels alone lie C elements apart, which
/// for many channels maps them all to a few cache sets.
struct ClJob<'a> {
    /// Image n of x.
    x: *const f32,
    xrow: isize,
    xcol: isize,
    h: isize,
    w: isize,
    pt: isize,
    pl: isize,
    sh: isize,
    sw: isize,
    dh: isize,
    dw: isize,
    r: usize,
    s: usize,
    ow: usize,
    oh0: usize,
    oh1: usize,
    /// Output channels.
    k: usize,
    /// Channel multiplier: output channel k reads input channel k / mult.
    mult: usize,
    /// Block b covers channels b·L − shift .. b·L − shift + L (see [`align_shift`]).
    shift: usize,
    b0: usize,
    b1: usize,
    /// Image n of y and of z (the residual, or y itself).
    y: *mut f32,
    z: *const f32,
    yrow: isize,
    ycol: isize,
    /// Tap t's weights of block b0 + i at `wt + i·wblock + t·wstride`.
    wt: *const f32,
    wblock: usize,
    wstride: usize,
    /// One value per output channel, or null.
    bias: *const f32,
    /// With a channel multiplier M > 1, per block of the run: lane l reads input channel
    /// `idx[l]` counted from the block's first output channel's input channel.
    idx: &'a [[isize; 16]],
    epi: &'a EpilogueArgs<'a>,
}

impl ClJob<'_> {
    /// Channel block b's first channel (negative for a first block that starts before
    /// channel 0, see [`align_shift`]) and the lanes that hold channels.
    #[inline(always)]
    fn block(&self, b: usize, lanes: usize) -> (isize, u32) {
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
type ClFn<S> = unsafe fn(S, &ClJob<'_>);

#[allow(clippy::too_many_arguments)]
fn channels_last<S: Simd>(
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

// ---------------------------------------------------------------------------------------------
// Kernels: written once over the `Simd` operations, compiled per instruction set.

/// The epilogue, splatted for one kernel call.
struct EpiV<S: Simd> {
    plain: bool,
    scale: bool,
    alpha: S::V,
    bias: bool,
    read_z: bool,
    beta: S::V,
    act: ActV<S>,
}

/// The activations kernels apply. The others (sigmoid, tanh, gelu, silu) call libm lane by
/// lane, and calls inside a kernel make the compiler keep its accumulators in memory: the
/// frames apply them in a pass over each work item's outputs ([`activate`]) just after its
/// kernel, which then stores the linear part only.
enum ActV<S: Simd> {
    None,
    Relu(S::V),
    Clip(S::V, S::V),
}

impl<S: Simd> EpiV<S> {
    #[inline(always)]
    fn new(simd: S, e: &EpilogueArgs<'_>) -> EpiV<S> {
        let linear = !matches!(e.act, Activation::Relu | Activation::Clip { .. });
        EpiV {
            plain: e.alpha == 1.0 && e.beta == 0.0 && e.bias.is_none() && linear,
            scale: e.alpha != 1.0,
            alpha: simd.splat(e.alpha),
            bias: e.bias.is_some(),
            read_z: e.beta != 0.0,
            beta: simd.splat(e.beta),
            act: match e.act {
                Activation::Relu => ActV::Relu(simd.zero()),
                Activation::Clip { lo, hi } => ActV::Clip(simd.splat(lo), simd.splat(hi)),
                _ => ActV::None,
            },
        }
    }
}

/// act(alpha · acc + bias + beta · z), in the order and rounding of [`EpilogueArgs::value`]
/// (without the activations [`activate`] applies); `z` is called only when beta ≠ 0.
#[inline(always)]
fn finish<S: Simd>(simd: S, e: &EpiV<S>, acc: S::V, bias: S::V, z: impl FnOnce() -> S::V) -> S::V {
    let mut v = acc;
    if !e.plain {
        if e.scale {
            v = simd.mul(e.alpha, v);
        }
        if e.bias {
            v = simd.add(v, bias);
        }
        if e.read_z {
            v = simd.add(v, simd.mul(e.beta, z()));
        }
        v = match e.act {
            ActV::None => v,
            ActV::Relu(zero) => simd.max(v, zero),
            ActV::Clip(lo, hi) => simd.min(simd.max(v, lo), hi),
        };
    }
    v
}

/// Stores the epilogue's value of `acc` at `y` for the lanes of `m` (z read at `z`).
///
/// # Safety
/// The lanes of `m` at `y` (and at `z` when beta ≠ 0) are in bounds and accessed by no other
/// thread.
#[inline(always)]
unsafe fn store_out<S: Simd>(
    simd: S,
    e: &EpiV<S>,
    acc: S::V,
    bias: S::V,
    y: *mut f32,
    z: *const f32,
    m: u32,
) {
    // SAFETY: the caller's contract.
    unsafe { simd.store(y, finish(simd, e, acc, bias, || simd.load(z, m)), m) }
}

/// Repeats `body` with `i` = 0, 1, ... while `i < n`, `n` a constant after monomorphisation
/// of at most `max` (8, 12 or 16): unrolls loops whose accumulators must stay in registers, which
/// the compiler would otherwise keep as loops over arrays in memory.
macro_rules! unroll {
    (8: $i:ident < $n:expr, $body:block) => {
        unroll!(@ 8, $i, $n, $body, 0 1 2 3 4 5 6 7)
    };
    (12: $i:ident < $n:expr, $body:block) => {
        unroll!(@ 12, $i, $n, $body, 0 1 2 3 4 5 6 7 8 9 10 11)
    };
    (16: $i:ident < $n:expr, $body:block) => {
        unroll!(@ 16, $i, $n, $body, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@ $max:literal, $i:ident, $n:expr, $body:block, $($k:literal)*) => {{
        const { assert!($n <= $max) };
        $(
            if $k < $n {
                let $i: usize = $k;
                $body
            }
        )*
    }};
}

/// The unrolled NCHW-like kernel: R×C taps, row stride SH, lane step STEP (1 or 2; 3 and 4:
/// stride 2 and 1 with the 3 taps of a row read at once, [`Step::Window3`] and
/// [`Step::Window3S1`]), ROWS output rows per block (no row dilation). With PAIR, rows are at most half a vector long and
/// each vector holds a row of two channels (lanes below L/2 channel k, the others k + 1): the
/// column table then describes half vectors, and unit u = pair·blocks + b.
///
/// # Safety
/// That of [`PlaneFn`], and `a.r == R`, `a.s == C`, the units' blocks of ROWS rows.
#[inline(always)]
unsafe fn plane_fast<
    S: Simd,
    const R: usize,
    const C: usize,
    const SH: usize,
    const STEP: usize,
    const ROWS: usize,
    const PAIR: bool,
>(
    simd: S,
    a: &PlaneJob<'_>,
) {
    const {
        assert!(R * C <= MAX_FAST_TAPS && (ROWS - 1) * SH + R <= MAX_FAST_IN_ROWS);
        assert!(STEP < 3 || (C == 3 && !PAIR));
    }
    debug_assert!(a.r == R && a.s == C && a.blocks == a.oh.div_ceil(ROWS));
    let in_rows = (ROWS - 1) * SH + R;
    let half = S::L / 2;
    // SAFETY: the caller's contract (the token proves the CPU has S's features); rows are
    // read only inside the image, columns only where the table enables them; outputs go to
    // the units' rows.
    unsafe {
        let epi = EpiV::new(simd, a.epi);
        let mut u = a.u0;
        while u < a.u1 {
            let (b0, b1) = (u % a.blocks, a.blocks.min(u % a.blocks + a.u1 - u));
            let k = if PAIR {
                2 * (u / a.blocks)
            } else {
                u / a.blocks
            };
            u += b1 - b0;
            // The pair's second channel, or (at an odd end) k again with its lanes unused.
            let (k1, hi_on) = if PAIR && k + 1 < a.k {
                (k + 1, u32::MAX)
            } else {
                (k, 0)
            };
            // Lanes of both halves from a half-vector mask.
            let both = |m: u32| if PAIR { m | (m << half & hi_on) } else { m };
            let xk = a.x.wrapping_offset((k / a.mult) as isize * a.xc);
            let xk1 = a.x.wrapping_offset((k1 / a.mult) as isize * a.xc);
            let (yk, yk1) = (
                a.y.wrapping_offset(k as isize * a.yc),
                a.y.wrapping_offset(k1 as isize * a.yc),
            );
            let (zk, zk1) = (
                a.z.wrapping_offset(k as isize * a.yc),
                a.z.wrapping_offset(k1 as isize * a.yc),
            );
            let mut bias = simd.splat(a.bias(k));
            let mut wv = [simd.zero(); MAX_FAST_TAPS];
            for (t, v) in wv.iter_mut().enumerate().take(R * C) {
                *v = simd.splat(a.tap(k, t));
                if PAIR {
                    *v = simd.blend_hi(*v, simd.splat(a.tap(k1, t)));
                }
            }
            if PAIR {
                bias = simd.blend_hi(bias, simd.splat(a.bias(k1)));
            }
            for b in b0..b1 {
                let oh0 = b * ROWS;
                let nrows = ROWS.min(a.oh - oh0);
                let ih0 = (oh0 * SH) as isize - a.pt;
                // Rows outside the image (or needed by no written output) read nothing: their
                // loads have an empty mask. Masks rather than branches keep the accumulators
                // in registers; a bit set rather than arrays avoids stores the loads wait for.
                let mut valid = 0u32;
                for d in 0..in_rows.min((nrows - 1) * SH + R) {
                    if (0..a.h).contains(&(ih0 + d as isize)) {
                        valid |= 1 << d;
                    }
                }
                let row0 = oh0 as isize * a.yrow;
                // The column loop, for blocks at the image's top or bottom edge (EDGE: row
                // masks) or inside it (all rows read, masks straight from the table).
                macro_rules! columns {
                    ($edge:expr) => {
                        for col in a.cols.chunks_exact(C + 1) {
                            let mut acc = [simd.zero(); ROWS];
                            unroll!(16: d < (ROWS - 1) * SH + R, {
                                let rm = if $edge {
                                    (valid >> d & 1).wrapping_neg()
                                } else {
                                    u32::MAX
                                };
                                // Rows outside the image point at the plane: a masked access
                                // to an address in an unmapped page costs a microcode assist
                                // on some CPUs.
                                let roff = if rm != 0 { (ih0 + d as isize) * a.xrow } else { 0 };
                                let row = xk.wrapping_offset(roff);
                                let row1 = xk1.wrapping_offset(roff);
                                let window = if STEP >= 3 {
                                    let ld = col[1];
                                    let raw = (ld.m0 as u64 | (ld.m1 as u64) << 32)
                                        & (rm as u64 | (rm as u64) << 32);
                                    let p = row.wrapping_offset(ld.off);
                                    if STEP == 3 {
                                        simd.windows3(p, raw)
                                    } else {
                                        simd.windows3_s1(p, raw as u32)
                                    }
                                } else {
                                    [simd.zero(); 3]
                                };
                                for s in 0..C {
                                    let ld = col[1 + s];
                                    let p = row.wrapping_offset(ld.off);
                                    let p1 = row1.wrapping_offset(ld.off);
                                    let xv = match (PAIR, STEP) {
                                        (false, 3..) => window[s],
                                        (false, 1) => simd.load(p, ld.m0 & rm),
                                        (false, _) => simd.load_step2(p, ld.m0 & rm, ld.m1 & rm),
                                        (true, 1) => simd.load_pair(p, p1, both(ld.m0 & rm)),
                                        (true, _) => {
                                            let em = (ld.m0 | ld.m1 << half) & rm;
                                            simd.load_step2_pair(p, p1, em)
                                        }
                                    };
                                    for (i, acc) in acc.iter_mut().enumerate() {
                                        if d >= i * SH && d - i * SH < R {
                                            *acc = simd.fma(wv[(d - i * SH) * C + s], xv, *acc);
                                        }
                                    }
                                }
                                for acc in acc.iter_mut() {
                                    *acc = simd.pin(*acc);
                                }
                            });
                            for acc in acc.iter_mut() {
                                *acc = simd.pin(*acc);
                            }
                            let out = col[0];
                            let m = both(out.m0);
                            // Rows past the last are stored with an empty mask rather than
                            // skipped: a branch would let the compiler sink their sums into
                            // it and spill the loads they share.
                            unroll!(8: i < ROWS, {
                                let (m, off) = if i < nrows {
                                    (m, row0 + i as isize * a.yrow + out.off)
                                } else {
                                    (0, 0)
                                };
                                let (y, z) = (yk.wrapping_offset(off), zk.wrapping_offset(off));
                                if PAIR {
                                    let y1 = yk1.wrapping_offset(off);
                                    let z1 = zk1.wrapping_offset(off);
                                    let v = finish(simd, &epi, acc[i], bias, || simd.load_pair(z, z1, m));
                                    simd.store_pair(y, y1, v, m);
                                } else {
                                    store_out(simd, &epi, acc[i], bias, y, z, m);
                                }
                            });
                        }
                    };
                }
                if valid == (1u32 << in_rows) - 1 {
                    columns!(false);
                } else {
                    columns!(true);
                }
            }
        }
    }
}

/// The generic NCHW-like kernel: any taps, strides and dilations; GENERIC_ROWS output rows
/// per block; lane step 1, 2 or any (STEP = 0).
///
/// # Safety
/// That of [`PlaneFn`], and the units' blocks of GENERIC_ROWS rows.
#[inline(always)]
unsafe fn plane_generic<S: Simd, const STEP: usize>(simd: S, a: &PlaneJob<'_>) {
    debug_assert!(a.blocks == a.oh.div_ceil(GENERIC_ROWS));
    // SAFETY: as in `plane_fast`.
    unsafe {
        let epi = EpiV::new(simd, a.epi);
        let mut u = a.u0;
        while u < a.u1 {
            let k = u / a.blocks;
            let (b0, b1) = (u % a.blocks, a.blocks.min(u % a.blocks + a.u1 - u));
            u += b1 - b0;
            let xk = a.x.wrapping_offset((k / a.mult) as isize * a.xc);
            let yk = a.y.wrapping_offset(k as isize * a.yc);
            let zk = a.z.wrapping_offset(k as isize * a.yc);
            let bias = simd.splat(a.bias(k));
            for b in b0..b1 {
                let oh0 = b * GENERIC_ROWS;
                let nrows = GENERIC_ROWS.min(a.oh - oh0);
                let row0 = oh0 as isize * a.yrow;
                for col in a.cols.chunks_exact(a.s + 1) {
                    let mut acc = [simd.zero(); GENERIC_ROWS];
                    for r in 0..a.r {
                        let ih0 = (oh0 * a.sh as usize) as isize - a.pt + r as isize * a.dh;
                        for s in 0..a.s {
                            let wv = simd.splat(a.tap(k, r * a.s + s));
                            let ld = col[1 + s];
                            for (i, acc) in acc.iter_mut().enumerate() {
                                let ih = ih0 + i as isize * a.sh;
                                let rm = if i < nrows && (0..a.h).contains(&ih) {
                                    u32::MAX
                                } else {
                                    0
                                };
                                let p = if rm != 0 {
                                    xk.wrapping_offset(ih * a.xrow + ld.off)
                                } else {
                                    xk
                                };
                                let xv = match STEP {
                                    1 => simd.load(p, ld.m0 & rm),
                                    2 => simd.load_step2(p, ld.m0 & rm, ld.m1 & rm),
                                    _ => simd.load_strided(p, a.sw, ld.m0 & rm),
                                };
                                *acc = simd.fma(wv, xv, *acc);
                            }
                        }
                    }
                    let out = col[0];
                    for (i, acc) in acc.iter().enumerate() {
                        if i < nrows {
                            let off = row0 + i as isize * a.yrow + out.off;
                            let (y, z) = (yk.wrapping_offset(off), zk.wrapping_offset(off));
                            store_out(simd, &epi, *acc, bias, y, z, out.m0);
                        }
                    }
                }
            }
        }
    }
}

/// The unrolled NHWC-like kernel: R×C taps, stride SW (rows and columns), a group of TR×T
/// outputs per block (no dilation, M = 1). Each input pixel of the group is loaded once and
/// used for every output of the group that needs it; several rows per group cut the reloads
/// of input rows, which do not stay in L1 between output rows (3 rows of W·C elements are
/// more than L1 holds for most layers).
///
/// # Safety
/// That of [`ClFn`], and `a.r == R`, `a.s == C`.
#[inline(always)]
unsafe fn cl_fast<
    S: Simd,
    const R: usize,
    const C: usize,
    const SW: usize,
    const TR: usize,
    const T: usize,
>(
    simd: S,
    a: &ClJob<'_>,
) {
    const {
        assert!(R * C <= MAX_FAST_TAPS && TR * T <= 16);
        assert!((TR - 1) * SW + R <= 8 && (T - 1) * SW + C <= 12);
    }
    debug_assert!(a.r == R && a.s == C && a.mult == 1 && a.sh == SW as isize);
    let in_rows = (TR - 1) * SW + R;
    // SAFETY: the caller's contract (the token proves the CPU has S's features); pixels are
    // read only inside the image, for each block's lanes; outputs go to the job's rows and
    // blocks.
    unsafe {
        let epi = EpiV::new(simd, a.epi);
        let mut oh0 = a.oh0;
        while oh0 < a.oh1 {
            let nrows = TR.min(a.oh1 - oh0);
            // Pixels outside the image read nothing: their loads have an empty mask. Masks
            // rather than branches keep the accumulators in registers; bit sets rather than
            // arrays avoid stores that the loads would wait for.
            let ih0 = (oh0 * SW) as isize - a.pt;
            let mut vrows = 0u32;
            for d in 0..in_rows.min((nrows - 1) * SW + R) {
                if (0..a.h).contains(&(ih0 + d as isize)) {
                    vrows |= 1 << d;
                }
            }
            let mut ow0 = 0;
            while ow0 < a.ow {
                let nt = T.min(a.ow - ow0);
                let span = (nt - 1) * SW + C;
                let iw0 = (ow0 * SW) as isize - a.pl;
                // Columns of the group inside the image (and needed by a written output).
                let mut vcols = 0u32;
                for e in 0..span {
                    if (0..a.w).contains(&(iw0 + e as isize)) {
                        vcols |= 1 << e;
                    }
                }
                for b in a.b0..a.b1 {
                    let (k0, m) = a.block(b, S::L);
                    let wb = a.wt.wrapping_add((b - a.b0) * a.wblock);
                    let mut wv = [simd.zero(); MAX_FAST_TAPS];
                    for (t, v) in wv.iter_mut().enumerate().take(R * C) {
                        *v = simd.load(wb.wrapping_add(t * a.wstride), m);
                    }
                    let bias = if a.bias.is_null() {
                        simd.zero()
                    } else {
                        simd.load(a.bias.wrapping_offset(k0), m)
                    };
                    let xb = a.x.wrapping_offset(k0);
                    let mut acc = [[simd.zero(); T]; TR];
                    unroll!(8: d < (TR - 1) * SW + R, {
                        let rm = (vrows >> d & 1).wrapping_neg() & m;
                        let row = xb.wrapping_offset((ih0 + d as isize) * a.xrow);
                        unroll!(12: e < (T - 1) * SW + C, {
                            // Pixels outside the image read nothing, at the image's first
                            // pixel: a masked access to an address in an unmapped page costs
                            // a microcode assist on some CPUs.
                            let mm = rm & (vcols >> e & 1).wrapping_neg();
                            let p = if mm != 0 {
                                row.wrapping_offset((iw0 + e as isize) * a.xcol)
                            } else {
                                xb
                            };
                            let xv = simd.load(p, mm);
                            for (i, acc) in acc.iter_mut().enumerate() {
                                if d >= i * SW && d - i * SW < R {
                                    let r = d - i * SW;
                                    for (t, acc) in acc.iter_mut().enumerate() {
                                        if e >= t * SW && e - t * SW < C {
                                            let w = wv[r * C + e - t * SW];
                                            *acc = simd.fma(w, xv, *acc);
                                        }
                                    }
                                }
                            }
                        });
                        for acc in acc.iter_mut() {
                            for acc in acc.iter_mut() {
                                *acc = simd.pin(*acc);
                            }
                        }
                    });
                    // Outputs past the image's end: an empty mask, not a branch (see
                    // `plane_fast`).
                    unroll!(16: j < TR * T, {
                        let (i, t) = (j / T, j % T);
                        let (off, m) = if i < nrows && t < nt {
                            ((oh0 + i) as isize * a.yrow + (ow0 + t) as isize * a.ycol + k0, m)
                        } else {
                            (0, 0)
                        };
                        let (y, z) = (a.y.wrapping_offset(off), a.z.wrapping_offset(off));
                        store_out(simd, &epi, acc[i][t], bias, y, z, m);
                    });
                }
                ow0 += T;
            }
            oh0 += TR;
        }
    }
}

/// The generic NHWC-like kernel: any taps, strides, dilations and channel multiplier.
///
/// # Safety
/// That of [`ClFn`].
#[inline(always)]
unsafe fn cl_generic<S: Simd>(simd: S, a: &ClJob<'_>) {
    // SAFETY: as in `cl_fast`; with a multiplier, lane l reads input channel idx[l] of the
    // block, inside the tensor for every enabled lane.
    unsafe {
        let epi = EpiV::new(simd, a.epi);
        for oh in a.oh0..a.oh1 {
            let ih0 = (oh * a.sh as usize) as isize - a.pt;
            let yrow = a.y.wrapping_offset(oh as isize * a.yrow);
            let zrow = a.z.wrapping_offset(oh as isize * a.yrow);
            let mut ow0 = 0;
            while ow0 < a.ow {
                let nt = GENERIC_COLS.min(a.ow - ow0);
                for b in a.b0..a.b1 {
                    let (k0, m) = a.block(b, S::L);
                    let wb = a.wt.wrapping_add((b - a.b0) * a.wblock);
                    let bias = if a.bias.is_null() {
                        simd.zero()
                    } else {
                        simd.load(a.bias.wrapping_offset(k0), m)
                    };
                    // M > 1 has no shift: k0 >= 0.
                    let xb = a.x.wrapping_add(k0 as usize / a.mult);
                    let mut acc = [simd.zero(); GENERIC_COLS];
                    for r in 0..a.r {
                        let ih = ih0 + r as isize * a.dh;
                        if !(0..a.h).contains(&ih) {
                            continue;
                        }
                        let row = xb.wrapping_offset(ih * a.xrow);
                        for s in 0..a.s {
                            let wv = simd.load(wb.wrapping_add((r * a.s + s) * a.wstride), m);
                            for (t, acc) in acc.iter_mut().enumerate() {
                                let iw = ((ow0 + t) as isize) * a.sw - a.pl + s as isize * a.dw;
                                let (mt, p) = if t < nt && (0..a.w).contains(&iw) {
                                    (m, row.wrapping_offset(iw * a.xcol))
                                } else {
                                    (0, row)
                                };
                                let xv = match a.idx.get(b - a.b0) {
                                    None => simd.load(p, mt),
                                    Some(idx) => simd.load_idx(p, idx, mt),
                                };
                                *acc = simd.fma(wv, xv, *acc);
                            }
                        }
                    }
                    for (t, acc) in acc.iter().enumerate() {
                        if t < nt {
                            let off = (ow0 + t) as isize * a.ycol + k0;
                            let (y, z) = (yrow.wrapping_offset(off), zrow.wrapping_offset(off));
                            store_out(simd, &epi, *acc, bias, y, z, m);
                        }
                    }
                }
                ow0 += GENERIC_COLS;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel sets: the kernels above monomorphised per instruction set, with their blocking.

/// One instruction set's kernels and blocking; `S` is its token, which each kernel takes.
struct KernelSet<S: 'static> {
    lanes: usize,
    /// Output rows per pass of the unrolled NCHW-like kernels: 3x3, 5x5.
    plane_rows: [usize; 2],
    /// [3x3, 5x5][stride 1, 2].
    plane_fast: [[PlaneFn<S>; 2]; 2],
    /// The same, two channels per vector.
    plane_pair: [[PlaneFn<S>; 2]; 2],
    /// 3x3, stride 1 and 2, no column dilation: [`Step::Window3S1`], [`Step::Window3`].
    plane_win3: [PlaneFn<S>; 2],
    /// By [`Step`]: 1, 2, any.
    plane_generic: [PlaneFn<S>; 3],
    /// [3x3, 5x5][stride 1, 2].
    cl_fast: [[ClFn<S>; 2]; 2],
    cl_generic: ClFn<S>,
}

/// Defines a kernel entry point: a non-generic function (with the instruction set's
/// `target_feature`) taking the set's token, whose body is one monomorphised kernel.
macro_rules! entry {
    ($simd:ty, $(#[$attr:meta])* fn $name:ident($job:ty) = $($kernel:tt)+) => {
        $(#[$attr])*
        unsafe fn $name(s: $simd, a: &$job) {
            // SAFETY: forwarded: the token proves the CPU has the set's features, and the job
            // satisfies the kernel's contract (see `PlaneFn`).
            unsafe { $($kernel)+(s, a) }
        }
    };
}

/// Defines module `$module` with the kernel set `SET` of `$simd`: ROWS of the NCHW-like 3x3
/// and 5x5 kernels; output groups (rows, columns) of the NHWC-like 3x3 stride 1, 3x3 stride 2,
/// 5x5 stride 1 and 5x5 stride 2 kernels.
macro_rules! kernel_set {
    ($module:ident, $simd:ty, [$(#[$attr:meta])*], rows = [$p3:literal, $p5:literal],
     groups = [($ar:literal, $ac:literal), ($br:literal, $bc:literal), ($cr:literal, $cc:literal),
               ($dr:literal, $dc:literal)]) => {
        mod $module {
            use super::*;
            entry!($simd, $(#[$attr])* fn p3s1(PlaneJob<'_>) = plane_fast::<$simd, 3, 3, 1, 1, $p3, false>);
            entry!($simd, $(#[$attr])* fn p3s2(PlaneJob<'_>) = plane_fast::<$simd, 3, 3, 2, 2, $p3, false>);
            entry!($simd, $(#[$attr])* fn p5s1(PlaneJob<'_>) = plane_fast::<$simd, 5, 5, 1, 1, $p5, false>);
            entry!($simd, $(#[$attr])* fn p5s2(PlaneJob<'_>) = plane_fast::<$simd, 5, 5, 2, 2, $p5, false>);
            entry!($simd, $(#[$attr])* fn w3s1(PlaneJob<'_>) = plane_fast::<$simd, 3, 3, 1, 4, $p3, false>);
            entry!($simd, $(#[$attr])* fn w3s2(PlaneJob<'_>) = plane_fast::<$simd, 3, 3, 2, 3, $p3, false>);
            entry!($simd, $(#[$attr])* fn q3s1(PlaneJob<'_>) = plane_fast::<$simd, 3, 3, 1, 1, $p3, true>);
            entry!($simd, $(#[$attr])* fn q3s2(PlaneJob<'_>) = plane_fast::<$simd, 3, 3, 2, 2, $p3, true>);
            entry!($simd, $(#[$attr])* fn q5s1(PlaneJob<'_>) = plane_fast::<$simd, 5, 5, 1, 1, $p5, true>);
            entry!($simd, $(#[$attr])* fn q5s2(PlaneJob<'_>) = plane_fast::<$simd, 5, 5, 2, 2, $p5, true>);
            entry!($simd, $(#[$attr])* fn pg1(PlaneJob<'_>) = plane_generic::<$simd, 1>);
            entry!($simd, $(#[$attr])* fn pg2(PlaneJob<'_>) = plane_generic::<$simd, 2>);
            entry!($simd, $(#[$attr])* fn pgn(PlaneJob<'_>) = plane_generic::<$simd, 0>);
            entry!($simd, $(#[$attr])* fn c3s1(ClJob<'_>) = cl_fast::<$simd, 3, 3, 1, $ar, $ac>);
            entry!($simd, $(#[$attr])* fn c3s2(ClJob<'_>) = cl_fast::<$simd, 3, 3, 2, $br, $bc>);
            entry!($simd, $(#[$attr])* fn c5s1(ClJob<'_>) = cl_fast::<$simd, 5, 5, 1, $cr, $cc>);
            entry!($simd, $(#[$attr])* fn c5s2(ClJob<'_>) = cl_fast::<$simd, 5, 5, 2, $dr, $dc>);
            entry!($simd, $(#[$attr])* fn cg(ClJob<'_>) = cl_generic::<$simd>);

            pub(super) static SET: KernelSet<$simd> = KernelSet {
                lanes: <$simd as Simd>::L,
                plane_rows: [$p3, $p5],
                plane_fast: [[p3s1, p3s2], [p5s1, p5s2]],
                plane_pair: [[q3s1, q3s2], [q5s1, q5s2]],
                plane_win3: [w3s1, w3s2],
                plane_generic: [pg1, pg2, pgn],
                cl_fast: [[c3s1, c3s2], [c5s1, c5s2]],
                cl_generic: cg,
            };
        }
    };
}

// AVX-512: 32 registers hold 9 weights and 7 rows (MobileNet's sizes are multiples of 7) or
// 3x4 outputs of accumulators.
#[cfg(target_arch = "x86_64")]
kernel_set!(avx512_set, Avx512, [#[target_feature(enable = "avx512f")]],
    rows = [7, 4], groups = [(3, 4), (2, 4), (1, 4), (1, 4)]);
// AVX2: 16 registers.
#[cfg(target_arch = "x86_64")]
kernel_set!(avx2_set, Avx2, [#[target_feature(enable = "avx2,fma")]],
    rows = [4, 2], groups = [(1, 4), (1, 4), (1, 2), (1, 2)]);
kernel_set!(
    portable_set,
    Scalar,
    [],
    rows = [4, 2],
    groups = [(1, 4), (1, 4), (1, 2), (1, 2)]
);

/// The vector operations the kernels use, per instruction set.
mod simd {
    /// One instruction set's vector of `L` f32 lanes, implemented for the crate's capability
    /// tokens ([`crate::simd`]): the token proves the CPU has the set's features, so the
    /// arithmetic is safe (and inlined into kernels compiled with those features). The
    /// memory operations are `unsafe`: pointers must be valid for the lanes the mask enables.
    /// Masked-off lanes are never accessed, so their addresses may lie outside any
    /// allocation.
    pub(super) trait Simd: crate::simd::Token {
        /// Lanes (at most 16).
        const L: usize;
        type V: Copy;
        fn zero(self) -> Self::V;
        fn splat(self, v: f32) -> Self::V;
        /// Lane l = p\[l\] where bit l of m is set, else 0.
        unsafe fn load(self, p: *const f32, m: u32) -> Self::V;
        /// Lane l = element 2l of the 2L from p, each read where its bit is set (bits of m0
        /// for elements 0..L, of m1 for L..2L), else 0.
        unsafe fn load_step2(self, p: *const f32, m0: u32, m1: u32) -> Self::V;
        /// Lane l = p\[l·step\] where bit l of m is set, else 0.
        #[inline(always)]
        unsafe fn load_strided(self, p: *const f32, step: isize, m: u32) -> Self::V {
            let mut a = [0f32; 16];
            for (l, v) in a.iter_mut().enumerate().take(Self::L) {
                if m >> l & 1 == 1 {
                    // SAFETY: lane l is enabled: the caller's contract.
                    *v = unsafe { *p.wrapping_offset(l as isize * step) };
                }
            }
            self.of_array(&a)
        }
        /// Lane l = p\[idx\[l\]\] where bit l of m is set, else 0.
        #[inline(always)]
        unsafe fn load_idx(self, p: *const f32, idx: &[isize; 16], m: u32) -> Self::V {
            let mut a = [0f32; 16];
            for (l, v) in a.iter_mut().enumerate().take(Self::L) {
                if m >> l & 1 == 1 {
                    // SAFETY: lane l is enabled: the caller's contract.
                    *v = unsafe { *p.wrapping_offset(idx[l]) };
                }
            }
            self.of_array(&a)
        }
        /// Lanes below L/2 as [`Simd::load`] from `lo`, the others from `hi` (lane l reads
        /// hi\[l − L/2\]); m holds the lanes of both halves.
        unsafe fn load_pair(self, lo: *const f32, hi: *const f32, m: u32) -> Self::V;
        /// Lanes below L/2 = elements 2l from `lo`, the others elements 2(l − L/2) from `hi`,
        /// each read where its bit of the L-element mask `em` is set, else 0.
        unsafe fn load_step2_pair(self, lo: *const f32, hi: *const f32, em: u32) -> Self::V;
        /// Stores lanes below L/2 at `lo`, the others at `hi` (lane l at hi\[l − L/2\]), where
        /// their bits of m are set.
        unsafe fn store_pair(self, lo: *mut f32, hi: *mut f32, v: Self::V, m: u32);
        /// Lanes below L/2 from a, the others from b.
        fn blend_hi(self, a: Self::V, b: Self::V) -> Self::V;
        /// The three stride-1 windows from `p`: lane l of window s is element l + s, read where
        /// bit l + s of `raw` (elements 0..L + 2) is set, else 0.
        #[inline(always)]
        unsafe fn windows3_s1(self, p: *const f32, raw: u32) -> [Self::V; 3] {
            let low = (1u32 << Self::L) - 1;
            // SAFETY: the caller's contract; window s reads elements s + l.
            unsafe {
                [
                    self.load(p, raw & low),
                    self.load(p.wrapping_add(1), raw >> 1 & low),
                    self.load(p.wrapping_add(2), raw >> 2 & low),
                ]
            }
        }
        /// The three stride-2 windows from `p`: lane l of window s is element 2l + s, read
        /// where bit 2l + s of `raw` (elements 0..=2L) is set, else 0.
        #[inline(always)]
        unsafe fn windows3(self, p: *const f32, raw: u64) -> [Self::V; 3] {
            let low = (1u64 << Self::L) - 1;
            let m = |s: usize, hi: usize| (raw >> (s + hi * Self::L) & low) as u32;
            // SAFETY: the caller's contract; window s reads elements s + 2l.
            unsafe { std::array::from_fn(|s| self.load_step2(p.wrapping_add(s), m(s, 0), m(s, 1))) }
        }
        /// p\[l\] = lane l where bit l of m is set.
        unsafe fn store(self, p: *mut f32, v: Self::V, m: u32);
        /// `v`, computed here: the compiler may neither move its computation past this point
        /// (into the branches of the stores that use it) nor move loads across it. Pinning
        /// the accumulators after each input row keeps the compiler from hoisting every load
        /// of an unrolled kernel to its start, where they no longer fit in registers.
        #[inline(always)]
        fn pin(self, v: Self::V) -> Self::V {
            v
        }
        /// a · b + c (fused where the set has FMA).
        fn fma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
        fn mul(self, a: Self::V, b: Self::V) -> Self::V;
        fn add(self, a: Self::V, b: Self::V) -> Self::V;
        /// Lane-wise max, taking b where a is NaN (as `f32::max(a, b)` for a non-NaN b).
        fn max(self, a: Self::V, b: Self::V) -> Self::V;
        /// Lane-wise min, taking b where a is NaN.
        fn min(self, a: Self::V, b: Self::V) -> Self::V;
        /// The first L elements.
        fn of_array(self, a: &[f32; 16]) -> Self::V;
    }

    /// Portable Rust over lane arrays (no target-specific code), 8 lanes.
    impl Simd for crate::simd::Scalar {
        const L: usize = 8;
        type V = [f32; 8];
        #[inline(always)]
        fn zero(self) -> Self::V {
            [0.0; 8]
        }
        #[inline(always)]
        fn splat(self, v: f32) -> Self::V {
            [v; 8]
        }
        #[inline(always)]
        unsafe fn load(self, p: *const f32, m: u32) -> Self::V {
            let mut v = [0.0; 8];
            if m & 0xff == 0xff {
                // SAFETY: all 8 lanes are enabled.
                unsafe { ptr::copy_nonoverlapping(p, v.as_mut_ptr(), 8) };
            } else {
                for (l, v) in v.iter_mut().enumerate() {
                    if m >> l & 1 == 1 {
                        // SAFETY: lane l is enabled.
                        *v = unsafe { *p.wrapping_add(l) };
                    }
                }
            }
            v
        }
        #[inline(always)]
        unsafe fn load_step2(self, p: *const f32, m0: u32, m1: u32) -> Self::V {
            let bits = m0 as u64 | (m1 as u64) << 8;
            let mut v = [0.0; 8];
            for (l, v) in v.iter_mut().enumerate() {
                if bits >> (2 * l) & 1 == 1 {
                    // SAFETY: element 2l is enabled.
                    *v = unsafe { *p.wrapping_add(2 * l) };
                }
            }
            v
        }
        #[inline(always)]
        unsafe fn load_pair(self, lo: *const f32, hi: *const f32, m: u32) -> Self::V {
            // SAFETY: the caller's contract.
            unsafe {
                self.blend_hi(
                    self.load(lo, m & 0xf),
                    self.load(hi.wrapping_sub(4), m & 0xf0),
                )
            }
        }
        #[inline(always)]
        unsafe fn load_step2_pair(self, lo: *const f32, hi: *const f32, em: u32) -> Self::V {
            // SAFETY: the caller's contract; elements 2l of the two halves are elements 0..8
            // of lo and of hi.
            unsafe {
                self.blend_hi(
                    self.load_step2(lo, em, 0),
                    self.load_step2(hi.wrapping_sub(8), 0, em),
                )
            }
        }
        #[inline(always)]
        unsafe fn store_pair(self, lo: *mut f32, hi: *mut f32, v: Self::V, m: u32) {
            // SAFETY: the caller's contract.
            unsafe {
                self.store(lo, v, m & 0xf);
                self.store(hi.wrapping_sub(4), v, m & 0xf0);
            }
        }
        #[inline(always)]
        fn blend_hi(self, a: Self::V, b: Self::V) -> Self::V {
            std::array::from_fn(|l| if l < 4 { a[l] } else { b[l] })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32, v: Self::V, m: u32) {
            if m & 0xff == 0xff {
                // SAFETY: all 8 lanes are enabled.
                unsafe { ptr::copy_nonoverlapping(v.as_ptr(), p, 8) };
            } else {
                for (l, v) in v.iter().enumerate() {
                    if m >> l & 1 == 1 {
                        // SAFETY: lane l is enabled.
                        unsafe { *p.wrapping_add(l) = *v };
                    }
                }
            }
        }
        #[inline(always)]
        fn fma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
            std::array::from_fn(|l| a[l] * b[l] + c[l])
        }
        #[inline(always)]
        fn mul(self, a: Self::V, b: Self::V) -> Self::V {
            std::array::from_fn(|l| a[l] * b[l])
        }
        #[inline(always)]
        fn add(self, a: Self::V, b: Self::V) -> Self::V {
            std::array::from_fn(|l| a[l] + b[l])
        }
        #[inline(always)]
        fn max(self, a: Self::V, b: Self::V) -> Self::V {
            std::array::from_fn(|l| if a[l] > b[l] { a[l] } else { b[l] })
        }
        #[inline(always)]
        fn min(self, a: Self::V, b: Self::V) -> Self::V {
            std::array::from_fn(|l| if a[l] < b[l] { a[l] } else { b[l] })
        }
        #[inline(always)]
        fn of_array(self, a: &[f32; 16]) -> Self::V {
            std::array::from_fn(|l| a[l])
        }
    }

    use std::ptr;

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use std::arch::x86_64::*;

        use super::Simd;
        use crate::simd::{Avx2, Avx512};

        /// An empty `asm!` that takes and returns `v` in a register: a value the optimiser
        /// cannot see through, so the code computing it stays before it; as it may access
        /// memory (for all the compiler knows), loads stay on their side of it. Inlined into
        /// the AVX-512 kernels.
        ///
        /// # Safety
        /// AVX-512F.
        #[target_feature(enable = "avx512f")]
        #[inline]
        unsafe fn pin512(mut v: __m512) -> __m512 {
            // SAFETY: an empty template: nothing runs.
            unsafe {
                std::arch::asm!("/* {0} */", inout(zmm_reg) v, options(nostack, preserves_flags))
            };
            v
        }

        /// [`pin512`] for AVX2 kernels.
        ///
        /// # Safety
        /// AVX.
        #[target_feature(enable = "avx")]
        #[inline]
        unsafe fn pin256(mut v: __m256) -> __m256 {
            // SAFETY: an empty template: nothing runs.
            unsafe {
                std::arch::asm!("/* {0} */", inout(ymm_reg) v, options(nostack, preserves_flags))
            };
            v
        }

        /// Lanes of `m` as an AVX2 mask (all ones where enabled).
        ///
        /// # Safety
        /// AVX2.
        #[inline(always)]
        unsafe fn mask8(m: u32) -> __m256i {
            // SAFETY: AVX2 (the caller's contract).
            unsafe {
                let bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
                let v = _mm256_and_si256(_mm256_set1_epi32(m as i32), bits);
                _mm256_cmpeq_epi32(v, bits)
            }
        }

        // SAFETY (every method): the CPU has AVX2 and FMA (an Avx2 token exists); masked-off
        // lanes of vmaskmov are not accessed.
        impl Simd for Avx2 {
            const L: usize = 8;
            type V = __m256;
            #[inline(always)]
            fn zero(self) -> __m256 {
                // SAFETY: see the impl.
                unsafe { _mm256_setzero_ps() }
            }
            #[inline(always)]
            fn splat(self, v: f32) -> __m256 {
                // SAFETY: see the impl.
                unsafe { _mm256_set1_ps(v) }
            }
            #[inline(always)]
            unsafe fn load(self, p: *const f32, m: u32) -> __m256 {
                // SAFETY: see the impl.
                unsafe { _mm256_maskload_ps(p, mask8(m)) }
            }
            #[inline(always)]
            unsafe fn load_step2(self, p: *const f32, m0: u32, m1: u32) -> __m256 {
                // SAFETY: see the impl.
                unsafe {
                    let lo = self.load(p, m0);
                    let hi = self.load(p.wrapping_add(8), m1);
                    // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then 64-bit pairs in order 0 2 1 3.
                    let even = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
                    _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(
                        even,
                    )))
                }
            }
            #[inline(always)]
            unsafe fn load_pair(self, lo: *const f32, hi: *const f32, m: u32) -> __m256 {
                // SAFETY: see the impl.
                unsafe {
                    let a = self.load(lo, m & 0xf);
                    let b = self.load(hi.wrapping_sub(4), m & 0xf0);
                    _mm256_blend_ps::<0xf0>(a, b)
                }
            }
            #[inline(always)]
            unsafe fn load_step2_pair(self, lo: *const f32, hi: *const f32, em: u32) -> __m256 {
                // SAFETY: see the impl. Evens of (a, b) are [a0 a2 a4 a6 b0 b2 b4 b6].
                unsafe {
                    let a = self.load(lo, em);
                    let b = self.load(hi, em);
                    let even = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
                    _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(
                        even,
                    )))
                }
            }
            #[inline(always)]
            unsafe fn store_pair(self, lo: *mut f32, hi: *mut f32, v: __m256, m: u32) {
                // SAFETY: see the impl.
                unsafe {
                    self.store(lo, v, m & 0xf);
                    self.store(hi.wrapping_sub(4), v, m & 0xf0);
                }
            }
            #[inline(always)]
            fn blend_hi(self, a: __m256, b: __m256) -> __m256 {
                // SAFETY: see the impl.
                unsafe { _mm256_blend_ps::<0xf0>(a, b) }
            }
            #[inline(always)]
            fn pin(self, v: __m256) -> __m256 {
                // SAFETY: see the impl.
                unsafe { pin256(v) }
            }
            #[inline(always)]
            unsafe fn store(self, p: *mut f32, v: __m256, m: u32) {
                // SAFETY: see the impl.
                unsafe {
                    if m & 0xff == 0xff {
                        _mm256_storeu_ps(p, v)
                    } else {
                        _mm256_maskstore_ps(p, mask8(m), v)
                    }
                }
            }
            #[inline(always)]
            fn fma(self, a: __m256, b: __m256, c: __m256) -> __m256 {
                // SAFETY: see the impl.
                unsafe { _mm256_fmadd_ps(a, b, c) }
            }
            #[inline(always)]
            fn mul(self, a: __m256, b: __m256) -> __m256 {
                // SAFETY: see the impl.
                unsafe { _mm256_mul_ps(a, b) }
            }
            #[inline(always)]
            fn add(self, a: __m256, b: __m256) -> __m256 {
                // SAFETY: see the impl.
                unsafe { _mm256_add_ps(a, b) }
            }
            #[inline(always)]
            fn max(self, a: __m256, b: __m256) -> __m256 {
                // SAFETY: see the impl. maxps returns the second operand when either is NaN.
                unsafe { _mm256_max_ps(a, b) }
            }
            #[inline(always)]
            fn min(self, a: __m256, b: __m256) -> __m256 {
                // SAFETY: see the impl.
                unsafe { _mm256_min_ps(a, b) }
            }
            #[inline(always)]
            fn of_array(self, a: &[f32; 16]) -> __m256 {
                // SAFETY: see the impl; a holds 16 elements.
                unsafe { _mm256_loadu_ps(a.as_ptr()) }
            }
        }

        // AVX-512 (F), 16 lanes.
        // SAFETY (every method): the CPU has AVX-512F (an Avx512 token exists); masked-off lanes
        // of AVX-512 masked loads and stores are not accessed.
        impl Simd for Avx512 {
            const L: usize = 16;
            type V = __m512;
            #[inline(always)]
            fn zero(self) -> __m512 {
                // SAFETY: see the impl.
                unsafe { _mm512_setzero_ps() }
            }
            #[inline(always)]
            fn splat(self, v: f32) -> __m512 {
                // SAFETY: see the impl.
                unsafe { _mm512_set1_ps(v) }
            }
            #[inline(always)]
            unsafe fn load(self, p: *const f32, m: u32) -> __m512 {
                // SAFETY: see the impl.
                unsafe { _mm512_maskz_loadu_ps(m as __mmask16, p) }
            }
            #[inline(always)]
            unsafe fn load_step2(self, p: *const f32, m0: u32, m1: u32) -> __m512 {
                // SAFETY: see the impl.
                unsafe {
                    let evens = _mm512_setr_epi32(
                        0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                    );
                    let lo = _mm512_maskz_loadu_ps(m0 as __mmask16, p);
                    let hi = _mm512_maskz_loadu_ps(m1 as __mmask16, p.wrapping_add(16));
                    _mm512_permutex2var_ps(lo, evens, hi)
                }
            }
            #[inline(always)]
            unsafe fn windows3_s1(self, p: *const f32, raw: u32) -> [__m512; 3] {
                // SAFETY: see the impl. Elements 0..18: two loads, two lane shifts.
                unsafe {
                    let a = _mm512_castps_si512(_mm512_maskz_loadu_ps(raw as __mmask16, p));
                    let b = _mm512_castps_si512(_mm512_maskz_loadu_ps(
                        (raw >> 16) as __mmask16 & 3,
                        p.wrapping_add(16),
                    ));
                    [
                        _mm512_castsi512_ps(a),
                        _mm512_castsi512_ps(_mm512_alignr_epi32::<1>(b, a)),
                        _mm512_castsi512_ps(_mm512_alignr_epi32::<2>(b, a)),
                    ]
                }
            }
            #[inline(always)]
            unsafe fn windows3(self, p: *const f32, raw: u64) -> [__m512; 3] {
                // SAFETY: see the impl. Elements 0..32 are two loads; element 32 (window 2's
                // lane 15) one masked lane of a third.
                unsafe {
                    let ev = _mm512_setr_epi32(
                        0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                    );
                    let od = _mm512_setr_epi32(
                        1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                    );
                    let e2 = _mm512_setr_epi32(
                        2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 0,
                    );
                    let a = _mm512_maskz_loadu_ps(raw as __mmask16, p);
                    let b = _mm512_maskz_loadu_ps((raw >> 16) as __mmask16, p.wrapping_add(16));
                    let w2 = _mm512_maskz_permutex2var_ps(0x7fff, a, e2, b);
                    let last = ((raw >> 32) as __mmask16 & 1) << 15;
                    [
                        _mm512_permutex2var_ps(a, ev, b),
                        _mm512_permutex2var_ps(a, od, b),
                        _mm512_mask_loadu_ps(w2, last, p.wrapping_add(17)),
                    ]
                }
            }
            #[inline(always)]
            unsafe fn load_pair(self, lo: *const f32, hi: *const f32, m: u32) -> __m512 {
                // SAFETY: see the impl.
                unsafe {
                    let a = _mm512_maskz_loadu_ps((m & 0xff) as __mmask16, lo);
                    _mm512_mask_loadu_ps(a, (m & 0xff00) as __mmask16, hi.wrapping_sub(8))
                }
            }
            #[inline(always)]
            unsafe fn load_step2_pair(self, lo: *const f32, hi: *const f32, em: u32) -> __m512 {
                // SAFETY: see the impl. Lane l picks element 2l of (a, b): a's evens, then b's.
                unsafe {
                    let evens = _mm512_setr_epi32(
                        0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                    );
                    let a = _mm512_maskz_loadu_ps(em as __mmask16, lo);
                    let b = _mm512_maskz_loadu_ps(em as __mmask16, hi);
                    _mm512_permutex2var_ps(a, evens, b)
                }
            }
            #[inline(always)]
            unsafe fn store_pair(self, lo: *mut f32, hi: *mut f32, v: __m512, m: u32) {
                // SAFETY: see the impl.
                unsafe {
                    _mm512_mask_storeu_ps(lo, (m & 0xff) as __mmask16, v);
                    _mm512_mask_storeu_ps(hi.wrapping_sub(8), (m & 0xff00) as __mmask16, v);
                }
            }
            #[inline(always)]
            fn blend_hi(self, a: __m512, b: __m512) -> __m512 {
                // SAFETY: see the impl.
                unsafe { _mm512_mask_mov_ps(a, 0xff00, b) }
            }
            #[inline(always)]
            fn pin(self, v: __m512) -> __m512 {
                // SAFETY: see the impl.
                unsafe { pin512(v) }
            }
            #[inline(always)]
            unsafe fn store(self, p: *mut f32, v: __m512, m: u32) {
                // SAFETY: see the impl.
                unsafe { _mm512_mask_storeu_ps(p, m as __mmask16, v) }
            }
            #[inline(always)]
            fn fma(self, a: __m512, b: __m512, c: __m512) -> __m512 {
                // SAFETY: see the impl.
                unsafe { _mm512_fmadd_ps(a, b, c) }
            }
            #[inline(always)]
            fn mul(self, a: __m512, b: __m512) -> __m512 {
                // SAFETY: see the impl.
                unsafe { _mm512_mul_ps(a, b) }
            }
            #[inline(always)]
            fn add(self, a: __m512, b: __m512) -> __m512 {
                // SAFETY: see the impl.
                unsafe { _mm512_add_ps(a, b) }
            }
            #[inline(always)]
            fn max(self, a: __m512, b: __m512) -> __m512 {
                // SAFETY: see the impl. maxps returns the second operand when either is NaN.
                unsafe { _mm512_max_ps(a, b) }
            }
            #[inline(always)]
            fn min(self, a: __m512, b: __m512) -> __m512 {
                // SAFETY: see the impl.
                unsafe { _mm512_min_ps(a, b) }
            }
            #[inline(always)]
            fn of_array(self, a: &[f32; 16]) -> __m512 {
                // SAFETY: see the impl; a holds 16 elements.
                unsafe { _mm512_loadu_ps(a.as_ptr()) }
            }
        }
    }
}
