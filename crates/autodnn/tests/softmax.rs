//! The softmax operator (softmax and log-softmax, channel and instance modes, forward and
//! backward) against the f64 reference on random shapes and real data (magnitudes up to ±80,
//! rows of equal values, rows of length 1), NCHW, NHWC and explicitly strided tensors, x and
//! y of different layouts, alpha/beta blending (beta = 0 ignoring NaN in the prior output),
//! on every instruction set and on 1 and 2 threads with identical bits; the bounds the
//! module's doc card states; rows summing to 1; the backward pass against finite differences
//! of the forward; the classifier (8x1000) and segmentation (1x21x64x64) shapes, a huge
//! instance split in chunks; the benchdnn problem strings; bad input.

mod common;

use autodnn::layers::softmax::{SoftmaxAlgorithm, SoftmaxMode, SoftmaxSpec};
use autodnn::layers::Blend;
use autodnn::{reference, DataType, Error, Handle, Layout, TensorDesc};
use common::{handles, Rng};

const EPS: f64 = f32::EPSILON as f64;
/// The absolute floor where an exponential or a product falls below f32's normal range
/// (exp flushes to 0 there), scaled by |alpha| and the row's sum where they multiply it.
const TINY: f64 = 1.0 / (1u128 << 125) as f64;

/// A tensor of `dims`: packed NCHW or NHWC, or one of them with gaps between rows/pixels and
/// planes (explicit strides), or a CNHW-like order (channels outermost).
fn desc(rng: &mut Rng, dims: [usize; 4]) -> TensorDesc {
    let [n, c, h, w] = dims;
    let gap = rng.range(1, 3) as usize;
    match rng.range(0, 5) {
        0 => TensorDesc::new(DataType::F32, Layout::Nchw, dims).unwrap(),
        1 => TensorDesc::new(DataType::F32, Layout::Nhwc, dims).unwrap(),
        2 => {
            let sh = w + gap;
            let sc = sh * h + gap;
            TensorDesc::with_strides(DataType::F32, dims, [sc * c + gap, sc, sh, 1]).unwrap()
        }
        3 => {
            let sw = c + gap;
            let sh = sw * w + gap;
            TensorDesc::with_strides(DataType::F32, dims, [sh * h, 1, sh, sw]).unwrap()
        }
        _ => {
            // C outermost, N between C and the positions: NCHW positions, n strided.
            let sn = h * w + gap;
            TensorDesc::with_strides(DataType::F32, dims, [sn, sn * n, w, 1]).unwrap()
        }
    }
}

fn off(d: &TensorDesc, p: [usize; 4]) -> usize {
    d.offset(p[0], p[1], p[2], p[3])
}

/// Real data in [−scale, scale] (steps of scale/1000); every third group (when asked) all
/// equal.
fn data(
    rng: &mut Rng,
    d: &TensorDesc,
    mode: SoftmaxMode,
    scale: f32,
    equal_rows: bool,
) -> Vec<f32> {
    let mut v = vec![f32::NAN; d.span()];
    for (gi, g) in reference::softmax::groups(mode, d.dims())
        .into_iter()
        .enumerate()
    {
        let same = rng.range(-1000, 1000) as f32 / 1000.0 * scale;
        for p in g {
            v[off(d, p)] = if equal_rows && gi % 3 == 1 {
                same
            } else {
                rng.range(-1000, 1000) as f32 / 1000.0 * scale
            };
        }
    }
    v
}

/// A prior output: random where beta reads it, NaN where it must not be read (gaps too).
fn prior(rng: &mut Rng, d: &TensorDesc, blend: Blend) -> Vec<f32> {
    let mut v = vec![f32::NAN; d.span()];
    if blend.reads_output() {
        for o in d.offsets() {
            v[o] = rng.range(-1000, 1000) as f32 / 500.0;
        }
    }
    v
}

