//! The precision options `conv`, `tune` and `gemm` share: the math mode and the choice of
//! units for products of bf16 values.

use autodnn::{Bf16Units, Handle, MathMode};
use clap::Args;

use crate::error::CliResult;

/// `--math` and `--bf16-units`.
#[derive(Debug, Clone, Args)]
pub struct MathArgs {
    /// What f32 operands may be computed in: strict, or allow_bf16 (rounded to bf16 by the
    /// algorithms on the GEMM engine, and winograd_2x2's transformed operands, where the
    /// bf16 units run)
    #[arg(long, value_name = "MODE", default_value = "strict")]
    pub math: String,
    /// Which units compute products of bf16 values: auto (the bf16 units where measured
    /// faster than f32), always or never
    #[arg(long, value_name = "UNITS", default_value = "auto")]
    pub bf16_units: String,
}

impl MathArgs {
    /// Parses both options and sets them on `handle`.
    ///
    /// # Errors
    /// Bad input naming `--math` or `--bf16-units`.
    pub fn apply(&self, handle: &Handle) -> CliResult<(MathMode, Bf16Units)> {
        let math = MathMode::parse("--math", &self.math)?;
        let units = Bf16Units::parse("--bf16-units", &self.bf16_units)?;
        handle.set_math_mode(math);
        handle.set_bf16_units(units);
        Ok((math, units))
    }
}
