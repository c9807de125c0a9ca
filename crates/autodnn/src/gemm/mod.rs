//! Matrix multiplication with cuBLAS semantics: `C = alpha·op(A)·op(B) + beta·C`.
//!
//! - [`GemmDesc`] describes one problem: the sizes m, n, k, the transposes and each operand's
//!   row and column strides (row-major, column-major, leading dimensions and views are all
//!   strides).
//! - [`Handle::gemm`](crate::Handle::gemm), [`Handle::gemm_batched`](crate::Handle::gemm_batched)
//!   and [`Handle::gemm_strided_batched`](crate::Handle::gemm_strided_batched) run it on the
//!   handle's threads with the handle's instruction-set cap;
//!   [`Handle::gemm_with_epilogue`](crate::Handle::gemm_with_epilogue) fuses a bias, a
//!   residual and an activation ([`Epilogue`]) into the same pass over C.
//!
//! Semantics, as in BLAS: with beta = 0, C is written without being read (NaN in C is
//! ignored); with alpha = 0 (or k = 0), A and B are not read and C becomes beta·C. m, n or
//! k may be 0. Every size, stride and buffer length is checked first; a bad one is a typed
//! [`crate::Error`] naming the field, never a panic or an out-of-bounds access.
//!
//! # Design
//! BLIS's: portable loops with packing and cache blocking (`loops.rs`: the five loops and the
//! thread split), packing behind traits ([`PackA`], [`PackB`]: implicit-GEMM convolution
//! packs panels straight from an image), block sizes as data ([`blocking`]) and one small
//! micro-kernel per instruction set (`kernels/`: AVX-512 32×14, AVX2 + FMA 16×6, portable
//! 8×4), listed as data by preference and chosen at run time as the first whose required
//! features the handle's usable features include. Row-major C is computed as the
//! transposed product (Cᵀ = op(B)ᵀ·op(A)ᵀ) so that the kernels' vectors always run along
//! C's contiguous dimension. A product with one row or one column of C whose matrix operand
//! runs along the depth (a classifier at batch 1) is a set of dot products instead (`gemv.rs`):
//! the engine would pack the whole matrix to use 1/14 of its kernel. The input element type is generic ([`GemmInput`]: packing
//! converts to f32, the kernels accumulate in f32), so bf16 and f16 inputs need only new
//! implementations of that trait; f32 is the one implemented today.
//!
//! # Examples
//! ```
//! use autodnn::{gemm::GemmDesc, Handle};
//! let handle = Handle::with_threads(2)?;
//! // C (2×3) = A (2×4) · B (4×3), all row-major.
//! let a: Vec<f32> = (0..8).map(|x| x as f32).collect();
//! let b: Vec<f32> = (0..12).map(|x| x as f32).collect();
//! let mut c = vec![0.0f32; 6];
//! handle.gemm(&GemmDesc::new(2, 3, 4), 1.0, &a, &b, 0.0, &mut c)?;
//! assert_eq!(c, [42.0, 48.0, 54.0, 114.0, 136.0, 158.0]);
//! # Ok::<(), autodnn::Error>(())
//! ```

pub mod blocking;
mod desc;
mod epilogue;
mod gemv;
mod kernels;
mod loops;
mod pack;
mod pairs;
mod peak;

pub use desc::{GemmDesc, MatrixOrder, Transpose};
pub use epilogue::{Activation, Bias, Epilogue, Residual};
pub use kernels::PackFormat;
pub use pack::{PackA, PackB, StridedMatrix};
pub use peak::{
    bf16_dot_peak, bf16_peak_family, bf16_unit_speedup, bf16_unit_speedup_for,
    bf16_unit_speedup_under, fma_peak, BF16_UNITS_MIN_SPEEDUP,
};