/// Asserts the forward bounds of the doc card; returns the worst error in units of the bound.
#[allow(clippy::too_many_arguments)]
fn check_forward(
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    blend: Blend,
    xd: &TensorDesc,
    x: &[f32],
    yd: &TensorDesc,
    prior: &[f32],
    y: &[f32],
    what: &str,
) -> f64 {
    let r = reference::softmax::forward(algo, mode, blend, xd, x, yd, prior).unwrap();
    let (al, be) = (blend.alpha as f64, blend.beta as f64);
    let mut worst = 0.0f64;
    for g in reference::softmax::groups(mode, xd.dims()) {
        let xs: Vec<f64> = g.iter().map(|&p| x[off(xd, p)] as f64).collect();
        let m = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = xs.iter().map(|v| (v - m).exp()).sum();
        let ln_l = (g.len() as f64).ln();
        let mut total = 0.0f64;
        for (&p, &v) in g.iter().zip(&xs) {
            let o = off(yd, p);
            let d = (v - m).abs();
            let blend_part = if be != 0.0 {
                (be * prior[o] as f64).abs()
            } else {
                0.0
            };
            let tol = match algo {
                SoftmaxAlgorithm::Accurate => {
                    let pv = (v - m).exp() / s;
                    EPS * (al.abs() * pv * (d / 2.0 + ln_l / 2.0 + 8.0) + blend_part + r[o].abs())
                        + al.abs() * TINY
                }
                SoftmaxAlgorithm::Log => {
                    EPS * (al.abs() * (d + ln_l + 4.0) + blend_part + r[o].abs())
                }
            } + TINY;
            let e = (y[o] as f64 - r[o]).abs();
            assert!(
                e <= tol,
                "{what}: y{p:?} = {} but the reference is {} (error {e:e} > bound {tol:e})",
                y[o],
                r[o]
            );
            worst = worst.max(e / tol);
            total += y[o] as f64;
        }
        if algo == SoftmaxAlgorithm::Accurate && blend == Blend::default() {
            assert!(
                (total - 1.0).abs() <= EPS * (ln_l + 8.0),
                "{what}: a row sums to {total}"
            );
        }
    }
    worst
}

/// Asserts the backward bounds of the doc card; returns the worst error in units of the bound.
#[allow(clippy::too_many_arguments)]
fn check_backward(
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    blend: Blend,
    yd: &TensorDesc,
    y: &[f32],
    dyd: &TensorDesc,
    dy: &[f32],
    dxd: &TensorDesc,
    prior: &[f32],
    dx: &[f32],
    what: &str,
) -> f64 {
    let r = reference::softmax::backward(algo, mode, blend, yd, y, dyd, dy, dxd, prior).unwrap();
    let (al, be) = (blend.alpha as f64, blend.beta as f64);
    let mut worst = 0.0f64;
    for g in reference::softmax::groups(mode, yd.dims()) {
        let ys: Vec<f64> = g.iter().map(|&p| y[off(yd, p)] as f64).collect();
        let ds: Vec<f64> = g.iter().map(|&p| dy[off(dyd, p)] as f64).collect();
        let s: f64 = match algo {
            SoftmaxAlgorithm::Accurate => ys.iter().zip(&ds).map(|(a, b)| a * b).sum(),
            SoftmaxAlgorithm::Log => ds.iter().sum(),
        };
        for ((&p, &v), &d) in g.iter().zip(&ys).zip(&ds) {
            let o = off(dxd, p);
            let blend_part = if be != 0.0 {
                (be * prior[o] as f64).abs()
            } else {
                0.0
            };
            let tol = match algo {
                SoftmaxAlgorithm::Accurate => {
                    EPS * ((al * v).abs() * (2.0 * d.abs() + 2.0 * s.abs())
                        + blend_part
                        + r[o].abs())
                }
                SoftmaxAlgorithm::Log => {
                    EPS * (al.abs() * (d.abs() + 4.0 * (v.exp() * s).abs())
                        + blend_part
                        + r[o].abs())
                }
            } + al.abs() * (1.0 + s.abs()) * TINY;
            let e = (dx[o] as f64 - r[o]).abs();
            assert!(
                e <= tol,
                "{what}: dx{p:?} = {} but the reference is {} (error {e:e} > bound {tol:e})",
                dx[o],
                r[o]
            );
            worst = worst.max(e / tol);
        }
    }
    worst
}

