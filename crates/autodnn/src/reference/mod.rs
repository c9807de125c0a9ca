//! The f64 oracle: naive convolution (forward, backward data, filter and bias) and GEMM that accumulate in f64, for tests and `--check`.
//! Never a production algorithm; written for obviousness, not speed.
//!
//! The other operators' references (`crate::layers`) are in one module each below, named as
//! the operator's module is; each returns its output indexed like the output's descriptor
//! (length `span()`, elements outside the tensor 0), blended as the operator blends.

pub mod activation;
pub mod norm;
pub mod pool;
pub mod softmax;
pub mod tensor_ops;
pub mod transform;

use crate::desc::{ConvMode, ConvProblem};
use crate::error::{Error, Result};
use crate::op::conv_fwd::check_call;

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
    let [sh, sw] = cd.stride().map(|v| v as i64);
    let [dh, dw] = cd.dilation().map(|v| v as i64);
    let (h, wi) = (xd.h() as i64, xd.w() as i64);
    // One output plane at a time, accumulated tap by tap: the same sum as the definition, in
    // an order that keeps the inner loop simple.
    let mut plane = vec![0.0f64; oh * ow];
    for b in 0..n {
        for ko in 0..k {
            let g = ko / kg;
            plane.fill(0.0);
            for c in 0..cg {
                for u in 0..r {
                    for v in 0..s {
                        let (fu, fv) = match cd.mode() {
                            ConvMode::CrossCorrelation => (u, v),
                            ConvMode::Convolution => (r - 1 - u, s - 1 - v),
                        };
                        let wv = w[wd.offset(ko, c, fu, fv)] as f64;
                        // Output columns whose input column j·sw - left + v·dw is inside.
                        let shift = v as i64 * dw - pad.left;
                        let j_lo = ((-shift).max(0) + sw - 1) / sw;
                        let j_hi = ((wi - shift + sw - 1) / sw).clamp(0, ow as i64);
                        for i in 0..oh {
                            let ih = i as i64 * sh - pad.top + u as i64 * dh;
                            if ih < 0 || ih >= h {
                                continue;
                            }
                            let row = &mut plane[i * ow..(i + 1) * ow];
                            for j in j_lo..j_hi {
                                let iw = (j * sw + shift) as usize;
                                let xv = x[xd.offset(b, g * cg + c, ih as usize, iw)];
                                row[j as usize] += xv as f64 * wv;
                            }
                        }
                    }
                }
            }
            for i in 0..oh {
                for j in 0..ow {
                    y[yd.offset(b, ko, i, j)] = plane[i * ow + j];
                }
            }
        }
    }
    Ok(y)
}

