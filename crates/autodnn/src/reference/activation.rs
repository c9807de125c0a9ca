//! Activations, forward and backward, in f64.

use crate::activation::Activation;
use crate::desc::TensorDesc;
use crate::error::Result;
use crate::layers::Blend;

/// alpha · act(x) + beta · prior, indexed like `y_desc` (`prior` is y's content before the
/// call, read only when beta ≠ 0).
///
/// # Errors
/// None today; a `Result` as every reference returns.
pub fn forward(
    act: Activation,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    prior: &[f32],
) -> Result<Vec<f64>> {
    let mut out = vec![0.0f64; y_desc.span()];
    for (ox, oy) in x_desc.offsets().zip(y_desc.offsets()) {
        let v = act.apply_f64(x[ox] as f64);
        out[oy] = blend.apply_f64(v, prior.get(oy).copied().unwrap_or(0.0) as f64);
    }
    Ok(out)
}

/// alpha · dy · act'(x) + beta · prior, indexed like `dx_desc`.
///
/// # Errors
/// None today; a `Result` as every reference returns.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    act: Activation,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    dx_desc: &TensorDesc,
    prior: &[f32],
) -> Result<Vec<f64>> {
    let mut out = vec![0.0f64; dx_desc.span()];
    for ((ox, og), od) in x_desc
        .offsets()
        .zip(dy_desc.offsets())
        .zip(dx_desc.offsets())
    {
        let v = dy[og] as f64 * act.derivative_f64(x[ox] as f64);
        out[od] = blend.apply_f64(v, prior.get(od).copied().unwrap_or(0.0) as f64);
    }
    Ok(out)
}
