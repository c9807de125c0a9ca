//! Batch split: an algorithm run on equal parts of the batch, the parts shared among the
//! threads (one thread each when there are fewer threads than parts), instead of every
//! thread working on each image in turn. Small images at batch 8 leave an algorithm's own
//! threading with little to split per call (a GEMM of 49 positions, a few Winograd tiles);
//! whole images per thread keep both cores busy.
//!
//! The parts are [`parts`] of the batch (the largest of 4, 3, 2 that divides it), never the
//! thread count, so the bits do not depend on the thread count: forward and backward data
//! write disjoint images, and backward filter sums the parts' partial gradients in part
//! order. The workspace is one slot per part (the inner algorithm's workspace for one part,
//! and for backward filter the part's partial gradient).

use crate::conv::{
    AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext, ReducedWeights, COST_FEATURES,
};
use crate::desc::{ConvProblem, OpKind};
use crate::error::{Error, Result};
use crate::op::conv_bwd::{check_problem, scaled};
use crate::op::{
    Accuracy, Algorithm, ConvBackwardData, ConvBackwardFilter, ConvBwdDataInputs,
    ConvBwdFilterInputs, Tensor, TensorMut,
};
use crate::runtime::parallel::try_for_each_chunk;
use crate::runtime::workspace::Carve;

/// Parts of a batch of `n`: the largest of 4, 3, 2 that divides it (1: no split).
pub(crate) fn parts(n: usize) -> usize {
    [4, 3, 2]
        .into_iter()
        .find(|&s| n.is_multiple_of(s))
        .unwrap_or(1)
}

/// The problem of one part, or why the batch does not split: fewer than two parts, or a
/// tensor whose images are not one batch stride apart each within its stride.
fn part_problem(p: &ConvProblem) -> std::result::Result<(usize, ConvProblem), String> {
    let s = parts(p.x().n());
    if s < 2 {
        return Err(format!(
            "a batch of {} does not split into 2 to 4 equal parts",
            p.x().n()
        ));
    }
    let q = p
        .with_batch(p.x().n() / s)
        .map_err(|e| format!("a part's problem is invalid: {e}"))?;
    for (whole, one) in [(p.x(), q.x()), (p.y(), q.y())] {
        let one_image = one.with_batch(1).map_err(|e| e.to_string())?.span();
        if whole.strides()[0] < one_image {
            return Err("needs images one batch stride apart".into());
        }
    }
    Ok((s, q))
}

/// The threads of each part's context, and how many parts run at once.
fn part_context<'a>(ctx: &ExecContext<'a>, s: usize) -> ExecContext<'a> {
    ExecContext {
        threads: (ctx.threads / s).max(1),
        ..*ctx
    }
}

/// Runs `f(part, slot)` for every part, in parallel on the context's threads.
fn run_parts<S: Send>(
    ctx: &ExecContext<'_>,
    slots: Vec<S>,
    f: impl Fn(usize, S) -> Result<()> + Sync + Send,
) -> Result<()> {
    if ctx.threads > 1 {
        // At most 4 parts: each taken out of its place by the one item that runs it.
        let mut slots: Vec<Option<S>> = slots.into_iter().map(Some).collect();
        try_for_each_chunk(ctx, &mut slots, 1, |i, s| match s[0].take() {
            Some(s) => f(i, s),
            None => Ok(()),
        })
    } else {
        slots.into_iter().enumerate().try_for_each(|(i, s)| f(i, s))
    }
}

/// Cuts `ws` into `s` consecutive slots of `bytes` (the inner algorithms align what they
/// carve themselves, so the slots add up to exactly `s · bytes`).
fn slots(ws: &mut [u8], s: usize, bytes: usize) -> Result<Vec<&mut [u8]>> {
    let mut carve = Carve::new(ws);
    (0..s).map(|_| carve.take::<u8>(bytes)).collect()
}

