//! autodnn's C API: a cuDNN-style shim over the [`dnn`] (autodnn) crate, built as
//! `libautodnn.so` and `libautodnn.a`, with the header `include/autodnn.h` generated from this
//! crate by cbindgen (the `header` test regenerates it and fails when the committed one
//! differs; `AUTODNN_BLESS=1` rewrites it).
//!
//! Conventions, as in cuDNN:
//! - every function returns an [`autodnnStatus_t`] (a few queries return a value); the
//!   message of this thread's last call, naming the field at fault, is kept for
//!   [`autodnnGetLastErrorString`];
//! - handles and descriptors are opaque pointers made by `autodnnCreate*` and freed by
//!   `autodnnDestroy*`; a null, unset or destroyed descriptor, or one of another kind, is a
//!   status, not a crash (the library keeps the set of live ones; only an address reused by a
//!   newer descriptor of the same kind cannot be told from it);
//! - tensors are passed as `const void *` / `void *` whose element type and extent come from
//!   their descriptors; every call computes `AUTODNN_DATA_FLOAT`, the forward convolution
//!   also `AUTODNN_DATA_BFLOAT16` and `AUTODNN_DATA_HALF` x and w (y of their type or float),
//!   and the other calls answer `AUTODNN_STATUS_NOT_SUPPORTED` for those types;
//! - every buffer must be valid for the span its descriptor gives (one past the offset of its
//!   last element), aligned for its element type, and an output must not overlap the inputs
//!   (an overlap of the whole buffers is detected and refused);
//! - no panic crosses the boundary: one would be caught and answered with
//!   `AUTODNN_STATUS_INTERNAL_ERROR`.
//!
//! The functions are `unsafe extern "C"`: their safety contract is the one above, common to
//! all of them, so they carry no `# Safety` section each.
#![allow(non_camel_case_types, non_snake_case, clippy::missing_safety_doc)]
#![deny(unsafe_op_in_unsafe_fn)]

mod conv;
mod desc;
mod gemm;
mod handle;
mod ptr;
mod status;

pub use conv::*;
pub use desc::*;
pub use gemm::*;
pub use handle::*;
pub use status::*;
