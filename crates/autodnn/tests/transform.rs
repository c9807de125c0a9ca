//! The layout transform (cudnnTransformTensor) against the f64 reference: every pair of
//! layouts (NCHW, NHWC, padded, permuted views), odd and real (ResNet-50) shapes, exact
//! copies bit for bit (−0 and NaN payloads included, the buffer's gaps untouched), blending
//! on integer data exact, every ISA, 1 and 2 threads with identical bits; bad input; the
//! copy-bandwidth probe.

mod common;

use autodnn::layers::Blend;
use autodnn::{reference, DataType, Error, Handle, Layout, TensorDesc};
use common::{handles, int_data, permuted, real_data, Rng};

/// The layouts every pair is taken from: packed NCHW and NHWC, both padded, CHWN-like and
/// a padded HWNC-like view.
fn layouts(dims: [usize; 4]) -> Vec<(&'static str, TensorDesc)> {
    vec![
        (
            "nchw",
            TensorDesc::new(DataType::F32, Layout::Nchw, dims).unwrap(),
        ),
        (
            "nhwc",
            TensorDesc::new(DataType::F32, Layout::Nhwc, dims).unwrap(),
        ),
        ("nchw+pad", permuted(dims, [0, 1, 2, 3], 3)),
        ("nhwc+pad", permuted(dims, [0, 2, 3, 1], 1)),
        ("chwn", permuted(dims, [1, 2, 3, 0], 0)),
        ("hwnc+pad", permuted(dims, [2, 3, 0, 1], 2)),
    ]
}

const SENTINEL: f32 = -12345.5;

