//! Matrix products in cuBLAS's convention: column-major matrices with leading dimensions,
//! C (m × n) = alpha · op(A) · op(B) + beta · C.

use std::ffi::{c_int, c_longlong, c_void};

use dnn::gemm::{GemmDesc, MatrixOrder};

use crate::handle::{autodnnHandle_t, live_handle};
use crate::ptr::{check_disjoint, floats, floats_mut, value, Extent};
use crate::status::{autodnnStatus_t, bad, guard, R};

/// Whether an operand is used as stored or transposed (cuBLAS's `cublasOperation_t`).
pub type autodnnOperation_t = c_int;
/// op(X) = X.
pub const AUTODNN_OP_N: autodnnOperation_t = 0;
/// op(X) = Xᵀ.
pub const AUTODNN_OP_T: autodnnOperation_t = 1;
/// op(X) = Xᴴ, which is Xᵀ for real matrices.
pub const AUTODNN_OP_C: autodnnOperation_t = 2;

fn transposed(field: &str, op: autodnnOperation_t) -> R<bool> {
    match op {
        AUTODNN_OP_N => Ok(false),
        AUTODNN_OP_T | AUTODNN_OP_C => Ok(true),
        _ => Err(bad(
            field,
            op,
            "must be AUTODNN_OP_N, AUTODNN_OP_T or AUTODNN_OP_C",
        )),
    }
}

fn count(field: &str, v: c_int) -> R<usize> {
    usize::try_from(v).map_err(|_| bad(field, v, "must not be negative"))
}

/// The column-major descriptor: A stored m × k (k × m when transposed) with leading
/// dimension lda, B k × n (n × k) with ldb, C m × n with ldc.
#[allow(clippy::too_many_arguments)]
fn col_major(
    transa: autodnnOperation_t,
    transb: autodnnOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    lda: c_int,
    ldb: c_int,
    ldc: c_int,
) -> R<GemmDesc> {
    let (ta, tb) = (transposed("transa", transa)?, transposed("transb", transb)?);
    let (m, n, k) = (count("m", m)?, count("n", n)?, count("k", k)?);
    let rows_a = if ta { k } else { m };
    let rows_b = if tb { n } else { k };
    let mut ld = [0usize; 3];
    for (i, (name, v, rows)) in [("lda", lda, rows_a), ("ldb", ldb, rows_b), ("ldc", ldc, m)]
        .into_iter()
        .enumerate()
    {
        let need = rows.max(1);
        ld[i] = match usize::try_from(v) {
            Ok(v) if v >= need => v,
            _ => {
                return Err(bad(
                    name,
                    v,
                    &format!("must be at least max(1, rows of the stored matrix) = {need}"),
                ))
            }
        };
    }
    let d = GemmDesc::new(m, n, k)
        .with_order(MatrixOrder::ColMajor)
        .with_transa(ta)
        .with_transb(tb)
        .with_a_strides(1, ld[0])
        .with_b_strides(1, ld[1])
        .with_c_strides(1, ld[2]);
    d.validate()?;
    Ok(d)
}

/// Elements `batch` matrices of `span` elements `stride` apart reach.
fn batch_span(field: &str, batch: usize, stride: usize, span: usize) -> R<usize> {
    if batch == 0 || span == 0 {
        return Ok(0);
    }
    (batch - 1)
        .checked_mul(stride)
        .and_then(|v| v.checked_add(span))
        .filter(|&v| v <= isize::MAX as usize / 4)
        .ok_or_else(|| bad(field, stride, "the batch's extent does not fit in memory"))
}