use crate::cpu::{Features, Isa};
use crate::desc::DataType;
use crate::error::{Error, Result};
use crate::runtime::{Bf16Units, ExecContext, MathMode};
use epilogue::FrameEpilogue;
pub(crate) use kernels::PairsFn;
pub(crate) use kernels::Transposer;
pub(crate) use loops::depth_block;
use loops::{Gemm, OutMatrix};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// An element type GEMM accepts for A and B. Packing converts it to f32 and every kernel
/// accumulates in f32, so a new input type (bf16, f16) is one implementation of this trait.
/// Sealed: implemented inside autodnn only (today for `f32`).
pub trait GemmInput: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The descriptor type of this element.
    const DTYPE: DataType;
    /// The value as f32.
    fn to_f32(self) -> f32;
    /// The slice as f32 when this type is f32 (lets the engine read it in place).
    fn as_f32(s: &[Self]) -> Option<&[f32]>;
    /// The slice's bits when this type is bf16 (lets packing build the bf16-pair panels
    /// straight from them, with no conversion).
    fn as_bf16_bits(s: &[Self]) -> Option<&[u16]> {
        let _ = s;
        None
    }
    /// Converts `src` into `dst` (of the same length) element by element, as
    /// [`GemmInput::to_f32`] does, in vectors where the CPU has them (packing converts
    /// contiguous runs through it).
    #[inline]
    fn to_f32_slice(src: &[Self], dst: &mut [f32]) {
        for (o, s) in dst.iter_mut().zip(src) {
            *o = s.to_f32();
        }
    }
}

impl GemmInput for f32 {
    const DTYPE: DataType = DataType::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    fn as_f32(s: &[f32]) -> Option<&[f32]> {
        Some(s)
    }
}

/// bf16 operands: computed with bf16 products and f32 sums in every math mode (on the
/// AVX512-BF16 kernels where the CPU has them, else converted to f32 while packing, which
/// gives the same exact products).
impl GemmInput for half::bf16 {
    const DTYPE: DataType = DataType::Bf16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self.to_f32()
    }
    fn as_f32(_: &[half::bf16]) -> Option<&[f32]> {
        None
    }
    fn as_bf16_bits(s: &[half::bf16]) -> Option<&[u16]> {
        use half::slice::HalfFloatSliceExt;
        Some(s.reinterpret_cast())
    }
    #[inline]
    fn to_f32_slice(src: &[half::bf16], dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        src.convert_to_f32_slice(dst);
    }
}

/// f16 operands: converted to f32 while packing (exactly) and computed by the f32 kernels.
impl GemmInput for half::f16 {
    const DTYPE: DataType = DataType::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self.to_f32()
    }
    fn as_f32(_: &[half::f16]) -> Option<&[f32]> {
        None
    }
    #[inline]
    fn to_f32_slice(src: &[half::f16], dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        // F16C's vcvtph2ps where the CPU has it (half detects it at run time).
        src.convert_to_f32_slice(dst);
    }
}

/// The name of the micro-kernel family a GEMM of `dtype` operands runs under an ISA cap, a
/// math mode and a choice of units, e.g. `avx512bf16-32x14`.
///
/// ```
/// use autodnn::{cpu::Isa, gemm::kernel_name_for, Bf16Units, DataType, MathMode};
/// let strict = kernel_name_for(Isa::Avx512, DataType::F32, MathMode::Strict, Bf16Units::Always);
/// assert_eq!(strict, autodnn::gemm::kernel_name(Isa::Avx512));
/// // Never the bf16 units: bf16 operands run on the f32 kernels.
/// let never = kernel_name_for(Isa::Avx512, DataType::Bf16, MathMode::Strict, Bf16Units::Never);
/// assert_eq!(never, strict);
/// ```
pub fn kernel_name_for(
    isa: Isa,
    dtype: DataType,
    math: MathMode,
    units: Bf16Units,
) -> &'static str {
    kernel_name_for_depth(isa, dtype, math, units, usize::MAX)
}

/// As [`kernel_name_for`], for products of depth `k` (a family may need a least depth: AMX
/// tiles take `k ≥ 16`, shallower products run on the next family).
///
/// ```
/// use autodnn::{cpu::Isa, gemm::kernel_name_for_depth, Bf16Units, DataType, MathMode};
/// let f = kernel_name_for_depth(Isa::Amx, DataType::Bf16, MathMode::Strict, Bf16Units::Always, 3);
/// assert!(!f.starts_with("amx"));
/// ```
pub fn kernel_name_for_depth(
    isa: Isa,
    dtype: DataType,
    math: MathMode,
    units: Bf16Units,
    k: usize,
) -> &'static str {
    kernels::kernel_set_for(isa.usable(), dtype, math, units, k).name
}