/// Bits of the elements inside the tensor (gaps excluded).
fn bits(d: &TensorDesc, v: &[f32]) -> Vec<u32> {
    d.offsets().map(|o| v[o].to_bits()).collect()
}

const BLENDS: [(f32, f32); 4] = [(1.0, 0.0), (2.5, 0.0), (1.0, 1.0), (0.5, -1.5)];

/// One forward case on every handle: bounds, and the same bits everywhere.
#[allow(clippy::too_many_arguments)]
fn forward_case(
    hs: &[(String, Handle)],
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    blend: Blend,
    xd: &TensorDesc,
    x: &[f32],
    yd: &TensorDesc,
    pr: &[f32],
    what: &str,
) -> Vec<f32> {
    let mut first: Option<(Vec<u32>, Vec<f32>)> = None;
    for (name, h) in hs {
        let mut y = pr.to_vec();
        h.softmax_forward(algo, mode, blend, xd, x, yd, &mut y)
            .unwrap();
        let label = format!("{what} {name}");
        check_forward(algo, mode, blend, xd, x, yd, pr, &y, &label);
        let b = bits(yd, &y);
        match &first {
            None => first = Some((b, y)),
            Some((f, _)) => assert!(*f == b, "{label}: bits differ from the first handle"),
        }
    }
    first.unwrap().1
}

/// One backward case on every handle: bounds, and the same bits everywhere.
#[allow(clippy::too_many_arguments)]
fn backward_case(
    hs: &[(String, Handle)],
    algo: SoftmaxAlgorithm,
    mode: SoftmaxMode,
    blend: Blend,
    yd: &TensorDesc,
    y: &[f32],
    dyd: &TensorDesc,
    dy: &[f32],
    dxd: &TensorDesc,
    pr: &[f32],
    what: &str,
) {
    let mut first: Option<Vec<u32>> = None;
    for (name, h) in hs {
        let mut dx = pr.to_vec();
        h.softmax_backward(algo, mode, blend, yd, y, dyd, dy, dxd, &mut dx)
            .unwrap();
        let label = format!("{what} {name}");
        check_backward(algo, mode, blend, yd, y, dyd, dy, dxd, pr, &dx, &label);
        let b = bits(dxd, &dx);
        match &first {
            None => first = Some(b),
            Some(f) => assert!(*f == b, "{label}: bits differ from the first handle"),
        }
    }
}

#[test]
fn random_shapes_forward_and_backward() {
    let hs = handles();
    let mut rng = Rng(0x50f7_3a11);
    for case in 0..120 {
        let dims = [
            rng.range(1, 3) as usize,
            rng.pick(&[1, 2, 3, 5, 16, 17, 33, 40]),
            rng.range(1, 5) as usize,
            rng.range(1, 9) as usize,
        ];
        let mode = rng.pick(&SoftmaxMode::ALL);
        let algo = rng.pick(&SoftmaxAlgorithm::ALL);
        let (al, be) = rng.pick(&BLENDS);
        let blend = Blend::new(al, be);
        let scale = rng.pick(&[1.0f32, 8.0, 80.0]);
        let xd = desc(&mut rng, dims);
        let yd = desc(&mut rng, dims);
        let x = data(&mut rng, &xd, mode, scale, true);
        let pr = prior(&mut rng, &yd, blend);
        let what = format!(
            "case {case}: {algo:?} {mode:?} {dims:?} x {:?} y {:?} blend {al}/{be} scale {scale}",
            xd.strides(),
            yd.strides()
        );
        let y = forward_case(&hs, algo, mode, blend, &xd, &x, &yd, &pr, &what);

        // Backward from the forward's own output (alpha 1, beta 0), dy in [-1, 1].
        let mut y1 = vec![f32::NAN; yd.span()];
        hs[0]
            .1
            .softmax_forward(algo, mode, Blend::default(), &xd, &x, &yd, &mut y1)
            .unwrap();
        let _ = y;
        let dyd = desc(&mut rng, dims);
        let dxd = desc(&mut rng, dims);
        let dy = data(&mut rng, &dyd, mode, 1.0, false);
        let (al, be) = rng.pick(&BLENDS);
        let blend = Blend::new(al, be);
        let pr = prior(&mut rng, &dxd, blend);
        let what = format!(
            "{what} backward dy {:?} dx {:?} blend {al}/{be}",
            dyd.strides(),
            dxd.strides()
        );
        backward_case(
            &hs, algo, mode, blend, &yd, &y1, &dyd, &dy, &dxd, &pr, &what,
        );
    }
}

