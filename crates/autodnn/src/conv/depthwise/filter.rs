//! The filter as the frames receive it: plain, or prepared for the NHWC-like frame (made by
//! `Depthwise::prepare`).

#[cfg(doc)]
use crate::conv::ConvAlgorithm;

#[cfg(doc)]
use super::fwd::Depthwise;

/// The filter as the NHWC-like frame receives it.
#[derive(Clone, Copy)]
pub(super) enum ClWeights<'a> {
    /// [K][R·S], unflipped.
    Plain(&'a [f32]),
    /// [R·S][K], flipped (see [`Depthwise::prepare`]).
    Prepared(&'a [f32]),
}

impl<'a> ClWeights<'a> {
    pub(super) fn data(self) -> &'a [f32] {
        match self {
            ClWeights::Plain(w) | ClWeights::Prepared(w) => w,
        }
    }
}