/// The name of the micro-kernel family GEMM uses under an ISA cap, e.g. `avx512-32x14`.
pub fn kernel_name(isa: Isa) -> &'static str {
    kernels::kernel_set(isa.usable()).name
}

/// The vectorised transpose of the GEMM kernel family for the usable features, if it has one
/// (packing code outside the engine, such as implicit-GEMM convolution, shares it).
pub(crate) fn transposer_for(features: Features) -> Option<&'static Transposer> {
    kernels::kernel_set(features).transposer
}

/// `dst[c·ldd + r] = src[r·lds + c]` for r < rows, c < cols: a matrix transposed in the
/// tiles of the kernel family's vectorised transpose (each source line used whole at once,
/// so rows a power of two apart, which share cache sets, cost no refetches), the ragged
/// edges element by element.
///
/// # Panics
/// When an element lies outside `src` or `dst` (callers pass checked sizes).
pub(crate) fn transpose_into(
    features: Features,
    (src, lds): (&[f32], usize),
    (dst, ldd): (&mut [f32], usize),
    rows: usize,
    cols: usize,
) {
    if rows == 0 || cols == 0 {
        return;
    }
    assert!((rows - 1) * lds + cols <= src.len() && (cols - 1) * ldd + rows <= dst.len());
    let tr = transposer_for(features);
    // Columns in whole strips of the transposer (none without one).
    let full = tr.map_or(0, |t| cols - cols % t.strip);
    if let Some(tr) = tr {
        for c0 in (0..full).step_by(tr.strip) {
            // SAFETY: the family's features are this CPU's (kernel_set caps them); the rows'
            // strips at r·lds + c0 .. + strip lie in src and the writes at (c0 + q)·ldd + r
            // (q < strip, r < rows) in dst, by the assertion above (c0 + strip ≤ cols).
            unsafe {
                tr.strip_rows(
                    src.as_ptr().add(c0),
                    lds,
                    rows,
                    dst.as_mut_ptr().add(c0 * ldd),
                    ldd,
                )
            };
        }
    }
    for c in full..cols {
        for r in 0..rows {
            dst[c * ldd + r] = src[r * lds + c];
        }
    }
}

/// The block sizes GEMM uses under an ISA cap.
pub fn blocking_for(isa: Isa) -> blocking::Blocking {
    blocking_with(isa.usable())
}

/// The block sizes GEMM uses with the usable `features`.
pub(crate) fn blocking_with(features: Features) -> blocking::Blocking {
    kernels::kernel_set(features).blocking
}

/// How GEMM runs f32 operands of depth `k` (packed by the caller's packers,
/// [`gemm_engine`]) in a context: the register tile and blocks of the family its math mode
/// and units choose, its panel format, and its conversion of f32 panels of the A side
/// (`a_side`) or the B side into that format when it reads bf16 ([`kernels::PackFormat`]).
pub(crate) fn engine_format(
    ctx: &ExecContext<'_>,
    k: usize,
    a_side: bool,
) -> (
    blocking::Blocking,
    kernels::PackFormat,
    Option<kernels::PairsFn>,
) {
    let ks = kernels::kernel_set_for(ctx.features, DataType::F32, ctx.math, ctx.bf16_units, k);
    let convert = ks.pairs.filter(|_| ks.packing.is_bf16()).map(|p| {
        if a_side {
            p.a_from_f32
        } else {
            p.b_from_f32
        }
    });
    (ks.blocking, ks.packing, convert)
}

/// Where depth `d` of column (or row) `j` of a panel `w` wide lies in the AMX tile format,
/// on the B side or the A side: (32-bit slot from the panel's start, whether in its high
/// half).
pub(crate) fn amx_slot(d: usize, j: usize, w: usize, b_side: bool) -> (usize, bool) {
    #[cfg(target_arch = "x86_64")]
    return kernels::amx::slot_of(d, j, w, b_side);
    #[cfg(not(target_arch = "x86_64"))]
    (d / 2 * w + j, d % 2 == 1)
}

