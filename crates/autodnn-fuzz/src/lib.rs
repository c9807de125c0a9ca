//! Fuzz harnesses of autodnn's input surfaces, one function per surface.
//!
//! Each `pub fn NAME(data: &[u8])` accepts any bytes, must never panic, and asserts the
//! surface's invariants (round trips, typed errors naming the field, every algorithm against
//! `direct` on small problems, GEMM against a naive loop). The cargo-fuzz targets under
//! `fuzz/` call them; `tests/replay.rs` feeds them the committed corpora and regressions.

pub mod alloc_cap;
pub mod cache_file;
pub mod capi;
pub mod conv_backward;
pub mod conv_checks;
pub mod cost_model_file;
pub mod descriptors;
pub mod gemm;
pub mod input;
pub mod npy;
pub mod ops;
pub mod plan_file;
pub mod plans;
pub mod problem_string;

pub use cache_file::cache_file;
pub use capi::capi;
pub use cost_model_file::cost_model_file;
pub use descriptors::descriptors;
pub use gemm::gemm;
pub use npy::npy;
pub use ops::ops;
pub use plan_file::plan_file;
pub use plans::plans;
pub use problem_string::problem_string;

/// A harness: any bytes in, a panic on a broken invariant.
pub type Harness = fn(&[u8]);

/// Every harness by name, as the fuzz targets and the corpus folders call them.
pub const HARNESSES: [(&str, Harness); 10] = [
    ("problem_string", problem_string),
    ("descriptors", descriptors),
    ("cache_file", cache_file),
    ("cost_model_file", cost_model_file),
    ("gemm", gemm),
    ("npy", npy),
    ("plans", plans),
    ("capi", capi),
    ("ops", ops),
    ("plan_file", plan_file),
];
