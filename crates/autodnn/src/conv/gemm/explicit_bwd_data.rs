//! `gemm` backward data: the forward `gemm` (im2col of dy into the workspace, then one GEMM
//! per block) with the rotated, transposed filter, stride s > 1 as s² stride-1 residues (see
//! `conv::rotated`).

use super::GEMM;
use crate::conv::rotated::ViaForward;

pub(crate) static GEMM_BWD_DATA: ViaForward = ViaForward::new(&GEMM);