/// Whether products of f32 operands under [`MathMode::AllowBf16`] run on bf16 units with the
/// usable `features` and the units choice `units` (a bf16 kernel family for a deep product).
pub(crate) fn bf16_units_chosen(features: crate::cpu::Features, units: Bf16Units) -> bool {
    kernels::kernel_set_for(features, DataType::F32, MathMode::AllowBf16, units, 1 << 16)
        .packing
        .is_bf16()
}

/// Grows the packing buffers of the calling thread and of every worker of `ctx` to the
/// largest blocks the f32 kernels under `ctx` pack, their pages written, so that the products
/// that follow allocate nothing (a deployed model's first inference).
///
/// # Errors
/// [`Error::OutOfMemory`] when a buffer cannot grow.
pub(crate) fn warm_packing_buffers(ctx: &ExecContext<'_>) -> Result<()> {
    let ks = kernels::kernel_set_for(ctx.features, DataType::F32, ctx.math, ctx.bf16_units, 4096);
    let failed = crate::runtime::parallel::FirstError::default();
    ctx.pool
        .each_thread(&|_| failed.set(loops::warm_buffers(ks)));
    failed.into_result()
}

/// Runs one checked product with the context's threads and ISA.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_in_context<T: GemmInput>(
    ctx: &ExecContext<'_>,
    desc: &GemmDesc,
    alpha: f32,
    a: &[T],
    b: &[T],
    beta: f32,
    c: &mut [f32],
    epilogue: &Epilogue<'_>,
) -> Result<()> {
    desc.validate()?;
    desc.check_buffers(a.len(), b.len(), c.len())?;
    let fe = epilogue.for_output(desc.m(), desc.n())?;
    run_validated(ctx, desc, alpha, a, b, beta, c, fe)
}

/// Runs a product whose descriptor and buffers have been checked.
#[allow(clippy::too_many_arguments)]
fn run_validated<T: GemmInput>(
    ctx: &ExecContext<'_>,
    desc: &GemmDesc,
    alpha: f32,
    a: &[T],
    b: &[T],
    beta: f32,
    c: &mut [f32],
    fe: FrameEpilogue<'_>,
) -> Result<()> {
    let (m, n, k) = (desc.m(), desc.n(), desc.k());
    // op(A) (m × k) and op(B) (k × n) as strided views.
    let [ars, acs] = desc.a_strides();
    let [brs, bcs] = desc.b_strides();
    let (ars, acs) = if desc.transa() == Transpose::Yes {
        (acs, ars)
    } else {
        (ars, acs)
    };
    let (brs, bcs) = if desc.transb() == Transpose::Yes {
        (bcs, brs)
    } else {
        (brs, bcs)
    };
    let [crs, ccs] = desc.c_strides();
    let invalid = "checked by GemmDesc::validate and check_buffers";
    let ks = kernels::kernel_set_for(ctx.features, T::DTYPE, ctx.math, ctx.bf16_units, k);
    let am = StridedMatrix::new(a, m, k, ars, acs)
        .expect(invalid)
        .with_transposer(ks.transposer);
    let bm = StridedMatrix::new(b, k, n, brs, bcs)
        .expect(invalid)
        .with_transposer(ks.transposer);
    let out = OutMatrix::new(c, m, n, crs, ccs).expect(invalid);
    // One row or column of C from a matrix read along the depth: dot products, where the
    // kernels would compute in f32 too (not where `allow_bf16` rounds f32 operands for the
    // bf16 units).
    if m > 0 && n > 0 && k > 0 && alpha != 0.0 && ks.operand == DataType::F32 {
        if let (Some(af), Some(bf)) = (T::as_f32(a), T::as_f32(b)) {
            // Rows of `ld` apart, each k long, inside `mat`; the vector k long.
            let fits = |mat: &[f32], ld: usize, len: usize, v: &[f32]| {
                v.len() >= k
                    && ld
                        .checked_mul(len - 1)
                        .and_then(|x| x.checked_add(k))
                        .is_some_and(|x| x <= mat.len())
            };
            if n == 1 && acs == 1 && brs == 1 && fits(af, ars, m, bf) {
                let g = gemv::Gemv {
                    m: af,
                    ld: ars,
                    k,
                    v: bf,
                    alpha,
                    beta,
                    epilogue: fe,
                };
                return gemv::run(ks, ctx, &g, &out);
            }
            if m == 1 && brs == 1 && acs == 1 && fits(bf, bcs, n, af) {
                let epilogue = fe.transposed();
                let g = gemv::Gemv {
                    m: bf,
                    ld: bcs,
                    k,
                    v: af,
                    alpha,
                    beta,
                    epilogue,
                };
                return gemv::run(ks, ctx, &g, &out.t());
            }
        }
    }
    // The kernels' vectors run down the engine's rows: transpose when C's columns are the
    // unit-stride direction (C row-major).
    let rows_unit = crs == 1 || m == 1;
    let cols_unit = ccs == 1 || n == 1;
    let transpose = match (rows_unit, cols_unit) {
        (true, false) => false,
        (false, true) => true,
        (true, true) => n > m,
        (false, false) => ccs < crs,
    };
    if transpose {
        let (at, bt) = (bm.t(), am.t());
        let g = Gemm {
            m: n,
            n: m,
            k,
            alpha,
            beta,
            a: &at,
            b: &bt,
            epilogue: fe.transposed(),
        };
        loops::run(ks, ctx, &g, &out.t())
    } else {
        let g = Gemm {
            m,
            n,
            k,
            alpha,
            beta,
            a: &am,
            b: &bm,
            epilogue: fe,
        };
        loops::run(ks, ctx, &g, &out)
    }
}

