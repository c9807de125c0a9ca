//! `gemm` backward data (cuDNN's BWD_DATA_ALGO_1): per image and group, blocks of output
//! rows at a time, the column buffer col (C/g·R·S × positions) = Wᵀ · dY_block in one GEMM
//! (dy read in place), then col2im adds each column's taps into dx. Every stride, dilation
//! and padding, with no split into residues.
//!
//! - **1x1, stride 1, no padding:** the column buffer is dx itself: one GEMM per image and
//!   group, straight into dx with alpha and beta. On small images (at most
//!   [`PACK_ONCE_POSITIONS`] per image) of a batch, the filter is packed once per group into
//!   the workspace and every image's GEMM reads its panels in place: packed per image, it
//!   took a third of the time of MobileNet's 1024-channel layer at 7x7.
//! - **Workspace:** the column buffer of one block (about [`TARGET_POSITIONS`] positions,
//!   at most [`MAX_COL_BYTES`] unless one output row needs more); for 1x1, one group's
//!   packed filter where it is packed once (else none).
//! - **Deterministic:** the GEMM's elements do not depend on the thread count, and col2im
//!   gives each input channel to one thread, adding its taps in a fixed order, blocks in
//!   order.

use crate::runtime::parallel::for_each;

use crate::conv::{default_cost_features, ExecContext};
use crate::desc::{ConvMode, ConvProblem, OpKind};
use crate::error::{Error, Result};
use crate::gemm::{gemm_engine, gemm_in_context, Epilogue, GemmDesc, StridedMatrix};
use crate::op::conv_bwd::{check_problem, scaled};
use crate::op::{
    Accuracy, Algorithm, ConvBackwardData, ConvBwdDataInputs, TensorMut, COST_FEATURES,
};
use crate::runtime::parallel::SharedOut;
use crate::runtime::workspace::Carve;

use super::packed_filter::{pack_a_once, packed_a_len_bound, Filter, PACK_ONCE_POSITIONS};

/// Positions a block aims for.
pub(crate) const TARGET_POSITIONS: usize = 1024;
/// Largest column buffer unless one output row needs more.
pub(crate) const MAX_COL_BYTES: usize = 8 << 20;

/// The `gemm` backward-data algorithm.
pub(crate) struct GemmBwdData;

pub(crate) static GEMM_BWD_DATA: GemmBwdData = GemmBwdData;

fn taps(p: &ConvProblem) -> usize {
    p.c_per_group() * p.w().r() * p.w().s()
}

/// 1x1, stride 1, no padding, x's and dy's positions flat: dx of one image and group is the
/// GEMM's output as it is.
fn dx_is_col(p: &ConvProblem) -> bool {
    let c = p.conv();
    let pad = c.padding();
    let (xd, yd) = (p.x(), p.y());
    let (xs, ys) = (xd.strides(), yd.strides());
    p.w().r() * p.w().s() == 1
        && c.stride() == [1, 1]
        && [pad.top, pad.bottom, pad.left, pad.right] == [0; 4]
        && xs[2] == xd.w() * xs[3]
        && ys[2] == yd.w() * ys[3]
}

/// A 1x1 problem whose Wᵀ is packed once for every image: a batch of small images.
fn packs_once(p: &ConvProblem) -> bool {
    let yd = p.y();
    dx_is_col(p) && yd.n() >= 2 && yd.h().saturating_mul(yd.w()) <= PACK_ONCE_POSITIONS
}

/// Output rows per block: whole rows when dy's rows are one stride apart, else one.
fn block_rows(p: &ConvProblem) -> usize {
    let yd = p.y();
    let [_, _, oh, ow] = yd.dims();
    let ys = yd.strides();
    if ys[2] != ow * ys[3] {
        return 1;
    }
    let by_bytes = MAX_COL_BYTES / taps(p).saturating_mul(ow).saturating_mul(4).max(1);
    (TARGET_POSITIONS.div_ceil(ow)).min(by_bytes).clamp(1, oh)
}

