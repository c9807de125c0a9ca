use serde::{Deserialize, Serialize};

use super::conv::ConvDesc;
use super::filter::FilterDesc;
use super::tensor::{DataType, Layout, TensorDesc};
use super::Epilogue;
use crate::error::{Error, Result};

/// Which operation of the convolution a problem describes. The three share the forward
/// problem's descriptors (x, w, y = dy, the convolution), as cuDNN's calls do; the kind is part
/// of the tuning cache's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OpKind {
    /// y = conv(x, w).
    ConvForward,
    /// dx = conv_bwd_data(dy, w): the gradient of the input.
    ConvBackwardData,
    /// dw = conv_bwd_filter(x, dy): the gradient of the filter.
    ConvBackwardFilter,
    /// db\[k\] = Σ over n, h, w of dy\[n, k, h, w\]: the gradient of a per-channel bias.
    ConvBackwardBias,
}

impl OpKind {
    /// The tag of the operation in cache keys, cost fits, logs and the command's `dir`.
    pub const fn tag(self) -> &'static str {
        match self {
            OpKind::ConvForward => "conv_forward",
            OpKind::ConvBackwardData => "conv_backward_data",
            OpKind::ConvBackwardFilter => "conv_backward_filter",
            OpKind::ConvBackwardBias => "conv_backward_bias",
        }
    }
}

/// One convolution problem: everything that decides which algorithm wins and what it must
/// compute, and nothing else (no data, no thread count). Hashable and serialisable: it is the
/// tuning cache's key.
///
/// # Examples
/// ```
/// use autodnn::{ConvDesc, ConvProblem, DataType, FilterDesc, FilterLayout, Layout, Padding,
///               TensorDesc, ConvMode};
/// let x = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 64, 56, 56])?;
/// let w = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [64, 64, 3, 3])?;
/// let conv = ConvDesc::new(Padding::symmetric(1, 1), [1, 1], [1, 1], 1, ConvMode::CrossCorrelation)?;
/// let p = ConvProblem::forward_packed(x, w, conv, Layout::Nchw)?;
/// assert_eq!(p.y().dims(), [1, 64, 56, 56]);
/// assert_eq!(p.flops(), 2.0 * 64.0 * 56.0 * 56.0 * 64.0 * 9.0);
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConvProblem {
    op: OpKind,
    x: TensorDesc,
    w: FilterDesc,
    y: TensorDesc,
    conv: ConvDesc,
    epilogue: Epilogue,
}

fn out_size(
    dim: &str,
    input: usize,
    pad_lo: i64,
    pad_hi: i64,
    kernel: usize,
    stride: usize,
    dilation: usize,
) -> Result<usize> {
    let ek = (kernel as i128 - 1) * dilation as i128 + 1;
    let padded = input as i128 + pad_lo as i128 + pad_hi as i128;
    if padded < ek {
        return Err(Error::bad(
            format!("y.{dim}"),
            0,
            format!(
                "empty output: the padded input ({input} + {pad_lo} + {pad_hi} = {padded}) is \
                 smaller than the dilated kernel ({ek})"
            ),
        ));
    }
    let o = (padded - ek) / stride as i128 + 1;
    usize::try_from(o).map_err(|_| Error::overflow(format!("y.{dim}"), "output size"))
}

impl ConvProblem {
    /// Output dimensions (N, K, OH, OW) of `conv` applied to `x` with `w`, after checking that
    /// they fit together.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming the field when the element types differ, the channels do not
    /// match the groups, or the output would be empty.
    pub fn output_dims(x: &TensorDesc, w: &FilterDesc, conv: &ConvDesc) -> Result<[usize; 4]> {
        if w.dtype() != x.dtype() {
            return Err(Error::bad(
                "w.dtype",
                w.dtype().name(),
                format!("must equal x's element type ({})", x.dtype().name()),
            ));
        }
        let g = conv.groups();
        if !x.c().is_multiple_of(g) {
            return Err(Error::bad(
                "conv.groups",
                g,
                format!("does not divide the input channels ({})", x.c()),
            ));
        }
        if !w.k().is_multiple_of(g) {
            return Err(Error::bad(
                "conv.groups",
                g,
                format!("does not divide the output channels ({})", w.k()),
            ));
        }
        if w.c() != x.c() / g {
            return Err(Error::bad(
                "w.c",
                w.c(),
                format!(
                    "must be the input channels per group: {} / {} groups = {}",
                    x.c(),
                    g,
                    x.c() / g
                ),
            ));
        }
        let p = conv.padding();
        let [sh, sw] = conv.stride();
        let [dh, dw] = conv.dilation();
        let oh = out_size("h", x.h(), p.top, p.bottom, w.r(), sh, dh)?;
        let ow = out_size("w", x.w(), p.left, p.right, w.s(), sw, dw)?;
        Ok([x.n(), w.k(), oh, ow])
    }

