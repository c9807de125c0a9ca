//! Reading and writing f32 `.npy` files (NumPy's array format) for `conv --input/--weights/
//! --output`, through [`autodnn::npy`].

use std::path::Path;

use crate::error::{CliError, CliResult};

fn fmt_shape<T: std::fmt::Display>(shape: &[T]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// Reads an f32 array of exactly `shape` (C order) from `path`. `desc` names the axes for the
/// error message, e.g. `"NCHW"`.
///
/// # Errors
/// Bad input naming the file for a file that cannot be opened or read, is not a float32
/// `.npy` file (see [`autodnn::npy`]), is in Fortran order, or has another shape.
pub fn read_f32(path: &Path, shape: &[usize], desc: &str) -> CliResult<Vec<f32>> {
    let name = path.display();
    let bad = |m: String| CliError::bad(format!("{name}: {m}"));
    let a = autodnn::npy::read_f32(path).map_err(|e| match e {
        autodnn::Error::Io { message, .. } => bad(format!("cannot read: {message}")),
        autodnn::Error::OutOfMemory { .. } => CliError::fail(format!("{name}: {e}")),
        e => bad(format!("not a readable float32 .npy file: {e}")),
    })?;
    if a.shape != shape {
        return Err(bad(format!(
            "expected shape {} ({desc}), got {}",
            fmt_shape(shape),
            fmt_shape(&a.shape)
        )));
    }
    Ok(a.data)
}

/// Writes `data` as a C-order little-endian f32 array of `shape` to `path`.
///
/// # Errors
/// A failure naming the file when it cannot be written.
pub fn write_f32(path: &Path, shape: &[usize], data: &[f32]) -> CliResult {
    autodnn::npy::write_f32(path, shape, data).map_err(|e| match e {
        autodnn::Error::Io { message, .. } => {
            CliError::fail(format!("{}: cannot write: {message}", path.display()))
        }
        e => CliError::fail(format!("{}: cannot write: {e}", path.display())),
    })
}
