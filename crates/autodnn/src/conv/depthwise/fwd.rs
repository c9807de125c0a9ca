//! The `depthwise` algorithm: [`Depthwise`] and its [`ConvAlgorithm`] implementation (the
//! checks, the filter's preparation for the NHWC-like frame, the dispatch to the widest kernel
//! set the CPU runs).

use crate::conv::{AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext, ReducedWeights};
#[cfg(target_arch = "x86_64")]
use crate::cpu::{Feature, Features};
use crate::desc::ConvProblem;
use crate::error::{Error, Result};
use crate::op::tensor::widen;
use crate::op::{Tensor, TensorMut};
use crate::runtime::parallel::SharedOut;
use crate::simd::Scalar;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512, Avx512Bf16, Token};

use super::channels_last::{channels_last, channels_last_staged};
use super::filter::ClWeights;
use super::geometry::{activates_after, mode_of, Geo, Mode};
#[cfg(target_arch = "x86_64")]
use super::kernels::{avx2_set, avx512_reduced, avx512_set};
use super::kernels::{portable_set, KernelSet};
use super::planar::{planar, planar_staged};
#[cfg(target_arch = "x86_64")]
use super::simd::Bf16Cvt;
use super::simd::{Elem, Simd};
use super::stage::YOut;

/// The depthwise convolution.
pub struct Depthwise;

impl ConvAlgorithm for Depthwise {
    fn name(&self) -> &'static str {
        "depthwise"
    }

    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        if p.c_per_group() != 1 {
            return Err(format!(
                "needs groups == input channels (one input channel per group), got {} groups \
                 for {} input channels",
                p.groups(),
                p.x().c()
            ));
        }
        mode_of(p).map(|_| ())
    }

    fn workspace_bytes(&self, _: &ConvProblem) -> usize {
        0
    }

    fn deterministic(&self) -> bool {
        true
    }

    fn prepare(
        &self,
        _ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        let mode = mode_of(problem).map_err(|reason| self.declined(reason))?;
        if mode == Mode::Planar {
            return Ok(None);
        }
        let g = Geo::new(problem);
        let (k, taps) = (g.k, g.taps());
        let mut out =
            crate::alloc::try_vec_with_capacity(k * taps, "depthwise's prepared weights")?;
        for t in 0..taps {
            let ti = g.tap_index(t);
            out.extend((0..k).map(|kk| w[kk * taps + ti]));
        }
        Ok(Some(out))
    }

    fn reads_reduced(&self) -> bool {
        true
    }

    fn run_reduced(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        x: Tensor<'_>,
        w: ReducedWeights<'_>,
        y: &mut TensorMut<'_>,
        _workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let mode = mode_of(problem).map_err(|reason| self.declined(reason))?;
        let g = Geo::new(problem);
        let (wlen, ylen) = (g.k * g.taps(), y.len());
        let w_len = match w {
            ReducedWeights::Plain(t) => t.len(),
            ReducedWeights::Prepared(p) => p.len(),
        };
        assert!(
            x.len() >= problem.x().span()
                && w_len >= wlen
                && ylen >= problem.y().span()
                && epi.bias.is_none_or(|b| b.len() >= g.k)
                && epi.residual.is_none_or(|z| z.len() >= problem.y().span()),
            "depthwise: buffers shorter than the problem (the handle checks them)"
        );
        // A bf16 filter, as bf16 or as prepared f32 (one rounded to the problem's type).
        #[cfg(target_arch = "x86_64")]
        let bf16_filter = problem.w().dtype() == crate::desc::DataType::Bf16;
        // The filter in f32 (K·R·S values, widened once), or prepared (f32 already).
        let widened;
        let weights = match (mode, w) {
            (_, ReducedWeights::Plain(Tensor::F32(w))) => ClWeights::Plain(w),
            (_, ReducedWeights::Plain(w)) => {
                let mut v = crate::alloc::try_vec(wlen, 0.0, "depthwise's widened filter")?;
                widen(w, &mut v);
                widened = v;
                ClWeights::Plain(&widened)
            }
            (Mode::ChannelsLast, ReducedWeights::Prepared(w)) => ClWeights::Prepared(w),
            (Mode::Planar, ReducedWeights::Prepared(_)) => {
                return Err(self.declined("has no prepared form of an NCHW-like filter".into()))
            }
        };
        // bf16 and f16 problems (x and y of one type) whose epilogue the kernels apply in
        // full run the kernels over their tensors, converted in registers (both frames).
        #[cfg(target_arch = "x86_64")]
        if epi.residual.is_none() && !activates_after(epi) {
            if let Some(s) = Avx512::new(ctx.features) {
                let bw = Features::of(&[Feature::Avx512Bw, Feature::Avx512Vl]);
                if ctx
                    .features
                    .intersection(Features::detected())
                    .contains_all(bw)
                {
                    let (w, g) = (weights, &g);
                    match (x, &mut *y) {
                        (Tensor::Bf16(x), TensorMut::Bf16(y)) => {
                            if Avx512Bf16::new(ctx.features).is_some() {
                                let y = Bf16Cvt::slice_mut(y);
                                // The dot-product kernels take the filter's values as bf16.
                                let set = if bf16_filter {
                                    &avx512_reduced::BF16_DOT
                                } else {
                                    &avx512_reduced::BF16_CVT
                                };
                                let out = SharedOut::new(y);
                                return run_set(s, set, ctx, mode, g, x, w, &out, epi);
                            }
                            let (out, set) = (SharedOut::new(y), &avx512_reduced::BF16);
                            return run_set(s, set, ctx, mode, g, x, w, &out, epi);
                        }
                        (Tensor::F16(x), TensorMut::F16(y)) => {
                            let (out, set) = (SharedOut::new(y), &avx512_reduced::F16);
                            return run_set(s, set, ctx, mode, g, x, w, &out, epi);
                        }
                        _ => {}
                    }
                }
            }
        }
        let (w, out) = (weights, YOut::new(y));
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(s) = Avx512::new(ctx.features) {
                return run_staged(s, &avx512_set::SET, ctx, mode, &g, x, w, &out, epi);
            }
            if let Some(s) = Avx2::new(ctx.features) {
                return run_staged(s, &avx2_set::SET, ctx, mode, &g, x, w, &out, epi);
            }
        }
        run_staged(
            Scalar::new(),
            &portable_set::SET,
            ctx,
            mode,
            &g,
            x,
            w,
            &out,
            epi,
        )
    }

    fn run(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        _workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let mode = mode_of(problem).map_err(|reason| self.declined(reason))?;
        let g = Geo::new(problem);
        let weights = match (mode, w) {
            (_, AlgoWeights::Plain(w)) => ClWeights::Plain(w),
            (Mode::ChannelsLast, AlgoWeights::Prepared(w)) => ClWeights::Prepared(w),
            (Mode::Planar, AlgoWeights::Prepared(_)) => {
                return Err(self.declined("has no prepared form of an NCHW-like filter".into()))
            }
        };
        // The kernels address memory through raw pointers: check once that every coordinate
        // they may touch lies inside the buffers.
        let wlen = g.k * g.taps();
        let w_ok = match weights {
            ClWeights::Plain(w) | ClWeights::Prepared(w) => w.len() >= wlen,
        };
        assert!(
            x.len() >= problem.x().span()
                && y.len() >= problem.y().span()
                && w_ok
                && epi.bias.is_none_or(|b| b.len() >= g.k)
                && epi.residual.is_none_or(|z| z.len() >= problem.y().span()),
            "depthwise: buffers shorter than the problem (the handle checks them)"
        );
        let out = SharedOut::new(y);
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(s) = Avx512::new(ctx.features) {
                return run_set(s, &avx512_set::SET, ctx, mode, &g, x, weights, &out, epi);
            }
            if let Some(s) = Avx2::new(ctx.features) {
                return run_set(s, &avx2_set::SET, ctx, mode, &g, x, weights, &out, epi);
            }
        }
        run_set(
            Scalar::new(),
            &portable_set::SET,
            ctx,
            mode,
            &g,
            x,
            weights,
            &out,
            epi,
        )
    }
}

