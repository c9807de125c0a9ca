//! Tensor operations (add, op-tensor, scale, set, reduce) against the f64 reference: random
//! shapes with the broadcasting patterns (1×C×1×1, N×1×H×W, 1×1×1×1, full, any mix), every
//! reduction over every subset of dimensions, NCHW, NHWC, padded and permuted strides,
//! alpha/beta with the prior read or (beta = 0, NaN there) ignored, every ISA, 1 and 2
//! threads with identical bits; exact on integer data, bounded on real data; bad input.

mod common;

use autodnn::layers::tensor_ops::{OpTensorDesc, OpTensorOp, ReduceOp};
use autodnn::layers::Blend;
use autodnn::{reference, DataType, Error, Handle, Layout, TensorDesc};
use common::{handles, int_data, permuted, real_data, Rng};

/// NCHW, NHWC, either padded, or a permuted view, at random.
fn random_desc(rng: &mut Rng, dims: [usize; 4]) -> TensorDesc {
    match rng.range(0, 5) {
        0 => TensorDesc::new(DataType::F32, Layout::Nchw, dims).unwrap(),
        1 => TensorDesc::new(DataType::F32, Layout::Nhwc, dims).unwrap(),
        2 => permuted(dims, [0, 1, 2, 3], rng.range(1, 3) as usize),
        3 => permuted(dims, [0, 2, 3, 1], rng.range(1, 3) as usize),
        4 => permuted(dims, [1, 2, 3, 0], 0),
        _ => permuted(dims, [2, 3, 0, 1], 1),
    }
}

fn random_dims(rng: &mut Rng) -> [usize; 4] {
    [
        rng.range(1, 3) as usize,
        rng.range(1, 24) as usize,
        rng.range(1, 9) as usize,
        rng.range(1, 21) as usize,
    ]
}

/// dims with the dimensions of `mask` (bit d: dimension d) set to 1.
fn squeezed(dims: [usize; 4], mask: u32) -> [usize; 4] {
    std::array::from_fn(|d| if mask >> d & 1 == 1 { 1 } else { dims[d] })
}

/// The broadcast patterns: 1×C×1×1 (bias), N×1×H×W, 1×1×1×1, full, or any mix.
fn broadcast_mask(rng: &mut Rng) -> u32 {
    match rng.range(0, 4) {
        0 => 0b1101,
        1 => 0b0010,
        2 => 0b1111,
        3 => 0,
        _ => rng.range(0, 15) as u32,
    }
}

const BLENDS: [(f32, f32); 5] = [(1.0, 0.0), (2.5, 0.0), (1.0, 1.0), (-0.5, 2.5), (0.0, 1.5)];

/// The prior output: NaN when beta = 0 (it must not be read), else integer data.
fn prior(len: usize, beta: f32, seed: u64) -> Vec<f32> {
    if beta == 0.0 {
        vec![f32::NAN; len]
    } else {
        int_data(len, seed)
    }
}

/// Runs `f` on every handle from `prior`; checks every element of `c` equals the reference
/// (rounded to f32; both NaN passes) and all handles give the same bits.
fn check_exact(
    hs: &[(String, Handle)],
    c: &TensorDesc,
    prior: &[f32],
    want: &[f64],
    what: &str,
    f: impl Fn(&Handle, &mut [f32]),
) {
    let mut bits: Option<Vec<u32>> = None;
    for (name, h) in hs {
        let mut y = prior.to_vec();
        f(h, &mut y);
        for o in c.offsets() {
            let w = want[o] as f32;
            assert!(
                y[o] == w || (y[o].is_nan() && w.is_nan()),
                "{what} {name}: c[{o}] = {} want {}",
                y[o],
                want[o]
            );
        }
        let b: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
        match &bits {
            None => bits = Some(b),
            Some(f) => assert!(f == &b, "{what} {name}: bits differ between handles"),
        }
    }
}

