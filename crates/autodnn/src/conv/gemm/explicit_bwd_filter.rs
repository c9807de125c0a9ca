//! `gemm` backward filter (cuDNN's BWD_FILTER_ALGO_1): per group,
//! dW (K/g × C/g·R·S) = Σ over blocks of images of dY_block · im2col(x_block)ᵀ, one GEMM per
//! block whose depth is the block's output positions, accumulated into dw (beta = 1 after
//! the first block).
//!
//! - **1x1, stride 1, no padding:** x is the patch matrix and nothing is copied: with
//!   channels-last tensors (positions of all images one stride apart) one GEMM covers the
//!   whole batch; otherwise one GEMM per image when an image has at least
//!   [`IN_PLACE_MIN_POSITIONS`] positions.
//! - **Otherwise:** the block's patches are copied tap-major into the workspace (row t holds
//!   tap t = (c, r, s) at every position of the block, zero where the window is in the
//!   padding) and its dy rows beside them; blocks are whole images, as many as make about
//!   [`TARGET_POSITIONS`] positions (a deep enough GEMM), within [`MAX_BLOCK_BYTES`].
//! - **Declines:** convolution mode (the flipped taps are not one strided matrix of dw).
//! - **Deterministic:** every dw element is computed by one thread with the same depth
//!   blocks in the same order, blocks accumulated in image order, whatever the thread count.

use crate::runtime::parallel::for_each_chunk;

use crate::conv::{default_cost_features, ExecContext};
use crate::desc::{ConvMode, ConvProblem, FilterLayout, OpKind};
use crate::error::Result;
use crate::gemm::{gemm_in_context, Epilogue, GemmDesc};
use crate::op::conv_bwd::{check_problem, scaled};
use crate::op::{
    Accuracy, Algorithm, ConvBackwardFilter, ConvBwdFilterInputs, TensorMut, COST_FEATURES,
};
use crate::runtime::workspace::Carve;

/// Positions per image from which the in-place 1x1 path runs one GEMM per image rather than
/// copying blocks of images: at 14x14 (196) the GEMMs per image were 7 to 23% faster than
/// copied blocks of 8 images (ResNet-50's and MobileNet's layers at batch 8, 1 and 2
/// threads), at 7x7 (49) 5 to 25% slower.
pub(crate) const IN_PLACE_MIN_POSITIONS: usize = 128;
/// Positions a block of images aims for.
pub(crate) const TARGET_POSITIONS: usize = 2048;
/// Largest block buffers (patches and dy rows) unless one image needs more.
pub(crate) const MAX_BLOCK_BYTES: usize = 64 << 20;
const ALIGN: usize = 64;

/// The `gemm` backward-filter algorithm.
pub(crate) struct GemmBwdFilter;

pub(crate) static GEMM_BWD_FILTER: GemmBwdFilter = GemmBwdFilter;

/// How a problem is computed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Path {
    /// One GEMM over every image's positions, x and dy read in place.
    Batch,
    /// One GEMM per image, in place.
    PerImage,
    /// Blocks copied into the workspace: `nb` whole images at a time, or (`nb` = 1) `rows`
    /// output rows of one image at a time.
    Blocks { nb: usize, rows: usize },
}

fn x_is_matrix(p: &ConvProblem) -> bool {
    let c = p.conv();
    let pad = c.padding();
    p.w().r() == 1
        && p.w().s() == 1
        && c.stride() == [1, 1]
        && [pad.top, pad.bottom, pad.left, pad.right] == [0; 4]
}

fn path(p: &ConvProblem) -> Path {
    let (xs, ys) = (p.x().strides(), p.y().strides());
    let [n, _, oh, ow] = p.y().dims();
    let positions = oh * ow;
    if x_is_matrix(p) {
        let flat = xs[2] == ow * xs[3] && ys[2] == ow * ys[3];
        if flat && xs[0] == positions * xs[3] && ys[0] == positions * ys[3] {
            return Path::Batch;
        }
        if flat && positions >= IN_PLACE_MIN_POSITIONS {
            return Path::PerImage;
        }
    }
    if positions >= TARGET_POSITIONS {
        let rows = (TARGET_POSITIONS / ow).clamp(1, oh);
        return Path::Blocks { nb: 1, rows };
    }
    let row = taps(p).saturating_add(p.k_per_group()).saturating_mul(4);
    let by_bytes = (MAX_BLOCK_BYTES / row.max(1) / positions.max(1)).max(1);
    let nb = TARGET_POSITIONS
        .div_ceil(positions)
        .min(by_bytes)
        .clamp(1, n);
    Path::Blocks { nb, rows: oh }
}

