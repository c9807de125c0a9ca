//! The `direct` algorithm: its [`ConvAlgorithm`] implementation, which picks the widest
//! tile kernel the CPU runs and hands it to the frame of `super`.

use crate::conv::{AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext, ReducedWeights};
#[cfg(target_arch = "x86_64")]
use crate::cpu::{Feature, Features};
use crate::desc::ConvProblem;
use crate::error::{Error, Result};
use crate::op::{Tensor, TensorMut};
use crate::runtime::parallel::SharedOut;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512};
use crate::simd::{Scalar, Token};

#[cfg(target_arch = "x86_64")]
use super::{avx2_tile, avx512_portable_tile};
#[cfg(target_arch = "x86_64")]
use super::{avx512, TILE_AVX512};
use super::{frame, portable_tile, Elem, Geometry, TileArgs, TILE_PORTABLE};

/// The direct convolution.
pub struct Direct;

impl ConvAlgorithm for Direct {
    fn name(&self) -> &'static str {
        "direct"
    }

    fn check(&self, _: &ConvProblem) -> std::result::Result<(), String> {
        Ok(())
    }

    fn workspace_bytes(&self, _: &ConvProblem) -> usize {
        0
    }

    fn deterministic(&self) -> bool {
        true
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
        let AlgoWeights::Plain(w) = w else {
            return Err(no_prepared_form());
        };
        run_typed(ctx, problem, x, w, y, epi)
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
        let ReducedWeights::Plain(w) = w else {
            return Err(no_prepared_form());
        };
        match x {
            Tensor::F32(x) => run_of_x(ctx, problem, x, w, y, epi),
            Tensor::Bf16(x) => run_of_x(ctx, problem, x, w, y, epi),
            Tensor::F16(x) => run_of_x(ctx, problem, x, w, y, epi),
        }
    }
}

fn no_prepared_form() -> Error {
    Error::Declined {
        algo: "direct".into(),
        reason: "has no prepared form of the filter".into(),
    }
}

/// A call on x of `E`: w of `E`, or f32 (weights "prepared" for `direct` hold the plain
/// filter, rounded to the problem's type: rounded back, exactly, into a buffer of the
/// filter's size); y of `E` or f32.
fn run_of_x<E: Elem>(
    ctx: &ExecContext<'_>,
    problem: &ConvProblem,
    x: &[E],
    w: Tensor<'_>,
    y: &mut TensorMut<'_>,
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
    let narrowed;
    let w: &[E] = match (E::of(w), w) {
        (Some(w), _) => w,
        (None, Tensor::F32(w32)) => {
            let mut v = crate::alloc::try_vec_with_capacity(w32.len(), "direct's filter")?;
            v.extend(w32.iter().map(|&e| E::narrow(e)));
            narrowed = v;
            &narrowed
        }
        (None, w) => {
            return Err(Error::bad(
                "w.dtype",
                w.dtype().name(),
                format!("x holds {} elements", E::DTYPE.name()),
            ))
        }
    };
    let y_type = y.dtype();
    if let TensorMut::F32(y) = y {
        return run_typed(ctx, problem, x, w, y, epi);
    }
    match E::of_mut(y) {
        Some(y) => run_typed(ctx, problem, x, w, y, epi),
        None => Err(Error::bad(
            "y.dtype",
            y_type.name(),
            format!("y holds x's type ({}) or f32", E::DTYPE.name()),
        )),
    }
}

/// Runs the frame with the widest tile kernel the CPU runs, for x and w of `E` and y of `O`.
fn run_typed<E: Elem, O: Elem>(
    ctx: &ExecContext<'_>,
    problem: &ConvProblem,
    x: &[E],
    w: &[E],
    y: &mut [O],
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
    let geo = Geometry::new(problem);
    let out = SharedOut::new(y);
    // The frame with a token, the operands, a tile shape and its kernel.
    macro_rules! frame {
        ($s:expr, $x:expr, $w:expr, $tile:expr, $kernel:expr) => {
            frame($s, ctx, &geo, $x, $w, &out, epi, $tile, $kernel)
        };
    }
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(s) = Avx512::new(ctx.features) {
            if let (Some(x), Some(w)) = (E::as_f32(x), E::as_f32(w)) {
                return frame!(s, x, w, TILE_AVX512, avx512::tile);
            }
            // bf16 and f16: 16-bit masked loads where the CPU has AVX512-BW and VL (every
            // AVX-512 CPU but the first Xeon Phi), else lanes assembled one by one.
            let bw = Features::of(&[Feature::Avx512Bw, Feature::Avx512Vl]);
            let usable = ctx.features.intersection(Features::detected());
            if usable.contains_all(bw) {
                return frame!(s, x, w, TILE_AVX512, avx512::tile_reduced::<E>);
            }
            return frame!(s, x, w, TILE_AVX512, avx512_portable_tile::<E>);
        }
        if let Some(s) = Avx2::new(ctx.features) {
            return frame!(s, x, w, TILE_PORTABLE, avx2_tile::<E>);
        }
    }
    let portable =
        |_: Scalar, a: &TileArgs<'_, 8, E>, o: &mut [f32], _| portable_tile::<8, false, E>(a, o);
    frame!(Scalar::new(), x, w, TILE_PORTABLE, portable)
}
