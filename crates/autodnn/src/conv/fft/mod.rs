//! The spectral engine shared by `fft` and `fft_tiling`: 2-D real-to-complex transforms of
//! image tiles and filters, the per-frequency products over channels, the inverse transform
//! and the epilogue.
//!
//! A convolution with stride 1 is a circular cross-correlation on a transform grid of
//! `nh × nw` points as long as the grid holds a tile's outputs plus the kernel's (dilated)
//! extent minus one: y = IDFT(DFT(x) · conj(DFT(w))) / (nh·nw). The engine computes it for a
//! list of *tiles* (one output rectangle of one image each; `fft` uses one tile per image,
//! `fft_tiling` many of a fixed transform size), a pass of several tiles at a time:
//!
//! 1. **Forward transforms** of every (tile, input channel): rows two at a time as one complex
//!    FFT (z = a + i·b; the half spectra are separated by Hermitian symmetry), rows that are
//!    all padding skipped, then complex FFTs down the `nw/2 + 1` columns. rustfft does the
//!    1-D transforms (its AVX planner under an AVX cap, its scalar one under `scalar`).
//! 2. **Products**: for every frequency bin, Y\[t, k\] = Σ_c W\[k, c\] · X\[t, c\] over the
//!    channels of k's group: a complex (K × C)·(C × T) matrix product per bin. Bins are
//!    grouped in blocks of [`LANES`], and the spectra are laid out block-major with each
//!    channel's block contiguous (re ×16, im ×16): X as \[block\]\[tile\]\[c\] and the filter
//!    as \[group\]\[block\]\[k\]\[c\] (what one bin block's products read is contiguous), Y
//!    as \[tile\]\[k\]\[block\] (what one inverse transform reads is). A bin block's products are
//!    then 16 independent complex GEMMs done lane-wise by one vector FMA each: a register tile
//!    of `KB` output channels × `TB` tiles accumulates over the channels with 4 FMAs per
//!    complex product and no shuffles, streaming the filter spectra sequentially. (Handing
//!    each bin to the real GEMM engine as a 4M product would mean thousands of GEMMs of
//!    (2K × 2C)·(2C × T) with T as small as 1: packing and call overhead would dominate. The
//!    3M method would save a quarter of the FMAs but needs a third plane of filter spectra,
//!    half as much again to stream, and with one tile the products are bound by that stream.)
//! 3. **Inverse transforms** of every (tile, output channel): column FFTs, then rows two at a
//!    time, only the rows and columns of the tile's outputs; the epilogue is applied as each
//!    row is written.
//!
//! The filter spectra carry the conjugation (correlation), the flip (convolution mode), the
//! dilation (taps placed `d` apart) and the 1/(nh·nw) scale of the unnormalised inverse. They
//! are what prepared weights hold. The R×S taps are few on a large grid, so the filter's DFT is
//! evaluated directly and separably rather than by FFTs of a mostly-zero grid. Plain calls
//! whose tiles fit in one pass store only the filters' row transforms and compute each bin
//! block's spectra just before its products ([`PlainFilter::Fused`]); others compute the
//! spectra into the workspace, all at once or a block of output channels at a time.
//!
//! Workspace: filter spectra or row transforms, then X and Y spectra of one pass; Y comes last
//! and the products write all of it, so the reported size is the high-water mark. Each worker
//! thread also allocates a few transform-sized line buffers (kilobytes) for the 1-D FFTs and,
//! on fused plain calls, one output-channel block of a bin block's filter spectra
//! (12·C/g·128 bytes at most).

mod algorithm;
mod bwd_data;
mod filter;
mod full_fwd;
mod plan;
mod products;
mod tiling;
mod tiling_fwd;

pub(crate) use bwd_data::{FFT_BWD_DATA, FFT_TILING_BWD_DATA};
pub(crate) use full_fwd::FFT;
pub(crate) use tiling_fwd::FFT_TILING;

use algorithm::SpectralConv;
use filter::PlainFilter;
#[cfg(doc)]
use plan::LANES;
use plan::{extent, good_size, Spectral};

use crate::conv::{default_cost_features, COST_FEATURES};