/// Adds alpha · col into dx for image `b`, group `g`, output rows `i0 .. i0 + rows`; one
/// input channel per work item.
#[allow(clippy::too_many_arguments)]
fn col2im(
    ctx: &ExecContext<'_>,
    p: &ConvProblem,
    col: &[f32],
    dx: &SharedOut<'_>,
    (b, g, i0, rows): (usize, usize, usize, usize),
    alpha: f32,
) {
    let (xd, cd) = (p.x(), p.conv());
    let [_, _, h, wi] = xd.dims();
    let ow = p.y().w();
    let (r, s) = (p.w().r(), p.w().s());
    let cg = p.c_per_group();
    let jj = rows * ow;
    let pad = cd.padding();
    let [sh, sw] = cd.stride().map(|v| v as i64);
    let [dh, dw] = cd.dilation().map(|v| v as i64);
    let conv_mode = cd.mode() == ConvMode::Convolution;
    let xs3 = xd.strides()[3];
    let one = |c: usize| {
        for fr in 0..r {
            for fs in 0..s {
                // The filter-row index of (c, fr, fs): filters are packed.
                let t = p.w().offset(0, c, fr, fs);
                let (u, v) = if conv_mode {
                    (r - 1 - fr, s - 1 - fs)
                } else {
                    (fr, fs)
                };
                let shift = v as i64 * dw - pad.left;
                let (j_lo, j_hi) = crate::conv::inside_columns(shift, sw, wi, ow);
                if j_lo >= j_hi {
                    continue;
                }
                for il in 0..rows {
                    let ih = (i0 + il) as i64 * sh - pad.top + u as i64 * dh;
                    if ih < 0 || ih >= h as i64 {
                        continue;
                    }
                    let src = &col[t * jj + il * ow..][..ow];
                    let base = xd.offset(b, g * cg + c, ih as usize, 0) as i64;
                    // A lone column never steps: its step may not fit.
                    let step = (sw as usize).saturating_mul(xs3);
                    let first = (base + (j_lo as i64 * sw + shift) * xs3 as i64) as usize;
                    for (k, &v) in src[j_lo..j_hi].iter().enumerate() {
                        let o = first + k * step;
                        // SAFETY: channel g·C/g + c of image b is written by this work
                        // item alone.
                        unsafe { dx.write(o, dx.read(o) + alpha * v) };
                    }
                }
            }
        }
    };
    if ctx.threads > 1 && cg > 1 && col.len() >= 1 << 14 {
        for_each(ctx, cg, one);
    } else {
        (0..cg).for_each(one);
    }
}

/// The column buffer of one block (none when dx is the column buffer); `None` when the
/// size overflows.
fn workspace(p: &ConvProblem) -> Option<usize> {
    let p = &p.batch_folded().unwrap_or(*p);
    if packs_once(p) {
        return packed_a_len_bound(taps(p), p.k_per_group())?
            .checked_mul(4)?
            .checked_add(64);
    }
    if dx_is_col(p) {
        return Some(0);
    }
    taps(p)
        .checked_mul(block_rows(p))?
        .checked_mul(p.y().w())?
        .checked_mul(4)?
        .checked_add(64)
}

