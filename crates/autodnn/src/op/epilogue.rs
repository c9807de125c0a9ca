//! Scaling and fused epilogues, as in cuDNN's `ConvolutionBiasActivationForward` and oneDNN's
//! post-ops:
//!
//! y = act(alpha · conv(x, w) + bias + beta · z)
//!
//! where bias is one value per output channel, z is a residual tensor laid out like y (or y's
//! own prior contents when no residual is given), and act is an [`Activation`]. With beta = 0, z
//! (and y's prior contents) are never read.
//!
//! The *kind* of epilogue ([`Epilogue`]: bias or not, residual or not, which activation) is
//! part of the [`ConvProblem`](crate::ConvProblem) and so of the tuning cache's key; the values
//! (alpha, beta, the bias and residual buffers) come with each call in [`EpilogueArgs`].
//! Algorithms apply it while an output tile is hot where they can ([`EpilogueArgs::apply`]
//! on a run of outputs of one channel), and as a pass over y otherwise.

pub use crate::activation::Activation;
pub use crate::desc::Epilogue;
use crate::error::{Error, Result};

/// The values of one call's epilogue.
#[derive(Debug, Clone, Copy)]
pub struct EpilogueArgs<'a> {
    /// Scale of the convolution.
    pub alpha: f32,
    /// Scale of z (0: z and y's prior contents are not read).
    pub beta: f32,
    /// One value per output channel, when the problem's epilogue has a bias.
    pub bias: Option<&'a [f32]>,
    /// A tensor laid out like y, when the problem's epilogue has a residual.
    pub residual: Option<&'a [f32]>,
    /// The activation, taken from the problem when the call is checked.
    pub(crate) act: Activation,
}

impl Default for EpilogueArgs<'_> {
    /// alpha = 1, beta = 0, nothing else: y = conv(x, w).
    fn default() -> Self {
        EpilogueArgs {
            alpha: 1.0,
            beta: 0.0,
            bias: None,
            residual: None,
            act: Activation::None,
        }
    }
}

impl<'a> EpilogueArgs<'a> {
    /// alpha and beta, no bias, no residual.
    pub fn new(alpha: f32, beta: f32) -> EpilogueArgs<'a> {
        EpilogueArgs {
            alpha,
            beta,
            ..EpilogueArgs::default()
        }
    }

    /// The same with a bias (one value per output channel).
    pub fn with_bias(mut self, bias: &'a [f32]) -> EpilogueArgs<'a> {
        self.bias = Some(bias);
        self
    }

    /// The same with a residual tensor (laid out like y).
    pub fn with_residual(mut self, z: &'a [f32]) -> EpilogueArgs<'a> {
        self.residual = Some(z);
        self
    }

    /// Checks the values against the problem's epilogue and y's size, and takes the
    /// activation from the problem.
    pub(crate) fn checked(mut self, epi: &Epilogue, k: usize, y_span: usize) -> Result<Self> {
        self.check(epi, k, y_span)?;
        self.act = epi.act;
        Ok(self)
    }

    /// Checks the values against the problem's epilogue and y's size.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `bias` or `residual` when one is given but the problem has
    /// none, or missing when it has one, or a non-finite alpha or beta;
    /// [`Error::BufferTooSmall`] when bias is shorter than K or the residual than y's span.
    pub(crate) fn check(&self, epi: &Epilogue, k: usize, y_span: usize) -> Result<()> {
        if !self.alpha.is_finite() {
            return Err(Error::bad("alpha", self.alpha, "must be finite"));
        }
        if !self.beta.is_finite() {
            return Err(Error::bad("beta", self.beta, "must be finite"));
        }
        match (epi.bias, self.bias) {
            (true, None) => return Err(Error::bad("bias", "none", "the problem has a bias")),
            (false, Some(_)) => {
                return Err(Error::bad("bias", "given", "the problem has no bias"));
            }
            (true, Some(b)) if b.len() < k => {
                return Err(Error::BufferTooSmall {
                    field: "bias".into(),
                    needed: k,
                    got: b.len(),
                });
            }
            _ => {}
        }
        match (epi.residual, self.residual) {
            (true, None) => {
                return Err(Error::bad("residual", "none", "the problem has a residual"));
            }
            (false, Some(_)) => {
                return Err(Error::bad(
                    "residual",
                    "given",
                    "the problem has no residual",
                ));
            }
            (true, Some(z)) if z.len() < y_span => {
                return Err(Error::BufferTooSmall {
                    field: "residual".into(),
                    needed: y_span,
                    got: z.len(),
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// True when the output is the plain convolution (alpha 1, beta 0, no bias, identity).
    pub fn is_identity(&self) -> bool {
        self.alpha == 1.0
            && self.beta == 0.0
            && self.bias.is_none()
            && matches!(self.act, Activation::None)
    }

    /// The final value of one output element of channel `k` at offset `off` of y, whose
    /// convolution result is `acc` and whose prior contents are `prior` (read only when
    /// beta ≠ 0 and there is no residual).
    #[inline]
    pub fn value(&self, acc: f32, k: usize, off: usize, prior: impl FnOnce() -> f32) -> f32 {
        let mut v = self.alpha * acc;
        if let Some(b) = self.bias {
            v += b[k];
        }
        if self.beta != 0.0 {
            let z = match self.residual {
                Some(z) => z[off],
                None => prior(),
            };
            v += self.beta * z;
        }
        self.act.apply(v)
    }

    /// Applies the epilogue to a contiguous run of outputs of channel `k` whose first element
    /// sits at offset `off` of y: `out[i]` holds the convolution result and receives the
    /// final value; `prior` is y's prior contents of the same run (needed only when beta ≠ 0
    /// and there is no residual).
    #[inline]
    pub fn apply(&self, out: &mut [f32], k: usize, off: usize, prior: Option<&[f32]>) {
        if self.is_identity() {
            return;
        }
        for (i, v) in out.iter_mut().enumerate() {
            let p = || prior.map_or(0.0, |p| p[i]);
            *v = self.value(*v, k, off + i, p);
        }
    }
}
