//! The forward convolution as an operation: y = act(alpha · conv(x, w) + bias + beta · z).
//!
//! Its problem is [`ConvProblem`], its call is x and the filter ([`ConvFwdInputs`]: plain or
//! prepared weights, the epilogue's values) into y, and its algorithms implement
//! [`ConvAlgorithm`], the forward convolution's own trait, which every `dyn ConvAlgorithm`
//! turns into the generic [`Algorithm`] selection works with (the element type checked
//! there: today's algorithms compute f32).

use super::epilogue::EpilogueArgs;
use super::prepared::{PreparedWeights, Weights};
use super::tensor::{narrow, widen, TensorBuf};
use super::{Accuracy, Algorithm, OpProblem, Operation, Tensor, TensorMut, COST_FEATURES};
use crate::desc::{ConvDesc, ConvProblem, DataType, FilterDesc, OpKind, TensorDesc};
use crate::error::{Error, Result};
use crate::runtime::workspace::Carve;
use crate::runtime::{ExecContext, MathMode};

/// The forward convolution (cuDNN's `cudnnConvolutionForward`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvForward;

/// What one forward call reads.
#[derive(Debug, Clone, Copy)]
pub struct ConvFwdInputs<'a> {
    /// The input tensor.
    pub x: Tensor<'a>,
    /// The filter, plain or prepared.
    pub w: Weights<'a>,
    /// The epilogue's values.
    pub epilogue: EpilogueArgs<'a>,
}

impl<'a> ConvFwdInputs<'a> {
    /// Inputs of f32 tensors.
    pub fn new(x: &'a [f32], w: Weights<'a>, epilogue: EpilogueArgs<'a>) -> ConvFwdInputs<'a> {
        ConvFwdInputs {
            x: Tensor::F32(x),
            w,
            epilogue,
        }
    }
}

impl OpProblem for ConvProblem {
    fn op_tag(&self) -> &'static str {
        self.op().tag()
    }
    fn types(&self) -> String {
        let (x, y) = (self.x().dtype(), self.y().dtype());
        if x == y {
            x.name().to_string()
        } else {
            format!("{}>{}", x.name(), y.name())
        }
    }
    fn describe(&self) -> String {
        describe(self)
    }
}

/// A short description of a problem for logs: its benchdnn string, layouts and epilogue.
pub fn describe(p: &ConvProblem) -> String {
    let spec = crate::ProblemSpec::from_problem(p, "");
    let layout = |l: Option<crate::Layout>| l.map_or("strided", |l| l.name());
    let mut s = format!(
        "{spec} x:{} w:{} y:{}",
        layout(p.x().layout()),
        p.w().layout().name(),
        layout(p.y().layout())
    );
    if !p.epilogue().is_none() {
        let e = p.epilogue();
        s.push_str(&format!(
            " epilogue(bias:{} residual:{} act:{})",
            e.bias,
            e.residual,
            e.act.name()
        ));
    }
    s
}

impl Operation for ConvForward {
    const NAME: &'static str = OpKind::ConvForward.tag();
    type Problem = ConvProblem;
    type Algo<'a> = dyn ConvAlgorithm + 'a;
    type Inputs<'a> = ConvFwdInputs<'a>;
    type Output<'a> = TensorMut<'a>;
    type Buffer = TensorBuf;
    type Prepared = PreparedWeights;

