//! From C pointers to Rust references and slices, after the checks that can be made: null,
//! alignment, and overlap between a call's output and its inputs.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex};

use dnn::op::{Tensor, TensorMut};
use dnn::DataType;

use crate::status::{bad, R};

/// The live handles and descriptors: address → kind. A pointer is dereferenced only when it
/// is here with the expected kind, so that NULL, a pointer to another kind of object and a
/// destroyed one are refused with a status (an address reused by a newer object of the same
/// kind cannot be told apart).
static LIVE: LazyLock<Mutex<HashMap<usize, &'static str>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn live_map() -> std::sync::MutexGuard<'static, HashMap<usize, &'static str>> {
    // Nothing behind the lock is left half-updated by a panic.
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records a new object of `kind` at `p`.
pub(crate) fn register<T>(p: *mut T, kind: &'static str) {
    live_map().insert(p as usize, kind);
}

/// Forgets the object at `p`; true when it was live and of `kind`.
pub(crate) fn unregister<T>(p: *mut T, kind: &'static str) -> bool {
    let mut m = live_map();
    if m.get(&(p as usize)) == Some(&kind) {
        m.remove(&(p as usize));
        true
    } else {
        false
    }
}

/// True when `p` is a live object of `kind`.
pub(crate) fn is_live<T>(p: *mut T, kind: &'static str) -> bool {
    !p.is_null() && live_map().get(&(p as usize)) == Some(&kind)
}

/// A buffer of a call: its parameter name, address and extent in bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extent {
    pub(crate) field: &'static str,
    pub(crate) start: usize,
    pub(crate) bytes: usize,
}

impl Extent {
    pub(crate) fn of(field: &'static str, p: *const c_void, elements: usize) -> Extent {
        Extent::of_type(field, p, elements, DataType::F32)
    }
    /// `elements` of `dtype` at `p`.
    pub(crate) fn of_type(
        field: &'static str,
        p: *const c_void,
        elements: usize,
        dtype: DataType,
    ) -> Extent {
        Extent {
            field,
            start: p as usize,
            bytes: elements.saturating_mul(dtype.size()),
        }
    }
}

/// Refuses an output whose memory overlaps one of the inputs: the library reads its inputs
/// while it writes the output.
pub(crate) fn check_disjoint(out: Extent, inputs: &[Extent]) -> R<()> {
    for i in inputs {
        let overlap = out.bytes > 0
            && i.bytes > 0
            && out.start < i.start.saturating_add(i.bytes)
            && i.start < out.start.saturating_add(out.bytes);
        if overlap {
            return Err(bad(
                out.field,
                format!("{:#x}", out.start),
                &format!(
                    "overlaps {} (outputs must not share memory with inputs)",
                    i.field
                ),
            ));
        }
    }
    Ok(())
}

/// The reference behind an output parameter.
///
/// # Safety
/// `p` is null or valid for writes of a `T`, and unaliased for the returned lifetime.
pub(crate) unsafe fn out<'a, T>(p: *mut T, field: &str) -> R<&'a mut T> {
    if p.is_null() {
        return Err(bad(
            field,
            "NULL",
            "must point to where the result is written",
        ));
    }
    if !p.is_aligned() {
        return Err(bad(field, format!("{p:p}"), "is not aligned for its type"));
    }
    // SAFETY: non-null and aligned; the caller guarantees it is valid and unaliased.
    Ok(unsafe { &mut *p })
}

/// The value behind an input parameter (alpha, beta).
///
/// # Safety
/// `p` is null or valid for reads of a `T`.
pub(crate) unsafe fn value<T: Copy>(p: *const T, field: &str) -> R<T> {
    if p.is_null() {
        return Err(bad(field, "NULL", "must point to the value"));
    }
    if !p.is_aligned() {
        return Err(bad(field, format!("{p:p}"), "is not aligned for its type"));
    }
    // SAFETY: non-null and aligned; the caller guarantees it is valid for reads.
    Ok(unsafe { p.read() })
}

/// Element types of tensors passed from C: plain numbers, any bit pattern valid.
pub(crate) trait Element: Copy {
    /// The C name, for messages.
    const C_NAME: &'static str;
}
impl Element for f32 {
    const C_NAME: &'static str = "float";
}
impl Element for dnn::bf16 {
    const C_NAME: &'static str = "bfloat16";
}
impl Element for dnn::f16 {
    const C_NAME: &'static str = "half";
}

/// `len` elements of `T` at `p` (an empty slice when `len` is 0, whatever `p`).
///
/// # Safety
/// `p` is null or valid for reads of `len` values of `T`, not written during the lifetime.
/// `len · size_of::<T>()` must not exceed `isize::MAX` (the descriptors' constructors
/// guarantee it).
pub(crate) unsafe fn elements<'a, T: Element>(
    p: *const c_void,
    len: usize,
    field: &str,
) -> R<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    let p = p.cast::<T>();
    if p.is_null() {
        return Err(bad(field, "NULL", "must point to the data"));
    }
    if !p.is_aligned() {
        return Err(bad(
            field,
            format!("{p:p}"),
            &format!("is not aligned for {}", T::C_NAME),
        ));
    }
    // SAFETY: non-null and aligned; the caller guarantees `len` readable, unmutated elements,
    // whose byte size fits in isize; every bit pattern is a value of `T`.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// `len` elements of `T` at `p`, to be written.
