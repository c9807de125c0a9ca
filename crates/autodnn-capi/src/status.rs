//! Status codes, the mapping from the library's errors, the panic guard every entry point runs
//! in, and this thread's last error message.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use dnn::{Error, ErrorKind};

/// The result of every call (cuDNN's `cudnnStatus_t`; the values are cuDNN's).
pub type autodnnStatus_t = c_int;
/// The call succeeded.
pub const AUTODNN_STATUS_SUCCESS: autodnnStatus_t = 0;
/// A descriptor was created but never set.
pub const AUTODNN_STATUS_NOT_INITIALIZED: autodnnStatus_t = 1;
/// Memory (a workspace, a scratch buffer, worker threads) could not be had, or the handle's
/// workspace limit would be exceeded.
pub const AUTODNN_STATUS_ALLOC_FAILED: autodnnStatus_t = 2;
/// An argument is wrong: a NULL, misaligned or overlapping buffer, a bad value, mismatched
/// descriptors, a NULL or destroyed handle or descriptor, a workspace too small, an unknown
/// algorithm.
pub const AUTODNN_STATUS_BAD_PARAM: autodnnStatus_t = 3;
/// A bug in the library (a caught panic).
pub const AUTODNN_STATUS_INTERNAL_ERROR: autodnnStatus_t = 4;
/// Running failed: every algorithm tried failed, or a file could not be read or written.
pub const AUTODNN_STATUS_EXECUTION_FAILED: autodnnStatus_t = 8;
/// A valid request that this build does not compute: an element type without kernels, or an
/// algorithm that does not handle the problem.
pub const AUTODNN_STATUS_NOT_SUPPORTED: autodnnStatus_t = 9;

/// A failed call: its status and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) status: autodnnStatus_t,
    pub(crate) message: String,
}

pub(crate) type R<T> = Result<T, Failure>;

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure {
            status: status_of(&e),
            message: e.to_string(),
        }
    }
}

/// The status of a library error.
pub(crate) fn status_of(e: &Error) -> autodnnStatus_t {
    match e {
        // The caller's workspace is an argument of the C call.
        Error::WorkspaceTooSmall { .. } => AUTODNN_STATUS_BAD_PARAM,
        Error::Declined { .. } => AUTODNN_STATUS_NOT_SUPPORTED,
        Error::OutOfMemory { .. } => AUTODNN_STATUS_ALLOC_FAILED,
        Error::AllFailed { last, .. } if matches!(**last, Error::OutOfMemory { .. }) => {
            AUTODNN_STATUS_ALLOC_FAILED
        }
        e => match e.kind() {
            ErrorKind::BadInput => AUTODNN_STATUS_BAD_PARAM,
            ErrorKind::Unsupported => AUTODNN_STATUS_NOT_SUPPORTED,
            ErrorKind::Runtime | ErrorKind::Io => AUTODNN_STATUS_EXECUTION_FAILED,
        },
    }
}

/// `AUTODNN_STATUS_BAD_PARAM` naming `field`, as the library's errors do.
pub(crate) fn bad(field: &str, value: impl ToString, reason: &str) -> Failure {
    Error::BadParam {
        field: field.into(),
        value: value.to_string(),
        reason: reason.into(),
    }
    .into()
}

/// `AUTODNN_STATUS_NOT_INITIALIZED` for a descriptor created but never set.
pub(crate) fn not_set(field: &str, setter: &str) -> Failure {
    Failure {
        status: AUTODNN_STATUS_NOT_INITIALIZED,
        message: format!("{field} is not set: call {setter} first"),
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_last_error(message: &str) {
    // At thread exit the slot may be gone: the message is then dropped, never a panic.
    let _ = LAST_ERROR.try_with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            m.clear();
            m.push_str(message);
        }
    });
}

