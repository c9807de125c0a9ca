//! The backward convolutions as operations, with cuDNN's semantics and the forward problem's
//! descriptors (y's descriptor is dy's):
//!
//! - [`ConvBackwardData`]: dx = alpha · conv_bwd_data(dy, w) + beta · dx
//!   (cuDNN's `cudnnConvolutionBackwardData`);
//! - [`ConvBackwardFilter`]: dw = alpha · conv_bwd_filter(x, dy) + beta · dw
//!   (`cudnnConvolutionBackwardFilter`);
//! - [`ConvBackwardBias`]: db\[k\] = alpha · Σ over n, h, w of dy\[n, k, h, w\] + beta · db\[k\]
//!   (`cudnnConvolutionBackwardBias`).
//!
//! With beta = 0 the output is never read (NaN there is ignored); beta = 1 accumulates into
//! an existing gradient. A problem is the forward [`ConvProblem`] turned to the operation with
//! [`ConvProblem::for_op`]; the handle's conveniences do that. The algorithms implement the
//! generic [`Algorithm`] directly and receive the checked call; [`check_problem`] is the
//! check every one of them starts with (the operation and the element type).

use super::{Algorithm, OpProblem, Operation, Tensor, TensorMut};
use crate::desc::{ConvProblem, DataType, OpKind};
use crate::error::{Error, Result};

/// The gradient of a convolution's input (cuDNN's `cudnnConvolutionBackwardData`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvBackwardData;

/// The gradient of a convolution's filter (cuDNN's `cudnnConvolutionBackwardFilter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvBackwardFilter;

/// The gradient of a per-output-channel bias (cuDNN's `cudnnConvolutionBackwardBias`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvBackwardBias;

/// What one backward-data call reads.
#[derive(Debug, Clone, Copy)]
pub struct ConvBwdDataInputs<'a> {
    /// The gradient of the output, laid out as the problem's y.
    pub dy: Tensor<'a>,
    /// The filter, laid out as the problem's w.
    pub w: Tensor<'a>,
    /// Scale of the gradient.
    pub alpha: f32,
    /// Scale of dx's prior contents (0: not read).
    pub beta: f32,
}

/// What one backward-filter call reads.
#[derive(Debug, Clone, Copy)]
pub struct ConvBwdFilterInputs<'a> {
    /// The forward input, laid out as the problem's x.
    pub x: Tensor<'a>,
    /// The gradient of the output, laid out as the problem's y.
    pub dy: Tensor<'a>,
    /// Scale of the gradient.
    pub alpha: f32,
    /// Scale of dw's prior contents (0: not read).
    pub beta: f32,
}

/// What one backward-bias call reads.
#[derive(Debug, Clone, Copy)]
pub struct ConvBwdBiasInputs<'a> {
    /// The gradient of the output, laid out as the problem's y.
    pub dy: Tensor<'a>,
    /// Scale of the gradient.
    pub alpha: f32,
    /// Scale of db's prior contents (0: not read).
    pub beta: f32,
}

impl<'a> ConvBwdDataInputs<'a> {
    /// f32 tensors, alpha = 1, beta = 0.
    pub fn new(dy: &'a [f32], w: &'a [f32]) -> Self {
        ConvBwdDataInputs {
            dy: Tensor::F32(dy),
            w: Tensor::F32(w),
            alpha: 1.0,
            beta: 0.0,
        }
    }
    /// The same with other scales.
    pub fn scaled(self, alpha: f32, beta: f32) -> Self {
        ConvBwdDataInputs {
            alpha,
            beta,
            ..self
        }
    }
}

impl<'a> ConvBwdFilterInputs<'a> {
    /// f32 tensors, alpha = 1, beta = 0.
    pub fn new(x: &'a [f32], dy: &'a [f32]) -> Self {
        ConvBwdFilterInputs {
            x: Tensor::F32(x),
            dy: Tensor::F32(dy),
            alpha: 1.0,
            beta: 0.0,
        }
    }
    /// The same with other scales.
    pub fn scaled(self, alpha: f32, beta: f32) -> Self {
        ConvBwdFilterInputs {
            alpha,
            beta,
            ..self
        }
    }
}