    fn prepare(
        a: &Self::Algo<'_>,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        inputs: &Self::Inputs<'_>,
    ) -> Result<Option<PreparedWeights>> {
        let n = p.w().elements();
        let widened;
        let w = match inputs.w {
            Weights::Plain(w) | Weights::Tensor(Tensor::F32(w)) => w,
            Weights::Tensor(t) => {
                let mut v = crate::alloc::try_vec(n, 0f32, "the filter in f32")?;
                widen(t, &mut v);
                widened = v;
                &widened
            }
            // Already prepared (for one algorithm): nothing to prepare for the others.
            Weights::Prepared(_) => return Ok(None),
        };
        super::prepared::prepare_for(a, ctx, p, &w[..n]).map(Some)
    }
    fn with_prepared<'a: 'b, 'b>(
        inputs: &Self::Inputs<'a>,
        prepared: &'b PreparedWeights,
    ) -> Self::Inputs<'b> {
        ConvFwdInputs {
            w: Weights::Prepared(prepared),
            ..*inputs
        }
    }
    fn prepared_bytes(prepared: &PreparedWeights) -> usize {
        prepared.bytes()
    }
    /// A prepared call neither packs nor transforms the filter: feature 8 (the filter's MB,
    /// see [`default_cost_features`]) is what preparation takes out.
    fn prepared_features(mut f: [f64; COST_FEATURES]) -> [f64; COST_FEATURES] {
        f[8] = 0.0;
        f
    }

    fn check_call<'a>(
        p: &ConvProblem,
        inputs: &Self::Inputs<'a>,
        output_len: Option<usize>,
    ) -> Result<Self::Inputs<'a>> {
        let w_len = match inputs.w {
            Weights::Plain(w) => w.len(),
            Weights::Tensor(w) => w.len(),
            Weights::Prepared(_) => p.w().elements(),
        };
        if p.op() != OpKind::ConvForward {
            return Err(Error::bad(
                "problem.op",
                p.op().tag(),
                "this call computes conv_forward: turn the problem with ConvProblem::for_op",
            ));
        }
        check_call(p, inputs.x.len(), w_len, output_len.unwrap_or(p.y().span()))?;
        same_type("x", p.x().dtype(), inputs.x.dtype())?;
        match inputs.w {
            Weights::Plain(_) => same_type("w", p.w().dtype(), DataType::F32)?,
            Weights::Tensor(w) => same_type("w", p.w().dtype(), w.dtype())?,
            Weights::Prepared(_) => {}
        }
        let epilogue = inputs
            .epilogue
            .checked(p.epilogue(), p.w().k(), p.y().span())?;
        Ok(ConvFwdInputs {
            epilogue,
            ..*inputs
        })
    }
    fn output_len(out: &TensorMut<'_>) -> usize {
        out.len()
    }
    fn scratch(p: &ConvProblem) -> Result<TensorBuf> {
        TensorBuf::zeros(p.y().dtype(), p.y().span(), "a scratch output for timing")
    }
    fn output(b: &mut TensorBuf) -> TensorMut<'_> {
        b.as_mut()
    }
    fn snapshot(
        _p: &ConvProblem,
        inputs: &ConvFwdInputs<'_>,
        out: &TensorMut<'_>,
    ) -> Result<Option<TensorBuf>> {
        let e = &inputs.epilogue;
        if e.beta == 0.0 || e.residual.is_some() {
            return Ok(None);
        }
        Ok(Some(TensorBuf::copy_of(
            out.as_tensor(),
            "a copy of y for the fallback chain",
        )?))
    }
    fn restore(out: &mut TensorMut<'_>, s: &TensorBuf) {
        s.restore_into(out);
    }
}

