//! The `direct` algorithm: its [`ConvAlgorithm`] implementation, which picks the widest
//! tile kernel the CPU runs and hands it to the frame of `super`.

use crate::conv::{AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext};
use crate::desc::ConvProblem;
use crate::error::{Error, Result};
use crate::runtime::parallel::SharedOut;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512};
use crate::simd::{Scalar, Token};

#[cfg(target_arch = "x86_64")]
use super::{avx2_tile, avx512, TILE_AVX512};
use super::{frame, portable_tile, Geometry, TileArgs, TILE_PORTABLE};

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
            return Err(Error::Declined {
                algo: self.name().into(),
                reason: "has no prepared form of the filter".into(),
            });
        };
        let geo = Geometry::new(problem);
        let out = SharedOut::new(y);
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(s) = Avx512::new(ctx.features) {
                return frame::<_, 16>(s, ctx, &geo, x, w, &out, epi, TILE_AVX512, avx512::tile);
            }
            if let Some(s) = Avx2::new(ctx.features) {
                return frame::<_, 8>(s, ctx, &geo, x, w, &out, epi, TILE_PORTABLE, avx2_tile);
            }
        }
        let portable =
            |_: Scalar, a: &TileArgs<'_, 8>, o: &mut [f32], _| portable_tile::<8, false>(a, o);
        frame::<_, 8>(
            Scalar::new(),
            ctx,
            &geo,
            x,
            w,
            &out,
            epi,
            TILE_PORTABLE,
            portable,
        )
    }
}
