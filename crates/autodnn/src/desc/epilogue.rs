//! The kind of epilogue a convolution problem has (see `op::epilogue` for its values).

use serde::{Deserialize, Serialize};

use crate::activation::Activation;

/// What follows the convolution: part of the problem (and of the tuning cache's key).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Epilogue {
    /// A bias per output channel is added.
    pub bias: bool,
    /// z is a separate residual tensor (laid out like y); otherwise z is y's prior contents.
    pub residual: bool,
    /// The activation applied last.
    pub act: Activation,
}

impl Epilogue {
    /// True when nothing follows the convolution (bias, residual and activation all absent).
    /// Scaling by alpha and beta may still apply.
    pub fn is_none(&self) -> bool {
        *self == Epilogue::default()
    }
}
