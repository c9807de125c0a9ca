//! Tensor operations (cuDNN's cudnnAddTensor, cudnnOpTensor, cudnnScaleTensor,
//! cudnnSetTensor, cudnnReduceTensor), on f32 tensors of any strides:
//!
//! - [`add_tensor`]: C = alpha · A + beta · C, A broadcast into C (each of A's dimensions 1
//!   or C's: the bias add is A = 1×C×1×1);
//! - [`op_tensor`]: C = op(alpha1 · A, alpha2 · B) + beta · C for the [`OpTensorOp`]s add,
//!   mul, min, max and the unary sqrt and not (1 − alpha1 · A, B unread); A has C's
//!   dimensions, B broadcasts into C;
//! - [`scale_tensor`] (y = alpha · y) and [`set_tensor`] (y = value);
//! - [`reduce_tensor`]: C = alpha · reduce(A) + beta · C over the dimensions where C's is 1 and
//!   A's is not, for the [`ReduceOp`]s sum, mean, max, min, amax, norm1, norm2 and mul.
//!
//! The elementwise operations walk the tensors as runs ([`super::Runs`]; a broadcast
//! dimension has stride 0), each run contiguous in every tensor (or with a broadcast scalar)
//! one vectorised loop compiled per instruction set, split among the threads in pieces.
//! Their arithmetic is f32 in the order written above (add: `alpha1·a + alpha2·b`, then
//! `+ beta·c`), the same bits on every instruction set and thread count; exact wherever the
//! products and sums are (integer data).
//!
//! Reductions accumulate in f64. Each output's elements are taken in a fixed order: the
//! reduced elements, in A's memory order, cut into chunks of 64 Ki, each chunk summed into 16
//! interleaved f64 lanes merged pairwise; then the chunks' partials in order. When A's
//! innermost dimension is kept (NHWC reduced over H·W, say) and spans at least 8 outputs,
//! those outputs are instead accumulated side by side, each over the reduced elements in
//! order. Neither depends on the thread count (threads take whole outputs, or, for few
//! outputs, whole chunks), so every result is the same bit for bit on any number of threads.
//! max, min and amax are exact; sum, mean, norm1 and norm2 are exact on integer data
//! (partial sums below 2⁵³) and otherwise within one f32 rounding of the f64 result plus the
//! f64 accumulation's error (≤ M · 2⁻⁵³ · Σ|a| for M reduced elements); mul within its f64
//! rounding (relative ≤ M · 2⁻⁵³) and the final f32 rounding.

use super::{check_buffer, check_same_dims, for_each_piece, streams, write_blocks, Blend, Runs};
use crate::desc::TensorDesc;
use crate::error::{Error, Result};
use crate::runtime::parallel::{for_each_with, SharedOut};
use crate::runtime::ExecContext;
use crate::simd::multiversion;

/// The strides of `a_desc` broadcast into `c_desc`'s dimensions (0 where A's dimension is 1
/// and C's is not).
///
/// # Errors
/// [`Error::BadParam`] naming `field` when a dimension of A is neither 1 nor C's.
pub(crate) fn broadcast_strides(
    field: &str,
    a_desc: &TensorDesc,
    c_desc: &TensorDesc,
) -> Result<[usize; 4]> {
    let (a, c, s) = (a_desc.dims(), c_desc.dims(), a_desc.strides());
    let mut out = [0; 4];
    for d in 0..4 {
        out[d] = if a[d] == c[d] {
            s[d]
        } else if a[d] == 1 {
            0
        } else {
            return Err(Error::bad(
                field,
                format!("{a:?}"),
                format!("each dimension must be 1 or the output's ({c:?})"),
            ));
        };
    }
    Ok(out)
}