/// Layer shapes: the classifier's 8x1000 (rows contiguous in both layouts), the segmentation
/// head's 1x21x64x64 channel softmax in NCHW (positions blocks) and NHWC (short rows), and
/// the same as one instance of 86016 elements (chunks split among threads), and a strided
/// huge instance (the gathered path).
#[test]
fn layer_shapes() {
    let hs = handles();
    let mut rng = Rng(0x0c1a_55e5);
    let nchw = |d| TensorDesc::new(DataType::F32, Layout::Nchw, d).unwrap();
    let nhwc = |d| TensorDesc::new(DataType::F32, Layout::Nhwc, d).unwrap();
    let padded = TensorDesc::with_strides(
        DataType::F32,
        [1, 21, 64, 64],
        [21 * 65 * 64 + 3, 65 * 64, 65, 1],
    )
    .unwrap();
    let seg = [1, 21, 64, 64];
    let cases = [
        (
            nchw([8, 1000, 1, 1]),
            nchw([8, 1000, 1, 1]),
            SoftmaxMode::Channel,
        ),
        (
            nhwc([8, 1000, 1, 1]),
            nhwc([8, 1000, 1, 1]),
            SoftmaxMode::Channel,
        ),
        (nchw(seg), nchw(seg), SoftmaxMode::Channel),
        (nhwc(seg), nhwc(seg), SoftmaxMode::Channel),
        (nchw(seg), nhwc(seg), SoftmaxMode::Channel),
        (nchw(seg), nchw(seg), SoftmaxMode::Instance),
        (
            nhwc([2, 21, 64, 64]),
            nhwc([2, 21, 64, 64]),
            SoftmaxMode::Instance,
        ),
        (padded, padded, SoftmaxMode::Instance),
        (padded, padded, SoftmaxMode::Channel),
    ];
    for (i, (d, yd, mode)) in cases.into_iter().enumerate() {
        for algo in SoftmaxAlgorithm::ALL {
            let x = data(&mut rng, &d, mode, 20.0, false);
            let blend = if i % 2 == 0 {
                Blend::default()
            } else {
                Blend::new(1.5, 0.5)
            };
            let pr = prior(&mut rng, &yd, blend);
            let what = format!(
                "{algo:?} {mode:?} {:?} strides {:?} -> {:?}",
                d.dims(),
                d.strides(),
                yd.strides()
            );
            forward_case(&hs, algo, mode, blend, &d, &x, &yd, &pr, &what);
            let mut y1 = vec![f32::NAN; yd.span()];
            hs[0]
                .1
                .softmax_forward(algo, mode, Blend::default(), &d, &x, &yd, &mut y1)
                .unwrap();
            let dy = data(&mut rng, &d, mode, 1.0, false);
            let pr = prior(&mut rng, &d, blend);
            backward_case(&hs, algo, mode, blend, &yd, &y1, &d, &dy, &d, &pr, &what);
        }
    }
}

