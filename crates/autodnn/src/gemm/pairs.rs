//! Packing for the bf16 kernel families ([`PackFormat::Bf16Pairs`], [`PackFormat::AmxTiles`]):
//! any operand's f32 panels, as its own [`PackA`] or [`PackB`] packs them, converted in place
//! by the family's conversion (rounded into pairs, and for AMX's tiles padded or regrouped),
//! or its pair panels where the packer writes them directly (bf16 data), regrouped for the
//! family where its format differs. Every packer (strided matrices, implicit-GEMM
//! convolution) so serves the bf16 kernels unchanged. Operands are not read in place (that
//! is f32); pre-packed panels are read where they were prepared in the family's format
//! ([`PackA::prepacked_pairs_a`]).

use super::kernels::{KernelSet, PackFormat, PairsConversion, PairsFn};
use super::pack::{PackA, PackB};
use crate::Result;

/// A packer whose panels are converted to a bf16 family's format after packing.
pub(crate) struct Pairs<'a, P: ?Sized> {
    inner: &'a P,
    format: PackFormat,
    convert: &'static PairsConversion,
}

impl<'a, P: ?Sized> Pairs<'a, P> {
    /// `inner`'s panels as `ks` reads them, or `None` when `ks` takes f32 panels.
    pub(crate) fn for_family(ks: &KernelSet, inner: &'a P) -> Option<Pairs<'a, P>> {
        match (ks.packing.is_bf16(), ks.pairs) {
            (true, Some(convert)) => Some(Pairs {
                inner,
                format: ks.packing,
                convert,
            }),
            _ => None,
        }
    }

    /// Converts the panels of `dst` (each `depth` steps of `w`) with `f`.
    fn convert(f: PairsFn, dst: &mut [f32], w: usize, depth: usize) {
        for panel in dst.chunks_exact_mut(w * depth) {
            // SAFETY: the family that supplied `f` was chosen only where the CPU has its
            // features (`kernel_set_for` intersects with the detected ones); the panel is a
            // slice of `depth·w` floats, `w` the family's register tile side.
            unsafe { f(panel.as_mut_ptr(), w, depth) };
        }
    }
}

impl<P: PackA + ?Sized> PackA for Pairs<'_, P> {
    fn pack_a(
        &self,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        if self.inner.pack_a_pairs(i0, mc, p0, kc, mr, dst)? {
            if let Some(f) = self.convert.a_from_pairs {
                Self::convert(f, dst, mr, kc);
            }
        } else {
            self.inner.pack_a(i0, mc, p0, kc, mr, dst)?;
            Self::convert(self.convert.a_from_f32, dst, mr, kc);
        }
        Ok(())
    }

    fn prepacked_a(&self, i0: usize, mc: usize, p0: usize, kc: usize, mr: usize) -> Option<&[f32]> {
        self.inner
            .prepacked_pairs_a(self.format, i0, mc, p0, kc, mr)
    }
}

impl<P: PackB + ?Sized> PackB for Pairs<'_, P> {
    fn pack_b(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        if self.inner.pack_b_pairs(p0, kc, j0, nc, nr, dst)? {
            if let Some(f) = self.convert.b_from_pairs {
                Self::convert(f, dst, nr, kc);
            }
        } else {
            self.inner.pack_b(p0, kc, j0, nc, nr, dst)?;
            Self::convert(self.convert.b_from_f32, dst, nr, kc);
        }
        Ok(())
    }

    fn prepacked_b(&self, p0: usize, kc: usize, j0: usize, nc: usize, nr: usize) -> Option<&[f32]> {
        self.inner
            .prepacked_pairs_b(self.format, p0, kc, j0, nc, nr)
    }
}