///
/// # Safety
/// As [`elements`], for writes, and not aliased by any other reference during the lifetime.
pub(crate) unsafe fn elements_mut<'a, T: Element>(
    p: *mut c_void,
    len: usize,
    field: &str,
) -> R<&'a mut [T]> {
    if len == 0 {
        return Ok(&mut []);
    }
    let p = p.cast::<T>();
    if p.is_null() {
        return Err(bad(field, "NULL", "must point to the data"));
    }
    if !p.is_aligned() {
        return Err(bad(
            field,
            format!("{p:p}"),
            &format!("is not aligned for {}", T::C_NAME),
        ));
    }
    // SAFETY: non-null and aligned; the caller guarantees `len` writable elements not
    // aliased elsewhere (overlap with the call's inputs is checked before), whose byte size
    // fits in isize.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// `len` f32 elements at `p`.
///
/// # Safety
/// As [`elements`].
pub(crate) unsafe fn floats<'a>(p: *const c_void, len: usize, field: &str) -> R<&'a [f32]> {
    // SAFETY: forwarded.
    unsafe { elements(p, len, field) }
}

/// `len` f32 elements at `p`, to be written.
///
/// # Safety
/// As [`elements_mut`].
pub(crate) unsafe fn floats_mut<'a>(p: *mut c_void, len: usize, field: &str) -> R<&'a mut [f32]> {
    // SAFETY: forwarded.
    unsafe { elements_mut(p, len, field) }
}

/// `len` elements of `dtype` at `p`, as a typed view.
///
/// # Safety
/// As [`elements`].
pub(crate) unsafe fn tensor_in<'a>(
    p: *const c_void,
    len: usize,
    dtype: DataType,
    field: &str,
) -> R<Tensor<'a>> {
    // SAFETY: forwarded.
    unsafe {
        Ok(match dtype {
            DataType::F32 => Tensor::F32(elements(p, len, field)?),
            DataType::Bf16 => Tensor::Bf16(elements(p, len, field)?),
            DataType::F16 => Tensor::F16(elements(p, len, field)?),
        })
    }
}

/// `len` elements of `dtype` at `p`, to be written, as a typed view.
///
/// # Safety
/// As [`elements_mut`].
pub(crate) unsafe fn tensor_out<'a>(
    p: *mut c_void,
    len: usize,
    dtype: DataType,
    field: &str,
) -> R<TensorMut<'a>> {
    // SAFETY: forwarded.
    unsafe {
        Ok(match dtype {
            DataType::F32 => TensorMut::F32(elements_mut(p, len, field)?),
            DataType::Bf16 => TensorMut::Bf16(elements_mut(p, len, field)?),
            DataType::F16 => TensorMut::F16(elements_mut(p, len, field)?),
        })
    }
}

/// The caller's workspace: `None` (the handle supplies one) when `p` is NULL and `bytes` 0.
///
/// # Safety
/// `p` is null or valid for writes of `bytes` bytes, unaliased during the lifetime.
pub(crate) unsafe fn workspace<'a>(p: *mut c_void, bytes: usize) -> R<Option<&'a mut [u8]>> {
    if p.is_null() {
        if bytes != 0 {
            return Err(bad(
                "workSpace",
                "NULL",
                &format!("workSpaceSizeInBytes is {bytes}: a NULL workspace must have size 0"),
            ));
        }
        return Ok(None);
    }
    if bytes > isize::MAX as usize {
        return Err(bad(
            "workSpaceSizeInBytes",
            bytes,
            "exceeds the largest object size",
        ));
    }
    // SAFETY: non-null, any alignment suits bytes, size within isize::MAX; the caller
    // guarantees `bytes` writable, unaliased bytes.
    Ok(Some(unsafe {
        std::slice::from_raw_parts_mut(p.cast::<u8>(), bytes)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::AUTODNN_STATUS_BAD_PARAM;

    #[test]
    fn null_and_misaligned_pointers_are_bad_params() {
        // SAFETY: the pointers are refused before any access.
        unsafe {
            let e = floats(std::ptr::null(), 4, "x").unwrap_err();
            assert_eq!(e.status, AUTODNN_STATUS_BAD_PARAM);
            assert_eq!(e.message, "bad x = NULL: must point to the data");
            let buf = [0u32; 4];
            let odd = buf.as_ptr().cast::<u8>().add(1).cast::<c_void>();
            assert!(floats(odd, 2, "w")
                .unwrap_err()
                .message
                .contains("not aligned"));
            assert!(floats_mut(std::ptr::null_mut(), 1, "y").is_err());
            // Empty buffers need no pointer.
            assert!(floats(std::ptr::null(), 0, "x").unwrap().is_empty());
            assert!(out::<i32>(std::ptr::null_mut(), "n").is_err());
            assert!(value::<f32>(std::ptr::null(), "alpha").is_err());
            assert!(workspace(std::ptr::null_mut(), 0).unwrap().is_none());
            assert!(workspace(std::ptr::null_mut(), 8).is_err());
        }
    }

    #[test]
    fn overlapping_output_is_refused() {
        let x = Extent {
            field: "x",
            start: 1000,
            bytes: 40,
        };
        let y = |start| Extent {
            field: "y",
            start,
            bytes: 8,
        };
        assert!(check_disjoint(y(1040), &[x]).is_ok());
        assert!(check_disjoint(y(992), &[x]).is_ok());
        let e = check_disjoint(y(1036), &[x]).unwrap_err();
        assert!(e.message.contains("overlaps x"), "{}", e.message);
        assert!(check_disjoint(y(996), &[x]).is_err());
    }
}