/// Rows of length 1 (softmax 1, log-softmax 0, backward 0 for softmax... exactly), and
/// extreme rows: ±80, one huge value, all equal.
#[test]
fn degenerate_rows() {
    let h = Handle::with_threads(2).unwrap();
    let d = TensorDesc::new(DataType::F32, Layout::Nchw, [3, 1, 2, 5]).unwrap();
    let x: Vec<f32> = (0..30).map(|i| i as f32 * 7.3 - 90.0).collect();
    let mut y = vec![f32::NAN; 30];
    let (acc, log, ch) = (
        SoftmaxAlgorithm::Accurate,
        SoftmaxAlgorithm::Log,
        SoftmaxMode::Channel,
    );
    h.softmax_forward(acc, ch, Blend::default(), &d, &x, &d, &mut y)
        .unwrap();
    assert!(y.iter().all(|&v| v == 1.0));
    h.softmax_forward(log, ch, Blend::default(), &d, &x, &d, &mut y)
        .unwrap();
    assert!(y.iter().all(|&v| v == 0.0));
    let ones = vec![1.0f32; 30];
    let dy: Vec<f32> = (0..30).map(|i| i as f32 - 3.0).collect();
    let mut dx = vec![f32::NAN; 30];
    h.softmax_backward(acc, ch, Blend::default(), &d, &ones, &d, &dy, &d, &mut dx)
        .unwrap();
    assert!(dx.iter().all(|&v| v == 0.0), "{dx:?}");

    // Equal values: exactly 1/C (C a power of two) and −ln C.
    let d = TensorDesc::new(DataType::F32, Layout::Nhwc, [2, 64, 1, 3]).unwrap();
    let x = vec![-80.0f32; d.span()];
    let mut y = vec![0.0; d.span()];
    h.softmax_forward(acc, ch, Blend::default(), &d, &x, &d, &mut y)
        .unwrap();
    assert!(y.iter().all(|&v| v == 1.0 / 64.0));
    h.softmax_forward(log, ch, Blend::default(), &d, &x, &d, &mut y)
        .unwrap();
    assert!(y.iter().all(|&v| v == -(64f32.ln())), "{}", y[0]);

    // One value 160 above the rest: 1 and 0 (the exponentials flush), no NaN, no overflow.
    let d = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 10, 1, 1]).unwrap();
    let mut x = vec![-80.0f32; 10];
    x[3] = 80.0;
    h.softmax_forward(acc, ch, Blend::default(), &d, &x, &d, &mut y)
        .unwrap();
    assert_eq!(y[3], 1.0);
    assert!(y[..10].iter().enumerate().all(|(i, &v)| i == 3 || v == 0.0));
    h.softmax_forward(log, ch, Blend::default(), &d, &x, &d, &mut y)
        .unwrap();
    assert_eq!(y[3], 0.0);
    assert_eq!(y[0], -160.0);
}

/// The backward pass is the derivative of the forward: dx · v against central differences
/// of Σ dy · y(x + h v) on small cases, f32 forward with f64 sums (h = 1e-2, the bound
/// covering the h² term and the rounding of y over h), and the f64 reference's backward
/// against the f64 reference's forward (h = 1e-5, tight).
#[test]
fn backward_is_the_derivative() {
    let h = Handle::with_threads(1).unwrap();
    let mut rng = Rng(0xd1ff);
    for case in 0..16 {
        let mode = SoftmaxMode::ALL[case % 2];
        let algo = SoftmaxAlgorithm::ALL[(case / 2) % 2];
        let dims = [
            rng.range(1, 2) as usize,
            rng.range(2, 6) as usize,
            rng.range(1, 3) as usize,
            rng.range(1, 3) as usize,
        ];
        let d =
            TensorDesc::new(DataType::F32, rng.pick(&[Layout::Nchw, Layout::Nhwc]), dims).unwrap();
        let len = d.span();
        let x = data(&mut rng, &d, mode, 2.0, false);
        let dy = data(&mut rng, &d, mode, 1.0, false);
        let fwd = |x: &[f32]| {
            let mut y = vec![0.0f32; len];
            h.softmax_forward(algo, mode, Blend::default(), &d, x, &d, &mut y)
                .unwrap();
            y
        };
        let loss =
            |y: &[f32]| -> f64 { y.iter().zip(&dy).map(|(&a, &b)| a as f64 * b as f64).sum() };
        let y = fwd(&x);
        let mut dx = vec![0.0f32; len];
        h.softmax_backward(algo, mode, Blend::default(), &d, &y, &d, &dy, &d, &mut dx)
            .unwrap();
        let refl = |x: &[f32]| -> f64 {
            let r =
                reference::softmax::forward(algo, mode, Blend::default(), &d, x, &d, &[]).unwrap();
            r.iter().zip(&dy).map(|(&a, &b)| a * b as f64).sum()
        };
        let rdx =
            reference::softmax::backward(algo, mode, Blend::default(), &d, &y, &d, &dy, &d, &[])
                .unwrap();
        for i in 0..len {
            let step = 1e-2f32;
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[i] += step;
            xm[i] -= step;
            let fd = (loss(&fwd(&xp)) - loss(&fwd(&xm))) / (xp[i] - xm[i]) as f64;
            let scale = dx.iter().fold(1e-3f64, |a, &v| a.max(v.abs() as f64));
            assert!(
                (fd - dx[i] as f64).abs() <= 2e-3 * scale,
                "{algo:?} {mode:?} {dims:?} dx[{i}] = {} but the difference quotient is {fd}",
                dx[i]
            );
            // The reference against itself, in f64 (x perturbed in f32, so a step of 2^-10
            // relative to ~1 is exact).
            let step = 1.0 / 1024.0f32;
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[i] += step;
            xm[i] -= step;
            let fd = (refl(&xp) - refl(&xm)) / (xp[i] - xm[i]) as f64;
            assert!(
                (fd - rdx[i]).abs() <= 1e-5 * scale,
                "reference {algo:?} {mode:?}: dx[{i}] = {} but the difference quotient is {fd}",
                rdx[i]
            );
        }
    }
}

