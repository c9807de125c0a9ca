//! Activations as operators, forward and backward (cudnnActivationForward / Backward):
//! y = alpha · act(x) + beta · y and dx = alpha · dy · act'(x) + beta · dx, on tensors of any
//! layout and strides, in place allowed ([`forward_in_place`], [`backward_in_place`]).
//!
//! The function is [`Activation::apply`] itself, the one the convolution and GEMM epilogues
//! apply (and [`Activation::derivative`] for the backward pass), so an operator and a fused
//! epilogue give the same bits. Exact where the math is (relu, leaky relu, clip, identity and
//! their derivatives); the others within 1e-6 · |f| + 1e-6 of the f64 function
//! (`tests/activation.rs`; the exponentials are `crate::vmath`'s, within a few ulp). Every
//! instruction set and thread count gives the same bits.
//!
//! Memory-bound: one read of x (and dy), one write of y, vectorised per instruction set,
//! split among the threads in contiguous pieces.

use super::{check_buffer, check_same_dims, for_each_piece, streams, write_blocks, Blend, Runs};
use crate::activation::Activation;
use crate::desc::TensorDesc;
use crate::error::Result;
use crate::runtime::ExecContext;
use crate::simd::multiversion;

/// Calls `$body` with `$a` bound to `act` as a value whose variant is known where it is
/// used: one copy of the body per variant, so a loop over `$a.apply(v)` has no branch on the
/// variant inside it.
macro_rules! specialize {
    ($act:expr, $a:ident => $body:expr) => {
        match $act {
            Activation::None => {
                let $a = Activation::None;
                $body
            }
            Activation::Relu => {
                let $a = Activation::Relu;
                $body
            }
            Activation::Clip { lo, hi } => {
                let $a = Activation::Clip { lo, hi };
                $body
            }
            Activation::Sigmoid => {
                let $a = Activation::Sigmoid;
                $body
            }
            Activation::Tanh => {
                let $a = Activation::Tanh;
                $body
            }
            Activation::Gelu => {
                let $a = Activation::Gelu;
                $body
            }
            Activation::GeluTanh => {
                let $a = Activation::GeluTanh;
                $body
            }
            Activation::Silu => {
                let $a = Activation::Silu;
                $body
            }
            Activation::LeakyRelu { slope } => {
                let $a = Activation::LeakyRelu { slope };
                $body
            }
            Activation::Elu { alpha } => {
                let $a = Activation::Elu { alpha };
                $body
            }
            Activation::HardSwish => {
                let $a = Activation::HardSwish;
                $body
            }
        }
    };
}

// The loops are macros rather than functions taking a closure: a closure's body is a
// function of its own that the compiler may leave out of line, uncompiled for the entry
// point's instruction set and with the activation unknown inside it.

/// y[i] = alpha · f(x[i]) + beta · y[i] over contiguous slices, `$v` bound to x[i] in `$f`.
macro_rules! map {
    ($blend:expr, $x:expr, $y:expr, |$v:ident| $f:expr) => {{
        let (al, be) = ($blend.alpha, $blend.beta);
        if be == 0.0 {
            for (o, &$v) in $y.iter_mut().zip($x) {
                *o = al * $f;
            }
        } else {
            for (o, &$v) in $y.iter_mut().zip($x) {
                *o = al * $f + be * *o;
            }
        }
    }};
}

/// out[i] = alpha · f(x[i], g[i]) + beta · out[i] over contiguous slices.
macro_rules! map2 {
    ($blend:expr, $x:expr, $g:expr, $out:expr, |$v:ident, $d:ident| $f:expr) => {{
        let (al, be) = ($blend.alpha, $blend.beta);
        if be == 0.0 {
            for ((o, &$v), &$d) in $out.iter_mut().zip($x).zip($g) {
                *o = al * $f;
            }
        } else {
            for ((o, &$v), &$d) in $out.iter_mut().zip($x).zip($g) {
                *o = al * $f + be * *o;
            }
        }
    }};
}

multiversion! {
    fn forward_contiguous(act: Activation, blend: Blend, x: &[f32], y: &mut [f32]) {
        specialize!(act, a => map!(blend, x, y, |v| a.apply(v)))
    }
}

multiversion! {
    fn forward_self(act: Activation, blend: Blend, y: &mut [f32]) {
        let (al, be) = (blend.alpha, blend.beta);
        specialize!(act, a => {
            if be == 0.0 {
                for o in y.iter_mut() {
                    *o = al * a.apply(*o);
                }
            } else {
                for o in y.iter_mut() {
                    *o = al * a.apply(*o) + be * *o;
                }
            }
        })
    }
}

