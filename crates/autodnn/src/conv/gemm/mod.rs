//! The convolution as GEMMs, shared by `gemm` (explicit im2col into the workspace) and
//! `implicit_gemm` (panels packed straight from the image).
//!
//! One GEMM per (image, group, block of output positions): the depth is the C·R·S *taps* of a
//! group, one side is the output positions of the block, the other the group's output
//! channels. The engine's micro-kernel computes whole vectors of 32 rows (AVX-512) and
//! stores them fastest along y's contiguous direction, so which side is which ([`Frame`])
//! follows y's layout and the image size:
//!
//! - [`Frame::Positions`], y NCHW-like: C = positions × channels, A = the patches
//!   (positions × taps, the vector side), B = the filter (taps × channels).
//! - [`Frame::Channels`], y NHWC-like, and NCHW-like y with few positions (ResNet's 14x14
//!   and 7x7 layers, where 49 positions would be computed as 64): C = channels × positions,
//!   A = the filter (channels × taps), B = the patches (taps × positions); for NCHW-like y
//!   the engine transposes each tile before storing it. A cost model chooses
//!   ([`choose_frame`]).
//!
//! Taps are ordered to match x: channels outer, (r, s) inner for NCHW-like x (so a KCRS
//! filter is a plain strided matrix), (r, s) outer, channels inner for NHWC-like x (a KRSC
//! filter is, and a patch's taps are runs of contiguous channels).
//!
//! The epilogue maps onto the engine's (`C = act(alpha·A·B + beta·C + bias + residual)`):
//! bias per output channel becomes a per-row or per-column bias, a residual with beta = 1 the
//! engine's residual, y's prior contents with beta ≠ 0 the engine's beta·C; a residual with
//! another beta is first copied into y's block and then scaled as C.
//!
//! Prepared weights are each group's filter in the engine's packed panel format (A or B side,
//! by the frame), cut into the engine's depth blocks, so that the engine reads them in place
//! ([`PackA::prepacked_a`], [`PackB::prepacked_b`]) instead of packing the filter on every
//! call.

mod algorithm;
mod cost;
mod explicit_bwd_data;
mod explicit_bwd_filter;
mod explicit_fwd;
mod geometry;
mod im2col;
mod implicit_bwd_data;
mod implicit_bwd_filter;
mod implicit_fwd;
mod packed_filter;
mod patches;

pub(crate) use explicit_bwd_data::GEMM_BWD_DATA;
pub(crate) use explicit_bwd_filter::GEMM_BWD_FILTER;
pub(crate) use explicit_fwd::GEMM;
pub(crate) use implicit_bwd_data::IMPLICIT_GEMM_BWD_DATA;
pub(crate) use implicit_bwd_filter::IMPLICIT_GEMM_BWD_FILTER;
pub(crate) use implicit_fwd::IMPLICIT_GEMM;
pub(crate) use packed_filter::{a_panels_len, prepare_a_panels, prepared_a_panels};

use algorithm::{GemmConv, PatchSource};
#[cfg(doc)]
use cost::choose_frame;
#[cfg(doc)]
use geometry::Frame;
use geometry::Geometry;

#[cfg(doc)]
use crate::gemm::{PackA, PackB};