/// [`super::for_each_piece`] with short runs grouped: a work item takes consecutive whole
/// runs of about 16 Ki elements in all (NHWC's runs of C elements, padded rows), so that the
/// per-item cost does not dominate; long runs are split as there. `f(y, run, first, len)`.
/// On several threads an item takes at least a quarter of a thread's share
/// ([`super::stretch`]; items of 16 Ki elements taken in turn held the in-place bias add on
/// 2 threads at 1.2 times PyTorch's time).
/// Each run is two calls, split where the output reaches a cache line, as `for_each_piece`
/// splits its pieces (a bias's planes on a buffer 16 bytes into a line: every vector stored
/// into two lines, the in-place bias add 12 % slower).
pub(crate) fn for_each_grouped<const K: usize>(
    ctx: &ExecContext<'_>,
    runs: &Runs<K>,
    y: &mut [f32],
    f: impl Fn(&SharedOut<'_>, usize, usize, usize) + Sync,
) -> Result<()> {
    if runs.len >= super::CHUNK / 4 {
        return for_each_piece(ctx, runs, y, f);
    }
    let count = runs.count();
    let group = super::stretch(count, super::CHUNK / runs.len.max(1), ctx.threads);
    let items = count.div_ceil(group);
    let base = y.as_ptr() as usize;
    let out = SharedOut::new(y);
    let one = |_: &mut (), g: usize| {
        for r in g * group..((g + 1) * group).min(count) {
            let h = super::line_head(runs, base, r).min(runs.len);
            if h > 0 {
                f(&out, r, 0, h);
            }
            if h < runs.len {
                f(&out, r, h, runs.len - h);
            }
        }
    };
    if ctx.threads <= 1 || count.saturating_mul(runs.len) < super::PARALLEL_MIN_ELEMENTS {
        (0..items).for_each(|g| one(&mut (), g));
        return Ok(());
    }
    for_each_with(ctx, items, || Ok(()), one)
}

multiversion! {
    /// c = alpha · a + beta · c over contiguous slices.
    fn add_vv(blend: Blend, a: &[f32], c: &mut [f32]) {
        let (al, be) = (blend.alpha, blend.beta);
        if be == 0.0 {
            for (o, &v) in c.iter_mut().zip(a) {
                *o = al * v;
            }
        } else {
            for (o, &v) in c.iter_mut().zip(a) {
                *o = al * v + be * *o;
            }
        }
    }
}

multiversion! {
    /// c = alpha · s + beta · c over a contiguous slice (s broadcast).
    fn add_vs(blend: Blend, s: f32, c: &mut [f32]) {
        let (al, be) = (blend.alpha, blend.beta);
        let v = al * s;
        if be == 0.0 {
            c.fill(v);
        } else {
            for o in c.iter_mut() {
                *o = v + be * *o;
            }
        }
    }
}

/// C = alpha · A + beta · C (cudnnAddTensor), A broadcast into C: each of A's dimensions is 1
/// or C's (the bias add: A = 1×C×1×1 into N×C×H×W). Any strides each.
///
/// # Errors
/// [`Error::BadParam`] naming `a` when A does not broadcast into C, `alpha`/`beta` when not
/// finite; [`Error::BufferTooSmall`] naming `a` or `c`; [`Error::Unsupported`] for types
/// other than f32.
///
/// # Examples
/// ```
/// use autodnn::{layers::Blend, DataType, Handle, Layout, TensorDesc};
/// let h = Handle::with_threads(1)?;
/// let bias = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 1, 1])?;
/// let y = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 1, 2])?;
/// let mut c = [1.0, 2.0, 3.0, 4.0];
/// h.add_tensor(Blend::new(1.0, 1.0), &bias, &[10.0, 20.0], &y, &mut c)?;
/// assert_eq!(c, [11.0, 12.0, 23.0, 24.0]);
/// # Ok::<(), autodnn::Error>(())
/// ```
pub fn add_tensor(
    ctx: &ExecContext<'_>,
    blend: Blend,
    a_desc: &TensorDesc,
    a: &[f32],
    c_desc: &TensorDesc,
    c: &mut [f32],
) -> Result<()> {
    blend.check()?;
    let sa = broadcast_strides("a", a_desc, c_desc)?;
    check_buffer("a", a_desc, a.len())?;
    check_buffer("c", c_desc, c.len())?;
    let runs = Runs::new(c_desc.dims(), [c_desc.strides(), sa]);
    let features = ctx.features();
    for_each_grouped(ctx, &runs, c, |out, r, first, len| {
        let [oc, oa] = runs.start(r);
        let [sc, sa] = runs.inner;
        if sc == 1 && sa <= 1 {
            // SAFETY: the piece's elements are its own (runs of distinct coordinates of C,
            // whose descriptor does not alias); no other piece touches them.
            let dst = unsafe { out.slice_mut(oc + first, len) };
            if sa == 1 {
                add_vv(features, blend, &a[oa + first..oa + first + len], dst);
            } else {
                add_vs(features, blend, a[oa], dst);
            }
        } else {
            for j in first..first + len {
                let v = a[oa + j * sa];
                let at = oc + j * sc;
                // SAFETY: element `at` belongs to this piece alone (as above).
                unsafe {
                    let prior = if blend.reads_output() {
                        out.read(at)
                    } else {
                        0.0
                    };
                    out.write(at, blend.apply(v, prior));
                }
            }
        }
    })
}

/// The operations of [`op_tensor`] (cudnnOpTensorOp_t).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpTensorOp {
    /// alpha1 · A + alpha2 · B.
    Add,
    /// (alpha1 · A) · (alpha2 · B).
    Mul,
    /// min(alpha1 · A, alpha2 · B) (a NaN operand loses to a number).
    Min,
    /// max(alpha1 · A, alpha2 · B) (a NaN operand loses to a number).
    Max,
    /// sqrt(alpha1 · A) (unary: B is not read).
    Sqrt,
    /// 1 − alpha1 · A, cuDNN's NOT (unary: B is not read).
    Not,
}

impl OpTensorOp {
    /// Every operation.
    pub const ALL: [OpTensorOp; 6] = [
        OpTensorOp::Add,
        OpTensorOp::Mul,
        OpTensorOp::Min,
        OpTensorOp::Max,
        OpTensorOp::Sqrt,
        OpTensorOp::Not,
    ];