/// Cuts `out` into the parts' images: `s` disjoint slices of `stride · n/s` elements (the
/// last one to the end).
fn image_parts<T>(out: &mut [T], s: usize, per_part: usize) -> Vec<&mut [T]> {
    let mut v = Vec::with_capacity(s);
    let mut rest = out;
    for i in 0..s {
        let take = if i + 1 == s {
            rest.len()
        } else {
            per_part.min(rest.len())
        };
        let (head, tail) = rest.split_at_mut(take);
        v.push(head);
        rest = tail;
    }
    v
}

/// [`image_parts`] of a tensor of any element type.
fn tensor_parts<'a>(out: &'a mut TensorMut<'_>, s: usize, per_part: usize) -> Vec<TensorMut<'a>> {
    match out {
        TensorMut::F32(v) => image_parts(v, s, per_part)
            .into_iter()
            .map(TensorMut::F32)
            .collect(),
        TensorMut::Bf16(v) => image_parts(v, s, per_part)
            .into_iter()
            .map(TensorMut::Bf16)
            .collect(),
        TensorMut::F16(v) => image_parts(v, s, per_part)
            .into_iter()
            .map(TensorMut::F16)
            .collect(),
    }
}

/// `name` declined the problem for `reason` (found only when it runs: a wrapper's inner problem).
pub(crate) fn declined(name: &str, reason: String) -> Error {
    Error::Declined {
        algo: name.into(),
        reason,
    }
}

/// A forward algorithm on parts of the batch.
pub(crate) struct SplitForward {
    pub name: &'static str,
    pub inner: &'static dyn ConvAlgorithm,
}

impl ConvAlgorithm for SplitForward {
    fn name(&self) -> &'static str {
        self.name
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        let (_, q) = part_problem(p)?;
        self.inner.check(&q)
    }
    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        part_problem(p).map_or(0, |(s, q)| {
            // Saturating: a size past usize is more than any budget or allocator grants.
            s.saturating_mul(self.inner.workspace_bytes(&q))
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
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        self.inner.cost_features(p)
    }
    fn prepare(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        let (_, q) = part_problem(p).map_err(|r| declined(self.name, r))?;
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
        let (s, q) = part_problem(p).map_err(|r| declined(self.name, r))?;
        let per = p.x().n() / s;
        let (xs0, ys0) = (p.x().strides()[0], p.y().strides()[0]);
        let ws = slots(workspace, s, self.inner.workspace_bytes(&q))?;
        let ys = image_parts(y, s, per * ys0);
        let items: Vec<_> = ws.into_iter().zip(ys).collect();
        let pctx = part_context(ctx, s);
        run_parts(ctx, items, |i, (ws, y)| {
            let mut e = *epi;
            e.residual = epi.residual.map(|z| &z[i * per * ys0..]);
            self.inner.run(&pctx, &q, &x[i * per * xs0..], w, y, ws, &e)
        })
    }
    fn reads_reduced(&self) -> bool {
        self.inner.reads_reduced()
    }
    fn run_reduced(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        x: Tensor<'_>,
        w: ReducedWeights<'_>,
        y: &mut TensorMut<'_>,
        workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let (s, q) = part_problem(p).map_err(|r| declined(self.name, r))?;
        let per = p.x().n() / s;
        let (xs0, ys0) = (p.x().strides()[0], p.y().strides()[0]);
        let ws = slots(workspace, s, self.inner.workspace_bytes(&q))?;
        let ys = tensor_parts(y, s, per * ys0);
        let items: Vec<_> = ws.into_iter().zip(ys).collect();
        let pctx = part_context(ctx, s);
        run_parts(ctx, items, |i, (ws, mut y)| {
            let mut e = *epi;
            e.residual = epi.residual.map(|z| &z[i * per * ys0..]);
            let x = crate::op::tensor::tail(x, i * per * xs0);
            self.inner.run_reduced(&pctx, &q, x, w, &mut y, ws, &e)
        })
    }
}