#[test]
fn add_tensor_broadcasts_exactly() {
    let hs = handles();
    let mut rng = Rng(11);
    for case in 0..60 {
        let dims = random_dims(&mut rng);
        let cd = random_desc(&mut rng, dims);
        let mask = broadcast_mask(&mut rng);
        let ad = random_desc(&mut rng, squeezed(dims, mask));
        let (alpha, beta) = rng.pick(&BLENDS);
        let blend = Blend::new(alpha, beta);
        let a = int_data(ad.span(), case);
        let p = prior(cd.span(), beta, case + 100);
        let want = reference::tensor_ops::add_tensor(blend, &ad, &a, &cd, &p).unwrap();
        let what = format!("add {:?} into {:?} {blend:?}", ad.dims(), cd.dims());
        check_exact(&hs, &cd, &p, &want, &what, |h, y| {
            h.add_tensor(blend, &ad, &a, &cd, y).unwrap()
        });
    }
}

#[test]
fn bias_add_on_resnet_shapes() {
    let hs = handles();
    for (dims, layout) in [
        ([2, 64, 56, 56], Layout::Nchw),
        ([2, 64, 56, 56], Layout::Nhwc),
        ([1, 2048, 7, 7], Layout::Nhwc),
    ] {
        let cd = TensorDesc::new(DataType::F32, layout, dims).unwrap();
        let bd = TensorDesc::new(DataType::F32, Layout::Nchw, [1, dims[1], 1, 1]).unwrap();
        let bias = int_data(dims[1], 5);
        let p = int_data(cd.span(), 6);
        let blend = Blend::new(1.0, 1.0);
        let want = reference::tensor_ops::add_tensor(blend, &bd, &bias, &cd, &p).unwrap();
        check_exact(
            &hs,
            &cd,
            &p,
            &want,
            &format!("bias {dims:?} {layout:?}"),
            |h, y| h.add_tensor(blend, &bd, &bias, &cd, y).unwrap(),
        );
    }
}

#[test]
fn op_tensor_every_op_exactly() {
    let hs = handles();
    let mut rng = Rng(12);
    for case in 0..72 {
        let op = OpTensorOp::ALL[case as usize % 6];
        let dims = random_dims(&mut rng);
        let cd = random_desc(&mut rng, dims);
        let ad = random_desc(&mut rng, dims);
        let mask = broadcast_mask(&mut rng);
        let bd = random_desc(&mut rng, squeezed(dims, mask));
        let a1 = rng.pick(&[1.0f32, 2.0, -1.5, 0.5]);
        let a2 = rng.pick(&[1.0f32, -2.0, 0.25]);
        let mut beta = rng.pick(&[0.0f32, 0.0, 1.0, -0.5]);
        let mut a = int_data(ad.span(), case);
        let b = int_data(bd.span(), case + 1);
        if op == OpTensorOp::Sqrt {
            // Squares (sqrt exact) of either sign of alpha1·a ≥ 0; beta 0 keeps it exact.
            a.iter_mut().for_each(|v| *v = *v * *v);
            beta = 0.0;
        }
        let a1 = if op == OpTensorOp::Sqrt {
            a1.abs().max(1.0)
        } else {
            a1
        };
        let a1 = if op == OpTensorOp::Sqrt && a1 == 2.0 {
            4.0
        } else {
            a1
        };
        let desc = OpTensorDesc::new(op, a1, a2, beta).unwrap();
        let p = prior(cd.span(), beta, case + 2);
        let want = reference::tensor_ops::op_tensor(&desc, &ad, &a, &bd, &b, &cd, &p).unwrap();
        let what = format!("{op:?} {a1} {a2} {beta} {:?} {:?}", cd.dims(), bd.dims());
        check_exact(&hs, &cd, &p, &want, &what, |h, y| {
            h.op_tensor(&desc, &ad, &a, &bd, &b, &cd, y).unwrap()
        });
    }
}

#[test]
fn op_tensor_real_data_sqrt_and_blend_within_bound() {
    // sqrt(alpha1·a) + beta·c: three f32 roundings against one; bound 2⁻²² relative to
    // |sqrt| + |beta·c|.
    let h = Handle::with_threads(2).unwrap();
    let dims = [2, 13, 5, 17];
    let cd = TensorDesc::new(DataType::F32, Layout::Nhwc, dims).unwrap();
    let ad = TensorDesc::new(DataType::F32, Layout::Nchw, dims).unwrap();
    let a: Vec<f32> = real_data(ad.span(), 8, 999)
        .iter()
        .map(|v| v.abs())
        .collect();
    let p = real_data(cd.span(), 9, 999);
    for op in [OpTensorOp::Sqrt, OpTensorOp::Add, OpTensorOp::Mul] {
        let desc = OpTensorDesc::new(op, 0.7, 1.3, -0.9).unwrap();
        let want = reference::tensor_ops::op_tensor(&desc, &ad, &a, &cd, &p, &cd, &p).unwrap();
        let mut y = p.clone();
        h.op_tensor(&desc, &ad, &a, &cd, &p, &cd, &mut y).unwrap();
        for o in cd.offsets() {
            let scale = 2.0 + 0.9 * p[o].abs() as f64;
            assert!(
                (y[o] as f64 - want[o]).abs() <= 2.4e-7 * scale,
                "{op:?} at {o}"
            );
        }
    }
}

