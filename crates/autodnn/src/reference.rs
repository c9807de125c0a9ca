//! The f64 oracle: naive convolution and GEMM that accumulate in f64, for tests and `--check`.
//! Never a production algorithm; written for obviousness, not speed.

use crate::desc::{ConvMode, ConvProblem};
use crate::error::{Error, Result};
use crate::handle::check_call;

/// y = conv(x, w) by the definition, in f64, any layout, strides, groups, dilation, padding and
/// mode. The result is indexed like the problem's `y` descriptor (length `y.span()`; elements
/// outside the tensor stay 0).
///
/// # Errors
/// As the checks of [`crate::Handle::conv_forward`]: short buffers, unsupported element types.
pub fn conv_forward(problem: &ConvProblem, x: &[f32], w: &[f32]) -> Result<Vec<f64>> {
    let (xd, wd, yd, cd) = (problem.x(), problem.w(), problem.y(), problem.conv());
    check_call(problem, x.len(), w.len(), yd.span())?;
    let mut y = Vec::new();
    y.try_reserve_exact(yd.span())
        .map_err(|e| Error::OutOfMemory {
            bytes: yd.span().saturating_mul(8),
            what: format!("reference output: {e}"),
        })?;
    y.resize(yd.span(), 0.0);
    let [n, k, oh, ow] = yd.dims();
    let [_, cg, r, s] = wd.dims();
    let kg = problem.k_per_group();
    let pad = cd.padding();
    let [sh, sw] = cd.stride();
    let [dh, dw] = cd.dilation();
    let (h, wi) = (xd.h() as i64, xd.w() as i64);
    for b in 0..n {
        for ko in 0..k {
            let g = ko / kg;
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = 0.0f64;
                    for c in 0..cg {
                        for u in 0..r {
                            let ih = (i * sh) as i64 - pad.top + (u * dh) as i64;
                            if ih < 0 || ih >= h {
                                continue;
                            }
                            for v in 0..s {
                                let iw = (j * sw) as i64 - pad.left + (v * dw) as i64;
                                if iw < 0 || iw >= wi {
                                    continue;
                                }
                                let (fu, fv) = match cd.mode() {
                                    ConvMode::CrossCorrelation => (u, v),
                                    ConvMode::Convolution => (r - 1 - u, s - 1 - v),
                                };
                                let xv = x[xd.offset(b, g * cg + c, ih as usize, iw as usize)];
                                let wv = w[wd.offset(ko, c, fu, fv)];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    y[yd.offset(b, ko, i, j)] = acc;
                }
            }
        }
    }
    Ok(y)
}

/// C = alpha · op(A) · op(B) + beta · C in f64, with op(A) m×k and op(B) k×n; every matrix is
/// given by a row stride and a column stride (in elements), so row-major, column-major and
/// transposes are all strides. With beta = 0, C is not read.
///
/// # Errors
/// [`Error::BufferTooSmall`] when a matrix's strides reach past its buffer.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: &[f32],
    a_strides: [usize; 2],
    b: &[f32],
    b_strides: [usize; 2],
    beta: f64,
    c: &mut [f64],
    c_strides: [usize; 2],
) -> Result<()> {
    let need = |rows: usize, cols: usize, st: [usize; 2]| -> Option<usize> {
        if rows == 0 || cols == 0 {
            return Some(0);
        }
        (rows - 1)
            .checked_mul(st[0])?
            .checked_add((cols - 1).checked_mul(st[1])?)?
            .checked_add(1)
    };
    for (field, rows, cols, st, len) in [
        ("a", m, k, a_strides, a.len()),
        ("b", k, n, b_strides, b.len()),
        ("c", m, n, c_strides, c.len()),
    ] {
        let needed = need(rows, cols, st)
            .ok_or_else(|| Error::overflow(field, "matrix span".to_string()))?;
        if len < needed {
            return Err(Error::BufferTooSmall {
                field: field.into(),
                needed,
                got: len,
            });
        }
    }
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f64;
            for p in 0..k {
                acc += a[i * a_strides[0] + p * a_strides[1]] as f64
                    * b[p * b_strides[0] + j * b_strides[1]] as f64;
            }
            let ci = i * c_strides[0] + j * c_strides[1];
            c[ci] = if beta == 0.0 {
                alpha * acc
            } else {
                alpha * acc + beta * c[ci]
            };
        }
    }
    Ok(())
}