/// Every `ConvAlgorithm` (and `dyn ConvAlgorithm`) is an algorithm of [`ConvForward`]; the
/// element types are checked here for all of them, and prepared weights are bound to the
/// algorithm they were made for.
impl<T: ConvAlgorithm + ?Sized> Algorithm<ConvForward> for T {
    fn name(&self) -> &'static str {
        ConvAlgorithm::name(self)
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        super::conv_bwd::check_problem(p, OpKind::ConvForward)?;
        ConvAlgorithm::check(self, &p.as_f32())
    }
    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        if ConvAlgorithm::reads_reduced(self) {
            return ConvAlgorithm::workspace_bytes(self, p);
        }
        ConvAlgorithm::workspace_bytes(self, &p.as_f32()).saturating_add(widened_bytes(p))
    }
    fn deterministic(&self) -> bool {
        ConvAlgorithm::deterministic(self)
    }
    fn accuracy(&self) -> Accuracy {
        ConvAlgorithm::accuracy(self)
    }
    fn accuracy_under(&self, p: &ConvProblem, math: MathMode) -> Accuracy {
        ConvAlgorithm::accuracy_under(self, math_for(p, math))
    }
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        ConvAlgorithm::cost_features(self, &p.as_f32())
    }
    fn cost_features_under(&self, p: &ConvProblem, ctx: &ExecContext<'_>) -> [f64; COST_FEATURES] {
        let ctx = ExecContext {
            math: math_for(p, ctx.math),
            ..*ctx
        };
        ConvAlgorithm::cost_features_under(self, &p.as_f32(), &ctx)
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        inputs: &ConvFwdInputs<'_>,
        out: &mut TensorMut<'_>,
        workspace: &mut [u8],
    ) -> Result<()> {
        let name = ConvAlgorithm::name(self);
        if p.is_f32() {
            let x = inputs.x.f32("x")?;
            let w = match inputs.w {
                Weights::Plain(w) | Weights::Tensor(Tensor::F32(w)) => AlgoWeights::Plain(w),
                Weights::Tensor(t) => return Err(wrong_type("w", DataType::F32, t.dtype())),
                Weights::Prepared(pw) => pw.for_call(p, name, ctx.math == MathMode::AllowBf16)?,
            };
            let y = out.f32("y")?;
            return ConvAlgorithm::run(self, ctx, p, x, w, y, workspace, &inputs.epilogue);
        }
        same_type("x", p.x().dtype(), inputs.x.dtype())?;
        same_type("y", p.y().dtype(), out.dtype())?;
        // bf16 x and w (widened or read in place) are exactly bf16 values: rounding them to
        // bf16 again (the allow_bf16 mode) changes nothing, and puts the GEMM-engine
        // algorithms' products on the bf16 units where the handle's units choice lets them.
        let ctx = &ExecContext {
            math: math_for(p, ctx.math),
            ..*ctx
        };
        if ConvAlgorithm::reads_reduced(self) {
            // Reduced-precision tensors read and written in their own types.
            let w = match inputs.w {
                Weights::Tensor(t) if t.dtype() == p.w().dtype() => ReducedWeights::Plain(t),
                Weights::Tensor(t) => return Err(wrong_type("w", p.w().dtype(), t.dtype())),
                Weights::Plain(_) => return Err(wrong_type("w", p.w().dtype(), DataType::F32)),
                Weights::Prepared(pw) => {
                    match pw.for_call(&p.as_f32(), name, ctx.math == MathMode::AllowBf16)? {
                        AlgoWeights::Plain(w) => ReducedWeights::Plain(Tensor::F32(w)),
                        AlgoWeights::Prepared(w) => ReducedWeights::Prepared(w),
                    }
                }
            };
            return ConvAlgorithm::run_reduced(
                self,
                ctx,
                p,
                inputs.x,
                w,
                out,
                workspace,
                &inputs.epilogue,
            );
        }
        // Reduced-precision tensors: widened to f32 (exactly) into the workspace, computed by
        // the f32 kernels with their f32 sums and the epilogue in f32, the output rounded
        // once (to nearest even) at the end.
        let p32 = p.as_f32();
        let got = workspace.len();
        let (head, inner_ws) = workspace
            .split_at_mut_checked(widened_bytes(p))
            .ok_or_else(|| Error::WorkspaceTooSmall {
                algo: name.into(),
                needed: Algorithm::<ConvForward>::workspace_bytes(self, p),
                got,
            })?;
        let mut carve = Carve::new(head);
        let xb = carve.take_aligned::<f32>(p.x().span(), WIDEN_ALIGN)?;
        widen(inputs.x, xb);
        let wb = carve.take_aligned::<f32>(p.w().elements(), WIDEN_ALIGN)?;
        let w = match inputs.w {
            Weights::Tensor(t) if t.dtype() == p.w().dtype() => {
                widen(t, wb);
                AlgoWeights::Plain(wb)
            }
            Weights::Tensor(t) => return Err(wrong_type("w", p.w().dtype(), t.dtype())),
            Weights::Plain(_) => return Err(wrong_type("w", p.w().dtype(), DataType::F32)),
            Weights::Prepared(pw) => pw.for_call(&p32, name, ctx.math == MathMode::AllowBf16)?,
        };
        let e = &inputs.epilogue;
        match out {
            TensorMut::F32(y) => ConvAlgorithm::run(self, ctx, &p32, xb, w, y, inner_ws, e),
            reduced => {
                let yb = carve.take_aligned::<f32>(p.y().span(), WIDEN_ALIGN)?;
                if e.beta != 0.0 && e.residual.is_none() {
                    widen(reduced.as_tensor(), yb);
                }
                ConvAlgorithm::run(self, ctx, &p32, xb, w, yb, inner_ws, e)?;
                narrow(yb, reduced, ctx.features);
                Ok(())
            }
        }
    }
}

