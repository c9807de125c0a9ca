//! The rest of a network's operators, forward and backward, beside convolution and GEMM:
//! cuDNN's menu of pooling, activations, softmax, normalization, tensor operations and layout
//! transforms, so that a whole network runs through autodnn alone.
//!
//! Each operator is one file, with its descriptor (validated when made, errors naming the
//! field), its forward and backward functions on an [`ExecContext`] and f32 tensors described
//! by [`TensorDesc`]s (any layout, explicit strides), and cuDNN's blending of the output:
//! y = alpha · op(x) + beta · y ([`Blend`]; beta = 0 never reads y, so NaN there is
//! ignored). The f64 references are in [`crate::reference`]; the [`crate::Handle`] verbs
//! (`handle.pooling_forward(...)`, ...) are thin wrappers that take the handle's threads and
//! instruction set.
//!
//! These operators are memory-bound: their loops are plain Rust, written once and compiled
//! per instruction set by `simd::multiversion` (AVX-512, AVX2 + FMA, portable), with the
//! exponentials of `crate::vmath` vectorising inside them. Work is split among the handle's
//! threads by runs of elements ([`Runs`]), channels or rows, each thread writing elements no
//! other thread touches; reductions sum in an order that does not depend on the thread count,
//! so every result is the same bit for bit on 1 or more threads.
//!
//! - [`activation`]: relu, leaky relu, clip (relu6), elu, sigmoid, tanh, gelu (erf and tanh
//!   forms), silu, hardswish, forward and backward, in place allowed; the same
//!   [`crate::Activation`] the convolution epilogues apply.
//! - [`pool`]: max and average pooling (padding included or excluded), global average.
//! - [`softmax`]: softmax and log-softmax over the channels or the whole instance.
//! - [`norm`]: batch normalization (inference, training, backward), layer normalization, and
//!   folding an inference batch norm into a convolution's weights and bias.
//! - [`tensor_ops`]: bias add with broadcasting, elementwise op-tensor, reductions.
//! - [`transform`]: layout transforms (any strides to any strides).

pub mod activation;
pub mod norm;
pub mod pool;
pub mod softmax;
pub mod tensor_ops;
pub mod transform;

use crate::desc::TensorDesc;
use crate::error::{Error, Result};
use crate::runtime::parallel::SharedOut;
use crate::runtime::ExecContext;

/// cuDNN's output blending: y = alpha · result + beta · y.
///
/// ```
/// use autodnn::layers::Blend;
/// let b = Blend::new(2.0, 0.5);
/// assert_eq!(b.apply(3.0, 4.0), 8.0);
/// // beta = 0 never reads the prior output: NaN there is ignored.
/// assert_eq!(Blend::default().apply(3.0, f32::NAN), 3.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Blend {
    /// Scale of the operator's result.
    pub alpha: f32,
    /// Scale of the prior output (0: not read).
    pub beta: f32,
}

impl Default for Blend {
    /// alpha 1, beta 0: the output is overwritten.
    fn default() -> Blend {
        Blend {
            alpha: 1.0,
            beta: 0.0,
        }
    }
}

impl Blend {
    /// y = alpha · result + beta · y.
    pub fn new(alpha: f32, beta: f32) -> Blend {
        Blend { alpha, beta }
    }

    /// Whether the prior output is read.
    #[inline(always)]
    pub fn reads_output(&self) -> bool {
        self.beta != 0.0
    }

    /// alpha · v + beta · prior (prior unread when beta = 0).
    #[inline(always)]
    pub fn apply(&self, v: f32, prior: f32) -> f32 {
        if self.beta == 0.0 {
            self.alpha * v
        } else {
            self.alpha * v + self.beta * prior
        }
    }

    /// The same in f64 (references).
    pub fn apply_f64(&self, v: f64, prior: f64) -> f64 {
        if self.beta == 0.0 {
            self.alpha as f64 * v
        } else {
            self.alpha as f64 * v + self.beta as f64 * prior
        }
    }