#[test]
fn scale_and_set_touch_the_tensor_only() {
    let hs = handles();
    let mut rng = Rng(13);
    for case in 0..20 {
        let dims = random_dims(&mut rng);
        let d = random_desc(&mut rng, dims);
        let p = int_data(d.span(), case);
        let want = reference::tensor_ops::scale_tensor(&d, &p, -2.5).unwrap();
        for (name, h) in &hs {
            let mut y = p.clone();
            h.scale_tensor(&d, &mut y, -2.5).unwrap();
            let mut z = p.clone();
            h.set_tensor(&d, &mut z, 7.0).unwrap();
            let mut inside = vec![false; d.span()];
            for o in d.offsets() {
                assert_eq!(y[o], want[o] as f32, "scale {name} {dims:?}");
                assert_eq!(z[o], 7.0, "set {name} {dims:?}");
                inside[o] = true;
            }
            for o in (0..d.span()).filter(|&o| !inside[o]) {
                assert_eq!((y[o], z[o]), (p[o], p[o]), "{name}: gap {o} written");
            }
        }
    }
}

/// Data for `op` on which the f64 result is exact: integers in [-4, 4], or for mul ±1, ±2,
/// ±0.5 (products are powers of two).
fn exact_data(op: ReduceOp, len: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    if op == ReduceOp::Mul {
        (0..len)
            .map(|_| r.pick(&[1.0, -1.0, 2.0, -2.0, 0.5, -0.5]))
            .collect()
    } else {
        int_data(len, seed)
    }
}

#[test]
fn reductions_over_every_subset_exactly() {
    let hs = handles();
    let mut rng = Rng(14);
    for case in 0..96u64 {
        let op = ReduceOp::ALL[case as usize % 8];
        let dims = random_dims(&mut rng);
        let ad = random_desc(&mut rng, dims);
        let mask = (case / 8 % 16) as u32;
        let cd = random_desc(&mut rng, squeezed(dims, mask));
        let (alpha, beta) = rng.pick(&BLENDS);
        let blend = Blend::new(alpha, beta);
        let a = exact_data(op, ad.span(), case);
        let p = prior(cd.span(), beta, case + 7);
        let want = reference::tensor_ops::reduce_tensor(op, blend, &ad, &a, &cd, &p).unwrap();
        let what = format!("{op:?} {dims:?} -> {:?} {blend:?}", cd.dims());
        check_exact(&hs, &cd, &p, &want, &what, |h, y| {
            h.reduce_tensor(op, blend, &ad, &a, &cd, y).unwrap()
        });
    }
}

#[test]
fn side_by_side_and_chunked_reductions() {
    // NHWC reduced over N, H, W (channels side by side); one output over 90 000 elements
    // (two chunks, two passes); two outputs over 70 000 each; channels of NCHW over H·W.
    let hs = handles();
    let cases: [([usize; 4], Layout, u32); 4] = [
        ([2, 40, 9, 11], Layout::Nhwc, 0b1101),
        ([1, 1, 300, 300], Layout::Nchw, 0b1111),
        ([2, 1, 280, 250], Layout::Nhwc, 0b1100),
        ([1, 64, 56, 56], Layout::Nchw, 0b1100),
    ];
    for (k, (dims, layout, mask)) in cases.into_iter().enumerate() {
        for op in [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::Amax,
            ReduceOp::Norm2,
        ] {
            let ad = TensorDesc::new(DataType::F32, layout, dims).unwrap();
            let cd = TensorDesc::new(DataType::F32, layout, squeezed(dims, mask)).unwrap();
            let a = exact_data(op, ad.span(), k as u64);
            let blend = Blend::new(1.5, 0.0);
            let p = prior(cd.span(), 0.0, 1);
            let want = reference::tensor_ops::reduce_tensor(op, blend, &ad, &a, &cd, &p).unwrap();
            let what = format!("{op:?} {dims:?} {layout:?} mask {mask:b}");
            check_exact(&hs, &cd, &p, &want, &what, |h, y| {
                h.reduce_tensor(op, blend, &ad, &a, &cd, y).unwrap()
            });
        }
    }
}

