//! The bottom layer every operation runs on: the execution context (the worker threads'
//! pool, the instruction-set cap), parallel loops with fallible per-thread scratch, and
//! the workspace allocator (budget, cached buffer, fault injection, typed carving).
//!
//! Nothing here knows an operation or an algorithm: `gemm`, `conv` and `select` all build on
//! it, and it imports none of them (the layering is checked by `tests/layering.rs`).

pub(crate) mod parallel;
pub(crate) mod pool;
pub mod workspace;

use serde::{Deserialize, Serialize};

use crate::cpu::{Features, Isa};
use crate::error::{Error, Result};

pub use pool::ParallelRunner;
pub use workspace::{Carve, FailAlloc, WorkspaceElement};

/// What an algorithm may use while running: the handle's worker threads and instruction-set
/// cap.
#[derive(Debug, Clone, Copy)]
pub struct ExecContext<'a> {
    /// The caller and `threads − 1` workers.
    pub(crate) pool: &'a pool::Pool,
    pub(crate) threads: usize,
    pub(crate) isa: Isa,
    /// The processor features kernels may use (within the handle's cap).
    pub(crate) features: Features,
    /// The precision f32 operands may be computed in: the handle's mode, raised to
    /// [`MathMode::AllowBf16`] for calls on bf16 tensors (whose values are bf16 already).
    pub(crate) math: MathMode,
    /// Which units compute products of bf16 values.
    pub(crate) bf16_units: Bf16Units,
}

/// The precision an f32 problem may be computed in: cuDNN's math type, oneDNN's
/// `fpmath_mode`, PyTorch's `float32_matmul_precision`.
///
/// Reduced-precision operands (bf16) are computed with bf16 products and f32 sums in every
/// mode; the mode decides only what f32 operands may become, and whether operands computed
/// inside an algorithm may be rounded too. In convolution it applies to the algorithms whose
/// products run on the GEMM engine (explicit and implicit GEMM), and to `winograd_2x2`, whose
/// transformed input and filter are then rounded to bf16 pairs (its bound under the mode is
/// [`crate::op::Algorithm::accuracy_under`]); the others compute in f32 whatever the mode.
/// A convolution of bf16 tensors computes as under `allow_bf16` in every mode: its operands
/// are bf16 values, and its precision is bf16's (`winograd_2x2` rounds its transformed
/// operands there too). Where the bf16 units run is [`Bf16Units`]' choice.
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
        parse_named(&MathMode::ALL, MathMode::name, field, s)
    }
}

/// Which units compute products of bf16 values (bf16 operands, and f32 operands under
/// [`MathMode::AllowBf16`]) on a CPU with bf16 dot-product units (AVX512-BF16).
///
/// Those units are not faster everywhere: on AMD Zen 4 and Zen 5 one `vdpbf16ps` does
/// twice the multiply-adds of an f32 FMA in the same time, on some Intel Xeons it takes
/// twice as long, which leaves it at half the f32 rate. [`Bf16Units::Auto`] measures it.
/// The f32 kernels compute the same products of bf16 values exactly (the operands are
/// converted to f32 while packing), with one rounding per multiply-add, so bf16 operands
/// and `AllowBf16` give results within the same documented bound on either.
///
/// ```
/// use autodnn::{Bf16Units, Handle};
/// let h = Handle::with_threads(1)?;
/// assert_eq!(h.bf16_units(), Bf16Units::Auto);
/// h.set_bf16_units(Bf16Units::Always);
/// assert_eq!(Bf16Units::parse("--bf16-units", "never")?, Bf16Units::Never);
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bf16Units {
    /// The bf16 units where one core's measured bf16 dot-product throughput is at least
    /// [`crate::gemm::BF16_UNITS_MIN_SPEEDUP`] times its f32 multiply-add throughput
    /// ([`crate::gemm::bf16_unit_speedup`], measured once per process in about a
    /// millisecond), else the f32 kernels. The default.
    #[default]
    Auto,
    /// The bf16 units wherever the CPU has them (to reproduce their rounding, or to test
    /// them): f32 operands under `AllowBf16` are then always rounded to bf16.
    Always,
    /// Never the bf16 units: bf16 operands run on the f32 kernels, and f32 operands stay
    /// f32 whatever the math mode.
    Never,
}

impl Bf16Units {
    /// Every choice, the default first.
    pub const ALL: [Bf16Units; 3] = [Bf16Units::Auto, Bf16Units::Always, Bf16Units::Never];

    /// The name the command uses: `auto`, `always`, `never`.
    pub fn name(self) -> &'static str {
        match self {
            Bf16Units::Auto => "auto",
            Bf16Units::Always => "always",
            Bf16Units::Never => "never",
        }
    }

    /// Parses [`Bf16Units::name`].
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `field` for any other text.
    pub fn parse(field: &str, s: &str) -> Result<Bf16Units> {
        parse_named(&Bf16Units::ALL, Bf16Units::name, field, s)
    }
}

/// The value among `all` whose `name` is `s` (trimmed, any case), else
/// [`Error::BadParam`] naming `field` and listing the names.
fn parse_named<T: Copy>(all: &[T], name: fn(T) -> &'static str, field: &str, s: &str) -> Result<T> {
    let wanted = s.trim().to_ascii_lowercase();
    all.iter()
        .copied()
        .find(|v| name(*v) == wanted)
        .ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|v| name(*v)).collect();
            Error::bad(field, s, format!("expected one of {}", names.join(", ")))
        })
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
    /// Which units compute products of bf16 values.
    pub fn bf16_units(&self) -> Bf16Units {
        self.bf16_units
    }
    /// The math mode as tuning-cache keys and the decision log name it: `strict`, or
    /// `allow_bf16` with `+always` or `+never` when the units choice is not `auto` (f32
    /// operands under strict math never meet the bf16 units, whatever the choice).
    pub fn math_key(&self) -> String {
        match (self.math, self.bf16_units) {
            (MathMode::Strict, _) => MathMode::Strict.name().into(),
            (m, Bf16Units::Auto) => m.name().into(),
            (m, u) => format!("{}+{}", m.name(), u.name()),
        }
    }
}
