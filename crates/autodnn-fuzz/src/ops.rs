//! The other operators (`autodnn::layers`): their problem strings and names, and descriptors,
//! parameters and buffers built from arbitrary integers and passed through the handle's
//! verbs.
//!
//! Invariants: every call ends in `Ok` or a typed error naming its field (never a panic); a
//! buffer shorter than its tensor is refused; a refused call leaves every output as it was;
//! an accepted call on small tensors equals the f64 reference (normwise bound) and leaves the
//! gaps between a strided output's elements untouched; parsed strings and names print and
//! parse back alike.

use autodnn::layers::norm::{
    BatchNorm, BatchNormProblem, LayerNorm, ParamGrads, RunningStats, SavedStats, SavedStatsMut,
};
use autodnn::layers::pool::{PoolDesc, PoolMode, PoolProblem};
use autodnn::layers::softmax::{SoftmaxAlgorithm, SoftmaxMode, SoftmaxSpec};
use autodnn::layers::tensor_ops::{OpTensorDesc, OpTensorOp, ReduceOp};
use autodnn::layers::{parse_dims, Blend};
use autodnn::reference as rf;
use autodnn::{Activation, DataType, Error, Handle, Layout, Padding, Result, TensorDesc};

use crate::conv_checks::handle;
use crate::descriptors::{dims as some_dims, dtype, tensor, tensor_invariants};
use crate::input::{int_data, Bytes};

/// Tensors whose spans hold at most this many elements get whole buffers (and are run).
const RUN_MAX: usize = 20_000;
/// Calls whose work (output elements times window) exceeds this are not made: an
/// instrumented build must finish every input well inside the campaign's 1 s timeout.
const WORK_MAX: usize = 2_000_000;
/// Normwise bound of the pointwise operators, pooling, softmax and the tensor operations:
/// max|out − ref| ≤ TOL · max(max|ref|, 1).
const TOL: f64 = 1e-5;
/// The normalizations' bound, against the larger of max|ref| and the terms' magnitude
/// (γ · 1/σ · max|x − μ| or max|dy|), so that cancelling terms do not set a false scale.
const NORM_TOL: f64 = 1e-4;

/// Runs the operator (or the parsers) that the first bytes choose.
pub fn ops(data: &[u8]) {
    let mut b = Bytes::new(data);
    let h = handle(b.u8().into());
    let seed = b.u64();
    match b.below(10) {
        0 => text(&String::from_utf8_lossy(b.rest()), h, seed),
        1 => activation(&mut b, h, seed),
        2 => pool(&mut b, h, seed),
        3 => softmax(&mut b, h, seed),
        4 => batch_norm(&mut b, h, seed),
        5 => layer_norm(&mut b, h, seed),
        6 => add_or_op_tensor(&mut b, h, seed),
        7 => reduce(&mut b, h, seed),
        8 => transform(&mut b, h, seed),
        _ => scale_or_set(&mut b, h, seed),
    }
}

// ---------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------

/// A buffer for a tensor: its whole span of integer-valued data divided by `div`, or (now and
/// then, and whenever the span is too large to run) one element short, which the call must
/// refuse.
struct Buf {
    v: Vec<f32>,
    whole: bool,
}

fn data(len: usize, seed: u64, div: f32) -> Vec<f32> {
    int_data(len, seed).into_iter().map(|v| v / div).collect()
}

fn buf(b: &mut Bytes<'_>, d: &TensorDesc, seed: u64, div: f32) -> Buf {
    let span = d.span();
    if span > RUN_MAX || b.below(32) == 0 {
        let len = if span > RUN_MAX { 64 } else { span - 1 };
        return Buf {
            v: data(len, seed, div),
            whole: false,
        };
    }
    Buf {
        v: data(span, seed, div),
        whole: true,
    }
}

/// An output buffer: NaN where beta = 0 (never read), else data (the blend's prior).
fn out_buf(b: &mut Bytes<'_>, d: &TensorDesc, seed: u64, beta: f32) -> Buf {
    let mut o = buf(b, d, seed, 1.0);
    if beta == 0.0 {
        o.v.fill(f32::NAN);
    }
    o
}

/// A vector of `want` values, or (rarely) one more, which the call must refuse.
fn vec_of(b: &mut Bytes<'_>, want: usize, seed: u64, div: f32) -> Vec<f32> {
    let len = if b.below(24) == 0 { want + 1 } else { want };
    data(len.min(RUN_MAX), seed, div)
}

fn blend(b: &mut Bytes<'_>) -> Blend {
    let alpha = b.pick(&[1.0, 1.0, 1.0, 0.5, -2.0, 0.0, f32::NAN, f32::INFINITY]);
    let beta = b.pick(&[0.0, 0.0, 0.0, 1.0, 0.25, -1.0, f32::NAN, f32::NEG_INFINITY]);
    Blend::new(alpha, beta)
}

/// A second tensor of `d`'s dimensions (rarely others, or another type, which the call must
/// refuse), in any layout or strides.
fn like(b: &mut Bytes<'_>, dt: DataType, d: [usize; 4]) -> Result<TensorDesc> {
    let dims = if b.below(24) == 0 { some_dims(b, 6) } else { d };
    let dt = if b.below(24) == 0 { dtype(b) } else { dt };
    tensor(b, dt, dims)
}

/// A tensor from the bytes, its invariants checked; `None` (after checking the error) when the
/// constructor refused it.
fn new_tensor(b: &mut Bytes<'_>, dt: DataType, d: [usize; 4]) -> Option<TensorDesc> {
    match tensor(b, dt, d) {
        Ok(t) => {
            tensor_invariants(&t);
            Some(t)
        }
        Err(e) => {
            named(&e);
            None
        }
    }
}

fn new_like(b: &mut Bytes<'_>, dt: DataType, d: [usize; 4]) -> Option<TensorDesc> {
    match like(b, dt, d) {
        Ok(t) => Some(t),
        Err(e) => {
            named(&e);
            None
        }
    }
}

