//! bf16 and f16 tensors in both frames, read in their own types. On AVX-512 (with BW and
//! VL), problems whose x and y have one reduced type and whose epilogue the kernels apply in
//! full (no residual, no activation left to the frame) run the kernels over the tensors
//! themselves, widening lanes as they load them and rounding as they store them
//! ([`super::simd::Elem`]). Every other reduced problem is staged: each work item widens the
//! part of x it reads into an f32 stage sized to stay in cache, runs the f32 kernels on it,
//! and rounds its outputs into y once (an f32 y is written in place, as in the f32 call). The
//! kernels, their blocking and each output's order of summation are those of the f32 call,
//! so the result is the f32 call's on the widened tensors, rounded once, bit for bit; what
//! changes is the traffic: x and y cross memory in their own (half-size) types, and the
//! widened copies live in L1 or L2 only, with no workspace.

use half::{bf16, f16};

use crate::conv::EpilogueArgs;
use crate::cpu::Features;
use crate::op::tensor::{narrow, widen_at, widen_with};
use crate::op::{Tensor, TensorMut};
use crate::runtime::parallel::SharedOut;

/// f32 elements a work item stages at most (x's part, and y's when y is reduced), unless one
/// plane (NCHW-like) or one band of input rows (NHWC-like) alone is larger: 192 KiB, inside
/// the L2 of the CPUs this targets (1 MiB and up).
pub(super) const STAGE_FLOATS: usize = 48 * 1024;

/// y as the staged frames write it.
pub(super) enum YOut<'a> {
    F32(SharedOut<'a, f32>),
    Bf16(SharedOut<'a, bf16>),
    F16(SharedOut<'a, f16>),
}

impl<'a> YOut<'a> {
    pub(super) fn new(y: &'a mut TensorMut<'_>) -> YOut<'a> {
        match y {
            TensorMut::F32(v) => YOut::F32(SharedOut::new(v)),
            TensorMut::Bf16(v) => YOut::Bf16(SharedOut::new(v)),
            TensorMut::F16(v) => YOut::F16(SharedOut::new(v)),
        }
    }

    /// y itself when it is f32 (the kernels write it in place), else None (staged).
    pub(super) fn in_place(&self) -> Option<&SharedOut<'a, f32>> {
        match self {
            YOut::F32(o) => Some(o),
            _ => None,
        }
    }

    /// Rounds `src` into elements `start..start + src.len()` of y (to nearest even).
    ///
    /// # Safety
    /// The calling work item alone accesses these elements.
    pub(super) unsafe fn store_run(&self, start: usize, src: &[f32], features: Features) {
        let n = src.len();
        // SAFETY (each arm): the caller's contract; slice_mut checks the range.
        unsafe {
            match self {
                YOut::F32(o) => o.write_slice(start, src),
                YOut::Bf16(o) => narrow(src, &mut TensorMut::Bf16(o.slice_mut(start, n)), features),
                YOut::F16(o) => narrow(src, &mut TensorMut::F16(o.slice_mut(start, n)), features),
            }
        }
    }

    /// Widens elements `start..start + dst.len()` of y (its prior contents) into `dst`.
    ///
    /// # Safety
    /// As [`YOut::store_run`].
    pub(super) unsafe fn load_run(&self, start: usize, dst: &mut [f32], features: Features) {
        let n = dst.len();
        // SAFETY (each arm): the caller's contract; slice_mut checks the range.
        unsafe {
            match self {
                YOut::F32(o) => dst.copy_from_slice(o.slice_mut(start, n)),
                YOut::Bf16(o) => widen_with(Tensor::Bf16(o.slice_mut(start, n)), dst, features),
                YOut::F16(o) => widen_with(Tensor::F16(o.slice_mut(start, n)), dst, features),
            }
        }
    }
}

/// Fills a staged run of outputs with what the epilogue's beta scales: the residual at
/// `off`, else y's prior contents there (left as it is when beta is 0: not read).
///
/// # Safety
/// As [`YOut::store_run`].
pub(super) unsafe fn stage_z(
    y: &YOut<'_>,
    epi: &EpilogueArgs<'_>,
    off: usize,
    dst: &mut [f32],
    features: Features,
) {
    if epi.beta == 0.0 {
        return;
    }
    match epi.residual {
        Some(z) => dst.copy_from_slice(&z[off..][..dst.len()]),
        // SAFETY: the caller's contract.
        None => unsafe { y.load_run(off, dst, features) },
    }
}

/// Widens `dst.len()` elements of x from `start` (checked against x).
pub(super) fn stage_x(x: Tensor<'_>, start: usize, dst: &mut [f32], features: Features) {
    widen_at(x, start, dst, features);
}

/// The runs of a block of a tensor that a stage holds packed, [outer][inner][len]: `outer` =
/// (count, step) and `inner` = (count, step) in the tensor's elements from `start`. Calls
/// `f(tensor offset, stage offset, length)` once per run of `len` elements, merging runs
/// that are contiguous in the tensor as well (a packed tensor's block is one call).
pub(super) fn runs(
    start: usize,
    outer: (usize, usize),
    inner: (usize, usize),
    len: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    let ((n1, s1), (n0, s0)) = (outer, inner);
    if n1 == 0 || n0 == 0 || len == 0 {
        return;
    }
    // Runs of one level: `count` of `len` elements, `step` apart, from `at` in the stage.
    let mut level = |start: usize, count: usize, step: usize, len: usize, at: usize| {
        if count == 1 || step == len {
            f(start, at, count * len);
        } else {
            for i in 0..count {
                f(start + i * step, at + i * len, len);
            }
        }
    };
    if n0 == 1 || s0 == len {
        level(start, n1, s1, n0 * len, 0);
    } else {
        for i in 0..n1 {
            level(start + i * s1, n0, s0, len, i * n0 * len);
        }
    }
}
