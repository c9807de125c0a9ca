//! Pooling, forward and backward, against the f64 reference (`reference::pool`): random
//! shapes (windows 1 to 4, strides 1 to 3, padding per side, floor and ceil), every mode,
//! NCHW, NHWC and explicitly strided tensors (mixed between x and y), blends with beta
//! reading a prior output and beta = 0 ignoring NaN there, on every available ISA and on 1
//! and 2 threads with identical bits. Max (forward and backward) is exact; the averages are
//! held to the bounds of the module's card:
//! forward |y − ref| ≤ 2⁻²² · (|alpha · avg| + |beta · y|), backward
//! |dx − ref| ≤ (K + 2) · 2⁻²⁴ · (|alpha| · Σ|dy / divisor| + |beta · dx|), K the most
//! windows overlapping one element. Also: ResNet-50's max pool and global average pool at
//! batch 1, GoogLeNet's 3x3 stride-1 max pool and ceil-mode stride-2 pools, PyTorch's
//! divisors worked by hand, ties and NaN, finite differences of the averages, the problem
//! string parser, and bad input.

mod common;

use autodnn::cpu::Isa;
use autodnn::layers::pool::{self, indices_strides, PoolDesc, PoolMode, PoolProblem};
use autodnn::layers::Blend;
use autodnn::{reference, DataType, Error, Handle, Layout, Padding, TensorDesc};
use common::{int_data, isa_handles as handles, Rng};

/// The widest ISA on 1 and 2 threads.
fn best_handles() -> Vec<(Isa, usize, Handle)> {
    let best = Isa::best_available();
    handles()
        .into_iter()
        .filter(|(i, _, _)| *i == best)
        .collect()
}

/// Four layouts: packed NCHW, packed NHWC, NCHW with padded rows and every other column,
/// NHWC with padded pixels and rows.
fn desc(dims: [usize; 4], kind: usize) -> TensorDesc {
    let [_, c, h, w] = dims;
    match kind % 4 {
        0 => TensorDesc::new(DataType::F32, Layout::Nchw, dims).unwrap(),
        1 => TensorDesc::new(DataType::F32, Layout::Nhwc, dims).unwrap(),
        2 => {
            let sh = 2 * w + 3;
            let sc = sh * h + 1;
            TensorDesc::with_strides(DataType::F32, dims, [sc * c + 2, sc, sh, 2]).unwrap()
        }
        _ => {
            let sw = c + 3;
            let sh = sw * w + 2;
            TensorDesc::with_strides(DataType::F32, dims, [sh * h + 5, 1, sh, sw]).unwrap()
        }
    }
}

const BLENDS: [(f32, f32); 5] = [(1.0, 0.0), (2.5, 0.0), (1.0, 1.0), (2.5, 2.5), (0.0, 1.0)];

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()))
}

/// A prior output: integer data, or NaN when beta = 0 (it must not be read).
fn prior(len: usize, beta: f32, seed: u64) -> Vec<f32> {
    if beta == 0.0 {
        vec![f32::NAN; len]
    } else {
        int_data(len, seed)
    }
}

/// The most windows overlapping one input element.
fn overlap(desc: &PoolDesc) -> f64 {
    let [kh, kw] = desc.window();
    let [sh, sw] = desc.stride();
    (kh.div_ceil(sh) * kw.div_ceil(sw)) as f64
}