/// x with a −0, a quiet NaN with a payload and infinities among real values.
fn special_data(len: usize, seed: u64) -> Vec<f32> {
    let mut x = real_data(len, seed, 64);
    let specials = [
        -0.0,
        f32::from_bits(0x7fc0_1234),
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    for (k, s) in specials.into_iter().enumerate() {
        if let Some(v) = x.get_mut(k * 7 % len.max(1)) {
            *v = s;
        }
    }
    x
}

/// Copies x (`xd`) into y (`yd`) on every handle: each y element is x's bit for bit, the gaps
/// keep the sentinel, every handle gives the same bits.
fn check_copy(
    dims: [usize; 4],
    xd: &TensorDesc,
    yd: &TensorDesc,
    hs: &[(String, Handle)],
    what: &str,
) {
    let x = special_data(xd.span(), dims.iter().sum::<usize>() as u64);
    let mut first: Option<Vec<f32>> = None;
    for (name, h) in hs {
        let mut y = vec![SENTINEL; yd.span()];
        h.transform_tensor(Blend::default(), xd, &x, yd, &mut y)
            .unwrap();
        let mut inside = vec![false; yd.span()];
        for (ox, oy) in xd.offsets().zip(yd.offsets()) {
            assert_eq!(y[oy].to_bits(), x[ox].to_bits(), "{what} {name}: at {oy}");
            inside[oy] = true;
        }
        for (o, &v) in y.iter().enumerate() {
            if !inside[o] {
                assert_eq!(v, SENTINEL, "{what} {name}: gap {o} written");
            }
        }
        match &first {
            None => first = Some(y),
            Some(f) => assert!(
                f.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{what} {name}: bits differ between handles"
            ),
        }
    }
}

#[test]
fn every_pair_of_layouts_copies_exactly() {
    let hs = handles();
    for dims in [
        [1, 3, 7, 5],
        [2, 17, 9, 33],
        [1, 1, 1, 1],
        [3, 1, 1, 40],
        [2, 33, 1, 1],
    ] {
        for (xn, xd) in layouts(dims) {
            for (yn, yd) in layouts(dims) {
                check_copy(dims, &xd, &yd, &hs, &format!("{dims:?} {xn} -> {yn}"));
            }
        }
    }
}

#[test]
fn resnet50_shapes_copy_exactly() {
    let hs = handles();
    for dims in [[1, 64, 56, 56], [1, 2048, 7, 7], [2, 256, 14, 14]] {
        let l = layouts(dims);
        // NCHW <-> NHWC both ways, and each to and from a padded layout.
        for (a, b) in [(0, 1), (1, 0), (0, 3), (3, 1), (2, 1), (1, 5), (4, 0)] {
            let what = format!("{dims:?} {} -> {}", l[a].0, l[b].0);
            check_copy(dims, &l[a].1, &l[b].1, &hs, &what);
        }
    }
}

#[test]
fn random_shapes_and_blends_match_the_reference() {
    let hs = handles();
    let mut rng = Rng(7);
    for case in 0..40 {
        let dims = [
            rng.range(1, 3) as usize,
            rng.range(1, 40) as usize,
            rng.range(1, 12) as usize,
            rng.range(1, 40) as usize,
        ];
        let l = layouts(dims);
        let (xn, xd) = l[rng.range(0, 5) as usize];
        let (yn, yd) = l[rng.range(0, 5) as usize];
        let (alpha, beta) =
            rng.pick(&[(1.0, 0.0), (2.5, 0.0), (1.0, 1.0), (-0.5, 2.5), (0.0, 1.5)]);
        let blend = Blend::new(alpha, beta);
        let x = int_data(xd.span(), case);
        let prior: Vec<f32> = if beta == 0.0 {
            vec![f32::NAN; yd.span()]
        } else {
            int_data(yd.span(), case + 1000)
        };
        let want = reference::transform::forward(blend, &xd, &x, &yd, &prior).unwrap();
        let mut bits: Option<Vec<u32>> = None;
        for (name, h) in &hs {
            let mut y = prior.clone();
            h.transform_tensor(blend, &xd, &x, &yd, &mut y).unwrap();
            for o in yd.offsets() {
                assert!(
                    y[o] == want[o] as f32,
                    "{dims:?} {xn}->{yn} {blend:?} {name}: y[{o}] = {} want {}",
                    y[o],
                    want[o]
                );
            }
            let b: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
            match &bits {
                None => bits = Some(b),
                Some(f) => assert!(f == &b, "{dims:?} {name}: bits differ"),
            }
        }
    }
}

#[test]
fn large_transposes_stream_exactly() {
    // Outputs past 8 MiB are written with non-temporal stores, whole lines only, with the
    // blocks started on lines: both directions, channels that keep every row's offset in a
    // line (48) and channels that do not (40), y starting at two offsets in its buffer, a
    // copy and a scaling blend (which streams too), the buffer's edges untouched.
    let hs = handles();
    for c in [48usize, 40] {
        let dims = [2, c, 160, 181];
        let nchw = TensorDesc::new(DataType::F32, Layout::Nchw, dims).unwrap();
        let nhwc = TensorDesc::new(DataType::F32, Layout::Nhwc, dims).unwrap();
        assert!(nchw.span() * 4 >= 8 << 20);
        for (xd, yd, what) in [(&nchw, &nhwc, "nchw->nhwc"), (&nhwc, &nchw, "nhwc->nchw")] {
            let x = int_data(xd.span(), c as u64);
            for (alpha, start) in [(1.0f32, 0usize), (2.0, 3)] {
                let blend = Blend::new(alpha, 0.0);
                let mut bits: Option<Vec<u32>> = None;
                for (name, h) in &hs {
                    let mut buf = vec![SENTINEL; yd.span() + 8];
                    let y = &mut buf[start..start + yd.span()];
                    h.transform_tensor(blend, xd, &x, yd, y).unwrap();
                    for (ox, oy) in xd.offsets().zip(yd.offsets()) {
                        assert!(
                            y[oy] == alpha * x[ox],
                            "{what} c {c} {name} alpha {alpha}: y[{oy}] = {} want {}",
                            y[oy],
                            alpha * x[ox]
                        );
                    }
                    let outside = buf[..start].iter().chain(&buf[start + yd.span()..]);
                    assert!(outside.into_iter().all(|&v| v == SENTINEL), "{what} {name}");
                    let b: Vec<u32> = buf.iter().map(|v| v.to_bits()).collect();
                    match &bits {
                        None => bits = Some(b),
                        Some(f) => assert!(f == &b, "{what} c {c} {name}: bits differ"),
                    }
                }
            }
        }
    }
}

#[test]
fn real_data_blends_within_one_rounding() {
    // alpha·x + beta·y in f32 (two products, one sum) against the f64 value: 2⁻²³ relative to
    // |alpha·x| + |beta·y|.
    let h = Handle::with_threads(2).unwrap();
    let dims = [2, 19, 6, 21];
    let l = layouts(dims);
    for (xn, xd) in &l {
        for (yn, yd) in &l {
            let x = real_data(xd.span(), 3, 1000);
            let prior = real_data(yd.span(), 4, 1000);
            let blend = Blend::new(0.3, -1.7);
            let want = reference::transform::forward(blend, xd, &x, yd, &prior).unwrap();
            let mut y = prior.clone();
            h.transform_tensor(blend, xd, &x, yd, &mut y).unwrap();
            for (ox, oy) in xd.offsets().zip(yd.offsets()) {
                let scale = (0.3 * x[ox].abs() + 1.7 * prior[oy].abs()) as f64;
                let err = (y[oy] as f64 - want[oy]).abs();
                assert!(err <= scale * 2.4e-7, "{xn}->{yn}: {err} > bound at {oy}");
            }
        }
    }
}

#[test]
fn bad_input_gives_typed_errors() {
    let h = Handle::with_threads(1).unwrap();
    let a = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 3, 4]).unwrap();
    let b = TensorDesc::new(DataType::F32, Layout::Nhwc, [1, 2, 3, 5]).unwrap();
    let x = vec![0.0; 24];
    let mut y = vec![0.0; 30];
    let e = h
        .transform_tensor(Blend::default(), &a, &x, &b, &mut y)
        .unwrap_err();
    assert!(
        matches!(&e, Error::BadParam { field, .. } if field == "y"),
        "{e}"
    );
    let e = h
        .transform_tensor(Blend::default(), &a, &x[..23], &a, &mut y)
        .unwrap_err();
    assert!(
        matches!(&e, Error::BufferTooSmall { field, needed: 24, got: 23 } if field == "x"),
        "{e}"
    );
    let e = h
        .transform_tensor(Blend::default(), &a, &x, &a, &mut y[..10])
        .unwrap_err();
    assert!(
        matches!(&e, Error::BufferTooSmall { field, .. } if field == "y"),
        "{e}"
    );
    let bf = a.with_dtype(DataType::Bf16);
    let e = h
        .transform_tensor(Blend::default(), &bf, &x, &a, &mut y)
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let e = h
        .transform_tensor(Blend::new(f32::NAN, 0.0), &a, &x, &a, &mut y)
        .unwrap_err();
    assert!(
        matches!(&e, Error::BadParam { field, .. } if field == "alpha"),
        "{e}"
    );
    let e = h
        .transform_tensor(Blend::new(1.0, f32::INFINITY), &a, &x, &a, &mut y)
        .unwrap_err();
    assert!(
        matches!(&e, Error::BadParam { field, .. } if field == "beta"),
        "{e}"
    );
    let e = h.copy_bandwidth(3, 1).unwrap_err();
    assert!(
        matches!(&e, Error::BadParam { field, .. } if field == "bytes"),
        "{e}"
    );
    let e = h.copy_bandwidth(1024, 0).unwrap_err();
    assert!(
        matches!(&e, Error::BadParam { field, .. } if field == "reps"),
        "{e}"
    );
}