/// True when the product runs with the output channels as the engine's vector side (fewer
/// of them than taps): both operands are unit-stride along the depth, so the vector-side
/// one is transposed as it is packed, and packing the smaller one costs less. The product
/// then goes to a K/g-major buffer, added into dw at the end. Only for narrow outputs
/// ([`SWAP_MAX_K`]) and a buffer of at most [`SWAP_MAX_ELEMENTS`]: on ResNet-50's layers at
/// batch 8 it took 25 to 30% off layers of 64 and 128 output channels, was level at 256 and
/// lost up to 40% at 512 (the buffer's pass, and B read in place across thousands of
/// columns).
///
/// Also where the output channels fill the register tiles better on the vector side
/// ([`tile_fill`]): MobileNet's first layer (27 taps, 32 channels) fills 96% of the AVX-512
/// tiles swapped and 64% not.
fn swapped(p: &ConvProblem) -> bool {
    let (kg, t) = (p.k_per_group(), taps(p));
    channels_as_rows(kg, t) && kg <= SWAP_MAX_K && kg * t <= SWAP_MAX_ELEMENTS
}

/// Whether the `kg` output channels rather than the `taps` are the better rows of the
/// engine (its vector side): fewer of them, or filling the register tiles 1.2x better.
pub(super) fn channels_as_rows(kg: usize, taps: usize) -> bool {
    kg < taps || tile_fill(kg, taps) > 1.2 * tile_fill(taps, kg)
}

/// The share of the engine's register tiles an `m × n` product fills, for the widest
/// kernel family's 32 × 14 tile (the narrower families' tiles divide alike).
fn tile_fill(m: usize, n: usize) -> f64 {
    let pad = |v: usize, t: usize| v as f64 / (v.div_ceil(t) * t).max(1) as f64;
    pad(m, 32) * pad(n, 14)
}

/// Most output channels per group the swapped frame is used for.
const SWAP_MAX_K: usize = 256;
/// Largest K/g × taps buffer of the swapped frame.
const SWAP_MAX_ELEMENTS: usize = 1 << 20;

/// One block's product: `taps` (taps × depth, strides) and `grads` (K/g × depth, strides)
/// into dw (`c_out`, element (t, k) at k·ks + t) with alpha and `beta`, or, swapped, into
/// `tbuf` (element (k, t) at t·K/g + k) with 1 and 0 for the first block, 1 after.
#[allow(clippy::too_many_arguments)]
fn product(
    ctx: &ExecContext<'_>,
    (t, kg, depth): (usize, usize, usize),
    (a, a_st): (&[f32], [usize; 2]),
    (b, b_st): (&[f32], [usize; 2]),
    first: bool,
    (alpha, beta): (f32, f32),
    ks: usize,
    c_out: &mut [f32],
    tbuf: Option<&mut [f32]>,
) -> Result<()> {
    let epi = Epilogue::new();
    match tbuf {
        None => {
            let d = GemmDesc::new(t, kg, depth)
                .with_a_strides(a_st[0], a_st[1])
                .with_b_strides(b_st[1], b_st[0])
                .with_c_strides(1, ks);
            let be = if first { beta } else { 1.0 };
            gemm_in_context(ctx, &d, alpha, a, b, be, c_out, &epi)
        }
        Some(tb) => {
            let d = GemmDesc::new(kg, t, depth)
                .with_a_strides(b_st[0], b_st[1])
                .with_b_strides(a_st[1], a_st[0])
                .with_c_strides(1, kg);
            let be = if first { 0.0 } else { 1.0 };
            gemm_in_context(ctx, &d, 1.0, b, a, be, tb, &epi)
        }
    }
}

/// Taps per group: C/g·R·S.
fn taps(p: &ConvProblem) -> usize {
    p.c_per_group() * p.w().r() * p.w().s()
}

/// (c, r, s) of tap `t`: the t-th element of a filter row in the filter's layout.
fn tap(p: &ConvProblem, t: usize) -> (usize, usize, usize) {
    let (cg, r, s) = (p.c_per_group(), p.w().r(), p.w().s());
    match p.w().layout() {
        FilterLayout::Kcrs => (t / (r * s), t % (r * s) / s, t % s),
        FilterLayout::Krsc => (t % cg, t / cg / s, t / cg % s),
    }
}

