//! `direct` backward filter: dw\[k, c, r, s\] = Σ over n, p, q of
//! dy\[n, k, p, q\] · x\[n, g·C + c, p·sh − pt + r·dh, q·sw − pl + s·dw\], by its definition.
//!
//! - **Workspace:** none. **Declines:** nothing of its operation; the end of the backward
//!   filter fallback chain.
//! - **Deterministic:** each dw element is summed by one thread in a fixed order (images,
//!   rows, then [`LANES`] interleaved partial sums along a row, added in a fixed order),
//!   whatever the thread count.

use crate::runtime::parallel::for_each;

use crate::conv::{default_cost_features, ExecContext};
use crate::desc::{ConvMode, ConvProblem, OpKind};
use crate::error::Result;
use crate::op::conv_bwd::{check_problem, scaled};
use crate::op::{
    Accuracy, Algorithm, ConvBackwardFilter, ConvBwdFilterInputs, TensorMut, COST_FEATURES,
};
use crate::runtime::parallel::SharedOut;

/// Partial sums along a row (independent chains the compiler can keep in vector lanes).
pub(crate) const LANES: usize = 8;

/// Σ a\[i\]·b\[i·bs\] over `i`, in [`LANES`] interleaved partial sums added in a fixed order.
#[inline]
pub(crate) fn dot_strided(a: &[f32], b: &[f32], b0: usize, bs: usize) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = a.len() / LANES;
    for ch in 0..chunks {
        for (l, acc) in acc.iter_mut().enumerate() {
            let i = ch * LANES + l;
            *acc += a[i] * b[b0 + i * bs];
        }
    }
    for i in chunks * LANES..a.len() {
        acc[i % LANES] += a[i] * b[b0 + i * bs];
    }
    let mut s = 0.0;
    for v in acc {
        s += v;
    }
    s
}

/// The direct backward-filter convolution.
pub struct DirectBwdFilter;

impl Algorithm<ConvBackwardFilter> for DirectBwdFilter {
    fn name(&self) -> &'static str {
        "direct"
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_problem(p, OpKind::ConvBackwardFilter)
    }
    fn workspace_bytes(&self, _: &ConvProblem) -> usize {
        0
    }
    fn deterministic(&self) -> bool {
        true
    }
    fn accuracy(&self) -> Accuracy {
        Accuracy::Exact
    }
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        default_cost_features(p, 0)
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        inputs: &ConvBwdFilterInputs<'_>,
        out: &mut TensorMut<'_>,
        _workspace: &mut [u8],
    ) -> Result<()> {
        let x = inputs.x.f32("x")?;
        let dy = inputs.dy.f32("dy")?;
        let dw = SharedOut::new(out.f32("dw")?);
        let [k, cg, _, _] = p.w().dims();
        let item = |i: usize| filter_row(p, x, dy, &dw, i / cg, i % cg, inputs.alpha, inputs.beta);
        if ctx.threads > 1 {
            for_each(ctx, k * cg, item);
        } else {
            (0..k * cg).for_each(item);
        }
        Ok(())
    }
}

/// Computes dw\[ko, cl, .., ..\].
#[allow(clippy::too_many_arguments)]
fn filter_row(
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    dw: &SharedOut<'_>,
    ko: usize,
    cl: usize,
    alpha: f32,
    beta: f32,
) {
    let (xd, wd, yd, cd) = (p.x(), p.w(), p.y(), p.conv());
    let [n, _, h, wi] = xd.dims();
    let [_, _, oh, ow] = yd.dims();
    let [_, cg, r, s] = wd.dims();
    let g = ko / p.k_per_group();
    let c = g * cg + cl;
    let pad = cd.padding();
    let [sh, sw] = cd.stride().map(|v| v as i64);
    let [dh, dwl] = cd.dilation().map(|v| v as i64);
    let (qs, xs) = (yd.strides()[3], xd.strides()[3]);
    let mut row = [0.0f32; 256];
    for u in 0..r {
        for v in 0..s {
            // Output columns whose input column j·sw − pl + v·dw is inside.
            let shift = v as i64 * dwl - pad.left;
            let (j_lo, j_hi) = crate::conv::inside_columns(shift, sw, wi, ow);
            let (j_lo, j_hi) = (j_lo as i64, j_hi as i64);
            let mut acc = 0.0f32;
            for b in 0..n {
                for i in 0..oh {
                    let ih = i as i64 * sh - pad.top + u as i64 * dh;
                    if ih < 0 || ih >= h as i64 || j_lo >= j_hi {
                        continue;
                    }
                    let yrow = yd.offset(b, ko, i, 0);
                    let x0 =
                        xd.offset(b, c, ih as usize, 0) as i64 + (j_lo * sw + shift) * xs as i64;
                    for j0 in (j_lo..j_hi).step_by(row.len()) {
                        let len = (row.len() as i64).min(j_hi - j0) as usize;
                        for (t, e) in row[..len].iter_mut().enumerate() {
                            *e = dy[yrow + (j0 as usize + t) * qs];
                        }
                        let xb = (x0 + (j0 - j_lo) * sw * xs as i64) as usize;
                        // A lone column never steps: its step may not fit (stride × stride).
                        let step = (sw as usize).saturating_mul(xs);
                        acc += dot_strided(&row[..len], x, xb, step);
                    }
                }
            }
            let (fu, fv) = match cd.mode() {
                ConvMode::CrossCorrelation => (u, v),
                ConvMode::Convolution => (r - 1 - u, s - 1 - v),
            };
            let o = wd.offset(ko, cl, fu, fv);
            // SAFETY: the filter row (ko, cl) is written by this work item alone.
            unsafe {
                let old = if beta == 0.0 { 0.0 } else { dw.read(o) };
                dw.write(o, scaled(acc, old, alpha, beta));
            }
        }
    }
}
