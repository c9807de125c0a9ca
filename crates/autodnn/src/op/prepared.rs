//! Prepared weights for inference: the filter transformed once for one algorithm and problem,
//! reused on every later call.

use super::conv_fwd::AlgoWeights;
use crate::desc::ConvProblem;
use crate::error::{Error, Result};

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
}

impl PreparedWeights {
    pub(crate) fn new(
        algo: &'static str,
        problem: &ConvProblem,
        data: Vec<f32>,
        transformed: bool,
    ) -> PreparedWeights {
        PreparedWeights {
            algo,
            problem: problem.with_epilogue(Default::default()),
            data,
            transformed,
        }
    }
    /// The algorithm it was made for.
    pub fn algo(&self) -> &'static str {
        self.algo
    }
    /// The problem it was made for (without its epilogue, which the weights do not depend on).
    pub fn problem(&self) -> &ConvProblem {
        &self.problem
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

    /// The data to hand to the algorithm, after checking that problem and algorithm match.
    pub(crate) fn for_call(&self, problem: &ConvProblem, algo: &str) -> Result<AlgoWeights<'_>> {
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
