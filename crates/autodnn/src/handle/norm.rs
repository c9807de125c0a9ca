//! The normalization verbs (cudnnBatchNormalizationForwardInference / ForwardTraining /
//! Backward, and layer normalization forward and backward).

use super::Handle;
use crate::desc::TensorDesc;
use crate::error::Result;
use crate::layers::norm::{
    self, BatchNorm, LayerNorm, ParamGrads, RunningStats, SavedStats, SavedStatsMut,
};
use crate::layers::Blend;

impl Handle {
    /// Batch norm inference on the handle's threads: [`norm::forward_inference`].
    ///
    /// # Errors
    /// As [`norm::forward_inference`].
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_forward_inference(
        &self,
        bn: &BatchNorm,
        blend: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        y_desc: &TensorDesc,
        y: &mut [f32],
        gamma: &[f32],
        beta: &[f32],
        mean: &[f32],
        var: &[f32],
    ) -> Result<()> {
        let ctx = self.exec_context();
        norm::forward_inference(
            &ctx, bn, blend, x_desc, x, y_desc, y, gamma, beta, mean, var,
        )
    }

    /// Batch norm training forward: [`norm::forward_training`].
    ///
    /// # Errors
    /// As [`norm::forward_training`].
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_forward_training(
        &self,
        bn: &BatchNorm,
        blend: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        y_desc: &TensorDesc,
        y: &mut [f32],
        gamma: &[f32],
        beta: &[f32],
        running: Option<RunningStats<'_>>,
        saved: Option<SavedStatsMut<'_>>,
    ) -> Result<()> {
        let ctx = self.exec_context();
        norm::forward_training(
            &ctx, bn, blend, x_desc, x, y_desc, y, gamma, beta, running, saved,
        )
    }

    /// Batch norm training fused with a ReLU (and a residual add): [`norm::forward_training_relu`].
    ///
    /// # Errors
    /// As [`norm::forward_training_relu`].
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_forward_training_relu(
        &self,
        bn: &BatchNorm,
        x_desc: &TensorDesc,
        x: &[f32],
        z: Option<(&TensorDesc, &[f32])>,
        y_desc: &TensorDesc,
        y: &mut [f32],
        gamma: &[f32],
        beta: &[f32],
        running: Option<RunningStats<'_>>,
        saved: Option<SavedStatsMut<'_>>,
    ) -> Result<()> {
        let ctx = self.exec_context();
        norm::forward_training_relu(
            &ctx, bn, x_desc, x, z, y_desc, y, gamma, beta, running, saved,
        )
    }

    /// Batch norm backward through a fused ReLU (and residual add): [`norm::backward_relu`].
    ///
    /// # Errors
    /// As [`norm::backward_relu`].
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_backward_relu(
        &self,
        bn: &BatchNorm,
        blend_param: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        y_desc: &TensorDesc,
        y: &[f32],
        dy_desc: &TensorDesc,
        dy: &[f32],
        dz: Option<(&TensorDesc, &mut [f32])>,
        dx_desc: &TensorDesc,
        dx: &mut [f32],
        gamma: &[f32],
        saved: Option<SavedStats<'_>>,
        grads: ParamGrads<'_>,
    ) -> Result<()> {
        let ctx = self.exec_context();
        norm::backward_relu(
            &ctx,
            bn,
            blend_param,
            x_desc,
            x,
            y_desc,
            y,
            dy_desc,
            dy,
            dz,
            dx_desc,
            dx,
            gamma,
            saved,
            grads,
        )
    }

    /// Batch norm backward: [`norm::backward`].
    ///
    /// # Errors
    /// As [`norm::backward`].
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_backward(
        &self,
        bn: &BatchNorm,
        blend_data: Blend,
        blend_param: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        dy_desc: &TensorDesc,
        dy: &[f32],
        dx_desc: &TensorDesc,
        dx: &mut [f32],
        gamma: &[f32],
        saved: Option<SavedStats<'_>>,
        grads: ParamGrads<'_>,
    ) -> Result<()> {
        let ctx = self.exec_context();
        norm::backward(
            &ctx,
            bn,
            blend_data,
            blend_param,
            x_desc,
            x,
            dy_desc,
            dy,
            dx_desc,
            dx,
            gamma,
            saved,
            grads,
        )
    }

    /// Layer norm forward: [`norm::layer_norm_forward`].
    ///
    /// # Errors
    /// As [`norm::layer_norm_forward`].
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm_forward(
        &self,
        ln: &LayerNorm,
        blend: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        y_desc: &TensorDesc,
        y: &mut [f32],
        gamma: Option<&[f32]>,
        beta: Option<&[f32]>,
        saved: Option<SavedStatsMut<'_>>,
    ) -> Result<()> {
        let ctx = self.exec_context();
        norm::layer_norm_forward(&ctx, ln, blend, x_desc, x, y_desc, y, gamma, beta, saved)
    }

    /// Layer norm backward: [`norm::layer_norm_backward`].
    ///
    /// # Errors
    /// As [`norm::layer_norm_backward`].
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm_backward(
        &self,
        blend_data: Blend,
        blend_param: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        dy_desc: &TensorDesc,
        dy: &[f32],
        dx_desc: &TensorDesc,
        dx: &mut [f32],
        gamma: Option<&[f32]>,
        saved: SavedStats<'_>,
        grads: Option<ParamGrads<'_>>,
    ) -> Result<()> {
        let ctx = self.exec_context();
        norm::layer_norm_backward(
            &ctx,
            blend_data,
            blend_param,
            x_desc,
            x,
            dy_desc,
            dy,
            dx_desc,
            dx,
            gamma,
            saved,
            grads,
        )
    }
}
