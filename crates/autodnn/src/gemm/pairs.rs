//! Packing for the bf16-pair kernel families ([`PackFormat::Bf16Pairs`]): any operand's f32
//! panels, as its own [`PackA`] or [`PackB`] packs them, rounded into pairs in place by the
//! family's conversion. Every packer (strided matrices, implicit-GEMM convolution) so serves
//! the bf16 kernels unchanged. Operands are not read in place (that is f32); pre-packed
//! panels are read where they were prepared as pairs ([`PackA::prepacked_pairs_a`]).

use super::kernels::{KernelSet, PackFormat, PairsFn};
use super::pack::{PackA, PackB};
use crate::Result;

/// A packer whose panels are converted to bf16 pairs after packing.
pub(crate) struct Pairs<'a, P: ?Sized> {
    inner: &'a P,
    convert: PairsFn,
}

impl<'a, P: ?Sized> Pairs<'a, P> {
    /// `inner`'s panels as `ks` reads them, or `None` when `ks` takes f32 panels.
    pub(crate) fn for_family(ks: &KernelSet, inner: &'a P) -> Option<Pairs<'a, P>> {
        match (ks.packing, ks.to_pairs) {
            (PackFormat::Bf16Pairs, Some(convert)) => Some(Pairs { inner, convert }),
            _ => None,
        }
    }

    /// Converts the `len`-element panels of `dst` (each `depth` steps of `w`).
    fn convert(&self, dst: &mut [f32], w: usize, depth: usize) {
        for panel in dst.chunks_exact_mut(w * depth) {
            // SAFETY: the family that supplied `convert` was chosen only where the CPU has
            // its features (`kernel_set_for` intersects with the detected ones); the panel
            // is a slice of `depth·w` floats.
            unsafe { (self.convert)(panel.as_mut_ptr(), w, depth) };
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
        if !self.inner.pack_a_pairs(i0, mc, p0, kc, mr, dst)? {
            self.inner.pack_a(i0, mc, p0, kc, mr, dst)?;
            self.convert(dst, mr, kc);
        }
        Ok(())
    }

    fn prepacked_a(&self, i0: usize, mc: usize, p0: usize, kc: usize, mr: usize) -> Option<&[f32]> {
        self.inner.prepacked_pairs_a(i0, mc, p0, kc, mr)
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
        if !self.inner.pack_b_pairs(p0, kc, j0, nc, nr, dst)? {
            self.inner.pack_b(p0, kc, j0, nc, nr, dst)?;
            self.convert(dst, nr, kc);
        }
        Ok(())
    }

    fn prepacked_b(&self, p0: usize, kc: usize, j0: usize, nc: usize, nr: usize) -> Option<&[f32]> {
        self.inner.prepacked_pairs_b(p0, kc, j0, nc, nr)
    }
}
