//! Algorithms for dilated (atrous) convolutions, where every other algorithm either declines
//! (Winograd) or computes the taps that fall wholly in the padding (im2col, implicit GEMM):
//!
//! - `kn2row` (`kn2row.rs`): each tap of the kernel as one GEMM over the rectangle of
//!   outputs whose input lies inside the image, added into an accumulator: no product with
//!   padding is ever computed.
//! - `s2b_*` (`space_to_batch.rs`): the dilated convolution as a dense one on
//!   dilation² sub-images (space-to-batch), run by a dense algorithm (Winograd, implicit
//!   GEMM), the sub-images' outputs interleaved back into y.
//!
//! Both accept only kernels dilated in at least one dimension: dense ones are the other
//! families' work.

mod kn2row;
mod space_to_batch;

pub(crate) use kn2row::KN2ROW;
pub(crate) use space_to_batch::{
    S2B_IMPLICIT_GEMM, S2B_WINOGRAD_2X2, S2B_WINOGRAD_4X4, S2B_WINOGRAD_6X6,
};

use crate::desc::ConvProblem;

/// `Ok` for a kernel dilated in at least one dimension.
fn check_dilated(p: &ConvProblem) -> std::result::Result<(), String> {
    let d = p.conv().dilation();
    if d == [1, 1] {
        return Err("needs a dilated kernel (dilation above 1), got a dense one".into());
    }
    Ok(())
}