/// Runs one entry point's body: a panic becomes `AUTODNN_STATUS_INTERNAL_ERROR`, an error its
/// status; the thread's last error message is the call's (empty on success).
pub(crate) fn guard(f: impl FnOnce() -> R<()>) -> autodnnStatus_t {
    let (status, message) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => (AUTODNN_STATUS_SUCCESS, String::new()),
        Ok(Err(fail)) => (fail.status, fail.message),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            (
                AUTODNN_STATUS_INTERNAL_ERROR,
                format!("internal error: {what}"),
            )
        }
    };
    set_last_error(&message);
    status
}

/// The name of a status (`"AUTODNN_STATUS_BAD_PARAM"`), a static string;
/// `"AUTODNN_STATUS_UNKNOWN"` for a value that is not a status.
#[no_mangle]
pub extern "C" fn autodnnGetErrorString(status: autodnnStatus_t) -> *const c_char {
    let s: &'static CStr = match status {
        AUTODNN_STATUS_SUCCESS => c"AUTODNN_STATUS_SUCCESS",
        AUTODNN_STATUS_NOT_INITIALIZED => c"AUTODNN_STATUS_NOT_INITIALIZED",
        AUTODNN_STATUS_ALLOC_FAILED => c"AUTODNN_STATUS_ALLOC_FAILED",
        AUTODNN_STATUS_BAD_PARAM => c"AUTODNN_STATUS_BAD_PARAM",
        AUTODNN_STATUS_INTERNAL_ERROR => c"AUTODNN_STATUS_INTERNAL_ERROR",
        AUTODNN_STATUS_EXECUTION_FAILED => c"AUTODNN_STATUS_EXECUTION_FAILED",
        AUTODNN_STATUS_NOT_SUPPORTED => c"AUTODNN_STATUS_NOT_SUPPORTED",
        _ => c"AUTODNN_STATUS_UNKNOWN",
    };
    s.as_ptr()
}