impl<'a> ConvBwdBiasInputs<'a> {
    /// An f32 tensor, alpha = 1, beta = 0.
    pub fn new(dy: &'a [f32]) -> Self {
        ConvBwdBiasInputs {
            dy: Tensor::F32(dy),
            alpha: 1.0,
            beta: 0.0,
        }
    }
    /// The same with other scales.
    pub fn scaled(self, alpha: f32, beta: f32) -> Self {
        ConvBwdBiasInputs {
            alpha,
            beta,
            ..self
        }
    }
}

/// The check every convolution algorithm starts with: the problem is of operation `op`, and
/// its element types are ones the operation computes (any for the forward, whose bf16 and f16
/// tensors are widened for the f32 kernels; f32 for the backward operations).
///
/// # Errors
/// The reason for declining.
pub fn check_problem(p: &ConvProblem, op: OpKind) -> std::result::Result<(), String> {
    if p.op() != op {
        return Err(format!(
            "computes {}, the problem is {}",
            op.tag(),
            p.op().tag()
        ));
    }
    let (x, y) = (p.x().dtype(), p.y().dtype());
    if op == OpKind::ConvForward {
        // bf16 and f16 tensors are widened to f32 for the f32 kernels and the output rounded
        // once; an f32 y may follow reduced x and w (the descriptors see to w = x).
        return Ok(());
    }
    if x != DataType::F32 || y != DataType::F32 {
        return Err(format!(
            "computes f32 tensors, the problem's are {}",
            p.types()
        ));
    }
    Ok(())
}

/// `alpha · acc + beta · old`, not reading `old` when beta = 0.
#[inline(always)]
pub fn scaled(acc: f32, old: f32, alpha: f32, beta: f32) -> f32 {
    if beta == 0.0 {
        alpha * acc
    } else {
        alpha * acc + beta * old
    }
}

/// The call checks every operation of the convolution shares: the problem's kind, the
/// element type, scales that are finite, and each buffer's length.
fn check_common(
    p: &ConvProblem,
    op: OpKind,
    alpha: f32,
    beta: f32,
    buffers: &[(&str, usize, usize)],
) -> Result<()> {
    if p.op() != op {
        return Err(Error::bad(
            "problem.op",
            p.op().tag(),
            format!(
                "this call computes {}: turn the problem with ConvProblem::for_op",
                op.tag()
            ),
        ));
    }
    let dt = p.x().dtype();
    if dt != DataType::F32 {
        return Err(Error::Unsupported {
            what: format!("{} {} (only f32 has kernels)", dt.name(), op.tag()),
        });
    }
    for (field, v) in [("alpha", alpha), ("beta", beta)] {
        if !v.is_finite() {
            return Err(Error::bad(field, v, "must be finite"));
        }
    }
    for &(field, needed, got) in buffers {
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

/// A copy of an output that the call reads (beta ≠ 0).
fn snapshot_of(beta: f32, out: &TensorMut<'_>, what: &str) -> Result<Option<Vec<f32>>> {
    if beta == 0.0 {
        return Ok(None);
    }
    match out.as_tensor() {
        Tensor::F32(v) => Ok(Some(crate::alloc::try_copy(v, what)?)),
        other => Err(Error::Unsupported {
            what: format!("a {} output", other.dtype().name()),
        }),
    }
}

fn restore_f32(out: &mut TensorMut<'_>, s: &[f32]) {
    if let TensorMut::F32(v) = out {
        v[..s.len()].copy_from_slice(s);
    }
}

/// The methods every gradient operation shares: an f32 output of `len(p)` elements, a
/// scratch of that size for timing, and a snapshot of the output when beta ≠ 0.
macro_rules! gradient_output {
    ($len:expr, $what:literal) => {
        fn output_len(out: &TensorMut<'_>) -> usize {
            out.len()
        }
        fn scratch(p: &ConvProblem) -> Result<Vec<f32>> {
            crate::alloc::try_vec($len(p), 0.0, concat!("a scratch ", $what, " for timing"))
        }
        fn output(b: &mut Vec<f32>) -> TensorMut<'_> {
            TensorMut::F32(b)
        }
        fn snapshot(
            _p: &ConvProblem,
            i: &Self::Inputs<'_>,
            out: &TensorMut<'_>,
        ) -> Result<Option<Vec<f32>>> {
            snapshot_of(
                i.beta,
                out,
                concat!("a copy of ", $what, " for the fallback chain"),
            )
        }
        fn restore(out: &mut TensorMut<'_>, s: &Vec<f32>) {
            restore_f32(out, s)
        }
    };
}

impl Operation for ConvBackwardData {
    const NAME: &'static str = OpKind::ConvBackwardData.tag();
    type Problem = ConvProblem;
    type Algo<'a> = dyn Algorithm<ConvBackwardData> + 'a;
    type Inputs<'a> = ConvBwdDataInputs<'a>;
    type Output<'a> = TensorMut<'a>;
    type Buffer = Vec<f32>;
    type Prepared = ();
    fn with_prepared<'a: 'b, 'b>(inputs: &Self::Inputs<'a>, _: &'b ()) -> Self::Inputs<'b> {
        *inputs
    }

    fn check_call<'a>(
        p: &ConvProblem,
        i: &Self::Inputs<'a>,
        output_len: Option<usize>,
    ) -> Result<Self::Inputs<'a>> {
        check_common(
            p,
            OpKind::ConvBackwardData,
            i.alpha,
            i.beta,
            &[
                ("dy", p.y().span(), i.dy.len()),
                ("w", p.w().elements(), i.w.len()),
                ("dx", p.x().span(), output_len.unwrap_or(p.x().span())),
            ],
        )?;
        i.dy.f32("dy")?;
        i.w.f32("w")?;
        Ok(*i)
    }
    gradient_output!(|p: &ConvProblem| p.x().span(), "dx");
}

