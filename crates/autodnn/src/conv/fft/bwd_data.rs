//! FFT backward data (cuDNN's FFT and FFT_TILING): the stride-1 forward transforms on dy with
//! the rotated, transposed filter (see `conv::rotated`).

use super::{FFT, FFT_TILING};
use crate::conv::rotated::ViaForward;

pub(crate) static FFT_BWD_DATA: ViaForward = ViaForward::new(&FFT);
pub(crate) static FFT_TILING_BWD_DATA: ViaForward = ViaForward::new(&FFT_TILING);
