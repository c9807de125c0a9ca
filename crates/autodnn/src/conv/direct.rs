//! `direct`: placeholder.
use super::{ConvAlgorithm, ExecContext};
use crate::desc::ConvProblem;
use crate::error::Result;

/// The direct convolution.
pub struct Direct;

impl ConvAlgorithm for Direct {
    fn name(&self) -> &'static str {
        "direct"
    }
    fn check(&self, _: &ConvProblem) -> std::result::Result<(), String> {
        Ok(())
    }
    fn workspace_bytes(&self, _: &ConvProblem) -> usize {
        0
    }
    fn deterministic(&self) -> bool {
        true
    }
    fn run(&self, _ctx: &ExecContext<'_>, p: &ConvProblem, x: &[f32], w: &[f32], y: &mut [f32], _: &mut [u8]) -> Result<()> {
        let r = crate::reference::conv_forward(p, x, w)?;
        for (a, b) in y.iter_mut().zip(r) { *a = b as f32; }
        Ok(())
    }
}
