//! Tensor operations (add, op-tensor, scale, set, reduce) in f64.

use crate::desc::TensorDesc;
use crate::error::{Error, Result};
use crate::layers::tensor_ops::{broadcast_strides, OpTensorDesc, ReduceOp};
use crate::layers::Blend;

fn prior_at(prior: &[f32], o: usize) -> f64 {
    prior.get(o).copied().unwrap_or(0.0) as f64
}

/// alpha · A + beta · prior, A broadcast into C, indexed like `c_desc`.
///
/// # Errors
/// [`Error::BadParam`] naming `a` when A does not broadcast into C.
pub fn add_tensor(
    blend: Blend,
    a_desc: &TensorDesc,
    a: &[f32],
    c_desc: &TensorDesc,
    prior: &[f32],
) -> Result<Vec<f64>> {
    let sa = broadcast_strides("a", a_desc, c_desc)?;
    let mut out = vec![0.0f64; c_desc.span()];
    let [n, ch, h, w] = c_desc.dims();
    for b in 0..n {
        for k in 0..ch {
            for i in 0..h {
                for j in 0..w {
                    let o = c_desc.offset(b, k, i, j);
                    let v = a[b * sa[0] + k * sa[1] + i * sa[2] + j * sa[3]] as f64;
                    out[o] = blend.apply_f64(v, prior_at(prior, o));
                }
            }
        }
    }
    Ok(out)
}

/// op(alpha1 · A, alpha2 · B) + beta · prior, B broadcast into C (unread for unary ops),
/// indexed like `c_desc`.
///
/// # Errors
/// [`Error::BadParam`] naming `a` or `b` for dimensions that do not fit C.
pub fn op_tensor(
    desc: &OpTensorDesc,
    a_desc: &TensorDesc,
    a: &[f32],
    b_desc: &TensorDesc,
    b: &[f32],
    c_desc: &TensorDesc,
    prior: &[f32],
) -> Result<Vec<f64>> {
    if a_desc.dims() != c_desc.dims() {
        return Err(Error::bad(
            "a",
            format!("{:?}", a_desc.dims()),
            "must have C's dimensions",
        ));
    }
    let binary = desc.op().is_binary();
    let sb = if binary {
        broadcast_strides("b", b_desc, c_desc)?
    } else {
        [0; 4]
    };
    let mut out = vec![0.0f64; c_desc.span()];
    let [n, ch, h, w] = c_desc.dims();
    for bi in 0..n {
        for k in 0..ch {
            for i in 0..h {
                for j in 0..w {
                    let o = c_desc.offset(bi, k, i, j);
                    let x = desc.alpha1() as f64 * a[a_desc.offset(bi, k, i, j)] as f64;
                    let y = if binary {
                        desc.alpha2() as f64
                            * b[bi * sb[0] + k * sb[1] + i * sb[2] + j * sb[3]] as f64
                    } else {
                        0.0
                    };
                    let r = desc.op().apply_f64(x, y);
                    out[o] = if desc.beta() == 0.0 {
                        r
                    } else {
                        r + desc.beta() as f64 * prior_at(prior, o)
                    };
                }
            }
        }
    }
    Ok(out)
}

/// alpha · prior in every element of the tensor, indexed like `desc`.
///
/// # Errors
/// None today; a `Result` as every reference returns.
pub fn scale_tensor(desc: &TensorDesc, prior: &[f32], alpha: f32) -> Result<Vec<f64>> {
    let mut out = vec![0.0f64; desc.span()];
    for o in desc.offsets() {
        out[o] = alpha as f64 * prior_at(prior, o);
    }
    Ok(out)
}

/// `value` in every element of the tensor, indexed like `desc` (0 elsewhere).
///
/// # Errors
/// None today; a `Result` as every reference returns.
pub fn set_tensor(desc: &TensorDesc, value: f32) -> Result<Vec<f64>> {
    let mut out = vec![0.0f64; desc.span()];
    for o in desc.offsets() {
        out[o] = value as f64;
    }
    Ok(out)
}

/// alpha · reduce(A) + beta · prior over the dimensions where C's is 1 and A's is not,
/// indexed like `c_desc`; the reduced elements taken in (n, c, h, w) order.
///
/// # Errors
/// [`Error::BadParam`] naming `c` when a dimension of C is neither 1 nor A's.
pub fn reduce_tensor(
    op: ReduceOp,
    blend: Blend,
    a_desc: &TensorDesc,
    a: &[f32],
    c_desc: &TensorDesc,
    prior: &[f32],
) -> Result<Vec<f64>> {
    let (ad, cd) = (a_desc.dims(), c_desc.dims());
    if (0..4).any(|d| cd[d] != ad[d] && cd[d] != 1) {
        return Err(Error::bad(
            "c",
            format!("{cd:?}"),
            "each dimension must be 1 or A's",
        ));
    }
    let mut out = vec![0.0f64; c_desc.span()];
    let [n, ch, h, w] = cd;
    for b in 0..n {
        for k in 0..ch {
            for i in 0..h {
                for j in 0..w {
                    // Kept dimensions fixed at the output's index, reduced ones walked.
                    let range = |d: usize, o: usize| if cd[d] == 1 { 0..ad[d] } else { o..o + 1 };
                    let mut vals = Vec::new();
                    for rb in range(0, b) {
                        for rk in range(1, k) {
                            for ri in range(2, i) {
                                for rj in range(3, j) {
                                    vals.push(a[a_desc.offset(rb, rk, ri, rj)] as f64);
                                }
                            }
                        }
                    }
                    let o = c_desc.offset(b, k, i, j);
                    out[o] = blend.apply_f64(op.reduce_f64(vals), prior_at(prior, o));
                }
            }
        }
    }
    Ok(out)
}
