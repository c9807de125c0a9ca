//! The layout transform's verbs (cudnnTransformTensor) and the copy-bandwidth probe.

use super::Handle;
use crate::desc::TensorDesc;
use crate::error::Result;
use crate::layers::{transform, Blend};

impl Handle {
    /// y = alpha · x + beta · y between any two layouts of the same dimensions:
    /// [`transform::forward`].
    ///
    /// # Errors
    /// As [`transform::forward`].
    pub fn transform_tensor(
        &self,
        blend: Blend,
        x_desc: &TensorDesc,
        x: &[f32],
        y_desc: &TensorDesc,
        y: &mut [f32],
    ) -> Result<()> {
        transform::forward(&self.exec_context(), blend, x_desc, x, y_desc, y)
    }

    /// The median copy bandwidth in GB/s (read plus written bytes) of `reps` copies of
    /// `bytes` on the handle's threads: [`transform::copy_bandwidth`]
    /// ([`transform::DEFAULT_BANDWIDTH_BYTES`] is the usual size).
    ///
    /// # Errors
    /// As [`transform::copy_bandwidth`].
    pub fn copy_bandwidth(&self, bytes: usize, reps: usize) -> Result<f64> {
        transform::copy_bandwidth(&self.exec_context(), bytes, reps)
    }
}
