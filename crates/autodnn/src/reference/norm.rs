//! Batch and layer normalization in f64, by the definitions (two passes: mean, then the
//! centred variance), blended like the operators (`crate::layers::norm`).

use crate::desc::TensorDesc;
use crate::error::Result;
use crate::layers::Blend;

/// The prior output at `o` (0 when the prior buffer is shorter).
fn prior_at(prior: &[f32], o: usize) -> f64 {
    prior.get(o).copied().unwrap_or(0.0) as f64
}

/// Offsets of channel `c`'s elements (all n, h, w).
fn channel(d: &TensorDesc, c: usize) -> impl Iterator<Item = usize> + '_ {
    let [n, _, h, w] = d.dims();
    (0..n).flat_map(move |b| (0..h).flat_map(move |i| (0..w).map(move |j| d.offset(b, c, i, j))))
}

/// Offsets of sample `n`'s elements in (c, h, w) order.
fn sample(d: &TensorDesc, n: usize) -> impl Iterator<Item = usize> + '_ {
    let [_, c, h, w] = d.dims();
    (0..c).flat_map(move |k| (0..h).flat_map(move |i| (0..w).map(move |j| d.offset(n, k, i, j))))
}

/// Mean and biased variance of the values at `offs`.
fn moments(x: &[f32], offs: impl Iterator<Item = usize>) -> (f64, f64) {
    let offs: Vec<usize> = offs.collect();
    let m = offs.len() as f64;
    let mean = offs.iter().map(|&o| x[o] as f64).sum::<f64>() / m;
    let var = offs
        .iter()
        .map(|&o| (x[o] as f64 - mean).powi(2))
        .sum::<f64>()
        / m;
    (mean, var)
}

/// Batch norm inference: alpha·(γ·(x − mean)/√(var + ε) + β) + beta·prior, indexed like
/// `y_desc`.
///
/// # Errors
/// None today; a `Result` as every reference returns.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_inference(
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    prior: &[f32],
    gamma: &[f32],
    beta: &[f32],
    mean: &[f32],
    var: &[f32],
    epsilon: f64,
) -> Result<Vec<f64>> {
    let mut out = vec![0.0; y_desc.span()];
    for c in 0..x_desc.c() {
        let inv = 1.0 / (var[c] as f64 + epsilon).sqrt();
        for (ox, oy) in channel(x_desc, c).zip(channel(y_desc, c)) {
            let v = gamma[c] as f64 * (x[ox] as f64 - mean[c] as f64) * inv + beta[c] as f64;
            out[oy] = blend.apply_f64(v, prior_at(prior, oy));
        }
    }
    Ok(out)
}

/// The results of a batch norm training pass in f64.
#[derive(Debug, Clone)]
pub struct BatchNormTraining {
    /// y, indexed like `y_desc`.
    pub y: Vec<f64>,
    /// Batch mean per channel.
    pub mean: Vec<f64>,
    /// Biased batch variance per channel.
    pub var: Vec<f64>,
    /// 1/√(var + ε) per channel.
    pub inv_std: Vec<f64>,
}

/// Batch norm training forward: batch statistics and y = alpha·(γ·x̂ + β) + beta·prior.
///
/// # Errors
/// None today; a `Result` as every reference returns.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_training(
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    prior: &[f32],
    gamma: &[f32],
    beta: &[f32],
    epsilon: f64,
) -> Result<BatchNormTraining> {
    let c = x_desc.c();
    let mut r = BatchNormTraining {
        y: vec![0.0; y_desc.span()],
        mean: vec![0.0; c],
        var: vec![0.0; c],
        inv_std: vec![0.0; c],
    };
    for k in 0..c {
        let (mean, var) = moments(x, channel(x_desc, k));
        let inv = 1.0 / (var + epsilon).sqrt();
        (r.mean[k], r.var[k], r.inv_std[k]) = (mean, var, inv);
        for (ox, oy) in channel(x_desc, k).zip(channel(y_desc, k)) {
            let v = gamma[k] as f64 * (x[ox] as f64 - mean) * inv + beta[k] as f64;
            r.y[oy] = blend.apply_f64(v, prior_at(prior, oy));
        }
    }
    Ok(r)
}

/// Gradients of a normalization in f64: dx indexed like `dx_desc`, dγ and dβ.
#[derive(Debug, Clone)]
pub struct NormGrads {
    /// dx.
    pub dx: Vec<f64>,
    /// dγ.
    pub dgamma: Vec<f64>,
    /// dβ.
    pub dbeta: Vec<f64>,
}

