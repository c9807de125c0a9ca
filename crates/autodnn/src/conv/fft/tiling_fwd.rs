//! `fft_tiling`: the FFT convolution on tiles of a fixed transform size (overlap-save).
//!
//! The output is cut into tiles of (nt − R' + 1) × (nt − S' + 1) positions (R', S' the
//! dilated kernel extent); each tile's nt × nt input window (overlapping its neighbours by
//! the kernel's extent) is transformed, multiplied by the filter spectra on the same grid and
//! transformed back, keeping the tile's outputs (see [`super`]). The sides (rows and
//! columns apart) are 8, 16, 32 or 64, or the whole image's grid when that is at most
//! [`MAX_TILE`], whichever the spectral cost model finds cheapest with prepared weights:
//! larger tiles waste less overlap, smaller ones keep the filter spectra small enough to
//! stream once per pass and reuse across its tiles. [`TILE_ENV`] forces a side.
//!
//! - **Wins** on kernels from 5×5 with 64 or more channels (measured at 56×56 and 28×28, one
//!   thread: with prepared weights 0.13 to 0.45 of `direct`'s time and of onnxruntime's, 0.15
//!   at 64 channels and 9×9 on 56×56); on plain calls from 5×5 (56×56) or 7×7 (28×28), where
//!   the filter transform is paid on every call. About even with `direct` on 3×3.
//!   Loses on small images with very many channels (ResNet-50's 7×7 layers): the filter
//!   spectra are then several times the filter's size and must be streamed on every call.
//! - **Prepared weights:** the filter spectra on the tile grid.
//! - **Workspace:** bounded whatever the image size: the spectra of [`TILES_PER_PASS`] tiles'
//!   inputs and outputs and, on plain calls, the filters' row transforms (every tile in one
//!   pass) or the whole filter spectra, computed once per call (several passes).
//! - **Declines:** strides other than 1 (most of the transform would be discarded), 1×1
//!   kernels (nothing for a transform to save), kernels whose dilated extent exceeds
//!   [`MAX_TILE`] / 2 (use `fft`). Dilation, groups and both layouts are supported.
//! - **Accuracy:** normwise (see [`Accuracy`](crate::conv::Accuracy)); **deterministic.**

use super::{extent, good_size, PlainFilter, Spectral, SpectralConv};
use crate::desc::ConvProblem;

/// The tiled FFT convolution.
pub(crate) const FFT_TILING: SpectralConv = SpectralConv {
    name: "fft_tiling",
    plan: spectral,
    limit,
    normwise_c: NORMWISE_C,
};

/// Largest transform side.
pub const MAX_TILE: usize = 64;
/// Tiles transformed and multiplied together: each filter spectrum is read once per pass.
pub const TILES_PER_PASS: usize = 16;

/// The normwise constant c of max|y − ref| ≤ c · ε · C·R·S · max|x| · max|w|, measured on
/// random data in [−1, 1] (tests/fft.rs): it falls with the channels and the kernel (0.47 at
/// C = 1 and 3×3, 0.11 at C = 16 and 5×5, 0.03 to 0.05 at C = 64 to 256 and 5×5 to 11×11);
/// the largest, 1.2, is a 1×2 or 2×2 kernel with one channel. The grid is at most 64 points
/// a side, so unlike `fft` it does not grow with the image. Twice that, documented.
pub const NORMWISE_C: f64 = 2.5;

/// Environment variable that forces the transform side (for experiments; sides below the
/// kernel's extent + 1 or above [`MAX_TILE`] are clamped, non-2-3-5 sides rounded up).
pub const TILE_ENV: &str = "AUTODNN_FFT_TILE";

/// Candidate transform sides (powers of two: rustfft's fastest), besides the whole image's
/// grid when it is at most [`MAX_TILE`].
const SIDES: [usize; 4] = [8, 16, 32, 64];

/// The transform sides (rows, columns) for `problem`: the candidates' cheapest by the
/// spectral cost model, or the side [`TILE_ENV`] forces.
fn sides(problem: &ConvProblem) -> [usize; 2] {
    let ext = extent(problem);
    let out = [problem.y().h(), problem.y().w()];
    let whole = [
        good_size(out[0] + ext[0] - 1),
        good_size(out[1] + ext[1] - 1),
    ];
    if let Some(n) = std::env::var(TILE_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return [0, 1].map(|d| good_size(n.clamp(ext[d] + 1, MAX_TILE)).min(whole[d]));
    }
    let candidates = |d: usize| {
        SIDES
            .into_iter()
            .chain([whole[d]])
            .filter(move |&n| n >= ext[d] && n <= MAX_TILE && n <= whole[d])
    };
    let mut best = (
        [whole[0].min(MAX_TILE), whole[1].min(MAX_TILE)],
        f64::INFINITY,
    );
    for nh in candidates(0) {
        for nw in candidates(1) {
            if let Some(sp) = make(problem, [nh, nw]) {
                let cost = sp.model_cycles(false);
                if cost < best.1 {
                    best = ([nh, nw], cost);
                }
            }
        }
    }
    best.0
}

fn make(problem: &ConvProblem, [nh, nw]: [usize; 2]) -> Option<Spectral> {
    let ext = extent(problem);
    Spectral::new(
        problem,
        [nh, nw],
        [nh - ext[0] + 1, nw - ext[1] + 1],
        TILES_PER_PASS,
        PlainFilter::Full,
    )
}

fn spectral(problem: &ConvProblem) -> Option<Spectral> {
    make(problem, sides(problem))
}

fn limit(problem: &ConvProblem) -> std::result::Result<(), String> {
    let ext = extent(problem);
    if ext[0].max(ext[1]) > MAX_TILE / 2 {
        return Err(format!(
            "needs a (dilated) kernel extent of at most {}, got {}x{}",
            MAX_TILE / 2,
            ext[0],
            ext[1]
        ));
    }
    Ok(())
}