/// beta = 0 never reads the prior output (NaN there stays out); beta ≠ 0 reads it.
#[test]
fn blend_reads_the_prior_output_only_when_asked() {
    let h = Handle::with_threads(1).unwrap();
    let d = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 4, 1, 1]).unwrap();
    let x = [1.0f32, 1.0, 1.0, 1.0];
    let mut y = [f32::NAN; 4];
    h.softmax_forward(
        SoftmaxAlgorithm::Accurate,
        SoftmaxMode::Instance,
        Blend::new(2.0, 0.0),
        &d,
        &x,
        &d,
        &mut y,
    )
    .unwrap();
    assert_eq!(y, [0.5; 4]);
    let mut y = [1.0f32, 2.0, 3.0, 4.0];
    h.softmax_forward(
        SoftmaxAlgorithm::Accurate,
        SoftmaxMode::Instance,
        Blend::new(2.0, 0.5),
        &d,
        &x,
        &d,
        &mut y,
    )
    .unwrap();
    assert_eq!(y, [1.0, 1.5, 2.0, 2.5]);
}

#[test]
fn problem_strings() {
    let p = SoftmaxSpec::parse("--alg=logsoftmax --axis=1 8x1000").unwrap();
    assert_eq!(
        (p.algo, p.mode, p.dims),
        (SoftmaxAlgorithm::Log, SoftmaxMode::Channel, [8, 1000, 1, 1])
    );
    let p = SoftmaxSpec::parse("1x21x64x64").unwrap();
    assert_eq!(
        (p.algo, p.mode, p.dims),
        (
            SoftmaxAlgorithm::Accurate,
            SoftmaxMode::Channel,
            [1, 21, 64, 64]
        )
    );
    let p = SoftmaxSpec::parse("--mode=INSTANCE --alg=log_softmax 2x3x4x5").unwrap();
    assert_eq!(
        (p.algo, p.mode),
        (SoftmaxAlgorithm::Log, SoftmaxMode::Instance)
    );
    assert_eq!(p.desc(Layout::Nhwc).unwrap().strides(), [60, 1, 15, 3]);
    for bad in [
        "",
        "--alg=fast 8x10",
        "--axis=2 8x10",
        "--mode=spatial 8x10",
        "--dir=FWD_D 8x10",
        "8x10 8x10",
        "8x0",
        "8x1x2x3x4",
    ] {
        assert!(
            matches!(SoftmaxSpec::parse(bad), Err(Error::Parse { .. })),
            "{bad:?} parsed"
        );
    }
    for (s, a) in [
        ("softmax", SoftmaxAlgorithm::Accurate),
        ("Accurate", SoftmaxAlgorithm::Accurate),
        ("logsoftmax", SoftmaxAlgorithm::Log),
        ("log_softmax", SoftmaxAlgorithm::Log),
        (" log ", SoftmaxAlgorithm::Log),
    ] {
        assert_eq!(SoftmaxAlgorithm::parse(s).unwrap(), a);
    }
    for a in SoftmaxAlgorithm::ALL {
        assert_eq!(SoftmaxAlgorithm::parse(a.name()).unwrap(), a);
    }
    for m in SoftmaxMode::ALL {
        assert_eq!(SoftmaxMode::parse(m.name()).unwrap(), m);
    }
    assert!(matches!(
        SoftmaxAlgorithm::parse("fast"),
        Err(Error::BadParam { ref field, .. }) if field == "softmax.alg"
    ));
    assert!(matches!(
        SoftmaxMode::parse("spatial"),
        Err(Error::BadParam { ref field, .. }) if field == "softmax.mode"
    ));
}

