//! benchdnn problem strings (oneDNN's test format) <-> problems.
//! STUB: to be implemented.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::desc::{ConvProblem, Layout};
use crate::error::{Error, Result};

/// A 2-D convolution in benchdnn's terms (dilation counted from 0 = dense, padding top/left
/// only; bottom/right follow from the output size), plus the layer's name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProblemSpec {
    /// Minibatch.
    pub mb: usize,
    /// Groups.
    pub g: usize,
    /// Input channels (all groups).
    pub ic: usize,
    /// Input height.
    pub ih: usize,
    /// Input width.
    pub iw: usize,
    /// Output channels (all groups).
    pub oc: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Stride, height.
    pub sh: usize,
    /// Stride, width.
    pub sw: usize,
    /// Top padding.
    pub ph: i64,
    /// Left padding.
    pub pw: i64,
    /// Dilation, height, benchdnn style (0 = dense).
    pub dh: usize,
    /// Dilation, width, benchdnn style (0 = dense).
    pub dw: usize,
    /// The layer's name (without quotes), possibly ending in `*N`.
    pub name: String,
}

impl ProblemSpec {
    /// Parses one problem string.
    ///
    /// # Errors
    /// [`Error::Parse`] saying what is wrong.
    pub fn parse(s: &str) -> Result<ProblemSpec> {
        Err(Error::Parse {
            input: s.into(),
            reason: "not implemented".into(),
        })
    }
    /// How many times the layer occurs in its network (the name's `*N` suffix; 1 without).
    pub fn count(&self) -> usize {
        1
    }
    /// Bottom padding implied by the output size (may be negative).
    pub fn pad_bottom(&self) -> i64 {
        0
    }
    /// Right padding implied by the output size (may be negative).
    pub fn pad_right(&self) -> i64 {
        0
    }
    /// The same problem with another minibatch.
    pub fn with_mb(&self, mb: usize) -> ProblemSpec {
        ProblemSpec { mb, ..self.clone() }
    }
    /// The problem with x and y packed in `layout` (filter KCRS for NCHW, KRSC for NHWC),
    /// cross-correlation.
    ///
    /// # Errors
    /// The descriptors' errors.
    pub fn to_problem(&self, layout: Layout) -> Result<ConvProblem> {
        let _ = layout;
        Err(Error::Unsupported {
            what: "stub".into(),
        })
    }
    /// The benchdnn description of a problem (mode and layouts are not part of the format).
    pub fn from_problem(p: &ConvProblem, name: &str) -> ProblemSpec {
        let _ = (p, name);
        unimplemented!()
    }
}

impl fmt::Display for ProblemSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stub")
    }
}

/// Parses a file's text: one problem per line, `#` starts a comment, blank lines ignored.
///
/// # Errors
/// [`Error::Parse`] naming the line number.
pub fn parse_problem_list(text: &str) -> Result<Vec<ProblemSpec>> {
    let _ = text;
    Ok(vec![])
}