/// True when a problem's x and w are bf16: its products are computed in bf16 whatever the
/// math mode (f32 problems only under [`MathMode::AllowBf16`]).
pub(crate) fn computes_in_bf16(p: &ConvProblem) -> bool {
    p.x().dtype() == DataType::Bf16 && p.w().dtype() == DataType::Bf16
}

/// The mode `p`'s algorithms compute in when the caller's is `math`: [`MathMode::AllowBf16`]
/// for bf16 x and w, whose values are bf16 already (rounding them to bf16 changes nothing
/// but the units), and whose transformed-domain operands (`winograd_2x2`'s) may then be
/// rounded to bf16 as well: a bf16 convolution computes at bf16's precision in every mode,
/// within the bound [`ConvAlgorithm::accuracy_under`] documents. `math` otherwise.
pub(crate) fn math_for(p: &ConvProblem, math: MathMode) -> MathMode {
    if computes_in_bf16(p) {
        MathMode::AllowBf16
    } else {
        math
    }
}

/// Alignment of the widened copies in the workspace.
const WIDEN_ALIGN: usize = 64;

/// Workspace bytes for the f32 copies of a reduced-precision problem's x, w and (when not
/// f32) y, each 64-byte aligned: a multiple of 64, so that the algorithm's own workspace
/// after them keeps the alignment of the whole. 0 for an f32 problem.
pub(crate) fn widened_bytes(p: &ConvProblem) -> usize {
    if p.is_f32() {
        return 0;
    }
    let piece = |n: usize| {
        n.saturating_mul(4)
            .saturating_add(2 * WIDEN_ALIGN - 1)
            .saturating_div(WIDEN_ALIGN)
            .saturating_mul(WIDEN_ALIGN)
    };
    let y = if p.y().dtype() == DataType::F32 {
        0
    } else {
        piece(p.y().span())
    };
    piece(p.x().span())
        .saturating_add(piece(p.w().elements()))
        .saturating_add(y)
}

fn wrong_type(field: &str, want: DataType, got: DataType) -> Error {
    Error::bad(
        format!("{field}.dtype"),
        got.name(),
        format!("the problem's {field} holds {} elements", want.name()),
    )
}

/// `Ok` when a call's tensor holds the problem's element type.
fn same_type(field: &str, want: DataType, got: DataType) -> Result<()> {
    if want == got {
        Ok(())
    } else {
        Err(wrong_type(field, want, got))
    }
}

/// Checks that apply to every algorithm: element type and buffer lengths.
///
/// # Errors
/// [`Error::Unsupported`] for element types without kernels, [`Error::BufferTooSmall`].
pub(crate) fn check_call(problem: &ConvProblem, x: usize, w: usize, y: usize) -> Result<()> {
    super::conv_bwd::check_problem(problem, problem.op()).map_err(|what| Error::Unsupported {
        what: format!("{} ({what})", problem.op().tag()),
    })?;
    for (field, needed, got) in [
        ("x", problem.x().span(), x),
        ("w", problem.w().elements(), w),
        ("y", problem.y().span(), y),
    ] {
        if got < needed {
            return Err(Error::BufferTooSmall {
                field: field.into(),
                needed,
                got,
            });
        }
    }
    Ok(())
}

/// True when the problem, rebuilt through the validating constructors, is the same: a file
/// cannot smuggle in descriptors the library would refuse.
pub(crate) fn problem_is_valid(p: &ConvProblem) -> bool {
    let rebuild = || -> Result<ConvProblem> {
        let x = TensorDesc::with_strides(p.x().dtype(), p.x().dims(), p.x().strides())?;
        let y = TensorDesc::with_strides(p.y().dtype(), p.y().dims(), p.y().strides())?;
        let w = FilterDesc::new(p.w().dtype(), p.w().layout(), p.w().dims())?;
        let c = p.conv();
        let conv = ConvDesc::new(c.padding(), c.stride(), c.dilation(), c.groups(), c.mode())?;
        ConvProblem::forward(x, w, conv, y)?
            .with_epilogue(*p.epilogue())
            .for_op(p.op())
    };
    rebuild().is_ok_and(|q| q == *p)
}

/// One forward-convolution algorithm.
pub trait ConvAlgorithm: Send + Sync {
    /// The name the command, the logs and the tuning cache use.
    fn name(&self) -> &'static str;

