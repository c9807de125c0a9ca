//! Normalization: batch normalization in cuDNN's spatial mode (inference, training and
//! backward: cudnnBatchNormalizationForwardInference / ForwardTraining / Backward), layer
//! normalization (PyTorch's `LayerNorm(normalized_shape = [C, H, W])`, forward and backward),
//! and folding an inference batch norm (and a following per-channel scale and shift) into a
//! convolution's weights and bias.
//!
//! **Batch norm.** Statistics per channel over N, H and W (M = N·H·W values); γ (`gamma`), β
//! (`beta`) and the statistics are slices of C values. ε (`epsilon`) is at least cuDNN's
//! `CUDNN_BN_MIN_EPSILON`, 1e-5 ([`BN_MIN_EPSILON`]; the f32 rounding of 1e-5 is accepted).
//! - inference: y = alpha·(γ·(x − mean)/√(var + ε) + β) + beta·y with the running estimates;
//! - training: the batch's mean and biased variance; y as above; `saved` receives the mean and
//!   1/√(var + ε) per channel; `running` (mean, var) becomes (1 − f)·running + f·batch, the
//!   variance term unbiased (var·M/(M − 1), as cuDNN and PyTorch do). Both computed in f64 as
//!   `(1.0 - f) * r + f * v` from the f32 running value widened and rounded once to f32
//!   (f = 1 overwrites without reading: uninitialised running statistics are fine). Training
//!   needs M > 1 (PyTorch's rule).
//! - backward: dx = alpha_d·(γ·inv_std/M·(M·dy − Σdy − x̂·Σ(dy·x̂))) + beta_d·dx,
//!   dγ = alpha_p·Σ(dy·x̂) + beta_p·dγ, dβ = alpha_p·Σdy + beta_p·dβ with x̂ = (x − mean)·inv_std,
//!   from the saved statistics, or recomputed from x (with ε) when none are given.
//!
//! **Layer norm.** Per sample n, statistics over its C·H·W elements; γ and β are optional and
//! *elementwise* (C·H·W values each, in (c, h, w) order whatever the tensor's layout: the
//! weight of PyTorch's `LayerNorm([C, H, W])`); ε any positive finite value. The forward pass
//! optionally saves the mean and rstd = 1/√(var + ε) per sample; the backward pass takes them
//! and gives dx, and dγ, dβ when asked.
//!
//! **Accuracy.** Sums (Σ(x − s), Σ(x − s)² with s the group's first element, Σdy, Σdy·(x − m))
//! are accumulated in f64 — 16 lanes per contiguous run, lanes and pieces combined in a fixed
//! order — so the statistics are f64-accurate; the elementwise pass applies f32 per-channel
//! coefficients computed in f64 (y = (x − m)·a + b, the mean's f32 rounding folded into b).
//! The tests bound max|out − ref| ≤ 1e-5·max(|ref|, 1) normwise against the f64 references on
//! random data (observed ~1e-7); an output cancelling far below its terms (dx when dy is
//! nearly affine in x̂) is bounded relative to the terms instead.
//!
//! **Threads and layouts.** Work is split into pieces fixed by the shape alone (≈16 K
//! elements of one channel, or 256+ positions of channels-last rows), each summed in order,
//! pieces combined in order: the bits do not depend on the thread count. Two fast paths: a
//! channel's values as contiguous runs (NCHW, padded rows: runs along W, or H·W merged), and
//! channels contiguous (NHWC: each position's C values, vectorised across channels). Any other
//! strides take the same pieces with strided scalar loops. Batch norm's training forward and
//! backward over NCHW planes whose channel (every sample's plane of it, in the tensors a pass
//! reads) fits 1 MiB take a channel per work item and run both passes over it back to back,
//! the second from the core's cache: x comes from memory once, not twice (same sums, same
//! bits). Layer norm is fast where a sample's
//! (c, h, w) elements are contiguous in that order (NCHW, or any layout with H = W = 1).

use super::{by_lines, check_buffer, check_same_dims, merge_contiguous, Blend};
use crate::cpu::Features;
use crate::desc::{DataType, FilterDesc, TensorDesc};
use crate::error::{Error, Result};
use crate::runtime::parallel::{for_each_with, SharedOut};
use crate::runtime::ExecContext;
use crate::simd::multiversion;

/// cuDNN's `CUDNN_BN_MIN_EPSILON`: the smallest ε batch normalization accepts (compared
/// after rounding to f32, so `1e-5_f32 as f64` passes).
pub const BN_MIN_EPSILON: f64 = 1e-5;

/// Elements of one group (channel or sample) per statistics piece. Fixed: the summation
/// order depends on it, never on the thread count.
const CHUNK: usize = 1 << 14;

/// Fewest positions per piece on the channels-last path (its partial sums are 2·C f64 per
/// piece).
const POSITIONS_MIN: usize = 256;

/// Elements per piece of layer norm's dγ/dβ reduction over the batch.
const PARAM_CHUNK: usize = 1 << 12;

// ---------------------------------------------------------------------------------------
// Descriptors and parameter bundles.
// ---------------------------------------------------------------------------------------

/// A batch normalization (spatial mode): its ε.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNorm {
    epsilon: f64,
}

impl BatchNorm {
    /// Batch norm with `epsilon` ≥ [`BN_MIN_EPSILON`].
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `epsilon` when it is not finite or below 1e-5.
    pub fn new(epsilon: f64) -> Result<BatchNorm> {
        if !epsilon.is_finite() {
            return Err(Error::bad("epsilon", epsilon, "must be finite"));
        }
        if (epsilon as f32) < BN_MIN_EPSILON as f32 {
            return Err(Error::bad(
                "epsilon",
                epsilon,
                "must be at least 1e-5 (cuDNN's CUDNN_BN_MIN_EPSILON)",
            ));
        }
        Ok(BatchNorm { epsilon })
    }

    /// ε.
    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }
}

/// A layer normalization over each sample's C·H·W elements: its ε.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerNorm {
    epsilon: f64,
}

impl LayerNorm {
    /// Layer norm with a positive finite `epsilon` (PyTorch's default is 1e-5).
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `epsilon` otherwise.
    pub fn new(epsilon: f64) -> Result<LayerNorm> {
        if !(epsilon.is_finite() && epsilon > 0.0) {
            return Err(Error::bad(
                "epsilon",
                epsilon,
                "must be positive and finite",
            ));
        }
        Ok(LayerNorm { epsilon })
    }

    /// ε.
    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }
}

/// The running statistics a training pass updates in place (C values each).
#[derive(Debug)]
pub struct RunningStats<'a> {
    /// Running mean.
    pub mean: &'a mut [f32],
    /// Running (unbiased) variance.
    pub var: &'a mut [f32],
    /// cuDNN's `exponentialAverageFactor` f (PyTorch's momentum), in [0, 1].
    pub factor: f64,
}

/// Statistics a forward pass saves for the backward pass: the mean and 1/√(var + ε) per
/// channel (batch norm) or per sample (layer norm's rstd).
#[derive(Debug)]
pub struct SavedStatsMut<'a> {
    /// Mean.
    pub mean: &'a mut [f32],
    /// 1/√(var + ε).
    pub inv_std: &'a mut [f32],
}

/// Saved statistics, read by a backward pass.
#[derive(Debug, Clone, Copy)]
pub struct SavedStats<'a> {
    /// Mean.
    pub mean: &'a [f32],
    /// 1/√(var + ε).
    pub inv_std: &'a [f32],
}

/// Gradients of the scale and shift (γ, β), blended by the parameter blend.
#[derive(Debug)]
pub struct ParamGrads<'a> {
    /// dγ.
    pub dgamma: &'a mut [f32],
    /// dβ.
    pub dbeta: &'a mut [f32],
}

