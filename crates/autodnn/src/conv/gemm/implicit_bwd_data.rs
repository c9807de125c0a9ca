//! `implicit_gemm` backward data: the forward `implicit_gemm` on dy with the rotated,
//! transposed filter (stride s > 1 as s² stride-1 residues; see `conv::rotated`), so no
//! column buffer is ever written.

use super::IMPLICIT_GEMM;
use crate::conv::rotated::ViaForward;

pub(crate) static IMPLICIT_GEMM_BWD_DATA: ViaForward = ViaForward::new(&IMPLICIT_GEMM);
