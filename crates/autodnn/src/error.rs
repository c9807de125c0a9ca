//! The library's one error type.
//!
//! Every error names what was wrong and with which value, so that a caller (or the `autodnn`
//! command) can print a single line that needs no further context. Errors are grouped by kind
//! ([`ErrorKind`]): bad input from the caller, a request this build cannot serve, or a failure
//! while running (memory, workspace, an algorithm giving up).

use thiserror::Error;

/// Result type used throughout autodnn.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// A descriptor field or argument has a value that no algorithm could accept.
    #[error("bad {field} = {value}: {reason}")]
    BadParam {
        /// The field, e.g. `x.c` or `conv.stride_h`.
        field: String,
        /// The value given, as text.
        value: String,
        /// Why it is wrong.
        reason: String,
    },
    /// A size computed from the descriptors does not fit in `usize` (or `isize`).
    #[error("{field} overflows: {detail}")]
    Overflow {
        /// The quantity that overflowed.
        field: String,
        /// How it was computed.
        detail: String,
    },
    /// A buffer is shorter than its descriptor requires.
    #[error("buffer {field} too small: needs {needed} elements, got {got}")]
    BufferTooSmall {
        /// Which buffer (`x`, `w`, `y`, ...).
        field: String,
        /// Elements the descriptor spans.
        needed: usize,
        /// Elements given.
        got: usize,
    },
    /// A benchdnn problem string (or a file of them) could not be parsed.
    #[error("bad problem string {input:?}: {reason}")]
    Parse {
        /// The text that was being parsed.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A valid request that this build has no implementation for (yet).
    #[error("not supported yet: {what}")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// No algorithm of that name is registered.
    #[error("unknown algorithm {name:?} (known: {known})")]
    UnknownAlgorithm {
        /// The name asked for.
        name: String,
        /// The registered names, comma separated.
        known: String,
    },
    /// The algorithm does not handle this problem.
    #[error("{algo}: {reason}")]
    Declined {
        /// The algorithm's name.
        algo: String,
        /// Why it declined.
        reason: String,
    },
    /// The workspace handed to an algorithm is smaller than it needs.
    #[error("{algo}: workspace too small: needs {needed} bytes, got {got}")]
    WorkspaceTooSmall {
        /// The algorithm's name.
        algo: String,
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// A workspace allocation failed or would exceed the handle's budget.
    #[error("out of memory: {bytes} bytes for {what}")]
    OutOfMemory {
        /// Bytes requested.
        bytes: usize,
        /// What they were for, and why the request failed.
        what: String,
    },
    /// Every algorithm of a fallback chain failed (see [`crate::select`]).
    #[error("every algorithm tried failed: {}", tried.join("; "))]
    AllFailed {
        /// The algorithms tried, in order, each with why it failed.
        tried: Vec<String>,
        /// The last algorithm's error.
        last: Box<Error>,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's or the format's complaint.
        message: String,
    },
}

/// The broad class of an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller's input is wrong; retrying with another algorithm cannot help.
    BadInput,
    /// The request is valid but not implemented in this build.
    Unsupported,
    /// Running failed (memory, workspace, an algorithm declining or failing); another algorithm
    /// may succeed.
    Runtime,
    /// Files and the operating system.
    Io,
}

impl Error {
    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::BadParam { .. }
            | Error::Overflow { .. }
            | Error::BufferTooSmall { .. }
            | Error::Parse { .. }
            | Error::UnknownAlgorithm { .. } => ErrorKind::BadInput,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::Declined { .. }
            | Error::WorkspaceTooSmall { .. }
            | Error::OutOfMemory { .. }
            | Error::AllFailed { .. } => ErrorKind::Runtime,
            Error::Io { .. } => ErrorKind::Io,
        }
    }

    /// True when the caller's input (or request) is at fault, as opposed to a failure while
    /// running. The `autodnn` command exits with status 2 for these.
    pub fn is_bad_input(&self) -> bool {
        matches!(self.kind(), ErrorKind::BadInput | ErrorKind::Unsupported)
    }

    pub(crate) fn bad(
        field: impl Into<String>,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Error {
        Error::BadParam {
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn overflow(field: impl Into<String>, detail: impl Into<String>) -> Error {
        Error::Overflow {
            field: field.into(),
            detail: detail.into(),
        }
    }
}

/// Checked product of sizes, naming the quantity on overflow.
pub(crate) fn checked_product(field: &str, factors: &[usize]) -> Result<usize> {
    factors.iter().try_fold(1usize, |acc, &f| {
        acc.checked_mul(f)
            .ok_or_else(|| Error::overflow(field, format!("product of {factors:?}")))
    })
}
