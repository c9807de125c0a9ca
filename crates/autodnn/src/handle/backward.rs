//! The backward convolutions' conveniences: the generic verbs for [`ConvBackwardData`],
//! [`ConvBackwardFilter`] and [`ConvBackwardBias`] with f32 slices. Each takes the forward
//! problem (or one already turned with [`ConvProblem::for_op`]) and turns it to its operation.

use super::Handle;
use crate::desc::{ConvProblem, OpKind};
use crate::error::Result;
use crate::op::{
    ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvBwdBiasInputs, ConvBwdDataInputs,
    ConvBwdFilterInputs, TensorMut,
};
use crate::select::RunReport;

impl Handle {
    /// dx = alpha · conv_bwd_data(dy, w) + beta · dx with the algorithm named `algo` of the
    /// backward-data registry, its workspace from the handle (within the budget). dx is not
    /// read when beta = 0.
    ///
    /// # Examples
    /// ```
    /// use autodnn::{Handle, Layout, ProblemSpec};
    /// let p = ProblemSpec::parse("ic2oc3ih5kh3ph1")?.to_problem(Layout::Nchw)?;
    /// let dy = vec![1.0; p.y().span()];
    /// let w = vec![1.0; p.w().elements()];
    /// let mut dx = vec![f32::NAN; p.x().span()];
    /// Handle::new()?.conv_backward_data(&p, "direct", &dy, &w, &mut dx, 1.0, 0.0)?;
    /// // The centre pixel of each input channel sees all 3 output channels through all 9 taps.
    /// assert_eq!(dx[2 * 5 + 2], 27.0);
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Handle::run_algorithm`].
    #[allow(clippy::too_many_arguments)]
    pub fn conv_backward_data(
        &self,
        problem: &ConvProblem,
        algo: &str,
        dy: &[f32],
        w: &[f32],
        dx: &mut [f32],
        alpha: f32,
        beta: f32,
    ) -> Result<()> {
        let p = problem.for_op(OpKind::ConvBackwardData)?;
        let inputs = ConvBwdDataInputs::new(dy, w).scaled(alpha, beta);
        self.run_algorithm::<ConvBackwardData>(&p, algo, &inputs, &mut TensorMut::F32(dx), None)
    }

    /// dw = alpha · conv_bwd_filter(x, dy) + beta · dw with the algorithm named `algo` of
    /// the backward-filter registry. dw is not read when beta = 0.
    ///
    /// # Errors
    /// As [`Handle::run_algorithm`].
    #[allow(clippy::too_many_arguments)]
    pub fn conv_backward_filter(
        &self,
        problem: &ConvProblem,
        algo: &str,
        x: &[f32],
        dy: &[f32],
        dw: &mut [f32],
        alpha: f32,
        beta: f32,
    ) -> Result<()> {
        let p = problem.for_op(OpKind::ConvBackwardFilter)?;
        let inputs = ConvBwdFilterInputs::new(x, dy).scaled(alpha, beta);
        self.run_algorithm::<ConvBackwardFilter>(&p, algo, &inputs, &mut TensorMut::F32(dw), None)
    }

    /// db\[k\] = alpha · Σ over n, h, w of dy\[n, k, h, w\] + beta · db\[k\] with the
    /// algorithm named `algo` of the backward-bias registry. db is not read when beta = 0.
    ///
    /// # Errors
    /// As [`Handle::run_algorithm`].
    pub fn conv_backward_bias(
        &self,
        problem: &ConvProblem,
        algo: &str,
        dy: &[f32],
        db: &mut [f32],
        alpha: f32,
        beta: f32,
    ) -> Result<()> {
        let p = problem.for_op(OpKind::ConvBackwardBias)?;
        let inputs = ConvBwdBiasInputs::new(dy).scaled(alpha, beta);
        self.run_algorithm::<ConvBackwardBias>(&p, algo, &inputs, &mut TensorMut::F32(db), None)
    }

    /// [`Handle::conv_backward_data`] with the algorithm chosen by the handle's policy and
    /// the fallback chain ([`Handle::run`]).
    ///
    /// # Examples
    /// ```
    /// use autodnn::{Handle, Layout, ProblemSpec};
    /// let p = ProblemSpec::parse("mb2ic8ih14oc16kh3ph1")?.to_problem(Layout::Nchw)?;
    /// let h = Handle::new()?;
    /// let (x, w) = (vec![1.0f32; p.x().span()], vec![1.0f32; p.w().elements()]);
    /// let dy = vec![1.0f32; p.y().span()];
    /// let mut dx = vec![0.0f32; p.x().span()];
    /// let mut dw = vec![0.0f32; p.w().elements()];
    /// h.conv_backward_data_auto(&p, &dy, &w, &mut dx, 1.0, 0.0)?; // dx = conv_bwd_data(dy, w)
    /// h.conv_backward_filter_auto(&p, &x, &dy, &mut dw, 1.0, 1.0)?; // dw += conv_bwd_filter(x, dy)
    /// // An interior pixel of dx sees all 16 output channels through all 9 taps. (The
    /// // selection may pick a Winograd algorithm: equal within its documented bound.)
    /// assert!((dx[5 * 14 + 5] - 144.0).abs() < 1e-3);
    /// // Each filter tap sums one image row band: the centre tap sees every pixel of both images.
    /// assert!((dw[4] - 2.0 * 14.0 * 14.0).abs() < 1e-3);
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Handle::run`].
    #[allow(clippy::too_many_arguments)]
    pub fn conv_backward_data_auto(
        &self,
        problem: &ConvProblem,
        dy: &[f32],
        w: &[f32],
        dx: &mut [f32],
        alpha: f32,
        beta: f32,
    ) -> Result<RunReport> {
        let p = problem.for_op(OpKind::ConvBackwardData)?;
        let inputs = ConvBwdDataInputs::new(dy, w).scaled(alpha, beta);
        self.run::<ConvBackwardData>(&p, &inputs, &mut TensorMut::F32(dx))
    }

    /// [`Handle::conv_backward_filter`] with the algorithm chosen by the handle's policy and
    /// the fallback chain ([`Handle::run`]).
    ///
    /// # Errors
    /// As [`Handle::run`].
    #[allow(clippy::too_many_arguments)]
    pub fn conv_backward_filter_auto(
        &self,
        problem: &ConvProblem,
        x: &[f32],
        dy: &[f32],
        dw: &mut [f32],
        alpha: f32,
        beta: f32,
    ) -> Result<RunReport> {
        let p = problem.for_op(OpKind::ConvBackwardFilter)?;
        let inputs = ConvBwdFilterInputs::new(x, dy).scaled(alpha, beta);
        self.run::<ConvBackwardFilter>(&p, &inputs, &mut TensorMut::F32(dw))
    }

    /// [`Handle::conv_backward_bias`] with the algorithm chosen by the handle's policy and
    /// the fallback chain ([`Handle::run`]).
    ///
    /// # Errors
    /// As [`Handle::run`].
    pub fn conv_backward_bias_auto(
        &self,
        problem: &ConvProblem,
        dy: &[f32],
        db: &mut [f32],
        alpha: f32,
        beta: f32,
    ) -> Result<RunReport> {
        let p = problem.for_op(OpKind::ConvBackwardBias)?;
        let inputs = ConvBwdBiasInputs::new(dy).scaled(alpha, beta);
        self.run::<ConvBackwardBias>(&p, &inputs, &mut TensorMut::F32(db))
    }
}
