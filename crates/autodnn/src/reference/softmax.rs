//! Softmax and log-softmax, forward and backward, in f64.

use crate::desc::TensorDesc;
use crate::error::Result;
use crate::layers::softmax::{SoftmaxAlgorithm, SoftmaxMode};
use crate::layers::Blend;

/// The groups of logical coordinates one softmax runs over: per (n, h, w) the C channels
/// (channel mode), per n the C·H·W elements (instance mode), as lists of (n, c, h, w).
pub fn groups(mode: SoftmaxMode, dims: [usize; 4]) -> Vec<Vec<[usize; 4]>> {
    let [n, c, h, w] = dims;
    let mut out = Vec::new();
    for b in 0..n {
        match mode {
            SoftmaxMode::Channel => {
                for i in 0..h {
                    for j in 0..w {
                        out.push((0..c).map(|k| [b, k, i, j]).collect());
                    }
                }
            }
            SoftmaxMode::Instance => {
                let mut g = Vec::with_capacity(c * h * w);
                for k in 0..c {
                    for i in 0..h {
                        for j in 0..w {
                            g.push([b, k, i, j]);
                        }
                    }
                }
                out.push(g);
            }
        }
    }
    out
}

fn at(d: &TensorDesc, p: [usize; 4]) -> usize {
    d.offset(p[0], p[1], p[2], p[3])
}

/// alpha · softmax(x) + beta · prior (or log-softmax), indexed like `y_desc` (`prior` is y's
/// content before the call, read only when beta ≠ 0).
///
/// # Errors
/// None today; a `Result` as every reference returns.
pub fn forward(
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    prior: &[f32],
) -> Result<Vec<f64>> {
    let mut out = vec![0.0f64; y_desc.span()];
    for g in groups(mode, x_desc.dims()) {
        let xs: Vec<f64> = g.iter().map(|&p| x[at(x_desc, p)] as f64).collect();
        let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = xs.iter().map(|&v| (v - m).exp()).sum();
        for (&p, &v) in g.iter().zip(&xs) {
            let r = match algo {
                SoftmaxAlgorithm::Accurate => (v - m).exp() / s,
                SoftmaxAlgorithm::Log => (v - m) - s.ln(),
            };
            let o = at(y_desc, p);
            out[o] = blend.apply_f64(r, prior.get(o).copied().unwrap_or(0.0) as f64);
        }
    }
    Ok(out)
}

/// alpha · y ⊙ (dy − Σ dy·y) + beta · prior (softmax) or alpha · (dy − exp(y) · Σ dy) +
/// beta · prior (log-softmax), indexed like `dx_desc`.
///
/// # Errors
/// None today; a `Result` as every reference returns.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    blend: Blend,
    y_desc: &TensorDesc,
    y: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    dx_desc: &TensorDesc,
    prior: &[f32],
) -> Result<Vec<f64>> {
    let mut out = vec![0.0f64; dx_desc.span()];
    for g in groups(mode, y_desc.dims()) {
        let ys: Vec<f64> = g.iter().map(|&p| y[at(y_desc, p)] as f64).collect();
        let ds: Vec<f64> = g.iter().map(|&p| dy[at(dy_desc, p)] as f64).collect();
        let s: f64 = match algo {
            SoftmaxAlgorithm::Accurate => ys.iter().zip(&ds).map(|(a, b)| a * b).sum(),
            SoftmaxAlgorithm::Log => ds.iter().sum(),
        };
        for ((&p, &v), &d) in g.iter().zip(&ys).zip(&ds) {
            let r = match algo {
                SoftmaxAlgorithm::Accurate => v * (d - s),
                SoftmaxAlgorithm::Log => d - v.exp() * s,
            };
            let o = at(dx_desc, p);
            out[o] = blend.apply_f64(r, prior.get(o).copied().unwrap_or(0.0) as f64);
        }
    }
    Ok(out)
}
