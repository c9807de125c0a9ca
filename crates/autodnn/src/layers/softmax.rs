//! Softmax and log-softmax, forward and backward (cudnnSoftmaxForward / Backward):
//! y = alpha · softmax(x) + beta · y over the channels of each (n, h, w)
//! ([`SoftmaxMode::Channel`]) or over all C·H·W elements of each image
//! ([`SoftmaxMode::Instance`]), on tensors of any layout and strides.
//!
//! - [`SoftmaxAlgorithm::Accurate`]: y = exp(x − max) / Σ exp(x − max) (cuDNN's ACCURATE;
//!   its FAST, which skips the max, is not offered).
//! - [`SoftmaxAlgorithm::Log`]: y = (x − max) − ln Σ exp(x − max).
//! - [`backward`] takes y and dy as cuDNN does: softmax dx = alpha · y ⊙ (dy − Σ dy·y) +
//!   beta · dx; log-softmax dx = alpha · (dy − exp(y) · Σ dy) + beta · dx.
//!
//! # Accuracy
//! Exponentials are `crate::vmath::exp` (2 ulp); every row sum (Σ exp, Σ dy·y, Σ dy) is
//! accumulated in f64, so the sum adds no error worth counting and the bounds are those of
//! f32 inputs pushed through a handful of roundings. With ε = 2^-23, d = |x − max| of the
//! element and L the row length, the tests (`tests/softmax.rs`) assert against the f64
//! reference, beside ε·(|beta · prior| + |result|) for the blend's roundings:
//! - softmax: relative error ≤ ε · (d/2 + ln(L)/2 + 8) (d/2: the rounding of x − max, which
//!   exp turns into a relative error; ln(L)/2 bounds the same through the sum, whose
//!   p-weighted mean of d is at most ln L); every row sums to 1 within ε · (ln(L) + 8);
//! - log-softmax: absolute error ≤ ε · |alpha| · (d + ln(L) + 4);
//! - softmax backward: absolute error ≤ ε · |alpha · y| · (2|dy| + 2|Σ dy·y|);
//! - log-softmax backward: absolute error ≤ ε · |alpha| · (|dy| + 4|exp(y) · Σ dy|);
//! - and everywhere 2^-125 · |alpha| · (1 + |Σ dy|) absolute, where an exponential or a
//!   product falls below f32's normal range (`vmath::exp` flushes those to 0).
//!
//! Results are the same bit for bit on any number of threads and on every instruction set:
//! a row of up to 256 elements is summed in 16 f64 lanes (index mod 16), a longer one over
//! fixed chunks of 16384 elements (each in 64 f64 lanes, by index mod 64), the chunk sums
//! added in order, whatever the threads; the max is exact. (The same
//! row may round differently in another layout: an NCHW channel softmax sums each position
//! in order, an NHWC one in lanes.)
//!
//! # Work
//! Memory-bound: x read three times (max, sum, write) from cache, y written once.
//! - Rows contiguous in every tensor (NHWC channel softmax, NCHW with H·W = 1, packed instance
//!   softmax): each row in three vectorised passes; blocks of rows per thread. Rows longer than
//!   16384 elements (a huge instance at batch 1) are split into those fixed chunks among the
//!   threads, in three phases (chunk maxima, chunk sums, writes).
//! - Channel softmax with contiguous positions (NCHW): blocks of up to 256 positions per thread,
//!   vectorised across the positions, with per-position running max and sum arrays while the
//!   channels are walked; softmax with beta = 0 writes each exponential into y as it sums it
//!   and scales y in place at the end (one exp per element instead of two, the same bits).
//! - Anything else (explicit strides that fit neither): each row gathered into per-thread
//!   scratch, computed as a contiguous row, scattered back.
//!
//! Rows of up to 256 elements are computed in a stack tile padded to whole vectors, their
//! exponentials computed once. The forward pass is bound by the exponentials (two per element
//! on the longer paths), not yet by memory: on one AVX-512 core about 4–9 GB/s (x read plus
//! y written) on 8x1000, 8x64x56x56 NCHW/NHWC, and about 2 GB/s on NHWC rows as short as 21
//! channels; the backward pass 5–20 GB/s. x and y may not be one buffer (no in-place call).

use super::{check_buffer, check_same_dims, run_items_with, Blend, Runs};
use crate::desc::{DataType, Layout, TensorDesc};
use crate::error::{Error, Result};
use crate::runtime::parallel::SharedOut;
use crate::runtime::ExecContext;
use crate::simd::multiversion;
use crate::vmath;

/// Which function: softmax or log-softmax (cudnnSoftmaxAlgorithm_t's ACCURATE and LOG).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SoftmaxAlgorithm {
    /// exp(x − max) / Σ exp(x − max): the max subtracted, so no exponential overflows.
    Accurate,
    /// Log-softmax: (x − max) − ln Σ exp(x − max).
    Log,
}

impl SoftmaxAlgorithm {
    /// Both algorithms.
    pub const ALL: [SoftmaxAlgorithm; 2] = [SoftmaxAlgorithm::Accurate, SoftmaxAlgorithm::Log];