fn check_len(field: &str, len: usize, want: usize, what: &str) -> Result<()> {
    if len != want {
        return Err(Error::bad(
            field,
            format!("{len} values"),
            format!("must hold {want} values ({what})"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Geometry: groups of elements (a channel, a sample) walked as runs; channels-last rows.
// ---------------------------------------------------------------------------------------

/// The elements of K tensors of the same dimensions (own strides each), grouped along one
/// dimension; a group's elements are walked in the logical order of the other three, as
/// rows of `len` elements (dimensions merged where every tensor steps contiguously).
#[derive(Debug, Clone, Copy)]
struct Groups<const K: usize> {
    count: usize,
    gstride: [usize; K],
    rows: [usize; 2],
    rstride: [[usize; 2]; K],
    len: usize,
    inner: [usize; K],
}

impl<const K: usize> Groups<K> {
    fn new(dims: [usize; 4], strides: [[usize; 4]; K], g: usize) -> Groups<K> {
        let mut ext: Vec<usize> = Vec::with_capacity(3);
        let mut st: Vec<[usize; K]> = Vec::with_capacity(3);
        for d in (0..4).filter(|&d| d != g && dims[d] > 1) {
            ext.push(dims[d]);
            st.push(std::array::from_fn(|t| strides[t][d]));
        }
        merge_contiguous(&mut ext, &mut st);
        let (len, inner) = match (ext.pop(), st.pop()) {
            (Some(e), Some(s)) => (e, s),
            _ => (1, [1; K]),
        };
        let mut rows = [1; 2];
        let mut rstride = [[0; 2]; K];
        let pad = 2 - ext.len();
        for (j, (&e, s)) in ext.iter().zip(&st).enumerate() {
            rows[pad + j] = e;
            for t in 0..K {
                rstride[t][pad + j] = s[t];
            }
        }
        Groups {
            count: dims[g],
            gstride: std::array::from_fn(|t| strides[t][g]),
            rows,
            rstride,
            len,
            inner,
        }
    }

    /// Elements per group.
    fn elements(&self) -> usize {
        self.rows[0] * self.rows[1] * self.len
    }

    /// Whether every tensor's runs are contiguous.
    fn contiguous(&self) -> bool {
        self.inner.iter().all(|&s| s == 1)
    }

    /// Calls `f(offsets, n)` for each run of elements `e0..e1` of group `g` (a group's
    /// elements numbered in walking order), in order.
    #[inline]
    fn walk(&self, g: usize, e0: usize, e1: usize, mut f: impl FnMut([usize; K], usize)) {
        let mut e = e0;
        while e < e1 {
            let (r, j) = (e / self.len, e % self.len);
            let n = (self.len - j).min(e1 - e);
            let (a, b) = (r / self.rows[1], r % self.rows[1]);
            let off = std::array::from_fn(|t| {
                g * self.gstride[t]
                    + a * self.rstride[t][0]
                    + b * self.rstride[t][1]
                    + j * self.inner[t]
            });
            f(off, n);
            e += n;
        }
    }

    /// Pieces per group.
    fn pieces(&self) -> usize {
        self.elements().div_ceil(CHUNK)
    }

    /// Group and element range of piece `i`.
    fn piece(&self, i: usize) -> (usize, usize, usize) {
        let p = self.pieces();
        let (g, k) = (i / p, i % p);
        let e0 = k * CHUNK;
        (g, e0, (e0 + CHUNK).min(self.elements()))
    }
}

/// Channels-last tensors (every channel stride 1): the N·H·W positions, each a contiguous
/// row of C values, in pieces of `per` positions.
#[derive(Debug, Clone, Copy)]
struct Rows<const K: usize> {
    hw: [usize; 2],
    strides: [[usize; 3]; K],
    positions: usize,
    per: usize,
}

impl<const K: usize> Rows<K> {
    /// The rows of tensors with dimensions `dims`, when every tensor is channels-last.
    fn new(dims: [usize; 4], strides: [[usize; 4]; K]) -> Option<Rows<K>> {
        let [n, c, h, w] = dims;
        if c < 2 || strides.iter().any(|s| s[1] != 1) {
            return None;
        }
        Some(Rows {
            hw: [h, w],
            strides: std::array::from_fn(|t| [strides[t][0], strides[t][2], strides[t][3]]),
            positions: n * h * w,
            per: CHUNK.div_ceil(c).max(POSITIONS_MIN),
        })
    }

    fn pieces(&self) -> usize {
        self.positions.div_ceil(self.per)
    }

    /// Calls `f(offsets)` for each position of piece `i`, in order.
    #[inline]
    fn walk(&self, i: usize, mut f: impl FnMut([usize; K])) {
        let p0 = i * self.per;
        let p1 = (p0 + self.per).min(self.positions);
        let [h, w] = self.hw;
        for p in p0..p1 {
            let (b, y, x) = (p / (h * w), (p / w) % h, p % w);
            f(std::array::from_fn(|t| {
                let s = self.strides[t];
                b * s[0] + y * s[1] + x * s[2]
            }));
        }
    }
}

/// Channel planes that are contiguous in every tensor (NCHW, padded between planes or
/// samples): walked in memory order, sample by sample, channel by channel. Walking a channel's
/// planes of every sample in turn (megabytes apart) took half as long again as memory order.
#[derive(Debug, Clone, Copy)]
struct Planes<const K: usize> {
    /// (n, c) plane starts: sample and channel strides per tensor.
    strides: [[usize; 2]; K],
    c: usize,
    count: usize,
    /// Elements per plane (H·W).
    len: usize,
}

impl<const K: usize> Planes<K> {
    /// Planes of at least [`PLANE_MIN`] elements, contiguous in every tensor; `None` for other
    /// layouts.
    fn new(dims: [usize; 4], strides: [[usize; 4]; K]) -> Option<Planes<K>> {
        Self::any(dims, strides).filter(|p| p.len >= PLANE_MIN)
    }

    /// Planes of any size, contiguous in every tensor.
    fn any(dims: [usize; 4], strides: [[usize; 4]; K]) -> Option<Planes<K>> {
        let [n, c, h, w] = dims;
        let len = h * w;
        let planar = strides
            .iter()
            .all(|s| (s[3] == 1 || w == 1) && (s[2] == w || h == 1));
        planar.then(|| Planes {
            strides: strides.map(|s| [s[0], s[1]]),
            c,
            count: n * c,
            len,
        })
    }

    /// Plane `i`'s start in each tensor, and its channel.
    fn at(&self, i: usize) -> ([usize; K], usize) {
        let (b, ch) = (i / self.c, i % self.c);
        (self.strides.map(|[sn, sc]| b * sn + ch * sc), ch)
    }
}

/// Per-channel pair sums over [`Planes`]: `seg(starts, channel)` sums one plane; a channel's
/// planes added in sample order (an order fixed by the shape, whatever the threads).
fn plane_sums<const K: usize>(
    ctx: &ExecContext<'_>,
    pl: &Planes<K>,
    seg: impl Fn([usize; K], usize) -> [f64; 2] + Sync,
) -> Result<Vec<[f64; 2]>> {
    let mut part = crate::alloc::try_vec(pl.count, [0.0f64; 2], "normalization partial sums")?;
    {
        let out = SharedOut::new(&mut part);
        run_planes(ctx, pl, |i| {
            let (st, ch) = pl.at(i);
            // SAFETY: slot i is written for plane i alone, by the one item holding it.
            unsafe { out.write(i, seg(st, ch)) };
        })?;
    }
    let n = pl.count / pl.c;
    let sums = (0..pl.c).map(|ch| {
        (0..n).fold([0.0; 2], |a, b| {
            let p = part[b * pl.c + ch];
            [a[0] + p[0], a[1] + p[1]]
        })
    });
    crate::alloc::try_collect(sums, "normalization sums")
}

/// Most bytes of one channel's planes, over every tensor a pass reads, for [`by_channel`]: a
/// second pass over them then reads the core's L2 (1-2 MiB on current x86-64), not memory.
const CHANNEL_BYTES_MAX: usize = 1 << 20;

/// [`Planes`] walked channel by channel, a channel's planes summed and then written by one
/// work item (a batch norm's two passes over a channel back to back), when a channel's planes
/// of the `reads` tensors the passes read fit [`CHANNEL_BYTES_MAX`] and there are channels
/// for every thread to take several; `None` otherwise, and for layouts other than planes
/// (channels-last).
fn by_channel<const K: usize>(
    dims: [usize; 4],
    strides: [[usize; 4]; K],
    reads: usize,
) -> Option<Planes<K>> {
    if Rows::new(dims, strides).is_some() {
        return None;
    }
    let pl = Planes::any(dims, strides)?;
    let [n, c, _, _] = dims;
    let bytes = n * pl.len * reads * std::mem::size_of::<f32>();
    (c >= 16 && bytes <= CHANNEL_BYTES_MAX).then_some(pl)
}

/// Least elements of a plane for [`Planes`] (smaller planes are walked by channel).
const PLANE_MIN: usize = 256;

/// Runs `f(i)` for `i` in `0..items`, on the context's threads when the work is large.
fn run_items(
    ctx: &ExecContext<'_>,
    total: usize,
    items: usize,
    f: impl Fn(usize) + Sync,
) -> Result<()> {
    super::run_items_with(ctx, items, total, || Ok(()), |_, i| f(i))
}

/// Runs `f(p)` for each of `pl`'s planes, consecutive planes (about [`super::CHUNK`]
/// elements) to a work item: each thread streams through memory rather than taking every
/// other plane (2 threads took 1.3-1.6 ms on a batch norm that streams in 1.1).
fn run_planes<const K: usize>(
    ctx: &ExecContext<'_>,
    pl: &Planes<K>,
    f: impl Fn(usize) + Sync,
) -> Result<()> {
    let per = (super::CHUNK / pl.len.max(1)).max(1);
    run_items(ctx, pl.count * pl.len, pl.count.div_ceil(per), |i| {
        (i * per..((i + 1) * per).min(pl.count)).for_each(&f)
    })
}

/// Per group of one tensor: (Σ (x − s), Σ (x − s)²) with s the group's first element, the
/// shift that keeps the variance's sum from cancelling (batch norm's channels, layer norm's
/// samples).
fn shifted_sums(
    ctx: &ExecContext<'_>,
    features: Features,
    geo: &Groups<1>,
    x: &[f32],
) -> Result<Vec<[f64; 2]>> {
    let contiguous = geo.contiguous();
    group_sums(ctx, geo, |g, [o], len| {
        let s = x[g * geo.gstride[0]];
        if contiguous {
            sum_shifted(features, &x[o..o + len], s)
        } else {
            let (s, mut acc) = (s as f64, [0.0; 2]);
            for j in 0..len {
                let d = x[o + j * geo.inner[0]] as f64 - s;
                acc[0] += d;
                acc[1] += d * d;
            }
            acc
        }
    })
}

/// Per-group pair sums: `seg(group, offsets, n)` sums one run; runs summed in order within
/// a piece, pieces in order within a group.
fn group_sums<const K: usize>(
    ctx: &ExecContext<'_>,
    geo: &Groups<K>,
    seg: impl Fn(usize, [usize; K], usize) -> [f64; 2] + Sync,
) -> Result<Vec<[f64; 2]>> {
    let per = geo.pieces();
    let items = geo.count * per;
    let mut part = crate::alloc::try_vec(items, [0.0f64; 2], "normalization partial sums")?;
    let total = geo.count * geo.elements();
    {
        let out = SharedOut::new(&mut part);
        run_items(ctx, total, items, |i| {
            let (g, e0, e1) = geo.piece(i);
            let mut acc = [0.0f64; 2];
            geo.walk(g, e0, e1, |off, n| {
                let s = seg(g, off, n);
                acc[0] += s[0];
                acc[1] += s[1];
            });
            // SAFETY: slot i is written for plane i alone, by the one item holding it.
            unsafe { out.write(i, acc) };
        })?;
    }
    let sums = (0..geo.count).map(|g| {
        part[g * per..(g + 1) * per]
            .iter()
            .fold([0.0; 2], |a, p| [a[0] + p[0], a[1] + p[1]])
    });
    crate::alloc::try_collect(sums, "normalization sums")
}

/// Per-channel pair sums over channels-last rows: `row(offsets, s0, s1)` adds one position's
/// C values into the piece's sums; pieces combined in order.
fn row_sums<const K: usize>(
    ctx: &ExecContext<'_>,
    rows: &Rows<K>,
    c: usize,
    row: impl Fn([usize; K], &mut [f64], &mut [f64]) + Sync,
) -> Result<Vec<[f64; 2]>> {
    let items = rows.pieces();
    let size = 2 * c;
    let len = items
        .checked_mul(size)
        .ok_or_else(|| Error::overflow("normalization partial sums", "pieces times channels"))?;
    let mut part = crate::alloc::try_vec(len, 0.0f64, "normalization partial sums")?;
    {
        let out = SharedOut::new(&mut part);
        run_items(ctx, rows.positions * c, items, |i| {
            // SAFETY: the slots of piece i are written by item i alone.
            let mine = unsafe { out.slice_mut(i * size, size) };
            let (s0, s1) = mine.split_at_mut(c);
            rows.walk(i, |off| row(off, s0, s1));
        })?;
    }
    let mut sums = crate::alloc::try_vec(c, [0.0f64; 2], "normalization sums")?;
    for p in part.chunks_exact(size) {
        for (k, s) in sums.iter_mut().enumerate() {
            s[0] += p[k];
            s[1] += p[c + k];
        }
    }
    Ok(sums)
}

// ---------------------------------------------------------------------------------------
// Kernels: plain loops compiled per instruction set. No fused multiply-adds are formed
// (Rust does not contract), so every instruction set gives the same bits.
// ---------------------------------------------------------------------------------------

/// Values per block of the statistics sums: each of [`FLANES`] f32 lanes sums four of them,
/// then adds its sum into an f64 lane. The f32 lanes vectorise (the f64 form per element did
/// not); the order is fixed by the data's length alone, and the f32 sums of four differences
/// from the shift or the mean lose about 2^-22 of their size, well inside the operators'
/// documented bounds.
const BLOCK: usize = 256;
/// f32 lanes of one block.
const FLANES: usize = 64;

/// One block's lane sums of (x − s) and (x − s)².
#[inline(always)]
fn block_shifted(blk: &[f32], s: f32) -> ([f32; FLANES], [f32; FLANES]) {
    let mut fa = [0.0f32; FLANES];
    let mut fq = [0.0f32; FLANES];
    for ch in blk.chunks_exact(FLANES) {
        for ((a, q), &v) in fa.iter_mut().zip(fq.iter_mut()).zip(ch) {
            let d = v - s;
            *a += d;
            *q += d * d;
        }
    }
    (fa, fq)
}

/// One block's lane sums of g and g·(x − m), g = dy (or dy·γ when `gm` is not empty).
#[inline(always)]
fn block_grad(x: &[f32], dy: &[f32], gm: &[f32], m: f32) -> ([f32; FLANES], [f32; FLANES]) {
    let mut fa = [0.0f32; FLANES];
    let mut fq = [0.0f32; FLANES];
    if gm.is_empty() {
        for (cx, cd) in x.chunks_exact(FLANES).zip(dy.chunks_exact(FLANES)) {
            for (((a, q), &v), &g) in fa.iter_mut().zip(fq.iter_mut()).zip(cx).zip(cd) {
                *a += g;
                *q += g * (v - m);
            }
        }
    } else {
        for ((cx, cd), cg) in x
            .chunks_exact(FLANES)
            .zip(dy.chunks_exact(FLANES))
            .zip(gm.chunks_exact(FLANES))
        {
            for ((((a, q), &v), &d), &w) in fa.iter_mut().zip(fq.iter_mut()).zip(cx).zip(cd).zip(cg)
            {
                let g = d * w;
                *a += g;
                *q += g * (v - m);
            }
        }
    }
    (fa, fq)
}

/// Adds a block's f32 lanes into the f64 lanes.
#[inline(always)]
fn add_block(a: &mut [f64; FLANES], q: &mut [f64; FLANES], fa: &[f32], fq: &[f32]) {
    for ((a, q), (&x, &y)) in a.iter_mut().zip(q.iter_mut()).zip(fa.iter().zip(fq)) {
        *a += x as f64;
        *q += y as f64;
    }
}

/// The f64 lanes and the tail's sums added in order.
#[inline(always)]
fn lanes_total(a: &[f64; FLANES], q: &[f64; FLANES], mut ta: f64, mut tq: f64) -> [f64; 2] {
    for l in 0..FLANES {
        ta += a[l];
        tq += q[l];
    }
    [ta, tq]
}

multiversion! {
    /// (Σ(x − s), Σ(x − s)²) in f64, s an f32 value (the group's first element): blocks of
    /// [`BLOCK`] in f32 lanes added into f64 lanes, the tail in f64. Sums that come out not
    /// finite (values whose squares pass f32's range, or a NaN or infinity in x) are summed
    /// again wholly in f64.
    fn sum_shifted(x: &[f32], s: f32) -> [f64; 2] {
        let mut a = [0.0f64; FLANES];
        let mut q = [0.0f64; FLANES];
        let sd = s as f64;
        let mut blocks = x.chunks_exact(BLOCK);
        for blk in &mut blocks {
            let (fa, fq) = block_shifted(blk, s);
            add_block(&mut a, &mut q, &fa, &fq);
        }
        let (mut ta, mut tq) = (0.0f64, 0.0f64);
        for &v in blocks.remainder() {
            let d = v as f64 - sd;
            ta += d;
            tq += d * d;
        }
        let r = lanes_total(&a, &q, ta, tq);
        if r[0].is_finite() && r[1].is_finite() {
            return r;
        }
        let (mut ta, mut tq) = (0.0f64, 0.0f64);
        for &v in x {
            let d = v as f64 - sd;
            ta += d;
            tq += d * d;
        }
        [ta, tq]
    }
}

/// g (dy, or dy·γ) at i, in f64.
#[inline(always)]
fn grad_at(dy: &[f32], gm: &[f32], i: usize) -> f64 {
    if gm.is_empty() {
        dy[i] as f64
    } else {
        dy[i] as f64 * gm[i] as f64
    }
}

/// (Σg, Σg·(x − m)) in f64 over the elements from `i0` on, in order.
#[inline(always)]
fn grad_sums_f64(x: &[f32], dy: &[f32], gm: &[f32], md: f64, i0: usize) -> [f64; 2] {
    let (mut ta, mut tq) = (0.0f64, 0.0f64);
    for (i, &v) in x.iter().enumerate().skip(i0) {
        let g = grad_at(dy, gm, i);
        ta += g;
        tq += g * (v as f64 - md);
    }
    [ta, tq]
}

multiversion! {
    /// (Σg, Σg·(x − m)) in f64 with g = dy (or dy·γ when `gamma` is not empty), m an f32
    /// value (the saved mean): blocks, tail and the f64 retry as [`sum_shifted`]'s.
    fn sum_grad(x: &[f32], dy: &[f32], gamma: &[f32], m: f32) -> [f64; 2] {
        let mut a = [0.0f64; FLANES];
        let mut q = [0.0f64; FLANES];
        let md = m as f64;
        let n = x.len().min(dy.len());
        let (x, dy) = (&x[..n], &dy[..n]);
        let gm = if gamma.is_empty() { gamma } else { &gamma[..n] };
        let full = n - n % BLOCK;
        let mut i = 0;
        while i < full {
            let g = if gm.is_empty() { gm } else { &gm[i..i + BLOCK] };
            let (fa, fq) = block_grad(&x[i..i + BLOCK], &dy[i..i + BLOCK], g, m);
            add_block(&mut a, &mut q, &fa, &fq);
            i += BLOCK;
        }
        let [ta, tq] = grad_sums_f64(x, dy, gm, md, full);
        let r = lanes_total(&a, &q, ta, tq);
        if r[0].is_finite() && r[1].is_finite() {
            return r;
        }
        grad_sums_f64(x, dy, gm, md, 0)
    }
}

multiversion! {
    /// s0[c] += x[c] − s[c], s1[c] += (x[c] − s[c])² (one channels-last row).
    fn row_shifted(x: &[f32], s: &[f64], s0: &mut [f64], s1: &mut [f64]) {
        for (((&v, &sh), a), q) in x.iter().zip(s).zip(s0.iter_mut()).zip(s1.iter_mut()) {
            let d = v as f64 - sh;
            *a += d;
            *q += d * d;
        }
    }
}

multiversion! {
    /// s0[c] += dy[c], s1[c] += dy[c]·(x[c] − m[c]) (one channels-last row).
    fn row_grad(x: &[f32], dy: &[f32], m: &[f64], s0: &mut [f64], s1: &mut [f64]) {
        for ((((&v, &g), &mm), a), q) in
            x.iter().zip(dy).zip(m).zip(s0.iter_mut()).zip(s1.iter_mut())
        {
            let g = g as f64;
            *a += g;
            *q += g * (v as f64 - mm);
        }
    }
}

/// (x − m)·a + b.
#[inline(always)]
fn affine1(v: f32, m: f32, a: f32, b: f32) -> f32 {
    (v - m) * a + b
}

/// dy·a + (x − m)·b + c.
#[inline(always)]
fn grad1(v: f32, g: f32, m: f32, a: f32, b: f32, c: f32) -> f32 {
    g * a + (v - m) * b + c
}

multiversion! {
    /// y = (x − m)·a + b (+ beta·y).
    fn affine(x: &[f32], y: &mut [f32], m: f32, a: f32, b: f32, beta: f32) {
        if beta == 0.0 {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = affine1(v, m, a, b);
            }
        } else {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = affine1(v, m, a, b) + beta * *o;
            }
        }
    }
}

multiversion! {
    /// y[c] = (x[c] − m[c])·a[c] + b[c] (+ beta·y[c]), one channels-last row.
    fn affine_row(x: &[f32], y: &mut [f32], m: &[f32], a: &[f32], b: &[f32], beta: f32) {
        let n = y.len();
        let (x, m, a, b) = (&x[..n], &m[..n], &a[..n], &b[..n]);
        if beta == 0.0 {
            for i in 0..n {
                y[i] = affine1(x[i], m[i], a[i], b[i]);
            }
        } else {
            for i in 0..n {
                y[i] = affine1(x[i], m[i], a[i], b[i]) + beta * y[i];
            }
        }
    }
}

multiversion! {
    /// dx = dy·a + (x − m)·b + c (+ beta·dx).
    fn grad_affine(x: &[f32], dy: &[f32], dx: &mut [f32], k: [f32; 4], beta: f32) {
        let [m, a, b, c] = k;
        let n = dx.len();
        let (x, dy) = (&x[..n], &dy[..n]);
        if beta == 0.0 {
            for i in 0..n {
                dx[i] = grad1(x[i], dy[i], m, a, b, c);
            }
        } else {
            for i in 0..n {
                dx[i] = grad1(x[i], dy[i], m, a, b, c) + beta * dx[i];
            }
        }
    }
}

multiversion! {
    /// dx[c] = dy[c]·a[c] + (x[c] − m[c])·b[c] + c0[c] (+ beta·dx[c]), one channels-last row;
    /// `k` holds m, a, b, c0 (C values each, one after another).
    fn grad_row(x: &[f32], dy: &[f32], dx: &mut [f32], k: &[f32], beta: f32) {
        let n = dx.len();
        let (x, dy) = (&x[..n], &dy[..n]);
        let (m, rest) = k.split_at(n);
        let (a, rest) = rest.split_at(n);
        let (b, c) = rest.split_at(n);
        let c = &c[..n];
        if beta == 0.0 {
            for i in 0..n {
                dx[i] = grad1(x[i], dy[i], m[i], a[i], b[i], c[i]);
            }
        } else {
            for i in 0..n {
                dx[i] = grad1(x[i], dy[i], m[i], a[i], b[i], c[i]) + beta * dx[i];
            }
        }
    }
}

/// max(v, 0), a NaN kept (PyTorch's ReLU).
#[inline(always)]
fn relu1(v: f32) -> f32 {
    if v <= 0.0 {
        0.0
    } else {
        v
    }
}

multiversion! {
    /// y = max(y + z, 0) (z empty: max(y, 0)).
    fn relu_add(y: &mut [f32], z: &[f32]) {
        if z.is_empty() {
            for v in y.iter_mut() {
                *v = relu1(*v);
            }
        } else {
            let z = &z[..y.len()];
            for (v, &w) in y.iter_mut().zip(z) {
                *v = relu1(*v + w);
            }
        }
    }
}

multiversion! {
    /// g = dy where y > 0, else 0 (the gradient through a ReLU whose output is y).
    fn relu_mask(dy: &[f32], y: &[f32], g: &mut [f32]) {
        let n = g.len();
        let (dy, y) = (&dy[..n], &y[..n]);
        for i in 0..n {
            g[i] = if y[i] > 0.0 { dy[i] } else { 0.0 };
        }
    }
}

multiversion! {
    /// d = d·a + (x − m)·b + c in place ([`grad_affine`] with dy in dx's place, beta 0).
    fn grad_affine_in_place(x: &[f32], d: &mut [f32], k: [f32; 4]) {
        let [m, a, b, c] = k;
        let x = &x[..d.len()];
        for (o, &v) in d.iter_mut().zip(x) {
            *o = grad1(v, *o, m, a, b, c);
        }
    }
}

/// Layer norm's y = ((x − m)·ra + c)·γ + alpha·β, γ and β optional.
#[inline(always)]
fn ln1(v: f32, g: Option<f32>, bt: Option<f32>, k: [f32; 4]) -> f32 {
    let [m, ra, c, alpha] = k;
    let t = (v - m) * ra + c;
    let t = match g {
        Some(g) => t * g,
        None => t,
    };
    match bt {
        Some(b) => t + alpha * b,
        None => t,
    }
}

multiversion! {
    /// Layer norm's forward over one contiguous run (`gamma`, `beta` empty when absent).
    fn ln_run(x: &[f32], gamma: &[f32], beta_p: &[f32], y: &mut [f32], k: [f32; 4], beta: f32) {
        let n = y.len();
        let x = &x[..n];
        macro_rules! go {
            ($g:expr, $b:expr) => {
                if beta == 0.0 {
                    for i in 0..n {
                        y[i] = ln1(x[i], $g(i), $b(i), k);
                    }
                } else {
                    for i in 0..n {
                        y[i] = ln1(x[i], $g(i), $b(i), k) + beta * y[i];
                    }
                }
            };
        }
        match (gamma.is_empty(), beta_p.is_empty()) {
            (true, true) => go!(|_| None, |_| None),
            (false, true) => {
                let g = &gamma[..n];
                go!(|i: usize| Some(g[i]), |_| None)
            }
            (true, false) => {
                let b = &beta_p[..n];
                go!(|_| None, |i: usize| Some(b[i]))
            }
            (false, false) => {
                let (g, b) = (&gamma[..n], &beta_p[..n]);
                go!(|i: usize| Some(g[i]), |i: usize| Some(b[i]))
            }
        }
    }
}

multiversion! {
    /// Layer norm's dx = (dy·γ)·a + (x − m)·b + c (+ beta·dx) over one contiguous run
    /// (`gamma` empty when absent).
    fn ln_grad_run(x: &[f32], dy: &[f32], gamma: &[f32], dx: &mut [f32], k: [f32; 4], beta: f32) {
        let [m, a, b, c] = k;
        let n = dx.len();
        let (x, dy) = (&x[..n], &dy[..n]);
        if gamma.is_empty() {
            grad_affine_body(x, dy, dx, k, beta);
        } else {
            let g = &gamma[..n];
            if beta == 0.0 {
                for i in 0..n {
                    dx[i] = grad1(x[i], dy[i] * g[i], m, a, b, c);
                }
            } else {
                for i in 0..n {
                    dx[i] = grad1(x[i], dy[i] * g[i], m, a, b, c) + beta * dx[i];
                }
            }
        }
    }
}

/// [`grad_affine`]'s loop, inlined into a caller compiled for its instruction set.
#[inline(always)]
fn grad_affine_body(x: &[f32], dy: &[f32], dx: &mut [f32], k: [f32; 4], beta: f32) {
    let [m, a, b, c] = k;
    if beta == 0.0 {
        for ((o, &v), &g) in dx.iter_mut().zip(x).zip(dy) {
            *o = grad1(v, g, m, a, b, c);
        }
    } else {
        for ((o, &v), &g) in dx.iter_mut().zip(x).zip(dy) {
            *o = grad1(v, g, m, a, b, c) + beta * *o;
        }
    }
}

multiversion! {
    /// s0[i] += dy[i], s1[i] += dy[i]·(x[i] − m)·r (layer norm's dβ, dγ over the batch).
    fn param_acc(x: &[f32], dy: &[f32], m: f64, r: f64, s0: &mut [f64], s1: &mut [f64]) {
        for (((&v, &g), a), q) in x.iter().zip(dy).zip(s0.iter_mut()).zip(s1.iter_mut()) {
            let g = g as f64;
            *a += g;
            *q += g * ((v as f64 - m) * r);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Batch normalization.
// ---------------------------------------------------------------------------------------

/// Channels (C) and positions per channel (M = N·H·W) of a checked batch norm tensor.
fn bn_shape(x_desc: &TensorDesc) -> (usize, usize) {
    let [n, c, h, w] = x_desc.dims();
    (c, n * h * w)
}

/// Per-channel (mean, biased variance) of x, in f64.
fn bn_stats(ctx: &ExecContext<'_>, x_desc: &TensorDesc, x: &[f32]) -> Result<Vec<[f64; 2]>> {
    let (c, m) = bn_shape(x_desc);
    let dims = x_desc.dims();
    let st = [x_desc.strides()];
    let features = ctx.features();
    let sums = match (Rows::new(dims, st), Planes::new(dims, st)) {
        (Some(rows), _) => {
            let shift = (0..c).map(|k| x[k] as f64);
            let shift = crate::alloc::try_collect(shift, "batch norm shifts")?;
            // Channel k's first element is at k (the positions start at offset 0).
            let sums = row_sums(ctx, &rows, c, |[o], s0, s1| {
                row_shifted(features, &x[o..o + c], &shift, s0, s1)
            })?;
            let moments = sums
                .into_iter()
                .zip(&shift)
                .map(|(s, &sh)| shifted_moments(s, sh, m));
            crate::alloc::try_collect(moments, "batch norm statistics")?
        }
        (None, Some(pl)) => {
            // Channel ch's shift: its first element (sample 0).
            let shift = |ch: usize| x[ch * st[0][1]];
            let sums = plane_sums(ctx, &pl, |[o], ch| {
                sum_shifted(features, &x[o..o + pl.len], shift(ch))
            })?;
            let moments = sums
                .into_iter()
                .enumerate()
                .map(|(ch, s)| shifted_moments(s, shift(ch) as f64, m));
            crate::alloc::try_collect(moments, "batch norm statistics")?
        }
        (None, None) => {
            let geo = Groups::new(dims, st, 1);
            let sums = shifted_sums(ctx, features, &geo, x)?;
            let moments = sums
                .into_iter()
                .enumerate()
                .map(|(g, s)| shifted_moments(s, x[g * geo.gstride[0]] as f64, m));
            crate::alloc::try_collect(moments, "batch norm statistics")?
        }
    };
    Ok(sums)
}

/// (mean, biased variance) from sums shifted by `s` over `m` values.
fn shifted_moments(s: [f64; 2], shift: f64, m: usize) -> [f64; 2] {
    let mf = m as f64;
    let d = s[0] / mf;
    // Rounding may leave a tiny negative variance: 0 then; a NaN stays NaN (`max` would
    // have made it 0, and 1/√ε of a channel that holds a NaN).
    let v = s[1] / mf - d * d;
    [shift + d, if v < 0.0 { 0.0 } else { v }]
}

/// y = (x − m[c])·a[c] + b[c] (+ beta·y) per channel, x and y of any strides.
#[allow(clippy::too_many_arguments)]
fn bn_apply(
    ctx: &ExecContext<'_>,
    beta: f32,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &mut [f32],
    k: &[f32], // m, a, b: C values each
) -> Result<()> {
    let (c, _) = bn_shape(x_desc);
    let (m, rest) = k.split_at(c);
    let (a, b) = rest.split_at(c);
    let dims = x_desc.dims();
    let st = [y_desc.strides(), x_desc.strides()];
    let features = ctx.features();
    let total = x_desc.elements();
    let out = SharedOut::new(y);
    let reads = beta != 0.0;
    if let Some(rows) = Rows::new(dims, st) {
        return run_items(ctx, total, rows.pieces(), |i| {
            rows.walk(i, |[oy, ox]| {
                // SAFETY: each position's row belongs to one piece.
                let dst = unsafe { out.slice_mut(oy, c) };
                affine_row(features, &x[ox..ox + c], dst, m, a, b, beta);
            })
        });
    }
    if let Some(pl) = Planes::new(dims, st) {
        return run_planes(ctx, &pl, |p| {
            let ([oy, ox], ch) = pl.at(p);
            // SAFETY: each plane belongs to one item.
            let dst = unsafe { out.slice_mut(oy, pl.len) };
            by_lines(&x[ox..ox + pl.len], dst, |x, y| {
                affine(features, x, y, m[ch], a[ch], b[ch], beta)
            });
        });
    }
    let geo = Groups::new(dims, st, 1);
    let contiguous = geo.contiguous();
    run_items(ctx, total, geo.count * geo.pieces(), |i| {
        let (g, e0, e1) = geo.piece(i);
        geo.walk(g, e0, e1, |[oy, ox], n| {
            if contiguous {
                // SAFETY: the run's elements belong to this piece alone.
                let dst = unsafe { out.slice_mut(oy, n) };
                by_lines(&x[ox..ox + n], dst, |x, y| {
                    affine(features, x, y, m[g], a[g], b[g], beta)
                });
            } else {
                for j in 0..n {
                    let (py, px) = (oy + j * geo.inner[0], ox + j * geo.inner[1]);
                    let v = affine1(x[px], m[g], a[g], b[g]);
                    // SAFETY: element py belongs to this piece alone.
                    unsafe {
                        let v = if reads { v + beta * out.read(py) } else { v };
                        out.write(py, v);
                    }
                }
            }
        })
    })
}

fn check_bn_io(
    x_desc: &TensorDesc,
    x: &[f32],
    y_field: &str,
    y_desc: &TensorDesc,
    y_len: usize,
) -> Result<()> {
    check_same_dims(y_field, x_desc, y_desc)?;
    check_buffer("x", x_desc, x.len())?;
    check_buffer(y_field, y_desc, y_len)
}

/// Batch norm inference (cudnnBatchNormalizationForwardInference):
/// y = alpha·(γ·(x − mean)/√(var + ε) + β) + beta·y per channel, with the running estimates
/// `mean` and `var`; x and y of the same dimensions, any strides each.
///
/// # Errors
/// [`Error::BadParam`] naming `y` (other dimensions), `gamma`, `beta`, `mean` or `var` (not C
/// values), `alpha`/`beta` (not finite); [`Error::BufferTooSmall`] naming `x` or `y`;
/// [`Error::Unsupported`] for types other than f32.
///
/// # Examples
/// ```
/// use autodnn::{layers::{norm::{self, BatchNorm}, Blend}, DataType, Handle, Layout, TensorDesc};
/// let h = Handle::with_threads(1)?;
/// let d = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 1, 2])?;
/// let x = [1.0, 3.0, 10.0, 20.0];
/// let mut y = [0.0; 4];
/// let bn = BatchNorm::new(1e-5)?;
/// // Channel 0: mean 2, var 1; channel 1: mean 15, var 25, scaled by 2 and shifted by 1.
/// h.batch_norm_forward_inference(&bn, Blend::default(), &d, &x, &d, &mut y,
///     &[1.0, 2.0], &[0.0, 1.0], &[2.0, 15.0], &[1.0, 25.0])?;
/// assert!((y[0] + 1.0).abs() < 1e-4 && (y[3] - 3.0).abs() < 1e-4);
/// # let _ = norm::forward_inference;
/// # Ok::<(), autodnn::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn forward_inference(
    ctx: &ExecContext<'_>,
    bn: &BatchNorm,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    mean: &[f32],
    var: &[f32],
) -> Result<()> {
    blend.check()?;
    check_bn_io(x_desc, x, "y", y_desc, y.len())?;
    let (c, _) = bn_shape(x_desc);
    for (f, v) in [
        ("gamma", gamma),
        ("beta", beta),
        ("mean", mean),
        ("var", var),
    ] {
        check_len(f, v.len(), c, "one per channel")?;
    }
    let mut k = crate::alloc::try_vec(3 * c, 0.0f32, "batch norm coefficients")?;
    let alpha = blend.alpha as f64;
    for ch in 0..c {
        let inv = 1.0 / (var[ch] as f64 + bn.epsilon).sqrt();
        k[ch] = mean[ch];
        k[c + ch] = (alpha * gamma[ch] as f64 * inv) as f32;
        k[2 * c + ch] = (alpha * beta[ch] as f64) as f32;
    }
    bn_apply(ctx, blend.beta, x_desc, x, y_desc, y, &k)
}

/// Batch norm training (cudnnBatchNormalizationForwardTraining): normalizes with the batch's
/// per-channel mean and biased variance, y = alpha·(γ·x̂ + β) + beta·y; saves the mean and
/// 1/√(var + ε) when `saved` is given; updates `running` in place (see the module's card).
///
/// # Errors
/// As [`forward_inference`], and [`Error::BadParam`] naming `saved.mean`, `saved.inv_std`,
/// `running.mean`, `running.var` (not C values), `exponential_average_factor` (not in
/// [0, 1]), or `x` when N·H·W = 1.
#[allow(clippy::too_many_arguments)]
pub fn forward_training(
    ctx: &ExecContext<'_>,
    bn: &BatchNorm,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    running: Option<RunningStats<'_>>,
    saved: Option<SavedStatsMut<'_>>,
) -> Result<()> {
    training(
        ctx, bn, blend, None, x_desc, x, y_desc, y, gamma, beta, running, saved,
    )
}

/// Batch norm training fused with a ReLU, and optionally a residual add before it (cuDNN's
/// cudnnBatchNormalizationForwardTrainingEx with `CUDNN_BATCHNORM_OPS_BN_ACTIVATION` or
/// `_BN_ADD_ACTIVATION`; oneDNN's `fuse_norm_relu` / `fuse_norm_add_relu`):
/// y = max(γ·x̂ + β (+ z), 0), a NaN kept. Statistics, `running` and `saved` as
/// [`forward_training`]'s; y is written (no blend). [`backward_relu`] takes this y.
///
/// # Errors
/// As [`forward_training`], and [`Error::BadParam`] naming `z` (other dimensions than x's);
/// [`Error::BufferTooSmall`] naming `z`.
///
/// # Examples
/// ```
/// use autodnn::{layers::norm::{self, BatchNorm}, DataType, Handle, Layout, TensorDesc};
/// let h = Handle::with_threads(1)?;
/// let d = TensorDesc::new(DataType::F32, Layout::Nchw, [2, 1, 1, 2])?;
/// let (x, z) = ([1.0, 3.0, 1.0, 3.0], [0.5, 0.5, 2.0, 2.0]);
/// let mut y = [0.0; 4];
/// // x̂ = ∓1: y = max(x̂ + z, 0).
/// h.batch_norm_forward_training_relu(&BatchNorm::new(1e-5)?, &d, &x, Some((&d, &z[..])),
///     &d, &mut y, &[1.0], &[0.0], None, None)?;
/// assert_eq!(y.map(|v| (v * 100.0).round()), [0.0, 150.0, 100.0, 300.0]);
/// # let _ = norm::forward_training_relu;
/// # Ok::<(), autodnn::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn forward_training_relu(
    ctx: &ExecContext<'_>,
    bn: &BatchNorm,
    x_desc: &TensorDesc,
    x: &[f32],
    z: Option<(&TensorDesc, &[f32])>,
    y_desc: &TensorDesc,
    y: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    running: Option<RunningStats<'_>>,
    saved: Option<SavedStatsMut<'_>>,
) -> Result<()> {
    if let Some((zd, zv)) = z {
        check_bn_io(x_desc, x, "z", zd, zv.len())?;
    }
    let post = Some(z.map(|(zd, zv)| (zd.strides(), zv)));
    training(
        ctx,
        bn,
        Blend::default(),
        post,
        x_desc,
        x,
        y_desc,
        y,
        gamma,
        beta,
        running,
        saved,
    )
}

/// What follows a training forward's normalization: nothing, or a ReLU after adding the
/// residual (its strides and values) when there is one.
type Post<'a> = Option<Option<([usize; 4], &'a [f32])>>;

/// [`forward_training`] and [`forward_training_relu`].
#[allow(clippy::too_many_arguments)]
fn training(
    ctx: &ExecContext<'_>,
    bn: &BatchNorm,
    blend: Blend,
    post: Post<'_>,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    running: Option<RunningStats<'_>>,
    saved: Option<SavedStatsMut<'_>>,
) -> Result<()> {
    blend.check()?;
    check_bn_io(x_desc, x, "y", y_desc, y.len())?;
    let (c, m) = bn_shape(x_desc);
    check_len("gamma", gamma.len(), c, "one per channel")?;
    check_len("beta", beta.len(), c, "one per channel")?;
    if let Some(r) = &running {
        check_len("running.mean", r.mean.len(), c, "one per channel")?;
        check_len("running.var", r.var.len(), c, "one per channel")?;
        if !(r.factor.is_finite() && (0.0..=1.0).contains(&r.factor)) {
            return Err(Error::bad(
                "exponential_average_factor",
                r.factor,
                "must be in [0, 1]",
            ));
        }
    }
    if let Some(s) = &saved {
        check_len("saved.mean", s.mean.len(), c, "one per channel")?;
        check_len("saved.inv_std", s.inv_std.len(), c, "one per channel")?;
    }
    if m < 2 {
        return Err(Error::bad(
            "x",
            format!("{:?}", x_desc.dims()),
            "training needs more than one value per channel (N·H·W > 1)",
        ));
    }
    let alpha = blend.alpha as f64;
    // y = (x − m)·a + b for channel `ch` from its (mean, variance).
    let coefs = |ch: usize, [mean, var]: [f64; 2]| {
        let inv = 1.0 / (var + bn.epsilon).sqrt();
        let m32 = mean as f32;
        let a = alpha * gamma[ch] as f64 * inv;
        // The mean's rounding to f32, folded into the shift.
        [
            m32,
            a as f32,
            (alpha * beta[ch] as f64 - a * (mean - m32 as f64)) as f32,
        ]
    };
    let dims = x_desc.dims();
    let features = ctx.features();
    // The residual's strides (x's where there is none: a plane then has an offset in it).
    let zst = match post {
        Some(Some((zs, _))) => zs,
        _ => x_desc.strides(),
    };
    let zv: &[f32] = match post {
        Some(Some((_, zv))) => zv,
        _ => &[],
    };
    // x, and the residual when there is one.
    let reads = if zv.is_empty() { 1 } else { 2 };
    let planes = by_channel(dims, [y_desc.strides(), x_desc.strides(), zst], reads);
    let stats = if let Some(pl) = planes {
        // Each channel's planes summed, then normalized while they are still in cache.
        let mut stats = crate::alloc::try_vec(c, [0.0f64; 2], "batch norm statistics")?;
        let n = pl.count / pl.c;
        let len = pl.len;
        let (st, out) = (SharedOut::new(&mut stats), SharedOut::new(y));
        run_items(ctx, x_desc.elements(), c, |ch| {
            // Channel ch's shift: its first element (sample 0); the planes in sample order,
            // as `bn_stats` adds them.
            let shift = x[pl.at(ch).0[1]];
            let s = (0..n).fold([0.0f64; 2], |a, b| {
                let ([_, ox, _], _) = pl.at(b * c + ch);
                let p = sum_shifted(features, &x[ox..ox + len], shift);
                [a[0] + p[0], a[1] + p[1]]
            });
            let moments = shifted_moments(s, shift as f64, m);
            let [mm, a, b] = coefs(ch, moments);
            // SAFETY: slot ch of the statistics and channel ch's planes of y belong to this
            // item alone.
            unsafe {
                st.write(ch, moments);
                for b_ in 0..n {
                    let ([oy, ox, oz], _) = pl.at(b_ * c + ch);
                    let dst = out.slice_mut(oy, len);
                    by_lines(&x[ox..ox + len], dst, |x, y| {
                        affine(features, x, y, mm, a, b, blend.beta)
                    });
                    if post.is_some() {
                        let z = if zv.is_empty() { zv } else { &zv[oz..oz + len] };
                        relu_add(features, dst, z);
                    }
                }
            }
        })?;
        stats
    } else {
        let stats = bn_stats(ctx, x_desc, x)?;
        let mut k = crate::alloc::try_vec(3 * c, 0.0f32, "batch norm coefficients")?;
        for (ch, &ms) in stats.iter().enumerate() {
            for (j, v) in coefs(ch, ms).into_iter().enumerate() {
                k[j * c + ch] = v;
            }
        }
        bn_apply(ctx, blend.beta, x_desc, x, y_desc, y, &k)?;
        if post.is_some() {
            relu_pass(ctx, y_desc, y, (zst, zv))?;
        }
        stats
    };
    if let Some(s) = saved {
        for (ch, &[mean, var]) in stats.iter().enumerate() {
            s.mean[ch] = mean as f32;
            s.inv_std[ch] = (1.0 / (var + bn.epsilon).sqrt()) as f32;
        }
    }
    if let Some(r) = running {
        let f = r.factor;
        let unbias = m as f64 / (m - 1) as f64;
        for (ch, &[mean, var]) in stats.iter().enumerate() {
            let uvar = var * unbias;
            if f == 1.0 {
                r.mean[ch] = mean as f32;
                r.var[ch] = uvar as f32;
            } else {
                r.mean[ch] = ((1.0 - f) * r.mean[ch] as f64 + f * mean) as f32;
                r.var[ch] = ((1.0 - f) * r.var[ch] as f64 + f * uvar) as f32;
            }
        }
    }
    Ok(())
}

/// Batch norm backward (cudnnBatchNormalizationBackward): dx, dγ and dβ (formulas in the
/// module's card), dx blended by `blend_data`, dγ and dβ by `blend_param`. The statistics
/// are the training pass's `saved` ones, or recomputed from x with the descriptor's ε when
/// `saved` is `None`. x, dy and dx of the same dimensions, any strides each.
///
/// # Errors
/// [`Error::BadParam`] naming `dy`, `dx` (other dimensions), `gamma`, `saved.mean`,
/// `saved.inv_std`, `grads.dgamma`, `grads.dbeta` (not C values), `alpha`/`beta`;
/// [`Error::BufferTooSmall`] naming `x`, `dy` or `dx`; [`Error::Unsupported`] for types other
/// than f32.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    ctx: &ExecContext<'_>,
    bn: &BatchNorm,
    blend_data: Blend,
    blend_param: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    dx_desc: &TensorDesc,
    dx: &mut [f32],
    gamma: &[f32],
    saved: Option<SavedStats<'_>>,
    grads: ParamGrads<'_>,
) -> Result<()> {
    backward_masked(
        ctx,
        bn,
        blend_data,
        blend_param,
        x_desc,
        x,
        dy_desc,
        dy,
        None,
        dx_desc,
        dx,
        gamma,
        saved,
        grads,
    )
}

/// [`backward`], and [`backward_relu`]'s channel pass: with `relu_y` (a y of planes laid out
/// as dy's, checked by the caller; blend_data the default) the gradient is dy where y > 0,
/// written into dx's planes first and transformed there.
#[allow(clippy::too_many_arguments)]
fn backward_masked(
    ctx: &ExecContext<'_>,
    bn: &BatchNorm,
    blend_data: Blend,
    blend_param: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    relu_y: Option<(&TensorDesc, &[f32])>,
    dx_desc: &TensorDesc,
    dx: &mut [f32],
    gamma: &[f32],
    saved: Option<SavedStats<'_>>,
    grads: ParamGrads<'_>,
) -> Result<()> {
    blend_data.check()?;
    blend_param.check()?;
    check_bn_io(x_desc, x, "dy", dy_desc, dy.len())?;
    check_bn_io(x_desc, x, "dx", dx_desc, dx.len())?;
    let (c, m) = bn_shape(x_desc);
    check_len("gamma", gamma.len(), c, "one per channel")?;
    if let Some(s) = &saved {
        check_len("saved.mean", s.mean.len(), c, "one per channel")?;
        check_len("saved.inv_std", s.inv_std.len(), c, "one per channel")?;
    }
    check_len("grads.dgamma", grads.dgamma.len(), c, "one per channel")?;
    check_len("grads.dbeta", grads.dbeta.len(), c, "one per channel")?;
    // Mean (as the f32 the elementwise pass subtracts) and inv_std per channel.
    let (mean, inv): (Vec<f32>, Vec<f64>) = match saved {
        Some(s) => (
            crate::alloc::try_copy(s.mean, "batch norm means")?,
            crate::alloc::try_collect(s.inv_std.iter().map(|&v| v as f64), "batch norm scales")?,
        ),
        None => {
            let stats = bn_stats(ctx, x_desc, x)?;
            let mean = stats.iter().map(|&[mu, _]| mu as f32);
            let inv = stats
                .iter()
                .map(|&[_, var]| 1.0 / (var + bn.epsilon).sqrt());
            (
                crate::alloc::try_collect(mean, "batch norm means")?,
                crate::alloc::try_collect(inv, "batch norm scales")?,
            )
        }
    };
    let dims = x_desc.dims();
    let features = ctx.features();
    let st = [dx_desc.strides(), x_desc.strides(), dy_desc.strides()];
    let mf = m as f64;
    let ad = blend_data.alpha as f64;
    // The coefficients of dx = dy·a + (x − m)·b + c for channel `ch` from its sums; dγ and dβ
    // blended in place.
    let coefs =
        |ch: usize, sums: [f64; 2]| grad_coefs(ad * gamma[ch] as f64, mean[ch], inv[ch], sums, mf);
    // y's strides (dy's as a stand-in without a mask) and the tensors a pass reads.
    let (yst, yv, reads) = match relu_y {
        Some((yd, yv)) => (yd.strides(), yv, 3),
        None => (dy_desc.strides(), &[][..], 2),
    };
    let masked = relu_y.is_some();
    if let Some(pl) = by_channel(dims, [st[0], st[1], st[2], yst], reads) {
        // Each channel's planes summed, then its dx written while they are still in cache:
        // x and dy come from memory once (inside a training step x was written long before).
        let n = pl.count / pl.c;
        let len = pl.len;
        let beta = blend_data.beta;
        let dgamma = SharedOut::new(grads.dgamma);
        let dbeta = SharedOut::new(grads.dbeta);
        let stream = !masked && super::streams(beta != 0.0, dx_desc);
        let out = SharedOut::new(dx);
        // Channel ch + step is (most likely) this worker's next: its planes are asked into
        // L2 while this one's are summed (x) and written (dy, and y under a mask), so the
        // reads from memory overlap both passes instead of stalling the sums.
        let total = x_desc.elements();
        let step = super::item_threads(ctx, c, total);
        let fetch = |off: usize, v: &[f32]| {
            if !v.is_empty() {
                crate::simd::fetch_to_l2(&v[off..off + len]);
            }
        };
        return super::run_items_with(
            ctx,
            c,
            total,
            || Ok(None),
            |asked: &mut Option<usize>, ch| {
                let warm = *asked == Some(ch);
                let next = (ch + step < c).then_some(ch + step);
                *asked = next;
                // In sample order: the sums' bits are those of the other paths' `plane_sums`.
                let s = (0..n).fold([0.0f64; 2], |a, b| {
                    let ([od, ox, og, oy], _) = pl.at(b * c + ch);
                    let (xs, dys) = (&x[ox..ox + len], &dy[og..og + len]);
                    // Without the last channel's requests, the channel's next plane: a stride
                    // the prefetchers do not follow.
                    if !warm && b + 1 < n {
                        let ([_, nx, ng, ny], _) = pl.at((b + 1) * c + ch);
                        fetch(nx, x);
                        fetch(ng, dy);
                        fetch(ny, yv);
                    }
                    if let Some(nc) = next {
                        fetch(pl.at(b * c + nc).0[1], x);
                    }
                    let p = if masked {
                        // SAFETY: channel ch's planes of dx belong to this item alone.
                        let g = unsafe { out.slice_mut(od, len) };
                        relu_mask(features, dys, &yv[oy..oy + len], g);
                        sum_grad(features, xs, g, &[], mean[ch])
                    } else {
                        sum_grad(features, xs, dys, &[], mean[ch])
                    };
                    [a[0] + p[0], a[1] + p[1]]
                });
                let kk = coefs(ch, s);
                // SAFETY: slot ch of dγ and dβ, and channel ch's planes of dx, belong to this item
                // alone.
                unsafe {
                    dgamma.write(
                        ch,
                        blend_param.apply_f64(s[1] * inv[ch], dgamma.read(ch) as f64) as f32,
                    );
                    dbeta.write(
                        ch,
                        blend_param.apply_f64(s[0], dbeta.read(ch) as f64) as f32,
                    );
                    for b in 0..n {
                        if let Some(nc) = next {
                            let ([_, _, ng, ny], _) = pl.at(b * c + nc);
                            fetch(ng, dy);
                            fetch(ny, yv);
                        }
                        let ([od, ox, og, _], _) = pl.at(b * c + ch);
                        let (xs, dst) = (&x[ox..ox + len], out.slice_mut(od, len));
                        if masked {
                            grad_affine_in_place(features, xs, dst, kk);
                        } else {
                            let dys = &dy[og..og + len];
                            super::write_blocks(features, stream, dst, |o, blk| {
                                let k = blk.len();
                                grad_affine(features, &xs[o..o + k], &dys[o..o + k], blk, kk, beta)
                            });
                        }
                    }
                }
            },
        );
    }
    let sums = match Rows::new(dims, [x_desc.strides(), dy_desc.strides()]) {
        Some(rows) => {
            let mf = mean.iter().map(|&v| v as f64);
            let mf = crate::alloc::try_collect(mf, "batch norm means")?;
            row_sums(ctx, &rows, c, |[ox, og], s0, s1| {
                row_grad(features, &x[ox..ox + c], &dy[og..og + c], &mf, s0, s1)
            })?
        }
        None => match Planes::new(dims, [x_desc.strides(), dy_desc.strides()]) {
            Some(pl) => plane_sums(ctx, &pl, |[ox, og], ch| {
                let n = pl.len;
                sum_grad(features, &x[ox..ox + n], &dy[og..og + n], &[], mean[ch])
            })?,
            None => {
                let geo = Groups::new(dims, [x_desc.strides(), dy_desc.strides()], 1);
                let contiguous = geo.contiguous();
                group_sums(ctx, &geo, |g, [ox, og], n| {
                    let mu = mean[g];
                    if contiguous {
                        sum_grad(features, &x[ox..ox + n], &dy[og..og + n], &[], mu)
                    } else {
                        let mut acc = [0.0; 2];
                        for j in 0..n {
                            let d = dy[og + j * geo.inner[1]] as f64;
                            acc[0] += d;
                            acc[1] += d * (x[ox + j * geo.inner[0]] as f64 - mu as f64);
                        }
                        acc
                    }
                })?
            }
        },
    };
    let mut k = crate::alloc::try_vec(4 * c, 0.0f32, "batch norm coefficients")?;
    for (ch, &[s1, s2]) in sums.iter().enumerate() {
        let kk = coefs(ch, [s1, s2]);
        for (j, v) in kk.into_iter().enumerate() {
            k[j * c + ch] = v;
        }
        grads.dgamma[ch] = blend_param.apply_f64(s2 * inv[ch], grads.dgamma[ch] as f64) as f32;
        grads.dbeta[ch] = blend_param.apply_f64(s1, grads.dbeta[ch] as f64) as f32;
    }
    // The blend's alpha is inside the coefficients: apply only its beta.
    let beta = blend_data.beta;
    let reads = beta != 0.0;
    let total = x_desc.elements();
    let out = SharedOut::new(dx);
    if let Some(rows) = Rows::new(dims, st) {
        return run_items(ctx, total, rows.pieces(), |i| {
            rows.walk(i, |[od, ox, og]| {
                // SAFETY: each position's row belongs to one piece.
                let dst = unsafe { out.slice_mut(od, c) };
                grad_row(features, &x[ox..ox + c], &dy[og..og + c], dst, &k, beta);
            })
        });
    }
    if let Some(pl) = Planes::new(dims, st) {
        return run_planes(ctx, &pl, |i| {
            let ([od, ox, og], g) = pl.at(i);
            let kk = [k[g], k[c + g], k[2 * c + g], k[3 * c + g]];
            let n = pl.len;
            // SAFETY: each plane belongs to one item.
            let dst = unsafe { out.slice_mut(od, n) };
            grad_affine(features, &x[ox..ox + n], &dy[og..og + n], dst, kk, beta);
        });
    }
    let geo = Groups::new(dims, st, 1);
    let contiguous = geo.contiguous();
    run_items(ctx, total, geo.count * geo.pieces(), |i| {
        let (g, e0, e1) = geo.piece(i);
        let kk = [k[g], k[c + g], k[2 * c + g], k[3 * c + g]];
        geo.walk(g, e0, e1, |[od, ox, og], n| {
            if contiguous {
                // SAFETY: the run's elements belong to this piece alone.
                let dst = unsafe { out.slice_mut(od, n) };
                grad_affine(features, &x[ox..ox + n], &dy[og..og + n], dst, kk, beta);
            } else {
                for j in 0..n {
                    let pd = od + j * geo.inner[0];
                    let v = grad1(
                        x[ox + j * geo.inner[1]],
                        dy[og + j * geo.inner[2]],
                        kk[0],
                        kk[1],
                        kk[2],
                        kk[3],
                    );
                    // SAFETY: element pd belongs to this piece alone.
                    unsafe {
                        let v = if reads { v + beta * out.read(pd) } else { v };
                        out.write(pd, v);
                    }
                }
            }
        })
    })
}

/// The coefficients [m, a, b, c] of a channel's dx = dy·a + (x − m)·b + c, from alpha·γ,
/// the mean, 1/√(var + ε), the sums (Σdy, Σdy·(x − m)) and M.
fn grad_coefs(ag: f64, mean: f32, inv: f64, [s1, s2]: [f64; 2], mf: f64) -> [f32; 4] {
    let k1 = ag * inv;
    [
        mean,
        k1 as f32,
        (-k1 * inv * inv * s2 / mf) as f32,
        (-k1 * s1 / mf) as f32,
    ]
}

/// Batch norm backward through a fused ReLU (and residual add) of [`forward_training_relu`]
/// (cuDNN's cudnnBatchNormalizationBackwardEx with `CUDNN_BATCHNORM_OPS_BN_ACTIVATION` or
/// `_BN_ADD_ACTIVATION`): with g = dy where y > 0 and 0 elsewhere (y the fused forward's
/// output), dx, dγ and dβ are [`backward`]'s of g, dx written (no blend), dγ and dβ blended
/// by `blend_param`; `dz`, the residual's gradient, receives g when given.
///
/// # Errors
/// As [`backward`], and [`Error::BadParam`] naming `y` or `dz` (other dimensions than x's);
/// [`Error::BufferTooSmall`] naming them; [`Error::OutOfMemory`] for the gradient's buffer
/// where neither a channel-at-a-time pass nor `dz` can hold it.
#[allow(clippy::too_many_arguments)]
pub fn backward_relu(
    ctx: &ExecContext<'_>,
    bn: &BatchNorm,
    blend_param: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    dz: Option<(&TensorDesc, &mut [f32])>,
    dx_desc: &TensorDesc,
    dx: &mut [f32],
    gamma: &[f32],
    saved: Option<SavedStats<'_>>,
    grads: ParamGrads<'_>,
) -> Result<()> {
    blend_param.check()?;
    check_bn_io(x_desc, x, "y", y_desc, y.len())?;
    check_bn_io(x_desc, x, "dy", dy_desc, dy.len())?;
    check_bn_io(x_desc, x, "dx", dx_desc, dx.len())?;
    if let Some((zd, zv)) = &dz {
        check_bn_io(x_desc, x, "dz", zd, zv.len())?;
    }
    let dims = x_desc.dims();
    // Without dz, a channel at a time: the masked gradient written into dx, summed, and
    // transformed in place from the cache. (With dz, writing it beside dx in the same pass
    // ran slower than the masked pass in memory order followed by the plain backward: 4.6-5.2
    // against 4.6 ms on 8x256x56x56, 2 threads.)
    let st = [
        dx_desc.strides(),
        x_desc.strides(),
        dy_desc.strides(),
        y_desc.strides(),
    ];
    if dz.is_none() && by_channel(dims, st, 3).is_some() {
        return backward_masked(
            ctx,
            bn,
            Blend::default(),
            blend_param,
            x_desc,
            x,
            dy_desc,
            dy,
            Some((y_desc, y)),
            dx_desc,
            dx,
            gamma,
            saved,
            grads,
        );
    }
    // Otherwise the masked gradient in full (in dz, or a buffer of dy's layout), then the
    // plain backward of it.
    let data = Blend::default();
    match dz {
        Some((zd, zv)) => {
            mask_pass(ctx, (zd, zv), (dy_desc, dy), (y_desc, y))?;
            backward(
                ctx,
                bn,
                data,
                blend_param,
                x_desc,
                x,
                zd,
                zv,
                dx_desc,
                dx,
                gamma,
                saved,
                grads,
            )
        }
        None => {
            let mut g = crate::alloc::try_vec(dy.len(), 0.0f32, "batch norm's masked gradient")?;
            mask_pass(ctx, (dy_desc, &mut g), (dy_desc, dy), (y_desc, y))?;
            backward(
                ctx,
                bn,
                data,
                blend_param,
                x_desc,
                x,
                dy_desc,
                &g,
                dx_desc,
                dx,
                gamma,
                saved,
                grads,
            )
        }
    }
}

/// y = max(y + z, 0) over tensors of any strides (`z.1` empty: max(y, 0)).
fn relu_pass(
    ctx: &ExecContext<'_>,
    y_desc: &TensorDesc,
    y: &mut [f32],
    z: ([usize; 4], &[f32]),
) -> Result<()> {
    let (zst, zv) = z;
    let geo = Groups::new(y_desc.dims(), [y_desc.strides(), zst], 1);
    let contiguous = geo.contiguous();
    let features = ctx.features();
    let out = SharedOut::new(y);
    run_items(ctx, y_desc.elements(), geo.count * geo.pieces(), |i| {
        let (g, e0, e1) = geo.piece(i);
        geo.walk(g, e0, e1, |[oy, oz], n| {
            if contiguous {
                // SAFETY: the run's elements belong to this piece alone.
                let dst = unsafe { out.slice_mut(oy, n) };
                let z = if zv.is_empty() { zv } else { &zv[oz..oz + n] };
                return relu_add(features, dst, z);
            }
            for j in 0..n {
                let py = oy + j * geo.inner[0];
                // SAFETY: element py belongs to this piece alone.
                unsafe {
                    let v = out.read(py);
                    let v = if zv.is_empty() {
                        v
                    } else {
                        v + zv[oz + j * geo.inner[1]]
                    };
                    out.write(py, relu1(v));
                }
            }
        })
    })
}

/// g = dy where y > 0, else 0, over tensors of any strides.
fn mask_pass(
    ctx: &ExecContext<'_>,
    g: (&TensorDesc, &mut [f32]),
    dy: (&TensorDesc, &[f32]),
    y: (&TensorDesc, &[f32]),
) -> Result<()> {
    let (gd, gv) = g;
    let geo = Groups::new(gd.dims(), [gd.strides(), dy.0.strides(), y.0.strides()], 1);
    let contiguous = geo.contiguous();
    let features = ctx.features();
    let out = SharedOut::new(gv);
    run_items(ctx, gd.elements(), geo.count * geo.pieces(), |i| {
        let (c, e0, e1) = geo.piece(i);
        geo.walk(c, e0, e1, |[og, od, oy], n| {
            if contiguous {
                // SAFETY: the run's elements belong to this piece alone.
                let dst = unsafe { out.slice_mut(og, n) };
                return relu_mask(features, &dy.1[od..od + n], &y.1[oy..oy + n], dst);
            }
            for j in 0..n {
                let v = if y.1[oy + j * geo.inner[2]] > 0.0 {
                    dy.1[od + j * geo.inner[1]]
                } else {
                    0.0
                };
                // SAFETY: element og + j·inner belongs to this piece alone.
                unsafe { out.write(og + j * geo.inner[0], v) };
            }
        })
    })
}

// ---------------------------------------------------------------------------------------
// Layer normalization.
// ---------------------------------------------------------------------------------------

/// Strides of the elementwise parameters (C·H·W values in (c, h, w) order) as a tensor of
/// the sample's dimensions (stride 0 over n).
fn param_strides(dims: [usize; 4]) -> [usize; 4] {
    let [_, _, h, w] = dims;
    [0, h * w, w, 1]
}

fn check_ln_param(field: &str, p: Option<usize>, chw: usize) -> Result<()> {
    match p {
        Some(len) => check_len(field, len, chw, "one per element of a sample, C·H·W"),
        None => Ok(()),
    }
}

/// Layer norm forward: per sample n, y = alpha·(γ·(x − mean)·rstd + β) + beta·y over its
/// C·H·W elements, γ and β elementwise (C·H·W values each, (c, h, w) order) and optional
/// (1 and 0 when absent); `saved` receives the mean and rstd = 1/√(var + ε) per sample.
///
/// # Errors
/// [`Error::BadParam`] naming `y` (other dimensions), `gamma`, `beta` (not C·H·W values),
/// `saved.mean`, `saved.inv_std` (not N values), `alpha`/`beta`;
/// [`Error::BufferTooSmall`] naming `x` or `y`; [`Error::Unsupported`] for types other than
/// f32.
///
/// # Examples
/// ```
/// use autodnn::{layers::{norm::LayerNorm, Blend}, DataType, Handle, Layout, TensorDesc};
/// let h = Handle::with_threads(1)?;
/// let d = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 1, 2])?;
/// let x = [1.0, 2.0, 3.0, 4.0];
/// let mut y = [0.0; 4];
/// h.layer_norm_forward(&LayerNorm::new(1e-5)?, Blend::default(), &d, &x, &d, &mut y,
///     None, None, None)?;
/// assert!((y[0] + 1.3416).abs() < 1e-3 && (y[3] - 1.3416).abs() < 1e-3);
/// # Ok::<(), autodnn::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_forward(
    ctx: &ExecContext<'_>,
    ln: &LayerNorm,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &mut [f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    saved: Option<SavedStatsMut<'_>>,
) -> Result<()> {
    blend.check()?;
    check_bn_io(x_desc, x, "y", y_desc, y.len())?;
    let dims = x_desc.dims();
    let [n, c, h, w] = dims;
    let chw = c * h * w;
    check_ln_param("gamma", gamma.map(|g| g.len()), chw)?;
    check_ln_param("beta", beta.map(|g| g.len()), chw)?;
    if let Some(s) = &saved {
        check_len("saved.mean", s.mean.len(), n, "one per sample")?;
        check_len("saved.inv_std", s.inv_std.len(), n, "one per sample")?;
    }
    let features = ctx.features();
    // Statistics per sample.
    let geo = Groups::new(dims, [x_desc.strides()], 0);
    let sums = shifted_sums(ctx, features, &geo, x)?;
    let alpha = blend.alpha as f64;
    // Per sample: m, alpha·rstd, the mean's rounding correction, alpha.
    let mut ks: Vec<[f32; 4]> = Vec::new();
    crate::alloc::try_reserve(&mut ks, n, "layer norm coefficients")?;
    let mut stats: Vec<[f64; 2]> = Vec::new();
    crate::alloc::try_reserve(&mut stats, n, "layer norm statistics")?;
    for (g, s) in sums.into_iter().enumerate() {
        let [mean, var] = shifted_moments(s, x[g * geo.gstride[0]] as f64, chw);
        let r = 1.0 / (var + ln.epsilon).sqrt();
        let m32 = mean as f32;
        let ra = alpha * r;
        ks.push([
            m32,
            ra as f32,
            (-(mean - m32 as f64) * ra) as f32,
            blend.alpha,
        ]);
        stats.push([mean, r]);
    }
    let (gs, bs) = (gamma.unwrap_or(&[]), beta.unwrap_or(&[]));
    let pst = param_strides(dims);
    let st = [y_desc.strides(), x_desc.strides(), pst];
    let geo = Groups::new(dims, st, 0);
    let contiguous = geo.contiguous();
    let bt = blend.beta;
    let out = SharedOut::new(y);
    run_items(ctx, x_desc.elements(), geo.count * geo.pieces(), |i| {
        let (g, e0, e1) = geo.piece(i);
        let k = ks[g];
        geo.walk(g, e0, e1, |[oy, ox, op], len| {
            if contiguous {
                let gg = if gs.is_empty() { gs } else { &gs[op..op + len] };
                let bb = if bs.is_empty() { bs } else { &bs[op..op + len] };
                // SAFETY: the run's elements belong to this piece alone.
                let dst = unsafe { out.slice_mut(oy, len) };
                ln_run(features, &x[ox..ox + len], gg, bb, dst, k, bt);
            } else {
                for j in 0..len {
                    let (py, px, pp) = (
                        oy + j * geo.inner[0],
                        ox + j * geo.inner[1],
                        op + j * geo.inner[2],
                    );
                    let v = ln1(x[px], gamma.map(|g| g[pp]), beta.map(|b| b[pp]), k);
                    // SAFETY: element py belongs to this piece alone.
                    unsafe {
                        let v = if bt != 0.0 { v + bt * out.read(py) } else { v };
                        out.write(py, v);
                    }
                }
            }
        })
    })?;
    if let Some(s) = saved {
        for (g, &[mean, r]) in stats.iter().enumerate() {
            s.mean[g] = mean as f32;
            s.inv_std[g] = r as f32;
        }
    }
    Ok(())
}

/// Layer norm backward: from x, dy, γ (optional, C·H·W values) and the forward pass's saved
/// mean and rstd (N values each): dx = alpha_d·rstd·(g − mean(g) − x̂·mean(g·x̂)) + beta_d·dx
/// with g = dy·γ and x̂ = (x − mean)·rstd, the means over each sample's C·H·W elements; and,
/// when `grads` is given, dγ = alpha_p·Σ_n dy·x̂ + beta_p·dγ, dβ = alpha_p·Σ_n dy + beta_p·dβ
/// (C·H·W values each).
///
/// # Errors
/// [`Error::BadParam`] naming `dy`, `dx` (other dimensions), `gamma`, `grads.dgamma`,
/// `grads.dbeta` (not C·H·W values), `saved.mean`, `saved.inv_std` (not N values),
/// `alpha`/`beta`; [`Error::BufferTooSmall`] naming `x`, `dy` or `dx`;
/// [`Error::Unsupported`] for types other than f32.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward(
    ctx: &ExecContext<'_>,
    blend_data: Blend,
    blend_param: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    dx_desc: &TensorDesc,
    dx: &mut [f32],
    gamma: Option<&[f32]>,
    saved: SavedStats<'_>,
    grads: Option<ParamGrads<'_>>,
) -> Result<()> {
    blend_data.check()?;
    blend_param.check()?;
    check_bn_io(x_desc, x, "dy", dy_desc, dy.len())?;
    check_bn_io(x_desc, x, "dx", dx_desc, dx.len())?;
    let dims = x_desc.dims();
    let [n, c, h, w] = dims;
    let chw = c * h * w;
    check_ln_param("gamma", gamma.map(|g| g.len()), chw)?;
    check_len("saved.mean", saved.mean.len(), n, "one per sample")?;
    check_len("saved.inv_std", saved.inv_std.len(), n, "one per sample")?;
    if let Some(g) = &grads {
        check_len("grads.dgamma", g.dgamma.len(), chw, "C·H·W")?;
        check_len("grads.dbeta", g.dbeta.len(), chw, "C·H·W")?;
    }
    let features = ctx.features();
    let gs = gamma.unwrap_or(&[]);
    let pst = param_strides(dims);
    let st = [dx_desc.strides(), x_desc.strides(), dy_desc.strides(), pst];
    let geo = Groups::new(dims, st, 0);
    let contiguous = geo.contiguous();
    let sums = group_sums(ctx, &geo, |g, [_, ox, og, op], len| {
        let mu = saved.mean[g];
        if contiguous {
            let gg = if gs.is_empty() { gs } else { &gs[op..op + len] };
            sum_grad(features, &x[ox..ox + len], &dy[og..og + len], gg, mu)
        } else {
            let mut acc = [0.0; 2];
            for j in 0..len {
                let mut d = dy[og + j * geo.inner[2]] as f64;
                if let Some(gm) = gamma {
                    d *= gm[op + j * geo.inner[3]] as f64;
                }
                acc[0] += d;
                acc[1] += d * (x[ox + j * geo.inner[1]] as f64 - mu as f64);
            }
            acc
        }
    })?;
    let (mf, ad) = (chw as f64, blend_data.alpha as f64);
    let ks = sums.iter().enumerate().map(|(g, &[s1, s2])| {
        let r = saved.inv_std[g] as f64;
        [
            saved.mean[g],
            (ad * r) as f32,
            (-ad * r * r * r * s2 / mf) as f32,
            (-ad * r * s1 / mf) as f32,
        ]
    });
    let ks = crate::alloc::try_collect(ks, "layer norm coefficients")?;
    let bt = blend_data.beta;
    {
        let out = SharedOut::new(dx);
        run_items(ctx, x_desc.elements(), geo.count * geo.pieces(), |i| {
            let (g, e0, e1) = geo.piece(i);
            let k = ks[g];
            geo.walk(g, e0, e1, |[od, ox, og, op], len| {
                if contiguous {
                    let gg = if gs.is_empty() { gs } else { &gs[op..op + len] };
                    // SAFETY: the run's elements belong to this piece alone.
                    let dst = unsafe { out.slice_mut(od, len) };
                    ln_grad_run(
                        features,
                        &x[ox..ox + len],
                        &dy[og..og + len],
                        gg,
                        dst,
                        k,
                        bt,
                    );
                } else {
                    for j in 0..len {
                        let pd = od + j * geo.inner[0];
                        let mut d = dy[og + j * geo.inner[2]];
                        if let Some(gm) = gamma {
                            d *= gm[op + j * geo.inner[3]];
                        }
                        let v = grad1(x[ox + j * geo.inner[1]], d, k[0], k[1], k[2], k[3]);
                        // SAFETY: element pd belongs to this piece alone.
                        unsafe {
                            let v = if bt != 0.0 { v + bt * out.read(pd) } else { v };
                            out.write(pd, v);
                        }
                    }
                }
            })
        })?;
    }
    if let Some(grads) = grads {
        layer_norm_param_grads(ctx, blend_param, &geo, x, dy, saved, grads)?;
    }
    Ok(())
}

/// dγ, dβ of layer norm: per element of a sample, sums over n in order, split among threads
/// by element ranges.
fn layer_norm_param_grads(
    ctx: &ExecContext<'_>,
    blend: Blend,
    geo: &Groups<4>,
    x: &[f32],
    dy: &[f32],
    saved: SavedStats<'_>,
    grads: ParamGrads<'_>,
) -> Result<()> {
    let features = ctx.features();
    let contiguous = geo.contiguous();
    let chw = geo.elements();
    let items = chw.div_ceil(PARAM_CHUNK);
    let (ap, bp, reads) = (blend.alpha as f64, blend.beta as f64, blend.reads_output());
    let dg_out = SharedOut::new(grads.dgamma);
    let db_out = SharedOut::new(grads.dbeta);
    let init = || {
        let s0 = crate::alloc::try_vec(PARAM_CHUNK, 0.0f64, "layer norm dβ sums")?;
        let s1 = crate::alloc::try_vec(PARAM_CHUNK, 0.0f64, "layer norm dγ sums")?;
        Ok((s0, s1))
    };
    let body = |(s0, s1): &mut (Vec<f64>, Vec<f64>), i: usize| {
        let e0 = i * PARAM_CHUNK;
        let e1 = (e0 + PARAM_CHUNK).min(chw);
        s0.iter_mut().for_each(|v| *v = 0.0);
        s1.iter_mut().for_each(|v| *v = 0.0);
        for g in 0..geo.count {
            let (mu, r) = (saved.mean[g] as f64, saved.inv_std[g] as f64);
            let mut at = 0;
            geo.walk(g, e0, e1, |[_, ox, og, _], len| {
                let (a, q) = (&mut s0[at..at + len], &mut s1[at..at + len]);
                if contiguous {
                    param_acc(features, &x[ox..ox + len], &dy[og..og + len], mu, r, a, q);
                } else {
                    for j in 0..len {
                        let d = dy[og + j * geo.inner[2]] as f64;
                        a[j] += d;
                        q[j] += d * ((x[ox + j * geo.inner[1]] as f64 - mu) * r);
                    }
                }
                at += len;
            });
        }
        let mut at = 0;
        geo.walk(0, e0, e1, |[.., op], len| {
            for j in 0..len {
                let p = op + j * geo.inner[3];
                // SAFETY: element p of dγ and dβ belongs to this piece alone.
                unsafe {
                    let (pg, pb) = if reads {
                        (dg_out.read(p) as f64, db_out.read(p) as f64)
                    } else {
                        (0.0, 0.0)
                    };
                    dg_out.write(p, (ap * s1[at + j] + bp * pg) as f32);
                    db_out.write(p, (ap * s0[at + j] + bp * pb) as f32);
                }
            }
            at += len;
        });
    };
    if ctx.threads <= 1 || items <= 1 {
        let mut s = init()?;
        (0..items).for_each(|i| body(&mut s, i));
        return Ok(());
    }
    for_each_with(ctx, items, init, body)
}

// ---------------------------------------------------------------------------------------
// Folding into a convolution.
// ---------------------------------------------------------------------------------------

/// Rewrites w and bias so that conv(x, w') + b' = mult·(conv(x, w) + b) + add per output
/// channel k, computed in f64 and rounded once.
fn fold_affine(
    filter: &FilterDesc,
    w: &mut [f32],
    bias: &mut [f32],
    coef: &[[f64; 2]],
) -> Result<()> {
    let [_, c, r, s] = filter.dims();
    for k in 0..filter.k() {
        let [mult, add] = coef[k];
        for ci in 0..c {
            for ri in 0..r {
                for si in 0..s {
                    let o = filter.offset(k, ci, ri, si);
                    w[o] = (w[o] as f64 * mult) as f32;
                }
            }
        }
        bias[k] = (bias[k] as f64 * mult + add) as f32;
    }
    Ok(())
}

fn check_fold(
    filter: &FilterDesc,
    w: &[f32],
    bias: &[f32],
    params: &[(&str, &[f32])],
) -> Result<()> {
    if filter.dtype() != DataType::F32 {
        return Err(Error::Unsupported {
            what: format!("w: {} filters in folding", filter.dtype().name()),
        });
    }
    if w.len() < filter.elements() {
        return Err(Error::BufferTooSmall {
            field: "w".into(),
            needed: filter.elements(),
            got: w.len(),
        });
    }
    let k = filter.k();
    check_len(
        "bias",
        bias.len(),
        k,
        "one per output channel K; zeros if none",
    )?;
    for (f, v) in params {
        check_len(f, v.len(), k, "one per output channel K")?;
    }
    Ok(())
}

/// Per-channel (mult, add) of an inference batch norm: y·mult + add.
fn bn_coefficients(
    gamma: &[f32],
    beta: &[f32],
    mean: &[f32],
    var: &[f32],
    epsilon: f64,
) -> Result<Vec<[f64; 2]>> {
    if !(epsilon.is_finite() && epsilon >= 0.0) {
        return Err(Error::bad(
            "epsilon",
            epsilon,
            "must be finite and non-negative",
        ));
    }
    let mut out = crate::alloc::try_vec_with_capacity(gamma.len(), "batch norm coefficients")?;
    for k in 0..gamma.len() {
        let v = var[k] as f64 + epsilon;
        if !(v > 0.0 && v.is_finite()) {
            return Err(Error::bad(
                format!("var[{k}]"),
                var[k],
                "var + epsilon must be positive and finite",
            ));
        }
        let s = gamma[k] as f64 / v.sqrt();
        out.push([s, beta[k] as f64 - mean[k] as f64 * s]);
    }
    Ok(out)
}

/// Folds an inference batch norm that follows a convolution into the convolution's weights
/// and bias: afterwards conv(x, w') + b' = BN(conv(x, w) + b), with BN(v) = γ·(v − mean)/
/// √(var + ε) + β per output channel k (K = `filter.k()`, whatever the groups; KCRS or KRSC).
/// `bias` holds K values (zeros when the convolution had none). The per-channel factors are
/// computed in f64 and each weight rounded once: the folded convolution is within a few f32
/// ulp of the unfolded pair (the tests bound 1e-5 normwise). ε may be any finite value ≥ 0
/// with var + ε > 0 (models from other frameworks use ε below cuDNN's minimum).
///
/// # Errors
/// [`Error::BadParam`] naming `bias`, `gamma`, `beta`, `mean` or `var` (not K values),
/// `epsilon`, or `var[k]` (var + ε not positive); [`Error::BufferTooSmall`] naming `w`;
/// [`Error::Unsupported`] for a filter of another type than f32.
///
/// # Examples
/// ```
/// use autodnn::{layers::norm::fold_batch_norm, DataType, FilterDesc, FilterLayout};
/// let f = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [1, 1, 1, 2])?;
/// let (mut w, mut b) = (vec![1.0, 2.0], vec![0.0]);
/// // BN(v) = 2·(v − 1)/√(4 − ε + ε) + 3 = v + 2.
/// fold_batch_norm(&f, &mut w, &mut b, &[2.0], &[3.0], &[1.0], &[4.0], 0.0)?;
/// assert_eq!((w, b), (vec![1.0, 2.0], vec![2.0]));
/// # Ok::<(), autodnn::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn fold_batch_norm(
    filter: &FilterDesc,
    w: &mut [f32],
    bias: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    mean: &[f32],
    var: &[f32],
    epsilon: f64,
) -> Result<()> {
    check_fold(
        filter,
        w,
        bias,
        &[
            ("gamma", gamma),
            ("beta", beta),
            ("mean", mean),
            ("var", var),
        ],
    )?;
    let coef = bn_coefficients(gamma, beta, mean, var, epsilon)?;
    fold_affine(filter, w, bias, &coef)
}