    /// Lower-case name: `add`, `mul`, `min`, `max`, `sqrt`, `not`.
    pub fn name(self) -> &'static str {
        match self {
            OpTensorOp::Add => "add",
            OpTensorOp::Mul => "mul",
            OpTensorOp::Min => "min",
            OpTensorOp::Max => "max",
            OpTensorOp::Sqrt => "sqrt",
            OpTensorOp::Not => "not",
        }
    }

    /// The operation [`OpTensorOp::name`] names (trimmed, any case).
    ///
    /// ```
    /// use autodnn::layers::tensor_ops::OpTensorOp;
    /// assert_eq!(OpTensorOp::parse(" Max")?, OpTensorOp::Max);
    /// assert!(OpTensorOp::parse("div").is_err());
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Parse`] for any other text.
    pub fn parse(s: &str) -> Result<OpTensorOp> {
        let t = s.trim().to_ascii_lowercase();
        OpTensorOp::ALL
            .into_iter()
            .find(|o| o.name() == t)
            .ok_or_else(|| Error::Parse {
                input: s.to_string(),
                reason: "expected one of add, mul, min, max, sqrt, not".into(),
            })
    }

    /// Whether B is read.
    pub fn is_binary(self) -> bool {
        !matches!(self, OpTensorOp::Sqrt | OpTensorOp::Not)
    }

    /// The operation on scaled operands (`x` = alpha1 · a, `y` = alpha2 · b).
    #[inline(always)]
    pub fn apply(self, x: f32, y: f32) -> f32 {
        match self {
            OpTensorOp::Add => x + y,
            OpTensorOp::Mul => x * y,
            OpTensorOp::Min => x.min(y),
            OpTensorOp::Max => x.max(y),
            OpTensorOp::Sqrt => x.sqrt(),
            OpTensorOp::Not => 1.0 - x,
        }
    }

    /// The same in f64 (references).
    pub fn apply_f64(self, x: f64, y: f64) -> f64 {
        match self {
            OpTensorOp::Add => x + y,
            OpTensorOp::Mul => x * y,
            OpTensorOp::Min => x.min(y),
            OpTensorOp::Max => x.max(y),
            OpTensorOp::Sqrt => x.sqrt(),
            OpTensorOp::Not => 1.0 - x,
        }
    }
}

/// An [`op_tensor`] call's operation and scales (cudnnOpTensorDescriptor_t with the call's
/// alpha1, alpha2 and beta): C = op(alpha1 · A, alpha2 · B) + beta · C.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpTensorDesc {
    op: OpTensorOp,
    alpha1: f32,
    alpha2: f32,
    beta: f32,
}

impl OpTensorDesc {
    /// The operation with its scales (beta = 0: C is not read).
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `op_tensor.alpha1`, `op_tensor.alpha2` or `op_tensor.beta`
    /// when not finite.
    pub fn new(op: OpTensorOp, alpha1: f32, alpha2: f32, beta: f32) -> Result<OpTensorDesc> {
        for (name, v) in [("alpha1", alpha1), ("alpha2", alpha2), ("beta", beta)] {
            if !v.is_finite() {
                return Err(Error::bad(format!("op_tensor.{name}"), v, "must be finite"));
            }
        }
        Ok(OpTensorDesc {
            op,
            alpha1,
            alpha2,
            beta,
        })
    }
    /// The operation.
    pub fn op(&self) -> OpTensorOp {
        self.op
    }
    /// A's scale.
    pub fn alpha1(&self) -> f32 {
        self.alpha1
    }
    /// B's scale.
    pub fn alpha2(&self) -> f32 {
        self.alpha2
    }
    /// C's prior content's scale.
    pub fn beta(&self) -> f32 {
        self.beta
    }
}

/// Calls `$body` with `$o` bound to `op` as a constant of its variant.
macro_rules! specialize_op {
    ($op:expr, $o:ident => $body:expr) => {
        match $op {
            OpTensorOp::Add => {
                let $o = OpTensorOp::Add;
                $body
            }
            OpTensorOp::Mul => {
                let $o = OpTensorOp::Mul;
                $body
            }
            OpTensorOp::Min => {
                let $o = OpTensorOp::Min;
                $body
            }
            OpTensorOp::Max => {
                let $o = OpTensorOp::Max;
                $body
            }
            OpTensorOp::Sqrt => {
                let $o = OpTensorOp::Sqrt;
                $body
            }
            OpTensorOp::Not => {
                let $o = OpTensorOp::Not;
                $body
            }
        }
    };
}

/// c = op(a1 · a, a2 · b) + beta · c over contiguous `a` and `c`, `b` an iterator (a slice's
/// elements or one broadcast value).
#[inline(always)]
fn op_loop(
    op: OpTensorOp,
    d: &OpTensorDesc,
    a: &[f32],
    b: impl Iterator<Item = f32>,
    c: &mut [f32],
) {
    let (a1, a2, be) = (d.alpha1, d.alpha2, d.beta);
    if be == 0.0 {
        for ((o, &x), y) in c.iter_mut().zip(a).zip(b) {
            *o = op.apply(a1 * x, a2 * y);
        }
    } else {
        for ((o, &x), y) in c.iter_mut().zip(a).zip(b) {
            *o = op.apply(a1 * x, a2 * y) + be * *o;
        }
    }
}

multiversion! {
    /// [`op_loop`] with B contiguous.
    fn op_vv(d: OpTensorDesc, a: &[f32], b: &[f32], c: &mut [f32]) {
        specialize_op!(d.op, o => op_loop(o, &d, a, b.iter().copied(), c))
    }
}

multiversion! {
    /// [`op_loop`] with B one broadcast value.
    fn op_vs(d: OpTensorDesc, a: &[f32], b: f32, c: &mut [f32]) {
        specialize_op!(d.op, o => op_loop(o, &d, a, std::iter::repeat(b), c))
    }
}

/// C = op(alpha1 · A, alpha2 · B) + beta · C (cudnnOpTensor). A has C's dimensions; B
/// broadcasts into C as in [`add_tensor`] (each of its dimensions 1 or C's); for the unary
/// operations (sqrt, not) B is neither checked nor read. Any strides each.
///
/// # Errors
/// [`Error::BadParam`] naming `a` when A's dimensions are not C's, `b` when B does not
/// broadcast into C; [`Error::BufferTooSmall`] naming `a`, `b` or `c`;
/// [`Error::Unsupported`] for types other than f32.
///
/// # Examples
/// ```
/// use autodnn::layers::tensor_ops::{OpTensorDesc, OpTensorOp};
/// use autodnn::{DataType, Handle, Layout, TensorDesc};
/// let h = Handle::with_threads(1)?;
/// let t = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 1, 1, 3])?;
/// let op = OpTensorDesc::new(OpTensorOp::Max, 1.0, 2.0, 0.0)?;
/// let mut c = [f32::NAN; 3];
/// h.op_tensor(&op, &t, &[1.0, 5.0, -1.0], &t, &[1.0, 1.0, 1.0], &t, &mut c)?;
/// assert_eq!(c, [2.0, 5.0, 2.0]);
/// # Ok::<(), autodnn::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn op_tensor(
    ctx: &ExecContext<'_>,
    desc: &OpTensorDesc,
    a_desc: &TensorDesc,
    a: &[f32],
    b_desc: &TensorDesc,
    b: &[f32],
    c_desc: &TensorDesc,
    c: &mut [f32],
) -> Result<()> {
    // Made through `new`, the scales are finite; check again what a copy may carry.
    OpTensorDesc::new(desc.op, desc.alpha1, desc.alpha2, desc.beta)?;
    check_same_dims("a", c_desc, a_desc)?;
    let binary = desc.op.is_binary();
    let sb = if binary {
        broadcast_strides("b", b_desc, c_desc)?
    } else {
        [0; 4]
    };
    check_buffer("a", a_desc, a.len())?;
    if binary {
        check_buffer("b", b_desc, b.len())?;
    }
    check_buffer("c", c_desc, c.len())?;
    let d = *desc;
    let runs = Runs::new(c_desc.dims(), [c_desc.strides(), a_desc.strides(), sb]);
    let features = ctx.features();
    let stream = streams(d.beta != 0.0, c_desc);
    for_each_grouped(ctx, &runs, c, |out, r, first, len| {
        let [oc, oa, ob] = runs.start(r);
        let [sc, sa, sb] = runs.inner;
        let bv = |j: usize| if binary { b[ob + j * sb] } else { 0.0 };
        if sc == 1 && sa == 1 && (sb <= 1 || !binary) {
            // SAFETY: the piece's elements are its own (runs of distinct coordinates of C);
            // no other piece touches them.
            let dst = unsafe { out.slice_mut(oc + first, len) };
            let xs = &a[oa + first..oa + first + len];
            write_blocks(features, stream, dst, |o, dst| {
                let (xs, n) = (&xs[o..o + dst.len()], dst.len());
                if binary && sb == 1 {
                    op_vv(features, d, xs, &b[ob + first + o..ob + first + o + n], dst);
                } else {
                    op_vs(features, d, xs, bv(0), dst);
                }
            });
        } else {
            for j in first..first + len {
                let v = d.op.apply(d.alpha1 * a[oa + j * sa], d.alpha2 * bv(j));
                let at = oc + j * sc;
                // SAFETY: element `at` belongs to this piece alone (as above).
                unsafe {
                    let v = if d.beta == 0.0 {
                        v
                    } else {
                        v + d.beta * out.read(at)
                    };
                    out.write(at, v);
                }
            }
        }
    })
}

