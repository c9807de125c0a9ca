//! Descriptors: what a tensor, a filter and a convolution look like, and the *problem* that
//! combines them.
//!
//! Every constructor validates its input and returns a typed [`Error`](crate::Error) that names
//! the bad field; a descriptor that exists is internally consistent, and every size derived
//! from it (element counts, byte sizes, offsets) fits in `isize`.

mod conv;
mod epilogue;
mod filter;
mod problem;
mod tensor;

pub use conv::{ConvDesc, ConvMode, Padding};
pub use epilogue::Epilogue;
pub use filter::{FilterDesc, FilterLayout};
pub use problem::{ConvProblem, OpKind};
pub use tensor::{DataType, Layout, TensorDesc};