/// Batch norm backward from the saved mean and inv_std (cuDNN's formulas); `priors` are
/// dx's, dγ's and dβ's contents before the call.
///
/// # Errors
/// None today; a `Result` as every reference returns.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_backward(
    blend_data: Blend,
    blend_param: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    dx_desc: &TensorDesc,
    priors: (&[f32], &[f32], &[f32]),
    gamma: &[f32],
    mean: &[f32],
    inv_std: &[f32],
) -> Result<NormGrads> {
    let [n, c, h, w] = x_desc.dims();
    let m = (n * h * w) as f64;
    let mut r = NormGrads {
        dx: vec![0.0; dx_desc.span()],
        dgamma: vec![0.0; c],
        dbeta: vec![0.0; c],
    };
    for k in 0..c {
        let (mu, inv) = (mean[k] as f64, inv_std[k] as f64);
        let xh = |o: usize| (x[o] as f64 - mu) * inv;
        let sdy: f64 = channel(dy_desc, k).map(|o| dy[o] as f64).sum();
        let sdyx: f64 = channel(x_desc, k)
            .zip(channel(dy_desc, k))
            .map(|(ox, og)| dy[og] as f64 * xh(ox))
            .sum();
        for ((ox, og), od) in channel(x_desc, k)
            .zip(channel(dy_desc, k))
            .zip(channel(dx_desc, k))
        {
            let v = gamma[k] as f64 * inv / m * (m * dy[og] as f64 - sdy - xh(ox) * sdyx);
            r.dx[od] = blend_data.apply_f64(v, prior_at(priors.0, od));
        }
        r.dgamma[k] = blend_param.apply_f64(sdyx, prior_at(priors.1, k));
        r.dbeta[k] = blend_param.apply_f64(sdy, prior_at(priors.2, k));
    }
    Ok(r)
}

/// The results of a layer norm forward pass in f64.
#[derive(Debug, Clone)]
pub struct LayerNormForward {
    /// y, indexed like `y_desc`.
    pub y: Vec<f64>,
    /// Mean per sample.
    pub mean: Vec<f64>,
    /// 1/√(var + ε) per sample.
    pub rstd: Vec<f64>,
}

/// Layer norm forward over each sample's C·H·W elements, γ and β elementwise in (c, h, w)
/// order (1 and 0 when absent).
///
/// # Errors
/// None today; a `Result` as every reference returns.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_forward(
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    prior: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    epsilon: f64,
) -> Result<LayerNormForward> {
    let n = x_desc.n();
    let mut r = LayerNormForward {
        y: vec![0.0; y_desc.span()],
        mean: vec![0.0; n],
        rstd: vec![0.0; n],
    };
    for b in 0..n {
        let (mean, var) = moments(x, sample(x_desc, b));
        let rs = 1.0 / (var + epsilon).sqrt();
        (r.mean[b], r.rstd[b]) = (mean, rs);
        for (e, (ox, oy)) in sample(x_desc, b).zip(sample(y_desc, b)).enumerate() {
            let g = gamma.map_or(1.0, |g| g[e] as f64);
            let bt = beta.map_or(0.0, |v| v[e] as f64);
            let v = g * (x[ox] as f64 - mean) * rs + bt;
            r.y[oy] = blend.apply_f64(v, prior_at(prior, oy));
        }
    }
    Ok(r)
}

/// Layer norm backward from the saved mean and rstd: dx, and dγ, dβ (C·H·W values each);
/// `priors` are dx's, dγ's and dβ's contents before the call.
///
/// # Errors
/// None today; a `Result` as every reference returns.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward(
    blend_data: Blend,
    blend_param: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    dx_desc: &TensorDesc,
    priors: (&[f32], &[f32], &[f32]),
    gamma: Option<&[f32]>,
    mean: &[f32],
    rstd: &[f32],
) -> Result<NormGrads> {
    let [n, c, h, w] = x_desc.dims();
    let chw = c * h * w;
    let m = chw as f64;
    let mut r = NormGrads {
        dx: vec![0.0; dx_desc.span()],
        dgamma: vec![0.0; chw],
        dbeta: vec![0.0; chw],
    };
    let gam = |e: usize| gamma.map_or(1.0, |g| g[e] as f64);
    for b in 0..n {
        let (mu, rs) = (mean[b] as f64, rstd[b] as f64);
        let offs: Vec<(usize, usize)> = sample(x_desc, b).zip(sample(dy_desc, b)).collect();
        let sg: f64 = offs
            .iter()
            .enumerate()
            .map(|(e, &(_, og))| dy[og] as f64 * gam(e))
            .sum();
        let sgx: f64 = offs
            .iter()
            .enumerate()
            .map(|(e, &(ox, og))| dy[og] as f64 * gam(e) * (x[ox] as f64 - mu) * rs)
            .sum();
        for (e, (&(ox, og), od)) in offs.iter().zip(sample(dx_desc, b)).enumerate() {
            let xh = (x[ox] as f64 - mu) * rs;
            let g = dy[og] as f64 * gam(e);
            let v = rs * (g - sg / m - xh * sgx / m);
            r.dx[od] = blend_data.apply_f64(v, prior_at(priors.0, od));
            r.dgamma[e] += dy[og] as f64 * xh;
            r.dbeta[e] += dy[og] as f64;
        }
    }
    for e in 0..chw {
        r.dgamma[e] = blend_param.apply_f64(r.dgamma[e], prior_at(priors.1, e));
        r.dbeta[e] = blend_param.apply_f64(r.dbeta[e], prior_at(priors.2, e));
    }
    Ok(r)
}
