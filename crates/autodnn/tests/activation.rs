//! The activation operator, forward and backward, against the f64 reference: every
//! activation, every instruction set, 1 and 2 threads, packed NCHW and NHWC and padded
//! strides, blending, in place; the derivatives against finite differences of the function.
//!
//! Bounds: relu, leaky relu, clip and identity (and their derivatives) exact without
//! blending (alpha 1, beta 0); the others, and every blended result,
//! within 1e-6 · |f| + 1e-6 of the f64 function at the same input (vmath's exponentials are
//! within a few ulp; GELU's erf within 3e-7 absolute), a blend's bound scaled by |alpha| plus
//! its own roundings. Every instruction set and thread count gives the
//! same bits.

mod common;

use autodnn::layers::Blend;
use autodnn::{reference, Activation, DataType, Error, Handle, Layout, TensorDesc};
use common::{handles, Rng};

fn all_activations() -> Vec<Activation> {
    let mut v: Vec<Activation> = Activation::NAMES
        .iter()
        .map(|n| Activation::parse(n).unwrap())
        .collect();
    v.push(Activation::LeakyRelu { slope: 0.125 });
    v.push(Activation::Elu { alpha: 0.5 });
    v.push(Activation::clip(-1.5, 2.25).unwrap());
    v
}

fn exact(a: Activation) -> bool {
    matches!(
        a,
        Activation::None
            | Activation::Relu
            | Activation::LeakyRelu { .. }
            | Activation::Clip { .. }
    )
}

/// Descriptor pairs (x, y): same layout, NCHW against NHWC, padded rows, and one large
/// enough to be split among threads.
fn shapes() -> Vec<(TensorDesc, TensorDesc)> {
    let f = DataType::F32;
    let nchw = |d| TensorDesc::new(f, Layout::Nchw, d).unwrap();
    let nhwc = |d| TensorDesc::new(f, Layout::Nhwc, d).unwrap();
    let padded = TensorDesc::with_strides(f, [2, 3, 5, 7], [200, 60, 12, 1]).unwrap();
    vec![
        (nchw([2, 3, 5, 7]), nchw([2, 3, 5, 7])),
        (nhwc([2, 3, 5, 7]), nchw([2, 3, 5, 7])),
        (padded, nhwc([2, 3, 5, 7])),
        (nchw([1, 1, 1, 1]), nchw([1, 1, 1, 1])),
        (nchw([1, 64, 30, 31]), nchw([1, 64, 30, 31])),
        (nhwc([2, 24, 17, 19]), nhwc([2, 24, 17, 19])),
    ]
}

/// Values across the functions' interesting ranges, with the kinks hit exactly.
fn data(len: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    let special = [
        0.0, -0.0, 3.0, -3.0, 6.0, 2.25, -1.5, 30.0, -30.0, 1e-4, -1e-4,
    ];
    (0..len)
        .map(|i| {
            if i % 13 == 0 {
                special[(i / 13) % special.len()]
            } else {
                r.range(-8000, 8000) as f32 / 1000.0
            }
        })
        .collect()
}

/// Exact for the exact activations without blending. Otherwise within the function's bound,
/// 1e-6 · |f| + 1e-6 (`f` the unblended f64 result at the same input), which a blend
/// y = alpha · f + beta · prior scales by |alpha| and to which it adds its own roundings: two
/// f32 epsilons of its terms' magnitudes (where the terms cancel, the result is far smaller
/// than either).
#[allow(clippy::too_many_arguments)]
fn check(
    a: Activation,
    blend: Blend,
    got: &[f32],
    want: &[f64],
    f: &[f64],
    prior: &[f32],
    desc: &TensorDesc,
    what: &str,
) {
    for o in desc.offsets() {
        let (g, w) = (got[o] as f64, want[o]);
        if exact(a) && blend == Blend::default() {
            assert_eq!(g, w, "{what}: {} at {o}", a.name());
        } else {
            let (al, be) = (blend.alpha as f64, blend.beta as f64);
            let p = if be == 0.0 { 0.0 } else { prior[o] as f64 };
            let terms = (al * f[o]).abs() + (be * p).abs();
            let tol = al.abs() * (1e-6 * f[o].abs() + 1e-6) + 2.0 * f64::from(f32::EPSILON) * terms;
            assert!(
                (g - w).abs() <= tol,
                "{what}: {} at {o}: {g} against {w}",
                a.name()
            );
        }
    }
}