/// Checks y (all of `yd`'s elements) against the reference and that the rest of the buffer
/// kept `before`.
#[allow(clippy::too_many_arguments)]
fn check_forward(
    what: &str,
    pd: &PoolDesc,
    blend: Blend,
    xd: &TensorDesc,
    x: &[f32],
    yd: &TensorDesc,
    before: &[f32],
    y: &[f32],
) {
    let r = reference::pool::forward(pd, blend, xd, x, yd, before).unwrap();
    let q = reference::pool::forward(pd, Blend::default(), xd, x, yd, before).unwrap();
    let mut is_elem = vec![false; y.len()];
    for o in yd.offsets() {
        is_elem[o] = true;
        let (got, want) = (y[o], r[o]);
        assert!(!got.is_nan(), "{what}: NaN at {o}");
        if pd.mode() == PoolMode::Max {
            assert_eq!(got as f64, want, "{what}: at {o}");
        } else {
            let p = if blend.beta == 0.0 { 0.0 } else { before[o] };
            let tol = 2f64.powi(-22)
                * ((blend.alpha as f64 * q[o]).abs() + (blend.beta as f64 * p as f64).abs());
            assert!(
                (got as f64 - want).abs() <= tol,
                "{what}: at {o}: {got} vs {want} (tol {tol})"
            );
        }
    }
    for (k, e) in is_elem.iter().enumerate() {
        if !e {
            assert!(
                same_bits(&y[k..k + 1], &before[k..k + 1]),
                "{what}: gap {k} written"
            );
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn check_backward(
    what: &str,
    pd: &PoolDesc,
    blend: Blend,
    xd: &TensorDesc,
    x: &[f32],
    dyd: &TensorDesc,
    dy: &[f32],
    dxd: &TensorDesc,
    before: &[f32],
    dx: &[f32],
) {
    let r = reference::pool::backward(pd, blend, xd, x, dyd, dy, dxd, before).unwrap();
    let abs_dy: Vec<f32> = dy.iter().map(|v| v.abs()).collect();
    let s =
        reference::pool::backward(pd, Blend::default(), xd, x, dyd, &abs_dy, dxd, before).unwrap();
    let k = overlap(pd);
    let mut is_elem = vec![false; dx.len()];
    for o in dxd.offsets() {
        is_elem[o] = true;
        let (got, want) = (dx[o], r[o]);
        assert!(!got.is_nan(), "{what}: NaN at {o}");
        if pd.mode() == PoolMode::Max {
            assert_eq!(got as f64, want, "{what}: at {o}");
        } else {
            let p = if blend.beta == 0.0 { 0.0 } else { before[o] };
            let tol = (k + 2.0)
                * 2f64.powi(-24)
                * ((blend.alpha as f64).abs() * s[o] + (blend.beta as f64 * p as f64).abs());
            assert!(
                (got as f64 - want).abs() <= tol,
                "{what}: at {o}: {got} vs {want} (tol {tol})"
            );
        }
    }
    for (j, e) in is_elem.iter().enumerate() {
        if !e {
            assert!(
                same_bits(&dx[j..j + 1], &before[j..j + 1]),
                "{what}: gap {j} written"
            );
        }
    }
}

/// Forward and backward of one problem on the given handles, checked, with identical bits
/// on 1 and 2 threads of each ISA.
#[allow(clippy::too_many_arguments)]
fn run_case(
    handles: &[(Isa, usize, Handle)],
    pd: &PoolDesc,
    blend: Blend,
    xd: &TensorDesc,
    yd: &TensorDesc,
    dxd: &TensorDesc,
    seed: u64,
    label: &str,
) {
    let x = int_data(xd.span(), seed);
    let dy = int_data(yd.span(), seed + 1);
    let y0 = prior(yd.span(), blend.beta, seed + 2);
    let dx0 = prior(dxd.span(), blend.beta, seed + 3);
    let mut fwd: Vec<(Isa, Vec<f32>)> = Vec::new();
    let mut bwd: Vec<(Isa, Vec<f32>)> = Vec::new();
    for (isa, threads, h) in handles {
        let what = format!("{label} {pd:?} {blend:?} {isa:?} {threads}t");
        let mut y = y0.clone();
        h.pooling_forward(pd, blend, xd, &x, yd, &mut y).unwrap();
        match fwd.iter().find(|(i, _)| i == isa) {
            Some((_, y1)) => assert!(same_bits(y1, &y), "{what}: forward bits differ"),
            None => {
                check_forward(&what, pd, blend, xd, &x, yd, &y0, &y);
                fwd.push((*isa, y));
            }
        }
        let mut dx = dx0.clone();
        h.pooling_backward(pd, blend, xd, &x, yd, &dy, dxd, &mut dx)
            .unwrap();
        match bwd.iter().find(|(i, _)| i == isa) {
            Some((_, d1)) => assert!(same_bits(d1, &dx), "{what}: backward bits differ"),
            None => {
                check_backward(&what, pd, blend, xd, &x, yd, &dy, dxd, &dx0, &dx);
                bwd.push((*isa, dx.clone()));
            }
        }
        if pd.mode() == PoolMode::Max {
            // Training's pair: the same y, the reference's choices, the same dx (integer
            // data: the sums are exact in any order).
            let mut y2 = y0.clone();
            let mut ind = vec![u32::MAX; indices_len(yd)];
            h.pooling_forward_with_indices(pd, blend, xd, &x, yd, &mut y2, &mut ind)
                .unwrap();
            let y1 = &fwd.iter().find(|(i, _)| i == isa).unwrap().1;
            assert!(same_bits(y1, &y2), "{what}: y with indices differs");
            let want = reference::pool::indices(pd, xd, &x, yd).unwrap();
            assert!(
                ind.iter().zip(&want).all(|(&a, &b)| a as usize == b),
                "{what}: indices {ind:?}, the reference's {want:?}"
            );
            let mut dx2 = dx0.clone();
            h.pooling_backward_with_indices(pd, blend, yd, &dy, &ind, dxd, &mut dx2)
                .unwrap();
            assert!(same_bits(&dx, &dx2), "{what}: dx from indices differs");
        }
    }
}

/// N·C·OH·OW: one index per output.
fn indices_len(yd: &TensorDesc) -> usize {
    yd.dims().iter().product()
}

fn random_desc(rng: &mut Rng, x: [usize; 4]) -> Option<PoolDesc> {
    let mode = rng.pick(&PoolMode::ALL);
    let k = [rng.range(1, 4) as usize, rng.range(1, 4) as usize];
    let s = [rng.range(1, 3) as usize, rng.range(1, 3) as usize];
    let pad = |rng: &mut Rng, k: usize| rng.range(0, k as i64 - 1).min(2);
    let padding = Padding {
        top: pad(rng, k[0]),
        bottom: pad(rng, k[0]),
        left: pad(rng, k[1]),
        right: pad(rng, k[1]),
    };
    let d = PoolDesc::new(mode, k, s, padding)
        .unwrap()
        .with_ceil_mode(rng.range(0, 1) == 1);
    let xd = TensorDesc::new(DataType::F32, Layout::Nchw, x).unwrap();
    d.output_dims(&xd).ok().map(|_| d)
}

/// Random small problems, every mode, layout mix and blend, on every ISA and thread count.
#[test]
fn random_problems_match_the_reference_everywhere() {
    let handles = handles();
    let mut rng = Rng(0x9001);
    let mut done = 0;
    while done < 48 {
        let dims = [
            rng.range(1, 2) as usize,
            rng.pick(&[1, 3, 8, 19]),
            rng.range(1, 11) as usize,
            rng.range(1, 11) as usize,
        ];
        let Some(pd) = random_desc(&mut rng, dims) else {
            continue;
        };
        let kx = rng.range(0, 3) as usize;
        let ky = rng.range(0, 3) as usize;
        let kdx = if rng.range(0, 1) == 0 { kx } else { ky };
        let xd = desc(dims, kx);
        let yd = desc(pd.output_dims(&xd).unwrap(), ky);
        let dxd = desc(dims, kdx);
        let (a, b) = BLENDS[done % BLENDS.len()];
        let label = format!("case {done} x{dims:?} kinds {kx}{ky}{kdx}");
        run_case(
            &handles,
            &pd,
            Blend::new(a, b),
            &xd,
            &yd,
            &dxd,
            done as u64,
            &label,
        );
        done += 1;
    }
}

/// Problems large enough for the threads to split them (planes into row blocks, channels
/// into blocks of 16 with a partial one): identical bits on 1 and 2 threads.
#[test]
fn split_problems_are_the_same_on_any_thread_count() {
    let handles = handles();
    let dims = [2, 24, 40, 36];
    for (m, mode) in PoolMode::ALL.into_iter().enumerate() {
        for kind in 0..4 {
            let pd = PoolDesc::new(mode, [3, 3], [2, 2], Padding::symmetric(1, 1))
                .unwrap()
                .with_ceil_mode(kind % 2 == 1);
            let xd = desc(dims, kind);
            let yd = desc(pd.output_dims(&xd).unwrap(), kind);
            let (a, b) = BLENDS[(m + kind) % BLENDS.len()];
            // The strided layouts on the widest ISA only (time).
            let hs: Vec<(Isa, usize, Handle)> = handles
                .iter()
                .filter(|(i, _, _)| kind < 2 || *i == Isa::best_available())
                .map(|(i, t, h)| (*i, *t, h.clone()))
                .collect();
            run_case(
                &hs,
                &pd,
                Blend::new(a, b),
                &xd,
                &yd,
                &xd,
                m as u64 * 7 + kind as u64,
                "split",
            );
        }
    }
}

/// ResNet-50's max pool (mb1ic64ih112oh56kh3sh2ph1) and global average pool (2048
/// channels, 7×7), batch 1, both layouts, forward and backward.
#[test]
fn resnet50_pools() {
    let hs = best_handles();
    let p = PoolProblem::parse("mb1ic64ih112oh56kh3sh2ph1").unwrap();
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let xd = p.x_desc(layout).unwrap();
        let yd = p.y_desc(layout).unwrap();
        assert_eq!(yd.dims(), [1, 64, 56, 56]);
        run_case(
            &hs,
            &p.desc,
            Blend::default(),
            &xd,
            &yd,
            &xd,
            50,
            "resnet maxpool",
        );
    }
    let g = PoolProblem::parse("mb1ic2048ih7kh7").unwrap();
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let xd = g.x_desc(layout).unwrap();
        let pd = PoolDesc::global_average(&xd).unwrap();
        assert_eq!(pd.window(), g.desc.window());
        let yd = pd.output_desc(&xd, layout).unwrap();
        assert_eq!(yd.dims(), [1, 2048, 1, 1]);
        run_case(
            &hs,
            &pd,
            Blend::default(),
            &xd,
            &yd,
            &xd,
            51,
            "resnet avgpool",
        );
    }
}

/// GoogLeNet's pools: 3x3 stride 1 padding 1 max (shapes kept), and the 3x3 stride-2
/// ceil-mode max pools (112 → 56, 28 → 14, 14 → 7), plus average pools in ceil mode.
#[test]
fn googlenet_pools() {
    let hs = best_handles();
    let same = PoolDesc::new(PoolMode::Max, [3, 3], [1, 1], Padding::symmetric(1, 1)).unwrap();
    let ceil = PoolDesc::new(PoolMode::Max, [3, 3], [2, 2], Padding::default())
        .unwrap()
        .with_ceil_mode(true);
    for (layout, seed) in [(Layout::Nchw, 60), (Layout::Nhwc, 61)] {
        let xd = TensorDesc::new(DataType::F32, layout, [1, 32, 28, 28]).unwrap();
        let yd = same.output_desc(&xd, layout).unwrap();
        assert_eq!(yd.dims(), xd.dims());
        run_case(
            &hs,
            &same,
            Blend::default(),
            &xd,
            &yd,
            &xd,
            seed,
            "googlenet 3x3s1",
        );
        for (c, hw, o) in [(8, 112, 56), (16, 28, 14), (24, 14, 7)] {
            let xd = TensorDesc::new(DataType::F32, layout, [1, c, hw, hw]).unwrap();
            for mode in PoolMode::ALL {
                let pd = ceil.with_mode(mode);
                let yd = pd.output_desc(&xd, layout).unwrap();
                assert_eq!(yd.dims(), [1, c, o, o]);
                run_case(
                    &hs,
                    &pd,
                    Blend::new(1.0, 1.0),
                    &xd,
                    &yd,
                    &xd,
                    seed,
                    "googlenet ceil",
                );
            }
        }
    }
}

/// PyTorch's divisors on a 4×4 input, 3x3 stride 2 padding 1, ceil mode: the last window
/// overhangs the padding, so `avg_p` divides it by 2·2 (the window clipped to the padded
/// input), `avg_np` by its one real element.
#[test]
fn average_divisors_follow_pytorch() {
    let h = Handle::with_threads(1).unwrap();
    let x: Vec<f32> = (1..=16).map(|v| v as f32).collect();
    let xd = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 1, 4, 4]).unwrap();
    let base = PoolDesc::new(
        PoolMode::AvgIncludePad,
        [3, 3],
        [2, 2],
        Padding::symmetric(1, 1),
    )
    .unwrap()
    .with_ceil_mode(true);
    assert_eq!(base.output_dims(&xd).unwrap(), [1, 1, 3, 3]);
    let yd = base.output_desc(&xd, Layout::Nchw).unwrap();
    let run = |pd: PoolDesc| {
        let mut y = vec![0.0; 9];
        h.pooling_forward(&pd, Blend::default(), &xd, &x, &yd, &mut y)
            .unwrap();
        y
    };
    let p = run(base);
    assert_eq!(p[0], 14.0 / 9.0); // rows -1..2, cols -1..2: 1+2+5+6 over 9
    assert_eq!(p[8], 16.0 / 4.0); // rows 3..6 clipped to 3..5 (padded), the same columns
    assert_eq!(p[2], (4.0 + 8.0) / 6.0); // 3 rows × 2 columns (one real)
    let np = run(base.with_mode(PoolMode::AvgExcludePad));
    assert_eq!(np[0], 14.0 / 4.0);
    assert_eq!(np[8], 16.0);
    // Floor mode, padding 1: every divisor of avg_p is 9 (oneDNN's kh·kw).
    let floor = base.with_ceil_mode(false);
    let yd2 = floor.output_desc(&xd, Layout::Nchw).unwrap();
    assert_eq!(yd2.dims(), [1, 1, 2, 2]);
    let mut y = vec![0.0; 4];
    h.pooling_forward(&floor, Blend::default(), &xd, &x, &yd2, &mut y)
        .unwrap();
    assert_eq!(
        y[3],
        (6.0 + 7.0 + 8.0 + 10.0 + 11.0 + 12.0 + 14.0 + 15.0 + 16.0) / 9.0
    );
}

