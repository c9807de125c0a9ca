//! The softmax operator's verbs (cudnnSoftmaxForward / Backward).

use super::Handle;
use crate::desc::TensorDesc;
use crate::error::Result;
use crate::layers::softmax::{self, SoftmaxAlgorithm, SoftmaxMode};
use crate::layers::Blend;

impl Handle {
    /// y = alpha · softmax(x) + beta · y (or log-softmax) on the handle's threads:
    /// [`softmax::forward`].
    ///
    /// # Errors
    /// As [`softmax::forward`].
    #[allow(clippy::too_many_arguments)]
    pub fn softmax_forward(
        &self,
        algo: SoftmaxAlgorithm,
        mode: SoftmaxMode,
        blend: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        y_desc: &TensorDesc,
        y: &mut [f32],
    ) -> Result<()> {
        let ctx = self.exec_context();
        softmax::forward(&ctx, algo, mode, blend, x_desc, x, y_desc, y)
    }

    /// dx from the forward's y and dy: [`softmax::backward`].
    ///
    /// # Errors
    /// As [`softmax::backward`].
    #[allow(clippy::too_many_arguments)]
    pub fn softmax_backward(
        &self,
        algo: SoftmaxAlgorithm,
        mode: SoftmaxMode,
        blend: Blend,
        y_desc: &TensorDesc,
        y: &[f32],
        dy_desc: &TensorDesc,
        dy: &[f32],
        dx_desc: &TensorDesc,
        dx: &mut [f32],
    ) -> Result<()> {
        let ctx = self.exec_context();
        softmax::backward(&ctx, algo, mode, blend, y_desc, y, dy_desc, dy, dx_desc, dx)
    }
}