multiversion! {
    fn backward_contiguous(act: Activation, blend: Blend, x: &[f32], dy: &[f32], dx: &mut [f32]) {
        specialize!(act, a => map2!(blend, x, dy, dx, |v, d| d * a.derivative(v)))
    }
}

multiversion! {
    fn backward_self(act: Activation, blend: Blend, x: &[f32], g: &mut [f32]) {
        let (al, be) = (blend.alpha, blend.beta);
        specialize!(act, a => {
            if be == 0.0 {
                for (o, &v) in g.iter_mut().zip(x) {
                    *o = al * (*o * a.derivative(v));
                }
            } else {
                for (o, &v) in g.iter_mut().zip(x) {
                    *o = al * (*o * a.derivative(v)) + be * *o;
                }
            }
        })
    }
}

fn check_act(act: Activation) -> Result<()> {
    // The parameters were checked where the activation was made (parse, clip); an enum
    // literal may still carry non-finite ones.
    let finite = match act {
        Activation::Clip { lo, hi } => lo.is_finite() && hi.is_finite() && lo <= hi,
        Activation::LeakyRelu { slope } => slope.is_finite(),
        Activation::Elu { alpha } => alpha.is_finite(),
        _ => true,
    };
    if finite {
        Ok(())
    } else {
        Err(crate::error::Error::bad(
            "act",
            act.name(),
            "parameters must be finite (and clip's lo <= hi)",
        ))
    }
}

