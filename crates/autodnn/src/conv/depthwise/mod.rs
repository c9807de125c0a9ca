//! `depthwise`: one input channel per group (groups == input channels), as in MobileNet.
//!
//! Computes y\[n, k, oh, ow\] = Σ over r, s of
//! x\[n, k / M, oh·sh − pt + r·dh, ow·sw − pl + s·dw\] · w\[k, 0, r, s\] (r, s flipped in
//! convolution mode), M = K / groups being the channel multiplier (any M ≥ 1).
//!
//! - **Wins** on depthwise problems: each output sums only R·S products of one input plane,
//!   so GEMM-based algorithms have nothing to block and `direct`'s channel-blocked tiles run
//!   with one channel per group (MobileNet's layers: 5 to 20 times faster than `direct`).
//! - **Workspace:** none. **Deterministic:** every output is accumulated by one thread, tap by
//!   tap in (r, s) order, by the same kernel whatever the thread count.
//! - **Declines:** groups ≠ input channels; x and y not both unit-stride along W (NCHW-like)
//!   or both along C (NHWC-like) (`direct` covers these).
//! - **Prepared weights:** for NHWC-like problems the filter reordered tap-major, [R·S][K]
//!   (flipped in convolution mode); NCHW-like problems have nothing to prepare.
//!
//! How, NCHW-like (x and y unit-stride along W): vectors run along output rows. A pass of a
//! kernel computes a block of `rows` output rows × one vector of columns of one channel: the
//! channel's R·S weights sit in registers and each input row is loaded once per kernel column
//! and used for every output row of the block that needs it. Rows of at most half a vector
//! (7x7 images) hold two channels per vector. Stride-2 taps are two loads and a permute; a
//! 3-wide stride-2 window reads its row once for all three taps. Borders are masked loads; a
//! table built once per call holds each column vector's offsets and masks.
//!
//! NHWC-like (x and y unit-stride along C): vectors run across channels, like oneDNN's and
//! onnxruntime's blocked layouts. A kernel computes groups of TR×T outputs; for each group it
//! walks every channel block of its work item, so consecutive loads read consecutive cache
//! lines, and each input pixel of a group is loaded once for all the outputs that need it.
//! The weights of a block are reordered tap-major ([R·S][lanes]) once per work item, or come
//! prepared. When x is not vector-aligned, the blocks start where its vectors are.
//!
//! 3x3 and 5x5 kernels with stride 1 or 2 (and no row dilation; NHWC-like, no dilation and
//! M = 1) have unrolled kernels whose accumulators stay in registers; other geometries run
//! generic kernels with runtime taps. The epilogue (alpha, bias, beta·z, relu or clip) is
//! applied to each vector as it is stored; sigmoid, tanh, gelu and silu (libm, lane by lane)
//! in a pass over each work item's outputs right after its kernel. Masked-off lanes are never
//! given an address outside the tensor's rows (some CPUs run a slow microcode assist for a
//! masked access to an unmapped page), except for partial vectors at the very start or end of
//! a buffer.
//!
//! bf16 and f16 tensors: see `stage` (converted in the kernels' loads and stores on
//! AVX-512, else widened into stages in cache).
//!
//! Kernels are written once over the vector operations of `simd::Simd`, implemented for the
//! crate's capability tokens ([`crate::simd`]): arithmetic is safe on a token, memory access
//! through raw pointers is not. Each instruction set's kernel set is a table of
//! `#[target_feature]` entries that take its token; `run` uses the widest set whose token the
//! usable features make (AVX-512F, then AVX2 + FMA, then portable).

mod bwd_data;
mod bwd_filter;
mod channels_last;
mod filter;
mod fwd;
mod geometry;
mod kernels;
mod planar;
mod simd;
mod stage;

pub(crate) use bwd_data::DEPTHWISE_BWD_DATA;
pub(crate) use bwd_filter::DEPTHWISE_BWD_FILTER;
pub use fwd::Depthwise;