/// Runs a product given in the engine's frame (C is m × n with its vector direction along
/// rows, A packs as [`PackA`], B as [`PackB`]): the entry point for convolution algorithms
/// that pack their operands themselves (implicit GEMM). `c` must be `m × n` with strides
/// that do not overlap (see [`GemmDesc::validate`]).
///
/// # Errors
/// [`Error::BadParam`] naming `c` when its strides overlap or reach past the buffer.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_engine(
    ctx: &ExecContext<'_>,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &dyn PackA,
    b: &dyn PackB,
    beta: f32,
    c: &mut [f32],
    c_strides: [usize; 2],
    epilogue: &Epilogue<'_>,
) -> Result<()> {
    let fe = epilogue.for_output(m, n)?;
    let len = c.len();
    let out = OutMatrix::new(c, m, n, c_strides[0], c_strides[1]).ok_or_else(|| {
        Error::bad(
            "c",
            format!("{m}x{n} with strides {c_strides:?} in {len} elements"),
            "overlapping or out of bounds",
        )
    })?;
    let g = Gemm {
        m,
        n,
        k,
        alpha,
        beta,
        a,
        b,
        epilogue: fe,
    };
    // f32 operands, packed by the caller's packers: on the bf16 units under `AllowBf16` where
    // the units choice lets them (their panels rounded into pairs after packing).
    let ks = kernels::kernel_set_for(ctx.features, DataType::F32, ctx.math, ctx.bf16_units, k);
    loops::run(ks, ctx, &g, &out)
}

/// Runs checked products (a, b, c) of one descriptor: across the batch, one product per
/// thread at a time, when they are small; one after the other on all threads otherwise.
pub(crate) fn run_batch<T: GemmInput>(
    ctx: &ExecContext<'_>,
    desc: &GemmDesc,
    alpha: f32,
    beta: f32,
    mut items: Vec<(&[T], &[T], &mut [f32])>,
) -> Result<()> {
    let fmas = desc.m().saturating_mul(desc.n()).saturating_mul(desc.k());
    let fe = FrameEpilogue::default();
    if ctx.threads > 1 && items.len() > 1 && fmas <= blocking::THRESHOLDS.batch_split_max_fmas {
        let one = ExecContext { threads: 1, ..*ctx };
        crate::runtime::parallel::try_for_each_chunk(ctx, &mut items, 1, |_, item| {
            item.iter_mut()
                .try_for_each(|(a, b, c)| run_validated(&one, desc, alpha, a, b, beta, c, fe))
        })
    } else {
        for (a, b, c) in items {
            run_validated(ctx, desc, alpha, a, b, beta, c, fe)?;
        }
        Ok(())
    }
}

