//! Reading and writing f32 `.npy` files (NumPy's array format) for `conv --input/--weights/
//! --output`.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use npyz::{DType, NpyFile, Order, TypeChar, WriteOptions, WriterBuilder};

use crate::error::{CliError, CliResult};

fn fmt_shape<T: std::fmt::Display>(shape: &[T]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// Reads an f32 array of exactly `shape` (C order) from `path`. `desc` names the axes for the
/// error message, e.g. `"NCHW"`.
///
/// # Errors
/// Bad input naming the file for a file that cannot be opened or read, is not an f32 `.npy`
/// file, is in Fortran order, or has another shape.
pub fn read_f32(path: &Path, shape: &[usize], desc: &str) -> CliResult<Vec<f32>> {
    let name = path.display();
    let bad = |m: String| CliError::bad(format!("{name}: {m}"));
    let file = File::open(path).map_err(|e| bad(format!("cannot open: {e}")))?;
    let npy = NpyFile::new(BufReader::new(file))
        .map_err(|e| bad(format!("not a readable .npy file: {e}")))?;
    match npy.dtype() {
        DType::Plain(ts) if ts.type_char() == TypeChar::Float && ts.size_field() == 4 => {}
        other => {
            return Err(bad(format!(
                "expected dtype float32 ('<f4'), got {}",
                other.descr()
            )))
        }
    }
    let got = npy.shape().to_vec();
    if got.len() != shape.len() || got.iter().zip(shape).any(|(&g, &e)| g != e as u64) {
        return Err(bad(format!(
            "expected shape {} ({desc}), got {}",
            fmt_shape(shape),
            fmt_shape(&got)
        )));
    }
    if npy.order() == Order::Fortran && shape.iter().filter(|&&d| d > 1).count() > 1 {
        return Err(bad(
            "Fortran-order arrays are not supported; save a C-order array \
             (numpy.ascontiguousarray)"
                .into(),
        ));
    }
    let data = npy
        .into_vec::<f32>()
        .map_err(|e| bad(format!("reading data: {e}")))?;
    let expected: usize = shape.iter().product();
    if data.len() != expected {
        return Err(bad(format!(
            "holds {} elements, expected {expected}",
            data.len()
        )));
    }
    Ok(data)
}

/// Writes `data` as a C-order little-endian f32 array of `shape` to `path`.
///
/// # Errors
/// A failure naming the file when it cannot be written.
pub fn write_f32(path: &Path, shape: &[usize], data: &[f32]) -> CliResult {
    let fail = |e: std::io::Error| CliError::fail(format!("{}: cannot write: {e}", path.display()));
    let file = File::create(path).map_err(fail)?;
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let mut w = WriteOptions::new()
        .default_dtype()
        .shape(&shape)
        .writer(BufWriter::new(file))
        .begin_nd()
        .map_err(fail)?;
    w.extend(data.iter().copied()).map_err(fail)?;
    w.finish().map_err(fail)?;
    Ok(())
}