/// Ties go to the first maximum in row-major order, NaN propagates and takes the gradient,
/// -inf everywhere is still a maximum; backward routes dy exactly; both paths.
#[test]
fn max_ties_and_nan() {
    for (isa, threads, h) in handles() {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            // 20 channels so NHWC takes the packed-channels path, both a whole vector of 16
            // (AVX-512's window kernel) and a tail; channel c holds pattern c % 4.
            let dims = [1, 20, 3, 3];
            let xd = TensorDesc::new(DataType::F32, layout, dims).unwrap();
            let pd = PoolDesc::new(PoolMode::Max, [2, 2], [1, 1], Padding::default()).unwrap();
            let yd = pd.output_desc(&xd, layout).unwrap();
            let nan = f32::NAN;
            let ninf = f32::NEG_INFINITY;
            let patterns: [[f32; 9]; 4] = [
                [1.0; 9],
                [0.0, 2.0, 2.0, 1.0, 2.0, 1.0, 0.0, 0.0, 2.0],
                [0.0, nan, 1.0, nan, 5.0, 1.0, 0.0, 0.0, 0.0],
                [ninf; 9],
            ];
            let mut x = vec![0.0f32; xd.span()];
            for c in 0..20 {
                for (k, v) in patterns[c % 4].iter().enumerate() {
                    x[xd.offset(0, c, k / 3, k % 3)] = *v;
                }
            }
            let mut y = vec![0.0f32; yd.span()];
            h.pooling_forward(&pd, Blend::default(), &xd, &x, &yd, &mut y)
                .unwrap();
            let what = format!("{isa:?} {threads}t {layout:?}");
            let at = |c: usize, i: usize, j: usize| y[yd.offset(0, c, i, j)];
            assert_eq!(at(1, 0, 0), 2.0, "{what}");
            assert!(at(2, 0, 0).is_nan() && at(2, 0, 1).is_nan() && at(2, 1, 0).is_nan());
            assert_eq!(at(2, 1, 1), 5.0, "{what}");
            assert_eq!(at(3, 1, 1), ninf, "{what}");
            // dy = 1 everywhere: each window's chosen element gets 1.
            let dy = vec![1.0f32; yd.span()];
            let mut dx = vec![f32::NAN; xd.span()];
            h.pooling_backward(&pd, Blend::default(), &xd, &x, &yd, &dy, &xd, &mut dx)
                .unwrap();
            let g = |c: usize| -> Vec<f32> {
                (0..9).map(|k| dx[xd.offset(0, c, k / 3, k % 3)]).collect()
            };
            // All equal: each window's first element, (0,0) (0,1) (1,0) (1,1).
            assert_eq!(
                g(0),
                [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
                "{what}"
            );
            // Windows: {0,2,1,2} → (0,1); {2,2,2,1} → (0,1); {1,2,0,0} → (1,1); {2,1,0,2} → (1,1).
            assert_eq!(
                g(1),
                [0.0, 2.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0],
                "{what}"
            );
            // NaN windows route to the first NaN: (0,1) twice, (1,0) once; the last to 5.
            assert_eq!(
                g(2),
                [0.0, 2.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
                "{what}"
            );
            assert_eq!(g(3), g(0), "{what}");
            for c in 4..20 {
                assert_eq!(g(c), g(c % 4), "{what}: channel {c}");
            }
            // The indexed pair makes the same choices (both paths: NHWC packs the channels).
            let mut y2 = vec![0.0f32; yd.span()];
            let mut ind = vec![u32::MAX; indices_len(&yd)];
            h.pooling_forward_with_indices(&pd, Blend::default(), &xd, &x, &yd, &mut y2, &mut ind)
                .unwrap();
            assert!(same_bits(&y, &y2), "{what}: y with indices");
            let want = reference::pool::indices(&pd, &xd, &x, &yd).unwrap();
            assert!(
                ind.iter().zip(&want).all(|(&a, &b)| a as usize == b),
                "{what}: {ind:?}"
            );
            let mut dx2 = vec![f32::NAN; xd.span()];
            h.pooling_backward_with_indices(&pd, Blend::default(), &yd, &dy, &ind, &xd, &mut dx2)
                .unwrap();
            assert!(same_bits(&dx, &dx2), "{what}: dx from indices");
        }
    }
}

/// Average pooling is linear: its backward is the forward's transpose, checked by central
/// differences of the forward (L = Σ y · dy) on small cases, both modes, floor and ceil.
#[test]
fn average_backward_matches_finite_differences() {
    let h = Handle::with_threads(1).unwrap();
    for mode in [PoolMode::AvgIncludePad, PoolMode::AvgExcludePad] {
        for ceil in [false, true] {
            for layout in [Layout::Nchw, Layout::Nhwc] {
                let pd = PoolDesc::new(
                    mode,
                    [3, 2],
                    [2, 2],
                    Padding {
                        top: 1,
                        bottom: 2,
                        left: 1,
                        right: 0,
                    },
                )
                .unwrap()
                .with_ceil_mode(ceil);
                let xd = TensorDesc::new(DataType::F32, layout, [1, 2, 5, 6]).unwrap();
                let yd = pd.output_desc(&xd, layout).unwrap();
                let x = common::real_data(xd.span(), 3, 16);
                let dy = common::real_data(yd.span(), 4, 16);
                let loss = |x: &[f32]| -> f64 {
                    let mut y = vec![0.0; yd.span()];
                    h.pooling_forward(&pd, Blend::default(), &xd, x, &yd, &mut y)
                        .unwrap();
                    y.iter().zip(&dy).map(|(a, b)| *a as f64 * *b as f64).sum()
                };
                let mut dx = vec![0.0; xd.span()];
                h.pooling_backward(&pd, Blend::default(), &xd, &x, &yd, &dy, &xd, &mut dx)
                    .unwrap();
                let eps = 0.25f32;
                for k in 0..xd.span() {
                    let mut xp = x.clone();
                    xp[k] += eps;
                    let mut xm = x.clone();
                    xm[k] -= eps;
                    let fd = (loss(&xp) - loss(&xm)) / (2.0 * eps as f64);
                    assert!(
                        (fd - dx[k] as f64).abs() < 1e-5,
                        "{mode:?} ceil={ceil} {layout:?} at {k}: {fd} vs {}",
                        dx[k]
                    );
                }
            }
        }
    }
}

#[test]
fn problem_strings() {
    let p = PoolProblem::parse("mb8ic64ih112oh56kh3sh2ph1").unwrap();
    assert_eq!(p.dims, [8, 64, 112, 112]);
    assert_eq!((p.desc.window(), p.desc.stride()), ([3, 3], [2, 2]));
    assert_eq!(p.desc.mode(), PoolMode::Max);
    assert_eq!(p.output_dims().unwrap(), [8, 64, 56, 56]);
    assert_eq!(p.name, "");
    // Defaults: mb 1, stride 1, no padding, w from h; names both ways.
    let g = PoolProblem::parse("ic2048ih7kh7_resnet_avgpool").unwrap();
    assert_eq!(
        (g.dims, g.output_dims().unwrap()),
        ([1, 2048, 7, 7], [1, 2048, 1, 1])
    );
    assert_eq!(g.name, "resnet_avgpool");
    let n = PoolProblem::parse("mb2_ic3_ih10iw12_kh3kw2_sh2_ph1pw0n\"odd one\"").unwrap();
    assert_eq!((n.dims, n.name.as_str()), ([2, 3, 10, 12], "odd one"));
    assert_eq!(n.output_dims().unwrap(), [2, 3, 5, 6]);
    // oh that needs more bottom padding: inferred (as benchdnn), avg_p then divides by kh·kw.
    let c = PoolProblem::parse("ic1ih6oh3kh3sh2").unwrap();
    assert_eq!(
        c.desc.padding(),
        Padding {
            top: 0,
            bottom: 1,
            left: 0,
            right: 1
        }
    );
    assert_eq!(c.output_dims().unwrap(), [1, 1, 3, 3]);
    // oh whose windows leave a trailing row unread: bottom padding 0.
    let d = PoolProblem::parse("ic1ih9oh3kh2sh3").unwrap();
    assert_eq!(d.desc.padding(), Padding::default());
    // Trivial 3-D fields are fine; real ones are not.
    assert!(PoolProblem::parse("mb1ic4id1ih8kd1kh2").is_ok());
    for bad in [
        "",
        "mb1ih8kh2",          // no ic
        "mb1ic4kh2",          // no ih
        "mb1ic4ih8",          // no kh
        "mb1ic4ih8kh2oh9",    // oh too large
        "mb1ic4ih8kh2sh2oh2", // oh too small
        "mb1ic4ih8kh2kh3",    // repeated
        "mb1ic4ih8kx2",       // unknown
        "mb1ic4id2ih8kh2",    // 3-D
        "mb1ic4ih8kh2dh1",    // dilated
        "mb1ic4ih8kh2sh0",    // zero stride
        "mb1ic4ih8kh2ph2",    // padding not below the window
        "mb1ic4ih2kh5ph1",    // window larger than the padded input
        "mb0ic4ih8kh2",       // zero batch
    ] {
        match PoolProblem::parse(bad) {
            Err(Error::Parse { .. }) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert_eq!(PoolMode::parse("max").unwrap(), PoolMode::Max);
    assert_eq!(PoolMode::parse("avg_p").unwrap(), PoolMode::AvgIncludePad);
    assert_eq!(PoolMode::parse("avg_np").unwrap(), PoolMode::AvgExcludePad);
    assert!(matches!(PoolMode::parse("avg_x"), Err(Error::Parse { .. })));
    for m in PoolMode::ALL {
        assert_eq!(PoolMode::parse(m.name()).unwrap(), m);
    }
}

fn field_of(e: Error) -> String {
    match e {
        Error::BadParam { field, .. } => field,
        Error::BufferTooSmall { field, .. } => field,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn bad_descriptors_and_calls() {
    let pad0 = Padding::default();
    let mk = |k: [usize; 2], s: [usize; 2], p: Padding| PoolDesc::new(PoolMode::Max, k, s, p);
    assert_eq!(
        field_of(mk([0, 2], [1, 1], pad0).unwrap_err()),
        "pool.kernel_h"
    );
    assert_eq!(
        field_of(mk([2, 0], [1, 1], pad0).unwrap_err()),
        "pool.kernel_w"
    );
    assert_eq!(
        field_of(mk([2, 2], [0, 1], pad0).unwrap_err()),
        "pool.stride_h"
    );
    assert_eq!(
        field_of(mk([2, 2], [1, 0], pad0).unwrap_err()),
        "pool.stride_w"
    );
    let side = |top, bottom, left, right| Padding {
        top,
        bottom,
        left,
        right,
    };
    assert_eq!(
        field_of(mk([2, 2], [1, 1], side(-1, 0, 0, 0)).unwrap_err()),
        "pool.pad_top"
    );
    assert_eq!(
        field_of(mk([2, 2], [1, 1], side(0, 2, 0, 0)).unwrap_err()),
        "pool.pad_bottom"
    );
    assert_eq!(
        field_of(mk([3, 2], [1, 1], side(0, 0, 2, 0)).unwrap_err()),
        "pool.pad_left"
    );
    assert_eq!(
        field_of(mk([3, 3], [1, 1], side(0, 0, 0, 3)).unwrap_err()),
        "pool.pad_right"
    );

    let h = Handle::with_threads(2).unwrap();
    let xd = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 4, 4]).unwrap();
    let big = mk([6, 2], [1, 1], pad0).unwrap();
    assert_eq!(field_of(big.output_dims(&xd).unwrap_err()), "pool.kernel_h");
    let wide = mk([2, 5], [1, 1], side(0, 0, 0, 0)).unwrap();
    assert_eq!(
        field_of(wide.output_dims(&xd).unwrap_err()),
        "pool.kernel_w"
    );

    let pd = mk([2, 2], [2, 2], pad0).unwrap();
    let yd = pd.output_desc(&xd, Layout::Nchw).unwrap();
    let x = vec![1.0; xd.span()];
    let mut y = vec![0.0; yd.span()];
    let fwd =
        |pd: &PoolDesc, b: Blend, xd: &TensorDesc, x: &[f32], yd: &TensorDesc, y: &mut [f32]| {
            h.pooling_forward(pd, b, xd, x, yd, y).unwrap_err()
        };
    let e = fwd(&big, Blend::default(), &xd, &x, &yd, &mut y);
    assert_eq!(field_of(e), "pool.kernel_h");
    let wrong = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 2, 3, 2]).unwrap();
    let mut yw = vec![0.0; wrong.span()];
    assert_eq!(
        field_of(fwd(&pd, Blend::default(), &xd, &x, &wrong, &mut yw)),
        "y"
    );
    assert_eq!(
        field_of(fwd(&pd, Blend::default(), &xd, &x[..5], &yd, &mut y)),
        "x"
    );
    assert_eq!(
        field_of(fwd(&pd, Blend::default(), &xd, &x, &yd, &mut y[..3])),
        "y"
    );
    assert_eq!(
        field_of(fwd(&pd, Blend::new(f32::NAN, 0.0), &xd, &x, &yd, &mut y)),
        "alpha"
    );
    assert_eq!(
        field_of(fwd(
            &pd,
            Blend::new(1.0, f32::INFINITY),
            &xd,
            &x,
            &yd,
            &mut y
        )),
        "beta"
    );
    let half = xd.with_dtype(DataType::Bf16);
    assert!(matches!(
        fwd(&pd, Blend::default(), &half, &x, &yd, &mut y),
        Error::Unsupported { .. }
    ));

    let dy = vec![1.0; yd.span()];
    let mut dx = vec![0.0; xd.span()];
    let bwd = |dyd: &TensorDesc, dy: &[f32], dxd: &TensorDesc, dx: &mut [f32], x: &[f32]| {
        h.pooling_backward(&pd, Blend::default(), &xd, x, dyd, dy, dxd, dx)
            .unwrap_err()
    };
    assert_eq!(field_of(bwd(&wrong, &yw, &xd, &mut dx, &x)), "dy");
    assert_eq!(field_of(bwd(&yd, &dy, &yd, &mut y, &x)), "dx");
    assert_eq!(field_of(bwd(&yd, &dy[..1], &xd, &mut dx, &x)), "dy");
    assert_eq!(field_of(bwd(&yd, &dy, &xd, &mut dx[..4], &x)), "dx");
    assert_eq!(field_of(bwd(&yd, &dy, &xd, &mut dx, &x[..2])), "x");

    // The indexed pair: max only, one index per output, every index inside its plane, and
    // nothing written by a refused call.
    let mut ind = vec![0u32; indices_len(&yd)];
    let e = h
        .pooling_forward_with_indices(&pd, Blend::default(), &xd, &x, &yd, &mut y, &mut ind[1..])
        .unwrap_err();
    assert_eq!(field_of(e), "indices");
    let avg = pd.with_mode(PoolMode::AvgIncludePad);
    let e = h
        .pooling_forward_with_indices(&avg, Blend::default(), &xd, &x, &yd, &mut y, &mut ind)
        .unwrap_err();
    assert_eq!(field_of(e), "pool.mode");
    h.pooling_forward_with_indices(&pd, Blend::default(), &xd, &x, &yd, &mut y, &mut ind)
        .unwrap();
    let bwd_i = |ind: &[u32], dyd: &TensorDesc, dx: &mut [f32]| {
        h.pooling_backward_with_indices(&pd, Blend::default(), dyd, &dy, ind, &xd, dx)
            .unwrap_err()
    };
    let mut dx = vec![7.0f32; xd.span()];
    assert_eq!(field_of(bwd_i(&ind[1..], &yd, &mut dx)), "indices");
    assert_eq!(field_of(bwd_i(&ind, &wrong, &mut dx)), "dy");
    assert_eq!(field_of(bwd_i(&ind, &yd, &mut dx[..4])), "dx");
    let mut bad = ind.clone();
    *bad.last_mut().unwrap() = (xd.h() * xd.w()) as u32;
    assert_eq!(field_of(bwd_i(&bad, &yd, &mut dx)), "indices");
    assert!(dx.iter().all(|&v| v == 7.0), "a refused call wrote dx");
}

/// The indexed backward's check of its offsets over long runs (split among the threads):
/// one offset outside its plane anywhere is refused, naming its position, before dx is
/// written; the same indices made right are taken.
#[test]
fn indexed_backward_checks_long_runs() {
    let pd = PoolDesc::new(PoolMode::Max, [2, 2], [2, 2], Padding::default()).unwrap();
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let xd = TensorDesc::new(DataType::F32, layout, [2, 20, 130, 128]).unwrap();
        let yd = pd.output_desc(&xd, layout).unwrap();
        let count = indices_len(&yd);
        assert!(count > 2 << 16, "{count} indices: several chunks");
        let plane = (130 * 128) as u32;
        let dy = vec![1.0f32; yd.span()];
        for (isa, threads, h) in handles() {
            for bad_at in [0, count / 2 + 7, count - 1] {
                let what = format!("{layout:?} {isa:?} {threads}t, bad at {bad_at}");
                let mut ind: Vec<u32> = (0..count as u32).map(|k| k % plane).collect();
                ind[bad_at] = plane + (bad_at % 3) as u32;
                let mut dx = vec![7.0f32; xd.span()];
                let bwd = |ind: &[u32], dx: &mut [f32]| {
                    h.pooling_backward_with_indices(&pd, Blend::default(), &yd, &dy, ind, &xd, dx)
                };
                let e = bwd(&ind, &mut dx).unwrap_err();
                assert!(
                    e.to_string().contains(&format!("at output {bad_at}")),
                    "{what}: {e}"
                );
                assert_eq!(field_of(e), "indices", "{what}");
                assert!(
                    dx.iter().all(|&v| v == 7.0),
                    "{what}: a refused call wrote dx"
                );
                ind[bad_at] = plane - 1;
                bwd(&ind, &mut dx).unwrap();
            }
        }
    }
}