// ---------------------------------------------------------------------------------------
// Outcomes
// ---------------------------------------------------------------------------------------

/// An error of a bad-input kind: a field named, or a buffer, type or allocation.
fn named(e: &Error) {
    match e {
        Error::BadParam { field, .. } | Error::Overflow { field, .. } => {
            assert!(!field.is_empty(), "an error without a field: {e:?}")
        }
        Error::BufferTooSmall { .. }
        | Error::Unsupported { .. }
        | Error::OutOfMemory { .. }
        | Error::Parse { .. } => {}
        other => panic!("an error of an unexpected kind: {other:?}"),
    }
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Whether the call was accepted. A refusal must be a typed error that left every output as
/// it was (`outs`: after, before); an acceptance must not have had a short buffer.
fn settle(what: &str, r: Result<()>, short: bool, outs: &[(&[f32], &[f32])]) -> bool {
    match r {
        Ok(()) => {
            assert!(!short, "{what}: accepted a buffer shorter than its tensor");
            true
        }
        Err(e) => {
            named(&e);
            if !matches!(e, Error::OutOfMemory { .. }) {
                for (i, (after, before)) in outs.iter().enumerate() {
                    assert!(
                        same_bits(after, before),
                        "{what}: refused ({e}) but wrote output {i}"
                    );
                }
            }
            false
        }
    }
}

fn close(g: f64, w: f64, bound: f64) -> bool {
    if w.is_nan() {
        g.is_nan()
    } else if (w as f32).is_infinite() {
        g == (w as f32) as f64
    } else {
        (g - w).abs() <= bound
    }
}

fn max_abs(v: impl Iterator<Item = f64>) -> f64 {
    v.filter(|v| v.is_finite()).fold(0.0, |a, v| a.max(v.abs()))
}

/// The output's elements against the reference (normwise, scale at least `floor` and 1), and
/// its gaps untouched.
fn compare(what: &str, d: &TensorDesc, got: &[f32], before: &[f32], want: &[f64], tol: f64) {
    compare_scaled(what, d, got, before, want, tol, 1.0)
}

fn compare_scaled(
    what: &str,
    d: &TensorDesc,
    got: &[f32],
    before: &[f32],
    want: &[f64],
    tol: f64,
    floor: f64,
) {
    let mut element = vec![false; got.len()];
    for o in d.offsets() {
        element[o] = true;
    }
    let scale = max_abs(d.offsets().map(|o| want[o])).max(floor).max(1.0);
    for (o, &is) in element.iter().enumerate() {
        if !is {
            assert_eq!(
                got[o].to_bits(),
                before[o].to_bits(),
                "{what}: the gap at offset {o} was written"
            );
            continue;
        }
        let (g, w) = (got[o] as f64, want[o]);
        assert!(
            close(g, w, tol * scale),
            "{what}: at offset {o} {g} but the reference gives {w} (bound {tol:e} · {scale})"
        );
    }
}

fn compare_vec(what: &str, got: &[f32], want: &[f64], tol: f64, floor: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = max_abs(want.iter().copied()).max(floor).max(1.0);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            close(g as f64, w, tol * scale),
            "{what}[{i}]: {g} but the reference gives {w} (bound {tol:e} · {scale})"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Text: problem strings and names
// ---------------------------------------------------------------------------------------

fn text(s: &str, h: &Handle, seed: u64) {
    match Activation::parse(s) {
        Ok(a) => assert_eq!(Activation::parse(&a.name()).ok(), Some(a), "{s:?}"),
        Err(e) => named(&e),
    }
    match PoolMode::parse(s) {
        Ok(m) => assert_eq!(PoolMode::parse(m.name()).ok(), Some(m), "{s:?}"),
        Err(e) => named(&e),
    }
    match OpTensorOp::parse(s) {
        Ok(m) => assert_eq!(OpTensorOp::parse(m.name()).ok(), Some(m), "{s:?}"),
        Err(e) => named(&e),
    }
    match ReduceOp::parse(s) {
        Ok(m) => assert_eq!(ReduceOp::parse(m.name()).ok(), Some(m), "{s:?}"),
        Err(e) => named(&e),
    }
    match SoftmaxAlgorithm::parse(s) {
        Ok(m) => assert_eq!(SoftmaxAlgorithm::parse(m.name()).ok(), Some(m), "{s:?}"),
        Err(e) => named(&e),
    }
    match SoftmaxMode::parse(s) {
        Ok(m) => assert_eq!(SoftmaxMode::parse(m.name()).ok(), Some(m), "{s:?}"),
        Err(e) => named(&e),
    }
    match parse_dims(s) {
        Ok(d) => assert!(d.iter().all(|&v| v >= 1), "{s:?} gave {d:?}"),
        Err(e) => named(&e),
    }
    let mut b = Bytes::new(s.as_bytes());
    match PoolProblem::parse(s) {
        Ok(p) => {
            let od = p.output_dims();
            for layout in [Layout::Nchw, Layout::Nhwc] {
                let (x, y) = match (p.x_desc(layout), p.y_desc(layout)) {
                    (Ok(x), Ok(y)) => (x, y),
                    (Err(e), _) | (_, Err(e)) => {
                        named(&e);
                        continue;
                    }
                };
                assert_eq!(x.dims(), p.dims, "{s:?}");
                assert_eq!(Ok(y.dims()), od, "{s:?}");
                assert_eq!(p.desc.output_dims(&x), od, "{s:?}");
                run_pool(&mut b, h, seed, &p.desc, &x, &y);
            }
        }
        Err(e) => named(&e),
    }
    match BatchNormProblem::parse(s) {
        Ok(p) => {
            let printed = p.to_string();
            let again = BatchNormProblem::parse(&printed)
                .unwrap_or_else(|e| panic!("{printed:?} printed from {s:?} does not parse: {e}"));
            assert_eq!(again, p, "{printed:?} re-parses differently");
            for layout in [Layout::Nchw, Layout::Nhwc] {
                match p.tensor(layout) {
                    Ok(x) => {
                        assert_eq!(x.dims(), p.dims);
                        let eps = p.eps.unwrap_or(1e-5);
                        match BatchNorm::new(eps) {
                            Ok(bn) => run_batch_norm(&mut b, h, seed, &bn, &x),
                            Err(e) => named(&e),
                        }
                    }
                    Err(e) => named(&e),
                }
            }
        }
        Err(e) => named(&e),
    }
    match SoftmaxSpec::parse(s) {
        Ok(p) => {
            for layout in [Layout::Nchw, Layout::Nhwc] {
                match p.desc(layout) {
                    Ok(x) => {
                        assert_eq!(x.dims(), p.dims);
                        run_softmax(&mut b, h, seed, p.algo, p.mode, &x, &x);
                    }
                    Err(e) => named(&e),
                }
            }
        }
        Err(e) => named(&e),
    }
}

// ---------------------------------------------------------------------------------------
// Activations
// ---------------------------------------------------------------------------------------

fn act(b: &mut Bytes<'_>) -> Activation {
    let param = |b: &mut Bytes<'_>| b.pick(&[0.0, 0.1, -1.0, 2.5, 6.0, f32::NAN, f32::INFINITY]);
    match b.below(12) {
        0 => Activation::None,
        1 => Activation::Relu,
        2 => Activation::Clip {
            lo: param(b),
            hi: param(b),
        },
        3 => Activation::Sigmoid,
        4 => Activation::Tanh,
        5 => Activation::Gelu,
        6 => Activation::Silu,
        7 => Activation::LeakyRelu { slope: param(b) },
        8 => Activation::Elu { alpha: param(b) },
        9 => Activation::HardSwish,
        10 => Activation::GeluTanh,
        _ => Activation::Clip { lo: 0.0, hi: 6.0 },
    }
}

fn activation(b: &mut Bytes<'_>, h: &Handle, seed: u64) {
    let dt = dtype(b);
    let d = some_dims(b, 8);
    let Some(x) = new_tensor(b, dt, d) else {
        return;
    };
    let a = act(b);
    let bl = blend(b);
    let what = format!("activation {} {bl:?} {x:?}", a.name());
    match b.below(4) {
        0 => {
            let Some(y) = new_like(b, dt, d) else { return };
            let xb = buf(b, &x, seed, 4.0);
            let mut yb = out_buf(b, &y, seed ^ 1, bl.beta);
            let before = yb.v.clone();
            let r = h.activation_forward(a, bl, &x, &xb.v, &y, &mut yb.v);
            if settle(&what, r, !(xb.whole && yb.whole), &[(&yb.v, &before)]) {
                let want = rf::activation::forward(a, bl, &x, &xb.v, &y, &before).unwrap();
                compare(&what, &y, &yb.v, &before, &want, TOL);
            }
        }
        1 => {
            let mut yb = buf(b, &x, seed, 4.0);
            let before = yb.v.clone();
            let r = h.activation_forward_in_place(a, bl, &x, &mut yb.v);
            if settle(&what, r, !yb.whole, &[(&yb.v, &before)]) {
                let want = rf::activation::forward(a, bl, &x, &before, &x, &before).unwrap();
                compare(&what, &x, &yb.v, &before, &want, TOL);
            }
        }
        2 => {
            let (Some(dy), Some(dx)) = (new_like(b, dt, d), new_like(b, dt, d)) else {
                return;
            };
            let xb = buf(b, &x, seed, 4.0);
            let dyb = buf(b, &dy, seed ^ 2, 1.0);
            let mut dxb = out_buf(b, &dx, seed ^ 3, bl.beta);
            let before = dxb.v.clone();
            let r = h.activation_backward(a, bl, &x, &xb.v, &dy, &dyb.v, &dx, &mut dxb.v);
            let short = !(xb.whole && dyb.whole && dxb.whole);
            if settle(&what, r, short, &[(&dxb.v, &before)]) {
                let want =
                    rf::activation::backward(a, bl, &x, &xb.v, &dy, &dyb.v, &dx, &before).unwrap();
                compare(&what, &dx, &dxb.v, &before, &want, TOL);
            }
        }
        _ => {
            let Some(g) = new_like(b, dt, d) else { return };
            let xb = buf(b, &x, seed, 4.0);
            let mut gb = buf(b, &g, seed ^ 2, 1.0);
            let before = gb.v.clone();
            let r = h.activation_backward_in_place(a, bl, &x, &xb.v, &g, &mut gb.v);
            if settle(&what, r, !(xb.whole && gb.whole), &[(&gb.v, &before)]) {
                let want =
                    rf::activation::backward(a, bl, &x, &xb.v, &g, &before, &g, &before).unwrap();
                compare(&what, &g, &gb.v, &before, &want, TOL);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pooling
// ---------------------------------------------------------------------------------------

fn pool(b: &mut Bytes<'_>, h: &Handle, seed: u64) {
    let dt = dtype(b);
    let dims = some_dims(b, 12);
    let Some(x) = new_tensor(b, dt, dims) else {
        return;
    };
    let mode = b.pick(&PoolMode::ALL);
    let desc = if b.below(8) == 0 {
        PoolDesc::global(mode, &x)
    } else {
        let window = [b.size(5), b.size(5)];
        let stride = [b.size(3), b.size(3)];
        let pad = Padding {
            top: b.signed(3),
            bottom: b.signed(3),
            left: b.signed(3),
            right: b.signed(3),
        };
        PoolDesc::new(mode, window, stride, pad)
    };
    let desc = match desc {
        Ok(d) => d.with_ceil_mode(b.bool()),
        Err(e) => return named(&e),
    };
    let od = match desc.output_dims(&x) {
        Ok(o) => o,
        Err(e) => return named(&e),
    };
    assert!(od.iter().all(|&v| v >= 1), "{desc:?} on {x:?} gives {od:?}");
    let Some(y) = new_like(b, dt, od) else { return };
    run_pool(b, h, seed, &desc, &x, &y);
}

fn run_pool(
    b: &mut Bytes<'_>,
    h: &Handle,
    seed: u64,
    desc: &PoolDesc,
    x: &TensorDesc,
    y: &TensorDesc,
) {
    let [kh, kw] = desc.window();
    let work = y.elements().saturating_mul(kh.saturating_mul(kw));
    if work > WORK_MAX {
        return;
    }
    let bl = blend(b);
    let what = format!("pool {desc:?} {bl:?} {x:?} → {y:?}");
    let xb = buf(b, x, seed, 1.0);
    if b.below(4) == 0 {
        run_pool_indexed(b, h, seed, desc, bl, x, &xb, y);
    } else if b.bool() {
        let mut yb = out_buf(b, y, seed ^ 1, bl.beta);
        let before = yb.v.clone();
        let r = h.pooling_forward(desc, bl, x, &xb.v, y, &mut yb.v);
        if settle(&what, r, !(xb.whole && yb.whole), &[(&yb.v, &before)]) {
            let want = rf::pool::forward(desc, bl, x, &xb.v, y, &before).unwrap();
            compare(&what, y, &yb.v, &before, &want, TOL);
        }
    } else {
        let Some(dx) = new_like(b, x.dtype(), x.dims()) else {
            return;
        };
        let dyb = buf(b, y, seed ^ 2, 1.0);
        let mut dxb = out_buf(b, &dx, seed ^ 3, bl.beta);
        let before = dxb.v.clone();
        let r = h.pooling_backward(desc, bl, x, &xb.v, y, &dyb.v, &dx, &mut dxb.v);
        let short = !(xb.whole && dyb.whole && dxb.whole);
        if settle(&what, r, short, &[(&dxb.v, &before)]) {
            let want = rf::pool::backward(desc, bl, x, &xb.v, y, &dyb.v, &dx, &before).unwrap();
            compare(&what, &dx, &dxb.v, &before, &want, TOL);
        }
    }
}

/// Max pooling's training pair: the forward with indices (y as the reference's, each index
/// the reference's choice, laid out in y's order), then the backward from those indices (or from indices made
/// wrong, which it must refuse without writing dx).
#[allow(clippy::too_many_arguments)]
fn run_pool_indexed(
    b: &mut Bytes<'_>,
    h: &Handle,
    seed: u64,
    desc: &PoolDesc,
    bl: Blend,
    x: &TensorDesc,
    xb: &Buf,
    y: &TensorDesc,
) {
    let what = format!("pool with indices {desc:?} {bl:?} {x:?} → {y:?}");
    let mut yb = out_buf(b, y, seed ^ 1, bl.beta);
    let n_out = y.elements();
    let short_ind = b.below(16) == 0 && n_out > 0;
    let mut ind = vec![u32::MAX; (n_out - usize::from(short_ind)).min(RUN_MAX)];
    let ind_whole = ind.len() == n_out;
    let before = yb.v.clone();
    let r = h.pooling_forward_with_indices(desc, bl, x, &xb.v, y, &mut yb.v, &mut ind);
    let short = !(xb.whole && yb.whole && ind_whole);
    if let Err(e) = &r {
        assert!(
            ind.iter().all(|&i| i == u32::MAX),
            "{what}: refused ({e}) but wrote the indices"
        );
    }
    // Average pooling has no indices: refused, for that or for an earlier fault.
    if desc.mode() != PoolMode::Max {
        assert!(r.is_err(), "{what}: accepted average pooling");
    }
    if !settle(&what, r, short, &[(&yb.v, &before)]) {
        return;
    }
    let want = rf::pool::forward(desc, bl, x, &xb.v, y, &before).unwrap();
    compare(&what, y, &yb.v, &before, &want, TOL);
    let chosen = rf::pool::indices(desc, x, &xb.v, y).unwrap();
    assert!(
        ind.iter().zip(&chosen).all(|(&a, &c)| a as usize == c),
        "{what}: indices {ind:?}, the reference's {chosen:?}"
    );
    let Some(dx) = new_like(b, x.dtype(), x.dims()) else {
        return;
    };
    let bl = blend(b);
    let dyb = buf(b, y, seed ^ 2, 1.0);
    let mut dxb = out_buf(b, &dx, seed ^ 3, bl.beta);
    let before = dxb.v.clone();
    // Now and then one index outside its plane.
    let corrupt = b.below(8) == 0;
    if corrupt {
        let k = b.below(ind.len());
        ind[k] = (x.h() * x.w() + b.below(3)) as u32;
    }
    let r = h.pooling_backward_with_indices(desc, bl, y, &dyb.v, &ind, &dx, &mut dxb.v);
    if corrupt {
        if let Err(e) = &r {
            named(e);
        }
        assert!(r.is_err(), "{what}: accepted an index outside its plane");
        assert!(same_bits(&dxb.v, &before), "{what}: refused but wrote dx");
        return;
    }
    let short = !(dyb.whole && dxb.whole);
    if settle(&what, r, short, &[(&dxb.v, &before)]) {
        let want = rf::pool::backward(desc, bl, x, &xb.v, y, &dyb.v, &dx, &before).unwrap();
        compare(&what, &dx, &dxb.v, &before, &want, TOL);
    }
}

// ---------------------------------------------------------------------------------------
// Softmax
// ---------------------------------------------------------------------------------------

fn softmax(b: &mut Bytes<'_>, h: &Handle, seed: u64) {
    let dt = dtype(b);
    let d = some_dims(b, 10);
    let Some(x) = new_tensor(b, dt, d) else {
        return;
    };
    let Some(y) = new_like(b, dt, d) else { return };
    let algo = b.pick(&SoftmaxAlgorithm::ALL);
    let mode = b.pick(&[SoftmaxMode::Channel, SoftmaxMode::Instance]);
    run_softmax(b, h, seed, algo, mode, &x, &y);
}

fn run_softmax(
    b: &mut Bytes<'_>,
    h: &Handle,
    seed: u64,
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    x: &TensorDesc,
    y: &TensorDesc,
) {
    let bl = blend(b);
    let what = format!("softmax {algo:?} {mode:?} {bl:?} {x:?} → {y:?}");
    if b.bool() {
        let xb = buf(b, x, seed, 1.0);
        let mut yb = out_buf(b, y, seed ^ 1, bl.beta);
        let before = yb.v.clone();
        let r = h.softmax_forward(algo, mode, bl, x, &xb.v, y, &mut yb.v);
        if settle(&what, r, !(xb.whole && yb.whole), &[(&yb.v, &before)]) {
            let want = rf::softmax::forward(algo, mode, bl, x, &xb.v, y, &before).unwrap();
            compare(&what, y, &yb.v, &before, &want, TOL);
        }
    } else {
        // x's descriptor serves as y's (the forward output), y's as dy's and dx's.
        let dx = y;
        let yb = buf(b, x, seed, 8.0);
        let dyb = buf(b, y, seed ^ 2, 1.0);
        let mut dxb = out_buf(b, dx, seed ^ 3, bl.beta);
        let before = dxb.v.clone();
        let r = h.softmax_backward(algo, mode, bl, x, &yb.v, y, &dyb.v, dx, &mut dxb.v);
        let short = !(yb.whole && dyb.whole && dxb.whole);
        if settle(&what, r, short, &[(&dxb.v, &before)]) {
            let want =
                rf::softmax::backward(algo, mode, bl, x, &yb.v, y, &dyb.v, dx, &before).unwrap();
            compare(&what, dx, &dxb.v, &before, &want, TOL);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Normalization
// ---------------------------------------------------------------------------------------

fn epsilon(b: &mut Bytes<'_>) -> f64 {
    b.pick(&[
        1e-5,
        1e-3,
        0.1,
        1.0,
        1e-6,
        0.0,
        -1e-3,
        f64::NAN,
        f64::INFINITY,
    ])
}

fn batch_norm(b: &mut Bytes<'_>, h: &Handle, seed: u64) {
    let bn = match BatchNorm::new(epsilon(b)) {
        Ok(bn) => bn,
        Err(e) => return named(&e),
    };
    let dt = dtype(b);
    let dims = some_dims(b, 8);
    let Some(x) = new_tensor(b, dt, dims) else {
        return;
    };
    run_batch_norm(b, h, seed, &bn, &x);
}

/// The largest |x − μ| · |γ| / σ over the channels: the scale of the normalized terms.
fn term_scale(x: &TensorDesc, xv: &[f32], gamma: &[f32], mean: &[f64], inv: &[f64]) -> f64 {
    let [n, c, hh, w] = x.dims();
    let mut s = 0.0f64;
    for k in 0..c.min(gamma.len()) {
        for bi in 0..n {
            for i in 0..hh {
                for j in 0..w {
                    let v = (xv[x.offset(bi, k, i, j)] as f64 - mean[k]).abs();
                    s = s.max(v * inv[k] * (gamma[k] as f64).abs());
                }
            }
        }
    }
    s
}

fn run_batch_norm(b: &mut Bytes<'_>, h: &Handle, seed: u64, bn: &BatchNorm, x: &TensorDesc) {
    let dt = x.dtype();
    let d = x.dims();
    let Some(y) = new_like(b, dt, d) else { return };
    let c = d[1];
    let eps = bn.epsilon();
    let bl = blend(b);
    let what = format!("batch norm ε {eps} {bl:?} {x:?} → {y:?}");
    let xb = buf(b, x, seed, 1.0);
    let gamma = vec_of(b, c, seed ^ 10, 2.0);
    let beta = vec_of(b, c, seed ^ 11, 1.0);
    let whole = xb.whole && gamma.len() == c && beta.len() == c;
    let ref_train = |prior: &[f32]| {
        rf::norm::batch_norm_training(bl, x, &xb.v, &y, prior, &gamma, &beta, eps).unwrap()
    };
    match b.below(3) {
        0 => {
            let mean = vec_of(b, c, seed ^ 12, 1.0);
            let mut var: Vec<f32> = vec_of(b, c, seed ^ 13, 1.0)
                .iter()
                .map(|v| v.abs())
                .collect();
            if b.below(16) == 0 {
                if let Some(v) = var.first_mut() {
                    *v = b.pick(&[-1.0, f32::NAN, f32::INFINITY]);
                }
            }
            let mut yb = out_buf(b, &y, seed ^ 1, bl.beta);
            let before = yb.v.clone();
            let r = h.batch_norm_forward_inference(
                bn, bl, x, &xb.v, &y, &mut yb.v, &gamma, &beta, &mean, &var,
            );
            let ok_vecs = whole && mean.len() == c && var.len() == c;
            if settle(&what, r, !(ok_vecs && yb.whole), &[(&yb.v, &before)]) {
                let want = rf::norm::batch_norm_inference(
                    bl, x, &xb.v, &y, &before, &gamma, &beta, &mean, &var, eps,
                )
                .unwrap();
                compare(&what, &y, &yb.v, &before, &want, NORM_TOL);
            }
        }
        1 => {
            let factor = b.pick(&[0.1, 0.0, 1.0, 0.5, 1.5, f64::NAN]);
            let mut rmean = vec_of(b, c, seed ^ 14, 1.0);
            let mut rvar: Vec<f32> = vec_of(b, c, seed ^ 15, 1.0)
                .iter()
                .map(|v| v.abs())
                .collect();
            let (rmean0, rvar0) = (rmean.clone(), rvar.clone());
            let mut smean = vec_of(b, c, seed ^ 16, 1.0);
            let mut sinv = vec_of(b, c, seed ^ 17, 1.0);
            let (smean0, sinv0) = (smean.clone(), sinv.clone());
            let (with_running, with_saved) = (b.bool(), b.bool());
            let mut yb = out_buf(b, &y, seed ^ 1, bl.beta);
            let before = yb.v.clone();
            let running = with_running.then_some(RunningStats {
                mean: &mut rmean,
                var: &mut rvar,
                factor,
            });
            let saved = with_saved.then_some(SavedStatsMut {
                mean: &mut smean,
                inv_std: &mut sinv,
            });
            let r = h.batch_norm_forward_training(
                bn, bl, x, &xb.v, &y, &mut yb.v, &gamma, &beta, running, saved,
            );
            let stats_ok = (!with_running || (rmean0.len() == c && rvar0.len() == c))
                && (!with_saved || (smean0.len() == c && sinv0.len() == c));
            let short = !(whole && yb.whole && stats_ok);
            let outs: [(&[f32], &[f32]); 5] = [
                (&yb.v, &before),
                (&rmean, &rmean0),
                (&rvar, &rvar0),
                (&smean, &smean0),
                (&sinv, &sinv0),
            ];
            if !settle(&what, r, short, &outs) {
                return;
            }
            let t = ref_train(&before);
            let floor = term_scale(x, &xb.v, &gamma, &t.mean, &t.inv_std);
            compare_scaled(&what, &y, &yb.v, &before, &t.y, NORM_TOL, floor);
            if with_saved {
                compare_vec(&what, &smean, &t.mean, NORM_TOL, 0.0);
                compare_vec(&what, &sinv, &t.inv_std, NORM_TOL, 0.0);
            }
            if with_running {
                let m = (d[0] * d[2] * d[3]) as f64;
                let mix = |old: &[f32], new: &[f64], k: f64| -> Vec<f64> {
                    old.iter()
                        .zip(new)
                        .map(|(&o, &v)| (1.0 - factor) * o as f64 + factor * v * k)
                        .collect()
                };
                compare_vec(&what, &rmean, &mix(&rmean0, &t.mean, 1.0), NORM_TOL, 0.0);
                let uv = mix(&rvar0, &t.var, m / (m - 1.0));
                compare_vec(&what, &rvar, &uv, NORM_TOL, 0.0);
            }
        }
        _ => {
            let Some(dy) = new_like(b, dt, d) else { return };
            let dyb = buf(b, &dy, seed ^ 2, 1.0);
            let blp = blend(b);
            let with_saved = b.bool();
            let mut dxb = out_buf(b, &y, seed ^ 3, bl.beta);
            let mut dg = vec_of(b, c, seed ^ 18, 1.0);
            let mut db = vec_of(b, c, seed ^ 19, 1.0);
            if blp.beta == 0.0 {
                dg.fill(f32::NAN);
                db.fill(f32::NAN);
            }
            let (before, dg0, db0) = (dxb.v.clone(), dg.clone(), db.clone());
            // The statistics a forward pass saves, from the reference (when x can be run).
            let m = d[0].saturating_mul(d[2]).saturating_mul(d[3]);
            // (x's descriptor as the reference's y: dy's and dx's may be any.)
            let stats = (xb.whole && gamma.len() == c && dt == DataType::F32).then(|| {
                rf::norm::batch_norm_training(bl, x, &xb.v, x, &[], &gamma, &beta, eps).unwrap()
            });
            let (sm, si): (Vec<f32>, Vec<f32>) = match &stats {
                Some(t) => (
                    t.mean.iter().map(|&v| v as f32).collect(),
                    t.inv_std.iter().map(|&v| v as f32).collect(),
                ),
                None => (vec![0.0; c.min(RUN_MAX)], vec![1.0; c.min(RUN_MAX)]),
            };
            let saved = with_saved.then_some(SavedStats {
                mean: &sm,
                inv_std: &si,
            });
            let grads = ParamGrads {
                dgamma: &mut dg,
                dbeta: &mut db,
            };
            let r = h.batch_norm_backward(
                bn, bl, blp, x, &xb.v, &dy, &dyb.v, &y, &mut dxb.v, &gamma, saved, grads,
            );
            let vecs = gamma.len() == c && dg0.len() == c && db0.len() == c;
            let short = !(xb.whole && dyb.whole && dxb.whole && vecs);
            let outs: [(&[f32], &[f32]); 3] = [(&dxb.v, &before), (&dg, &dg0), (&db, &db0)];
            if !settle(&what, r, short, &outs) {
                return;
            }
            let Some(t) = stats else {
                // Accepted: only a whole x of more than one value per channel may be.
                panic!("{what}: accepted without statistics to compare")
            };
            let g = rf::norm::batch_norm_backward(
                bl,
                blp,
                x,
                &xb.v,
                &dy,
                &dyb.v,
                &y,
                (&before, &dg0, &db0),
                &gamma,
                &sm,
                &si,
            )
            .unwrap();
            let dymax = max_abs(dyb.v.iter().map(|&v| v as f64));
            let gi = max_abs(gamma.iter().zip(&t.inv_std).map(|(&g, &i)| g as f64 * i));
            let floor = dymax * gi.max(1.0);
            compare_scaled(&what, &y, &dxb.v, &before, &g.dx, NORM_TOL, floor);
            let floor = dymax * term_scale(x, &xb.v, &vec![1.0; c], &t.mean, &t.inv_std);
            compare_vec(&what, &dg, &g.dgamma, NORM_TOL, floor * m as f64);
            compare_vec(&what, &db, &g.dbeta, NORM_TOL, dymax * m as f64);
        }
    }
}

fn layer_norm(b: &mut Bytes<'_>, h: &Handle, seed: u64) {
    let eps = epsilon(b);
    let ln = match LayerNorm::new(eps) {
        Ok(l) => l,
        Err(e) => return named(&e),
    };
    let dt = dtype(b);
    let d = some_dims(b, 8);
    let Some(x) = new_tensor(b, dt, d) else {
        return;
    };
    let Some(y) = new_like(b, dt, d) else { return };
    let n = d[0];
    let chw = d[1].saturating_mul(d[2]).saturating_mul(d[3]);
    let bl = blend(b);
    let what = format!("layer norm ε {eps} {bl:?} {x:?} → {y:?}");
    let xb = buf(b, &x, seed, 1.0);
    let (with_gamma, with_beta) = (b.bool(), b.bool());
    let gamma = vec_of(b, chw, seed ^ 10, 2.0);
    let beta = vec_of(b, chw, seed ^ 11, 1.0);
    let g = with_gamma.then_some(&gamma[..]);
    let bt = with_beta.then_some(&beta[..]);
    let vecs_ok = (!with_gamma || gamma.len() == chw) && (!with_beta || beta.len() == chw);
    if b.bool() {
        let with_saved = b.bool();
        let mut sm = vec_of(b, n, seed ^ 12, 1.0);
        let mut si = vec_of(b, n, seed ^ 13, 1.0);
        let (sm0, si0) = (sm.clone(), si.clone());
        let mut yb = out_buf(b, &y, seed ^ 1, bl.beta);
        let before = yb.v.clone();
        let saved = with_saved.then_some(SavedStatsMut {
            mean: &mut sm,
            inv_std: &mut si,
        });
        let r = h.layer_norm_forward(&ln, bl, &x, &xb.v, &y, &mut yb.v, g, bt, saved);
        let saved_ok = !with_saved || (sm0.len() == n && si0.len() == n);
        let short = !(xb.whole && yb.whole && vecs_ok && saved_ok);
        let outs: [(&[f32], &[f32]); 3] = [(&yb.v, &before), (&sm, &sm0), (&si, &si0)];
        if settle(&what, r, short, &outs) {
            let t = rf::norm::layer_norm_forward(bl, &x, &xb.v, &y, &before, g, bt, eps).unwrap();
            let gmax = if with_gamma {
                max_abs(gamma.iter().map(|&v| v as f64))
            } else {
                1.0
            };
            let floor = gmax * max_abs(t.rstd.iter().copied()) * 8.0;
            compare_scaled(&what, &y, &yb.v, &before, &t.y, NORM_TOL, floor);
            if with_saved {
                compare_vec(&what, &sm, &t.mean, NORM_TOL, 0.0);
                compare_vec(&what, &si, &t.rstd, NORM_TOL, 0.0);
            }
        }
    } else {
        let Some(dy) = new_like(b, dt, d) else { return };
        let dyb = buf(b, &dy, seed ^ 2, 1.0);
        let blp = blend(b);
        let with_grads = b.bool();
        // Statistics from the reference forward when x can be run, else arbitrary ones.
        let stats = (xb.whole && dt == DataType::F32 && x.span() <= RUN_MAX && chw > 0)
            .then(|| rf::norm::layer_norm_forward(bl, &x, &xb.v, &x, &[], None, None, eps));
        let (sm, si): (Vec<f32>, Vec<f32>) = match &stats {
            Some(Ok(t)) => (
                t.mean.iter().map(|&v| v as f32).collect(),
                t.rstd.iter().map(|&v| v as f32).collect(),
            ),
            _ => (vec_of(b, n, seed ^ 12, 1.0), vec_of(b, n, seed ^ 13, 1.0)),
        };
        let mut dxb = out_buf(b, &y, seed ^ 3, bl.beta);
        let mut dg = vec_of(b, chw, seed ^ 18, 1.0);
        let mut db = vec_of(b, chw, seed ^ 19, 1.0);
        if blp.beta == 0.0 {
            dg.fill(f32::NAN);
            db.fill(f32::NAN);
        }
        let (before, dg0, db0) = (dxb.v.clone(), dg.clone(), db.clone());
        let grads = with_grads.then_some(ParamGrads {
            dgamma: &mut dg,
            dbeta: &mut db,
        });
        let saved = SavedStats {
            mean: &sm,
            inv_std: &si,
        };
        let r = h.layer_norm_backward(
            bl, blp, &x, &xb.v, &dy, &dyb.v, &y, &mut dxb.v, g, saved, grads,
        );
        let grads_ok = !with_grads || (dg0.len() == chw && db0.len() == chw);
        // (The backward pass takes no β.)
        let gamma_ok = !with_gamma || gamma.len() == chw;
        let short = !(xb.whole && dyb.whole && dxb.whole && gamma_ok && grads_ok);
        let outs: [(&[f32], &[f32]); 3] = [(&dxb.v, &before), (&dg, &dg0), (&db, &db0)];
        if !settle(&what, r, short, &outs) {
            return;
        }
        let want = rf::norm::layer_norm_backward(
            bl,
            blp,
            &x,
            &xb.v,
            &dy,
            &dyb.v,
            &y,
            (&before, &dg0, &db0),
            g,
            &sm,
            &si,
        )
        .unwrap();
        let dymax = max_abs(dyb.v.iter().map(|&v| v as f64));
        let xmax = max_abs(xb.v.iter().map(|&v| v as f64)) + max_abs(sm.iter().map(|&v| v as f64));
        let rs = max_abs(si.iter().map(|&v| v as f64));
        let gmax = if with_gamma {
            max_abs(gamma.iter().map(|&v| v as f64))
        } else {
            1.0
        };
        let floor = dymax * gmax * rs * (1.0 + (xmax * rs).powi(2));
        compare_scaled(&what, &y, &dxb.v, &before, &want.dx, NORM_TOL, floor);
        if with_grads {
            let nn = n as f64;
            compare_vec(&what, &dg, &want.dgamma, NORM_TOL, dymax * xmax * rs * nn);
            compare_vec(&what, &db, &want.dbeta, NORM_TOL, dymax * nn);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tensor operations and the transform
// ---------------------------------------------------------------------------------------

/// Dimensions that broadcast to `d`: each one `d`'s or 1 (rarely anything).
fn broadcast(b: &mut Bytes<'_>, d: [usize; 4]) -> [usize; 4] {
    if b.below(24) == 0 {
        return some_dims(b, 6);
    }
    d.map(|v| if b.bool() { v } else { 1 })
}

fn add_or_op_tensor(b: &mut Bytes<'_>, h: &Handle, seed: u64) {
    let dt = dtype(b);
    let d = some_dims(b, 8);
    let Some(c) = new_tensor(b, dt, d) else {
        return;
    };
    if b.bool() {
        let bl = blend(b);
        let dims = broadcast(b, d);
        let Some(a) = new_tensor(b, dt, dims) else {
            return;
        };
        let what = format!("add tensor {bl:?} {a:?} → {c:?}");
        let ab = buf(b, &a, seed, 1.0);
        let mut cb = out_buf(b, &c, seed ^ 1, bl.beta);
        let before = cb.v.clone();
        let r = h.add_tensor(bl, &a, &ab.v, &c, &mut cb.v);
        if settle(&what, r, !(ab.whole && cb.whole), &[(&cb.v, &before)]) {
            let want = rf::tensor_ops::add_tensor(bl, &a, &ab.v, &c, &before).unwrap();
            compare(&what, &c, &cb.v, &before, &want, TOL);
        }
        return;
    }
    let op = b.pick(&OpTensorOp::ALL);
    let coef = |b: &mut Bytes<'_>| b.pick(&[1.0, 1.0, 0.5, -2.0, 0.0, f32::NAN, f32::INFINITY]);
    let (a1, a2) = (coef(b), coef(b));
    let beta = b.pick(&[0.0, 0.0, 1.0, -0.5, f32::NAN]);
    let desc = match OpTensorDesc::new(op, a1, a2, beta) {
        Ok(o) => o,
        Err(e) => return named(&e),
    };
    let Some(a) = new_like(b, dt, d) else { return };
    let dims = broadcast(b, d);
    let Some(bd) = new_tensor(b, dt, dims) else {
        return;
    };
    let what = format!("op tensor {desc:?} {a:?} {bd:?} → {c:?}");
    let ab = buf(b, &a, seed, 1.0);
    let bb = buf(b, &bd, seed ^ 2, 1.0);
    let mut cb = out_buf(b, &c, seed ^ 1, beta);
    let before = cb.v.clone();
    let r = h.op_tensor(&desc, &a, &ab.v, &bd, &bb.v, &c, &mut cb.v);
    let short = !(ab.whole && cb.whole && (bb.whole || !op.is_binary()));
    if settle(&what, r, short, &[(&cb.v, &before)]) {
        let want = rf::tensor_ops::op_tensor(&desc, &a, &ab.v, &bd, &bb.v, &c, &before).unwrap();
        compare(&what, &c, &cb.v, &before, &want, TOL);
    }
}

fn reduce(b: &mut Bytes<'_>, h: &Handle, seed: u64) {
    let dt = dtype(b);
    let d = some_dims(b, 8);
    let Some(a) = new_tensor(b, dt, d) else {
        return;
    };
    let dims = broadcast(b, d);
    let Some(c) = new_tensor(b, dt, dims) else {
        return;
    };
    let op = b.pick(&ReduceOp::ALL);
    let bl = blend(b);
    let what = format!("reduce {} {bl:?} {a:?} → {c:?}", op.name());
    // Integers sum exactly in f32; products of quarters stay small.
    let div = if op == ReduceOp::Mul { 4.0 } else { 1.0 };
    let ab = buf(b, &a, seed, div);
    let mut cb = out_buf(b, &c, seed ^ 1, bl.beta);
    let before = cb.v.clone();
    let r = h.reduce_tensor(op, bl, &a, &ab.v, &c, &mut cb.v);
    if settle(&what, r, !(ab.whole && cb.whole), &[(&cb.v, &before)]) {
        let want = rf::tensor_ops::reduce_tensor(op, bl, &a, &ab.v, &c, &before).unwrap();
        compare(&what, &c, &cb.v, &before, &want, TOL);
    }
}

fn transform(b: &mut Bytes<'_>, h: &Handle, seed: u64) {
    let dt = dtype(b);
    let d = some_dims(b, 10);
    let Some(x) = new_tensor(b, dt, d) else {
        return;
    };
    let Some(y) = new_like(b, dt, d) else { return };
    let bl = blend(b);
    let what = format!("transform {bl:?} {x:?} → {y:?}");
    let xb = buf(b, &x, seed, 1.0);
    let mut yb = out_buf(b, &y, seed ^ 1, bl.beta);
    let before = yb.v.clone();
    let r = h.transform_tensor(bl, &x, &xb.v, &y, &mut yb.v);
    if settle(&what, r, !(xb.whole && yb.whole), &[(&yb.v, &before)]) {
        let want = rf::transform::forward(bl, &x, &xb.v, &y, &before).unwrap();
        compare(&what, &y, &yb.v, &before, &want, TOL);
    }
}

fn scale_or_set(b: &mut Bytes<'_>, h: &Handle, seed: u64) {
    let dt = dtype(b);
    let dims = some_dims(b, 10);
    let Some(d) = new_tensor(b, dt, dims) else {
        return;
    };
    let v = b.pick(&[0.0, 1.0, -2.5, 1e30, f32::NAN, f32::INFINITY]);
    let mut yb = buf(b, &d, seed, 1.0);
    let before = yb.v.clone();
    if b.bool() {
        let what = format!("scale {v} {d:?}");
        let r = h.scale_tensor(&d, &mut yb.v, v);
        if settle(&what, r, !yb.whole, &[(&yb.v, &before)]) {
            let want = rf::tensor_ops::scale_tensor(&d, &before, v).unwrap();
            compare(&what, &d, &yb.v, &before, &want, TOL);
        }
    } else {
        let what = format!("set {v} {d:?}");
        let r = h.set_tensor(&d, &mut yb.v, v);
        if settle(&what, r, !yb.whole, &[(&yb.v, &before)]) {
            let want = rf::tensor_ops::set_tensor(&d, v).unwrap();
            compare(&what, &d, &yb.v, &before, &want, TOL);
        }
    }
}