/// One block: images `n0 .. n0 + nb`, output rows `i0 .. i0 + rows` of each.
#[derive(Debug, Clone, Copy)]
struct Block {
    n0: usize,
    nb: usize,
    i0: usize,
    rows: usize,
}

/// Copies the patches of block `bk`, group `g`, into `col` (row t at t·J).
fn im2col(ctx: &ExecContext<'_>, p: &ConvProblem, x: &[f32], g: usize, bk: Block, col: &mut [f32]) {
    let Block { n0, nb, i0, rows } = bk;
    let (xd, yd, cd) = (p.x(), p.y(), p.conv());
    let [_, _, h, wi] = xd.dims();
    let ow = yd.w();
    let xs = xd.strides();
    let pad = cd.padding();
    let [sh, sw] = cd.stride().map(|v| v as i64);
    let [dh, dw] = cd.dilation().map(|v| v as i64);
    let jj = nb * rows * ow;
    let fill = |(t, row): (usize, &mut [f32])| {
        let (c, u, v) = tap(p, t);
        let shift = v as i64 * dw - pad.left;
        let (j_lo, j_hi) = crate::conv::inside_columns(shift, sw, wi, ow);
        for b in 0..nb {
            for il in 0..rows {
                let i = i0 + il;
                let dst = &mut row[(b * rows + il) * ow..][..ow];
                let ih = i as i64 * sh - pad.top + u as i64 * dh;
                if ih < 0 || ih >= h as i64 || j_lo >= j_hi {
                    dst.fill(0.0);
                    continue;
                }
                dst[..j_lo].fill(0.0);
                dst[j_hi..].fill(0.0);
                let base = xd.offset(n0 + b, g * p.c_per_group() + c, ih as usize, 0) as i64;
                let step = (sw as usize).saturating_mul(xs[3]); // a lone column never steps
                let first = (base + (j_lo as i64 * sw + shift) * xs[3] as i64) as usize;
                let len = j_hi - j_lo;
                if step == 1 {
                    dst[j_lo..j_hi].copy_from_slice(&x[first..first + len]);
                } else if step == 2 {
                    crate::conv::copy_every_other(
                        &x[first..first + 2 * len - 1],
                        &mut dst[j_lo..j_hi],
                    );
                } else {
                    for (k, d) in dst[j_lo..j_hi].iter_mut().enumerate() {
                        *d = x[first + k * step];
                    }
                }
            }
        }
    };
    let col = &mut col[..taps(p) * jj];
    if ctx.threads > 1 && col.len() >= 1 << 15 {
        for_each_chunk(ctx, col, jj, |i, c| fill((i, c)));
    } else {
        col.chunks_mut(jj).enumerate().for_each(fill);
    }
}

/// Copies dy of block `bk`, group `g`, into `dst` (row k at k·J).
fn copy_dy(p: &ConvProblem, dy: &[f32], g: usize, bk: Block, dst: &mut [f32]) {
    let Block { n0, nb, i0, rows } = bk;
    let yd = p.y();
    let ow = yd.w();
    let qs = yd.strides()[3];
    let jj = nb * rows * ow;
    for (kl, row) in dst.chunks_mut(jj).take(p.k_per_group()).enumerate() {
        let k = g * p.k_per_group() + kl;
        for b in 0..nb {
            for il in 0..rows {
                let d = &mut row[(b * rows + il) * ow..][..ow];
                let s = yd.offset(n0 + b, k, i0 + il, 0);
                if qs == 1 {
                    d.copy_from_slice(&dy[s..s + ow]);
                } else {
                    for (j, e) in d.iter_mut().enumerate() {
                        *e = dy[s + j * qs];
                    }
                }
            }
        }
    }
}

/// The workspace: the column and dy blocks, and the swapped product's buffer; `None` when
/// the size overflows.
fn workspace(p: &ConvProblem) -> Option<usize> {
    let p = &p.batch_folded().unwrap_or(*p);
    let (taps, kg) = (taps(p), p.k_per_group());
    let blocks = match path(p) {
        Path::Batch | Path::PerImage => 0,
        Path::Blocks { nb, rows } => {
            let jj = nb * rows * p.y().w();
            taps.checked_add(kg)?
                .checked_mul(jj)?
                .checked_mul(4)?
                .checked_add(2 * ALIGN)?
        }
    };
    let product = if swapped(p) {
        taps.checked_mul(kg)?.checked_mul(4)?.checked_add(ALIGN)?
    } else {
        0
    };
    blocks.checked_add(product)
}