    /// A forward convolution writing into `y`, whose dimensions must be the inferred ones (its
    /// strides are free).
    ///
    /// # Errors
    /// As [`ConvProblem::output_dims`], and [`Error::BadParam`] naming the `y` field that
    /// differs from the inferred output, or a `y` element type that is neither `x`'s nor f32
    /// (bf16 or f16 x and w may write an f32 y, as cuDNN allows).
    pub fn forward(
        x: TensorDesc,
        w: FilterDesc,
        conv: ConvDesc,
        y: TensorDesc,
    ) -> Result<ConvProblem> {
        let dims = ConvProblem::output_dims(&x, &w, &conv)?;
        if y.dtype() != x.dtype() && y.dtype() != DataType::F32 {
            return Err(Error::bad(
                "y.dtype",
                y.dtype().name(),
                format!(
                    "must equal x's element type ({}) or be f32 (reduced-precision inputs \
                     with an f32 output)",
                    x.dtype().name()
                ),
            ));
        }
        for (i, name) in ["y.n", "y.c", "y.h", "y.w"].into_iter().enumerate() {
            if y.dims()[i] != dims[i] {
                return Err(Error::bad(
                    name,
                    y.dims()[i],
                    format!("the convolution's output has {}", dims[i]),
                ));
            }
        }
        Ok(ConvProblem {
            op: OpKind::ConvForward,
            x,
            w,
            y,
            conv,
            epilogue: Epilogue::default(),
        })
    }

    /// The same problem with every tensor in f32: what the f32 kernels compute for a problem
    /// of reduced-precision tensors, after converting them.
    pub fn as_f32(&self) -> ConvProblem {
        ConvProblem {
            x: self.x.with_dtype(DataType::F32),
            w: self.w.with_dtype(DataType::F32),
            y: self.y.with_dtype(DataType::F32),
            ..*self
        }
    }

    /// True when every tensor is f32.
    pub fn is_f32(&self) -> bool {
        [self.x.dtype(), self.w.dtype(), self.y.dtype()] == [DataType::F32; 3]
    }

    /// A forward convolution whose output is a packed tensor of `y_layout`.
    ///
    /// # Errors
    /// As [`ConvProblem::output_dims`].
    pub fn forward_packed(
        x: TensorDesc,
        w: FilterDesc,
        conv: ConvDesc,
        y_layout: Layout,
    ) -> Result<ConvProblem> {
        let dims = ConvProblem::output_dims(&x, &w, &conv)?;
        let y = TensorDesc::new(x.dtype(), y_layout, dims).map_err(rename("y"))?;
        ConvProblem::forward(x, w, conv, y)
    }

    /// The same problem with another batch size (packed tensors stay packed).
    ///
    /// # Errors
    /// [`Error::BadParam`] for a batch of 0, [`Error::Overflow`] when the tensors get too big.
    pub fn with_batch(&self, n: usize) -> Result<ConvProblem> {
        let x = self.x.with_batch(n).map_err(rename("x"))?;
        let y = self.y.with_batch(n).map_err(rename("y"))?;
        let mut p = ConvProblem::forward(x, self.w, self.conv, y)?.with_epilogue(self.epilogue);
        p.op = self.op;
        Ok(p)
    }

    /// The same computation with the batch folded into the positions, where every image is
    /// one pixel of a 1x1 convolution (stride 1, no padding; a fully connected layer): one
    /// image of 1 × N positions, x and y addressing the same elements. GEMM-based
    /// algorithms then run one product over the batch instead of a matrix-vector product
    /// per image. `None` for other problems, or a batch of one.
    pub(crate) fn batch_folded(&self) -> Option<ConvProblem> {
        let (x, y, w, c) = (&self.x, &self.y, &self.w, &self.conv);
        let pad = c.padding();
        let one = |t: &TensorDesc| t.h() == 1 && t.w() == 1;
        if x.n() < 2
            || !one(x)
            || !one(y)
            || w.r() != 1
            || w.s() != 1
            || c.stride() != [1, 1]
            || [pad.top, pad.bottom, pad.left, pad.right] != [0; 4]
        {
            return None;
        }
        let fold = |t: &TensorDesc| {
            let [n, ch, _, _] = t.dims();
            let [s0, s1, _, _] = t.strides();
            let row = s0.checked_mul(n)?;
            TensorDesc::with_strides(t.dtype(), [1, ch, 1, n], [row, s1, row, s0]).ok()
        };
        let mut p = ConvProblem::forward(fold(x)?, *w, *c, fold(y)?)
            .ok()?
            .with_epilogue(self.epilogue);
        p.op = self.op;
        Some(p)
    }