    /// alpha and beta must be finite.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `alpha` or `beta`.
    pub fn check(&self) -> Result<()> {
        if !self.alpha.is_finite() {
            return Err(Error::bad("alpha", self.alpha, "must be finite"));
        }
        if !self.beta.is_finite() {
            return Err(Error::bad("beta", self.beta, "must be finite"));
        }
        Ok(())
    }
}

/// Dimensions written as benchdnn's eltwise, softmax and binary drivers write them:
/// `N[xC[xH[xW]]]` (missing trailing dimensions are 1; `x` separates, as in `8x64x56x56`).
///
/// ```
/// use autodnn::layers::parse_dims;
/// assert_eq!(parse_dims("8x64x56x56")?, [8, 64, 56, 56]);
/// assert_eq!(parse_dims("8x1000")?, [8, 1000, 1, 1]);
/// assert!(parse_dims("8x0").is_err());
/// # Ok::<(), autodnn::Error>(())
/// ```
///
/// # Errors
/// [`Error::Parse`] for anything else (empty, zero or non-numeric dimensions, more than four).
pub fn parse_dims(s: &str) -> Result<[usize; 4]> {
    let bad = |reason: &str| Error::Parse {
        input: s.to_string(),
        reason: reason.to_string(),
    };
    let parts: Vec<&str> = s.trim().split('x').collect();
    if parts.is_empty() || parts.len() > 4 {
        return Err(bad("expected 1 to 4 dimensions N[xC[xH[xW]]]"));
    }
    let mut dims = [1usize; 4];
    for (d, p) in dims.iter_mut().zip(&parts) {
        *d = p
            .parse::<usize>()
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| bad("each dimension must be a positive integer"))?;
    }
    Ok(dims)
}

/// A buffer of `len` elements must hold the tensor described by `desc` (f32 only).
///
/// # Errors
/// [`Error::Unsupported`] for a type other than f32, [`Error::BufferTooSmall`] naming
/// `field`.
pub(crate) fn check_buffer(field: &str, desc: &TensorDesc, len: usize) -> Result<()> {
    if desc.dtype() != crate::desc::DataType::F32 {
        return Err(Error::Unsupported {
            what: format!("{field}: {} tensors in this operator", desc.dtype().name()),
        });
    }
    if len < desc.span() {
        return Err(Error::BufferTooSmall {
            field: field.into(),
            needed: desc.span(),
            got: len,
        });
    }
    Ok(())
}

/// Two tensors must have the same dimensions.
///
/// # Errors
/// [`Error::BadParam`] naming `field` (the second tensor).
pub(crate) fn check_same_dims(field: &str, want: &TensorDesc, got: &TensorDesc) -> Result<()> {
    if want.dims() != got.dims() {
        return Err(Error::bad(
            field,
            format!("{:?}", got.dims()),
            format!("must have the dimensions {:?}", want.dims()),
        ));
    }
    Ok(())
}

/// The elements of tensors of the same dimensions (different strides allowed), walked as
/// runs: the dimensions are ordered by the first tensor's strides (outermost first),
/// dimensions that merge in every tensor are merged, and the innermost becomes a run of
/// `len` elements. A run is contiguous in a tensor whose inner stride is 1.
#[derive(Debug, Clone)]
pub struct Runs<const K: usize> {
    /// Extents of the outer dimensions (up to three), outermost first.
    outer: [usize; 3],
    /// Strides of the outer dimensions, per tensor.
    outer_strides: [[usize; 3]; K],
    /// Elements per run.
    pub len: usize,
    /// The stride inside a run, per tensor.
    pub inner: [usize; K],
}

