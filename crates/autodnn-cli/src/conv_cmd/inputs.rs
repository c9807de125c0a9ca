//! The generated data of one problem (x, w, y and the residual z) and its reference output,
//! computed on first use.

use autodnn::conv::EpilogueArgs;
use autodnn::ConvProblem;

use super::check::max_rel_err;
use crate::data;
use crate::error::CliResult;

/// The problem's data and, once computed, its reference output.
pub(super) struct ProblemData {
    pub(super) x: Vec<f32>,
    pub(super) w: Vec<f32>,
    pub(super) y: Vec<f32>,
    /// The generated residual, when the problem has one.
    pub(super) z: Option<Vec<f32>>,
    pub(super) alpha: f32,
    pub(super) beta: f32,
    pub(super) reference: Option<Vec<f64>>,
}

impl ProblemData {
    pub(super) fn new(p: &ConvProblem, alpha: f32, beta: f32) -> CliResult<ProblemData> {
        let z = if p.epilogue().residual {
            Some(data::small_ints(p.y().span(), data::Z_SEED, "z")?)
        } else {
            None
        };
        Ok(ProblemData {
            x: data::small_ints(p.x().span(), data::X_SEED, "x")?,
            w: data::small_ints(p.w().elements(), data::W_SEED, "w")?,
            y: data::filled(p.y().span(), f32::NAN, "y")?,
            z,
            alpha,
            beta,
            reference: None,
        })
    }

    pub(super) fn epilogue<'a>(z: &'a Option<Vec<f32>>, alpha: f32, beta: f32) -> EpilogueArgs<'a> {
        let mut e = EpilogueArgs::new(alpha, beta);
        if let Some(z) = z {
            e = e.with_residual(z);
        }
        e
    }

    /// max_rel_err of the current y against the reference, computed on first use.
    pub(super) fn max_rel_err(&mut self, p: &ConvProblem) -> CliResult<f64> {
        if self.reference.is_none() {
            self.reference = Some(autodnn::reference::conv_forward_fused(
                p,
                &self.x,
                &self.w,
                self.alpha as f64,
                self.beta as f64,
                None,
                self.z.as_deref(),
            )?);
        }
        let reference = self.reference.as_deref().unwrap_or(&[]);
        Ok(max_rel_err(p, &self.y, reference))
    }
}