/// y = alpha · y (cudnnScaleTensor), any strides.
///
/// # Errors
/// [`Error::BadParam`] naming `alpha` when not finite; [`Error::BufferTooSmall`] naming `y`;
/// [`Error::Unsupported`] for types other than f32.
pub fn scale_tensor(
    ctx: &ExecContext<'_>,
    desc: &TensorDesc,
    y: &mut [f32],
    alpha: f32,
) -> Result<()> {
    if !alpha.is_finite() {
        return Err(Error::bad("alpha", alpha, "must be finite"));
    }
    check_buffer("y", desc, y.len())?;
    let runs = Runs::new(desc.dims(), [desc.strides()]);
    let features = ctx.features();
    for_each_grouped(ctx, &runs, y, |out, r, first, len| {
        let [o] = runs.start(r);
        let [s] = runs.inner;
        if s == 1 {
            // SAFETY: the piece's elements are its own.
            let dst = unsafe { out.slice_mut(o + first, len) };
            scale_run(features, alpha, dst);
        } else {
            for j in first..first + len {
                let at = o + j * s;
                // SAFETY: element `at` belongs to this piece alone.
                unsafe { out.write(at, alpha * out.read(at)) };
            }
        }
    })
}

multiversion! {
    /// y = alpha · y over a contiguous slice.
    fn scale_run(alpha: f32, y: &mut [f32]) {
        for o in y.iter_mut() {
            *o *= alpha;
        }
    }
}

