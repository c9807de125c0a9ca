//! Descriptors: what a tensor, a filter and a convolution look like, and the *problem* that
//! combines them.
//!
//! Every constructor validates its input and returns a typed [`Error`](crate::Error) that names
//! the bad field; a descriptor that exists is internally consistent, and every size derived
//! from it (element counts, byte sizes, offsets) fits in `isize`.

mod conv;
mod epilogue;
mod filter;
mod problem;
mod tensor;

pub use conv::{ConvDesc, ConvMode, Padding};
pub use epilogue::Epilogue;
pub use filter::{FilterDesc, FilterLayout};
pub use problem::{ConvProblem, OpKind};
pub use tensor::{DataType, Layout, TensorDesc};

/// The offsets `d0·s0 + d1·s1 + d2·s2 + d3·s3` of every index of `dims`, in row-major order
/// of the indices (the last one fastest), whatever the strides.
fn offsets_of(dims: [usize; 4], st: [usize; 4]) -> impl Iterator<Item = usize> {
    let [a, b, c, d] = dims;
    (0..a).flat_map(move |i| {
        (0..b).flat_map(move |j| {
            (0..c).flat_map(move |k| {
                (0..d).map(move |l| i * st[0] + j * st[1] + k * st[2] + l * st[3])
            })
        })
    })
}
