//! `direct` backward data: dx\[n, c, h, w\] = Σ over k, r, s of dy\[n, k, p, q\] · w\[k, c, r, s\]
//! where h = p·sh − pt + r·dh and w = q·sw − pl + s·dw, by its definition (the gather form).
//!
//! - **Workspace:** none. **Declines:** nothing of its operation; the end of the backward
//!   data fallback chain.
//! - **Deterministic:** each dx element is summed by one thread in a fixed order (k outer,
//!   kernel taps inner), whatever the thread count.
//!
//! How: one (image, channel) plane of dx per work item; a plane's rows in chunks of
//! [`CHUNK`] columns accumulated in registers on the stack, each kernel tap adding one row of
//! dy (contiguous for stride 1, so the loop vectorises).

use crate::runtime::parallel::for_each;

use crate::conv::{default_cost_features, ExecContext};
use crate::desc::{ConvMode, ConvProblem, OpKind};
use crate::error::Result;
use crate::op::conv_bwd::{check_problem, scaled};
use crate::op::{
    Accuracy, Algorithm, ConvBackwardData, ConvBwdDataInputs, TensorMut, COST_FEATURES,
};
use crate::runtime::parallel::SharedOut;

/// Columns of one output row accumulated at a time.
const CHUNK: usize = 64;

/// The direct backward-data convolution.
pub struct DirectBwdData;

impl Algorithm<ConvBackwardData> for DirectBwdData {
    fn name(&self) -> &'static str {
        "direct"
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_problem(p, OpKind::ConvBackwardData)
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
        inputs: &ConvBwdDataInputs<'_>,
        out: &mut TensorMut<'_>,
        _workspace: &mut [u8],
    ) -> Result<()> {
        let dy = inputs.dy.f32("dy")?;
        let w = inputs.w.f32("w")?;
        let dx = SharedOut::new(out.f32("dx")?);
        let [n, c, _, _] = p.x().dims();
        let plane = |i: usize| plane(p, dy, w, &dx, i / c, i % c, inputs.alpha, inputs.beta);
        if ctx.threads > 1 {
            for_each(ctx, n * c, plane);
        } else {
            (0..n * c).for_each(plane);
        }
        Ok(())
    }
}

/// Computes the dx plane of image `b`, channel `c`.
#[allow(clippy::too_many_arguments)]
fn plane(
    p: &ConvProblem,
    dy: &[f32],
    w: &[f32],
    dx: &SharedOut<'_>,
    b: usize,
    c: usize,
    alpha: f32,
    beta: f32,
) {
    let (xd, wd, yd, cd) = (p.x(), p.w(), p.y(), p.conv());
    let [_, _, h, wi] = xd.dims();
    let [_, _, oh, ow] = yd.dims();
    let [_, cg, r, s] = wd.dims();
    let kg = p.k_per_group();
    let (g, cl) = (c / cg, c % cg);
    let pad = cd.padding();
    let [sh, sw] = cd.stride().map(|v| v as i64);
    let [dh, dw] = cd.dilation().map(|v| v as i64);
    let qs = yd.strides()[3];
    let mut acc = [0.0f32; CHUNK];
    for i in 0..h {
        for j0 in (0..wi).step_by(CHUNK) {
            let len = CHUNK.min(wi - j0);
            let acc = &mut acc[..len];
            acc.fill(0.0);
            for kl in 0..kg {
                let ko = g * kg + kl;
                for u in 0..r {
                    let num = i as i64 + pad.top - u as i64 * dh;
                    if num < 0 || num % sh != 0 || num / sh >= oh as i64 {
                        continue;
                    }
                    let row = yd.offset(b, ko, (num / sh) as usize, 0);
                    for v in 0..s {
                        let (fu, fv) = match cd.mode() {
                            ConvMode::CrossCorrelation => (u, v),
                            ConvMode::Convolution => (r - 1 - u, s - 1 - v),
                        };
                        let wv = w[wd.offset(ko, cl, fu, fv)];
                        // Column j reads q = (j + pl − v·dw) / sw when that divides.
                        let shift = pad.left - v as i64 * dw;
                        if sw == 1 {
                            let lo = (-shift - j0 as i64).clamp(0, len as i64) as usize;
                            let hi = (ow as i64 - shift - j0 as i64).clamp(0, len as i64) as usize;
                            for (jj, a) in acc.iter_mut().enumerate().take(hi).skip(lo) {
                                let q = (j0 + jj) as i64 + shift;
                                *a += wv * dy[row + q as usize * qs];
                            }
                        } else {
                            for (jj, a) in acc.iter_mut().enumerate() {
                                let num = (j0 + jj) as i64 + shift;
                                if num >= 0 && num % sw == 0 && num / sw < ow as i64 {
                                    *a += wv * dy[row + (num / sw) as usize * qs];
                                }
                            }
                        }
                    }
                }
            }
            for (jj, &a) in acc.iter().enumerate() {
                let o = xd.offset(b, c, i, j0 + jj);
                // SAFETY: plane (b, c) is written by this work item alone; distinct
                // coordinates of a descriptor never share an element.
                unsafe {
                    let old = if beta == 0.0 { 0.0 } else { dx.read(o) };
                    dx.write(o, scaled(a, old, alpha, beta));
                }
            }
        }
    }
}
