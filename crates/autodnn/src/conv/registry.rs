//! The ordered lists of the convolution's algorithms, one per operation (forward, backward
//! data, backward filter, backward bias): most specialised first, `direct` last. Adding an
//! algorithm is one file plus one line here.

use super::depthwise::{Depthwise, DEPTHWISE_BWD_DATA, DEPTHWISE_BWD_FILTER};
use super::dilated::{
    KN2ROW, S2B_IMPLICIT_GEMM, S2B_WINOGRAD_2X2, S2B_WINOGRAD_4X4, S2B_WINOGRAD_6X6,
};
use super::direct::{Direct, DirectBwdBias, DirectBwdData, DirectBwdFilter};
use super::fft::{FFT, FFT_BWD_DATA, FFT_TILING, FFT_TILING_BWD_DATA};
use super::gemm::{
    GEMM, GEMM_BWD_DATA, GEMM_BWD_FILTER, IMPLICIT_GEMM, IMPLICIT_GEMM_BWD_DATA,
    IMPLICIT_GEMM_BWD_FILTER,
};
use super::split::{
    DEPTHWISE_BATCH, DEPTHWISE_BWD_DATA_BATCH, GEMM_BATCH, GEMM_BWD_DATA_BATCH,
    GEMM_BWD_FILTER_BATCH, IMPLICIT_GEMM_BATCH, IMPLICIT_GEMM_BWD_DATA_BATCH, WINOGRAD_4X4_BATCH,
    WINOGRAD_4X4_BWD_DATA_BATCH, WINOGRAD_6X6_BATCH, WINOGRAD_6X6_BWD_DATA_BATCH,
};
use super::winograd::{
    WINOGRAD_2X2, WINOGRAD_2X2_BWD_DATA, WINOGRAD_2X2_BWD_FILTER, WINOGRAD_4X4,
    WINOGRAD_4X4_BWD_DATA, WINOGRAD_4X4_BWD_FILTER, WINOGRAD_6X6, WINOGRAD_6X6_BWD_DATA,
};
use super::ConvAlgorithm;
use crate::error::{Error, Result};
use crate::op::{
    Algorithm, ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvForward, Registered,
};

static ALGORITHMS: &[&dyn ConvAlgorithm] = &[
    &Depthwise,
    &DEPTHWISE_BATCH,
    &WINOGRAD_4X4,
    &WINOGRAD_4X4_BATCH,
    &WINOGRAD_6X6,
    &WINOGRAD_6X6_BATCH,
    &WINOGRAD_2X2,
    &S2B_WINOGRAD_4X4,
    &S2B_WINOGRAD_6X6,
    &S2B_WINOGRAD_2X2,
    &FFT_TILING,
    &FFT,
    &KN2ROW,
    &S2B_IMPLICIT_GEMM,
    &IMPLICIT_GEMM,
    &IMPLICIT_GEMM_BATCH,
    &GEMM,
    &GEMM_BATCH,
    &Direct,
];

impl Registered for ConvForward {
    fn algorithms() -> &'static [&'static dyn ConvAlgorithm] {
        ALGORITHMS
    }
}

static BWD_DATA: &[&dyn Algorithm<ConvBackwardData>] = &[
    &DEPTHWISE_BWD_DATA,
    &DEPTHWISE_BWD_DATA_BATCH,
    &WINOGRAD_4X4_BWD_DATA,
    &WINOGRAD_4X4_BWD_DATA_BATCH,
    &WINOGRAD_6X6_BWD_DATA,
    &WINOGRAD_6X6_BWD_DATA_BATCH,
    &WINOGRAD_2X2_BWD_DATA,
    &FFT_TILING_BWD_DATA,
    &FFT_BWD_DATA,
    &IMPLICIT_GEMM_BWD_DATA,
    &IMPLICIT_GEMM_BWD_DATA_BATCH,
    &GEMM_BWD_DATA,
    &GEMM_BWD_DATA_BATCH,
    &DirectBwdData,
];

impl Registered for ConvBackwardData {
    fn algorithms() -> &'static [&'static dyn Algorithm<ConvBackwardData>] {
        BWD_DATA
    }
}

static BWD_FILTER: &[&dyn Algorithm<ConvBackwardFilter>] = &[
    &DEPTHWISE_BWD_FILTER,
    &WINOGRAD_4X4_BWD_FILTER,
    &WINOGRAD_2X2_BWD_FILTER,
    &GEMM_BWD_FILTER,
    &GEMM_BWD_FILTER_BATCH,
    &IMPLICIT_GEMM_BWD_FILTER,
    &DirectBwdFilter,
];

impl Registered for ConvBackwardFilter {
    fn algorithms() -> &'static [&'static dyn Algorithm<ConvBackwardFilter>] {
        BWD_FILTER
    }
}

static BWD_BIAS: &[&dyn Algorithm<ConvBackwardBias>] = &[&DirectBwdBias];

impl Registered for ConvBackwardBias {
    fn algorithms() -> &'static [&'static dyn Algorithm<ConvBackwardBias>] {
        BWD_BIAS
    }
}

/// Every registered algorithm, in preference order; the last one accepts every valid problem.
pub fn algorithms() -> &'static [&'static dyn ConvAlgorithm] {
    ALGORITHMS
}

/// The registered names, in order.
pub fn names() -> Vec<&'static str> {
    ALGORITHMS.iter().map(|a| a.name()).collect()
}

/// The algorithm called `name`.
///
/// # Errors
/// [`Error::UnknownAlgorithm`] listing the known names.
pub fn find(name: &str) -> Result<&'static dyn ConvAlgorithm> {
    ALGORITHMS
        .iter()
        .copied()
        .find(|a| a.name() == name)
        .ok_or_else(|| Error::UnknownAlgorithm {
            name: name.into(),
            known: names().join(", "),
        })
}
