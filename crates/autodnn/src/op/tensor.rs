//! Tensor views that carry their element type.

use crate::cpu::Features;
use crate::desc::DataType;
use crate::error::{Error, Result};
use crate::runtime::parallel::{for_each_with, SharedOut};
use crate::runtime::ExecContext;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512, Token};
use half::{bf16, f16};

/// A tensor's elements, read-only, tagged with their type.
#[derive(Debug, Clone, Copy)]
pub enum Tensor<'a> {
    /// 32-bit floats.
    F32(&'a [f32]),
    /// bfloat16.
    Bf16(&'a [bf16]),
    /// IEEE half precision.
    F16(&'a [f16]),
}

/// A tensor's elements, writable, tagged with their type.
#[derive(Debug)]
pub enum TensorMut<'a> {
    /// 32-bit floats.
    F32(&'a mut [f32]),
    /// bfloat16.
    Bf16(&'a mut [bf16]),
    /// IEEE half precision.
    F16(&'a mut [f16]),
}

fn wrong(field: &str, want: DataType, got: DataType) -> Error {
    Error::Unsupported {
        what: format!(
            "{field} holds {} elements where {} was expected",
            got.name(),
            want.name()
        ),
    }
}

impl<'a> Tensor<'a> {
    /// The element type.
    pub fn dtype(&self) -> DataType {
        match self {
            Tensor::F32(_) => DataType::F32,
            Tensor::Bf16(_) => DataType::Bf16,
            Tensor::F16(_) => DataType::F16,
        }
    }
    /// Elements held.
    pub fn len(&self) -> usize {
        match self {
            Tensor::F32(v) => v.len(),
            Tensor::Bf16(v) => v.len(),
            Tensor::F16(v) => v.len(),
        }
    }
    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The f32 elements.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming `field` for another element type.
    pub fn f32(&self, field: &str) -> Result<&'a [f32]> {
        match *self {
            Tensor::F32(v) => Ok(v),
            _ => Err(wrong(field, DataType::F32, self.dtype())),
        }
    }
}

impl<'a> From<&'a [f32]> for Tensor<'a> {
    fn from(v: &'a [f32]) -> Tensor<'a> {
        Tensor::F32(v)
    }
}
impl<'a> From<&'a [bf16]> for Tensor<'a> {
    fn from(v: &'a [bf16]) -> Tensor<'a> {
        Tensor::Bf16(v)
    }
}
impl<'a> From<&'a [f16]> for Tensor<'a> {
    fn from(v: &'a [f16]) -> Tensor<'a> {
        Tensor::F16(v)
    }
}

impl<'a> TensorMut<'a> {
    /// The element type.
    pub fn dtype(&self) -> DataType {
        match self {
            TensorMut::F32(_) => DataType::F32,
            TensorMut::Bf16(_) => DataType::Bf16,
            TensorMut::F16(_) => DataType::F16,
        }
    }
    /// Elements held.
    pub fn len(&self) -> usize {
        match self {
            TensorMut::F32(v) => v.len(),
            TensorMut::Bf16(v) => v.len(),
            TensorMut::F16(v) => v.len(),
        }
    }
    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The f32 elements.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming `field` for another element type.
    pub fn f32(&mut self, field: &str) -> Result<&mut [f32]> {
        let dt = self.dtype();
        match self {
            TensorMut::F32(v) => Ok(v),
            _ => Err(wrong(field, DataType::F32, dt)),
        }
    }
    /// A read-only view of the same elements.
    pub fn as_tensor(&self) -> Tensor<'_> {
        match self {
            TensorMut::F32(v) => Tensor::F32(v),
            TensorMut::Bf16(v) => Tensor::Bf16(v),
            TensorMut::F16(v) => Tensor::F16(v),
        }
    }
}

impl<'a> From<&'a mut [f32]> for TensorMut<'a> {
    fn from(v: &'a mut [f32]) -> TensorMut<'a> {
        TensorMut::F32(v)
    }
}

/// An owned tensor of any element type: the timer's scratch output, or a snapshot of an
/// output the call also reads.
#[derive(Debug, Clone)]
pub enum TensorBuf {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// bfloat16.
    Bf16(Vec<bf16>),
    /// IEEE half precision.
    F16(Vec<f16>),
}

impl TensorBuf {
    /// `n` zeros of `dtype`, or [`Error::OutOfMemory`] naming `what`.
    ///
    /// # Errors
    /// Allocation failures.
    pub fn zeros(dtype: DataType, n: usize, what: &str) -> Result<TensorBuf> {
        Ok(match dtype {
            DataType::F32 => TensorBuf::F32(crate::alloc::try_vec(n, 0.0, what)?),
            DataType::Bf16 => TensorBuf::Bf16(crate::alloc::try_vec(n, bf16::ZERO, what)?),
            DataType::F16 => TensorBuf::F16(crate::alloc::try_vec(n, f16::ZERO, what)?),
        })
    }
    /// A copy of `t`.
    ///
    /// # Errors
    /// Allocation failures.
    pub fn copy_of(t: Tensor<'_>, what: &str) -> Result<TensorBuf> {
        Ok(match t {
            Tensor::F32(v) => TensorBuf::F32(crate::alloc::try_copy(v, what)?),
            Tensor::Bf16(v) => TensorBuf::Bf16(crate::alloc::try_copy(v, what)?),
            Tensor::F16(v) => TensorBuf::F16(crate::alloc::try_copy(v, what)?),
        })
    }
    /// `v` rounded to `dtype` (to nearest even), or [`Error::OutOfMemory`] naming `what`.
    ///
    /// # Errors
    /// Allocation failures.
    pub fn from_f32(v: &[f32], dtype: DataType, what: &str) -> Result<TensorBuf> {
        let mut b = TensorBuf::zeros(dtype, v.len(), what)?;
        narrow(v, &mut b.as_mut(), Features::detected());
        Ok(b)
    }
    /// Widens the elements to f32 into the front of `dst` (as many as both hold).
    pub fn widen_into(&self, dst: &mut [f32]) {
        let n = dst.len().min(self.len());
        widen(self.view(), &mut dst[..n]);
    }
    /// Elements held.
    pub fn len(&self) -> usize {
        self.view().len()
    }
    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The elements, read-only.
    pub fn view(&self) -> Tensor<'_> {
        match self {
            TensorBuf::F32(v) => Tensor::F32(v),
            TensorBuf::Bf16(v) => Tensor::Bf16(v),
            TensorBuf::F16(v) => Tensor::F16(v),
        }
    }
    /// The buffer as an output.
    pub fn as_mut(&mut self) -> TensorMut<'_> {
        match self {
            TensorBuf::F32(v) => TensorMut::F32(v),
            TensorBuf::Bf16(v) => TensorMut::Bf16(v),
            TensorBuf::F16(v) => TensorMut::F16(v),
        }
    }
    /// Writes the buffer back over the front of `out` (same element type; otherwise nothing).
    pub fn restore_into(&self, out: &mut TensorMut<'_>) {
        match (self, out) {
            (TensorBuf::F32(s), TensorMut::F32(o)) => o[..s.len()].copy_from_slice(s),
            (TensorBuf::Bf16(s), TensorMut::Bf16(o)) => o[..s.len()].copy_from_slice(s),
            (TensorBuf::F16(s), TensorMut::F16(o)) => o[..s.len()].copy_from_slice(s),
            _ => {}
        }
    }
}

