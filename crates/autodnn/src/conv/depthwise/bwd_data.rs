//! `depthwise` backward data: with one input channel per group, the rotated filter's
//! channel transpose is again depthwise, so the forward kernels compute dx from dy (stride
//! s > 1 as s² stride-1 residues; see `conv::rotated`).

use super::Depthwise;
use crate::conv::rotated::ViaForward;

pub(crate) static DEPTHWISE_BWD_DATA: ViaForward = ViaForward::new(&Depthwise);
