//! Operations as types: what each operation computes on, what one call hands it, and the
//! trait its algorithms implement.
//!
//! An operation (the forward convolution, its backward data, filter and bias; pooling and
//! the rest later) is a type implementing [`Operation`]: it names its problem (a hashable,
//! serialisable descriptor: the tuning cache's key), the inputs and the output of one call
//! (typed tensor views and epilogue values), and the trait object its algorithms are
//! ([`Operation::Algo`], with the lifetime of what it borrows). Every algorithm of the operation implements [`Algorithm`] for it,
//! which is all that selection (`crate::select`) sees: names, checks, workspace sizes, cost
//! features and a run function. Selection is written once, generic over `O: Operation`; an
//! operation's ordered list of algorithms lives with the algorithms (`conv::registry`).
//!
//! Adding an operation is its problem and call types here, its algorithms and registry
//! beside the others; selection needs no change. Adding an element type is kernels and
//! packing formats, the algorithms saying in [`Algorithm::check`] which types they compute.
//!
//! This layer sits above `desc` (the descriptors) and `runtime` (the execution context), and
//! below the algorithms (`conv`) and selection (`select`).

pub mod conv_bwd;
pub mod conv_fwd;
pub mod epilogue;
pub mod prepared;
pub(crate) mod tensor;

use std::fmt::Debug;
use std::hash::Hash;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Result;
use crate::runtime::ExecContext;

pub use conv_bwd::{
    ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvBwdBiasInputs, ConvBwdDataInputs,
    ConvBwdFilterInputs,
};
pub use conv_fwd::{ConvAlgorithm, ConvForward, ConvFwdInputs};
pub use tensor::{Tensor, TensorBuf, TensorMut};

/// A problem of some operation: everything that decides which algorithm wins and what it
/// computes, and nothing else. It is the tuning cache's key, so it hashes and serialises.
pub trait OpProblem:
    Clone + PartialEq + Eq + Hash + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// The operation's tag in cache keys, cost-model fits and logs (`conv_forward`, ...).
    fn op_tag(&self) -> &'static str;
    /// The element types, as cache keys and cost fits name them (`f32`).
    fn types(&self) -> String;
    /// A short description for logs.
    fn describe(&self) -> String;
}

