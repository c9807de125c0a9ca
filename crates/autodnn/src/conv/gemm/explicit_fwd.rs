//! `gemm`: explicit im2col into the workspace, then the GEMM engine.
//!
//! Computes the convolution as one GEMM per (image, group, block of output positions): the
//! block's patches (C·R·S taps of every output position) are copied into the workspace
//! (im2col), then multiplied by the group's filter with the engine, the epilogue (bias,
//! residual, activation) applied to each output tile while it is hot. The GEMM frame, the tap
//! order and the epilogue mapping are described in the family's overview (`conv/gemm/mod.rs`).
//!
//! - **Wins** where the GEMM engine's speed matters more than the copy: many channels, large
//!   images; 1x1 stride-1 convolutions need no copy at all (x is already the matrix).
//! - **Workspace:** one im2col block, `C·R·S × P` floats with P output positions chosen so
//!   that the block holds about [`IM2COL_BLOCK_BYTES`] (`AUTODNN_IM2COL_BLOCK_BYTES`
//!   overrides it), at least one position and at most one image (one output row when y's
//!   rows are padded); none for 1x1 stride-1 convolutions. The GEMM engine's own packing
//!   buffers (per thread, bounded, reused across calls) are not part of it.
//! - **Declines:** nothing (f32 only, as every algorithm): any layout, stride, dilation,
//!   padding, group count and mode.
//! - **Prepared weights:** each group's filter packed once into the engine's panels.
//! - **Deterministic:** yes; the engine's results do not depend on the thread count and the
//!   blocks do not either.

use std::sync::OnceLock;

use super::{GemmConv, Geometry, PatchSource};

/// Explicit im2col + GEMM.
pub(crate) const GEMM: GemmConv = GemmConv {
    name: "gemm",
    patches: PatchSource::Copied(block_positions),
};

/// Target size of one im2col block in bytes: small enough to stay in the L2 cache between
/// being written and being packed by the engine, large enough that the filter, packed once
/// per block, is reused over many positions.
pub const IM2COL_BLOCK_BYTES: usize = 1 << 20;

/// Environment variable overriding [`IM2COL_BLOCK_BYTES`] (read once per process).
pub const IM2COL_BLOCK_ENV: &str = "AUTODNN_IM2COL_BLOCK_BYTES";

/// Positions per block are rounded down to a multiple of this (a multiple of every kernel
/// family's tile sides, so that blocks do not end in ragged micro-panels).
const POSITION_UNIT: usize = 96;

fn block_bytes() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| {
        std::env::var(IM2COL_BLOCK_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&b: &usize| b > 0)
            .unwrap_or(IM2COL_BLOCK_BYTES)
    })
}

/// Output positions per im2col block.
fn block_positions(geo: &Geometry) -> usize {
    let per_position = geo.depth * std::mem::size_of::<f32>();
    let mut bp = (block_bytes() / per_position).max(1);
    if bp >= POSITION_UNIT {
        bp -= bp % POSITION_UNIT;
    }
    geo.block_positions(bp)
}