    /// benchdnn's name: `softmax` or `logsoftmax`.
    pub fn name(self) -> &'static str {
        match self {
            SoftmaxAlgorithm::Accurate => "softmax",
            SoftmaxAlgorithm::Log => "logsoftmax",
        }
    }

    /// Parses benchdnn's `softmax` and `logsoftmax` (`--alg=` values, any case), and also
    /// `accurate`, `log_softmax` and `log`.
    ///
    /// ```
    /// use autodnn::layers::softmax::SoftmaxAlgorithm;
    /// assert_eq!(SoftmaxAlgorithm::parse("LOGSOFTMAX")?, SoftmaxAlgorithm::Log);
    /// assert_eq!(SoftmaxAlgorithm::parse("softmax")?, SoftmaxAlgorithm::Accurate);
    /// assert!(SoftmaxAlgorithm::parse("fast").is_err());
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `softmax.alg` for anything else.
    pub fn parse(s: &str) -> Result<SoftmaxAlgorithm> {
        match s.trim().to_ascii_lowercase().as_str() {
            "softmax" | "accurate" => Ok(SoftmaxAlgorithm::Accurate),
            "logsoftmax" | "log_softmax" | "log" => Ok(SoftmaxAlgorithm::Log),
            _ => Err(Error::bad(
                "softmax.alg",
                s,
                "expected softmax (accurate) or logsoftmax (log_softmax, log)",
            )),
        }
    }
}

/// Over which elements each softmax runs (cudnnSoftmaxMode_t).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SoftmaxMode {
    /// Over the C channels, for each (n, h, w) (benchdnn's `--axis=1`).
    Channel,
    /// Over all C·H·W elements, for each n.
    Instance,
}

impl SoftmaxMode {
    /// Both modes.
    pub const ALL: [SoftmaxMode; 2] = [SoftmaxMode::Channel, SoftmaxMode::Instance];

    /// `channel` or `instance`.
    pub fn name(self) -> &'static str {
        match self {
            SoftmaxMode::Channel => "channel",
            SoftmaxMode::Instance => "instance",
        }
    }

    /// Parses `channel` or `instance` (any case); benchdnn's `axis=1` (or `1`) is `channel`,
    /// the only axis benchdnn's 4-D softmax shares with cuDNN's modes.
    ///
    /// ```
    /// use autodnn::layers::softmax::SoftmaxMode;
    /// assert_eq!(SoftmaxMode::parse("instance")?, SoftmaxMode::Instance);
    /// assert_eq!(SoftmaxMode::parse("axis=1")?, SoftmaxMode::Channel);
    /// assert!(SoftmaxMode::parse("axis=2").is_err());
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `softmax.mode` for anything else.
    pub fn parse(s: &str) -> Result<SoftmaxMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "channel" | "axis=1" | "1" => Ok(SoftmaxMode::Channel),
            "instance" => Ok(SoftmaxMode::Instance),
            _ => Err(Error::bad(
                "softmax.mode",
                s,
                "expected channel (axis=1) or instance",
            )),
        }
    }
}

/// A softmax problem written as benchdnn's softmax driver writes it:
/// `[--alg=softmax|logsoftmax] [--axis=1] [--mode=channel|instance] N[xC[xH[xW]]]`, options
/// in any order, separated by spaces (defaults: softmax, channel).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SoftmaxSpec {
    /// Softmax or log-softmax.
    pub algo: SoftmaxAlgorithm,
    /// Over the channels or the instance.
    pub mode: SoftmaxMode,
    /// (N, C, H, W).
    pub dims: [usize; 4],
}

