//! The bottom layer every operation runs on: the execution context (worker threads, helper
//! threads, the instruction-set cap), parallel loops with fallible per-thread scratch, and
//! the workspace allocator (budget, cached buffer, fault injection, typed carving).
//!
//! Nothing here knows an operation or an algorithm: `gemm`, `conv` and `select` all build on
//! it, and it imports none of them (the layering is checked by `tests/layering.rs`).

pub(crate) mod parallel;
pub mod workspace;

use crate::cpu::{Features, Isa};

pub use workspace::{Carve, FailAlloc, WorkspaceElement};

/// What an algorithm may use while running: the handle's worker threads and instruction-set
/// cap.
#[derive(Debug, Clone, Copy)]
pub struct ExecContext<'a> {
    pub(crate) pool: &'a rayon::ThreadPool,
    /// `threads − 1` workers that join a caller outside `pool` in a GEMM split, the caller
    /// computing a share itself (`None` with one thread): with `pool`'s own workers there
    /// would be one more runnable thread than cores.
    pub(crate) helpers: Option<&'a rayon::ThreadPool>,
    pub(crate) threads: usize,
    pub(crate) isa: Isa,
    /// The processor features kernels may use (within the handle's cap).
    pub(crate) features: Features,
}

impl ExecContext<'_> {
    /// Worker threads available.
    pub fn threads(&self) -> usize {
        self.threads
    }
    /// Widest instruction-set preset within [`ExecContext::features`].
    pub fn isa(&self) -> Isa {
        self.isa
    }
    /// The processor features kernels may use.
    pub fn features(&self) -> Features {
        self.features
    }
}
