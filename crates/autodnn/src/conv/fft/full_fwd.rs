//! `fft`: the convolution as a product of spectra, one 2-D transform of each whole (padded)
//! image.
//!
//! Computes y = IDFT(DFT(x) · conj(DFT(w))) on a grid of nh × nw = good(OH + R' − 1) ×
//! good(OW + S' − 1) points (R', S' the dilated kernel extent; good(n) the next size with
//! factors 2, 3 and 5), which holds every output of an image without wrap-around. The
//! products are complex (K × C)·(C × images) matrix products, one per frequency bin
//! (see [`super`]).
//!
//! - **Wins** on large kernels with many channels: the cost per output is nearly independent
//!   of R·S. With prepared weights it beats `direct` from 5×5 at 64 channels; `fft_tiling`,
//!   whose candidates include this whole-image grid, is usually as fast or faster at batch 1.
//!   `fft` remains for kernels wider than `fft_tiling` takes (extent above 32) and batches,
//!   where one whole-image spectrum serves several images (at batch 8 and 64 channels, 9×9,
//!   8× faster than `direct` and onnxruntime). Loses on small kernels and few channels.
//! - **Prepared weights:** the filter spectra, K·C·nh·(nw/2 + 1) complex values (8 bytes
//!   each, padded to blocks of 16 bins): large (64 MiB for 64×64 channels on 56×56 with 9×9),
//!   because the grid is the whole image. `fft_tiling` trades some arithmetic for far smaller
//!   spectra.
//! - **Workspace:** the spectra of up to [`IMAGES_PER_PASS`] images' inputs and outputs, plus,
//!   on plain calls, the filters' row transforms (K·C/g·R·(nw/2 + 1) complex values) when the
//!   batch fits in one pass, or else the filter spectra of [`PLAIN_KBLOCK`] output channels
//!   at a time (transformed again on every pass). It grows with the image; `fft_tiling`'s
//!   does not.
//! - **Declines:** strides other than 1 (a strided output samples one point in `stride²` of
//!   the grid: most of the transform would be thrown away); 1×1 kernels (a plain matrix
//!   product, nothing for a transform to save); grids larger than [`MAX_SIDE`] on a side, or
//!   over [`MAX_GRID_PER_OUTPUT`] times an image's outputs (a kernel far larger than them).
//!   Dilation is handled by spreading the kernel's taps on the grid; groups and both layouts
//!   are supported.
//! - **Accuracy:** normwise (see [`Accuracy`](crate::conv::Accuracy)); **deterministic:** every value is computed by
//!   one thread in a fixed order whatever the thread count.

use super::{extent, good_size, PlainFilter, Spectral, SpectralConv};
use crate::desc::ConvProblem;

/// Images transformed and multiplied together (more reuse each filter spectrum across the
/// batch; the workspace grows with it).
pub const IMAGES_PER_PASS: usize = 8;
/// Output channels whose filter spectra a plain call holds at once.
pub const PLAIN_KBLOCK: usize = 8;
/// Largest grid side accepted: beyond it the spectra get huge and rounding grows.
pub const MAX_SIDE: usize = 2048;

/// The normwise constant c of max|y − ref| ≤ c · ε · C·R·S · max|x| · max|w|, measured on
/// random data in [−1, 1] (tests/fft.rs): the measured c falls with the channels and the
/// kernel (0.61 at C = 1 and 3×3, 0.11 at C = 16 and 5×5, 0.03 to 0.05 at C = 64 to 256
/// and 5×5 to 11×11); the largest, 2.1, is a 1×2 kernel on a 512-point grid (FFT rounding
/// grows with log2 of the grid, the bound only with C·R·S). Twice that, documented.
pub const NORMWISE_C: f64 = 4.0;

/// The whole-image FFT convolution.
pub(crate) const FFT: SpectralConv = SpectralConv {
    name: "fft",
    plan: spectral,
    limit,
    normwise_c: NORMWISE_C,
};

fn grid(problem: &ConvProblem) -> [usize; 2] {
    let ext = extent(problem);
    [
        good_size(problem.y().h() + ext[0] - 1),
        good_size(problem.y().w() + ext[1] - 1),
    ]
}

fn spectral(problem: &ConvProblem) -> Option<Spectral> {
    Spectral::new(
        problem,
        grid(problem),
        [problem.y().h(), problem.y().w()],
        IMAGES_PER_PASS,
        PlainFilter::KBlocks(PLAIN_KBLOCK),
    )
}

/// Most grid points per output position of an image: past it the output is a small corner
/// of the transform (a kernel far larger than the output), and the filter's spectra alone
/// cost that many times the direct definition's multiply-adds.
pub const MAX_GRID_PER_OUTPUT: usize = 256;

fn limit(problem: &ConvProblem) -> std::result::Result<(), String> {
    let [nh, nw] = grid(problem);
    if nh.max(nw) > MAX_SIDE {
        return Err(format!(
            "the transform grid {nh}x{nw} is larger than {MAX_SIDE} on a side"
        ));
    }
    let outputs = problem.y().h() * problem.y().w();
    if nh * nw > MAX_GRID_PER_OUTPUT * outputs {
        return Err(format!(
            "the transform grid {nh}x{nw} is over {MAX_GRID_PER_OUTPUT} times the {outputs} \
             outputs of an image"
        ));
    }
    Ok(())
}
