//! The convolution algorithms, one folder per family, and their registries.
//!
//! A family's folder holds the machinery its algorithms share and one file per registered
//! algorithm and direction: `direct/` (`fwd.rs`), `depthwise/` (`fwd.rs`), `gemm/` (geometry,
//! frame cost, im2col, patch packing, the packed filter; `explicit_fwd.rs` is `gemm`,
//! `implicit_fwd.rs` is `implicit_gemm`; a col2im for backward data will sit beside
//! im2col), `winograd/` (the three tile sizes over one frame), `fft/` (plans, filter spectra,
//! products, overlap-save tiling; `full_fwd.rs` is `fft`, `tiling_fwd.rs` is `fft_tiling`),
//! `dilated/` (atrous kernels: `kn2row.rs`, one GEMM per tap over the outputs it reaches
//! inside the image; `space_to_batch.rs`, the `s2b_*` dense algorithms on sub-images).
//! Forward algorithms implement [`ConvAlgorithm`], the forward convolution's trait
//! ([`crate::op::conv_fwd`]): a name, a predicate that accepts a problem or declines it with a
//! reason, an exact workspace size, a determinism flag and a run function. `registry.rs`
//! holds them in one ordered list, most specialised first; `direct` is always last: it
//! accepts every valid f32 problem and needs no workspace, so it is the end of every
//! fallback chain. Selection works over this list and never names an algorithm.

mod depthwise;
mod dilated;
mod direct;
mod fft;
mod gemm;
mod registry;
mod rotated;
mod split;
mod winograd;

pub use registry::{algorithms, find, names};

/// `dst[k] = src[2·k]` for every k < dst.len(), `src` holding exactly 2·dst.len() − 1
/// elements (the last pair's second one may lie past the data): a stride-2 gather in
/// pairs, which the compiler vectorises (element by element it stayed scalar; a third of
/// ResNet-50's 7x7 stride-2 stem). Nothing for an empty `dst`.
#[inline]
pub(crate) fn copy_every_other(src: &[f32], dst: &mut [f32]) {
    let Some((last, body)) = dst.split_last_mut() else {
        return;
    };
    for (d, pair) in body.iter_mut().zip(src.chunks_exact(2)) {
        *d = pair[0];
    }
    *last = src[2 * body.len()];
}

/// The output columns `lo .. hi` (within `0 .. out`) whose input column `j·stride + shift`
/// lies inside `0 .. width`: the window a kernel column reaches without padding, as the
/// backward kernels walk it (empty when `lo == hi`).
#[inline]
pub(crate) fn inside_columns(shift: i64, stride: i64, width: usize, out: usize) -> (usize, usize) {
    let lo = (((-shift).max(0) + stride - 1) / stride).min(out as i64);
    let hi = ((width as i64 - shift + stride - 1) / stride).clamp(lo, out as i64);
    (lo as usize, hi as usize)
}

pub use crate::op::conv_fwd::{default_cost_features, AlgoWeights, ConvAlgorithm, ReducedWeights};
pub use crate::op::epilogue::{Activation, Epilogue, EpilogueArgs};
pub use crate::op::prepared::{PreparedWeights, Weights};
pub use crate::op::{Accuracy, COST_FEATURES};
pub use crate::runtime::ExecContext;