#[test]
fn forward_matches_the_reference_on_every_isa_and_thread_count() {
    let hs = handles();
    for (si, (xd, yd)) in shapes().into_iter().enumerate() {
        let x = data(xd.span(), si as u64);
        let prior = data(yd.span(), 100 + si as u64);
        for a in all_activations() {
            for blend in [
                Blend::default(),
                Blend::new(2.5, 0.5),
                Blend::new(-1.0, 1.0),
            ] {
                let want = reference::activation::forward(a, blend, &xd, &x, &yd, &prior).unwrap();
                let plain = Blend::default();
                let f = reference::activation::forward(a, plain, &xd, &x, &yd, &prior).unwrap();
                let mut first: Option<Vec<f32>> = None;
                for (name, h) in &hs {
                    let mut y = if blend.beta == 0.0 {
                        vec![f32::NAN; yd.span()]
                    } else {
                        prior.clone()
                    };
                    h.activation_forward(a, blend, &xd, &x, &yd, &mut y)
                        .unwrap();
                    let what = format!("{name} shape {si} {blend:?}");
                    check(a, blend, &y, &want, &f, &prior, &yd, &what);
                    let bits: Vec<f32> = yd.offsets().map(|o| y[o]).collect();
                    match &first {
                        None => first = Some(bits),
                        Some(f) => assert!(
                            f.iter().zip(&bits).all(|(p, q)| p.to_bits() == q.to_bits()),
                            "{what}: {} differs from the first handle's bits",
                            a.name()
                        ),
                    }
                    // In place: the same bits as out of place with y's layout.
                    if xd == yd {
                        let mut z = x.clone();
                        if blend.beta != 0.0 {
                            // In place, the prior output is x itself.
                            let w2 =
                                reference::activation::forward(a, blend, &xd, &x, &yd, &x).unwrap();
                            let f2 =
                                reference::activation::forward(a, plain, &xd, &x, &yd, &x).unwrap();
                            h.activation_forward_in_place(a, blend, &yd, &mut z)
                                .unwrap();
                            check(a, blend, &z, &w2, &f2, &x, &yd, &format!("{what} in place"));
                        } else {
                            h.activation_forward_in_place(a, blend, &yd, &mut z)
                                .unwrap();
                            assert!(
                                yd.offsets().all(|o| z[o].to_bits() == y[o].to_bits()),
                                "{what}: {} in place",
                                a.name()
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn backward_matches_the_reference_on_every_isa_and_thread_count() {
    let hs = handles();
    for (si, (xd, yd)) in shapes().into_iter().enumerate() {
        let x = data(xd.span(), si as u64);
        let dy = data(yd.span(), 200 + si as u64);
        let prior = data(xd.span(), 300 + si as u64);
        for a in all_activations() {
            for blend in [Blend::default(), Blend::new(0.5, 2.0)] {
                // dx laid out like x; dy like y.
                let want =
                    reference::activation::backward(a, blend, &xd, &x, &yd, &dy, &xd, &prior)
                        .unwrap();
                let plain = Blend::default();
                let f = reference::activation::backward(a, plain, &xd, &x, &yd, &dy, &xd, &prior)
                    .unwrap();
                for (name, h) in &hs {
                    let mut dx = if blend.beta == 0.0 {
                        vec![f32::NAN; xd.span()]
                    } else {
                        prior.clone()
                    };
                    h.activation_backward(a, blend, &xd, &x, &yd, &dy, &xd, &mut dx)
                        .unwrap();
                    let what = format!("{name} shape {si} {blend:?} backward");
                    check(a, blend, &dx, &want, &f, &prior, &xd, &what);
                    if xd == yd && blend.beta == 0.0 {
                        let mut g = dy.clone();
                        h.activation_backward_in_place(a, blend, &xd, &x, &yd, &mut g)
                            .unwrap();
                        assert!(
                            xd.offsets().all(|o| g[o].to_bits() == dx[o].to_bits()),
                            "{what}: {} in place",
                            a.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn derivatives_agree_with_finite_differences() {
    for a in all_activations() {
        for i in -400..=400 {
            let v = i as f64 / 50.0 + 0.0071; // off the kinks
            let h = 1e-6;
            let fd = (a.apply_f64(v + h) - a.apply_f64(v - h)) / (2.0 * h);
            let d = a.derivative_f64(v);
            assert!(
                (fd - d).abs() < 1e-6,
                "{} at {v}: {d} against {fd}",
                a.name()
            );
            let d32 = a.derivative(v as f32) as f64;
            assert!(
                (d32 - d).abs() <= 1e-6 * d.abs() + 1e-6,
                "{} f32 at {v}",
                a.name()
            );
        }
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let h = Handle::with_threads(1).unwrap();
    let d = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 3, 4]).unwrap();
    let other = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 4, 3]).unwrap();
    let x = vec![0.0f32; 24];
    let mut y = vec![0.0f32; 24];
    let field = |e: Error| match e {
        Error::BadParam { field, .. } | Error::BufferTooSmall { field, .. } => field,
        Error::Unsupported { what } => what,
        e => panic!("unexpected {e}"),
    };
    let relu = Activation::Relu;
    let b = Blend::default();
    let e = h
        .activation_forward(relu, b, &d, &x, &other, &mut y)
        .unwrap_err();
    assert_eq!(field(e), "y");
    let e = h
        .activation_forward(relu, b, &d, &x[..23], &d, &mut y)
        .unwrap_err();
    assert_eq!(field(e), "x");
    let e = h
        .activation_forward(relu, b, &d, &x, &d, &mut y[..5])
        .unwrap_err();
    assert_eq!(field(e), "y");
    let e = h
        .activation_forward(relu, Blend::new(f32::NAN, 0.0), &d, &x, &d, &mut y)
        .unwrap_err();
    assert_eq!(field(e), "alpha");
    let e = h
        .activation_forward(relu, Blend::new(1.0, f32::INFINITY), &d, &x, &d, &mut y)
        .unwrap_err();
    assert_eq!(field(e), "beta");
    let bad_clip = Activation::Clip { lo: 2.0, hi: 1.0 };
    let e = h
        .activation_forward(bad_clip, b, &d, &x, &d, &mut y)
        .unwrap_err();
    assert_eq!(field(e), "act");
    let bf = d.with_dtype(DataType::Bf16);
    let e = h
        .activation_forward(relu, b, &bf, &x, &d, &mut y)
        .unwrap_err();
    assert!(field(e).contains("bf16"));
    let e = h
        .activation_backward(relu, b, &d, &x, &other, &x, &d, &mut y)
        .unwrap_err();
    assert_eq!(field(e), "dy");
    let e = h
        .activation_backward_in_place(relu, b, &d, &x, &other, &mut y)
        .unwrap_err();
    assert_eq!(field(e), "grad");
    for name in ["elu:x", "elu:inf", "gelu_sigmoid"] {
        assert!(Activation::parse(name).is_err(), "{name}");
    }
    assert_eq!(Activation::parse("logistic").unwrap(), Activation::Sigmoid);
    assert_eq!(Activation::parse("gelu_erf").unwrap(), Activation::Gelu);
    assert_eq!(
        Activation::parse("elu:0.5").unwrap(),
        Activation::Elu { alpha: 0.5 }
    );
}

/// Outputs of at least 8 MiB with beta 0 are computed in cached blocks and written out with
/// non-temporal stores where AVX-512 runs (relu's backward, `op_tensor`): relu (exact) and
/// GELU (within its bound) forward and backward, and `op_tensor`'s add (the exact sum
/// rounded once), on every instruction set and thread count,
/// with the output starting off a cache line and a length that is no multiple of the block,
/// against the reference.
#[test]
fn large_outputs_stream_out_the_same_values() {
    use autodnn::layers::tensor_ops::{OpTensorDesc, OpTensorOp};
    let d = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 3, 1031, 701]).unwrap();
    let n = d.span();
    assert!(n * 4 >= 8 << 20);
    let x = data(n, 7);
    let dy = data(n, 8);
    let none = vec![0.0f32; n];
    let relu_gelu = [Activation::Relu, Activation::parse("gelu_erf").unwrap()];
    let add = OpTensorDesc::new(OpTensorOp::Add, 1.0, 1.0, 0.0).unwrap();
    let want_add = reference::tensor_ops::op_tensor(&add, &d, &x, &d, &dy, &d, &none).unwrap();
    let plain = Blend::default();
    let fwd: Vec<_> = relu_gelu
        .iter()
        .map(|&a| reference::activation::forward(a, plain, &d, &x, &d, &none).unwrap())
        .collect();
    let bwd: Vec<_> = relu_gelu
        .iter()
        .map(|&a| reference::activation::backward(a, plain, &d, &x, &d, &dy, &d, &none).unwrap())
        .collect();
    for (name, h) in handles() {
        // One element in: the output starts 4 bytes past the allocation's alignment.
        let mut buf = vec![f32::NAN; n + 1];
        for (i, &a) in relu_gelu.iter().enumerate() {
            h.activation_forward(a, plain, &d, &x, &d, &mut buf[1..])
                .unwrap();
            check(
                a,
                plain,
                &buf[1..],
                &fwd[i],
                &fwd[i],
                &none,
                &d,
                &format!("{name} fwd"),
            );
            buf.fill(f32::NAN);
            h.activation_backward(a, plain, &d, &x, &d, &dy, &d, &mut buf[1..])
                .unwrap();
            check(
                a,
                plain,
                &buf[1..],
                &bwd[i],
                &bwd[i],
                &none,
                &d,
                &format!("{name} bwd"),
            );
            buf.fill(f32::NAN);
        }
        h.op_tensor(&add, &d, &x, &d, &dy, &d, &mut buf[1..])
            .unwrap();
        for (o, (&g, &w)) in buf[1..].iter().zip(&want_add).enumerate() {
            // One rounding of the exact sum.
            assert_eq!(g, w as f32, "{name} add at {o}");
        }
    }
}