/// One operation: its problem, the inputs and output of a call, its algorithms' trait object,
/// and what selection needs to time and to fall back (a scratch output, a snapshot of an
/// output the call also reads).
pub trait Operation: Sized + Send + Sync + 'static {
    /// The operation's name, as [`OpProblem::op_tag`] gives it for its problems.
    const NAME: &'static str;
    /// The problem descriptor.
    type Problem: OpProblem;
    /// The trait object of its algorithms (`dyn ConvAlgorithm` for the forward
    /// convolution); it implements [`Algorithm`] for this operation.
    type Algo<'a>: ?Sized + Algorithm<Self> + 'a;
    /// What a call reads: typed tensor views and values, copied freely.
    type Inputs<'a>: Copy;
    /// What a call writes.
    type Output<'a>;
    /// An owned output: the timer's scratch, or the copy of an output the call reads.
    type Buffer: Send;

    /// Checks a call's inputs and output against the problem (lengths, element types,
    /// epilogue values) and returns the inputs as algorithms receive them.
    ///
    /// # Errors
    /// Bad input ([`crate::ErrorKind::BadInput`]) or an element type without kernels
    /// ([`crate::Error::Unsupported`]).
    fn check_call<'a>(
        p: &Self::Problem,
        inputs: &Self::Inputs<'a>,
        output_len: Option<usize>,
    ) -> Result<Self::Inputs<'a>>;
    /// Length of `out`, for [`Operation::check_call`].
    fn output_len(out: &Self::Output<'_>) -> usize;
    /// A scratch output for timing (the caller's output is never written while timing).
    ///
    /// # Errors
    /// Allocation failures.
    fn scratch(p: &Self::Problem) -> Result<Self::Buffer>;
    /// The buffer as an output.
    fn output(b: &mut Self::Buffer) -> Self::Output<'_>;
    /// A copy of what `out` holds when the call also reads it (beta ≠ 0 without a separate
    /// residual), so that a failed attempt cannot change what the next one reads; `None`
    /// when the call does not read its output.
    ///
    /// # Errors
    /// Allocation failures.
    fn snapshot(
        p: &Self::Problem,
        inputs: &Self::Inputs<'_>,
        out: &Self::Output<'_>,
    ) -> Result<Option<Self::Buffer>>;
    /// Puts a snapshot back.
    fn restore(out: &mut Self::Output<'_>, snapshot: &Self::Buffer);

    /// An algorithm's weights prepared ahead of its calls, as selection with the
    /// prepared-weights intent times them ([`crate::Handle::set_prepared_selection`]); `()`
    /// for operations without weights to prepare.
    type Prepared: Send;
    /// `a`'s prepared form of the weights `inputs` carry, made outside the timed runs; `None`
    /// when the operation has nothing to prepare (the calls are then timed as they are).
    ///
    /// # Errors
    /// The preparation's own (allocation failures, mainly).
    fn prepare(
        a: &Self::Algo<'_>,
        ctx: &ExecContext<'_>,
        p: &Self::Problem,
        inputs: &Self::Inputs<'_>,
    ) -> Result<Option<Self::Prepared>> {
        let _ = (a, ctx, p, inputs);
        Ok(None)
    }
    /// `inputs` with `prepared` in place of the weights (as they are when the operation
    /// prepares nothing).
    fn with_prepared<'a: 'b, 'b>(
        inputs: &Self::Inputs<'a>,
        prepared: &'b Self::Prepared,
    ) -> Self::Inputs<'b>;
    /// Bytes `prepared` holds.
    fn prepared_bytes(prepared: &Self::Prepared) -> usize {
        let _ = prepared;
        0
    }
    /// The cost features of a call with prepared weights, from those of a plain call
    /// ([`Algorithm::cost_features`]): what the preparation takes out of every call.
    fn prepared_features(f: [f64; COST_FEATURES]) -> [f64; COST_FEATURES] {
        f
    }
}

/// An operation with a registry: its ordered list of algorithms, most specialised first, the
/// last accepting every valid problem with no workspace (the end of every fallback chain).
/// The list lives with the algorithms (`conv::registry` for the convolutions).
pub trait Registered: Operation {
    /// The registered algorithms, in preference order.
    fn algorithms() -> &'static [&'static Self::Algo<'static>];
}

/// Length of [`Algorithm::cost_features`].
pub const COST_FEATURES: usize = 10;

/// One algorithm of operation `O`, as selection sees it.
pub trait Algorithm<O: Operation>: Send + Sync {
    /// The name the command, the logs and the tuning cache use.
    fn name(&self) -> &'static str;
    /// `Ok` when this algorithm computes `p` (its element types included); otherwise why
    /// not, in a phrase.
    ///
    /// # Errors
    /// The reason for declining.
    fn check(&self, p: &O::Problem) -> std::result::Result<(), String>;
    /// Exact workspace bytes one run on `p` uses; only meaningful for an accepted problem.
    fn workspace_bytes(&self, p: &O::Problem) -> usize;
    /// True when the output's bits do not depend on the thread count or scheduling.
    fn deterministic(&self) -> bool;
    /// Its documented error bound.
    fn accuracy(&self) -> Accuracy;
    /// Its documented error bound on `p` when the caller's math mode is `math`: the same as
    /// [`Algorithm::accuracy`] unless the mode or the problem's types let it round more than
    /// strict math (bf16 operands in a transformed domain under
    /// [`crate::MathMode::AllowBf16`], and on bf16 tensors in any mode).
    fn accuracy_under(&self, p: &O::Problem, math: crate::MathMode) -> Accuracy {
        let _ = (p, math);
        self.accuracy()
    }
    /// What the cost model predicts its time from: [`COST_FEATURES`] non-negative
    /// quantities of `p`, each multiplied by a coefficient fitted per (operation, types,
    /// algorithm).
    fn cost_features(&self, p: &O::Problem) -> [f64; COST_FEATURES];
    /// [`Algorithm::cost_features`] for a call under `ctx`: the same unless the context
    /// changes what the algorithm computes (bf16 pairs under `allow_bf16`).
    fn cost_features_under(&self, p: &O::Problem, ctx: &ExecContext<'_>) -> [f64; COST_FEATURES] {
        let _ = ctx;
        self.cost_features(p)
    }
    /// Runs on a call the operation has checked ([`Operation::check_call`]), with a
    /// workspace of at least [`Algorithm::workspace_bytes`] bytes.
    ///
    /// # Errors
    /// Any failure (the fallback chain may then try the next algorithm); bad input that
    /// only this algorithm can see (weights prepared for another one).
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &O::Problem,
        inputs: &O::Inputs<'_>,
        out: &mut O::Output<'_>,
        workspace: &mut [u8],
    ) -> Result<()>;
}

