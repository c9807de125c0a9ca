//! # autodnn
//!
//! Convolution (and, next, matrix multiplication) with *measured algorithm selection*, in the
//! spirit of cuDNN: every operation has several mathematically equivalent algorithms, none wins
//! everywhere, and autodnn offers them behind one interface of handles, descriptors,
//! workspace queries and algorithm lists.
//!
//! - [`TensorDesc`], [`FilterDesc`] and [`ConvDesc`] describe the data; [`ConvProblem`] ties
//!   them together, validated, and is the key everything else is keyed on.
//! - [`Handle`] owns worker threads, the instruction-set cap and the workspace budget, and
//!   runs algorithms from the [`conv`] registry.
//! - [`ProblemSpec`] reads and writes oneDNN benchdnn's problem strings; [`models`] holds
//!   built-in layer lists of real networks.
//! - [`reference`] is an f64 oracle for tests and checks.
//! - [`npy`] reads and writes float32 arrays in NumPy's `.npy` format.
//!
//! ```
//! use autodnn::{Handle, Layout, ProblemSpec};
//! let spec = ProblemSpec::parse("mb1ic16ih14oc32oh14kh3ph1")?;
//! let p = spec.to_problem(Layout::Nchw)?;
//! let handle = Handle::with_threads(2)?;
//! let x = vec![0.5f32; p.x().span()];
//! let w = vec![0.25f32; p.w().elements()];
//! let mut y = vec![0.0f32; p.y().span()];
//! handle.conv_forward(&p, "direct", &x, &w, &mut y)?;
//! let r = autodnn::reference::conv_forward(&p, &x, &w)?;
//! assert!(y.iter().zip(&r).all(|(a, b)| (*a as f64 - b).abs() < 1e-4));
//! # Ok::<(), autodnn::Error>(())
//! ```
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod activation;
pub mod alloc;
pub mod calibrate;
pub mod conv;
pub mod cpu;
mod desc;
mod error;
pub mod gemm;
mod handle;
pub mod layers;
pub mod models;
pub mod npy;
pub mod op;
mod problem_string;
pub mod reference;
pub mod runtime;
pub mod select;
mod simd;
mod vmath;

pub use activation::Activation;
pub use desc::{
    ConvDesc, ConvMode, ConvProblem, DataType, FilterDesc, FilterLayout, Layout, OpKind, Padding,
    TensorDesc,
};
pub use error::{Error, ErrorKind, Result};
pub use half::{bf16, f16};
pub use handle::{Backend, Handle};
pub use problem_string::{parse_problem_list, read_problems, ProblemSpec};
pub use runtime::{Bf16Units, MathMode};
pub use select::cache::default_cache_path;

/// The library's version (`x.y.z`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