/// C = alpha · op(A) · op(B) + beta · C in cuBLAS's column-major convention (cuBLAS's
/// `cublasSgemm`): element (i, j) of C is `C[i + j * ldc]`; A is stored m × k (k × m when
/// transa is `AUTODNN_OP_T`) with leading dimension lda, B k × n (n × k) with ldb. C is not
/// read when beta is 0. A row-major caller computes Cᵀ = op(B)ᵀ · op(A)ᵀ: swap A and B, m and
/// n.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnSgemm(
    handle: autodnnHandle_t,
    transa: autodnnOperation_t,
    transb: autodnnOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    A: *const f32,
    lda: c_int,
    B: *const f32,
    ldb: c_int,
    beta: *const f32,
    C: *mut f32,
    ldc: c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = live_handle(handle)?;
            let d = col_major(transa, transb, m, n, k, lda, ldb, ldc)?;
            let alpha = value(alpha, "alpha")?;
            let beta = value(beta, "beta")?;
            let (sa, sb, sc) = (d.a_span()?, d.b_span()?, d.c_span()?);
            let (a, b, c) = (A.cast::<c_void>(), B.cast::<c_void>(), C.cast::<c_void>());
            check_disjoint(
                Extent::of("C", c, sc),
                &[Extent::of("A", a, sa), Extent::of("B", b, sb)],
            )?;
            let a = floats(a, sa, "A")?;
            let b = floats(b, sb, "B")?;
            let c = floats_mut(c, sc, "C")?;
            h.gemm(&d, alpha, a, b, beta, c)?;
            Ok(())
        }
    })
}

