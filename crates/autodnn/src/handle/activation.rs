//! The activation operator's verbs (cudnnActivationForward / Backward).

use super::Handle;
use crate::activation::Activation;
use crate::desc::TensorDesc;
use crate::error::Result;
use crate::layers::{activation, Blend};

impl Handle {
    /// y = alpha · act(x) + beta · y on the handle's threads: [`activation::forward`].
    ///
    /// # Errors
    /// As [`activation::forward`].
    pub fn activation_forward(
        &self,
        act: Activation,
        blend: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        y_desc: &TensorDesc,
        y: &mut [f32],
    ) -> Result<()> {
        activation::forward(&self.exec_context(), act, blend, x_desc, x, y_desc, y)
    }

    /// In place: [`activation::forward_in_place`].
    ///
    /// # Errors
    /// As [`activation::forward_in_place`].
    pub fn activation_forward_in_place(
        &self,
        act: Activation,
        blend: Blend,
        desc: &TensorDesc,
        y: &mut [f32],
    ) -> Result<()> {
        activation::forward_in_place(&self.exec_context(), act, blend, desc, y)
    }

    /// dx = alpha · dy · act'(x) + beta · dx: [`activation::backward`].
    ///
    /// # Errors
    /// As [`activation::backward`].
    #[allow(clippy::too_many_arguments)]
    pub fn activation_backward(
        &self,
        act: Activation,
        blend: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        dy_desc: &TensorDesc,
        dy: &[f32],
        dx_desc: &TensorDesc,
        dx: &mut [f32],
    ) -> Result<()> {
        let ctx = self.exec_context();
        activation::backward(&ctx, act, blend, x_desc, x, dy_desc, dy, dx_desc, dx)
    }

    /// dy and dx in one buffer: [`activation::backward_in_place`].
    ///
    /// # Errors
    /// As [`activation::backward_in_place`].
    pub fn activation_backward_in_place(
        &self,
        act: Activation,
        blend: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        grad_desc: &TensorDesc,
        grad: &mut [f32],
    ) -> Result<()> {
        let ctx = self.exec_context();
        activation::backward_in_place(&ctx, act, blend, x_desc, x, grad_desc, grad)
    }
}
