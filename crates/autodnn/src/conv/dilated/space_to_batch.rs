//! `s2b_*`: a dilated convolution as a dense one on sub-images (space-to-batch), run by a
//! dense algorithm.
//!
//! Per dimension (size I, output O, kernel R, stride s, dilation d, leading padding p), with
//! g = gcd(s, d): the outputs o and o + d/g read inputs of the same residue modulo d, so the
//! outputs split into P = d/g classes a = 0 .. P−1 (o = a + k·P). Output k of class a reads
//! input rows (a·s − p) + d·(k·s/g + r), r < R: a dense convolution, stride s/g, on the
//! "frame" whose row j is input row (a·s − p) + d·j (zero outside the image). Class a has
//! ⌈(O − a)/P⌉ outputs: the first O mod P classes one more than the others. The classes of
//! one output count form a group per dimension (at most two), and the frames of a pair of
//! groups (rows, columns) and of every image form one batch of sub-images of one size,
//! (outputs − 1)·s/g + R rows: at most four calls of the inner algorithm, each with the
//! unchanged filter (and prepared weights, below). The frames' outputs are interleaved
//! back into y, with the epilogue. (One batch of frames of
//! the largest class's size left Winograd F(4x4) two tiles a side on the 4x4 classes of a
//! 65x65 image at dilation 16, where one tile fits.)
//!
//! - **Wins** where the dense algorithm is much faster than any dilated one: Winograd's
//!   fewer products on atrous layers whose sub-images still hold whole tiles (dilation 2 on
//!   65x65, 6 on 33x33).
//! - **Workspace:** the frames (as x's layout) and their outputs, plus the inner algorithm's
//!   workspace for the batch of frames.
//! - **Declines:** dense kernels, frames of more than twice the image's positions plus the
//!   outputs' taps (strides far beyond the kernel, padding far beyond the image), and what
//!   the inner algorithm declines of the frames' problem.
//! - **Prepared weights:** the inner algorithm's, for each batch's problem: one copy when the
//!   batches' preparations are the same (Winograd's transformed filter depends on the filter
//!   alone), else each distinct one after a header that maps the batches to them (the
//!   implicit GEMM packs for the frame's shape).
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
    /// The frames' stride, and the kernel's size.
    stride: usize,
    kernel: usize,
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
        Dim {
            period,
            classes,
            stride: stride / g,
            kernel,
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

    /// The classes grouped by output count: classes `first .. first + count` have `out`
    /// outputs each (the larger count first).
    fn groups(&self) -> impl Iterator<Item = Group> + '_ {
        let more = self.total % self.period;
        let split = if more == 0 { 0 } else { more.min(self.classes) };
        [(0, split), (split, self.classes - split)]
            .into_iter()
            .filter(|&(_, count)| count > 0)
            .map(|(first, count)| Group {
                first,
                count,
                out: self.outputs(first),
            })
    }

    /// A frame's size for a class of `out` outputs.
    fn frame(&self, out: usize) -> usize {
        (out - 1) * self.stride + self.kernel
    }
}

/// Classes of one dimension with the same output count.
#[derive(Clone, Copy, Debug)]
struct Group {
    first: usize,
    count: usize,
    out: usize,
}

/// Opens prepared weights that hold several batches' preparations (see [`SpaceToBatch`]'s
/// `prepare`); no inner algorithm's own prepared data starts with it.
const COMPOSITE_MAGIC: f32 = 7407.0;
/// 24 bits: the integers below 2^24 are exact in f32.
const LOW_BITS: usize = 24;

/// `v` as two exact f32 integers (high and low 24 bits).
fn encode(v: usize) -> [f32; 2] {
    [(v >> LOW_BITS) as f32, (v & ((1 << LOW_BITS) - 1)) as f32]
}

/// The inverse of [`encode`]; `None` for values it does not make.
fn decode(h: f32, l: f32) -> Option<usize> {
    let ok = |v: f32| v.fract() == 0.0 && (0.0..(1u32 << LOW_BITS) as f32).contains(&v);
    (ok(h) && ok(l)).then_some(((h as usize) << LOW_BITS) | l as usize)
}