    /// The same problem followed by `epilogue` (bias, residual, activation).
    pub fn with_epilogue(mut self, epilogue: Epilogue) -> ConvProblem {
        self.epilogue = epilogue;
        self
    }

    /// The same descriptors as a problem of operation `op` (the backward operations take the
    /// forward problem's x, w, y and convolution; y is then dy's descriptor).
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `epilogue` when a backward problem would carry a fused
    /// epilogue (only the forward convolution has one).
    pub fn for_op(mut self, op: OpKind) -> Result<ConvProblem> {
        if op != OpKind::ConvForward && !self.epilogue.is_none() {
            return Err(Error::bad(
                "epilogue",
                self.epilogue.act.name(),
                format!("{} has no fused epilogue (only alpha and beta)", op.tag()),
            ));
        }
        self.op = op;
        Ok(self)
    }

    /// What follows the convolution.
    pub fn epilogue(&self) -> &Epilogue {
        &self.epilogue
    }

    /// The operation.
    pub fn op(&self) -> OpKind {
        self.op
    }
    /// Input tensor.
    pub fn x(&self) -> &TensorDesc {
        &self.x
    }
    /// Filter.
    pub fn w(&self) -> &FilterDesc {
        &self.w
    }
    /// Output tensor.
    pub fn y(&self) -> &TensorDesc {
        &self.y
    }
    /// Padding, stride, dilation, groups, mode.
    pub fn conv(&self) -> &ConvDesc {
        &self.conv
    }
    /// Groups.
    pub fn groups(&self) -> usize {
        self.conv.groups()
    }
    /// Input channels per group.
    pub fn c_per_group(&self) -> usize {
        self.w.c()
    }
    /// Output channels per group.
    pub fn k_per_group(&self) -> usize {
        self.w.k() / self.conv.groups()
    }
    /// Multiply-accumulates of the direct definition.
    pub fn macs(&self) -> f64 {
        let [n, k, oh, ow] = self.y.dims();
        [n, k, oh, ow, self.w.c(), self.w.r(), self.w.s()]
            .iter()
            .map(|&v| v as f64)
            .product()
    }
    /// Floating-point operations: 2 × the multiply-accumulates of the direct definition,
    /// whichever algorithm runs.
    pub fn flops(&self) -> f64 {
        2.0 * self.macs()
    }
    /// Bytes of x, w and y together (what any algorithm must at least read or write once).
    pub fn bytes(&self) -> f64 {
        let e = self.x.elements() as f64 + self.w.elements() as f64 + self.y.elements() as f64;
        e * self.x.dtype().size() as f64
    }
}

fn rename(prefix: &'static str) -> impl Fn(Error) -> Error {
    move |e| match e {
        Error::BadParam {
            field,
            value,
            reason,
        } => Error::BadParam {
            field: field.replacen("tensor", prefix, 1),
            value,
            reason,
        },
        Error::Overflow { field, detail } => Error::Overflow {
            field: field.replacen("tensor", prefix, 1),
            detail,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use crate::{Layout, ProblemSpec};

    fn p(s: &str, layout: Layout) -> super::ConvProblem {
        ProblemSpec::parse(s).unwrap().to_problem(layout).unwrap()
    }

    /// Single pixels of a 1x1 stride-1 convolution fold into one image of N positions that
    /// address the same elements; anything else, or a batch of one, does not fold.
    #[test]
    fn batches_of_single_pixels_fold() {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let fc = p("mb6g2ic8ih1oc10kh1ph0", layout);
            let f = fc.batch_folded().expect("a fully connected layer folds");
            assert_eq!(f.x().dims(), [1, 8, 1, 6]);
            assert_eq!(f.y().dims(), [1, 10, 1, 6]);
            assert_eq!((f.x().span(), f.y().span()), (fc.x().span(), fc.y().span()));
            for n in 0..6 {
                for c in 0..8 {
                    assert_eq!(f.x().offset(0, c, 0, n), fc.x().offset(n, c, 0, 0));
                }
                for k in 0..10 {
                    assert_eq!(f.y().offset(0, k, 0, n), fc.y().offset(n, k, 0, 0));
                }
            }
            assert_eq!((f.groups(), f.w().dims()), (fc.groups(), fc.w().dims()));
            for s in [
                "mb1ic8ih1oc10kh1ph0",
                "mb6ic8ih2oc10kh1ph0",
                "mb6ic8ih3oc10oh1kh3ph0",
                "mb6ic8ih1oc10oh3kh1ph1",
            ] {
                assert!(p(s, layout).batch_folded().is_none(), "{s}");
            }
        }
    }
}
