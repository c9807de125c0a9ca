//! Pooling, forward and backward, in f64: every window scanned by the definition.

use crate::desc::TensorDesc;
use crate::error::{Error, Result};
use crate::layers::pool::{PoolDesc, PoolMode};
use crate::layers::Blend;

/// The windows of `desc` on `x_desc`: for output (i, j), its real rows and columns and the
/// divisor its mode uses. Written from the definition, independently of the operator.
struct Windows {
    mode: PoolMode,
    dims: [usize; 4],
    out: [usize; 4],
    k: [i64; 2],
    s: [i64; 2],
    pad: [i64; 4],
}

impl Windows {
    fn new(desc: &PoolDesc, x_desc: &TensorDesc) -> Result<Windows> {
        let p = desc.padding();
        Ok(Windows {
            mode: desc.mode(),
            dims: x_desc.dims(),
            out: desc.output_dims(x_desc)?,
            k: desc.window().map(|v| v as i64),
            s: desc.stride().map(|v| v as i64),
            pad: [p.top, p.bottom, p.left, p.right],
        })
    }

    /// Real input rows and columns of output (i, j), as ranges, and the divisor.
    fn window(&self, i: usize, j: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>, f64) {
        let (h, w) = (self.dims[2] as i64, self.dims[3] as i64);
        let r0 = i as i64 * self.s[0] - self.pad[0];
        let c0 = j as i64 * self.s[1] - self.pad[2];
        let (r1, c1) = (r0 + self.k[0], c0 + self.k[1]);
        let rows = r0.max(0) as usize..r1.min(h) as usize;
        let cols = c0.max(0) as usize..c1.min(w) as usize;
        let div = match self.mode {
            PoolMode::Max => 1.0,
            PoolMode::AvgExcludePad => (rows.len() * cols.len()) as f64,
            PoolMode::AvgIncludePad => {
                let rh = r1.min(h + self.pad[1]) - r0;
                let cw = c1.min(w + self.pad[3]) - c0;
                (rh * cw) as f64
            }
        };
        (rows, cols, div)
    }
}

fn check_dims(field: &str, want: [usize; 4], got: &TensorDesc) -> Result<()> {
    if got.dims() != want {
        return Err(Error::bad(
            field,
            format!("{:?}", got.dims()),
            format!("must be {want:?}"),
        ));
    }
    Ok(())
}

/// The element the max of a window takes: the first maximum in row-major order, the first
/// NaN over any number.
fn argmax(
    x_desc: &TensorDesc,
    x: &[f32],
    b: usize,
    c: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) -> usize {
    let mut best: Option<(f32, usize)> = None;
    for r in rows {
        for col in cols.clone() {
            let o = x_desc.offset(b, c, r, col);
            let v = x[o];
            best = match best {
                None => Some((v, o)),
                Some((m, _)) if v > m || (v.is_nan() && !m.is_nan()) => Some((v, o)),
                keep => keep,
            };
        }
    }
    best.map_or(0, |(_, o)| o)
}

/// alpha · pool(x) + beta · prior, indexed like `y_desc` (`prior` is y's content before the
/// call, read only when beta ≠ 0).
///
/// # Errors
/// As [`PoolDesc::output_dims`]; [`Error::BadParam`] naming `y` for other dimensions.
pub fn forward(
    desc: &PoolDesc,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    prior: &[f32],
) -> Result<Vec<f64>> {
    let win = Windows::new(desc, x_desc)?;
    check_dims("y", win.out, y_desc)?;
    let [n, ch, oh, ow] = win.out;
    let mut out = vec![0.0f64; y_desc.span()];
    for b in 0..n {
        for c in 0..ch {
            for i in 0..oh {
                for j in 0..ow {
                    let (rows, cols, div) = win.window(i, j);
                    let v = if desc.mode() == PoolMode::Max {
                        x[argmax(x_desc, x, b, c, rows, cols)] as f64
                    } else {
                        let mut sum = 0.0f64;
                        for r in rows {
                            for col in cols.clone() {
                                sum += x[x_desc.offset(b, c, r, col)] as f64;
                            }
                        }
                        sum / div
                    };
                    let o = y_desc.offset(b, c, i, j);
                    out[o] = blend.apply_f64(v, prior.get(o).copied().unwrap_or(0.0) as f64);
                }
            }
        }
    }
    Ok(out)
}

/// alpha · pool_bwd(dy) + beta · prior, indexed like `dx_desc`: each dy goes to the max's
/// element, or dy / divisor to every real element of an average's window.
///
/// # Errors
/// As [`forward`], naming `dy` and `dx`.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    desc: &PoolDesc,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    dx_desc: &TensorDesc,
    prior: &[f32],
) -> Result<Vec<f64>> {
    let win = Windows::new(desc, x_desc)?;
    check_dims("dy", win.out, dy_desc)?;
    check_dims("dx", x_desc.dims(), dx_desc)?;
    let [n, ch, oh, ow] = win.out;
    // Gradients by x's offsets, then moved to dx's.
    let mut g = vec![0.0f64; x_desc.span()];
    for b in 0..n {
        for c in 0..ch {
            for i in 0..oh {
                for j in 0..ow {
                    let d = dy[dy_desc.offset(b, c, i, j)] as f64;
                    let (rows, cols, div) = win.window(i, j);
                    if desc.mode() == PoolMode::Max {
                        g[argmax(x_desc, x, b, c, rows, cols)] += d;
                    } else {
                        for r in rows {
                            for col in cols.clone() {
                                g[x_desc.offset(b, c, r, col)] += d / div;
                            }
                        }
                    }
                }
            }
        }
    }
    let mut out = vec![0.0f64; dx_desc.span()];
    for (ox, od) in x_desc.offsets().zip(dx_desc.offsets()) {
        out[od] = blend.apply_f64(g[ox], prior.get(od).copied().unwrap_or(0.0) as f64);
    }
    Ok(out)
}

/// The element each max window takes, as its offset r · W + c in its (n, c) plane of x, laid
/// out as [`crate::layers::pool::forward_with_indices`] must write them for an output
/// described by `y_desc`: element (n, c, i, j) at the offset
/// [`crate::layers::pool::indices_strides`] gives (y's dimensions packed in y's order, NCHW
/// or NHWC).
///
/// # Errors
/// As [`PoolDesc::output_dims`]; [`Error::BadParam`] naming `y` when `y_desc` does not
/// have the output's dimensions.
pub fn indices(
    desc: &PoolDesc,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
) -> Result<Vec<usize>> {
    let win = Windows::new(desc, x_desc)?;
    let [n, ch, oh, ow] = win.out;
    check_dims("y", win.out, y_desc)?;
    let is = crate::layers::pool::indices_strides(y_desc);
    let w = x_desc.w();
    let mut out = vec![0; n * ch * oh * ow];
    for b in 0..n {
        for c in 0..ch {
            for i in 0..oh {
                for j in 0..ow {
                    let (rows, cols, _) = win.window(i, j);
                    let o = argmax(x_desc, x, b, c, rows, cols);
                    // The chosen (r, col): scan again for the offset (x's strides may be any).
                    let (rows, cols, _) = win.window(i, j);
                    let at = rows
                        .flat_map(|r| cols.clone().map(move |col| (r, col)))
                        .find(|&(r, col)| x_desc.offset(b, c, r, col) == o)
                        .map_or(0, |(r, col)| r * w + col);
                    out[b * is[0] + c * is[1] + i * is[2] + j * is[3]] = at;
                }
            }
        }
    }
    Ok(out)
}