/// Copies the message of this thread's last call (empty when it succeeded), which names the
/// field at fault (`bad y.h = 14: the convolution's output has 12`), into `message`, truncated
/// to `max_size - 1` bytes and NUL-terminated. Nothing is written when `message` is NULL or
/// `max_size` is 0.
#[no_mangle]
pub unsafe extern "C" fn autodnnGetLastErrorString(message: *mut c_char, max_size: usize) {
    if message.is_null() || max_size == 0 {
        return;
    }
    let _ = catch_unwind(|| {
        let _ = LAST_ERROR.try_with(|m| {
            let m = m.try_borrow().map(|m| m.clone()).unwrap_or_default();
            let mut n = m.len().min(max_size - 1);
            // Cut at a character boundary.
            while !m.is_char_boundary(n) {
                n -= 1;
            }
            // SAFETY: the caller gives `max_size` writable bytes at `message`; n + 1 <=
            // max_size, and `m` is a separate allocation.
            unsafe {
                std::ptr::copy_nonoverlapping(m.as_ptr(), message.cast::<u8>(), n);
                *message.add(n) = 0;
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_statuses_by_kind() {
        let cases = [
            (
                Error::BadParam {
                    field: "x.c".into(),
                    value: "0".into(),
                    reason: "r".into(),
                },
                AUTODNN_STATUS_BAD_PARAM,
            ),
            (
                Error::Overflow {
                    field: "f".into(),
                    detail: "d".into(),
                },
                AUTODNN_STATUS_BAD_PARAM,
            ),
            (
                Error::BufferTooSmall {
                    field: "x".into(),
                    needed: 2,
                    got: 1,
                },
                AUTODNN_STATUS_BAD_PARAM,
            ),
            (
                Error::UnknownAlgorithm {
                    name: "n".into(),
                    known: "k".into(),
                },
                AUTODNN_STATUS_BAD_PARAM,
            ),
            (
                Error::Unsupported { what: "f16".into() },
                AUTODNN_STATUS_NOT_SUPPORTED,
            ),
            (
                Error::Declined {
                    algo: "fft".into(),
                    reason: "r".into(),
                },
                AUTODNN_STATUS_NOT_SUPPORTED,
            ),
            (
                Error::WorkspaceTooSmall {
                    algo: "gemm".into(),
                    needed: 2,
                    got: 1,
                },
                AUTODNN_STATUS_BAD_PARAM,
            ),
            (
                Error::OutOfMemory {
                    bytes: 1,
                    what: "w".into(),
                },
                AUTODNN_STATUS_ALLOC_FAILED,
            ),
            (
                Error::AllFailed {
                    tried: vec![],
                    last: Box::new(Error::Declined {
                        algo: "a".into(),
                        reason: "r".into(),
                    }),
                },
                AUTODNN_STATUS_EXECUTION_FAILED,
            ),
            (
                Error::AllFailed {
                    tried: vec![],
                    last: Box::new(Error::OutOfMemory {
                        bytes: 1,
                        what: "w".into(),
                    }),
                },
                AUTODNN_STATUS_ALLOC_FAILED,
            ),
            (
                Error::Io {
                    path: "p".into(),
                    message: "m".into(),
                },
                AUTODNN_STATUS_EXECUTION_FAILED,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(status_of(&e), want, "{e}");
            assert_eq!(Failure::from(e.clone()).message, e.to_string());
        }
    }

    fn last() -> String {
        let mut buf = [0 as c_char; 256];
        // SAFETY: 256 writable bytes.
        unsafe { autodnnGetLastErrorString(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: the function NUL-terminates within the buffer.
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn guard_catches_panics_and_keeps_the_message() {
        assert_eq!(guard(|| panic!("boom")), AUTODNN_STATUS_INTERNAL_ERROR);
        assert_eq!(last(), "internal error: boom");
        assert_eq!(
            guard(|| Err(bad("conv.pad_h", -1, "must be at least 0"))),
            AUTODNN_STATUS_BAD_PARAM
        );
        assert_eq!(last(), "bad conv.pad_h = -1: must be at least 0");
        assert_eq!(guard(|| Ok(())), AUTODNN_STATUS_SUCCESS);
        assert_eq!(last(), "");
    }

    #[test]
    fn last_error_is_truncated_to_the_buffer() {
        guard(|| Err(bad("abcdef", 1, "r")));
        let mut buf = [1 as c_char; 5];
        // SAFETY: 5 writable bytes.
        unsafe { autodnnGetLastErrorString(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: NUL-terminated within the buffer.
        let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
        assert_eq!(s.to_bytes(), b"bad ");
        // SAFETY: a null buffer is ignored.
        unsafe { autodnnGetLastErrorString(std::ptr::null_mut(), 10) };
    }

    #[test]
    fn every_status_has_a_name() {
        for (s, name) in [
            (AUTODNN_STATUS_SUCCESS, "AUTODNN_STATUS_SUCCESS"),
            (
                AUTODNN_STATUS_NOT_INITIALIZED,
                "AUTODNN_STATUS_NOT_INITIALIZED",
            ),
            (AUTODNN_STATUS_ALLOC_FAILED, "AUTODNN_STATUS_ALLOC_FAILED"),
            (AUTODNN_STATUS_BAD_PARAM, "AUTODNN_STATUS_BAD_PARAM"),
            (
                AUTODNN_STATUS_INTERNAL_ERROR,
                "AUTODNN_STATUS_INTERNAL_ERROR",
            ),
            (
                AUTODNN_STATUS_EXECUTION_FAILED,
                "AUTODNN_STATUS_EXECUTION_FAILED",
            ),
            (AUTODNN_STATUS_NOT_SUPPORTED, "AUTODNN_STATUS_NOT_SUPPORTED"),
            (77, "AUTODNN_STATUS_UNKNOWN"),
        ] {
            // SAFETY: a static NUL-terminated string.
            let got = unsafe { CStr::from_ptr(autodnnGetErrorString(s)) };
            assert_eq!(got.to_str().unwrap(), name);
        }
    }
}