impl SoftmaxSpec {
    /// Parses a problem string.
    ///
    /// ```
    /// use autodnn::layers::softmax::{SoftmaxAlgorithm, SoftmaxMode, SoftmaxSpec};
    /// let p = SoftmaxSpec::parse("--alg=logsoftmax --axis=1 8x1000")?;
    /// assert_eq!(p.algo, SoftmaxAlgorithm::Log);
    /// assert_eq!(p.mode, SoftmaxMode::Channel);
    /// assert_eq!(p.dims, [8, 1000, 1, 1]);
    /// let q = SoftmaxSpec::parse("--mode=instance 2x21x64x64")?;
    /// assert_eq!((q.algo, q.mode, q.dims), (SoftmaxAlgorithm::Accurate, SoftmaxMode::Instance, [2, 21, 64, 64]));
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Parse`] for an unknown option or value, a missing or repeated dimension string,
    /// or bad dimensions (see [`super::parse_dims`]).
    pub fn parse(s: &str) -> Result<SoftmaxSpec> {
        let bad = |reason: String| Error::Parse {
            input: s.to_string(),
            reason,
        };
        let mut algo = SoftmaxAlgorithm::Accurate;
        let mut mode = SoftmaxMode::Channel;
        let mut dims = None;
        for tok in s.split_whitespace() {
            if let Some(v) = tok.strip_prefix("--alg=") {
                algo = SoftmaxAlgorithm::parse(v).map_err(|e| bad(e.to_string()))?;
            } else if let Some(v) = tok.strip_prefix("--axis=") {
                if v.trim() != "1" {
                    return Err(bad(format!(
                        "axis {v}: only axis 1 (the channels) is supported; --mode=instance \
                         reduces over C·H·W"
                    )));
                }
                mode = SoftmaxMode::Channel;
            } else if let Some(v) = tok.strip_prefix("--mode=") {
                mode = SoftmaxMode::parse(v).map_err(|e| bad(e.to_string()))?;
            } else if tok.starts_with("--") {
                return Err(bad(format!("unknown option {tok}")));
            } else if dims.is_some() {
                return Err(bad(format!("a second dimension string {tok}")));
            } else {
                dims = Some(super::parse_dims(tok)?);
            }
        }
        let dims = dims.ok_or_else(|| bad("no dimensions N[xC[xH[xW]]]".into()))?;
        Ok(SoftmaxSpec { algo, mode, dims })
    }

    /// The packed f32 tensor of these dimensions in `layout` (x, y, dy and dx alike).
    ///
    /// # Errors
    /// As [`TensorDesc::new`].
    pub fn desc(&self, layout: Layout) -> Result<TensorDesc> {
        TensorDesc::new(DataType::F32, layout, self.dims)
    }
}

/// What is computed: `a` is x (forward) or y (backward), `b` is dy (backward; forward passes
/// x again, unread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Forward(SoftmaxAlgorithm),
    Backward(SoftmaxAlgorithm),
}

impl Kind {
    #[inline(always)]
    fn needs_max(self) -> bool {
        matches!(self, Kind::Forward(_))
    }
}

/// Lanes of a row's sums: element i of a chunk goes to lane i mod 64 (vertical adds, which
/// vectorise at any width), and the lanes are folded by halving; so the sum does not depend
/// on the instruction set.
const LANES: usize = 64;
/// Exponentials computed per tile (a stack buffer) before they are summed.
const TILE: usize = 256;
/// A row's sums are taken over fixed chunks of this many elements, added in order: the
/// partition that long rows are split by among threads, whatever the thread count.
const ROW_CHUNK: usize = 1 << 14;
/// Most positions per block of the NCHW channel path.
const BLOCK: usize = 256;

/// The largest element (exact; NaN ignored here, and so spread through the sum later).
#[inline(always)]
fn max_of(a: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    for c in a.chunks(LANES) {
        for (m, &v) in acc.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    let mut v = [f32::NEG_INFINITY; 8];
    for g in acc.chunks_exact(8) {
        for (m, &x) in v.iter_mut().zip(g) {
            *m = if x > *m { x } else { *m };
        }
    }
    v.into_iter()
        .fold(f32::NEG_INFINITY, |m, x| if x > m { x } else { m })
}

/// The lanes added in a fixed order: eight groups of eight into eight sums (vertical), then
/// a tree.
#[inline(always)]
fn fold(acc: &[f64; LANES]) -> f64 {
    let mut v = [0.0f64; 8];
    for g in acc.chunks_exact(8) {
        for (s, &x) in v.iter_mut().zip(g) {
            *s += x;
        }
    }
    ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]))
}

/// Adds `t` into the lanes (`t` starts at a multiple of [`LANES`] within its chunk).
#[inline(always)]
fn add_lanes(acc: &mut [f64; LANES], t: &[f32]) {
    for c in t.chunks(LANES) {
        for (s, &v) in acc.iter_mut().zip(c) {
            *s += v as f64;
        }
    }
}

/// The sum of one chunk (at most [`ROW_CHUNK`] elements): Σ exp(a − m) (forward), Σ a·b
/// (softmax backward: y·dy, products exact in f64), Σ b (log-softmax backward).
#[inline(always)]
fn chunk_sum(kind: Kind, a: &[f32], b: &[f32], m: f32) -> f64 {
    let mut acc = [0.0f64; LANES];
    match kind {
        Kind::Forward(_) => {
            let mut buf = [0.0f32; TILE];
            for at in a.chunks(TILE) {
                let t = &mut buf[..at.len()];
                for (o, &v) in t.iter_mut().zip(at) {
                    *o = vmath::exp(v - m);
                }
                add_lanes(&mut acc, t);
            }
        }
        Kind::Backward(SoftmaxAlgorithm::Accurate) => {
            let b = &b[..a.len()];
            for (ca, cb) in a.chunks(LANES).zip(b.chunks(LANES)) {
                for ((s, &y), &d) in acc.iter_mut().zip(ca).zip(cb) {
                    *s += y as f64 * d as f64;
                }
            }
        }
        Kind::Backward(SoftmaxAlgorithm::Log) => add_lanes(&mut acc, &b[..a.len()]),
    }
    fold(&acc)
}

/// The row's coefficient from its sum: alpha / s (softmax; alpha folded in), ln s
/// (log-softmax), Σ dy·y and Σ dy (backward).
#[inline(always)]
fn coef(kind: Kind, alpha: f32, s: f64) -> f32 {
    match kind {
        Kind::Forward(SoftmaxAlgorithm::Accurate) => (alpha as f64 / s) as f32,
        Kind::Forward(SoftmaxAlgorithm::Log) => s.ln() as f32,
        Kind::Backward(_) => s as f32,
    }
}

/// out = (blended) f(elements), with no branch on beta inside the loop.
macro_rules! blend_loop {
    ($be:expr, $out:expr, $iter:expr, |$v:pat_param| $val:expr) => {{
        let be: f32 = $be;
        if be == 0.0 {
            for (o, $v) in $out.iter_mut().zip($iter) {
                *o = $val;
            }
        } else {
            for (o, $v) in $out.iter_mut().zip($iter) {
                *o = $val + be * *o;
            }
        }
    }};
}

/// Writes one row (or chunk of a row) with its max `m` and coefficient `c`.
#[inline(always)]
fn write_row(kind: Kind, blend: Blend, a: &[f32], b: &[f32], m: f32, c: f32, out: &mut [f32]) {
    let (al, be) = (blend.alpha, blend.beta);
    let a = &a[..out.len()];
    match kind {
        Kind::Forward(SoftmaxAlgorithm::Accurate) => {
            blend_loop!(be, out, a, |&x| vmath::exp(x - m) * c)
        }
        Kind::Forward(SoftmaxAlgorithm::Log) => blend_loop!(be, out, a, |&x| al * ((x - m) - c)),
        Kind::Backward(SoftmaxAlgorithm::Accurate) => {
            let b = &b[..out.len()];
            blend_loop!(be, out, a.iter().zip(b), |(&y, &d)| al * (y * (d - c)))
        }
        Kind::Backward(SoftmaxAlgorithm::Log) => {
            let b = &b[..out.len()];
            blend_loop!(be, out, a.iter().zip(b), |(&y, &d)| al
                * (d - vmath::exp(y) * c))
        }
    }
}

/// Sixteen f64 lanes of a tile whose length is a multiple of 16, added in a fixed order.
#[inline(always)]
fn sum16(t: &[f32]) -> f64 {
    let mut acc = [0.0f64; 16];
    for g in t.chunks_exact(16) {
        for (s, &v) in acc.iter_mut().zip(g) {
            *s += v as f64;
        }
    }
    let mut h = [0.0f64; 8];
    for (i, o) in h.iter_mut().enumerate() {
        *o = acc[i] + acc[i + 8];
    }
    ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]))
}

/// A row of at most [`TILE`] elements, computed in tiles padded to a multiple of 16 so that
/// every loop runs whole vectors of a known length however short the row (x padded with
/// -inf, whose exp adds 0; dy and y·dy with 0), its exponentials computed once. Its sum is
/// taken in 16 f64 lanes (index mod 16), a fixed order.
#[inline(always)]
fn short_row(kind: Kind, blend: Blend, a: &[f32], b: &[f32], out: &mut [f32]) {
    let len = out.len();
    let padded = len.next_multiple_of(16);
    let (al, be) = (blend.alpha, blend.beta);
    let a = &a[..len];
    let mut tb = [0.0f32; TILE];
    match kind {
        Kind::Forward(algo) => {
            tb[..len].copy_from_slice(a);
            tb[len..padded].fill(f32::NEG_INFINITY);
            let t = &mut tb[..padded];
            let mut mx = [f32::NEG_INFINITY; 16];
            for g in t.chunks_exact(16) {
                for (mm, &v) in mx.iter_mut().zip(g) {
                    *mm = if v > *mm { v } else { *mm };
                }
            }
            let m = mx
                .into_iter()
                .fold(f32::NEG_INFINITY, |m, v| if v > m { v } else { m });
            for g in t.chunks_exact_mut(16) {
                for v in g {
                    *v = vmath::exp(*v - m);
                }
            }
            let c = coef(kind, al, sum16(t));
            match algo {
                SoftmaxAlgorithm::Accurate => blend_loop!(be, out, &t[..len], |&e| e * c),
                SoftmaxAlgorithm::Log => blend_loop!(be, out, a, |&x| al * ((x - m) - c)),
            }
        }
        Kind::Backward(algo) => {
            let b = &b[..len];
            let t = &mut tb[..padded];
            match algo {
                SoftmaxAlgorithm::Accurate => {
                    // y·dy in f32 would round: the products in f64, 16 lanes.
                    let mut acc = [0.0f64; 16];
                    let mut ta = [0.0f32; TILE];
                    ta[..len].copy_from_slice(a);
                    t[..len].copy_from_slice(b);
                    for (ga, gb) in ta[..padded].chunks_exact(16).zip(t.chunks_exact(16)) {
                        for ((s, &y), &d) in acc.iter_mut().zip(ga).zip(gb) {
                            *s += y as f64 * d as f64;
                        }
                    }
                    let mut h = [0.0f64; 8];
                    for (i, o) in h.iter_mut().enumerate() {
                        *o = acc[i] + acc[i + 8];
                    }
                    let s = ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
                    write_row(kind, blend, a, b, 0.0, coef(kind, al, s), out);
                }
                SoftmaxAlgorithm::Log => {
                    t[..len].copy_from_slice(b);
                    let c = coef(kind, al, sum16(t));
                    t[..len].copy_from_slice(a);
                    for g in t.chunks_exact_mut(16) {
                        for v in g {
                            *v = vmath::exp(*v);
                        }
                    }
                    blend_loop!(be, out, t[..len].iter().zip(b), |(&e, &d)| al * (d - e * c))
                }
            }
        }
    }
}

/// One whole contiguous row: max, sum over fixed chunks in order, write.
#[inline(always)]
fn row(kind: Kind, blend: Blend, a: &[f32], b: &[f32], out: &mut [f32]) {
    if out.len() <= TILE {
        return short_row(kind, blend, a, b, out);
    }
    let a = &a[..out.len()];
    let m = if kind.needs_max() { max_of(a) } else { 0.0 };
    let mut s = 0.0f64;
    for (i, ac) in a.chunks(ROW_CHUNK).enumerate() {
        let bc = if kind.needs_max() {
            ac
        } else {
            &b[i * ROW_CHUNK..i * ROW_CHUNK + ac.len()]
        };
        s += chunk_sum(kind, ac, bc, m);
    }
    write_row(kind, blend, a, b, m, coef(kind, blend.alpha, s), out);
}

/// Flat row index → the row's first element in each of the three tensors (out, a, b).
struct RowWalk {
    runs: Runs<3>,
}

impl RowWalk {
    fn total(&self) -> usize {
        self.runs.count() * self.runs.len
    }

    #[inline]
    fn at(&self, q: usize) -> [usize; 3] {
        let (r, j) = (q / self.runs.len, q % self.runs.len);
        let s = self.runs.start(r);
        std::array::from_fn(|t| s[t] + j * self.runs.inner[t])
    }
}

multiversion! {
    /// Contiguous rows `first .. first + count` of length `len`.
    fn rows_kernel(kind: Kind, blend: Blend, a: &[f32], b: &[f32], out: &SharedOut<'_>, walk: &RowWalk, first: usize, count: usize, len: usize) {
        for q in first..first + count {
            let [oo, oa, ob] = walk.at(q);
            let bs = if kind.needs_max() { &a[oa..oa + len] } else { &b[ob..ob + len] };
            // SAFETY: row q's elements belong to this work item alone (rows are distinct
            // coordinates of a descriptor whose elements do not alias).
            let dst = unsafe { out.slice_mut(oo, len) };
            row(kind, blend, &a[oa..oa + len], bs, dst);
        }
    }
}

multiversion! {
    /// One contiguous row, all of it (the generic path's gathered rows).
    fn row_kernel(kind: Kind, blend: Blend, a: &[f32], b: &[f32], out: &mut [f32]) {
        row(kind, blend, a, b, out)
    }
}

multiversion! {
    /// The max of one chunk.
    fn max_kernel(a: &[f32]) -> f32 {
        max_of(a)
    }
}

multiversion! {
    /// The sum of one chunk.
    fn sum_kernel(kind: Kind, a: &[f32], b: &[f32], m: f32) -> f64 {
        chunk_sum(kind, a, b, m)
    }
}

multiversion! {
    /// Writes one chunk of a row.
    fn write_kernel(kind: Kind, blend: Blend, a: &[f32], b: &[f32], m: f32, c: f32, out: &mut [f32]) {
        write_row(kind, blend, a, b, m, c, out)
    }
}

multiversion! {
    /// A block of `np` contiguous positions across `ch` channels, channel k of tensor t at
    /// `k * stride_t` from the block's start (`a`, `b` start there; `oo` in `out`).
    fn block_kernel(kind: Kind, blend: Blend, a: &[f32], sa: usize, b: &[f32], sb: usize, out: &SharedOut<'_>, oo: usize, so: usize, ch: usize, np: usize) {
        let (al, be) = (blend.alpha, blend.beta);
        let mut mb = [0.0f32; BLOCK];
        let m = &mut mb[..np];
        if kind.needs_max() {
            m.fill(f32::NEG_INFINITY);
            for k in 0..ch {
                for (mm, &v) in m.iter_mut().zip(&a[k * sa..k * sa + np]) {
                    *mm = if v > *mm { v } else { *mm };
                }
            }
        }
        let mut sbuf = [0.0f64; BLOCK];
        let s = &mut sbuf[..np];
        // Softmax onto an output it does not blend: each exponential is written once, where
        // the sum reads it, and scaled there at the end (the same values, one exp each).
        let staged = kind == Kind::Forward(SoftmaxAlgorithm::Accurate) && be == 0.0;
        match kind {
            Kind::Forward(_) if staged => {
                for k in 0..ch {
                    // SAFETY: channel k of this block's positions belongs to this item alone.
                    let t = unsafe { out.slice_mut(oo + k * so, np) };
                    for ((o, &v), &mm) in t.iter_mut().zip(&a[k * sa..k * sa + np]).zip(&*m) {
                        *o = vmath::exp(v - mm);
                    }
                    for (acc, &v) in s.iter_mut().zip(&*t) {
                        *acc += v as f64;
                    }
                }
            }
            Kind::Forward(_) => {
                let mut tb = [0.0f32; BLOCK];
                let t = &mut tb[..np];
                for k in 0..ch {
                    for ((o, &v), &mm) in t.iter_mut().zip(&a[k * sa..k * sa + np]).zip(&*m) {
                        *o = vmath::exp(v - mm);
                    }
                    for (acc, &v) in s.iter_mut().zip(&*t) {
                        *acc += v as f64;
                    }
                }
            }
            Kind::Backward(SoftmaxAlgorithm::Accurate) => {
                for k in 0..ch {
                    let ys = &a[k * sa..k * sa + np];
                    let ds = &b[k * sb..k * sb + np];
                    for ((acc, &y), &d) in s.iter_mut().zip(ys).zip(ds) {
                        *acc += y as f64 * d as f64;
                    }
                }
            }
            Kind::Backward(SoftmaxAlgorithm::Log) => {
                for k in 0..ch {
                    for (acc, &d) in s.iter_mut().zip(&b[k * sb..k * sb + np]) {
                        *acc += d as f64;
                    }
                }
            }
        }
        let mut cb = [0.0f32; BLOCK];
        let c = &mut cb[..np];
        for (o, &v) in c.iter_mut().zip(&*s) {
            *o = coef(kind, al, v);
        }
        let (m, c) = (&*m, &*c);
        for k in 0..ch {
            let xs = &a[k * sa..k * sa + np];
            // SAFETY: these np elements (channel k of this block's positions) belong to this
            // work item alone.
            let dst = unsafe { out.slice_mut(oo + k * so, np) };
            match kind {
                Kind::Forward(SoftmaxAlgorithm::Accurate) if staged => {
                    for (o, &cc) in dst.iter_mut().zip(c) {
                        *o *= cc;
                    }
                }
                Kind::Forward(SoftmaxAlgorithm::Accurate) => blend_loop!(
                    be, dst, xs.iter().zip(m).zip(c), |((&x, &mm), &cc)| vmath::exp(x - mm) * cc
                ),
                Kind::Forward(SoftmaxAlgorithm::Log) => blend_loop!(
                    be, dst, xs.iter().zip(m).zip(c), |((&x, &mm), &cc)| al * ((x - mm) - cc)
                ),
                Kind::Backward(SoftmaxAlgorithm::Accurate) => {
                    let ds = &b[k * sb..k * sb + np];
                    blend_loop!(be, dst, xs.iter().zip(ds).zip(c), |((&y, &d), &cc)| al
                        * (y * (d - cc)))
                }
                Kind::Backward(SoftmaxAlgorithm::Log) => {
                    let ds = &b[k * sb..k * sb + np];
                    blend_loop!(be, dst, xs.iter().zip(ds).zip(c), |((&y, &d), &cc)| al
                        * (d - vmath::exp(y) * cc))
                }
            }
        }
    }
}

/// The shared driver: `out` (y or dx) from `a` (x or y) and `b` (x again, or dy), all of
/// the same dimensions (checked by the caller).
#[allow(clippy::too_many_arguments)]
fn run(
    ctx: &ExecContext<'_>,
    kind: Kind,
    mode: SoftmaxMode,
    blend: Blend,
    od: &TensorDesc,
    out: &mut [f32],
    ad: &TensorDesc,
    a: &[f32],
    bd: &TensorDesc,
    b: &[f32],
) -> Result<()> {
    let [n, c, h, w] = od.dims();
    let strides = [od.strides(), ad.strides(), bd.strides()];
    let elements = od.elements();
    let (row_dims, inner_dims) = match mode {
        SoftmaxMode::Channel => ([n, 1, h, w], [1, c, 1, 1]),
        SoftmaxMode::Instance => ([n, 1, 1, 1], [1, c, h, w]),
    };
    let len: usize = inner_dims.iter().product();
    let inner = Runs::new(inner_dims, strides);
    let walk = RowWalk {
        runs: Runs::new(row_dims, strides),
    };
    let rows = walk.total();
    let features = ctx.features();

    if inner.count() == 1 && inner.contiguous() {
        // Every row contiguous, in the same element order in every tensor.
        if len <= ROW_CHUNK {
            let per_item = (ROW_CHUNK / len).max(1);
            let items = rows.div_ceil(per_item);
            let shared = SharedOut::new(out);
            return run_items_with(
                ctx,
                items,
                elements,
                || Ok(()),
                |_, i| {
                    let first = i * per_item;
                    let count = per_item.min(rows - first);
                    rows_kernel(
                        features, kind, blend, a, b, &shared, &walk, first, count, len,
                    );
                },
            );
        }
        return long_rows(ctx, kind, blend, out, a, b, &walk, len);
    }

    if mode == SoftmaxMode::Channel && walk.runs.contiguous() {
        // Positions contiguous (NCHW-like): blocks of positions, vectorised across them.
        let [so, sa, sb] = [strides[0][1], strides[1][1], strides[2][1]];
        let run_len = walk.runs.len;
        let bsz = (ROW_CHUNK / c).clamp(16, BLOCK) / 16 * 16;
        let per_run = run_len.div_ceil(bsz);
        let items = walk.runs.count() * per_run;
        let shared = SharedOut::new(out);
        return run_items_with(
            ctx,
            items,
            elements,
            || Ok(()),
            |_, i| {
                let (r, p) = (i / per_run, i % per_run);
                let p0 = p * bsz;
                let np = bsz.min(run_len - p0);
                let [oo, oa, ob] = walk.runs.start(r);
                let bs = if kind.needs_max() {
                    &a[oa + p0..]
                } else {
                    &b[ob + p0..]
                };
                let sbb = if kind.needs_max() { sa } else { sb };
                block_kernel(
                    features,
                    kind,
                    blend,
                    &a[oa + p0..],
                    sa,
                    bs,
                    sbb,
                    &shared,
                    oo + p0,
                    so,
                    c,
                    np,
                );
            },
        );
    }

    // Generic: gather each row (in the order of `inner`'s runs), compute, scatter.
    let shared = SharedOut::new(out);
    let reads_b = !kind.needs_max();
    run_items_with(
        ctx,
        rows,
        elements,
        || {
            let ra = crate::alloc::try_vec(len, 0.0f32, "softmax row scratch")?;
            let rb = crate::alloc::try_vec(
                if reads_b { len } else { 0 },
                0.0f32,
                "softmax row scratch",
            )?;
            let ro = crate::alloc::try_vec(len, 0.0f32, "softmax row scratch")?;
            Ok((ra, rb, ro))
        },
        |(ra, rb, ro), q| {
            let base = walk.at(q);
            let mut i = 0;
            for r in 0..inner.count() {
                let s = inner.start(r);
                for j in 0..inner.len {
                    let at: [usize; 3] =
                        std::array::from_fn(|t| base[t] + s[t] + j * inner.inner[t]);
                    ra[i] = a[at[1]];
                    if reads_b {
                        rb[i] = b[at[2]];
                    }
                    if blend.reads_output() {
                        // SAFETY: row q's elements belong to this work item alone.
                        ro[i] = unsafe { shared.read(at[0]) };
                    }
                    i += 1;
                }
            }
            let (ra, rb): (&[f32], &[f32]) = (ra, rb);
            let bs = if reads_b { rb } else { ra };
            row_kernel(features, kind, blend, ra, bs, ro);
            let mut i = 0;
            for r in 0..inner.count() {
                let s = inner.start(r);
                for j in 0..inner.len {
                    let at = base[0] + s[0] + j * inner.inner[0];
                    // SAFETY: as above.
                    unsafe { shared.write(at, ro[i]) };
                    i += 1;
                }
            }
        },
    )
}

/// Contiguous rows longer than [`ROW_CHUNK`]: the chunks' maxima, then their sums, then the
/// writes, each phase split among the threads by chunk. The same chunks and order of
/// addition as [`row`], so the same bits as a short row's path would give.
#[allow(clippy::too_many_arguments)]
fn long_rows(
    ctx: &ExecContext<'_>,
    kind: Kind,
    blend: Blend,
    out: &mut [f32],
    a: &[f32],
    b: &[f32],
    walk: &RowWalk,
    len: usize,
) -> Result<()> {
    let rows = walk.total();
    let per_row = len.div_ceil(ROW_CHUNK);
    let items = rows
        .checked_mul(per_row)
        .ok_or_else(|| Error::overflow("softmax chunks", "rows times chunks"))?;
    let elements = rows.saturating_mul(len);
    let features = ctx.features();
    let chunk = |i: usize| {
        let (q, k) = (i / per_row, i % per_row);
        let first = k * ROW_CHUNK;
        (q, first, ROW_CHUNK.min(len - first))
    };
    // The second input's chunk: dy (backward), x again (forward).
    let b_of = |ob: usize, oa: usize, first: usize, cl: usize| {
        let (src, o) = if kind.needs_max() { (a, oa) } else { (b, ob) };
        &src[o + first..o + first + cl]
    };

    let mut maxes = crate::alloc::try_vec(rows, 0.0f32, "softmax row maxima")?;
    if kind.needs_max() {
        let mut cm = crate::alloc::try_vec(items, 0.0f32, "softmax chunk maxima")?;
        let shared = SharedOut::new(&mut cm);
        run_items_with(
            ctx,
            items,
            elements,
            || Ok(()),
            |_, i| {
                let (q, first, cl) = chunk(i);
                let [_, oa, _] = walk.at(q);
                let v = max_kernel(features, &a[oa + first..oa + first + cl]);
                // SAFETY: item i writes element i alone.
                unsafe { shared.write(i, v) };
            },
        )?;
        for (q, m) in maxes.iter_mut().enumerate() {
            *m = max_of(&cm[q * per_row..(q + 1) * per_row]);
        }
    }
    let mut cs = crate::alloc::try_vec(items, 0.0f64, "softmax chunk sums")?;
    {
        let shared = SharedOut::new(&mut cs);
        let maxes = &maxes;
        run_items_with(
            ctx,
            items,
            elements,
            || Ok(()),
            |_, i| {
                let (q, first, cl) = chunk(i);
                let [_, oa, ob] = walk.at(q);
                let v = sum_kernel(
                    features,
                    kind,
                    &a[oa + first..oa + first + cl],
                    b_of(ob, oa, first, cl),
                    maxes[q],
                );
                // SAFETY: item i writes element i alone.
                unsafe { shared.write(i, v) };
            },
        )?;
    }
    let mut coefs = crate::alloc::try_vec(rows, 0.0f32, "softmax row coefficients")?;
    for (q, c) in coefs.iter_mut().enumerate() {
        let mut s = 0.0f64;
        for &v in &cs[q * per_row..(q + 1) * per_row] {
            s += v;
        }
        *c = coef(kind, blend.alpha, s);
    }
    let shared = SharedOut::new(out);
    run_items_with(
        ctx,
        items,
        elements,
        || Ok(()),
        |_, i| {
            let (q, first, cl) = chunk(i);
            let [oo, oa, ob] = walk.at(q);
            // SAFETY: chunk i of row q belongs to this item alone.
            let dst = unsafe { shared.slice_mut(oo + first, cl) };
            write_kernel(
                features,
                kind,
                blend,
                &a[oa + first..oa + first + cl],
                b_of(ob, oa, first, cl),
                maxes[q],
                coefs[q],
                dst,
            );
        },
    )
}

/// y = alpha · softmax(x) + beta · y (or log-softmax), over the channels or the instance
/// (cudnnSoftmaxForward); x and y of the same dimensions, any strides each.
///
/// # Errors
/// [`Error::BadParam`] naming `y` for other dimensions, `alpha`/`beta` when not finite;
/// [`Error::BufferTooSmall`] naming `x` or `y`; [`Error::Unsupported`] for types other than
/// f32; [`Error::OutOfMemory`] when the scratch of strided rows cannot be allocated.
///
/// # Examples
/// ```
/// use autodnn::layers::softmax::{self, SoftmaxAlgorithm, SoftmaxMode};
/// use autodnn::{layers::Blend, DataType, Handle, Layout, TensorDesc};
/// let h = Handle::with_threads(1)?;
/// let d = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 1, 1])?;
/// let x = [0.0, 0.0];
/// let mut y = [0.0; 2];
/// h.softmax_forward(SoftmaxAlgorithm::Accurate, SoftmaxMode::Channel, Blend::default(),
///                   &d, &x, &d, &mut y)?;
/// assert_eq!(y, [0.5, 0.5]);
/// h.softmax_forward(SoftmaxAlgorithm::Log, SoftmaxMode::Channel, Blend::default(),
///                   &d, &x, &d, &mut y)?;
/// assert_eq!(y, [-std::f32::consts::LN_2; 2]);
/// # let _ = softmax::forward;
/// # Ok::<(), autodnn::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn forward(
    ctx: &ExecContext<'_>,
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &mut [f32],
) -> Result<()> {
    blend.check()?;
    check_same_dims("y", x_desc, y_desc)?;
    check_buffer("x", x_desc, x.len())?;
    check_buffer("y", y_desc, y.len())?;
    run(
        ctx,
        Kind::Forward(algo),
        mode,
        blend,
        y_desc,
        y,
        x_desc,
        x,
        x_desc,
        x,
    )
}

/// dx = alpha · y ⊙ (dy − Σ dy·y) + beta · dx (softmax) or
/// dx = alpha · (dy − exp(y) · Σ dy) + beta · dx (log-softmax), the sums over the channels or
/// the instance (cudnnSoftmaxBackward: y is the forward's output). y, dy and dx of the same
/// dimensions, any strides each.
///
/// # Errors
/// As [`forward`], naming `dy` and `dx` (dimensions and buffers) and `y` (buffer).
#[allow(clippy::too_many_arguments)]
pub fn backward(
    ctx: &ExecContext<'_>,
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    blend: Blend,
    y_desc: &TensorDesc,
    y: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    dx_desc: &TensorDesc,
    dx: &mut [f32],
) -> Result<()> {
    blend.check()?;
    check_same_dims("dy", y_desc, dy_desc)?;
    check_same_dims("dx", y_desc, dx_desc)?;
    check_buffer("y", y_desc, y.len())?;
    check_buffer("dy", dy_desc, dy.len())?;
    check_buffer("dx", dx_desc, dx.len())?;
    run(
        ctx,
        Kind::Backward(algo),
        mode,
        blend,
        dx_desc,
        dx,
        y_desc,
        y,
        dy_desc,
        dy,
    )
}