impl<const K: usize> Runs<K> {
    /// The runs of `K` tensors with dimensions `dims` and the given strides.
    pub fn new(dims: [usize; 4], strides: [[usize; 4]; K]) -> Runs<K> {
        // Order by the first tensor's strides, largest first; extent-1 dimensions go out.
        let mut order: Vec<usize> = (0..4).filter(|&d| dims[d] > 1).collect();
        order.sort_by_key(|&d| std::cmp::Reverse((strides[0][d], dims[d])));
        // Merge d into the next-inner one where every tensor steps over it contiguously.
        let mut ext: Vec<usize> = Vec::with_capacity(4);
        let mut st: Vec<[usize; K]> = Vec::with_capacity(4);
        for &d in &order {
            let s: [usize; K] = std::array::from_fn(|t| strides[t][d]);
            ext.push(dims[d]);
            st.push(s);
        }
        merge_contiguous(&mut ext, &mut st);
        let (len, inner) = match (ext.pop(), st.pop()) {
            (Some(e), Some(s)) => (e, s),
            _ => (1, [1; K]),
        };
        let mut outer = [1; 3];
        let mut outer_strides = [[0; 3]; K];
        let pad = 3 - ext.len();
        for (j, (&e, s)) in ext.iter().zip(&st).enumerate() {
            outer[pad + j] = e;
            for t in 0..K {
                outer_strides[t][pad + j] = s[t];
            }
        }
        Runs {
            outer,
            outer_strides,
            len,
            inner,
        }
    }

    /// Number of runs.
    pub fn count(&self) -> usize {
        self.outer.iter().product()
    }

    /// The first element's offset of run `i` in each tensor.
    #[inline]
    pub fn start(&self, i: usize) -> [usize; K] {
        let c = i % self.outer[2];
        let b = (i / self.outer[2]) % self.outer[1];
        let a = i / (self.outer[2] * self.outer[1]);
        std::array::from_fn(|t| {
            let s = self.outer_strides[t];
            a * s[0] + b * s[1] + c * s[2]
        })
    }

    /// Whether every tensor's runs are contiguous.
    pub fn contiguous(&self) -> bool {
        self.inner.iter().all(|&s| s == 1)
    }
}

/// Merges each dimension (extents `ext`, per-tensor strides `st`, outermost first) into the
/// next-inner one where every tensor steps over the pair contiguously.
pub(crate) fn merge_contiguous<const K: usize>(ext: &mut Vec<usize>, st: &mut Vec<[usize; K]>) {
    let mut i = ext.len();
    while i >= 2 {
        let (o, n) = (i - 2, i - 1);
        if (0..K).all(|t| st[o][t] == st[n][t] * ext[n]) {
            ext[o] *= ext[n];
            st[o] = st[n];
            ext.remove(n);
            st.remove(n);
        }
        i -= 1;
    }
}

/// Elements below which an elementwise operator runs on the calling thread alone.
pub(crate) const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

/// The threads that [`run_items_with`] runs `items` items touching `work` elements on.
pub(crate) fn item_threads(ctx: &ExecContext<'_>, items: usize, work: usize) -> usize {
    if items <= 1 || work < PARALLEL_MIN_ELEMENTS {
        1
    } else {
        ctx.threads.max(1)
    }
}

/// Runs `f(state, i)` for items `0..items`, on the context's threads when there is enough
/// `work` (elements touched), else on the calling thread; each thread with the state `init`
/// makes.
pub(crate) fn run_items_with<S: Send>(
    ctx: &ExecContext<'_>,
    items: usize,
    work: usize,
    init: impl Fn() -> Result<S> + Sync,
    f: impl Fn(&mut S, usize) + Sync,
) -> Result<()> {
    if item_threads(ctx, items, work) == 1 {
        let mut s = init()?;
        (0..items).for_each(|i| f(&mut s, i));
        return Ok(());
    }
    crate::runtime::parallel::for_each_with(ctx, items, init, f)
}

/// Elements per work item when an elementwise operator splits long runs among threads.
pub(crate) const CHUNK: usize = 1 << 14;

