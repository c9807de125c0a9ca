//! The pooling operator's verbs (cudnnPoolingForward / Backward).

use super::Handle;
use crate::desc::TensorDesc;
use crate::error::Result;
use crate::layers::{pool, pool::PoolDesc, Blend};

impl Handle {
    /// y = alpha · pool(x) + beta · y on the handle's threads: [`pool::forward`].
    ///
    /// # Errors
    /// As [`pool::forward`].
    pub fn pooling_forward(
        &self,
        desc: &PoolDesc,
        blend: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        y_desc: &TensorDesc,
        y: &mut [f32],
    ) -> Result<()> {
        pool::forward(&self.exec_context(), desc, blend, x_desc, x, y_desc, y)
    }

    /// dx = alpha · pool_bwd(dy) + beta · dx (max recomputes its choice from x):
    /// [`pool::backward`].
    ///
    /// # Errors
    /// As [`pool::backward`].
    #[allow(clippy::too_many_arguments)]
    pub fn pooling_backward(
        &self,
        desc: &PoolDesc,
        blend: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        dy_desc: &TensorDesc,
        dy: &[f32],
        dx_desc: &TensorDesc,
        dx: &mut [f32],
    ) -> Result<()> {
        let ctx = self.exec_context();
        pool::backward(&ctx, desc, blend, x_desc, x, dy_desc, dy, dx_desc, dx)
    }

    /// Max pooling forward that records each window's choice for the backward:
    /// [`pool::forward_with_indices`].
    ///
    /// # Errors
    /// As [`pool::forward_with_indices`].
    #[allow(clippy::too_many_arguments)]
    pub fn pooling_forward_with_indices(
        &self,
        desc: &PoolDesc,
        blend: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        y_desc: &TensorDesc,
        y: &mut [f32],
        indices: &mut [u32],
    ) -> Result<()> {
        let ctx = self.exec_context();
        pool::forward_with_indices(&ctx, desc, blend, x_desc, x, y_desc, y, indices)
    }

    /// Max pooling backward from the forward's recorded choices (x not read):
    /// [`pool::backward_with_indices`].
    ///
    /// # Errors
    /// As [`pool::backward_with_indices`].
    #[allow(clippy::too_many_arguments)]
    pub fn pooling_backward_with_indices(
        &self,
        desc: &PoolDesc,
        blend: Blend,
        dy_desc: &TensorDesc,
        dy: &[f32],
        indices: &[u32],
        dx_desc: &TensorDesc,
        dx: &mut [f32],
    ) -> Result<()> {
        let ctx = self.exec_context();
        pool::backward_with_indices(&ctx, desc, blend, dy_desc, dy, indices, dx_desc, dx)
    }
}