/// Calls `f(y_offset, x_offset, w_offset)` for every product x·w of the definition: the
/// pairs of one output element, input element and filter element that meet.
fn for_each_product(problem: &ConvProblem, mut f: impl FnMut(usize, usize, usize)) {
    let (xd, wd, yd, cd) = (problem.x(), problem.w(), problem.y(), problem.conv());
    let [n, k, oh, ow] = yd.dims();
    let [_, cg, r, s] = wd.dims();
    let kg = problem.k_per_group();
    let pad = cd.padding();
    let [sh, sw] = cd.stride().map(|v| v as i64);
    let [dh, dw] = cd.dilation().map(|v| v as i64);
    let (h, wi) = (xd.h() as i64, xd.w() as i64);
    for b in 0..n {
        for ko in 0..k {
            let g = ko / kg;
            for i in 0..oh {
                for j in 0..ow {
                    let yo = yd.offset(b, ko, i, j);
                    for c in 0..cg {
                        for u in 0..r {
                            let ih = i as i64 * sh - pad.top + u as i64 * dh;
                            if ih < 0 || ih >= h {
                                continue;
                            }
                            for v in 0..s {
                                let iw = j as i64 * sw - pad.left + v as i64 * dw;
                                if iw < 0 || iw >= wi {
                                    continue;
                                }
                                let (fu, fv) = match cd.mode() {
                                    ConvMode::CrossCorrelation => (u, v),
                                    ConvMode::Convolution => (r - 1 - u, s - 1 - v),
                                };
                                f(
                                    yo,
                                    xd.offset(b, g * cg + c, ih as usize, iw as usize),
                                    wd.offset(ko, c, fu, fv),
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

fn zeros(len: usize, what: &str) -> Result<Vec<f64>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|e| Error::OutOfMemory {
        bytes: len.saturating_mul(8),
        what: format!("{what}: {e}"),
    })?;
    v.resize(len, 0.0);
    Ok(v)
}

fn check_len(field: &str, needed: usize, got: usize) -> Result<()> {
    if got < needed {
        return Err(Error::BufferTooSmall {
            field: field.into(),
            needed,
            got,
        });
    }
    Ok(())
}

/// dx = conv_bwd_data(dy, w) by the definition, in f64: every product of the forward
/// definition scattered back to its input element. Any operation kind of the problem is
/// read for its descriptors (dy is laid out as y). Indexed like x (length `x.span()`).
///
/// # Errors
/// Short buffers.
pub fn conv_backward_data(problem: &ConvProblem, dy: &[f32], w: &[f32]) -> Result<Vec<f64>> {
    check_len("dy", problem.y().span(), dy.len())?;
    check_len("w", problem.w().elements(), w.len())?;
    let mut dx = zeros(problem.x().span(), "reference dx")?;
    for_each_product(problem, |yo, xo, wo| {
        dx[xo] += dy[yo] as f64 * w[wo] as f64;
    });
    Ok(dx)
}

/// dw = conv_bwd_filter(x, dy) by the definition, in f64. Indexed like w (length
/// `w.elements()`).
///
/// # Errors
/// Short buffers.
pub fn conv_backward_filter(problem: &ConvProblem, x: &[f32], dy: &[f32]) -> Result<Vec<f64>> {
    check_len("x", problem.x().span(), x.len())?;
    check_len("dy", problem.y().span(), dy.len())?;
    let mut dw = zeros(problem.w().elements(), "reference dw")?;
    for_each_product(problem, |yo, xo, wo| {
        dw[wo] += x[xo] as f64 * dy[yo] as f64;
    });
    Ok(dw)
}

/// db\[k\] = Σ over n, h, w of dy\[n, k, h, w\], in f64 (length K).
///
/// # Errors
/// A short dy.
pub fn conv_backward_bias(problem: &ConvProblem, dy: &[f32]) -> Result<Vec<f64>> {
    let yd = problem.y();
    check_len("dy", yd.span(), dy.len())?;
    let [n, k, oh, ow] = yd.dims();
    let mut db = zeros(k, "reference db")?;
    for b in 0..n {
        for (c, acc) in db.iter_mut().enumerate() {
            for i in 0..oh {
                for j in 0..ow {
                    *acc += dy[yd.offset(b, c, i, j)] as f64;
                }
            }
        }
    }
    Ok(db)
}

/// y = act(alpha · conv(x, w) + bias + beta · z) in f64, with the activation from the
/// problem's epilogue; `z` is the residual tensor or y's prior contents (laid out like y; not
/// read when beta = 0), `bias` one value per output channel.
///
/// # Errors
/// As [`conv_forward`]; [`Error::BufferTooSmall`] for a short bias or z.
pub fn conv_forward_fused(
    problem: &ConvProblem,
    x: &[f32],
    w: &[f32],
    alpha: f64,
    beta: f64,
    bias: Option<&[f32]>,
    z: Option<&[f32]>,
) -> Result<Vec<f64>> {
    let mut y = conv_forward(problem, x, w)?;
    let yd = problem.y();
    let [n, k, oh, ow] = yd.dims();
    if bias.is_some_and(|b| b.len() < k) {
        return Err(Error::BufferTooSmall {
            field: "bias".into(),
            needed: k,
            got: bias.map_or(0, |b| b.len()),
        });
    }
    if beta != 0.0 && z.is_none_or(|z| z.len() < yd.span()) {
        return Err(Error::BufferTooSmall {
            field: "z".into(),
            needed: yd.span(),
            got: z.map_or(0, |z| z.len()),
        });
    }
    let act = problem.epilogue().act;
    for b in 0..n {
        for c in 0..k {
            for i in 0..oh {
                for j in 0..ow {
                    let o = yd.offset(b, c, i, j);
                    let mut v = alpha * y[o];
                    if let Some(bias) = bias {
                        v += bias[c] as f64;
                    }
                    if beta != 0.0 {
                        v += beta * z.map_or(0.0, |z| z[o] as f64);
                    }
                    y[o] = act.apply_f64(v);
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