/// Folds a per-channel scale and shift that follows a convolution (Caffe's `Scale` layer:
/// v·scale + shift per output channel) into its weights and bias.
///
/// # Errors
/// [`Error::BadParam`] naming `bias`, `scale` or `shift` (not K values);
/// [`Error::BufferTooSmall`] naming `w`; [`Error::Unsupported`] for a non-f32 filter.
pub fn fold_scale(
    filter: &FilterDesc,
    w: &mut [f32],
    bias: &mut [f32],
    scale: &[f32],
    shift: &[f32],
) -> Result<()> {
    check_fold(filter, w, bias, &[("scale", scale), ("shift", shift)])?;
    let coef = scale.iter().zip(shift).map(|(&s, &t)| [s as f64, t as f64]);
    let coef = crate::alloc::try_collect(coef, "folding coefficients")?;
    fold_affine(filter, w, bias, &coef)
}

/// Folds a batch norm followed by a per-channel scale and shift (Caffe's BatchNorm + Scale
/// pair) at once, with one rounding: conv(x, w') + b' = BN(conv(x, w) + b)·scale + shift.
///
/// # Errors
/// As [`fold_batch_norm`] and [`fold_scale`].
#[allow(clippy::too_many_arguments)]
pub fn fold_batch_norm_scale(
    filter: &FilterDesc,
    w: &mut [f32],
    bias: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    mean: &[f32],
    var: &[f32],
    epsilon: f64,
    scale: &[f32],
    shift: &[f32],
) -> Result<()> {
    check_fold(
        filter,
        w,
        bias,
        &[
            ("gamma", gamma),
            ("beta", beta),
            ("mean", mean),
            ("var", var),
            ("scale", scale),
            ("shift", shift),
        ],
    )?;
    let coef = bn_coefficients(gamma, beta, mean, var, epsilon)?
        .into_iter()
        .zip(scale.iter().zip(shift))
        .map(|([m, a], (&s, &t))| [m * s as f64, a * s as f64 + t as f64]);
    let coef = crate::alloc::try_collect(coef, "folding coefficients")?;
    fold_affine(filter, w, bias, &coef)
}

