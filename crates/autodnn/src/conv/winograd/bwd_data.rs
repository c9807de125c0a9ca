//! Winograd backward data (cuDNN's WINOGRAD_NONFUSED): for 3x3 stride-1 problems, dy
//! convolved with the rotated, transposed filter is itself a 3x3 stride-1 forward
//! convolution, computed by the same tile sizes (see `conv::rotated`).

use super::{WINOGRAD_2X2, WINOGRAD_4X4, WINOGRAD_6X6};
use crate::conv::rotated::ViaForward;

pub(crate) static WINOGRAD_2X2_BWD_DATA: ViaForward = ViaForward::new(&WINOGRAD_2X2);
pub(crate) static WINOGRAD_4X4_BWD_DATA: ViaForward = ViaForward::new(&WINOGRAD_4X4);
pub(crate) static WINOGRAD_6X6_BWD_DATA: ViaForward = ViaForward::new(&WINOGRAD_6X6);