/// Consecutive units (planes, runs) per work item out of `count`: at least `least`, and at
/// least a quarter of each of the `threads`' shares, so that each thread streams through
/// long stretches of memory. Small items taken in turn by 2 threads held them to 1 thread's
/// time (global average pooling's 64 planes, the bias add's runs of 16 Ki elements): each
/// item restarted the hardware prefetchers.
pub(crate) fn stretch(count: usize, least: usize, threads: usize) -> usize {
    count.div_ceil(4 * threads.max(1)).max(least).max(1)
}

/// Bytes of a cache line, the unit element-wise loops align their output to.
pub(crate) const LINE: usize = 64;

/// Outputs of at least this many bytes are written with non-temporal stores by the
/// operators whose output does not read its prior contents (blend beta 0): a quarter of the
/// 32 MiB L3 of the machines this targets, beyond which the output leaves the caches anyway,
/// and fetching its lines before writing them (what an ordinary store does) is a third more
/// traffic for a unary operator, a quarter for a binary one.
pub(crate) const STREAM_MIN_BYTES: usize = 8 << 20;

/// Whether an operator writing `out` streams its output ([`write_blocks`],
/// [`stream_copy`]): it does not read the output's prior contents (`reads_output` false)
/// and the output takes at least [`STREAM_MIN_BYTES`].
pub(crate) fn streams(reads_output: bool, out: &TensorDesc) -> bool {
    !reads_output && out.elements().saturating_mul(4) >= STREAM_MIN_BYTES
}

/// Floats of the cached block that [`write_blocks`] computes before streaming it out.
const STREAM_BLOCK: usize = 1024;

/// Runs `f(offset, out)` for `dst`: where `stream`, over blocks of [`STREAM_BLOCK`] elements
/// computed into a cached buffer (`out` then stands for `dst[offset..offset + out.len()]`,
/// whose prior contents `f` must not read) and copied to `dst` with [`stream_copy`];
/// otherwise once, on `dst` itself.
pub(crate) fn write_blocks(
    features: crate::cpu::Features,
    stream: bool,
    dst: &mut [f32],
    mut f: impl FnMut(usize, &mut [f32]),
) {
    if !stream {
        return f(0, dst);
    }
    let mut buf = [0f32; STREAM_BLOCK];
    for (i, d) in dst.chunks_mut(STREAM_BLOCK).enumerate() {
        let b = &mut buf[..d.len()];
        f(i * STREAM_BLOCK, b);
        stream_copy(features, b, d);
    }
}

/// `dst.copy_from_slice(src)`, whole cache lines of `dst` with non-temporal stores where
/// AVX-512 or AVX2 runs (written without being fetched first), ordinary stores for its ends
/// and elsewhere. `src` and `dst` have the same length.
pub(crate) fn stream_copy(features: crate::cpu::Features, src: &[f32], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len());
    #[cfg(target_arch = "x86_64")]
    {
        use crate::simd::Token;
        if let Some(t) = crate::simd::Avx512::new(features) {
            // SAFETY: the token proves the CPU runs AVX-512F.
            return unsafe { stream_avx512(t, src, dst) };
        }
        if let Some(t) = crate::simd::Avx2::new(features) {
            // SAFETY: the token proves the CPU runs AVX2 (and so AVX).
            return unsafe { stream_avx2(t, src, dst) };
        }
    }
    let _ = features;
    dst.copy_from_slice(src);
}