/// The indexed backward routes each dy to the offset it is given, wherever in the plane
/// (not only in its window, and rows in any order): packed channels in blocks (a partial
/// one), every layout of dx and dy and every blend, against a scatter worked here.
#[test]
fn indexed_backward_takes_any_offsets_in_the_plane() {
    let handles = handles();
    let pd = PoolDesc::new(PoolMode::Max, [3, 3], [2, 2], Padding::symmetric(1, 1)).unwrap();
    let mut rng = Rng(0x1d5);
    for (case, dims) in [[2, 40, 9, 7], [1, 16, 5, 6], [3, 24, 4, 4]]
        .into_iter()
        .enumerate()
    {
        let [n, c, h, w] = dims;
        for (kind, ky) in (0..4).flat_map(|k| [(k, k), (k, 3 - k)]) {
            let dxd = desc(dims, kind);
            let yd = desc(pd.output_dims(&dxd).unwrap(), ky);
            let [_, _, oh, ow] = yd.dims();
            let dy = int_data(yd.span(), 90 + case as u64);
            // Mostly the last rows first, then anywhere: offsets out of order and far ahead.
            let ind: Vec<u32> = (0..n * c * oh * ow)
                .map(|k| {
                    let hi = (h * w) as i64 - 1;
                    let lo = if k % 3 == 0 { hi - w as i64 } else { 0 };
                    rng.range(lo.max(0), hi) as u32
                })
                .collect();
            for (a, b) in BLENDS {
                let blend = Blend::new(a, b);
                let dx0 = prior(dxd.span(), b, 7 + kind as u64);
                // The indices lie in dy's order (NCHW or NHWC, packed).
                let is = indices_strides(&yd);
                let mut sum = vec![0.0f64; n * c * h * w];
                for k in 0..n * c * oh * ow {
                    let (nc, ij) = (k / (oh * ow), k % (oh * ow));
                    let (ni, ci, i, j) = (nc / c, nc % c, ij / ow, ij % ow);
                    let at = ind[ni * is[0] + ci * is[1] + i * is[2] + j * is[3]];
                    sum[nc * h * w + at as usize] += dy[yd.offset(ni, ci, i, j)] as f64;
                }
                for (isa, threads, hd) in &handles {
                    let what = format!("{dims:?} kinds {kind} {ky} {blend:?} {isa:?} {threads}t");
                    let mut dx = dx0.clone();
                    hd.pooling_backward_with_indices(&pd, blend, &yd, &dy, &ind, &dxd, &mut dx)
                        .unwrap();
                    for ni in 0..n {
                        for ci in 0..c {
                            for r in 0..h * w {
                                let o = dxd.offset(ni, ci, r / w, r % w);
                                let mut want = a as f64 * sum[(ni * c + ci) * h * w + r];
                                if b != 0.0 {
                                    want += b as f64 * dx0[o] as f64;
                                }
                                assert_eq!(dx[o] as f64, want, "{what}: at {ni} {ci} {r}");
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The indices lie in y's order: for a packed y, the index of output (n, c, i, j) at y's own
/// offset of that output (NCHW, and NHWC with 20 channels: a 16-lane vector and a tail; 84:
/// four vectors at once, one, and a tail); for a strided y, packed in y's dimension order;
/// the backward reads them in dy's order and routes exactly as the backward that recomputes
/// the choices from x. Padding, ceil mode (the last windows overhang), ties, NaN and −inf;
/// x and y in mixed layouts.
#[test]
fn indices_follow_y_layout() {
    let handles = handles();
    let padding = Padding {
        top: 1,
        bottom: 0,
        left: 1,
        right: 1,
    };
    let pd = PoolDesc::new(PoolMode::Max, [3, 3], [2, 2], padding)
        .unwrap()
        .with_ceil_mode(true);
    let kinds = [
        (1, 1),
        (0, 0),
        (0, 1),
        (1, 0),
        (3, 3),
        (2, 2),
        (1, 3),
        (3, 2),
    ];
    let cases = [20, 84]
        .into_iter()
        .flat_map(|c| kinds.into_iter().map(move |k| (c, k)));
    for (case, (c, (kx, ky))) in cases.enumerate() {
        let dims = [2, c, 9, 8];
        let xd = desc(dims, kx);
        let yd = desc(pd.output_dims(&xd).unwrap(), ky);
        assert_eq!(
            yd.dims(),
            [2, c, 5, 5],
            "ceil mode keeps the overhanging windows"
        );
        // Ties everywhere, −inf, and NaN in about a third of the windows.
        let mut x = int_data(xd.span(), 300 + case as u64);
        for (k, v) in x.iter_mut().enumerate() {
            *v = match *v as i64 {
                -4 => f32::NEG_INFINITY,
                4 if k % 3 == 0 => f32::NAN,
                v => (v % 2) as f32,
            };
        }
        // Channels last for the NHWC kinds (1 and 3), else NCHW; packed for packed y.
        let order = if ky % 2 == 1 {
            Layout::Nhwc
        } else {
            Layout::Nchw
        };
        assert_eq!(pool::indices_layout(&yd), order);
        let packed = TensorDesc::new(DataType::F32, order, yd.dims()).unwrap();
        assert_eq!(indices_strides(&yd), packed.strides());
        if ky < 2 {
            assert_eq!(packed.strides(), yd.strides());
        }
        // The choices in logical (n, c, i, j) order: the reference's for an NCHW-packed y.
        let logical = TensorDesc::new(DataType::F32, Layout::Nchw, yd.dims()).unwrap();
        let want = reference::pool::indices(&pd, &xd, &x, &logical).unwrap();
        let dy = int_data(yd.span(), 400 + case as u64);
        let mut dx = vec![f32::NAN; xd.span()];
        handles[0]
            .2
            .pooling_backward(&pd, Blend::default(), &xd, &x, &yd, &dy, &xd, &mut dx)
            .unwrap();
        for (isa, threads, h) in &handles {
            let what = format!("{c} channels, kinds {kx} {ky} {isa:?} {threads}t");
            let mut y = vec![0.0f32; yd.span()];
            let mut ind = vec![u32::MAX; indices_len(&yd)];
            h.pooling_forward_with_indices(&pd, Blend::default(), &xd, &x, &yd, &mut y, &mut ind)
                .unwrap();
            for (k, o) in packed.offsets().enumerate() {
                assert_eq!(ind[o] as usize, want[k], "{what}: output {k} at {o}");
            }
            let mut dx2 = vec![f32::NAN; xd.span()];
            h.pooling_backward_with_indices(&pd, Blend::default(), &yd, &dy, &ind, &xd, &mut dx2)
                .unwrap();
            assert!(same_bits(&dx, &dx2), "{what}: dx from indices");
        }
    }
    // One output column whose y has channel and column strides both 1: by the rule NCHW,
    // so the packed-channels path (channels-last indices only) gives way to the planes'.
    let xd = TensorDesc::new(DataType::F32, Layout::Nhwc, [1, 16, 5, 2]).unwrap();
    let pd = PoolDesc::new(PoolMode::Max, [3, 2], [2, 2], Padding::symmetric(1, 0)).unwrap();
    let yd = TensorDesc::with_strides(DataType::F32, [1, 16, 3, 1], [48, 1, 16, 1]).unwrap();
    assert_eq!(pool::indices_layout(&yd), Layout::Nchw);
    let x = int_data(xd.span(), 500);
    let logical = TensorDesc::new(DataType::F32, Layout::Nchw, yd.dims()).unwrap();
    let want = reference::pool::indices(&pd, &xd, &x, &logical).unwrap();
    for (isa, threads, h) in &handles {
        let mut y = vec![0.0f32; yd.span()];
        let mut ind = vec![u32::MAX; indices_len(&yd)];
        h.pooling_forward_with_indices(&pd, Blend::default(), &xd, &x, &yd, &mut y, &mut ind)
            .unwrap();
        let got: Vec<usize> = ind.iter().map(|&i| i as usize).collect();
        assert_eq!(got, want, "{isa:?} {threads}t");
    }
}

/// Max backward of planes (NCHW and strided) over a sweep of windows, strides, paddings
/// and widths, on data full of ties, NaN and −inf: exactly the reference's routing, with
/// identical bits on 1 and 2 threads of each ISA.
#[test]
fn max_backward_planes_sweep() {
    let handles = handles();
    let mut rng = Rng(0x5eed);
    let mut case = 0u64;
    for k in [[1, 1], [2, 2], [3, 3], [1, 4], [4, 2], [3, 1]] {
        for s in [[1, 1], [2, 2], [1, 3], [3, 2]] {
            for w in [1usize, 2, 5, 8, 13] {
                if k[1] > w + 2 {
                    continue;
                }
                let pad = |rng: &mut Rng, k: usize| rng.range(0, k as i64 - 1).min(2);
                let padding = Padding {
                    top: pad(&mut rng, k[0]),
                    bottom: pad(&mut rng, k[0]),
                    left: pad(&mut rng, k[1]),
                    right: pad(&mut rng, k[1]),
                };
                let pd = PoolDesc::new(PoolMode::Max, k, s, padding)
                    .unwrap()
                    .with_ceil_mode(case % 3 == 1);
                let dims = [1, 3, rng.range(4, 9) as usize, w];
                let kx = if case.is_multiple_of(2) { 0 } else { 2 };
                let xd = desc(dims, kx);
                let Ok(od) = pd.output_dims(&xd) else {
                    continue;
                };
                let yd = desc(od, 2 - kx);
                let mut x = int_data(xd.span(), case);
                for v in x.iter_mut() {
                    *v = match *v as i64 {
                        -4 => f32::NEG_INFINITY,
                        4 if case % 4 == 3 => f32::NAN,
                        v => (v % 2) as f32,
                    };
                }
                let dy = int_data(yd.span(), case + 1);
                let (a, b) = BLENDS[case as usize % BLENDS.len()];
                let blend = Blend::new(a, b);
                let dx0 = prior(xd.span(), b, case + 2);
                let r =
                    reference::pool::backward(&pd, blend, &xd, &x, &yd, &dy, &xd, &dx0).unwrap();
                let mut first: Option<Vec<f32>> = None;
                for (isa, threads, h) in &handles {
                    let what = format!("case {case} {pd:?} x{dims:?} {isa:?} {threads}t");
                    let mut dx = dx0.clone();
                    h.pooling_backward(&pd, blend, &xd, &x, &yd, &dy, &xd, &mut dx)
                        .unwrap();
                    for o in xd.offsets() {
                        assert_eq!(dx[o] as f64, r[o], "{what}: at {o}");
                    }
                    // The indexed pair: the reference's choices, the same dx.
                    let mut y = vec![0.0f32; yd.span()];
                    let mut ind = vec![u32::MAX; indices_len(&yd)];
                    h.pooling_forward_with_indices(&pd, blend, &xd, &x, &yd, &mut y, &mut ind)
                        .unwrap();
                    let want = reference::pool::indices(&pd, &xd, &x, &yd).unwrap();
                    assert!(
                        ind.iter().zip(&want).all(|(&a, &b)| a as usize == b),
                        "{what}: indices {ind:?}, the reference's {want:?}"
                    );
                    let mut dx2 = dx0.clone();
                    h.pooling_backward_with_indices(&pd, blend, &yd, &dy, &ind, &xd, &mut dx2)
                        .unwrap();
                    assert!(same_bits(&dx, &dx2), "{what}: dx from indices differs");
                    match &first {
                        Some(f) => assert!(same_bits(f, &dx), "{what}: bits differ"),
                        None => first = Some(dx),
                    }
                }
                case += 1;
            }
        }
    }
    assert!(case > 60, "{case} cases");
}

/// The planes' backward from indices on a dx of at least 8 MiB with the plain blend: each
/// plane summed in a cached accumulator and streamed out ([`autodnn::layers`]' non-temporal
/// copy where AVX-512 runs), dx starting off a cache line; the exact sums, on every
/// instruction set and thread count.
#[test]
fn indexed_backward_streams_large_planes() {
    let pd = PoolDesc::new(PoolMode::Max, [3, 3], [2, 2], Padding::symmetric(1, 1)).unwrap();
    let dims = [1, 8, 512, 520];
    let [n, c, h, w] = dims;
    assert!(n * c * h * w * 4 >= 8 << 20);
    let dxd = desc(dims, 0);
    let yd = desc(pd.output_dims(&dxd).unwrap(), 0);
    let [_, _, oh, ow] = yd.dims();
    let dy = int_data(yd.span(), 5);
    let mut rng = Rng(0x5713);
    let ind: Vec<u32> = (0..n * c * oh * ow)
        .map(|_| rng.range(0, (h * w) as i64 - 1) as u32)
        .collect();
    let mut want = vec![0.0f64; n * c * h * w];
    for (k, &at) in ind.iter().enumerate() {
        want[k / (oh * ow) * h * w + at as usize] += dy[k] as f64;
    }
    for (isa, threads, hd) in handles() {
        // One element in: dx starts 4 bytes past the allocation's alignment.
        let mut buf = vec![f32::NAN; dxd.span() + 1];
        hd.pooling_backward_with_indices(
            &pd,
            Blend::default(),
            &yd,
            &dy,
            &ind,
            &dxd,
            &mut buf[1..],
        )
        .unwrap();
        for (o, (&g, &w)) in buf[1..].iter().zip(&want).enumerate() {
            assert_eq!(g as f64, w, "{isa:?} {threads}t: dx[{o}]");
        }
    }
}