impl Algorithm<ConvBackwardData> for GemmBwdData {
    fn name(&self) -> &'static str {
        "gemm"
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_problem(p, OpKind::ConvBackwardData)?;
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
        inputs: &ConvBwdDataInputs<'_>,
        out: &mut TensorMut<'_>,
        workspace: &mut [u8],
    ) -> Result<()> {
        // A batch of single pixels: one product over the batch.
        let p = &p.batch_folded().unwrap_or(*p);
        let dy = inputs.dy.f32("dy")?;
        let w = inputs.w.f32("w")?;
        let dx = out.f32("dx")?;
        let (xd, yd, wd) = (p.x(), p.y(), p.w());
        let [n, _, h, wi] = xd.dims();
        let [_, _, oh, ow] = yd.dims();
        let ys = yd.strides();
        let (cg, kg) = (p.c_per_group(), p.k_per_group());
        let t = taps(p);
        let ks = wd.strides()[0];
        let rows = block_rows(p);
        let (alpha, beta) = (inputs.alpha, inputs.beta);
        let epi = Epilogue::new();
        if dx_is_col(p) {
            // 1x1, stride 1, no padding: the column buffer is dx itself (col2im would copy).
            let xs = xd.strides();
            let d = GemmDesc::new(t, oh * ow, kg)
                .with_a_strides(1, ks)
                .with_b_strides(ys[1], ys[3])
                .with_c_strides(xs[1], xs[3]);
            // On a batch of small images Wᵀ is packed once per group and read in place by
            // every image's GEMM (in the frame of C = dx's channels × positions: with W as
            // B in the transposed frame, MobileNet's 1024-channel layer at 7x7 took 25% more).
            let mut once = if packs_once(p) {
                let len = packed_a_len_bound(t, kg).ok_or_else(|| Error::Overflow {
                    field: "workspace".into(),
                    detail: "the packed filter".into(),
                })?;
                Some(Carve::new(workspace).take_aligned::<f32>(len, 64)?)
            } else {
                None
            };
            let features = ctx.features;
            let inside = |what| Error::bad(what, "view", "outside its buffer");
            for g in 0..p.groups() {
                let wg = &w[g * kg * ks..];
                let packed = match once.as_deref_mut() {
                    Some(buf) => {
                        let wt = StridedMatrix::new(wg, t, kg, 1, ks)
                            .ok_or_else(|| inside("w"))?
                            .for_features(features);
                        Some(Filter::Packed(pack_a_once(ctx, &wt, t, kg, buf)?))
                    }
                    None => None,
                };
                for b in 0..n {
                    let dy = &dy[yd.offset(b, g * kg, 0, 0)..];
                    let c = &mut dx[xd.offset(b, g * cg, 0, 0)..];
                    match &packed {
                        Some(a) => {
                            let bm = StridedMatrix::new(dy, kg, oh * ow, ys[1], ys[3])
                                .ok_or_else(|| inside("dy"))?
                                .for_features(features);
                            let cs = [xs[1], xs[3]];
                            gemm_engine(ctx, t, oh * ow, kg, alpha, a, &bm, beta, c, cs, &epi)?;
                        }
                        None => gemm_in_context(ctx, &d, alpha, wg, dy, beta, c, &epi)?,
                    }
                }
            }
            return Ok(());
        }
        let col = Carve::new(workspace).take_aligned::<f32>(t * rows * ow, 64)?;
        for b in 0..n {
            for g in 0..p.groups() {
                // dx = beta · dx over the group's channels, then blocks add into it.
                for c in g * cg..(g + 1) * cg {
                    for i in 0..h {
                        for j in 0..wi {
                            let o = xd.offset(b, c, i, j);
                            dx[o] = scaled(0.0, dx[o], 1.0, beta);
                        }
                    }
                }
                let a = &w[g * kg * ks..];
                for i0 in (0..oh).step_by(rows) {
                    let rb = rows.min(oh - i0);
                    let jj = rb * ow;
                    let bm = &dy[yd.offset(b, g * kg, i0, 0)..];
                    // col (taps × positions) = Wᵀ (taps × K/g) · dY (K/g × positions).
                    let d = GemmDesc::new(t, jj, kg)
                        .with_a_strides(1, ks)
                        .with_b_strides(ys[1], ys[3])
                        .with_c_strides(jj, 1);
                    gemm_in_context(ctx, &d, 1.0, a, bm, 0.0, &mut col[..t * jj], &epi)?;
                    let out = SharedOut::new(dx);
                    col2im(ctx, p, &col[..t * jj], &out, (b, g, i0, rb), alpha);
                }
            }
        }
        Ok(())
    }
}