/// `dst.copy_from_slice(src)` with `line(s, d)` copying each whole 64-byte line of `dst`
/// (16 floats from s to d, d on a line boundary), ordinary copies for the ends, then a store
/// fence: the streamed lines are ordered before anything this thread stores next (the work
/// item's completion, which the caller's join reads).
///
/// # Safety
/// `line` may be called only where the CPU runs the features its caller's entry enables.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn stream_lines(src: &[f32], dst: &mut [f32], line: impl Fn(*const f32, *mut f32)) {
    let n = dst.len();
    let head = dst.as_ptr().align_offset(LINE).min(n);
    dst[..head].copy_from_slice(&src[..head]);
    let body = (n - head) / 16 * 16;
    for i in (head..head + body).step_by(16) {
        // i + 16 ≤ n = both lengths; dst + i is on a line (head aligns it, each step is one).
        line(
            src.as_ptr().wrapping_add(i),
            dst.as_mut_ptr().wrapping_add(i),
        );
    }
    dst[head + body..].copy_from_slice(&src[head + body..]);
    // SAFETY: SSE is part of the x86-64 baseline.
    unsafe { std::arch::x86_64::_mm_sfence() };
}

/// [`stream_copy`]'s lines as two 8-lane non-temporal stores (`vmovntps` to memory is a
/// plain store on AMD's and Intel's cores alike, unlike the masked stores).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn stream_avx2(_: crate::simd::Avx2, src: &[f32], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    // SAFETY: the token proves AVX2 (and so AVX); each call gets a line's 16 floats of src
    // and of dst, dst on a 64-byte line (so both halves 32-byte aligned).
    unsafe {
        stream_lines(src, dst, |s, d| {
            _mm256_stream_ps(d, _mm256_loadu_ps(s));
            _mm256_stream_ps(d.add(8), _mm256_loadu_ps(s.add(8)));
        })
    }
}

/// [`stream_copy`]'s lines as one 16-lane non-temporal store each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn stream_avx512(_: crate::simd::Avx512, src: &[f32], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    // SAFETY: the token proves AVX-512F; each call gets a line's 16 floats of src and of
    // dst, dst on a 64-byte line.
    unsafe { stream_lines(src, dst, |s, d| _mm512_stream_ps(d, _mm512_loadu_ps(s))) }
}

/// f32 elements from address `at` to the next [`LINE`] boundary (0 on one).
pub(crate) fn to_line(at: usize) -> usize {
    (LINE - at % LINE) % LINE / std::mem::size_of::<f32>()
}

/// `f` on `y`'s elements before its first [`LINE`] boundary, then on the others, with `x`'s
/// elements at the same indices: the second call's vectors are whole cache lines of `y` (and
/// of `x` when it is as misaligned, buffers from the same allocator).
pub(crate) fn by_lines(x: &[f32], y: &mut [f32], mut f: impl FnMut(&[f32], &mut [f32])) {
    let head = to_line(y.as_ptr() as usize).min(y.len());
    let (y0, y1) = y.split_at_mut(head);
    f(&x[..head], y0);
    f(&x[head..], y1);
}

/// Elements of run r before the output's first [`LINE`] boundary (0 where the output's run
/// is not contiguous); not capped at the run's length. `base` is the output buffer's address.
pub(crate) fn line_head<const K: usize>(runs: &Runs<K>, base: usize, r: usize) -> usize {
    if runs.inner[0] != 1 {
        return 0;
    }
    to_line(base.wrapping_add(runs.start(r)[0].wrapping_mul(4)))
}