// ---------------------------------------------------------------------------------------
// benchdnn's bnorm problem strings.
// ---------------------------------------------------------------------------------------

/// A batch (or layer) normalization problem as benchdnn's bnorm driver writes it:
/// `mb8ic64ih56iw56` — `mb` (default 1, where benchdnn's default is 2), `ic` (required),
/// `ih` and `iw` (each defaults to the other, both to 1), `id` (default 1: spatial batch norm
/// over D·H·W is batch norm over (D·H)·W, so the depth folds into H), optional `eps` (e.g.
/// `eps1e-5`), and an optional name, `n"name"` or `_name` at the end.
///
/// ```
/// use autodnn::layers::norm::BatchNormProblem;
/// let p = BatchNormProblem::parse("mb2ic64ih56n\"res2a_bn\"")?;
/// assert_eq!(p.dims, [2, 64, 56, 56]);
/// assert_eq!(p.name.as_deref(), Some("res2a_bn"));
/// assert_eq!(BatchNormProblem::parse("ic2048ih7eps1e-3")?.eps, Some(1e-3));
/// assert_eq!(BatchNormProblem::parse("mb1ic3id4ih5iw6")?.dims, [1, 3, 20, 6]);
/// assert!(BatchNormProblem::parse("mb8ih56").is_err());
/// assert!(BatchNormProblem::parse("ic8_conv\"1").is_err()); // n"conv"1" would not parse
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNormProblem {
    /// (N, C, H, W); a depth is folded into H.
    pub dims: [usize; 4],
    /// ε, when the string gives one.
    pub eps: Option<f64>,
    /// The problem's name, when the string gives one.
    pub name: Option<String>,
}