/// Elements a strided batch needs: `(batch − 1)·stride + span` (0 when empty).
pub(crate) fn batch_span(field: &str, batch: usize, stride: usize, span: usize) -> Result<usize> {
    if batch == 0 || span == 0 {
        return Ok(0);
    }
    (batch - 1)
        .checked_mul(stride)
        .and_then(|x| x.checked_add(span))
        .ok_or_else(|| {
            Error::overflow(
                field,
                format!("{batch} matrices of {span} elements {stride} apart"),
            )
        })
}

/// `x[i·stride..]`, or nothing when the matrix there is empty (its stride is then free, and
/// `i·stride` may not even fit in `usize`).
pub(crate) fn tail<T>(x: &[T], i: usize, stride: usize, span: usize) -> &[T] {
    if span == 0 {
        &[]
    } else {
        // Fits: the batch's span (i·stride + span) was checked against the buffer.
        &x[i * stride..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// im2col on the fly for a 1-D convolution: A(i, p) = x[i + p] (position i, tap p),
    /// packed straight from the signal, nothing materialised.
    struct Im2Col<'a> {
        x: &'a [f32],
        positions: usize,
    }

    impl PackA for Im2Col<'_> {
        fn pack_a(
            &self,
            i0: usize,
            mc: usize,
            p0: usize,
            kc: usize,
            mr: usize,
            dst: &mut [f32],
        ) -> Result<()> {
            for (q, panel) in dst.chunks_exact_mut(mr * kc).enumerate() {
                for p in 0..kc {
                    for i in 0..mr {
                        let pos = i0 + q * mr + i;
                        panel[p * mr + i] = if pos < (i0 + mc).min(self.positions) {
                            self.x[pos + p0 + p]
                        } else {
                            0.0
                        };
                    }
                }
            }
            Ok(())
        }
    }

    #[test]
    fn implicit_gemm_convolution_with_fused_bias_relu() {
        // y[k][pos] = relu(bias[k] + Σ_tap w[k][tap] · x[pos + tap]): m = positions (the
        // vector side, contiguous in y), n = output channels, k = taps.
        let (positions, channels, taps) = (301usize, 37usize, 19usize);
        let x: Vec<f32> = (0..positions + taps)
            .map(|v| (v % 7) as f32 - 3.0)
            .collect();
        let w: Vec<f32> = (0..channels * taps).map(|v| (v % 5) as f32 - 2.0).collect();
        let bias: Vec<f32> = (0..channels).map(|v| v as f32 - 18.0).collect();
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            for threads in [1, 2] {
                let h = crate::Handle::with_threads(threads).unwrap();
                h.set_isa_cap(isa);
                let ctx = h.exec_context();
                let a = Im2Col { x: &x, positions };
                // B(tap, k) = w[k][tap]: a strided view of the filter.
                let b = StridedMatrix::new(&w[..], taps, channels, 1, taps).unwrap();
                let mut y = vec![f32::NAN; channels * positions];
                let epi = Epilogue::new()
                    .with_bias_per_col(&bias)
                    .with_activation(Activation::Relu);
                gemm_engine(
                    &ctx,
                    positions,
                    channels,
                    taps,
                    1.0,
                    &a,
                    &b,
                    0.0,
                    &mut y,
                    [1, positions],
                    &epi,
                )
                .unwrap();
                for k in 0..channels {
                    for pos in 0..positions {
                        let want: f32 =
                            (0..taps).map(|t| w[k * taps + t] * x[pos + t]).sum::<f32>() + bias[k];
                        assert_eq!(
                            y[k * positions + pos],
                            want.max(0.0),
                            "{isa:?} x{threads} k {k} pos {pos}"
                        );
                    }
                }
                // The engine checks C's view.
                let e = gemm_engine(
                    &ctx,
                    positions,
                    channels,
                    taps,
                    1.0,
                    &a,
                    &b,
                    0.0,
                    &mut y,
                    [1, 1],
                    &epi,
                );
                assert!(matches!(e, Err(Error::BadParam { .. })));
            }
        }
    }
}