/// y = value in every element of the tensor (cudnnSetTensor), any strides; elements of the
/// buffer outside the tensor (padding) are left as they are. Any value, NaN included.
///
/// # Errors
/// [`Error::BufferTooSmall`] naming `y`; [`Error::Unsupported`] for types other than f32.
pub fn set_tensor(
    ctx: &ExecContext<'_>,
    desc: &TensorDesc,
    y: &mut [f32],
    value: f32,
) -> Result<()> {
    check_buffer("y", desc, y.len())?;
    let runs = Runs::new(desc.dims(), [desc.strides()]);
    for_each_grouped(ctx, &runs, y, |out, r, first, len| {
        let [o] = runs.start(r);
        let [s] = runs.inner;
        if s == 1 {
            // SAFETY: the piece's elements are its own.
            unsafe { out.slice_mut(o + first, len) }.fill(value);
        } else {
            for j in first..first + len {
                // SAFETY: element `o + j·s` belongs to this piece alone.
                unsafe { out.write(o + j * s, value) };
            }
        }
    })
}

/// The reductions of [`reduce_tensor`] (cudnnReduceTensorOp_t).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Σ a.
    Sum,
    /// Σ a / M (cuDNN's AVG), M the number of reduced elements.
    Mean,
    /// max a (a NaN loses to a number).
    Max,
    /// min a (a NaN loses to a number).
    Min,
    /// max |a|.
    Amax,
    /// Σ |a|.
    Norm1,
    /// sqrt(Σ a²).
    Norm2,
    /// Π a.
    Mul,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 8] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Amax,
        ReduceOp::Norm1,
        ReduceOp::Norm2,
        ReduceOp::Mul,
    ];

    /// Lower-case name: `sum`, `mean`, `max`, `min`, `amax`, `norm1`, `norm2`, `mul`.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Amax => "amax",
            ReduceOp::Norm1 => "norm1",
            ReduceOp::Norm2 => "norm2",
            ReduceOp::Mul => "mul",
        }
    }

    /// The reduction [`ReduceOp::name`] names (trimmed, any case); besides these names, the
    /// aliases `avg` (cuDNN's name for the mean) and `prod` (for mul) are taken. (benchdnn's
    /// reduction driver spells its algorithms `reduction_sum`, `reduction_max`, ...; the
    /// part after `reduction_` is accepted too.)
    ///
    /// ```
    /// use autodnn::layers::tensor_ops::ReduceOp;
    /// assert_eq!(ReduceOp::parse("norm2")?, ReduceOp::Norm2);
    /// assert_eq!(ReduceOp::parse("AVG")?, ReduceOp::Mean);
    /// assert!(ReduceOp::parse("median").is_err());
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Parse`] for any other text.
    pub fn parse(s: &str) -> Result<ReduceOp> {
        let t = s.trim().to_ascii_lowercase();
        let t = t.strip_prefix("reduction_").unwrap_or(&t).to_string();
        let alias = match t.as_str() {
            "avg" => Some(ReduceOp::Mean),
            "prod" => Some(ReduceOp::Mul),
            _ => None,
        };
        alias
            .or_else(|| ReduceOp::ALL.into_iter().find(|o| o.name() == t))
            .ok_or_else(|| Error::Parse {
                input: s.to_string(),
                reason: "expected one of sum, mean (avg), max, min, amax, norm1, norm2, mul \
                         (prod)"
                    .into(),
            })
    }

    /// The accumulator's start.
    #[inline(always)]
    fn init(self) -> f64 {
        match self {
            ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Amax | ReduceOp::Norm1 | ReduceOp::Norm2 => {
                0.0
            }
            ReduceOp::Max => f64::NEG_INFINITY,
            ReduceOp::Min => f64::INFINITY,
            ReduceOp::Mul => 1.0,
        }
    }

    /// One element into the accumulator.
    #[inline(always)]
    fn step(self, acc: f64, v: f32) -> f64 {
        let v = v as f64;
        match self {
            ReduceOp::Sum | ReduceOp::Mean => acc + v,
            ReduceOp::Max => max_num(acc, v),
            ReduceOp::Min => min_num(acc, v),
            ReduceOp::Amax => max_num(acc, v.abs()),
            ReduceOp::Norm1 => acc + v.abs(),
            ReduceOp::Norm2 => acc + v * v,
            ReduceOp::Mul => acc * v,
        }
    }

    /// Two accumulators into one.
    #[inline(always)]
    fn merge(self, a: f64, b: f64) -> f64 {
        match self {
            ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Norm1 | ReduceOp::Norm2 => a + b,
            ReduceOp::Max | ReduceOp::Amax => max_num(a, b),
            ReduceOp::Min => min_num(a, b),
            ReduceOp::Mul => a * b,
        }
    }

    /// The result of an accumulator over `count` elements.
    #[inline(always)]
    fn finish(self, acc: f64, count: usize) -> f64 {
        match self {
            ReduceOp::Mean => acc / count as f64,
            ReduceOp::Norm2 => acc.sqrt(),
            _ => acc,
        }
    }

    /// The reduction of `values` in f64, in order (the references' definition).
    pub fn reduce_f64(self, values: impl IntoIterator<Item = f64>) -> f64 {
        let mut acc = self.init();
        let mut count = 0usize;
        for v in values {
            acc = match self {
                ReduceOp::Sum | ReduceOp::Mean => acc + v,
                ReduceOp::Max => acc.max(v),
                ReduceOp::Min => acc.min(v),
                ReduceOp::Amax => acc.max(v.abs()),
                ReduceOp::Norm1 => acc + v.abs(),
                ReduceOp::Norm2 => acc + v * v,
                ReduceOp::Mul => acc * v,
            };
            count += 1;
        }
        self.finish(acc, count.max(1))
    }
}

/// max(a, b) where a NaN loses to a number (as `f64::max`), written as a compare and a
/// select: `f64::max` in the reduction loops made the nightly compiler's instruction
/// selection fail on AVX-512 (`Cannot select: v16i1 = insert_subvector`) in the
/// coverage-instrumented builds of the fuzz targets.
#[inline(always)]
fn max_num(a: f64, b: f64) -> f64 {
    if b > a || a.is_nan() {
        b
    } else {
        a
    }
}

/// min(a, b) where a NaN loses to a number (as `f64::min`); see [`max_num`].
#[inline(always)]
fn min_num(a: f64, b: f64) -> f64 {
    if b < a || a.is_nan() {
        b
    } else {
        a
    }
}

/// Calls `$body` with `$o` bound to `op` as a constant of its variant.
macro_rules! specialize_reduce {
    ($op:expr, $o:ident => $body:expr) => {
        match $op {
            ReduceOp::Sum => {
                let $o = ReduceOp::Sum;
                $body
            }
            ReduceOp::Mean => {
                let $o = ReduceOp::Mean;
                $body
            }
            ReduceOp::Max => {
                let $o = ReduceOp::Max;
                $body
            }
            ReduceOp::Min => {
                let $o = ReduceOp::Min;
                $body
            }
            ReduceOp::Amax => {
                let $o = ReduceOp::Amax;
                $body
            }
            ReduceOp::Norm1 => {
                let $o = ReduceOp::Norm1;
                $body
            }
            ReduceOp::Norm2 => {
                let $o = ReduceOp::Norm2;
                $body
            }
            ReduceOp::Mul => {
                let $o = ReduceOp::Mul;
                $body
            }
        }
    };
}

/// Interleaved accumulators of a run reduction.
const LANES: usize = 16;
/// Reduced elements per chunk (each chunk one partial; fixed, whatever the thread count).
const RCHUNK: usize = 1 << 16;
/// Kept outputs per work item when they are accumulated side by side.
const OBLOCK: usize = 256;
/// The kept inner dimension's extent from which outputs are accumulated side by side.
const SIDE_BY_SIDE_MIN: usize = 8;

multiversion! {
    /// Elements `x[k·stride]`, k < len, into the lanes (element k into lane k mod LANES).
    fn reduce_lanes(op: ReduceOp, acc: &mut [f64; LANES], x: &[f32], len: usize, stride: usize) {
        specialize_reduce!(op, o => {
            if stride == 1 {
                let mut ch = x[..len].chunks_exact(LANES);
                for c in &mut ch {
                    for l in 0..LANES {
                        acc[l] = o.step(acc[l], c[l]);
                    }
                }
                for (l, &v) in ch.remainder().iter().enumerate() {
                    acc[l] = o.step(acc[l], v);
                }
            } else {
                for k in 0..len {
                    acc[k % LANES] = o.step(acc[k % LANES], x[k * stride]);
                }
            }
        })
    }
}

multiversion! {
    /// acc[l] = step(acc[l], x[l·stride]) for every l < acc.len(): outputs side by side.
    fn reduce_rows(op: ReduceOp, acc: &mut [f64], x: &[f32], stride: usize) {
        specialize_reduce!(op, o => {
            if stride == 1 {
                for (s, &v) in acc.iter_mut().zip(x) {
                    *s = o.step(*s, v);
                }
            } else {
                for (l, s) in acc.iter_mut().enumerate() {
                    *s = o.step(*s, x[l * stride]);
                }
            }
        })
    }
}

/// Dimensions walked in order (outermost first), with one stride per dimension.
#[derive(Debug, Clone, Copy)]
struct Walk {
    ext: [usize; 4],
    st: [usize; 4],
    nd: usize,
}

impl Walk {
    /// The dimensions `dims` (indices into `ext`/`st`) ordered by stride, largest first, and
    /// merged where contiguous.
    fn new(dims: &[usize], ext: [usize; 4], st: [usize; 4]) -> Walk {
        let mut order: Vec<usize> = dims.to_vec();
        order.sort_by_key(|&d| std::cmp::Reverse((st[d], ext[d])));
        let mut w = Walk {
            ext: [1; 4],
            st: [1; 4],
            nd: 0,
        };
        for &d in &order {
            if w.nd > 0 && w.st[w.nd - 1] == st[d] * ext[d] {
                w.ext[w.nd - 1] *= ext[d];
                w.st[w.nd - 1] = st[d];
                continue;
            }
            w.ext[w.nd] = ext[d];
            w.st[w.nd] = st[d];
            w.nd += 1;
        }
        w
    }

    /// Elements walked.
    fn count(&self) -> usize {
        self.ext[..self.nd].iter().product()
    }

    /// Offset of the element at linear index `t` of the dimensions before the innermost.
    fn offset_outer(&self, mut t: usize) -> usize {
        let mut off = 0;
        for d in (0..self.nd.saturating_sub(1)).rev() {
            off += (t % self.ext[d]) * self.st[d];
            t /= self.ext[d];
        }
        off
    }

    /// Calls `f(offset, len, stride)` for the runs along the innermost dimension covering
    /// linear indices `s..e`.
    fn for_runs(&self, s: usize, e: usize, mut f: impl FnMut(usize, usize, usize)) {
        if self.nd == 0 {
            if s < e {
                f(0, 1, 1);
            }
            return;
        }
        let (ni, si) = (self.ext[self.nd - 1], self.st[self.nd - 1]);
        let mut t = s;
        while t < e {
            let (row, pos) = (t / ni, t % ni);
            let len = (ni - pos).min(e - t);
            f(self.offset_outer(row) + pos * si, len, si);
            t += len;
        }
    }
}

/// C = alpha · reduce(A) + beta · C (cudnnReduceTensor, no indices) over the dimensions
/// where C's is 1 and A's is not; C's other dimensions are A's. Any strides each. See the
/// module's notes for the summation order (independent of the thread count) and the bounds.
///
/// # Errors
/// [`Error::BadParam`] naming `c` when a dimension of C is neither 1 nor A's,
/// `alpha`/`beta` when not finite; [`Error::BufferTooSmall`] naming `a` or `c`;
/// [`Error::Unsupported`] for types other than f32; [`Error::OutOfMemory`] when the
/// partials of a chunked reduction cannot be allocated.
///
/// # Examples
/// ```
/// use autodnn::layers::{tensor_ops::ReduceOp, Blend};
/// use autodnn::{DataType, Handle, Layout, TensorDesc};
/// let h = Handle::with_threads(1)?;
/// let a = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 1, 3])?;
/// let c = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 1, 1])?;
/// let mut out = [0.0; 2];
/// h.reduce_tensor(ReduceOp::Amax, Blend::default(), &a, &[1.0, -5.0, 2.0, 3.0, 0.0, -1.0], &c, &mut out)?;
/// assert_eq!(out, [5.0, 3.0]);
/// # Ok::<(), autodnn::Error>(())
/// ```
pub fn reduce_tensor(
    ctx: &ExecContext<'_>,
    op: ReduceOp,
    blend: Blend,
    a_desc: &TensorDesc,
    a: &[f32],
    c_desc: &TensorDesc,
    c: &mut [f32],
) -> Result<()> {
    blend.check()?;
    let (ad, cd) = (a_desc.dims(), c_desc.dims());
    let (sa, sc) = (a_desc.strides(), c_desc.strides());
    let mut kept = Vec::with_capacity(4);
    let mut reduced = Vec::with_capacity(4);
    for d in 0..4 {
        if ad[d] == 1 && cd[d] == 1 {
            continue;
        }
        if cd[d] == ad[d] {
            kept.push(d);
        } else if cd[d] == 1 {
            reduced.push(d);
        } else {
            return Err(Error::bad(
                "c",
                format!("{cd:?}"),
                format!("each dimension must be 1 (reduced) or the input's ({ad:?})"),
            ));
        }
    }
    check_buffer("a", a_desc, a.len())?;
    check_buffer("c", c_desc, c.len())?;
    let red = Walk::new(&reduced, ad, sa);
    let m = red.count();
    // A's innermost dimension: outputs side by side when it is kept and long enough.
    let inner = (0..4)
        .filter(|&d| ad[d] > 1)
        .min_by_key(|&d| sa[d])
        .filter(|d| kept.contains(d) && ad[*d] >= SIDE_BY_SIDE_MIN);
    match inner {
        Some(k) => side_by_side(ctx, op, blend, k, &kept, &red, a, ad, sa, sc, c),
        None => by_chunks(ctx, op, blend, &kept, &red, m, a, ad, sa, sc, c),
    }
}