/// Runs `f(out, run, first, len)` over pieces of `runs` on the context's threads: elements
/// `first .. first + len` of run `run`, runs longer than [`CHUNK`] cut into pieces of about
/// that length. `out` is the shared output (tensor 0 of `runs`); each piece may write its own
/// elements only (those of its run's range in the output tensor). Small tensors run on the
/// calling thread.
///
/// Where the output's run is contiguous, its elements before the first 64-byte boundary are a
/// piece of their own and the others start at whole multiples of 16 elements from it, so
/// that each piece's vectors are whole cache lines of the output (and of inputs equally
/// misaligned: buffers from the same allocator). With vectors split across two lines, relu
/// took 5 % more time at the cache's bandwidth.
pub(crate) fn for_each_piece<const K: usize>(
    ctx: &ExecContext<'_>,
    runs: &Runs<K>,
    y: &mut [f32],
    f: impl Fn(&SharedOut<'_>, usize, usize, usize) + Sync,
) -> Result<()> {
    const PER_LINE: usize = LINE / std::mem::size_of::<f32>();
    let total = runs.count().saturating_mul(runs.len);
    let per_run = if runs.len > CHUNK {
        runs.len.div_ceil(CHUNK)
    } else {
        1
    };
    let piece = runs.len.div_ceil(per_run).max(1).next_multiple_of(PER_LINE);
    let base = y.as_ptr() as usize;
    let head = |r: usize| line_head(runs, base, r);
    // Item (r, 0) is the head; (r, p ≥ 1) the p-th piece after it.
    let slots = per_run + 1;
    let items = runs.count() * slots;
    let out = SharedOut::new(y);
    let one = |_: &mut (), i: usize| {
        let (r, p) = (i / slots, i % slots);
        let h = head(r).min(runs.len);
        let (first, len) = if p == 0 {
            (0, h)
        } else {
            let first = (h + (p - 1) * piece).min(runs.len);
            (first, piece.min(runs.len - first))
        };
        if len > 0 {
            f(&out, r, first, len);
        }
    };
    if ctx.threads <= 1 || total < PARALLEL_MIN_ELEMENTS {
        (0..items).for_each(|i| one(&mut (), i));
        return Ok(());
    }
    crate::runtime::parallel::for_each_with(ctx, items, || Ok(()), one)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_copy_copies_every_element_on_every_isa() {
        // Heads and tails around the streamed lines: every start within a line and lengths
        // from none to a few lines, on each instruction set this CPU runs.
        let src: Vec<f32> = (0..200).map(|i| i as f32 + 0.5).collect();
        for isa in crate::cpu::Isa::ALL
            .into_iter()
            .filter(|i| i.is_available())
        {
            for start in 0..16 {
                for len in 0..=80 {
                    let mut buf = vec![-1f32; 128];
                    stream_copy(
                        isa.usable(),
                        &src[start..start + len],
                        &mut buf[start..][..len],
                    );
                    assert_eq!(
                        &buf[start..start + len],
                        &src[start..start + len],
                        "{isa:?}"
                    );
                    assert!(buf[..start]
                        .iter()
                        .chain(&buf[start + len..])
                        .all(|&v| v == -1.0));
                }
            }
        }
    }

    #[test]
    fn runs_merge_what_is_contiguous_everywhere() {
        // Packed NCHW twice: one run of everything.
        let st = [24, 12, 4, 1];
        let r = Runs::new([2, 2, 3, 4], [st, st]);
        assert_eq!((r.count(), r.len, r.inner), (1, 48, [1, 1]));
        // NCHW against NHWC: (h, w) merge in both (stride 2 = C in the second), c does not.
        let nhwc = [24, 1, 8, 2];
        let r = Runs::new([2, 2, 3, 4], [st, nhwc]);
        assert_eq!((r.count(), r.len, r.inner), (4, 12, [1, 2]));
        let starts: Vec<[usize; 2]> = (0..r.count()).map(|i| r.start(i)).collect();
        assert_eq!(starts[1], [12, 1]); // n 0, c 1
        assert_eq!(starts[2], [24, 24]); // n 1, c 0
                                         // Strides that merge nowhere: one run per (n, c, h).
        let padded = [40, 20, 5, 1];
        let r = Runs::new([2, 2, 3, 4], [padded, nhwc]);
        assert_eq!((r.count(), r.len, r.inner), (12, 4, [1, 2]));
        assert_eq!(r.start(1), [5, 8]); // n 0, c 0, h 1
                                        // Every element visited once.
        let mut seen = [0; 48];
        for i in 0..r.count() {
            let [_, b] = r.start(i);
            for j in 0..r.len {
                seen[b + j * r.inner[1]] += 1;
            }
        }
        assert!(seen.iter().all(|&s| s == 1));
    }
}
