//! [`SpectralConv`], the common plumbing of `fft` and `fft_tiling`: one [`ConvAlgorithm`]
//! given how each plans its transforms and the limit it puts on the problem.

use crate::conv::{
    default_cost_features, Accuracy, AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext,
    COST_FEATURES,
};
use crate::desc::ConvProblem;
use crate::error::Result;

use super::plan::Spectral;

/// An FFT convolution (`fft`, `fft_tiling`): one [`ConvAlgorithm`] given what the two differ
/// in, how they plan the transforms and the limit each puts on the problem.
pub(crate) struct SpectralConv {
    /// The algorithm's name.
    pub(crate) name: &'static str,
    /// The plan for a problem the limits accept; `None` when the spectra's sizes overflow.
    pub(crate) plan: fn(&ConvProblem) -> Option<Spectral>,
    /// The algorithm's own limit, checked after the stride and the kernel size.
    pub(crate) limit: fn(&ConvProblem) -> std::result::Result<(), String>,
    /// The normwise constant of its accuracy.
    pub(crate) normwise_c: f64,
}

impl ConvAlgorithm for SpectralConv {
    fn name(&self) -> &'static str {
        self.name
    }

    fn check(&self, problem: &ConvProblem) -> std::result::Result<(), String> {
        let st = problem.conv().stride();
        if st != [1, 1] {
            return Err(format!(
                "needs stride 1, got {}x{} (a strided output discards most of the transform)",
                st[0], st[1]
            ));
        }
        if problem.w().r() * problem.w().s() == 1 {
            return Err("a 1x1 kernel is a plain matrix product: nothing to transform".into());
        }
        (self.limit)(problem)?;
        (self.plan)(problem)
            .map(|_| ())
            .ok_or_else(|| "the spectra's sizes overflow".into())
    }

    fn workspace_bytes(&self, problem: &ConvProblem) -> usize {
        (self.plan)(problem).map_or(0, |s| s.workspace_bytes())
    }

    fn deterministic(&self) -> bool {
        true
    }

    fn cost_features(&self, problem: &ConvProblem) -> [f64; COST_FEATURES] {
        (self.plan)(problem).map_or_else(
            || default_cost_features(problem, 0),
            |s| s.cost_features(problem),
        )
    }

    fn accuracy(&self) -> Accuracy {
        Accuracy::Normwise {
            c: self.normwise_c,
            int_rel: 1e-4,
        }
    }

    fn prepare(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        let sp = (self.plan)(problem).expect("accepted by check");
        Ok(Some(sp.prepare(ctx, w)?))
    }

    fn run(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        workspace: &mut [u8],
        epilogue: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let sp = (self.plan)(problem).expect("accepted by check");
        sp.run(self.name, ctx, x, w, y, workspace, epilogue)
    }
}
