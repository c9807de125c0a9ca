//! `s2b_*`: a dilated convolution as a dense one on sub-images (space-to-batch), run by a
//! dense algorithm.
//!
//! Per dimension (size I, output O, kernel R, stride s, dilation d, leading padding p), with
//! g = gcd(s, d): the outputs o and o + d/g read inputs of the same residue modulo d, so the
//! outputs split into P = d/g classes a = 0 .. P−1 (o = a + k·P). Output k of class a reads
//! input rows (a·s − p) + d·(k·s/g + r), r < R: a dense convolution, stride s/g, on the
//! "frame" whose row j is input row (a·s − p) + d·j (zero outside the image). Every class's
//! frame has the same size, (⌈O/P⌉ − 1)·s/g + R rows, so the frames of all classes and
//! images form one batch of N·Ph·Pw sub-images, computed by the inner algorithm in one call
//! with the unchanged filter (its prepared weights too). The frames' outputs past a class's
//! own ⌈(O − a)/P⌉ are dropped; the rest are interleaved back into y, with the epilogue.
//!
//! - **Wins** where the dense algorithm is much faster than any dilated one: Winograd's
//!   fewer products on atrous layers whose sub-images still hold whole tiles (dilation 2 on
//!   65x65, 6 on 33x33).
//! - **Workspace:** the frames (as x's layout) and their outputs, plus the inner algorithm's
//!   workspace for the batch of frames.
//! - **Declines:** dense kernels, frames of more than twice the image's positions plus the
//!   outputs' taps (strides far beyond the kernel, padding far beyond the image), and what
//!   the inner algorithm declines of the frames' problem.
//! - **Prepared weights:** the inner algorithm's, for the frames' problem.
//! - **Deterministic:** as the inner algorithm.

use crate::conv::{
    default_cost_features, AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext, COST_FEATURES,
};
use crate::desc::{ConvDesc, ConvProblem, DataType, FilterLayout, Layout, Padding, TensorDesc};
use crate::error::{Error, Result};
use crate::op::Accuracy;
use crate::runtime::Carve;

use super::check_dilated;
use crate::conv::gemm::IMPLICIT_GEMM;
use crate::conv::rotated::gcd;
use crate::conv::split::declined;
use crate::conv::winograd::{WINOGRAD_2X2, WINOGRAD_4X4, WINOGRAD_6X6};

/// Space-to-batch over Winograd F(2x2, 3x3).
pub(crate) const S2B_WINOGRAD_2X2: SpaceToBatch = SpaceToBatch {
    name: "s2b_winograd_2x2",
    inner: &WINOGRAD_2X2,
};
/// Space-to-batch over Winograd F(4x4, 3x3).
pub(crate) const S2B_WINOGRAD_4X4: SpaceToBatch = SpaceToBatch {
    name: "s2b_winograd_4x4",
    inner: &WINOGRAD_4X4,
};
/// Space-to-batch over Winograd F(6x6, 3x3).
pub(crate) const S2B_WINOGRAD_6X6: SpaceToBatch = SpaceToBatch {
    name: "s2b_winograd_6x6",
    inner: &WINOGRAD_6X6,
};
/// Space-to-batch over the implicit GEMM.
pub(crate) const S2B_IMPLICIT_GEMM: SpaceToBatch = SpaceToBatch {
    name: "s2b_implicit_gemm",
    inner: &IMPLICIT_GEMM,
};

/// A dense algorithm on the frames of a dilated convolution.
pub(crate) struct SpaceToBatch {
    pub name: &'static str,
    pub inner: &'static dyn ConvAlgorithm,
}

/// The split of one dimension into classes.
#[derive(Clone, Copy, Debug)]
struct Dim {
    /// Classes: outputs a, a + period, a + 2·period, ... for a < classes.
    period: usize,
    classes: usize,
    /// Outputs of the largest class (the frames' output size).
    out: usize,
    /// The frames' stride and size.
    stride: usize,
    frame: usize,
    /// The image's size, the convolution's stride, dilation and leading padding.
    size: usize,
    conv_stride: usize,
    dilation: usize,
    pad: i64,
    /// Outputs of y in this dimension.
    total: usize,
}

impl Dim {
    fn new(
        size: usize,
        out: usize,
        kernel: usize,
        stride: usize,
        dilation: usize,
        pad: i64,
    ) -> Dim {
        let g = gcd(stride, dilation);
        let period = dilation / g;
        let classes = period.min(out);
        let per = out.div_ceil(period);
        let fstride = stride / g;
        Dim {
            period,
            classes,
            out: per,
            stride: fstride,
            frame: (per - 1) * fstride + kernel,
            size,
            conv_stride: stride,
            dilation,
            pad,
            total: out,
        }
    }

    /// The input index of frame row `j` of class `a`, when inside the image.
    #[inline]
    fn input(&self, a: usize, j: usize) -> Option<usize> {
        let i = (a * self.conv_stride) as i64 - self.pad + (self.dilation * j) as i64;
        (i >= 0 && (i as usize) < self.size).then_some(i as usize)
    }

    /// Outputs of class `a`.
    fn outputs(&self, a: usize) -> usize {
        (self.total - a).div_ceil(self.period)
    }
}

