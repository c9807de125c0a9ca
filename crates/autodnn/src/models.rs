//! Built-in layer lists of real networks (from oneDNN's benchdnn inputs).
//! STUB: to be implemented.

use crate::error::{Error, Result};
use crate::problem_string::ProblemSpec;

/// Names of the built-in models.
pub fn names() -> &'static [&'static str] {
    &[]
}

/// The layers of a built-in model at its list's own batch size.
///
/// # Errors
/// [`Error::BadParam`] naming `model` for an unknown name.
pub fn layers(name: &str) -> Result<Vec<ProblemSpec>> {
    Err(Error::bad("model", name, "unknown"))
}