impl BatchNormProblem {
    /// Parses a bnorm problem string (see the type's description).
    ///
    /// # Errors
    /// [`Error::Parse`] for an unknown or repeated field, a missing `ic`, a zero or
    /// non-numeric value, an ε that is not a positive finite number, sizes that overflow, or
    /// a name holding a double quote.
    pub fn parse(s: &str) -> Result<BatchNormProblem> {
        let bad = |reason: String| Error::Parse {
            input: s.to_string(),
            reason,
        };
        let mut rest = s.trim();
        let mut name = None;
        if let Some(i) = rest.find("n\"") {
            let tail = &rest[i + 2..];
            let end = tail
                .find('"')
                .ok_or_else(|| bad("unterminated name n\"...\"".into()))?;
            if end + 1 != tail.len() {
                return Err(bad("the name n\"...\" must come last".into()));
            }
            name = Some(tail[..end].to_string());
            rest = &rest[..i];
        } else if let Some(i) = rest.find('_') {
            let text = &rest[i + 1..];
            // Printed as n"...", a name holding a quote would not parse back.
            if text.contains('"') {
                return Err(bad("a name after _ must not hold a double quote".into()));
            }
            name = Some(text.to_string());
            rest = &rest[..i];
        }
        let mut vals: [Option<usize>; 5] = [None; 5]; // mb ic id ih iw
        const KEYS: [&str; 5] = ["mb", "ic", "id", "ih", "iw"];
        let mut eps = None;
        while !rest.is_empty() {
            let key_len = rest
                .find(|ch: char| !ch.is_ascii_alphabetic())
                .unwrap_or(rest.len());
            let key = &rest[..key_len];
            rest = &rest[key_len..];
            if key == "eps" {
                let len = rest
                    .char_indices()
                    .find(|&(i, ch)| {
                        !(ch.is_ascii_digit()
                            || ch == '.'
                            || ch == 'e'
                            || ch == 'E'
                            || ((ch == '-' || ch == '+')
                                && i > 0
                                && matches!(rest.as_bytes()[i - 1], b'e' | b'E')))
                    })
                    .map_or(rest.len(), |(i, _)| i);
                // A trailing field name starting with 'e' cannot follow eps (none exists).
                let v: f64 = rest[..len]
                    .parse()
                    .map_err(|_| bad(format!("eps {:?} is not a number", &rest[..len])))?;
                if !(v.is_finite() && v > 0.0) || eps.is_some() {
                    return Err(bad("eps must be given once, positive and finite".into()));
                }
                eps = Some(v);
                rest = &rest[len..];
                continue;
            }
            let slot = KEYS
                .iter()
                .position(|&k| k == key)
                .ok_or_else(|| bad(format!("unknown field {key:?} (mb, ic, id, ih, iw, eps)")))?;
            let len = rest
                .find(|ch: char| !ch.is_ascii_digit())
                .unwrap_or(rest.len());
            let v: usize = rest[..len]
                .parse()
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| bad(format!("{key} needs a positive integer")))?;
            if vals[slot].replace(v).is_some() {
                return Err(bad(format!("{key} given twice")));
            }
            rest = &rest[len..];
        }
        let [mb, ic, id, ih, iw] = vals;
        let ic = ic.ok_or_else(|| bad("ic is required".into()))?;
        let (ih, iw) = match (ih, iw) {
            (Some(h), Some(w)) => (h, w),
            (Some(h), None) => (h, h),
            (None, Some(w)) => (w, w),
            (None, None) => (1, 1),
        };
        let h = ih
            .checked_mul(id.unwrap_or(1))
            .ok_or_else(|| bad("id·ih overflows".into()))?;
        let dims = [mb.unwrap_or(1), ic, h, iw];
        crate::error::checked_product("bnorm problem", &dims)
            .map_err(|_| bad("sizes overflow".into()))?;
        Ok(BatchNormProblem { dims, eps, name })
    }

    /// The f32 tensor of the problem in `layout`.
    ///
    /// # Errors
    /// As [`TensorDesc::new`].
    pub fn tensor(&self, layout: crate::desc::Layout) -> Result<TensorDesc> {
        TensorDesc::new(DataType::F32, layout, self.dims)
    }
}