#[test]
fn real_data_reductions_are_bounded_and_thread_independent() {
    // Sums: one f32 rounding of the f64 result plus the f64 accumulation's error,
    // |y − ref| ≤ 2⁻²⁴·|ref| + M·2⁻⁵³·Σ|a| (Σ|a|/M for the mean, its square root's share for
    // norm2); max, min, amax exact.
    let hs = handles();
    let cases: [([usize; 4], Layout, u32); 3] = [
        ([1, 1, 300, 300], Layout::Nchw, 0b1111),
        ([2, 24, 31, 17], Layout::Nhwc, 0b1101),
        ([3, 17, 20, 21], Layout::Nchw, 0b1100),
    ];
    for (dims, layout, mask) in cases {
        let ad = TensorDesc::new(DataType::F32, layout, dims).unwrap();
        let cd = TensorDesc::new(DataType::F32, layout, squeezed(dims, mask)).unwrap();
        let a = real_data(ad.span(), 21, 1 << 20);
        let m: usize = (0..4)
            .filter(|d| mask >> d & 1 == 1)
            .map(|d| dims[d])
            .product();
        let abs_sum: f64 = a.iter().map(|v| v.abs() as f64).sum();
        for op in ReduceOp::ALL.into_iter().filter(|&o| o != ReduceOp::Mul) {
            let blend = Blend::default();
            let p = prior(cd.span(), 0.0, 1);
            let want = reference::tensor_ops::reduce_tensor(op, blend, &ad, &a, &cd, &p).unwrap();
            let mut bits: Option<Vec<u32>> = None;
            for (name, h) in &hs {
                let mut y = p.clone();
                h.reduce_tensor(op, blend, &ad, &a, &cd, &mut y).unwrap();
                for o in cd.offsets() {
                    let acc = match op {
                        ReduceOp::Max | ReduceOp::Min | ReduceOp::Amax => 0.0,
                        ReduceOp::Mean => m as f64 * 1.2e-16 * abs_sum / m as f64,
                        ReduceOp::Norm2 => (m as f64 * 1.2e-16 * abs_sum).sqrt(),
                        _ => m as f64 * 1.2e-16 * abs_sum,
                    };
                    let bound = 6e-8 * want[o].abs() + acc;
                    let err = (y[o] as f64 - want[o]).abs();
                    assert!(err <= bound, "{op:?} {dims:?} {name}: {err} > {bound}");
                }
                let b: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
                match &bits {
                    None => bits = Some(b),
                    Some(f) => assert!(f == &b, "{op:?} {dims:?} {name}: bits differ"),
                }
            }
        }
    }
}

#[test]
fn parsers() {
    for op in OpTensorOp::ALL {
        assert_eq!(OpTensorOp::parse(op.name()).unwrap(), op);
    }
    for op in ReduceOp::ALL {
        assert_eq!(ReduceOp::parse(op.name()).unwrap(), op);
        assert_eq!(
            ReduceOp::parse(&format!("reduction_{}", op.name())).unwrap(),
            op
        );
    }
    assert_eq!(ReduceOp::parse("avg").unwrap(), ReduceOp::Mean);
    assert_eq!(ReduceOp::parse("PROD").unwrap(), ReduceOp::Mul);
    assert!(matches!(ReduceOp::parse("norm3"), Err(Error::Parse { .. })));
    assert!(matches!(OpTensorOp::parse(""), Err(Error::Parse { .. })));
}

fn field_of(e: &Error) -> String {
    match e {
        Error::BadParam { field, .. } | Error::BufferTooSmall { field, .. } => field.clone(),
        Error::Unsupported { .. } => "unsupported".into(),
        other => format!("{other:?}"),
    }
}