/// A backward-data algorithm on parts of the batch.
pub(crate) struct SplitBwdData {
    pub name: &'static str,
    pub inner: &'static dyn Algorithm<ConvBackwardData>,
}

impl Algorithm<ConvBackwardData> for SplitBwdData {
    fn name(&self) -> &'static str {
        self.name
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_problem(p, OpKind::ConvBackwardData)?;
        let (_, q) = part_problem(p)?;
        self.inner.check(&q)
    }
    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        part_problem(p).map_or(0, |(s, q)| {
            // Saturating: a size past usize is more than any budget or allocator grants.
            s.saturating_mul(self.inner.workspace_bytes(&q))
        })
    }
    fn deterministic(&self) -> bool {
        self.inner.deterministic()
    }
    fn accuracy(&self) -> Accuracy {
        self.inner.accuracy()
    }
    fn accuracy_under(&self, p: &ConvProblem, math: crate::MathMode) -> Accuracy {
        self.inner.accuracy_under(p, math)
    }
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        self.inner.cost_features(p)
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        inputs: &ConvBwdDataInputs<'_>,
        out: &mut TensorMut<'_>,
        workspace: &mut [u8],
    ) -> Result<()> {
        let (s, q) = part_problem(p).map_err(|r| declined(self.name, r))?;
        let per = p.x().n() / s;
        let (xs0, ys0) = (p.x().strides()[0], p.y().strides()[0]);
        let dy = inputs.dy.f32("dy")?;
        let ws = slots(workspace, s, self.inner.workspace_bytes(&q))?;
        let dxs = image_parts(out.f32("dx")?, s, per * xs0);
        let items: Vec<_> = ws.into_iter().zip(dxs).collect();
        let pctx = part_context(ctx, s);
        run_parts(ctx, items, |i, (ws, dx)| {
            let part = ConvBwdDataInputs {
                dy: Tensor::F32(&dy[i * per * ys0..]),
                ..*inputs
            };
            self.inner
                .run(&pctx, &q, &part, &mut TensorMut::F32(dx), ws)
        })
    }
}

/// A backward-filter algorithm on parts of the batch: each part's gradient into its own
/// buffer, then dw = alpha · Σ parts (in part order) + beta · dw.
pub(crate) struct SplitBwdFilter {
    pub name: &'static str,
    pub inner: &'static dyn Algorithm<ConvBackwardFilter>,
}

impl Algorithm<ConvBackwardFilter> for SplitBwdFilter {
    fn name(&self) -> &'static str {
        self.name
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_problem(p, OpKind::ConvBackwardFilter)?;
        let (_, q) = part_problem(p)?;
        self.inner.check(&q)
    }
    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        // The parts' gradients (f32, after up to 3 bytes to align them), then their slots.
        // Saturating: a size past usize is more than any budget or allocator grants (an
        // inner size near usize::MAX overflowed here: descriptors fuzzing).
        part_problem(p).map_or(0, |(s, q)| {
            let slot = p
                .w()
                .elements()
                .saturating_mul(4)
                .saturating_add(self.inner.workspace_bytes(&q));
            s.saturating_mul(slot).saturating_add(3)
        })
    }
    fn deterministic(&self) -> bool {
        self.inner.deterministic()
    }
    fn accuracy(&self) -> Accuracy {
        self.inner.accuracy()
    }
    fn accuracy_under(&self, p: &ConvProblem, math: crate::MathMode) -> Accuracy {
        self.inner.accuracy_under(p, math)
    }
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        self.inner.cost_features(p)
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        inputs: &ConvBwdFilterInputs<'_>,
        out: &mut TensorMut<'_>,
        workspace: &mut [u8],
    ) -> Result<()> {
        let (s, q) = part_problem(p).map_err(|r| declined(self.name, r))?;
        let per = p.x().n() / s;
        let (xs0, ys0) = (p.x().strides()[0], p.y().strides()[0]);
        let (x, dy) = (inputs.x.f32("x")?, inputs.dy.f32("dy")?);
        let we = p.w().elements();
        let inner_ws = self.inner.workspace_bytes(&q);
        let mut carve = Carve::new(workspace);
        let grads = carve.take::<f32>(s * we)?;
        let rest = carve.take::<u8>(s * inner_ws)?;
        let items: Vec<(&mut [f32], &mut [u8])> = grads
            .chunks_mut(we)
            .zip(slots(rest, s, inner_ws)?)
            .collect();
        let pctx = part_context(ctx, s);
        run_parts(ctx, items, |i, (g, ws)| {
            let part = ConvBwdFilterInputs {
                x: Tensor::F32(&x[i * per * xs0..]),
                dy: Tensor::F32(&dy[i * per * ys0..]),
                alpha: 1.0,
                beta: 0.0,
            };
            self.inner.run(&pctx, &q, &part, &mut TensorMut::F32(g), ws)
        })?;
        let dw = &mut out.f32("dw")?[..we];
        let (alpha, beta) = (inputs.alpha, inputs.beta);
        for (e, d) in dw.iter_mut().enumerate() {
            let mut sum = 0.0f32;
            for g in 0..s {
                sum += grads[g * we + e];
            }
            *d = scaled(sum, *d, alpha, beta);
        }
        Ok(())
    }
}

