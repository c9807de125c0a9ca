//! Forward convolution algorithms.
//!
//! Each algorithm lives in its own file and implements [`ConvAlgorithm`]: a name, a predicate
//! that accepts a problem or declines it with a reason, an exact workspace size, a determinism
//! flag and a run function. [`registry`] holds them in one ordered list, most specialised
//! first; `direct` is always last: it accepts every valid problem and needs no workspace, so it
//! is the end of every fallback chain. Code that chooses among algorithms works over this list
//! and never names an algorithm.

mod depthwise;
mod direct;
mod epilogue;
mod fft;
mod gemm;
mod prepared;
mod registry;
mod winograd;

pub use epilogue::{Activation, Epilogue, EpilogueArgs};
pub use prepared::{PreparedWeights, Weights};
pub use registry::{algorithms, find, names};

use crate::cpu::{Features, Isa};
use crate::desc::ConvProblem;
use crate::error::Result;

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
}

/// One forward-convolution algorithm.
pub trait ConvAlgorithm: Send + Sync {
    /// The name the command, the logs and the tuning cache use.
    fn name(&self) -> &'static str;

    /// `Ok` when this algorithm computes `problem`; otherwise why not, in a phrase such as
    /// `"needs a 3x3 kernel, got 5x5"`.
    ///
    /// # Errors
    /// The reason for declining.
    fn check(&self, problem: &ConvProblem) -> std::result::Result<(), String>;

    /// Exact workspace bytes one run on `problem` uses (the high-water mark). Only meaningful
    /// for a problem that [`ConvAlgorithm::check`] accepts.
    fn workspace_bytes(&self, problem: &ConvProblem) -> usize;

    /// True when the output's bits do not depend on the thread count or scheduling.
    fn deterministic(&self) -> bool;

    /// How close to the exact result this algorithm's output is; [`Accuracy::Exact`] unless
    /// it computes in a transformed domain.
    fn accuracy(&self) -> Accuracy {
        Accuracy::Exact
    }

    /// What the heuristic's cost model predicts this algorithm's time from: a vector of
    /// [`COST_FEATURES`] non-negative quantities of the problem, each multiplied by a
    /// per-algorithm coefficient fitted on measurements (`autodnn calibrate`) and summed.
    /// The default, [`default_cost_features`], suits most algorithms; one whose time follows
    /// other quantities (transformed-domain FLOPs, tile counts) returns those instead, in the
    /// same units (a constant, GFLOP, MB).
    fn cost_features(&self, problem: &ConvProblem) -> [f64; COST_FEATURES] {
        default_cost_features(problem, self.workspace_bytes(problem))
    }

    /// Transforms the filter once into the form this algorithm consumes (Winograd or FFT
    /// domain, the GEMM engine's packed panels, ...), for reuse on many calls; `None` when the
    /// algorithm has nothing to prepare and runs on the plain filter.
    ///
    /// # Errors
    /// Allocation failures.
    fn prepare(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        let _ = (ctx, problem, w);
        Ok(None)
    }

    /// Computes y = act(alpha · conv(x, w) + bias + beta · z). The caller has checked the
    /// problem with [`ConvAlgorithm::check`], the buffer lengths against the descriptors, the
    /// element type and the epilogue's values, and hands a workspace of at least
    /// [`ConvAlgorithm::workspace_bytes`] bytes. `w` is [`AlgoWeights::Prepared`] only with
    /// data this algorithm's [`ConvAlgorithm::prepare`] made for this problem.
    ///
    /// # Errors
    /// Any failure of the algorithm (the fallback chain may then try the next one).
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        workspace: &mut [u8],
        epilogue: &EpilogueArgs<'_>,
    ) -> Result<()>;
}

/// Length of [`ConvAlgorithm::cost_features`].
pub const COST_FEATURES: usize = 10;

/// The default cost features of a problem whose algorithm uses `workspace_bytes`:
///
/// 0. 1 (a fixed cost per call),
/// 1. GFLOP of the direct definition,
/// 2. MB of x, w and y (what any algorithm reads or writes at least once),
/// 3. MB of workspace,
/// 4. GFLOP × 16 / (16 + C·R·S per group): the FLOPs of short reductions (depthwise, few
///    channels), which no algorithm runs at its peak rate,
/// 5. GFLOP of strided windows (stride above 1, 1×1 kernels included), whose inputs are not
///    contiguous,
/// 6. output planes N·K, in thousands (a cost per plane: depthwise and small images),
/// 7. GFLOP × 8 / (8 + K per group): the FLOPs of narrow outputs (depthwise, few output
///    channels per group), which leave output-channel blocking idle,
/// 8. MB of the filter (what a plain call packs or transforms before it computes),
/// 9. MB of the lowered input, N·C·R·S·OH·OW elements, when the windows are not the image
///    itself (any kernel above 1×1, stride or padding): what an im2col writes or an
///    implicit packing gathers.
pub fn default_cost_features(
    problem: &ConvProblem,
    workspace_bytes: usize,
) -> [f64; COST_FEATURES] {
    let gflop = problem.flops() / 1e9;
    let w = problem.w();
    let reduction = (problem.c_per_group() * w.r() * w.s()) as f64;
    let strided = problem.conv().stride() != [1, 1];
    let [n, k, _, _] = problem.y().dims();
    [
        1.0,
        gflop,
        problem.bytes() / 1e6,
        workspace_bytes as f64 / 1e6,
        gflop * 16.0 / (16.0 + reduction),
        if strided { gflop } else { 0.0 },
        (n * k) as f64 / 1e3,
        gflop * 8.0 / (8.0 + problem.k_per_group() as f64),
        problem.w().elements() as f64 * 4.0 / 1e6,
        lowered_mb(problem),
    ]
}

/// MB of the lowered input (feature 9 of [`default_cost_features`]).
fn lowered_mb(problem: &ConvProblem) -> f64 {
    let w = problem.w();
    let conv = problem.conv();
    let pad = conv.padding();
    let identity = w.r() * w.s() == 1
        && conv.stride() == [1, 1]
        && [pad.top, pad.bottom, pad.left, pad.right] == [0; 4];
    if identity {
        return 0.0;
    }
    let [n, _, oh, ow] = problem.y().dims();
    (n * problem.x().c() * w.r() * w.s()) as f64 * (oh * ow) as f64 * 4.0 / 1e6
}

/// An algorithm's documented error bound, tested on every problem it accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Accuracy {
    /// Sums products in f32 like the definition: on integer data whose partial sums stay
    /// below 2^24, every output equals the exact result.
    Exact,
    /// Computes in a transformed domain (Winograd, FFT). On real data,
    /// max|y − ref| ≤ `c` · ε_f32 · C·R·S · max|x| · max|w| (C input channels per group);
    /// on integer data in [−4, 4], max|y − ref| ≤ `int_rel` · max|ref|.
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
}

/// The filter as an algorithm receives it.
#[derive(Debug, Clone, Copy)]
pub enum AlgoWeights<'a> {
    /// The filter as the problem's descriptor lays it out.
    Plain(&'a [f32]),
    /// What this algorithm's [`ConvAlgorithm::prepare`] returned for this problem.
    Prepared(&'a [f32]),
}
