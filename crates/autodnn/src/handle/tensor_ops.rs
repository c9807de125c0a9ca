//! The tensor operations' verbs (cudnnAddTensor, cudnnOpTensor, cudnnScaleTensor,
//! cudnnSetTensor, cudnnReduceTensor).

use super::Handle;
use crate::desc::TensorDesc;
use crate::error::Result;
use crate::layers::tensor_ops::{self, OpTensorDesc, ReduceOp};
use crate::layers::Blend;

impl Handle {
    /// C = alpha · A + beta · C, A broadcast into C: [`tensor_ops::add_tensor`].
    ///
    /// # Errors
    /// As [`tensor_ops::add_tensor`].
    pub fn add_tensor(
        &self,
        blend: Blend,
        a_desc: &TensorDesc,
        a: &[f32],
        c_desc: &TensorDesc,
        c: &mut [f32],
    ) -> Result<()> {
        tensor_ops::add_tensor(&self.exec_context(), blend, a_desc, a, c_desc, c)
    }

    /// C = op(alpha1 · A, alpha2 · B) + beta · C: [`tensor_ops::op_tensor`].
    ///
    /// # Errors
    /// As [`tensor_ops::op_tensor`].
    #[allow(clippy::too_many_arguments)]
    pub fn op_tensor(
        &self,
        desc: &OpTensorDesc,
        a_desc: &TensorDesc,
        a: &[f32],
        b_desc: &TensorDesc,
        b: &[f32],
        c_desc: &TensorDesc,
        c: &mut [f32],
    ) -> Result<()> {
        let ctx = self.exec_context();
        tensor_ops::op_tensor(&ctx, desc, a_desc, a, b_desc, b, c_desc, c)
    }

    /// y = alpha · y: [`tensor_ops::scale_tensor`].
    ///
    /// # Errors
    /// As [`tensor_ops::scale_tensor`].
    pub fn scale_tensor(&self, desc: &TensorDesc, y: &mut [f32], alpha: f32) -> Result<()> {
        tensor_ops::scale_tensor(&self.exec_context(), desc, y, alpha)
    }

    /// y = value: [`tensor_ops::set_tensor`].
    ///
    /// # Errors
    /// As [`tensor_ops::set_tensor`].
    pub fn set_tensor(&self, desc: &TensorDesc, y: &mut [f32], value: f32) -> Result<()> {
        tensor_ops::set_tensor(&self.exec_context(), desc, y, value)
    }

    /// C = alpha · reduce(A) + beta · C: [`tensor_ops::reduce_tensor`].
    ///
    /// # Errors
    /// As [`tensor_ops::reduce_tensor`].
    pub fn reduce_tensor(
        &self,
        op: ReduceOp,
        blend: Blend,
        a_desc: &TensorDesc,
        a: &[f32],
        c_desc: &TensorDesc,
        c: &mut [f32],
    ) -> Result<()> {
        tensor_ops::reduce_tensor(&self.exec_context(), op, blend, a_desc, a, c_desc, c)
    }
}