use super::depthwise::{Depthwise, DEPTHWISE_BWD_DATA};
use super::gemm::{GEMM, GEMM_BWD_DATA, GEMM_BWD_FILTER, IMPLICIT_GEMM, IMPLICIT_GEMM_BWD_DATA};
use super::winograd::{WINOGRAD_4X4, WINOGRAD_4X4_BWD_DATA, WINOGRAD_6X6, WINOGRAD_6X6_BWD_DATA};

pub(crate) static DEPTHWISE_BATCH: SplitForward = SplitForward {
    name: "depthwise_batch",
    inner: &Depthwise,
};
pub(crate) static WINOGRAD_4X4_BATCH: SplitForward = SplitForward {
    name: "winograd_4x4_batch",
    inner: &WINOGRAD_4X4,
};
pub(crate) static WINOGRAD_6X6_BATCH: SplitForward = SplitForward {
    name: "winograd_6x6_batch",
    inner: &WINOGRAD_6X6,
};
pub(crate) static IMPLICIT_GEMM_BATCH: SplitForward = SplitForward {
    name: "implicit_gemm_batch",
    inner: &IMPLICIT_GEMM,
};
pub(crate) static GEMM_BATCH: SplitForward = SplitForward {
    name: "gemm_batch",
    inner: &GEMM,
};
pub(crate) static DEPTHWISE_BWD_DATA_BATCH: SplitBwdData = SplitBwdData {
    name: "depthwise_batch",
    inner: &DEPTHWISE_BWD_DATA,
};
pub(crate) static WINOGRAD_4X4_BWD_DATA_BATCH: SplitBwdData = SplitBwdData {
    name: "winograd_4x4_batch",
    inner: &WINOGRAD_4X4_BWD_DATA,
};
pub(crate) static WINOGRAD_6X6_BWD_DATA_BATCH: SplitBwdData = SplitBwdData {
    name: "winograd_6x6_batch",
    inner: &WINOGRAD_6X6_BWD_DATA,
};
pub(crate) static IMPLICIT_GEMM_BWD_DATA_BATCH: SplitBwdData = SplitBwdData {
    name: "implicit_gemm_batch",
    inner: &IMPLICIT_GEMM_BWD_DATA,
};
pub(crate) static GEMM_BWD_DATA_BATCH: SplitBwdData = SplitBwdData {
    name: "gemm_batch",
    inner: &GEMM_BWD_DATA,
};
pub(crate) static GEMM_BWD_FILTER_BATCH: SplitBwdFilter = SplitBwdFilter {
    name: "gemm_batch",
    inner: &GEMM_BWD_FILTER,
};