/// Widens the first `dst.len()` elements of `src` to f32 (exact for every type).
pub(crate) fn widen(src: Tensor<'_>, dst: &mut [f32]) {
    widen_with(src, dst, Features::detected());
}

/// [`widen`] in vectors where the usable `features` have them (bf16: AVX-512 or AVX2; f16:
/// half's F16C path).
pub(crate) fn widen_with(src: Tensor<'_>, dst: &mut [f32], features: Features) {
    use half::slice::HalfFloatSliceExt;
    let n = dst.len();
    match src {
        Tensor::F32(v) => dst.copy_from_slice(&v[..n]),
        Tensor::Bf16(v) => widen_bf16(&v[..n], dst, features),
        Tensor::F16(v) => v[..n].convert_to_f32_slice(dst),
    }
}

/// bf16 to f32: the bits shifted into the upper half (exact; a NaN keeps its payload), in a
/// loop that vectorises.
#[inline(always)]
fn widen_bf16_body(src: &[bf16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits(u32::from(s.to_bits()) << 16);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn widen_bf16_avx512(_: Avx512, src: &[bf16], dst: &mut [f32]) {
    widen_bf16_body(src, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn widen_bf16_avx2(_: Avx2, src: &[bf16], dst: &mut [f32]) {
    widen_bf16_body(src, dst)
}

fn widen_bf16(src: &[bf16], dst: &mut [f32], features: Features) {
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(t) = Avx512::new(features) {
            // SAFETY: the token proves the CPU runs AVX-512F.
            return unsafe { widen_bf16_avx512(t, src, dst) };
        }
        if let Some(t) = Avx2::new(features) {
            // SAFETY: the token proves the CPU runs AVX2 and FMA.
            return unsafe { widen_bf16_avx2(t, src, dst) };
        }
    }
    let _ = features;
    widen_bf16_body(src, dst)
}

/// Widens `src[start..start + dst.len()]` to f32 into `dst` (exact for every type).
///
/// # Panics
/// If the range lies outside `src` (callers check their coordinates against the tensor).
pub(crate) fn widen_at(src: Tensor<'_>, start: usize, dst: &mut [f32], features: Features) {
    let n = dst.len();
    let part = match src {
        Tensor::F32(v) => Tensor::F32(&v[start..][..n]),
        Tensor::Bf16(v) => Tensor::Bf16(&v[start..][..n]),
        Tensor::F16(v) => Tensor::F16(&v[start..][..n]),
    };
    widen_with(part, dst, features);
}

/// Rounds `src` into the first `src.len()` elements of `dst` (round to nearest even; NaN stays
/// NaN, values beyond the type's range become infinities), in vectors where the usable
/// `features` have them (bf16: AVX-512 or AVX2; f16: half's F16C path).
pub(crate) fn narrow(src: &[f32], dst: &mut TensorMut<'_>, features: Features) {
    use half::slice::HalfFloatSliceExt;
    let n = src.len();
    match dst {
        TensorMut::F32(v) => v[..n].copy_from_slice(src),
        TensorMut::Bf16(v) => narrow_bf16(src, &mut v[..n], features),
        TensorMut::F16(v) => v[..n].convert_from_f32_slice(src),
    }
}

/// The elements of `t` from `at` on.
///
/// # Panics
/// If `at` is past the end (callers check their coordinates against the tensor).
pub(crate) fn tail(t: Tensor<'_>, at: usize) -> Tensor<'_> {
    match t {
        Tensor::F32(v) => Tensor::F32(&v[at..]),
        Tensor::Bf16(v) => Tensor::Bf16(&v[at..]),
        Tensor::F16(v) => Tensor::F16(&v[at..]),
    }
}

/// Elements below which a conversion stays on the calling thread (and the size of the
/// parts above it, at the most one part per thread).
const PAR_CONVERT_MIN: usize = 1 << 14;

/// Runs `f(part, offset)` over `dst` cut into parts of the context's threads, each part at
/// least [`PAR_CONVERT_MIN`] elements; one call on the calling thread when `dst` is smaller.
fn split_parts<T: Copy + Send>(
    ctx: &ExecContext<'_>,
    dst: &mut [T],
    f: impl Fn(&mut [T], usize) + Sync,
) -> Result<()> {
    let n = dst.len();
    let parts = (n / PAR_CONVERT_MIN).clamp(1, ctx.threads.max(1));
    if parts == 1 {
        f(dst, 0);
        return Ok(());
    }
    let per = n.div_ceil(parts);
    let out = SharedOut::new(dst);
    for_each_with(
        ctx,
        parts,
        || Ok(()),
        |_, i| {
            let s = i * per;
            // SAFETY: part i's elements belong to it alone.
            let d = unsafe { out.slice_mut(s, per.min(n - s)) };
            f(d, s);
        },
    )
}

/// [`widen_at`] on the context's threads (large ranges in parts).
///
/// # Errors
/// Out of memory for the threads' bookkeeping.
pub(crate) fn widen_at_par(
    ctx: &ExecContext<'_>,
    src: Tensor<'_>,
    start: usize,
    dst: &mut [f32],
) -> Result<()> {
    let features = ctx.features;
    split_parts(ctx, dst, |d, s| widen_at(src, start + s, d, features))
}

/// Rounds `src` into `dst[start..start + src.len()]`, as [`narrow`] does, on the context's
/// threads (large ranges in parts).
///
/// # Errors
/// Out of memory for the threads' bookkeeping.
pub(crate) fn narrow_at_par(
    ctx: &ExecContext<'_>,
    src: &[f32],
    dst: &mut TensorMut<'_>,
    start: usize,
) -> Result<()> {
    use half::slice::HalfFloatSliceExt;
    let (n, features) = (src.len(), ctx.features);
    match dst {
        TensorMut::F32(v) => split_parts(ctx, &mut v[start..][..n], |d, s| {
            d.copy_from_slice(&src[s..s + d.len()])
        }),
        TensorMut::Bf16(v) => split_parts(ctx, &mut v[start..][..n], |d, s| {
            narrow_bf16(&src[s..s + d.len()], d, features)
        }),
        TensorMut::F16(v) => split_parts(ctx, &mut v[start..][..n], |d, s| {
            d.convert_from_f32_slice(&src[s..s + d.len()])
        }),
    }
}

/// f32 to bf16 bits, rounded to nearest even, NaN kept (quiet): what `half::bf16::from_f32`
/// computes, without branches, so that loops of it vectorise.
#[inline(always)]
pub(crate) fn bf16_bits(x: u32) -> u16 {
    let nan = x & 0x7fff_ffff > 0x7f80_0000;
    let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
    (if nan { (x >> 16) | 0x40 } else { rounded }) as u16
}

#[inline(always)]
fn narrow_bf16_body(src: &[f32], dst: &mut [bf16]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = bf16::from_bits(bf16_bits(s.to_bits()));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn narrow_bf16_avx512(_: Avx512, src: &[f32], dst: &mut [bf16]) {
    narrow_bf16_body(src, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn narrow_bf16_avx2(_: Avx2, src: &[f32], dst: &mut [bf16]) {
    narrow_bf16_body(src, dst)
}

fn narrow_bf16(src: &[f32], dst: &mut [bf16], features: Features) {
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(t) = Avx512::new(features) {
            // SAFETY: the token proves the CPU runs AVX-512F.
            return unsafe { narrow_bf16_avx512(t, src, dst) };
        }
        if let Some(t) = Avx2::new(features) {
            // SAFETY: the token proves the CPU runs AVX2 and FMA.
            return unsafe { narrow_bf16_avx2(t, src, dst) };
        }
    }
    let _ = features;
    narrow_bf16_body(src, dst)
}

/// Values that test a rounding to bf16: ties both ways, carries into the exponent, the
/// largest finite values (rounding to infinity), subnormals (rounding to subnormals and up to
/// the least normal), zeros, infinities and NaNs of both signs, and a sweep of bit patterns.
#[cfg(test)]
pub(crate) fn bf16_rounding_cases() -> Vec<f32> {
    let mut v: Vec<f32> = [
        0x3f80_8000u32,
        0x3f81_8000,
        0x3f80_8001,
        0x3f80_7fff,
        0x3fff_ffff,
        0x7f7f_ffff,
        0x7f7f_7fff,
        0x0000_0001,
        0x0000_8000,
        0x0001_8000,
        0x0001_2345,
        0x807f_ffff,
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
        0x7fc0_0001,
        0x7f80_0001,
        0xff80_0001,
        0xffbf_ffff,
        0xffff_ffff,
        0,
        0x8000_0000,
    ]
    .iter()
    .map(|&b| f32::from_bits(b))
    .collect();
    v.extend((0..100_000u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_matches_half_on_every_path() {
        let v = bf16_rounding_cases();
        for isa in crate::cpu::Isa::ALL {
            let mut got = vec![bf16::ZERO; v.len()];
            narrow_bf16(&v, &mut got, isa.usable());
            for (x, g) in v.iter().zip(&got) {
                assert_eq!(
                    g.to_bits(),
                    bf16::from_f32(*x).to_bits(),
                    "{isa:?} {:#x}",
                    x.to_bits()
                );
            }
        }
    }

    #[test]
    fn bf16_widening_matches_half_on_every_path() {
        // Every bf16 bit pattern (NaNs, infinities, subnormals and zeros of both signs among
        // them), at lengths that leave vector tails.
        let v: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        for isa in crate::cpu::Isa::ALL {
            for len in [v.len(), 17, 3] {
                let mut got = vec![0f32; len];
                widen_with(Tensor::Bf16(&v[..len]), &mut got, isa.usable());
                for (x, g) in v.iter().zip(&got) {
                    // The bits moved up, exactly (NaNs keep their payload, signalling ones
                    // too, as the kernels' own widening does; half's to_f32 quiets them).
                    let bits = u32::from(x.to_bits()) << 16;
                    assert_eq!(g.to_bits(), bits, "{isa:?} {:#x}", x.to_bits());
                    if !x.is_nan() {
                        assert_eq!(*g, x.to_f32(), "{isa:?} {:#x}", x.to_bits());
                    }
                }
            }
        }
    }
}