/// An algorithm's documented error bound, tested on every problem it accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Accuracy {
    /// Sums products in f32 like the definition: on integer data whose partial sums stay
    /// below 2^24, every output equals the exact result.
    Exact,
    /// Computes in a transformed domain (Winograd, FFT). On real data,
    /// max|y − ref| ≤ `c` · ε_f32 · C·R·S · max|x| · max|w| (C input channels per group);
    /// on integer data in [−4, 4], also within `int_rel` · max|ref| wherever that is the
    /// larger (outputs that cancel to near zero keep the normwise bound:
    /// [`Accuracy::tolerance`]).
    Normwise {
        /// The constant of the normwise bound, measured across channel counts.
        c: f64,
        /// The relative bound on integer data.
        int_rel: f64,
    },
}

impl Accuracy {
    /// The largest max|y − ref| / max|ref| allowed on integer data in [−4, 4] (0 for exact
    /// algorithms).
    pub fn integer_tolerance(&self) -> f64 {
        match self {
            Accuracy::Exact => 0.0,
            Accuracy::Normwise { int_rel, .. } => *int_rel,
        }
    }

    /// The largest max|y − ref| allowed: 0 for exact algorithms; otherwise the normwise bound
    /// for `depth` (C·R·S) products per output of inputs at most `x_max` and `w_max` in
    /// magnitude, or on integer data the relative one, [`Accuracy::integer_tolerance`] ·
    /// max(`ref_max`, 1), when that is larger.
    ///
    /// ```
    /// use autodnn::conv::Accuracy;
    /// let a = Accuracy::Normwise { c: 48.0, int_rel: 2e-5 };
    /// // One output of 715 · 9 products that cancel to 2: the normwise bound holds.
    /// assert!(a.tolerance(715 * 9, 4.0, 4.0, 2.0) > 0.5);
    /// assert_eq!(Accuracy::Exact.tolerance(9, 4.0, 4.0, 100.0), 0.0);
    /// ```
    pub fn tolerance(&self, depth: usize, x_max: f64, w_max: f64, ref_max: f64) -> f64 {
        match self {
            Accuracy::Exact => 0.0,
            Accuracy::Normwise { c, int_rel } => {
                let normwise = c * f64::from(f32::EPSILON) * depth as f64 * x_max * w_max;
                normwise.max(int_rel * ref_max.max(1.0))
            }
        }
    }
}

/// Whether `problem` (as a tuning-cache file holds it) is a valid problem of the operation
/// tagged `op`: it deserialises and, rebuilt through the validating constructors, is the same.
/// `None` for an operation this build does not know (a newer build's, or one defined outside
/// the library): such entries are kept and written back, and only an operation of that tag
/// ever reads them.
pub fn problem_is_valid(op: &str, problem: &serde_json::Value) -> Option<bool> {
    match op {
        ConvForward::NAME
        | ConvBackwardData::NAME
        | ConvBackwardFilter::NAME
        | ConvBackwardBias::NAME => Some(
            serde_json::from_value::<crate::ConvProblem>(problem.clone())
                .is_ok_and(|p| p.op().tag() == op && conv_fwd::problem_is_valid(&p)),
        ),
        _ => None,
    }
}