#[test]
fn bad_input_gives_typed_errors() {
    let h = Handle::with_threads(1).unwrap();
    let f = |d| TensorDesc::new(DataType::F32, Layout::Nchw, d).unwrap();
    let (c4, a3) = (f([2, 3, 4, 5]), f([1, 3, 2, 1]));
    let mut c = vec![0.0; 120];
    let x = vec![1.0; 120];
    let bl = Blend::default();
    // add_tensor: A not broadcastable, short buffers, bf16, non-finite alpha.
    let e = h.add_tensor(bl, &a3, &x, &c4, &mut c).unwrap_err();
    assert_eq!(field_of(&e), "a", "{e}");
    let e = h.add_tensor(bl, &c4, &x[..119], &c4, &mut c).unwrap_err();
    assert_eq!(field_of(&e), "a", "{e}");
    let e = h.add_tensor(bl, &c4, &x, &c4, &mut c[..5]).unwrap_err();
    assert_eq!(field_of(&e), "c", "{e}");
    let e = h
        .add_tensor(bl, &c4.with_dtype(DataType::F16), &x, &c4, &mut c)
        .unwrap_err();
    assert_eq!(field_of(&e), "unsupported", "{e}");
    let e = h
        .add_tensor(Blend::new(f32::NAN, 0.0), &c4, &x, &c4, &mut c)
        .unwrap_err();
    assert_eq!(field_of(&e), "alpha", "{e}");
    // op_tensor: A of other dimensions, B not broadcastable, short B, non-finite scales.
    let d = OpTensorDesc::new(OpTensorOp::Add, 1.0, 1.0, 0.0).unwrap();
    let e = h.op_tensor(&d, &a3, &x, &c4, &x, &c4, &mut c).unwrap_err();
    assert_eq!(field_of(&e), "a", "{e}");
    let e = h.op_tensor(&d, &c4, &x, &a3, &x, &c4, &mut c).unwrap_err();
    assert_eq!(field_of(&e), "b", "{e}");
    let e = h
        .op_tensor(&d, &c4, &x, &c4, &x[..3], &c4, &mut c)
        .unwrap_err();
    assert_eq!(field_of(&e), "b", "{e}");
    let e = OpTensorDesc::new(OpTensorOp::Mul, f32::INFINITY, 1.0, 0.0).unwrap_err();
    assert_eq!(field_of(&e), "op_tensor.alpha1", "{e}");
    let e = OpTensorDesc::new(OpTensorOp::Mul, 1.0, 1.0, f32::NAN).unwrap_err();
    assert_eq!(field_of(&e), "op_tensor.beta", "{e}");
    // A unary op neither checks nor reads B.
    let s = OpTensorDesc::new(OpTensorOp::Not, 1.0, 1.0, 0.0).unwrap();
    h.op_tensor(&s, &c4, &x, &a3, &[], &c4, &mut c).unwrap();
    assert!(c.iter().all(|&v| v == 0.0));
    // reduce: C neither 1 nor A's, short buffers, bf16.
    let e = h
        .reduce_tensor(ReduceOp::Sum, bl, &c4, &x, &a3, &mut c)
        .unwrap_err();
    assert_eq!(field_of(&e), "c", "{e}");
    let c1 = f([1, 3, 1, 1]);
    let e = h
        .reduce_tensor(ReduceOp::Sum, bl, &c4, &x[..100], &c1, &mut c)
        .unwrap_err();
    assert_eq!(field_of(&e), "a", "{e}");
    let e = h
        .reduce_tensor(ReduceOp::Sum, bl, &c4, &x, &c1, &mut c[..2])
        .unwrap_err();
    assert_eq!(field_of(&e), "c", "{e}");
    let e = h
        .reduce_tensor(
            ReduceOp::Sum,
            bl,
            &c4,
            &x,
            &c1.with_dtype(DataType::Bf16),
            &mut c,
        )
        .unwrap_err();
    assert_eq!(field_of(&e), "unsupported", "{e}");
    // scale and set.
    let e = h.scale_tensor(&c4, &mut c, f32::NAN).unwrap_err();
    assert_eq!(field_of(&e), "alpha", "{e}");
    let e = h.set_tensor(&c4, &mut c[..119], 1.0).unwrap_err();
    assert_eq!(field_of(&e), "y", "{e}");
    // The reductions' references refuse the same C.
    let e = reference::tensor_ops::reduce_tensor(ReduceOp::Max, bl, &c4, &x, &a3, &c).unwrap_err();
    assert_eq!(field_of(&e), "c", "{e}");
}
