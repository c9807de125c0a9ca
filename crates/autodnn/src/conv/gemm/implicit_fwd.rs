//! `implicit_gemm`: the GEMM engine with the image patches packed straight from x.
//!
//! Computes the convolution as one GEMM per (image, group) (per output row when y's rows are
//! padded): the engine's pluggable packing ([`PackA`](crate::gemm::PackA) or
//! [`PackB`](crate::gemm::PackB)) is given the patches, so each micro-panel it packs is
//! gathered from the image directly, nothing is materialised. The GEMM frame, the tap order
//! and the epilogue mapping are described in the family's overview (`conv/gemm/mod.rs`). For 1x1 stride-1 convolutions the
//! image already is the patch matrix and the engine reads it as an ordinary operand.
//!
//! - **Wins** where `gemm` does, without its workspace: 1x1 convolutions at the engine's
//!   speed, strided 1x1 and large-kernel layers (ResNet's conv1) without an im2col copy.
//! - **Workspace:** none. The GEMM engine's own packing buffers (per thread, at most
//!   `(MC + NC)·KC` floats, independent of the image, reused across calls) are the only
//!   memory it uses beyond x, w and y.
//! - **Declines:** nothing (f32 only, as every algorithm): any layout, stride, dilation,
//!   padding, group count and mode.
//! - **Prepared weights:** each group's filter packed once into the engine's panels.
//! - **Deterministic:** yes; the engine's results do not depend on the thread count.

use super::{GemmConv, PatchSource};

/// Implicit GEMM.
pub(crate) const IMPLICIT_GEMM: GemmConv = GemmConv {
    name: "implicit_gemm",
    patches: PatchSource::Packed,
};