/// Runs the frame of `mode` with the kernel set of token `simd`.
#[allow(clippy::too_many_arguments)]
fn run_set<S: Simd, X: Elem<S>, Y: Elem<S>>(
    simd: S,
    set: &KernelSet<S, X, Y>,
    ctx: &ExecContext<'_>,
    mode: Mode,
    g: &Geo,
    x: &[X],
    weights: ClWeights<'_>,
    out: &SharedOut<'_, Y>,
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
    match mode {
        Mode::Planar => planar(simd, ctx, g, &set.plane, x, weights.data(), out, epi),
        Mode::ChannelsLast => channels_last(simd, ctx, g, set, x, weights, out, epi),
    }
}

/// Runs the staged frame of `mode` with the kernel set of token `simd`.
#[allow(clippy::too_many_arguments)]
fn run_staged<S: Simd>(
    simd: S,
    set: &KernelSet<S>,
    ctx: &ExecContext<'_>,
    mode: Mode,
    g: &Geo,
    x: Tensor<'_>,
    w: ClWeights<'_>,
    y: &YOut<'_>,
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
    match mode {
        Mode::Planar => planar_staged(simd, ctx, g, set, x, w.data(), y, epi),
        Mode::ChannelsLast => channels_last_staged(simd, ctx, g, set, x, w, y, epi),
    }
}

impl Depthwise {
    fn declined(&self, reason: String) -> Error {
        Error::Declined {
            algo: self.name().into(),
            reason,
        }
    }
}
