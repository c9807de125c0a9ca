//! The GEMM problem descriptor and its checks.

use crate::error::{Error, Result};

/// Whether an operand is used as stored or transposed (cuBLAS's `op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Transpose {
    /// op(X) = X.
    #[default]
    No,
    /// op(X) = Xᵀ.
    Yes,
}

impl Transpose {
    fn is(self) -> bool {
        self == Transpose::Yes
    }
}

impl From<bool> for Transpose {
    fn from(t: bool) -> Transpose {
        if t {
            Transpose::Yes
        } else {
            Transpose::No
        }
    }
}

/// Memory order used for the default strides of a [`GemmDesc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MatrixOrder {
    /// Rows are contiguous (C and Rust's usual order).
    #[default]
    RowMajor,
    /// Columns are contiguous (Fortran, BLAS and cuBLAS order).
    ColMajor,
}

/// One GEMM problem: C (m × n) = alpha · op(A) · op(B) + beta · C, with op(A) m × k and
/// op(B) k × n.
///
/// Every operand is described as *stored*: A is stored m × k (k × m when transposed), B k × n
/// (n × k when transposed), C m × n, each with a row stride and a column stride in elements.
/// Strides cover row-major, column-major, leading dimensions (padded rows or columns) and
/// views. By default all three are contiguous in [`MatrixOrder::RowMajor`] order.
///
/// # Examples
/// ```
/// use autodnn::gemm::{GemmDesc, MatrixOrder};
/// // cuBLAS style: column-major, C = Aᵀ·B with lda = 40, ldb = 30, ldc = 20.
/// let d = GemmDesc::new(20, 10, 30)
///     .with_order(MatrixOrder::ColMajor)
///     .with_transa(true)
///     .with_a_strides(1, 40) // A is stored k × m = 30 × 20, column-major, lda = 40
///     .with_b_strides(1, 30)
///     .with_c_strides(1, 20);
/// assert_eq!(d.a_span()?, 19 * 40 + 30);
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmDesc {
    m: usize,
    n: usize,
    k: usize,
    transa: Transpose,
    transb: Transpose,
    order: MatrixOrder,
    a_strides: Option<[usize; 2]>,
    b_strides: Option<[usize; 2]>,
    c_strides: Option<[usize; 2]>,
}

impl GemmDesc {
    /// An m × n × k problem, no transposes, every operand contiguous and row-major.
    pub fn new(m: usize, n: usize, k: usize) -> GemmDesc {
        GemmDesc {
            m,
            n,
            k,
            transa: Transpose::No,
            transb: Transpose::No,
            order: MatrixOrder::RowMajor,
            a_strides: None,
            b_strides: None,
            c_strides: None,
        }
    }

    /// Uses Aᵀ (A stored k × m) when `t` is true.
    pub fn with_transa(mut self, t: impl Into<Transpose>) -> GemmDesc {
        self.transa = t.into();
        self
    }
    /// Uses Bᵀ (B stored n × k) when `t` is true.
    pub fn with_transb(mut self, t: impl Into<Transpose>) -> GemmDesc {
        self.transb = t.into();
        self
    }
    /// The order of the default (contiguous) strides of operands whose strides are not set.
    pub fn with_order(mut self, order: MatrixOrder) -> GemmDesc {
        self.order = order;
        self
    }
    /// Row and column stride of A as stored.
    pub fn with_a_strides(mut self, row: usize, col: usize) -> GemmDesc {
        self.a_strides = Some([row, col]);
        self
    }
    /// Row and column stride of B as stored.
    pub fn with_b_strides(mut self, row: usize, col: usize) -> GemmDesc {
        self.b_strides = Some([row, col]);
        self
    }
    /// Row and column stride of C.
    pub fn with_c_strides(mut self, row: usize, col: usize) -> GemmDesc {
        self.c_strides = Some([row, col]);
        self
    }

    /// Rows of C and op(A).
    pub fn m(&self) -> usize {
        self.m
    }
    /// Columns of C and op(B).
    pub fn n(&self) -> usize {
        self.n
    }
    /// The shared dimension.
    pub fn k(&self) -> usize {
        self.k
    }
    /// op for A.
    pub fn transa(&self) -> Transpose {
        self.transa
    }
    /// op for B.
    pub fn transb(&self) -> Transpose {
        self.transb
    }

    /// Rows and columns of A as stored.
    pub fn a_dims(&self) -> [usize; 2] {
        if self.transa.is() {
            [self.k, self.m]
        } else {
            [self.m, self.k]
        }
    }
    /// Rows and columns of B as stored.
    pub fn b_dims(&self) -> [usize; 2] {
        if self.transb.is() {
            [self.n, self.k]
        } else {
            [self.k, self.n]
        }
    }
    /// Rows and columns of C.
    pub fn c_dims(&self) -> [usize; 2] {
        [self.m, self.n]
    }