/// The blended result written at `at`.
///
/// # Safety
/// No other thread reads or writes element `at` meanwhile.
#[inline]
unsafe fn put(out: &SharedOut<'_>, at: usize, blend: Blend, v: f64) {
    // SAFETY: as the caller promises.
    unsafe {
        let prior = if blend.reads_output() {
            out.read(at) as f64
        } else {
            0.0
        };
        out.write(at, blend.apply_f64(v, prior) as f32);
    }
}

/// Each output over fixed chunks of its reduced elements (lanes within a chunk, chunks in
/// order); threads take outputs, or (several chunks per output) chunks.
#[allow(clippy::too_many_arguments)]
fn by_chunks(
    ctx: &ExecContext<'_>,
    op: ReduceOp,
    blend: Blend,
    kept: &[usize],
    red: &Walk,
    m: usize,
    a: &[f32],
    ad: [usize; 4],
    sa: [usize; 4],
    sc: [usize; 4],
    c: &mut [f32],
) -> Result<()> {
    let features = ctx.features();
    // Outputs in C's memory order; each output's offsets in A and C.
    let mut korder = kept.to_vec();
    korder.sort_by_key(|&d| std::cmp::Reverse(sc[d]));
    let outputs: usize = korder.iter().map(|&d| ad[d]).product();
    let offsets = |mut p: usize| {
        let (mut oa, mut oc) = (0, 0);
        for &d in korder.iter().rev() {
            let k = p % ad[d];
            p /= ad[d];
            oa += k * sa[d];
            oc += k * sc[d];
        }
        (oa, oc)
    };
    // One chunk's accumulator, its lanes merged.
    let chunk = |oa: usize, s: usize, e: usize| {
        let mut acc = [op.init(); LANES];
        red.for_runs(s, e, |off, len, st| {
            reduce_lanes(features, op, &mut acc, &a[oa + off..], len, st)
        });
        let mut w = LANES / 2;
        while w > 0 {
            for l in 0..w {
                acc[l] = op.merge(acc[l], acc[l + w]);
            }
            w /= 2;
        }
        acc[0]
    };
    let chunks = m.div_ceil(RCHUNK);
    let parallel = ctx.threads > 1 && outputs.saturating_mul(m) >= super::PARALLEL_MIN_ELEMENTS;
    let out = SharedOut::new(c);
    if chunks <= 1 {
        // Outputs in groups of about CHUNK elements of A per work item.
        let group = (super::CHUNK / m.max(1)).max(1);
        let items = outputs.div_ceil(group);
        let one = |_: &mut (), g: usize| {
            for p in g * group..((g + 1) * group).min(outputs) {
                let (oa, oc) = offsets(p);
                let v = op.finish(chunk(oa, 0, m), m);
                // SAFETY: output p's element is written by this item alone.
                unsafe { put(&out, oc, blend, v) };
            }
        };
        if !parallel {
            (0..items).for_each(|g| one(&mut (), g));
            return Ok(());
        }
        return for_each_with(ctx, items, || Ok(()), one);
    }
    let count = crate::error::checked_product("reduce partials", &[outputs, chunks])?;
    let mut partials = crate::alloc::try_vec(count, 0.0f64, "reduce partials")?;
    {
        let shared = SharedOut::new(&mut partials);
        let one = |_: &mut (), i: usize| {
            let (p, k) = (i / chunks, i % chunks);
            let (oa, _) = offsets(p);
            let v = chunk(oa, k * RCHUNK, ((k + 1) * RCHUNK).min(m));
            // SAFETY: partial i is written by this item alone.
            unsafe { shared.write(i, v) };
        };
        if parallel {
            for_each_with(ctx, count, || Ok(()), one)?;
        } else {
            (0..count).for_each(|i| one(&mut (), i));
        }
    }
    for (p, parts) in partials.chunks_exact(chunks).enumerate() {
        let acc = parts[1..].iter().fold(parts[0], |s, &v| op.merge(s, v));
        let (_, oc) = offsets(p);
        // SAFETY: single-threaded here; element oc is output p's.
        unsafe { put(&out, oc, blend, op.finish(acc, m)) };
    }
    Ok(())
}

