//! `direct` backward bias: db\[k\] = alpha · Σ over n, h, w of dy\[n, k, h, w\] + beta · db\[k\].
//!
//! - **Workspace:** none. **Declines:** nothing of its operation.
//! - **Deterministic:** each channel is summed by one thread in a fixed order (images, rows,
//!   then interleaved partial sums along a row), whatever the thread count.

use crate::runtime::parallel::for_each_chunk;

use super::bwd_filter::LANES;
use crate::conv::ExecContext;
use crate::desc::{ConvProblem, OpKind};
use crate::error::Result;
use crate::op::conv_bwd::{check_problem, scaled};
use crate::op::{
    Accuracy, Algorithm, ConvBackwardBias, ConvBwdBiasInputs, TensorMut, COST_FEATURES,
};

/// The direct bias gradient.
pub struct DirectBwdBias;

/// Σ over n, h, w of dy\[n, k, h, w\], in a fixed order.
fn channel_sum(p: &ConvProblem, dy: &[f32], k: usize) -> f32 {
    let yd = p.y();
    let [n, _, oh, ow] = yd.dims();
    let qs = yd.strides()[3];
    let mut acc = [0.0f32; LANES];
    for b in 0..n {
        for i in 0..oh {
            let row = yd.offset(b, k, i, 0);
            for j in 0..ow {
                acc[j % LANES] += dy[row + j * qs];
            }
        }
    }
    let mut s = 0.0;
    for v in acc {
        s += v;
    }
    s
}

impl Algorithm<ConvBackwardBias> for DirectBwdBias {
    fn name(&self) -> &'static str {
        "direct"
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_problem(p, OpKind::ConvBackwardBias)
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
    /// A fixed cost and the MB of dy read.
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        let mut f = [0.0; COST_FEATURES];
        f[0] = 1.0;
        f[2] = (p.y().elements() * p.y().dtype().size()) as f64 / 1e6;
        f
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        inputs: &ConvBwdBiasInputs<'_>,
        out: &mut TensorMut<'_>,
        _workspace: &mut [u8],
    ) -> Result<()> {
        let dy = inputs.dy.f32("dy")?;
        let db = &mut out.f32("db")?[..p.w().k()];
        let (alpha, beta) = (inputs.alpha, inputs.beta);
        let one = |(k, d): (usize, &mut f32)| *d = scaled(channel_sum(p, dy, k), *d, alpha, beta);
        if ctx.threads > 1 && p.y().elements() >= 1 << 16 {
            for_each_chunk(ctx, db, 1, |k, d| one((k, &mut d[0])));
        } else {
            db.iter_mut().enumerate().for_each(one);
        }
        Ok(())
    }
}