    /// `Ok` when this algorithm computes `problem`'s geometry; otherwise why not, in a phrase
    /// such as `"needs a 3x3 kernel, got 5x5"`. Selection asks the operation's
    /// [`Algorithm::check`], which adds the element types the algorithm computes (f32 today)
    /// to this.
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

    /// Its error bound when the caller's math mode is `math` (see
    /// [`Algorithm::accuracy_under`]); [`ConvAlgorithm::accuracy`] unless overridden.
    fn accuracy_under(&self, math: MathMode) -> Accuracy {
        let _ = math;
        self.accuracy()
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

    /// [`ConvAlgorithm::cost_features`] for a call under `ctx` (see
    /// [`Algorithm::cost_features_under`]).
    fn cost_features_under(
        &self,
        problem: &ConvProblem,
        ctx: &ExecContext<'_>,
    ) -> [f64; COST_FEATURES] {
        let _ = ctx;
        self.cost_features(problem)
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

    /// True when [`ConvAlgorithm::run_reduced`] computes problems on bf16 and f16 tensors in
    /// their own types, with no widened copies: the operation then asks
    /// [`ConvAlgorithm::workspace_bytes`] of the problem as it is and hands the tensors over
    /// unconverted. Otherwise (the default) it widens x, w and a reduced y to f32 into the
    /// workspace and calls [`ConvAlgorithm::run`].
    fn reads_reduced(&self) -> bool {
        false
    }

    /// Computes a problem on bf16 or f16 tensors (x and w of one type, y of that type or
    /// f32) in their own types: the products of the widened elements summed in f32, the
    /// epilogue in f32 and y rounded once (to nearest even), the bits
    /// [`ConvAlgorithm::run`] gives on the widened tensors. `w` is the filter (see
    /// [`ReducedWeights`]). Called only where [`ConvAlgorithm::reads_reduced`] is true, with
    /// the checks of `run`, and for bf16 x and w with `ctx` in the `allow_bf16` mode (exact
    /// for bf16 values).
    ///
    /// # Errors
    /// As [`ConvAlgorithm::run`]; the default declines.
    #[allow(clippy::too_many_arguments)]
    fn run_reduced(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        x: Tensor<'_>,
        w: ReducedWeights<'_>,
        y: &mut TensorMut<'_>,
        workspace: &mut [u8],
        epilogue: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let _ = (ctx, problem, x, w, y, workspace, epilogue);
        Err(Error::Declined {
            algo: self.name().into(),
            reason: "computes f32 tensors only".into(),
        })
    }
}

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
    let reduction = problem.c_per_group() as f64 * (w.r() * w.s()) as f64;
    let strided = problem.conv().stride() != [1, 1];
    let [n, k, _, _] = problem.y().dims();
    [
        1.0,
        gflop,
        problem.bytes() / 1e6,
        workspace_bytes as f64 / 1e6,
        gflop * 16.0 / (16.0 + reduction),
        if strided { gflop } else { 0.0 },
        n as f64 * k as f64 / 1e3,
        gflop * 8.0 / (8.0 + problem.k_per_group() as f64),
        (problem.w().elements() * problem.w().dtype().size()) as f64 / 1e6,
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
    let elem = problem.x().dtype().size() as f64;
    // In f64: the product of valid sizes need not fit in usize.
    n as f64 * problem.x().c() as f64 * (w.r() * w.s()) as f64 * (oh * ow) as f64 * elem / 1e6
}

/// The filter as [`ConvAlgorithm::run_reduced`] receives it.
#[derive(Debug, Clone, Copy)]
pub enum ReducedWeights<'a> {
    /// The filter as the problem's descriptor lays it out: in the problem's type, or in f32
    /// when the call brings weights prepared for this algorithm that hold the plain filter
    /// (already rounded to the problem's type).
    Plain(Tensor<'a>),
    /// What this algorithm's [`ConvAlgorithm::prepare`] returned for the problem's f32 twin,
    /// from the filter rounded to the problem's type.
    Prepared(&'a [f32]),
}

/// The filter as an algorithm receives it.
#[derive(Debug, Clone, Copy)]
pub enum AlgoWeights<'a> {
    /// The filter as the problem's descriptor lays it out.
    Plain(&'a [f32]),
    /// What this algorithm's [`ConvAlgorithm::prepare`] returned for this problem.
    Prepared(&'a [f32]),
}
