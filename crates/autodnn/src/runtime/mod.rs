//! The bottom layer every operation runs on: the execution context (worker threads, helper
//! threads, the instruction-set cap), parallel loops with fallible per-thread scratch, and
//! the workspace allocator (budget, cached buffer, fault injection, typed carving).
//!
//! Nothing here knows an operation or an algorithm: `gemm`, `conv` and `select` all build on
//! it, and it imports none of them (the layering is checked by `tests/layering.rs`).

pub(crate) mod parallel;
pub mod workspace;

use serde::{Deserialize, Serialize};

use crate::cpu::{Features, Isa};
use crate::error::{Error, Result};

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
    /// The precision f32 operands may be computed in.
    pub(crate) math: MathMode,
}

/// The precision an f32 problem may be computed in: cuDNN's math type, oneDNN's
/// `fpmath_mode`, PyTorch's `float32_matmul_precision`.
///
/// Reduced-precision operands (bf16) are computed with bf16 products and f32 sums in every
/// mode; the mode decides only what f32 operands may become.
///
/// ```
/// use autodnn::{gemm::GemmDesc, Handle, MathMode};
/// let h = Handle::with_threads(1)?;
/// assert_eq!(h.math_mode(), MathMode::Strict);
/// h.set_math_mode(MathMode::AllowBf16);
/// // 1 + 2^-10 is not a bf16: under allow_bf16 it may be rounded to 1 before the product.
/// let a = [1.0 + 1.0 / 1024.0; 4];
/// let b = [1.0f32; 4];
/// let mut c = [0.0f32; 1];
/// h.gemm(&GemmDesc::new(1, 1, 4), 1.0, &a, &b, 0.0, &mut c)?;
/// assert!(c[0] == 4.0 || c[0] == 4.0 + 4.0 / 1024.0);
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MathMode {
    /// f32 problems compute in f32 (the default).
    #[default]
    Strict,
    /// f32 problems may run with their operands rounded to bf16 (round to nearest even) and
    /// f32 sums, on bf16 dot-product units where the CPU has them: twice the multiply-adds
    /// per cycle of f32 on AVX512-BF16. Each product then carries a relative error of up to
    /// 2^-8 per operand.
    AllowBf16,
}

impl MathMode {
    /// Every mode, the default first.
    pub const ALL: [MathMode; 2] = [MathMode::Strict, MathMode::AllowBf16];

    /// The name the command and the Python package use: `strict`, `allow_bf16`.
    pub fn name(self) -> &'static str {
        match self {
            MathMode::Strict => "strict",
            MathMode::AllowBf16 => "allow_bf16",
        }
    }

    /// Parses [`MathMode::name`].
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `field` for any other text.
    pub fn parse(field: &str, s: &str) -> Result<MathMode> {
        MathMode::ALL
            .into_iter()
            .find(|m| m.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| Error::bad(field, s, "expected strict or allow_bf16"))
    }
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
    /// The precision f32 operands may be computed in.
    pub fn math(&self) -> MathMode {
        self.math
    }
}
