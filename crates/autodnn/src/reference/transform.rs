//! Layout transforms in f64.

use crate::desc::TensorDesc;
use crate::error::{Error, Result};
use crate::layers::Blend;

/// alpha · x + beta · prior, element by element, indexed like `y_desc`.
///
/// # Errors
/// [`Error::BadParam`] naming `y` when the dimensions differ.
pub fn forward(
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    prior: &[f32],
) -> Result<Vec<f64>> {
    if x_desc.dims() != y_desc.dims() {
        return Err(Error::bad(
            "y",
            format!("{:?}", y_desc.dims()),
            "must have x's dimensions",
        ));
    }
    let mut out = vec![0.0f64; y_desc.span()];
    for (ox, oy) in x_desc.offsets().zip(y_desc.offsets()) {
        let p = prior.get(oy).copied().unwrap_or(0.0) as f64;
        out[oy] = blend.apply_f64(x[ox] as f64, p);
    }
    Ok(out)
}