fn field_of(e: Error) -> String {
    match e {
        Error::BadParam { field, .. } | Error::BufferTooSmall { field, .. } => field,
        Error::Unsupported { what } => what,
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let h = Handle::with_threads(1).unwrap();
    let (acc, ch) = (SoftmaxAlgorithm::Accurate, SoftmaxMode::Channel);
    let d = TensorDesc::new(DataType::F32, Layout::Nchw, [2, 3, 4, 5]).unwrap();
    let other = TensorDesc::new(DataType::F32, Layout::Nchw, [2, 4, 4, 5]).unwrap();
    let x = vec![0.0f32; d.span()];
    let mut y = vec![0.0f32; d.span()];
    let b = Blend::default();
    let fwd = |bl: Blend, xd: &TensorDesc, x: &[f32], yd: &TensorDesc, y: &mut [f32]| {
        field_of(h.softmax_forward(acc, ch, bl, xd, x, yd, y).unwrap_err())
    };
    assert_eq!(fwd(b, &d, &x, &other, &mut y), "y");
    assert_eq!(fwd(b, &d, &x[1..], &d, &mut y), "x");
    assert_eq!(fwd(b, &d, &x, &d, &mut y[1..]), "y");
    assert_eq!(fwd(Blend::new(f32::NAN, 0.0), &d, &x, &d, &mut y), "alpha");
    assert_eq!(
        fwd(Blend::new(1.0, f32::INFINITY), &d, &x, &d, &mut y),
        "beta"
    );
    let half = d.with_dtype(DataType::F16);
    assert!(fwd(b, &half, &x, &d, &mut y).starts_with("x:"));

    let mut dx = vec![0.0f32; d.span()];
    let bwd = |yd: &TensorDesc,
               y: &[f32],
               dyd: &TensorDesc,
               dy: &[f32],
               dxd: &TensorDesc,
               dx: &mut [f32]| {
        field_of(
            h.softmax_backward(SoftmaxAlgorithm::Log, ch, b, yd, y, dyd, dy, dxd, dx)
                .unwrap_err(),
        )
    };
    assert_eq!(bwd(&d, &x, &other, &x, &d, &mut dx), "dy");
    assert_eq!(bwd(&d, &x, &d, &x, &other, &mut dx), "dx");
    assert_eq!(bwd(&d, &x[2..], &d, &x, &d, &mut dx), "y");
    assert_eq!(bwd(&d, &x, &d, &x[2..], &d, &mut dx), "dy");
    assert_eq!(bwd(&d, &x, &d, &x, &d, &mut dx[2..]), "dx");
    let err = h
        .softmax_backward(
            acc,
            ch,
            Blend::new(1.0, f32::NAN),
            &d,
            &x,
            &d,
            &x,
            &d,
            &mut dx,
        )
        .unwrap_err();
    assert_eq!(field_of(err), "beta");
}