    fn default_strides(&self, [rows, cols]: [usize; 2]) -> [usize; 2] {
        match self.order {
            MatrixOrder::RowMajor => [cols.max(1), 1],
            MatrixOrder::ColMajor => [1, rows.max(1)],
        }
    }
    /// Row and column stride of A as stored (explicit or the default).
    pub fn a_strides(&self) -> [usize; 2] {
        self.a_strides
            .unwrap_or_else(|| self.default_strides(self.a_dims()))
    }
    /// Row and column stride of B as stored.
    pub fn b_strides(&self) -> [usize; 2] {
        self.b_strides
            .unwrap_or_else(|| self.default_strides(self.b_dims()))
    }
    /// Row and column stride of C.
    pub fn c_strides(&self) -> [usize; 2] {
        self.c_strides
            .unwrap_or_else(|| self.default_strides(self.c_dims()))
    }

    /// Elements a buffer for A must hold (one past the last element addressed; 0 when A is
    /// empty).
    ///
    /// # Errors
    /// [`Error::Overflow`] naming `a` when the offset does not fit in `usize`.
    pub fn a_span(&self) -> Result<usize> {
        span_of("a", self.a_dims(), self.a_strides())
    }
    /// Elements a buffer for B must hold.
    ///
    /// # Errors
    /// [`Error::Overflow`] naming `b`.
    pub fn b_span(&self) -> Result<usize> {
        span_of("b", self.b_dims(), self.b_strides())
    }
    /// Elements a buffer for C must hold.
    ///
    /// # Errors
    /// [`Error::Overflow`] naming `c`.
    pub fn c_span(&self) -> Result<usize> {
        span_of("c", self.c_dims(), self.c_strides())
    }

    /// Checks the descriptor on its own: spans fit in `usize`, and C's strides never map two
    /// elements to one address. C is accepted when it has at most one row or column (that
    /// dimension's stride is then free), or when one stride is at least the other times its
    /// extent (rows inside columns or columns inside rows, with any padding); interleaved
    /// layouts are refused even where they happen not to overlap.
    ///
    /// # Errors
    /// [`Error::Overflow`] naming the operand, or [`Error::BadParam`] naming `c.strides`.
    pub fn validate(&self) -> Result<()> {
        self.a_span()?;
        self.b_span()?;
        self.c_span()?;
        let [rs, cs] = self.c_strides();
        if !non_overlapping(self.m, self.n, rs, cs) {
            return Err(Error::bad(
                "c.strides",
                format!("[{rs}, {cs}]"),
                format!(
                    "two elements of the {}x{} output would share memory (one stride must be \
                     at least the other times its extent)",
                    self.m, self.n
                ),
            ));
        }
        Ok(())
    }

    /// Checks the buffers' lengths against the spans.
    pub(crate) fn check_buffers(&self, a: usize, b: usize, c: usize) -> Result<()> {
        for (field, needed, got) in [
            ("a", self.a_span()?, a),
            ("b", self.b_span()?, b),
            ("c", self.c_span()?, c),
        ] {
            if got < needed {
                return Err(Error::BufferTooSmall {
                    field: field.into(),
                    needed,
                    got,
                });
            }
        }
        Ok(())
    }
}

/// One past the largest offset of a `rows × cols` matrix with these strides (0 if empty);
/// `None` on overflow.
pub(crate) fn span(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1)
        .checked_mul(rs)?
        .checked_add((cols - 1).checked_mul(cs)?)?
        .checked_add(1)
}

fn span_of(field: &str, [rows, cols]: [usize; 2], [rs, cs]: [usize; 2]) -> Result<usize> {
    span(rows, cols, rs, cs).ok_or_else(|| {
        Error::overflow(
            field,
            format!("{rows}x{cols} matrix with strides [{rs}, {cs}] spans more than usize"),
        )
    })
}

/// True when no two elements of a `rows × cols` matrix with these strides share an offset
/// (by the sufficient nesting rule of [`GemmDesc::validate`]).
pub(crate) fn non_overlapping(rows: usize, cols: usize, rs: usize, cs: usize) -> bool {
    match (rows > 1, cols > 1) {
        (false, false) => true,
        (true, false) => rs > 0,
        (false, true) => cs > 0,
        (true, true) => {
            let (small, small_ext, big) = if rs <= cs {
                (rs, rows, cs)
            } else {
                (cs, cols, rs)
            };
            small > 0 && small.checked_mul(small_ext).is_some_and(|s| big >= s)
        }
    }
}