/// Outputs along A's innermost dimension `k` (kept) accumulated side by side, each over the
/// reduced elements in order; threads take blocks of OBLOCK outputs.
#[allow(clippy::too_many_arguments)]
fn side_by_side(
    ctx: &ExecContext<'_>,
    op: ReduceOp,
    blend: Blend,
    k: usize,
    kept: &[usize],
    red: &Walk,
    a: &[f32],
    ad: [usize; 4],
    sa: [usize; 4],
    sc: [usize; 4],
    c: &mut [f32],
) -> Result<()> {
    let features = ctx.features();
    let mut others: Vec<usize> = kept.iter().copied().filter(|&d| d != k).collect();
    others.sort_by_key(|&d| std::cmp::Reverse(sc[d]));
    let n_other: usize = others.iter().map(|&d| ad[d]).product();
    let nk = ad[k];
    let blocks = nk.div_ceil(OBLOCK);
    let items = n_other * blocks;
    let m = red.count();
    let out = SharedOut::new(c);
    let one = |acc: &mut Vec<f64>, i: usize| {
        let (mut p, b) = (i / blocks, i % blocks);
        let (mut oa, mut oc) = (0, 0);
        for &d in others.iter().rev() {
            let q = p % ad[d];
            p /= ad[d];
            oa += q * sa[d];
            oc += q * sc[d];
        }
        let (k0, k1) = (b * OBLOCK, ((b + 1) * OBLOCK).min(nk));
        oa += k0 * sa[k];
        oc += k0 * sc[k];
        let acc = &mut acc[..k1 - k0];
        acc.fill(op.init());
        red.for_runs(0, m, |off, len, st| {
            for r in 0..len {
                reduce_rows(features, op, acc, &a[oa + off + r * st..], sa[k]);
            }
        });
        for (l, &v) in acc.iter().enumerate() {
            // SAFETY: the outputs of this block are written by this item alone.
            unsafe { put(&out, oc + l * sc[k], blend, op.finish(v, m)) };
        }
    };
    let init = || crate::alloc::try_vec(OBLOCK, 0.0f64, "reduce accumulators");
    let parallel = ctx.threads > 1
        && (n_other * nk).saturating_mul(m) >= super::PARALLEL_MIN_ELEMENTS
        && items > 1;
    if !parallel {
        let mut s = init()?;
        (0..items).for_each(|i| one(&mut s, i));
        return Ok(());
    }
    for_each_with(ctx, items, init, one)
}