#[test]
fn copy_bandwidth_measures_something() {
    for threads in [1, 2] {
        let h = Handle::with_threads(threads).unwrap();
        let gbs = h.copy_bandwidth(8 << 20, 3).unwrap();
        assert!(gbs.is_finite() && gbs > 0.05, "{threads}t: {gbs} GB/s");
    }
}

/// Throughput report (run with `--ignored --nocapture`, optimised): the copy bandwidth and
/// the transforms and tensor operations of a ResNet-50 activation of batch 32, in GB/s of
/// bytes read plus written.
#[test]
#[ignore]
fn throughput_report() {
    use autodnn::layers::tensor_ops::ReduceOp;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let h = Handle::with_threads(threads).unwrap();
    println!("copy: {:.1} GB/s", h.copy_bandwidth(256 << 20, 7).unwrap());
    let dims = [32, 64, 56, 56];
    let nchw = TensorDesc::new(DataType::F32, Layout::Nchw, dims).unwrap();
    let nhwc = TensorDesc::new(DataType::F32, Layout::Nhwc, dims).unwrap();
    let x = real_data(nchw.span(), 1, 100);
    let mut y = vec![0.0f32; nchw.span()];
    let bytes = 2.0 * 4.0 * nchw.span() as f64;
    let time = |f: &mut dyn FnMut()| {
        f();
        let mut t: Vec<f64> = (0..5)
            .map(|_| {
                let s = std::time::Instant::now();
                f();
                s.elapsed().as_secs_f64()
            })
            .collect();
        t.sort_by(f64::total_cmp);
        t[2]
    };
    for (name, a, b) in [
        ("nchw->nchw", nchw, nchw),
        ("nchw->nhwc", nchw, nhwc),
        ("nhwc->nchw", nhwc, nchw),
    ] {
        let s = time(&mut || {
            h.transform_tensor(Blend::default(), &a, &x, &b, &mut y)
                .unwrap()
        });
        println!("transform {name}: {:.1} GB/s", bytes / s / 1e9);
    }
    let bias_d = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 64, 1, 1]).unwrap();
    let bias = real_data(64, 2, 100);
    for (name, c) in [("nchw", nchw), ("nhwc", nhwc)] {
        let s = time(&mut || {
            h.add_tensor(Blend::new(1.0, 1.0), &bias_d, &bias, &c, &mut y)
                .unwrap()
        });
        println!("bias add {name}: {:.1} GB/s", bytes / s / 1e9);
    }
    for (name, a, mask) in [
        ("nchw over hw", nchw, [32, 64, 1, 1]),
        ("nhwc over hw", nhwc, [32, 64, 1, 1]),
        ("all", nchw, [1, 1, 1, 1]),
    ] {
        let cd = TensorDesc::new(DataType::F32, Layout::Nchw, mask).unwrap();
        let mut c = vec![0.0f32; cd.span()];
        let s = time(&mut || {
            h.reduce_tensor(ReduceOp::Sum, Blend::default(), &a, &x, &cd, &mut c)
                .unwrap()
        });
        println!(
            "reduce sum {name}: {:.1} GB/s (read only)",
            bytes / 2.0 / s / 1e9
        );
    }
}