impl Operation for ConvBackwardFilter {
    const NAME: &'static str = OpKind::ConvBackwardFilter.tag();
    type Problem = ConvProblem;
    type Algo<'a> = dyn Algorithm<ConvBackwardFilter> + 'a;
    type Inputs<'a> = ConvBwdFilterInputs<'a>;
    type Output<'a> = TensorMut<'a>;
    type Buffer = Vec<f32>;
    type Prepared = ();
    fn with_prepared<'a: 'b, 'b>(inputs: &Self::Inputs<'a>, _: &'b ()) -> Self::Inputs<'b> {
        *inputs
    }

    fn check_call<'a>(
        p: &ConvProblem,
        i: &Self::Inputs<'a>,
        output_len: Option<usize>,
    ) -> Result<Self::Inputs<'a>> {
        check_common(
            p,
            OpKind::ConvBackwardFilter,
            i.alpha,
            i.beta,
            &[
                ("x", p.x().span(), i.x.len()),
                ("dy", p.y().span(), i.dy.len()),
                (
                    "dw",
                    p.w().elements(),
                    output_len.unwrap_or(p.w().elements()),
                ),
            ],
        )?;
        i.x.f32("x")?;
        i.dy.f32("dy")?;
        Ok(*i)
    }
    gradient_output!(|p: &ConvProblem| p.w().elements(), "dw");
}

impl Operation for ConvBackwardBias {
    const NAME: &'static str = OpKind::ConvBackwardBias.tag();
    type Problem = ConvProblem;
    type Algo<'a> = dyn Algorithm<ConvBackwardBias> + 'a;
    type Inputs<'a> = ConvBwdBiasInputs<'a>;
    type Output<'a> = TensorMut<'a>;
    type Buffer = Vec<f32>;
    type Prepared = ();
    fn with_prepared<'a: 'b, 'b>(inputs: &Self::Inputs<'a>, _: &'b ()) -> Self::Inputs<'b> {
        *inputs
    }

    fn check_call<'a>(
        p: &ConvProblem,
        i: &Self::Inputs<'a>,
        output_len: Option<usize>,
    ) -> Result<Self::Inputs<'a>> {
        let k = p.w().k();
        check_common(
            p,
            OpKind::ConvBackwardBias,
            i.alpha,
            i.beta,
            &[
                ("dy", p.y().span(), i.dy.len()),
                ("db", k, output_len.unwrap_or(k)),
            ],
        )?;
        i.dy.f32("dy")?;
        Ok(*i)
    }
    gradient_output!(|p: &ConvProblem| p.w().k(), "db");
}
