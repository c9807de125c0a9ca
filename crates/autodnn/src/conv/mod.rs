//! Forward convolution algorithms.
//!
//! Each algorithm lives in its own file and implements [`ConvAlgorithm`]: a name, a predicate
//! that accepts a problem or declines it with a reason, an exact workspace size, a determinism
//! flag and a run function. [`registry`] holds them in one ordered list, most specialised
//! first; `direct` is always last: it accepts every valid problem and needs no workspace, so it
//! is the end of every fallback chain. Code that chooses among algorithms works over this list
//! and never names an algorithm.

mod depthwise;
mod direct;
mod fft;
mod gemm;
mod registry;
mod winograd;

pub use registry::{algorithms, find, names};

pub use crate::op::conv_fwd::{default_cost_features, AlgoWeights, ConvAlgorithm};
pub use crate::op::epilogue::{Activation, Epilogue, EpilogueArgs};
pub use crate::op::prepared::{PreparedWeights, Weights};
pub use crate::op::{Accuracy, COST_FEATURES};
pub use crate::runtime::ExecContext;