/// The frames' problem and the two dimensions' splits.
fn frames(p: &ConvProblem) -> std::result::Result<(ConvProblem, [Dim; 2]), String> {
    check_dilated(p)?;
    let [n, c, h, w] = p.x().dims();
    let [_, _, oh, ow] = p.y().dims();
    let pad = p.conv().padding();
    let [sh, sw] = p.conv().stride();
    let [dh, dw] = p.conv().dilation();
    let dims = [
        Dim::new(h, oh, p.w().r(), sh, dh, pad.top),
        Dim::new(w, ow, p.w().s(), sw, dw, pad.left),
    ];
    // The frames repeat the rows and columns the classes share and keep what a frame's
    // stride skips: decline when they would hold more than twice the image plus every
    // output's taps (a stride far beyond the kernel, or padding far beyond the image).
    let framed = [0, 1].map(|i| dims[i].classes as f64 * dims[i].frame as f64);
    let needed = h as f64 * w as f64 + oh as f64 * ow as f64 * (p.w().r() * p.w().s()) as f64;
    if framed[0] * framed[1] > 2.0 * needed {
        return Err(format!(
            "the frames would hold {} positions per channel, more than twice the image and \
             the outputs' taps ({needed})",
            framed[0] * framed[1]
        ));
    }
    let batch = n
        .checked_mul(dims[0].classes)
        .and_then(|b| b.checked_mul(dims[1].classes))
        .ok_or("the frames' batch overflows")?;
    let layout = match p.w().layout() {
        FilterLayout::Kcrs => Layout::Nchw,
        FilterLayout::Krsc => Layout::Nhwc,
    };
    let bad = |e: Error| format!("the frames' problem is invalid: {e}");
    let x = TensorDesc::new(
        DataType::F32,
        layout,
        [batch, c, dims[0].frame, dims[1].frame],
    )
    .map_err(bad)?;
    let conv = ConvDesc::new(
        Padding::default(),
        [dims[0].stride, dims[1].stride],
        [1, 1],
        p.groups(),
        p.conv().mode(),
    )
    .map_err(bad)?;
    let q = ConvProblem::forward_packed(x, p.w().with_dtype(DataType::F32), conv, layout)
        .map_err(bad)?;
    if q.y().dims()[2..] != [dims[0].out, dims[1].out] {
        return Err("the frames' output does not match the classes".into());
    }
    Ok((q, dims))
}

impl SpaceToBatch {
    /// Floats of the frames and of their outputs.
    fn buffers(q: &ConvProblem) -> [usize; 2] {
        [q.x().span(), q.y().span()]
    }
}

impl ConvAlgorithm for SpaceToBatch {
    fn name(&self) -> &'static str {
        self.name
    }

    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        let (q, _) = frames(p)?;
        self.inner.check(&q)
    }

    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        frames(p).map_or(0, |(q, _)| {
            let [a, b] = Self::buffers(&q);
            a.saturating_add(b)
                .saturating_mul(std::mem::size_of::<f32>())
                .saturating_add(self.inner.workspace_bytes(&q))
        })
    }

    fn deterministic(&self) -> bool {
        self.inner.deterministic()
    }

    fn accuracy(&self) -> Accuracy {
        self.inner.accuracy()
    }
    fn accuracy_under(&self, math: crate::MathMode) -> Accuracy {
        self.inner.accuracy_under(math)
    }

    /// The inner algorithm's features on the frames, plus the copies in and out (MB of the
    /// frames and their outputs in the bytes term).
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        match frames(p) {
            Ok((q, _)) => {
                let mut f = self.inner.cost_features(&q);
                let [a, b] = Self::buffers(&q);
                f[2] += (a + b) as f64 * 4.0 / 1e6;
                f
            }
            // A problem the algorithm declines: the definition's features.
            Err(_) => default_cost_features(p, 0),
        }
    }

    fn prepare(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        let (q, _) = frames(p).map_err(|r| declined(self.name, r))?;
        self.inner.prepare(ctx, &q, w)
    }

    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let (q, [dh, dw]) = frames(p).map_err(|r| declined(self.name, r))?;
        let [fx_n, fy_n] = Self::buffers(&q);
        let mut carve = Carve::new(workspace);
        let fx = carve.take::<f32>(fx_n)?;
        let fy = carve.take::<f32>(fy_n)?;
        let inner_ws = carve.take::<u8>(self.inner.workspace_bytes(&q))?;
        let (xs, ys) = (p.x().strides(), p.y().strides());
        let (qxs, qys) = (q.x().strides(), q.y().strides());
        let c = p.x().c();
        // The frames: frame b = (image, class row, class column).
        for n in 0..p.x().n() {
            for ah in 0..dh.classes {
                for aw in 0..dw.classes {
                    let b = (n * dh.classes + ah) * dw.classes + aw;
                    for ci in 0..c {
                        for j in 0..dh.frame {
                            let row = b * qxs[0] + ci * qxs[1] + j * qxs[2];
                            let Some(ih) = dh.input(ah, j) else {
                                for l in 0..dw.frame {
                                    fx[row + l * qxs[3]] = 0.0;
                                }
                                continue;
                            };
                            let src = n * xs[0] + ci * xs[1] + ih * xs[2];
                            for l in 0..dw.frame {
                                fx[row + l * qxs[3]] = match dw.input(aw, l) {
                                    Some(iw) => x[src + iw * xs[3]],
                                    None => 0.0,
                                };
                            }
                        }
                    }
                }
            }
        }
        self.inner
            .run(ctx, &q, fx, w, fy, inner_ws, &EpilogueArgs::default())?;
        // The frames' outputs, interleaved into y with the epilogue.
        let k = p.y().c();
        for n in 0..p.x().n() {
            for ah in 0..dh.classes {
                for aw in 0..dw.classes {
                    let b = (n * dh.classes + ah) * dw.classes + aw;
                    for kk in 0..k {
                        for i in 0..dh.outputs(ah) {
                            let oh = ah + i * dh.period;
                            for j in 0..dw.outputs(aw) {
                                let ow = aw + j * dw.period;
                                let v = fy[b * qys[0] + kk * qys[1] + i * qys[2] + j * qys[3]];
                                let off = n * ys[0] + kk * ys[1] + oh * ys[2] + ow * ys[3];
                                y[off] = epi.value(v, kk, off, || y[off]);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