/// y = alpha · act(x) + beta · y, element by element; x and y of the same dimensions, any
/// strides each.
///
/// # Errors
/// [`crate::Error::BadParam`] naming `y` for other dimensions, `alpha`/`beta` when not
/// finite, `act` for non-finite parameters; [`crate::Error::BufferTooSmall`] naming `x` or
/// `y`; [`crate::Error::Unsupported`] for types other than f32.
///
/// # Examples
/// ```
/// use autodnn::{layers::{activation, Blend}, Activation, DataType, Handle, Layout, TensorDesc};
/// let h = Handle::with_threads(1)?;
/// let d = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 1, 2])?;
/// let x = [-1.0, 2.0, -3.0, 4.0];
/// let mut y = [0.0; 4];
/// h.activation_forward(Activation::Relu, Blend::default(), &d, &x, &d, &mut y)?;
/// assert_eq!(y, [0.0, 2.0, 0.0, 4.0]);
/// # let _ = activation::forward;
/// # Ok::<(), autodnn::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn forward(
    ctx: &ExecContext<'_>,
    act: Activation,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &mut [f32],
) -> Result<()> {
    check_act(act)?;
    blend.check()?;
    check_same_dims("y", x_desc, y_desc)?;
    check_buffer("x", x_desc, x.len())?;
    check_buffer("y", y_desc, y.len())?;
    let runs = Runs::new(y_desc.dims(), [y_desc.strides(), x_desc.strides()]);
    let features = ctx.features();
    for_each_piece(ctx, &runs, y, |out, r, first, len| {
        let [oy, ox] = runs.start(r);
        let [sy, sx] = runs.inner;
        if sy == 1 && sx == 1 {
            // SAFETY: the piece's elements are its own (runs of distinct coordinates,
            // descriptors that do not alias); no other piece touches them.
            let dst = unsafe { out.slice_mut(oy + first, len) };
            // (Streamed out as relu's backward output is, relu's and SiLU's forward measured
            // slower here: 1.3-2.0 -> 2.0 ms and 2.5 -> 3.2-4.3 ms at 8x256x56x56.)
            forward_contiguous(features, act, blend, &x[ox + first..ox + first + len], dst);
        } else {
            for j in first..first + len {
                let v = act.apply(x[ox + j * sx]);
                let at = oy + j * sy;
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

/// [`forward`] with x and y the same buffer (x read from `y`, which receives the result).
///
/// # Errors
/// As [`forward`].
pub fn forward_in_place(
    ctx: &ExecContext<'_>,
    act: Activation,
    blend: Blend,
    desc: &TensorDesc,
    y: &mut [f32],
) -> Result<()> {
    check_act(act)?;
    blend.check()?;
    check_buffer("y", desc, y.len())?;
    let runs = Runs::new(desc.dims(), [desc.strides()]);
    let features = ctx.features();
    for_each_piece(ctx, &runs, y, |out, r, first, len| {
        let [o] = runs.start(r);
        let [s] = runs.inner;
        if s == 1 {
            // SAFETY: the piece's elements are its own.
            let dst = unsafe { out.slice_mut(o + first, len) };
            forward_self(features, act, blend, dst);
        } else {
            for j in first..first + len {
                let at = o + j * s;
                // SAFETY: element `at` belongs to this piece alone.
                unsafe {
                    let v = out.read(at);
                    out.write(at, blend.apply(act.apply(v), v));
                }
            }
        }
    })
}

/// dx = alpha · dy · act'(x) + beta · dx, element by element (cudnnActivationBackward; the
/// derivative is taken at x, so y is not needed). x, dy and dx of the same dimensions, any
/// strides each.
///
/// # Errors
/// As [`forward`], naming `dy` and `dx`.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    ctx: &ExecContext<'_>,
    act: Activation,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    dx_desc: &TensorDesc,
    dx: &mut [f32],
) -> Result<()> {
    check_act(act)?;
    blend.check()?;
    check_same_dims("dy", x_desc, dy_desc)?;
    check_same_dims("dx", x_desc, dx_desc)?;
    check_buffer("x", x_desc, x.len())?;
    check_buffer("dy", dy_desc, dy.len())?;
    check_buffer("dx", dx_desc, dx.len())?;
    let runs = Runs::new(
        dx_desc.dims(),
        [dx_desc.strides(), x_desc.strides(), dy_desc.strides()],
    );
    let features = ctx.features();
    // Streamed out where the derivative is a select (memory-bound loops): relu's backward
    // at 8x256x56x56 on 1 thread 3.2-3.4 -> 2.3-3.0 ms. GELU's, whose loop computes, measured
    // slower in blocks (5.2 -> 6.0-6.3 ms), and so did the forward of relu and SiLU.
    let piecewise_linear = matches!(
        act,
        Activation::None
            | Activation::Relu
            | Activation::LeakyRelu { .. }
            | Activation::Clip { .. }
    );
    let stream = piecewise_linear && streams(blend.reads_output(), dx_desc);
    for_each_piece(ctx, &runs, dx, |out, r, first, len| {
        let [od, ox, og] = runs.start(r);
        let [sd, sx, sg] = runs.inner;
        if sd == 1 && sx == 1 && sg == 1 {
            // SAFETY: the piece's elements are its own.
            let dst = unsafe { out.slice_mut(od + first, len) };
            let (xs, dys) = (&x[ox + first..ox + first + len], &dy[og + first..]);
            write_blocks(features, stream, dst, |o, dst| {
                let n = dst.len();
                backward_contiguous(features, act, blend, &xs[o..o + n], &dys[o..o + n], dst)
            });
        } else {
            for j in first..first + len {
                let v = dy[og + j * sg] * act.derivative(x[ox + j * sx]);
                let at = od + j * sd;
                // SAFETY: element `at` belongs to this piece alone.
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

/// [`backward`] with dy and dx the same buffer: `grad` holds dy on entry and dx on return
/// (beta then scales dy, the buffer's prior value).
///
/// # Errors
/// As [`backward`], naming `grad`.
pub fn backward_in_place(
    ctx: &ExecContext<'_>,
    act: Activation,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    grad_desc: &TensorDesc,
    grad: &mut [f32],
) -> Result<()> {
    check_act(act)?;
    blend.check()?;
    check_same_dims("grad", x_desc, grad_desc)?;
    check_buffer("x", x_desc, x.len())?;
    check_buffer("grad", grad_desc, grad.len())?;
    let runs = Runs::new(grad_desc.dims(), [grad_desc.strides(), x_desc.strides()]);
    let features = ctx.features();
    for_each_piece(ctx, &runs, grad, |out, r, first, len| {
        let [og, ox] = runs.start(r);
        let [sg, sx] = runs.inner;
        if sg == 1 && sx == 1 {
            // SAFETY: the piece's elements are its own.
            let dst = unsafe { out.slice_mut(og + first, len) };
            backward_self(features, act, blend, &x[ox + first..ox + first + len], dst);
        } else {
            for j in first..first + len {
                let at = og + j * sg;
                // SAFETY: element `at` belongs to this piece alone.
                unsafe {
                    let d = out.read(at);
                    let v = d * act.derivative(x[ox + j * sx]);
                    out.write(at, blend.apply(v, d));
                }
            }
        }
    })
}