/// Batch `i`'s part of prepared weights made by [`SpaceToBatch`]'s `prepare` for `batches`
/// batches: the whole data when it is one preparation for all.
fn prepared_part(data: &[f32], i: usize, batches: usize) -> Result<&[f32]> {
    if data.first() != Some(&COMPOSITE_MAGIC) {
        return Ok(data);
    }
    let bad = || Error::bad("prepared", "data", "not made by this algorithm's prepare");
    let header = 2 + 4 * batches;
    if data.len() < header || decode(0.0, data[1]) != Some(batches) {
        return Err(bad());
    }
    let at = 2 + 4 * i;
    let off = decode(data[at], data[at + 1]).ok_or_else(bad)?;
    let len = decode(data[at + 2], data[at + 3]).ok_or_else(bad)?;
    match off.checked_add(len) {
        Some(end) if off >= header && end <= data.len() => Ok(&data[off..end]),
        _ => Err(bad()),
    }
}

/// One batch of frames: its dense problem and its classes in each dimension.
struct Batch {
    q: ConvProblem,
    groups: [Group; 2],
}

/// The frames' problems (a batch per pair of groups) and the two dimensions' splits.
fn frames(p: &ConvProblem) -> std::result::Result<(Vec<Batch>, [Dim; 2]), String> {
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
    let framed = [0, 1].map(|i| {
        dims[i]
            .groups()
            .map(|g| g.count as f64 * dims[i].frame(g.out) as f64)
            .sum::<f64>()
    });
    let needed = h as f64 * w as f64 + oh as f64 * ow as f64 * (p.w().r() * p.w().s()) as f64;
    if framed[0] * framed[1] > 2.0 * needed {
        return Err(format!(
            "the frames would hold {} positions per channel, more than twice the image and \
             the outputs' taps ({needed})",
            framed[0] * framed[1]
        ));
    }
    let layout = match p.w().layout() {
        FilterLayout::Kcrs => Layout::Nchw,
        FilterLayout::Krsc => Layout::Nhwc,
    };
    let bad = |e: Error| format!("the frames' problem is invalid: {e}");
    let mut batches = Vec::with_capacity(4);
    for gh in dims[0].groups() {
        for gw in dims[1].groups() {
            let batch = n
                .checked_mul(gh.count)
                .and_then(|b| b.checked_mul(gw.count))
                .ok_or("the frames' batch overflows")?;
            let x = TensorDesc::new(
                DataType::F32,
                layout,
                [batch, c, dims[0].frame(gh.out), dims[1].frame(gw.out)],
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
            if q.y().dims()[2..] != [gh.out, gw.out] {
                return Err("the frames' output does not match the classes".into());
            }
            batches.push(Batch {
                q,
                groups: [gh, gw],
            });
        }
    }
    Ok((batches, dims))
}

impl SpaceToBatch {
    /// Floats of the largest batch's frames and of the largest batch's outputs, and bytes of
    /// the inner algorithm's largest workspace: the batches run one after the other.
    fn buffers(&self, batches: &[Batch]) -> [usize; 3] {
        batches.iter().fold([0; 3], |[a, b, c], t| {
            [
                a.max(t.q.x().span()),
                b.max(t.q.y().span()),
                c.max(self.inner.workspace_bytes(&t.q)),
            ]
        })
    }
}

impl ConvAlgorithm for SpaceToBatch {
    fn name(&self) -> &'static str {
        self.name
    }

    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        let (batches, _) = frames(p)?;
        batches.iter().try_for_each(|b| self.inner.check(&b.q))
    }

    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        frames(p).map_or(0, |(batches, _)| {
            let [a, b, inner] = self.buffers(&batches);
            a.saturating_add(b)
                .saturating_mul(std::mem::size_of::<f32>())
                .saturating_add(inner)
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

    /// The inner algorithm's features on each batch of frames, summed, plus the copies in
    /// and out (MB of the frames and their outputs in the bytes term).
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        match frames(p) {
            Ok((batches, _)) => {
                let mut f = [0.0; COST_FEATURES];
                for b in &batches {
                    let g = self.inner.cost_features(&b.q);
                    f.iter_mut().zip(g).for_each(|(s, v)| *s += v);
                    f[2] += (b.q.x().span() + b.q.y().span()) as f64 * 4.0 / 1e6;
                }
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
        let (batches, _) = frames(p).map_err(|r| declined(self.name, r))?;
        // Each batch's preparation, the same ones stored once.
        let mut parts: Vec<Vec<f32>> = Vec::new();
        let mut index = Vec::with_capacity(batches.len());
        for b in &batches {
            let Some(d) = self.inner.prepare(ctx, &b.q, w)? else {
                return Ok(None);
            };
            let same = |q: &Vec<f32>| {
                q.len() == d.len() && q.iter().zip(&d).all(|(a, b)| a.to_bits() == b.to_bits())
            };
            match parts.iter().position(same) {
                Some(i) => index.push(i),
                None => {
                    index.push(parts.len());
                    parts.push(d);
                }
            }
        }
        if parts.len() == 1 {
            return Ok(parts.pop());
        }
        let header = 2 + 4 * batches.len();
        let total = header + parts.iter().map(Vec::len).sum::<usize>();
        let mut data = crate::alloc::try_vec_with_capacity(total, "space-to-batch prepared")?;
        data.push(COMPOSITE_MAGIC);
        data.push(batches.len() as f32);
        let mut starts = Vec::with_capacity(parts.len());
        let mut at = header;
        for q in &parts {
            starts.push(at);
            at += q.len();
        }
        for &i in &index {
            data.extend(encode(starts[i]));
            data.extend(encode(parts[i].len()));
        }
        for q in &parts {
            data.extend_from_slice(q);
        }
        Ok(Some(data))
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
        let (batches, [dh, dw]) = frames(p).map_err(|r| declined(self.name, r))?;
        let [fx_n, fy_n, inner_n] = self.buffers(&batches);
        let mut carve = Carve::new(workspace);
        let fx_all = carve.take::<f32>(fx_n)?;
        let fy_all = carve.take::<f32>(fy_n)?;
        let inner_ws = carve.take::<u8>(inner_n)?;
        let (xs, ys) = (p.x().strides(), p.y().strides());
        let c = p.x().c();
        let k = p.y().c();
        for (
            bi,
            Batch {
                q,
                groups: [gh, gw],
            },
        ) in batches.iter().enumerate()
        {
            let w = match w {
                AlgoWeights::Prepared(d) => {
                    AlgoWeights::Prepared(prepared_part(d, bi, batches.len())?)
                }
                plain => plain,
            };
            let (qxs, qys) = (q.x().strides(), q.y().strides());
            let (fh, fw) = (q.x().h(), q.x().w());
            let fx = &mut fx_all[..q.x().span()];
            let fy = &mut fy_all[..q.y().span()];
            // The frames: frame b = (image, class row, class column) within the batch.
            let frame = |n: usize, ah: usize, aw: usize| {
                (n * gh.count + ah - gh.first) * gw.count + aw - gw.first
            };
            for n in 0..p.x().n() {
                for ah in gh.first..gh.first + gh.count {
                    for aw in gw.first..gw.first + gw.count {
                        let b = frame(n, ah, aw);
                        for ci in 0..c {
                            for j in 0..fh {
                                let row = b * qxs[0] + ci * qxs[1] + j * qxs[2];
                                let Some(ih) = dh.input(ah, j) else {
                                    for l in 0..fw {
                                        fx[row + l * qxs[3]] = 0.0;
                                    }
                                    continue;
                                };
                                let src = n * xs[0] + ci * xs[1] + ih * xs[2];
                                for l in 0..fw {
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
                .run(ctx, q, fx, w, fy, inner_ws, &EpilogueArgs::default())?;
            // The frames' outputs, interleaved into y with the epilogue.
            for n in 0..p.x().n() {
                for ah in gh.first..gh.first + gh.count {
                    for aw in gw.first..gw.first + gw.count {
                        let b = frame(n, ah, aw);
                        for kk in 0..k {
                            for i in 0..gh.out {
                                let oh = ah + i * dh.period;
                                for j in 0..gw.out {
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
        }
        Ok(())
    }
}