/// `batchCount` products of one shape at fixed distances (cuBLAS's
/// `cublasSgemmStridedBatched`): product i uses `A + i * strideA`, `B + i * strideB` and
/// `C + i * strideC`, in elements. strideA and strideB may be 0 (one matrix shared by every
/// product); the outputs must not overlap.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnSgemmStridedBatched(
    handle: autodnnHandle_t,
    transa: autodnnOperation_t,
    transb: autodnnOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    A: *const f32,
    lda: c_int,
    strideA: c_longlong,
    B: *const f32,
    ldb: c_int,
    strideB: c_longlong,
    beta: *const f32,
    C: *mut f32,
    ldc: c_int,
    strideC: c_longlong,
    batchCount: c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = live_handle(handle)?;
            let d = col_major(transa, transb, m, n, k, lda, ldb, ldc)?;
            let alpha = value(alpha, "alpha")?;
            let beta = value(beta, "beta")?;
            let batch = count("batchCount", batchCount)?;
            let stride = |name: &str, v: c_longlong| {
                usize::try_from(v).map_err(|_| bad(name, v, "must not be negative"))
            };
            let (ra, rb, rc) = (
                stride("strideA", strideA)?,
                stride("strideB", strideB)?,
                stride("strideC", strideC)?,
            );
            let sa = batch_span("strideA", batch, ra, d.a_span()?)?;
            let sb = batch_span("strideB", batch, rb, d.b_span()?)?;
            let sc = batch_span("strideC", batch, rc, d.c_span()?)?;
            let (a, b, c) = (A.cast::<c_void>(), B.cast::<c_void>(), C.cast::<c_void>());
            check_disjoint(
                Extent::of("C", c, sc),
                &[Extent::of("A", a, sa), Extent::of("B", b, sb)],
            )?;
            let a = floats(a, sa, "A")?;
            let b = floats(b, sb, "B")?;
            let c = floats_mut(c, sc, "C")?;
            h.gemm_strided_batched(&d, alpha, a, ra, b, rb, beta, c, rc, batch)?;
            Ok(())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::{autodnnCreateWithThreads, autodnnDestroy};
    use crate::status::{AUTODNN_STATUS_BAD_PARAM, AUTODNN_STATUS_SUCCESS};

    /// C = op(A)·op(B) by the definition, column-major.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        ta: bool,
        tb: bool,
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        lda: usize,
        b: &[f32],
        ldb: usize,
        c: &mut [f32],
        ldc: usize,
    ) {
        for j in 0..n {
            for i in 0..m {
                let mut s = 0.0;
                for l in 0..k {
                    let av = if ta { a[l + i * lda] } else { a[i + l * lda] };
                    let bv = if tb { b[j + l * ldb] } else { b[l + j * ldb] };
                    s += av * bv;
                }
                c[i + j * ldc] = s;
            }
        }
    }

    #[test]
    fn sgemm_is_column_major_with_leading_dimensions() {
        let mut h = std::ptr::null_mut();
        // SAFETY: live handle, buffers sized for their leading dimensions.
        unsafe {
            assert_eq!(autodnnCreateWithThreads(&mut h, 2), AUTODNN_STATUS_SUCCESS);
            let (m, n, k) = (5usize, 3usize, 4usize);
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let lda = if ta { k } else { m } + 2;
                let ldb = if tb { n } else { k } + 1;
                let ldc = m + 3;
                let a: Vec<f32> = (0..lda * 5).map(|i| (i % 7) as f32 - 3.0).collect();
                let b: Vec<f32> = (0..ldb * 5).map(|i| (i % 5) as f32 - 2.0).collect();
                let mut want = vec![0.0f32; ldc * n];
                naive(ta, tb, m, n, k, &a, lda, &b, ldb, &mut want, ldc);
                let mut c = vec![0.0f32; ldc * n];
                let op = |t| if t { AUTODNN_OP_T } else { AUTODNN_OP_N };
                let s = autodnnSgemm(
                    h,
                    op(ta),
                    op(tb),
                    m as c_int,
                    n as c_int,
                    k as c_int,
                    &1.0,
                    a.as_ptr(),
                    lda as c_int,
                    b.as_ptr(),
                    ldb as c_int,
                    &0.0,
                    c.as_mut_ptr(),
                    ldc as c_int,
                );
                assert_eq!(s, AUTODNN_STATUS_SUCCESS);
                for j in 0..n {
                    for i in 0..m {
                        assert_eq!(c[i + j * ldc], want[i + j * ldc], "{ta} {tb} ({i}, {j})");
                    }
                }
            }
            let a = [1.0f32; 16];
            let mut c = [0.0f32; 16];
            // lda below the stored rows.
            let s = autodnnSgemm(
                h,
                AUTODNN_OP_N,
                AUTODNN_OP_N,
                4,
                2,
                2,
                &1.0,
                a.as_ptr(),
                3,
                a.as_ptr(),
                2,
                &0.0,
                c.as_mut_ptr(),
                4,
            );
            assert_eq!(s, AUTODNN_STATUS_BAD_PARAM);
            // C overlapping A.
            let s = autodnnSgemm(
                h,
                AUTODNN_OP_N,
                AUTODNN_OP_N,
                2,
                2,
                2,
                &1.0,
                c.as_ptr(),
                2,
                a.as_ptr(),
                2,
                &0.0,
                c.as_mut_ptr(),
                2,
            );
            assert_eq!(s, AUTODNN_STATUS_BAD_PARAM);
            let s = autodnnSgemm(
                h,
                9,
                AUTODNN_OP_N,
                2,
                2,
                2,
                &1.0,
                a.as_ptr(),
                2,
                a.as_ptr(),
                2,
                &0.0,
                c.as_mut_ptr(),
                2,
            );
            assert_eq!(s, AUTODNN_STATUS_BAD_PARAM);
            // Three 2 x 2 products, B shared.
            let a: Vec<f32> = (0..12).map(|i| i as f32).collect();
            let b = [1.0f32, 0.0, 0.0, 1.0];
            let mut c = vec![0.0f32; 12];
            let s = autodnnSgemmStridedBatched(
                h,
                AUTODNN_OP_N,
                AUTODNN_OP_N,
                2,
                2,
                2,
                &1.0,
                a.as_ptr(),
                2,
                4,
                b.as_ptr(),
                2,
                0,
                &0.0,
                c.as_mut_ptr(),
                2,
                4,
                3,
            );
            assert_eq!(s, AUTODNN_STATUS_SUCCESS);
            assert_eq!(c, a);
            let s = autodnnSgemmStridedBatched(
                h,
                AUTODNN_OP_N,
                AUTODNN_OP_N,
                2,
                2,
                2,
                &1.0,
                a.as_ptr(),
                2,
                -4,
                b.as_ptr(),
                2,
                0,
                &0.0,
                c.as_mut_ptr(),
                2,
                4,
                3,
            );
            assert_eq!(s, AUTODNN_STATUS_BAD_PARAM);
            assert_eq!(autodnnDestroy(h), AUTODNN_STATUS_SUCCESS);
        }
    }
}
