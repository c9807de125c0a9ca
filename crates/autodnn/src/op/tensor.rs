//! Tensor views that carry their element type.

use crate::desc::DataType;
use crate::error::{Error, Result};
use half::{bf16, f16};

/// A tensor's elements, read-only, tagged with their type.
#[derive(Debug, Clone, Copy)]
pub enum Tensor<'a> {
    /// 32-bit floats.
    F32(&'a [f32]),
    /// bfloat16.
    Bf16(&'a [bf16]),
    /// IEEE half precision.
    F16(&'a [f16]),
}

/// A tensor's elements, writable, tagged with their type.
#[derive(Debug)]
pub enum TensorMut<'a> {
    /// 32-bit floats.
    F32(&'a mut [f32]),
    /// bfloat16.
    Bf16(&'a mut [bf16]),
    /// IEEE half precision.
    F16(&'a mut [f16]),
}

fn wrong(field: &str, want: DataType, got: DataType) -> Error {
    Error::Unsupported {
        what: format!(
            "{field} holds {} elements where {} was expected",
            got.name(),
            want.name()
        ),
    }
}

impl<'a> Tensor<'a> {
    /// The element type.
    pub fn dtype(&self) -> DataType {
        match self {
            Tensor::F32(_) => DataType::F32,
            Tensor::Bf16(_) => DataType::Bf16,
            Tensor::F16(_) => DataType::F16,
        }
    }
    /// Elements held.
    pub fn len(&self) -> usize {
        match self {
            Tensor::F32(v) => v.len(),
            Tensor::Bf16(v) => v.len(),
            Tensor::F16(v) => v.len(),
        }
    }
    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The f32 elements.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming `field` for another element type.
    pub fn f32(&self, field: &str) -> Result<&'a [f32]> {
        match *self {
            Tensor::F32(v) => Ok(v),
            _ => Err(wrong(field, DataType::F32, self.dtype())),
        }
    }
}

impl<'a> From<&'a [f32]> for Tensor<'a> {
    fn from(v: &'a [f32]) -> Tensor<'a> {
        Tensor::F32(v)
    }
}
impl<'a> From<&'a [bf16]> for Tensor<'a> {
    fn from(v: &'a [bf16]) -> Tensor<'a> {
        Tensor::Bf16(v)
    }
}
impl<'a> From<&'a [f16]> for Tensor<'a> {
    fn from(v: &'a [f16]) -> Tensor<'a> {
        Tensor::F16(v)
    }
}

impl<'a> TensorMut<'a> {
    /// The element type.
    pub fn dtype(&self) -> DataType {
        match self {
            TensorMut::F32(_) => DataType::F32,
            TensorMut::Bf16(_) => DataType::Bf16,
            TensorMut::F16(_) => DataType::F16,
        }
    }
    /// Elements held.
    pub fn len(&self) -> usize {
        match self {
            TensorMut::F32(v) => v.len(),
            TensorMut::Bf16(v) => v.len(),
            TensorMut::F16(v) => v.len(),
        }
    }
    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The f32 elements.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming `field` for another element type.
    pub fn f32(&mut self, field: &str) -> Result<&mut [f32]> {
        let dt = self.dtype();
        match self {
            TensorMut::F32(v) => Ok(v),
            _ => Err(wrong(field, DataType::F32, dt)),
        }
    }
    /// A read-only view of the same elements.
    pub fn as_tensor(&self) -> Tensor<'_> {
        match self {
            TensorMut::F32(v) => Tensor::F32(v),
            TensorMut::Bf16(v) => Tensor::Bf16(v),
            TensorMut::F16(v) => Tensor::F16(v),
        }
    }
}

impl<'a> From<&'a mut [f32]> for TensorMut<'a> {
    fn from(v: &'a mut [f32]) -> TensorMut<'a> {
        TensorMut::F32(v)
    }
}