impl std::fmt::Display for BatchNormProblem {
    /// The canonical string: `mbNicCihHiwW`, then `eps` and the name when present.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [n, c, h, w] = self.dims;
        write!(f, "mb{n}ic{c}ih{h}iw{w}")?;
        if let Some(e) = self.eps {
            write!(f, "eps{e:e}")?;
        }
        if let Some(name) = &self.name {
            write!(f, "n\"{name}\"")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_merge_and_walk() {
        // NCHW, group = c: rows over n, runs of H·W.
        let st = [24, 12, 4, 1];
        let g = Groups::new([2, 2, 3, 4], [st], 1);
        assert_eq!((g.count, g.rows, g.len, g.inner), (2, [1, 2], 12, [1]));
        let mut seen = vec![];
        g.walk(1, 5, 20, |[o], n| seen.push((o, n)));
        assert_eq!(seen, [(12 + 5, 7), (24 + 12, 8)]);
        // Layer norm on NCHW with its parameters: one run per sample.
        let g = Groups::new([2, 2, 3, 4], [st, [0, 12, 4, 1]], 0);
        assert_eq!((g.rows, g.len, g.inner), ([1, 1], 24, [1, 1]));
    }

    #[test]
    fn epsilon_floor() {
        assert!(BatchNorm::new(1e-5).is_ok());
        assert!(BatchNorm::new(1e-5_f32 as f64).is_ok());
        assert!(BatchNorm::new(9e-6).is_err());
        assert!(BatchNorm::new(f64::NAN).is_err());
        assert!(LayerNorm::new(0.0).is_err());
        assert!(LayerNorm::new(1e-12).is_ok());
    }

    #[test]
    fn problem_strings_round_trip() {
        let p = BatchNormProblem::parse("mb8ic64ih56").unwrap();
        assert_eq!(p.dims, [8, 64, 56, 56]);
        assert_eq!(BatchNormProblem::parse(&p.to_string()).unwrap(), p);
        let p = BatchNormProblem::parse("ic16iw5eps2.5e-4_bn1").unwrap();
        assert_eq!(p.dims, [1, 16, 5, 5]);
        assert_eq!((p.eps, p.name.as_deref()), (Some(2.5e-4), Some("bn1")));
        assert_eq!(BatchNormProblem::parse(&p.to_string()).unwrap(), p);
        for bad in [
            "", "mb0ic3", "ic3ic4", "ic3xx2", "ic3eps-1", "ic3n\"a", "ic", "ic3epsx",
        ] {
            assert!(BatchNormProblem::parse(bad).is_err(), "{bad}");
        }
    }
}