impl Algorithm<ConvBackwardFilter> for GemmBwdFilter {
    fn name(&self) -> &'static str {
        "gemm"
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_problem(p, OpKind::ConvBackwardFilter)?;
        if p.conv().mode() == ConvMode::Convolution {
            return Err("convolution mode: the flipped taps are not one strided matrix".into());
        }
        match workspace(p) {
            Some(b) if b <= isize::MAX as usize => Ok(()),
            _ => Err("the workspace size overflows".into()),
        }
    }
    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        workspace(p).unwrap_or(usize::MAX)
    }
    fn deterministic(&self) -> bool {
        true
    }
    fn accuracy(&self) -> Accuracy {
        Accuracy::Exact
    }
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        default_cost_features(p, self.workspace_bytes(p))
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        inputs: &ConvBwdFilterInputs<'_>,
        out: &mut TensorMut<'_>,
        workspace: &mut [u8],
    ) -> Result<()> {
        // A batch of single pixels: one product over the batch.
        let p = &p.batch_folded().unwrap_or(*p);
        let x = inputs.x.f32("x")?;
        let dy = inputs.dy.f32("dy")?;
        let dw = out.f32("dw")?;
        let (xd, yd, wd) = (p.x(), p.y(), p.w());
        let (xs, ys) = (xd.strides(), yd.strides());
        let [n, _, oh, ow] = yd.dims();
        let (cg, kg) = (p.c_per_group(), p.k_per_group());
        let t = taps(p);
        let ks = wd.strides()[0];
        let (alpha, beta) = (inputs.alpha, inputs.beta);
        let positions = oh * ow;
        let mut carve = Carve::new(workspace);
        let path = path(p);
        let swap = swapped(p);
        let mut tbuf = if swap {
            Some(carve.take_aligned::<f32>(t * kg, ALIGN)?)
        } else {
            None
        };
        let (col, dyb) = match path {
            Path::Blocks { nb, rows } => (
                carve.take_aligned::<f32>(t * nb * rows * ow, ALIGN)?,
                carve.take_aligned::<f32>(kg * nb * rows * ow, ALIGN)?,
            ),
            _ => (&mut [][..], &mut [][..]),
        };
        for g in 0..p.groups() {
            let c_out = &mut dw[g * kg * ks..];
            // C (taps × K/g): element (t, k) at k·ks + t.
            match path {
                Path::Batch | Path::PerImage => {
                    let (images, depth) = if path == Path::Batch {
                        (1, n * positions)
                    } else {
                        (n, positions)
                    };
                    for b in 0..images {
                        let a = &x[b * xs[0] + g * cg * xs[1]..];
                        let bm = &dy[b * ys[0] + g * kg * ys[1]..];
                        product(
                            ctx,
                            (t, kg, depth),
                            (a, [xs[1], xs[3]]),
                            (bm, [ys[1], ys[3]]),
                            b == 0,
                            (alpha, beta),
                            ks,
                            c_out,
                            tbuf.as_deref_mut(),
                        )?;
                    }
                }
                Path::Blocks { nb, rows } => {
                    let blocks = (0..n).step_by(nb).flat_map(|n0| {
                        (0..oh).step_by(rows).map(move |i0| Block {
                            n0,
                            nb: nb.min(n - n0),
                            i0,
                            rows: rows.min(oh - i0),
                        })
                    });
                    for (bi, bk) in blocks.enumerate() {
                        let jj = bk.nb * bk.rows * ow;
                        im2col(ctx, p, x, g, bk, col);
                        copy_dy(p, dy, g, bk, dyb);
                        product(
                            ctx,
                            (t, kg, jj),
                            (&col[..t * jj], [jj, 1]),
                            (&dyb[..kg * jj], [jj, 1]),
                            bi == 0,
                            (alpha, beta),
                            ks,
                            c_out,
                            tbuf.as_deref_mut(),
                        )?;
                    }
                }
            }
            if let Some(tb) = tbuf.as_deref() {
                for kl in 0..kg {
                    let row = &mut c_out[kl * ks..][..t];
                    for (tt, d) in row.iter_mut().enumerate() {
                        *d = scaled(tb[tt * kg + kl], *d, alpha, beta);
                    }
                }
            }
        }
        Ok(())
    }
}
