//! Prepared weights for inference: the filter transformed once for one algorithm and problem,
//! reused on every later call.

use super::conv_fwd::{AlgoWeights, ConvAlgorithm};
use crate::desc::{ConvProblem, DataType};
use crate::error::{Error, Result};
use crate::runtime::{ExecContext, MathMode};

/// `a`'s prepared form of the f32 filter `w` (the problem's filter values; reduced-precision
/// problems round it to their type first) under `ctx`'s math mode: the work of
/// [`crate::Handle::prepare_weights`] once the call is checked, and of selection with the
/// prepared-weights intent before it times `a`.
///
/// # Errors
/// The algorithm's preparation's; allocation failures.
pub(crate) fn prepare_for(
    a: &dyn ConvAlgorithm,
    ctx: &ExecContext<'_>,
    problem: &ConvProblem,
    w: &[f32],
) -> Result<PreparedWeights> {
    let mut ctx = *ctx;
    // Reduced-precision tensors: the filter rounded to the problem's type, prepared for the
    // f32 twin the algorithms compute (on the bf16 units for bf16 tensors, as their calls
    // are).
    let rounded;
    let w = match problem.w().dtype() {
        DataType::F32 => w,
        dtype => {
            let n = problem.w().elements();
            let typed = crate::op::TensorBuf::from_f32(&w[..n], dtype, "the filter")?;
            let mut copy = crate::alloc::try_vec(n, 0f32, "the filter in f32")?;
            typed.widen_into(&mut copy);
            rounded = copy;
            &rounded
        }
    };
    ctx.math = super::conv_fwd::math_for(problem, ctx.math);
    let bf16 = ctx.math == MathMode::AllowBf16;
    let p32 = problem.as_f32();
    Ok(match ConvAlgorithm::prepare(a, &ctx, &p32, w)? {
        Some(data) => PreparedWeights::new(a.name(), &p32, data, true, bf16),
        None => {
            let n = problem.w().elements();
            let data = crate::alloc::try_copy(&w[..n], "a copy of the filter")?;
            PreparedWeights::new(a.name(), &p32, data, false, bf16)
        }
    })
}

/// A filter transformed once by one algorithm for one problem (its Winograd or FFT domain, or
/// the GEMM engine's packed panels), or a copy of the plain filter for algorithms with nothing
/// to prepare. Made by [`crate::Handle::prepare_weights`]; using it with another problem or
/// algorithm is an error.
#[derive(Debug, Clone)]
pub struct PreparedWeights {
    algo: &'static str,
    problem: ConvProblem,
    data: Vec<f32>,
    transformed: bool,
    /// Made for computation in bf16 (a bf16 problem, or an f32 one under allow_bf16): the
    /// filter may have been rounded to bf16, so strict f32 calls refuse it.
    bf16: bool,
}

impl PreparedWeights {
    pub(crate) fn new(
        algo: &'static str,
        problem: &ConvProblem,
        data: Vec<f32>,
        transformed: bool,
        bf16: bool,
    ) -> PreparedWeights {
        PreparedWeights {
            algo,
            problem: problem.with_epilogue(Default::default()),
            data,
            transformed,
            bf16,
        }
    }
    /// The values (the transformed filter, or the plain one).
    pub(crate) fn data(&self) -> &[f32] {
        &self.data
    }
    /// The algorithm it was made for.
    pub fn algo(&self) -> &'static str {
        self.algo
    }
    /// The problem it was made for (without its epilogue, which the weights do not depend on):
    /// the f32 twin ([`ConvProblem::as_f32`]) of a problem on bf16 or f16 tensors.
    pub fn problem(&self) -> &ConvProblem {
        &self.problem
    }
    /// True when made for computation in bf16 (for bf16 tensors, or under
    /// [`crate::MathMode::AllowBf16`]): the filter may be rounded to bf16, and calls that
    /// compute f32 problems in strict f32 refuse it.
    pub fn is_bf16(&self) -> bool {
        self.bf16
    }
    /// Bytes it holds.
    pub fn bytes(&self) -> usize {
        self.data.len() * std::mem::size_of::<f32>()
    }
    /// True when the algorithm transformed the filter; false when it holds the plain filter
    /// (the algorithm has nothing to prepare).
    pub fn is_transformed(&self) -> bool {
        self.transformed
    }

    /// The plain filter, when this holds one (the algorithm had nothing to prepare): any
    /// algorithm can then run on it.
    pub(crate) fn plain(&self) -> Option<&[f32]> {
        (!self.transformed).then_some(self.data.as_slice())
    }

    /// The data to hand to the algorithm, after checking that problem (as f32), algorithm
    /// and precision match: `bf16_call` when the call may compute in bf16.
    pub(crate) fn for_call(
        &self,
        problem: &ConvProblem,
        algo: &str,
        bf16_call: bool,
    ) -> Result<AlgoWeights<'_>> {
        if self.bf16 && !bf16_call {
            return Err(Error::bad(
                "prepared",
                "weights prepared for bf16",
                "they were prepared for bf16 tensors or under allow_bf16 (the filter may be \
                 rounded to bf16); this call computes in strict f32",
            ));
        }
        if algo != self.algo {
            return Err(Error::bad(
                "prepared.algo",
                algo,
                format!("these weights were prepared for {}", self.algo),
            ));
        }
        if problem.with_epilogue(Default::default()) != self.problem {
            return Err(Error::bad(
                "prepared.problem",
                "a different problem",
                "these weights were prepared for another problem",
            ));
        }
        Ok(if self.transformed {
            AlgoWeights::Prepared(&self.data)
        } else {
            AlgoWeights::Plain(&self.data)
        })
    }
}

/// The filter of one call: plain, or prepared beforehand.
#[derive(Debug, Clone, Copy)]
pub enum Weights<'a> {
    /// The f32 filter as the problem's descriptor lays it out.
    Plain(&'a [f32]),
    /// The filter of any element type (the problem's) as its descriptor lays it out.
    Tensor(super::Tensor<'a>),
    /// Weights from [`crate::Handle::prepare_weights`] for this problem and algorithm.
    Prepared(&'a PreparedWeights),
}
