//! Batch normalization (inference, training, backward), layer normalization (forward,
//! backward) and batch-norm folding against the f64 references (`autodnn::reference::norm`):
//! random shapes, NCHW, NHWC, padded and element-strided tensors, alpha/beta blends (beta = 0
//! ignoring NaN in the prior output), every available ISA, 1 and 2 threads with identical
//! bits; backward passes against central finite differences on tiny cases; running statistics
//! exactly as the documented formula; folding through a real convolution; ResNet-50 shapes;
//! refused inputs naming the field.
//!
//! Bounds: max|out − ref| ≤ 1e-5 · max(max|ref|, 1) over the output (normwise), for every
//! output (y, dx, dγ, dβ, saved statistics); folding 1e-5 normwise; finite differences 2e-3.

mod common;

use autodnn::layers::norm::{
    self, BatchNorm, BatchNormProblem, LayerNorm, ParamGrads, RunningStats, SavedStats,
    SavedStatsMut,
};
use autodnn::layers::Blend;
use autodnn::reference::norm as rn;
use autodnn::{DataType, Error, Handle, Layout, TensorDesc};
use common::{int_data, isa_handles as handles, problem, real_data, Rng};

const TOL: f64 = 1e-5;
const EPS: f64 = 1e-5;

/// The tensors of dimensions `dims` the sweeps run on: packed NCHW and NHWC, padded rows or
/// positions, and a tensor whose elements are two apart (no contiguous run at all).
fn descs(dims: [usize; 4]) -> Vec<(&'static str, TensorDesc)> {
    let [n, c, h, w] = dims;
    let f = DataType::F32;
    let pw = w + 3;
    let ph = h + 1;
    vec![
        ("nchw", TensorDesc::new(f, Layout::Nchw, dims).unwrap()),
        ("nhwc", TensorDesc::new(f, Layout::Nhwc, dims).unwrap()),
        (
            "nchw-padded",
            TensorDesc::with_strides(f, dims, [c * ph * pw, ph * pw, pw, 1]).unwrap(),
        ),
        (
            "nhwc-padded",
            TensorDesc::with_strides(f, dims, [h * w * (c + 2) + 5, 1, w * (c + 2), c + 2])
                .unwrap(),
        ),
        (
            "strided",
            TensorDesc::with_strides(f, dims, [2 * c * h * w, 2 * h * w, 2 * w, 2]).unwrap(),
        ),
    ]
    .into_iter()
    .take(if n * c * h * w > 200_000 { 2 } else { 5 })
    .collect()
}

/// max|out − ref| ≤ tol · max(max|ref|, 1) over the tensor's elements.
fn check(d: &TensorDesc, out: &[f32], r: &[f64], tol: f64, what: &str) {
    let (mut diff, mut max) = (0.0f64, 0.0f64);
    for o in d.offsets() {
        assert!(out[o].is_finite(), "{what}: out[{o}] = {}", out[o]);
        diff = diff.max((out[o] as f64 - r[o]).abs());
        max = max.max(r[o].abs());
    }
    assert!(
        diff <= tol * max.max(1.0),
        "{what}: max|out − ref| = {diff:e} > {tol:e} · max(max|ref| = {max}, 1)"
    );
}

fn check_vec(out: &[f32], r: &[f64], tol: f64, what: &str) {
    let d = TensorDesc::new(DataType::F32, Layout::Nchw, [1, out.len(), 1, 1]).unwrap();
    check(&d, out, r, tol, what);
}

/// Random data with a per-channel offset and scale (means far from 0 test the shifted sums).
fn data(d: &TensorDesc, seed: u64) -> Vec<f32> {
    let mut x = real_data(d.span(), seed, 1000);
    let mut rng = Rng(seed ^ 77);
    let shift: Vec<f32> = (0..d.c())
        .map(|_| rng.range(-20, 20) as f32 / 4.0)
        .collect();
    let scale: Vec<f32> = (0..d.c()).map(|_| rng.range(1, 12) as f32 / 4.0).collect();
    let [n, c, h, w] = d.dims();
    for b in 0..n {
        for k in 0..c {
            for i in 0..h {
                for j in 0..w {
                    let o = d.offset(b, k, i, j);
                    x[o] = x[o] * scale[k] + shift[k];
                }
            }
        }
    }
    x
}

fn params(c: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let g: Vec<f32> = real_data(c, seed, 64).iter().map(|v| v + 1.5).collect();
    (g, real_data(c, seed + 1, 64))
}

const BLENDS: [(f32, f32); 3] = [(1.0, 0.0), (2.5, 0.0), (0.5, 1.5)];

/// A prior output: NaN where beta = 0 (it must not be read), random otherwise.
fn prior(d: &TensorDesc, beta: f32, seed: u64) -> Vec<f32> {
    if beta == 0.0 {
        vec![f32::NAN; d.span()]
    } else {
        real_data(d.span(), seed, 100)
    }
}

const SHAPES: [[usize; 4]; 7] = [
    [2, 3, 5, 7],
    [1, 17, 4, 9],
    [3, 1, 6, 5],
    [2, 40, 3, 3],
    [4, 5, 1, 1],
    [2, 5, 70, 130], // several pieces per channel and per sample: threads split them
    [2, 16, 16, 17], // NCHW planes a channel at a time (both passes of a channel together)
];

fn same_bits(a: &[f32], b: &[f32], what: &str) {
    assert!(
        a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
        "{what}: 1 and 2 threads differ"
    );
}

#[test]
fn batch_norm_inference_matches_reference() {
    let hs = handles();
    let bn = BatchNorm::new(EPS).unwrap();
    for (si, &dims) in SHAPES.iter().enumerate() {
        let c = dims[1];
        let (g, b) = params(c, si as u64);
        let mean: Vec<f32> = real_data(c, 9 + si as u64, 16)
            .iter()
            .map(|v| v * 3.0)
            .collect();
        let var: Vec<f32> = real_data(c, 19, 16)
            .iter()
            .map(|v| v.abs() * 4.0 + 0.1)
            .collect();
        for (ln, d) in descs(dims) {
            let x = data(&d, si as u64 * 31 + 1);
            for (bi, &(alpha, beta)) in BLENDS.iter().enumerate() {
                let blend = Blend::new(alpha, beta);
                let p = prior(&d, beta, 5);
                let r = rn::batch_norm_inference(blend, &d, &x, &d, &p, &g, &b, &mean, &var, EPS)
                    .unwrap();
                let mut first: Option<Vec<f32>> = None;
                for (isa, t, h) in &hs {
                    let what = format!("{dims:?} {ln} blend {bi} {isa:?} {t}t");
                    let mut y = p.clone();
                    h.batch_norm_forward_inference(
                        &bn, blend, &d, &x, &d, &mut y, &g, &b, &mean, &var,
                    )
                    .unwrap();
                    check(&d, &y, &r, TOL, &what);
                    match (&first, t) {
                        (Some(f), 2) => same_bits(f, &y, &what),
                        _ => first = Some(y),
                    }
                }
            }
        }
    }
}

#[test]
fn batch_norm_training_and_backward_match_reference() {
    let hs = handles();
    let bn = BatchNorm::new(1e-3).unwrap();
    for (si, &dims) in SHAPES.iter().enumerate() {
        let c = dims[1];
        let (g, b) = params(c, si as u64 + 3);
        for (ln, d) in descs(dims) {
            let x = data(&d, si as u64 * 7 + 2);
            let dy = real_data(d.span(), si as u64 + 100, 500);
            for (bi, &(alpha, beta)) in BLENDS.iter().enumerate() {
                let blend = Blend::new(alpha, beta);
                let pblend = Blend::new(beta + 1.0, alpha - 1.0);
                let p = prior(&d, beta, 6);
                let r = rn::batch_norm_training(blend, &d, &x, &d, &p, &g, &b, 1e-3).unwrap();
                let (pg, pb) = (real_data(c, 3, 10), real_data(c, 4, 10));
                let mut firsts: Option<[Vec<f32>; 5]> = None;
                for (isa, t, h) in &hs {
                    let what = format!("{dims:?} {ln} blend {bi} {isa:?} {t}t");
                    let mut y = p.clone();
                    let (mut sm, mut si_) = (vec![0.0; c], vec![0.0; c]);
                    let saved = SavedStatsMut {
                        mean: &mut sm,
                        inv_std: &mut si_,
                    };
                    h.batch_norm_forward_training(
                        &bn,
                        blend,
                        &d,
                        &x,
                        &d,
                        &mut y,
                        &g,
                        &b,
                        None,
                        Some(saved),
                    )
                    .unwrap();
                    check(&d, &y, &r.y, TOL, &format!("y {what}"));
                    check_vec(&sm, &r.mean, TOL, &format!("saved mean {what}"));
                    check_vec(&si_, &r.inv_std, TOL, &format!("saved inv_std {what}"));
                    // Backward from the saved statistics.
                    let dxp = prior(&d, beta, 8);
                    let rb = rn::batch_norm_backward(
                        blend,
                        pblend,
                        &d,
                        &x,
                        &d,
                        &dy,
                        &d,
                        (&dxp, &pg, &pb),
                        &g,
                        &sm,
                        &si_,
                    )
                    .unwrap();
                    let mut dx = dxp.clone();
                    let (mut dg, mut db) = (pg.clone(), pb.clone());
                    let saved = SavedStats {
                        mean: &sm,
                        inv_std: &si_,
                    };
                    let grads = ParamGrads {
                        dgamma: &mut dg,
                        dbeta: &mut db,
                    };
                    h.batch_norm_backward(
                        &bn,
                        blend,
                        pblend,
                        &d,
                        &x,
                        &d,
                        &dy,
                        &d,
                        &mut dx,
                        &g,
                        Some(saved),
                        grads,
                    )
                    .unwrap();
                    check(&d, &dx, &rb.dx, TOL, &format!("dx {what}"));
                    check_vec(&dg, &rb.dgamma, TOL, &format!("dgamma {what}"));
                    check_vec(&db, &rb.dbeta, TOL, &format!("dbeta {what}"));
                    let outs = [y, sm, si_, dx, dg];
                    match (&firsts, t) {
                        (Some(f), 2) => {
                            for (a, b) in f.iter().zip(&outs) {
                                same_bits(a, b, &what);
                            }
                        }
                        _ => firsts = Some(outs),
                    }
                }
            }
            // Backward without saved statistics: recomputed from x.
            let h = &hs[0].2;
            let r =
                rn::batch_norm_training(Blend::default(), &d, &x, &d, &[], &g, &b, 1e-3).unwrap();
            let m32: Vec<f32> = r.mean.iter().map(|&v| v as f32).collect();
            let i32_: Vec<f32> = r.inv_std.iter().map(|&v| v as f32).collect();
            let z = vec![0.0; c];
            let rb = rn::batch_norm_backward(
                Blend::default(),
                Blend::default(),
                &d,
                &x,
                &d,
                &dy,
                &d,
                (&[], &z, &z),
                &g,
                &m32,
                &i32_,
            )
            .unwrap();
            let mut dx = vec![f32::NAN; d.span()];
            let (mut dg, mut db) = (vec![f32::NAN; c], vec![f32::NAN; c]);
            h.batch_norm_backward(
                &bn,
                Blend::default(),
                Blend::default(),
                &d,
                &x,
                &d,
                &dy,
                &d,
                &mut dx,
                &g,
                None,
                ParamGrads {
                    dgamma: &mut dg,
                    dbeta: &mut db,
                },
            )
            .unwrap();
            check(
                &d,
                &dx,
                &rb.dx,
                TOL,
                &format!("dx recomputed {dims:?} {ln}"),
            );
            check_vec(&dg, &rb.dgamma, TOL, "dgamma recomputed");
            check_vec(&db, &rb.dbeta, TOL, "dbeta recomputed");
        }
    }
}

/// Batch-norm training forward (no blend) on one tensor: y, the saved mean and 1/σ.
fn train(
    h: &Handle,
    bn: &BatchNorm,
    d: &TensorDesc,
    x: &[f32],
    g: &[f32],
    b: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let c = d.c();
    let (mut y, mut m, mut i) = (vec![0.0; d.span()], vec![0.0; c], vec![0.0; c]);
    let saved = SavedStatsMut {
        mean: &mut m,
        inv_std: &mut i,
    };
    h.batch_norm_forward_training(
        bn,
        Blend::default(),
        d,
        x,
        d,
        &mut y,
        g,
        b,
        None,
        Some(saved),
    )
    .unwrap();
    (y, m, i)
}

/// The statistics sums run in f32 lanes per block of 256 values and fall back to f64 when
/// those come out not finite: values whose squares pass f32's range (3·10^19) still give the
/// reference's statistics and gradients, on planes (NCHW) and channels-last rows; a NaN in a
/// channel makes that channel's statistics NaN and leaves the others exact.
#[test]
fn statistics_of_values_beyond_the_f32_squares_and_of_nan() {
    let bn = BatchNorm::new(1e-3).unwrap();
    let dims = [2, 3, 20, 20];
    for (ln, d) in descs(dims).into_iter().take(2) {
        let mut x = data(&d, 41);
        x[d.offset(1, 1, 7, 3)] = 3e19;
        x[d.offset(0, 1, 2, 9)] = -1e20;
        let dy = real_data(d.span(), 42, 500);
        let (g, b) = params(3, 43);
        let r = rn::batch_norm_training(Blend::default(), &d, &x, &d, &[], &g, &b, 1e-3).unwrap();
        let (sm, si): (Vec<f32>, Vec<f32>) = (
            r.mean.iter().map(|&v| v as f32).collect(),
            r.inv_std.iter().map(|&v| v as f32).collect(),
        );
        let z = vec![0.0; 3];
        let rg = rn::batch_norm_backward(
            Blend::default(),
            Blend::default(),
            &d,
            &x,
            &d,
            &dy,
            &d,
            (&[], &z, &z),
            &g,
            &sm,
            &si,
        )
        .unwrap();
        for (isa, t, h) in &handles() {
            let what = format!("{ln} {isa:?} {t}t");
            let (y, m, i) = train(h, &bn, &d, &x, &g, &b);
            check(&d, &y, &r.y, TOL, &what);
            check_vec(&m, &r.mean, TOL, &what);
            check_vec(&i, &r.inv_std, TOL, &what);
            let (mut dx, mut dg, mut db) = (vec![0.0; d.span()], vec![0.0; 3], vec![0.0; 3]);
            let grads = ParamGrads {
                dgamma: &mut dg,
                dbeta: &mut db,
            };
            h.batch_norm_backward(
                &bn,
                Blend::default(),
                Blend::default(),
                &d,
                &x,
                &d,
                &dy,
                &d,
                &mut dx,
                &g,
                None,
                grads,
            )
            .unwrap();
            check(&d, &dx, &rg.dx, TOL, &what);
            check_vec(&dg, &rg.dgamma, TOL, &what);
            check_vec(&db, &rg.dbeta, TOL, &what);
        }
        // A NaN in channel 2: its statistics are NaN, the others as before.
        x[d.offset(1, 2, 19, 19)] = f32::NAN;
        let (_, m, i) = train(&handles()[0].2, &bn, &d, &x, &g, &b);
        assert!(m[2].is_nan() && i[2].is_nan(), "{ln}: {m:?} {i:?}");
        check_vec(&m[..2], &r.mean[..2], TOL, ln);
        check_vec(&i[..2], &r.inv_std[..2], TOL, ln);
    }
}

#[test]
fn running_statistics_follow_the_formula_exactly() {
    // Integer data, M = N·H·W = 32 (a power of two): the batch mean and variance are exact
    // in f64, so the update must equal the documented expression bit for bit.
    let h = Handle::with_threads(2).unwrap();
    let bn = BatchNorm::new(EPS).unwrap();
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let d = TensorDesc::new(DataType::F32, layout, [2, 6, 4, 4]).unwrap();
        let x = int_data(d.span(), 42);
        let r =
            rn::batch_norm_training(Blend::default(), &d, &x, &d, &[], &[1.0; 6], &[0.0; 6], EPS)
                .unwrap();
        for f in [0.0, 0.1, 0.5, 1.0] {
            let mut rm: Vec<f32> = real_data(6, 1, 8);
            let mut rv: Vec<f32> = real_data(6, 2, 8).iter().map(|v| v.abs() + 1.0).collect();
            if f == 1.0 {
                rm[0] = f32::NAN; // f = 1 never reads the running values
                rv[0] = f32::NAN;
            }
            let want: Vec<(f32, f32)> = (0..6)
                .map(|k| {
                    let uvar = r.var[k] * 32.0 / 31.0;
                    if f == 1.0 {
                        (r.mean[k] as f32, uvar as f32)
                    } else {
                        (
                            ((1.0 - f) * rm[k] as f64 + f * r.mean[k]) as f32,
                            ((1.0 - f) * rv[k] as f64 + f * uvar) as f32,
                        )
                    }
                })
                .collect();
            let mut y = vec![0.0; d.span()];
            h.batch_norm_forward_training(
                &bn,
                Blend::default(),
                &d,
                &x,
                &d,
                &mut y,
                &[1.0; 6],
                &[0.0; 6],
                Some(RunningStats {
                    mean: &mut rm,
                    var: &mut rv,
                    factor: f,
                }),
                None,
            )
            .unwrap();
            for k in 0..6 {
                assert_eq!((rm[k], rv[k]), want[k], "{layout:?} f {f} channel {k}");
            }
        }
    }
}

#[test]
fn layer_norm_matches_reference() {
    let hs = handles();
    let lnd = LayerNorm::new(1e-5).unwrap();
    for (si, &dims) in SHAPES.iter().enumerate() {
        let [n, c, hh, w] = dims;
        let chw = c * hh * w;
        for (ln, d) in descs(dims) {
            let x = data(&d, si as u64 + 50);
            let dy = real_data(d.span(), si as u64 + 60, 300);
            for (affine, &(alpha, beta)) in [true, false].iter().zip(BLENDS.iter().cycle()) {
                let gv: Vec<f32> = real_data(chw, 70, 64).iter().map(|v| v + 1.0).collect();
                let bv = real_data(chw, 71, 64);
                let (g, b) = if *affine {
                    (Some(&gv[..]), Some(&bv[..]))
                } else {
                    (None, None)
                };
                for &(alpha, beta) in &[(alpha, beta), (0.5, 1.5)] {
                    let blend = Blend::new(alpha, beta);
                    let pblend = Blend::new(1.0, beta);
                    let p = prior(&d, beta, 9);
                    let r = rn::layer_norm_forward(blend, &d, &x, &d, &p, g, b, 1e-5).unwrap();
                    let (pg, pb) = (real_data(chw, 3, 10), real_data(chw, 4, 10));
                    let mut firsts: Option<[Vec<f32>; 5]> = None;
                    for (isa, t, h) in &hs {
                        let what =
                            format!("{dims:?} {ln} affine {affine} {alpha} {beta} {isa:?} {t}t");
                        let mut y = p.clone();
                        let (mut sm, mut sr) = (vec![0.0; n], vec![0.0; n]);
                        h.layer_norm_forward(
                            &lnd,
                            blend,
                            &d,
                            &x,
                            &d,
                            &mut y,
                            g,
                            b,
                            Some(SavedStatsMut {
                                mean: &mut sm,
                                inv_std: &mut sr,
                            }),
                        )
                        .unwrap();
                        check(&d, &y, &r.y, TOL, &format!("y {what}"));
                        check_vec(&sm, &r.mean, TOL, &format!("mean {what}"));
                        check_vec(&sr, &r.rstd, TOL, &format!("rstd {what}"));
                        let dxp = prior(&d, beta, 10);
                        let rb = rn::layer_norm_backward(
                            blend,
                            pblend,
                            &d,
                            &x,
                            &d,
                            &dy,
                            &d,
                            (&dxp, &pg, &pb),
                            g,
                            &sm,
                            &sr,
                        )
                        .unwrap();
                        let mut dx = dxp.clone();
                        let (mut dg, mut db) = (pg.clone(), pb.clone());
                        h.layer_norm_backward(
                            blend,
                            pblend,
                            &d,
                            &x,
                            &d,
                            &dy,
                            &d,
                            &mut dx,
                            g,
                            SavedStats {
                                mean: &sm,
                                inv_std: &sr,
                            },
                            Some(ParamGrads {
                                dgamma: &mut dg,
                                dbeta: &mut db,
                            }),
                        )
                        .unwrap();
                        check(&d, &dx, &rb.dx, TOL, &format!("dx {what}"));
                        check_vec(&dg, &rb.dgamma, TOL, &format!("dgamma {what}"));
                        check_vec(&db, &rb.dbeta, TOL, &format!("dbeta {what}"));
                        let outs = [y, sm, sr, dx, dg];
                        match (&firsts, t) {
                            (Some(f), 2) => {
                                for (a, b) in f.iter().zip(&outs) {
                                    same_bits(a, b, &what);
                                }
                            }
                            _ => firsts = Some(outs),
                        }
                    }
                }
            }
        }
    }
}

/// A loss of (x, γ, β).
type Loss<'a> = &'a dyn Fn(&[f32], &[f32], &[f32]) -> f64;

/// Checks gradients against central differences of L(x, γ, β) = Σ dy·y in f64 (the
/// reference).
fn fd_check(loss: Loss<'_>, x: &[f32], g: &[f32], b: &[f32], grads: [&[f32]; 3], what: &str) {
    let hstep = 1.0 / 128.0; // exact in f32 next to the test's values
    let inputs = [x, g, b];
    for (which, (&input, &grad)) in inputs.iter().zip(&grads).enumerate() {
        for i in 0..input.len() {
            let mut plus: Vec<Vec<f32>> = inputs.iter().map(|v| v.to_vec()).collect();
            let mut minus = plus.clone();
            plus[which][i] += hstep;
            minus[which][i] -= hstep;
            let fd = (loss(&plus[0], &plus[1], &plus[2]) - loss(&minus[0], &minus[1], &minus[2]))
                / (2.0 * hstep as f64);
            let an = grad[i] as f64;
            assert!(
                (fd - an).abs() <= 2e-3 * fd.abs().max(1.0),
                "{what}: input {which} element {i}: finite difference {fd} vs {an}"
            );
        }
    }
}

#[test]
fn backward_passes_match_finite_differences() {
    let h = Handle::with_threads(1).unwrap();
    let d = TensorDesc::new(DataType::F32, Layout::Nchw, [2, 2, 2, 3]).unwrap();
    let x: Vec<f32> = real_data(d.span(), 5, 16).iter().map(|v| v * 2.0).collect();
    let dy = real_data(d.span(), 6, 16);
    // Batch norm (training statistics).
    let bn = BatchNorm::new(1e-3).unwrap();
    let (g, b) = params(2, 7);
    let loss = |x: &[f32], g: &[f32], b: &[f32]| {
        let r = rn::batch_norm_training(Blend::default(), &d, x, &d, &[], g, b, 1e-3).unwrap();
        r.y.iter().zip(&dy).map(|(y, &w)| y * w as f64).sum::<f64>()
    };
    let (mut sm, mut si) = (vec![0.0; 2], vec![0.0; 2]);
    let mut y = vec![0.0; d.span()];
    h.batch_norm_forward_training(
        &bn,
        Blend::default(),
        &d,
        &x,
        &d,
        &mut y,
        &g,
        &b,
        None,
        Some(SavedStatsMut {
            mean: &mut sm,
            inv_std: &mut si,
        }),
    )
    .unwrap();
    let mut dx = vec![0.0; d.span()];
    let (mut dg, mut db) = (vec![0.0; 2], vec![0.0; 2]);
    h.batch_norm_backward(
        &bn,
        Blend::default(),
        Blend::default(),
        &d,
        &x,
        &d,
        &dy,
        &d,
        &mut dx,
        &g,
        Some(SavedStats {
            mean: &sm,
            inv_std: &si,
        }),
        ParamGrads {
            dgamma: &mut dg,
            dbeta: &mut db,
        },
    )
    .unwrap();
    fd_check(&loss, &x, &g, &b, [&dx, &dg, &db], "batch norm");
    // Layer norm with elementwise γ, β.
    let lnd = LayerNorm::new(1e-4).unwrap();
    let g: Vec<f32> = real_data(12, 8, 16).iter().map(|v| v + 1.0).collect();
    let b = real_data(12, 9, 16);
    let loss = |x: &[f32], g: &[f32], b: &[f32]| {
        let r = rn::layer_norm_forward(Blend::default(), &d, x, &d, &[], Some(g), Some(b), 1e-4)
            .unwrap();
        r.y.iter().zip(&dy).map(|(y, &w)| y * w as f64).sum::<f64>()
    };
    let (mut sm, mut sr) = (vec![0.0; 2], vec![0.0; 2]);
    h.layer_norm_forward(
        &lnd,
        Blend::default(),
        &d,
        &x,
        &d,
        &mut y,
        Some(&g),
        Some(&b),
        Some(SavedStatsMut {
            mean: &mut sm,
            inv_std: &mut sr,
        }),
    )
    .unwrap();
    let (mut dg, mut db) = (vec![0.0; 12], vec![0.0; 12]);
    h.layer_norm_backward(
        Blend::default(),
        Blend::default(),
        &d,
        &x,
        &d,
        &dy,
        &d,
        &mut dx,
        Some(&g),
        SavedStats {
            mean: &sm,
            inv_std: &sr,
        },
        Some(ParamGrads {
            dgamma: &mut dg,
            dbeta: &mut db,
        }),
    )
    .unwrap();
    fd_check(&loss, &x, &g, &b, [&dx, &dg, &db], "layer norm");
}

/// conv(x, w) + bias per output channel, by the library's direct convolution.
fn conv_bias(h: &Handle, p: &autodnn::ConvProblem, x: &[f32], w: &[f32], bias: &[f32]) -> Vec<f32> {
    let mut y = vec![0.0; p.y().span()];
    h.conv_forward(p, "direct", x, w, &mut y).unwrap();
    let yd = p.y();
    let [n, k, oh, ow] = yd.dims();
    for b in 0..n {
        for c in 0..k {
            for i in 0..oh {
                for j in 0..ow {
                    y[yd.offset(b, c, i, j)] += bias[c];
                }
            }
        }
    }
    y
}

#[test]
fn folding_matches_convolution_then_batch_norm() {
    let h = Handle::with_threads(2).unwrap();
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let p = problem("mb1ic8ih10oc16oh10kh3ph1", layout);
        let x = real_data(p.x().span(), 1, 100);
        let w = real_data(p.w().elements(), 2, 100);
        let bias = real_data(16, 3, 10);
        let (g, b) = params(16, 4);
        let mean = real_data(16, 5, 10);
        let var: Vec<f32> = real_data(16, 6, 10)
            .iter()
            .map(|v| v.abs() + 0.25)
            .collect();
        let (s, t) = params(16, 8);
        let y = conv_bias(&h, &p, &x, &w, &bias);
        let bn = BatchNorm::new(EPS).unwrap();
        let yd = p.y();
        let mut want = vec![0.0; yd.span()];
        h.batch_norm_forward_inference(
            &bn,
            Blend::default(),
            yd,
            &y,
            yd,
            &mut want,
            &g,
            &b,
            &mean,
            &var,
        )
        .unwrap();
        let (mut w2, mut b2) = (w.clone(), bias.clone());
        norm::fold_batch_norm(p.w(), &mut w2, &mut b2, &g, &b, &mean, &var, EPS).unwrap();
        let got = conv_bias(&h, &p, &x, &w2, &b2);
        let r: Vec<f64> = want.iter().map(|&v| v as f64).collect();
        check(yd, &got, &r, 1e-5, &format!("fold {layout:?}"));
        // Then a Scale layer: folded separately, and at once with the batch norm.
        let r2: Vec<f64> =
            yd.offsets()
                .enumerate()
                .fold(vec![0.0; yd.span()], |mut acc, (i, o)| {
                    let k = (i / (yd.h() * yd.w())) % yd.c();
                    acc[o] = want[o] as f64 * s[k] as f64 + t[k] as f64;
                    acc
                });
        norm::fold_scale(p.w(), &mut w2, &mut b2, &s, &t).unwrap();
        let got = conv_bias(&h, &p, &x, &w2, &b2);
        check(yd, &got, &r2, 1e-5, &format!("fold + scale {layout:?}"));
        let (mut w3, mut b3) = (w.clone(), bias.clone());
        norm::fold_batch_norm_scale(p.w(), &mut w3, &mut b3, &g, &b, &mean, &var, EPS, &s, &t)
            .unwrap();
        let got = conv_bias(&h, &p, &x, &w3, &b3);
        check(yd, &got, &r2, 1e-5, &format!("fold bn+scale {layout:?}"));
        // Refusals name the field.
        let e = norm::fold_batch_norm(p.w(), &mut w3, &mut b3[..15], &g, &b, &mean, &var, EPS)
            .unwrap_err();
        assert!(
            matches!(e, Error::BadParam { ref field, .. } if field == "bias"),
            "{e}"
        );
        let e = norm::fold_scale(p.w(), &mut w3, &mut b3, &s[..3], &t).unwrap_err();
        assert!(
            matches!(e, Error::BadParam { ref field, .. } if field == "scale"),
            "{e}"
        );
        let e = norm::fold_batch_norm(p.w(), &mut w3[..5], &mut b3, &g, &b, &mean, &var, EPS)
            .unwrap_err();
        assert!(
            matches!(e, Error::BufferTooSmall { ref field, .. } if field == "w"),
            "{e}"
        );
    }
}

#[test]
fn resnet50_shapes() {
    let hs: Vec<Handle> = [1, 2].map(|t| Handle::with_threads(t).unwrap()).into();
    let bn = BatchNorm::new(EPS).unwrap();
    // [3, 256, 56, 56]: a dx past 8 MiB, written with non-temporal stores.
    for dims in [
        [1, 64, 56, 56],
        [1, 256, 56, 56],
        [2, 2048, 7, 7],
        [3, 256, 56, 56],
    ] {
        let c = dims[1];
        let (g, b) = params(c, 1);
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let d = TensorDesc::new(DataType::F32, layout, dims).unwrap();
            let x = data(&d, 3);
            let dy = real_data(d.span(), 4, 1000);
            let r =
                rn::batch_norm_training(Blend::default(), &d, &x, &d, &[], &g, &b, EPS).unwrap();
            let mut outs = Vec::new();
            for h in &hs {
                let what = format!("{dims:?} {layout:?} {}t", h.threads());
                let mut y = vec![f32::NAN; d.span()];
                let (mut sm, mut si) = (vec![0.0; c], vec![0.0; c]);
                h.batch_norm_forward_training(
                    &bn,
                    Blend::default(),
                    &d,
                    &x,
                    &d,
                    &mut y,
                    &g,
                    &b,
                    None,
                    Some(SavedStatsMut {
                        mean: &mut sm,
                        inv_std: &mut si,
                    }),
                )
                .unwrap();
                check(&d, &y, &r.y, TOL, &what);
                let mut dx = vec![f32::NAN; d.span()];
                let (mut dg, mut db) = (vec![0.0; c], vec![0.0; c]);
                h.batch_norm_backward(
                    &bn,
                    Blend::default(),
                    Blend::default(),
                    &d,
                    &x,
                    &d,
                    &dy,
                    &d,
                    &mut dx,
                    &g,
                    Some(SavedStats {
                        mean: &sm,
                        inv_std: &si,
                    }),
                    ParamGrads {
                        dgamma: &mut dg,
                        dbeta: &mut db,
                    },
                )
                .unwrap();
                if h.threads() == 1 {
                    let rb = rn::batch_norm_backward(
                        Blend::default(),
                        Blend::default(),
                        &d,
                        &x,
                        &d,
                        &dy,
                        &d,
                        (&[], &[], &[]),
                        &g,
                        &sm,
                        &si,
                    )
                    .unwrap();
                    check(&d, &dx, &rb.dx, TOL, &format!("dx {what}"));
                    check_vec(&dg, &rb.dgamma, TOL, &format!("dgamma {what}"));
                    check_vec(&db, &rb.dbeta, TOL, &format!("dbeta {what}"));
                }
                outs.push([y, dx, dg, db]);
            }
            for (a, b) in outs[0].iter().zip(&outs[1]) {
                same_bits(a, b, &format!("{dims:?} {layout:?}"));
            }
        }
    }
}

fn field_of(e: &Error) -> String {
    match e {
        Error::BadParam { field, .. } | Error::BufferTooSmall { field, .. } => field.clone(),
        other => format!("{other}"),
    }
}

#[test]
fn bad_input_is_refused_naming_the_field() {
    let h = Handle::with_threads(1).unwrap();
    for eps in [9.9e-6, 0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert_eq!(field_of(&BatchNorm::new(eps).unwrap_err()), "epsilon");
    }
    for eps in [0.0, -1e-3, f64::NAN] {
        assert_eq!(field_of(&LayerNorm::new(eps).unwrap_err()), "epsilon");
    }
    let bn = BatchNorm::new(EPS).unwrap();
    let d = TensorDesc::new(DataType::F32, Layout::Nchw, [2, 3, 2, 2]).unwrap();
    let d2 = TensorDesc::new(DataType::F32, Layout::Nchw, [2, 4, 2, 2]).unwrap();
    let x = vec![1.0; d.span()];
    let mut y = vec![0.0; d.span()];
    let p3 = [1.0f32; 3];
    let inf = |g: &[f32], v: &[f32], yd: &TensorDesc, x: &[f32], y: &mut [f32]| {
        h.batch_norm_forward_inference(&bn, Blend::default(), &d, x, yd, y, g, &p3, &p3, v)
            .unwrap_err()
    };
    assert_eq!(field_of(&inf(&p3[..2], &p3, &d, &x, &mut y)), "gamma");
    assert_eq!(field_of(&inf(&p3, &[1.0; 4], &d, &x, &mut y)), "var");
    assert_eq!(field_of(&inf(&p3, &p3, &d2, &x, &mut y)), "y");
    assert_eq!(field_of(&inf(&p3, &p3, &d, &x[..5], &mut y)), "x");
    assert_eq!(field_of(&inf(&p3, &p3, &d, &x, &mut y[..5])), "y");
    let e = h
        .batch_norm_forward_inference(
            &bn,
            Blend::new(f32::NAN, 0.0),
            &d,
            &x,
            &d,
            &mut y,
            &p3,
            &p3,
            &p3,
            &p3,
        )
        .unwrap_err();
    assert_eq!(field_of(&e), "alpha");
    let bf = d.with_dtype(DataType::Bf16);
    let e = h
        .batch_norm_forward_inference(
            &bn,
            Blend::default(),
            &bf,
            &x,
            &bf,
            &mut y,
            &p3,
            &p3,
            &p3,
            &p3,
        )
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    // Training: running statistics, factor, saved statistics, M = 1.
    let mut rm = vec![0.0; 3];
    let mut rv = vec![0.0; 2];
    let train = |running: Option<RunningStats<'_>>,
                 saved: Option<SavedStatsMut<'_>>,
                 d: &TensorDesc,
                 y: &mut [f32]| {
        h.batch_norm_forward_training(&bn, Blend::default(), d, &x, d, y, &p3, &p3, running, saved)
            .unwrap_err()
    };
    let e = train(
        Some(RunningStats {
            mean: &mut rm,
            var: &mut rv,
            factor: 0.1,
        }),
        None,
        &d,
        &mut y,
    );
    assert_eq!(field_of(&e), "running.var");
    let mut rv3 = vec![0.0; 3];
    let e = train(
        Some(RunningStats {
            mean: &mut rm,
            var: &mut rv3,
            factor: 1.5,
        }),
        None,
        &d,
        &mut y,
    );
    assert_eq!(field_of(&e), "exponential_average_factor");
    let (mut a, mut b) = (vec![0.0; 3], vec![0.0; 1]);
    let e = train(
        None,
        Some(SavedStatsMut {
            mean: &mut a,
            inv_std: &mut b,
        }),
        &d,
        &mut y,
    );
    assert_eq!(field_of(&e), "saved.inv_std");
    let one = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 3, 1, 1]).unwrap();
    assert_eq!(field_of(&train(None, None, &one, &mut y)), "x");
    // Backward: parameter gradients and dims.
    let (mut dg, mut db) = (vec![0.0; 3], vec![0.0; 4]);
    let mut dx = vec![0.0; d.span()];
    let e = h
        .batch_norm_backward(
            &bn,
            Blend::default(),
            Blend::default(),
            &d,
            &x,
            &d,
            &x,
            &d,
            &mut dx,
            &p3,
            None,
            ParamGrads {
                dgamma: &mut dg,
                dbeta: &mut db,
            },
        )
        .unwrap_err();
    assert_eq!(field_of(&e), "grads.dbeta");
    let e = h
        .batch_norm_backward(
            &bn,
            Blend::default(),
            Blend::default(),
            &d,
            &x,
            &d2,
            &x,
            &d,
            &mut dx,
            &p3,
            None,
            ParamGrads {
                dgamma: &mut dg,
                dbeta: &mut db,
            },
        )
        .unwrap_err();
    assert_eq!(field_of(&e), "dy");
    // Layer norm: elementwise parameters of C·H·W values, statistics of N.
    let ln = LayerNorm::new(1e-5).unwrap();
    let e = h
        .layer_norm_forward(
            &ln,
            Blend::default(),
            &d,
            &x,
            &d,
            &mut y,
            Some(&p3),
            None,
            None,
        )
        .unwrap_err();
    assert_eq!(field_of(&e), "gamma");
    let (m, r) = ([0.0f32; 2], [1.0f32; 3]);
    let e = h
        .layer_norm_backward(
            Blend::default(),
            Blend::default(),
            &d,
            &x,
            &d,
            &x,
            &d,
            &mut dx,
            None,
            SavedStats {
                mean: &m,
                inv_std: &r,
            },
            None,
        )
        .unwrap_err();
    assert_eq!(field_of(&e), "saved.inv_std");
}

#[test]
fn problem_strings() {
    let p = BatchNormProblem::parse("mb8ic64ih56").unwrap();
    assert_eq!(p.dims, [8, 64, 56, 56]);
    assert_eq!(BatchNormProblem::parse("ic3").unwrap().dims, [1, 3, 1, 1]);
    let p = BatchNormProblem::parse("mb2ic2048ih7iw7eps1e-5n\"res5c_bn3\"").unwrap();
    assert_eq!(
        (p.dims, p.eps, p.name.as_deref()),
        ([2, 2048, 7, 7], Some(1e-5), Some("res5c_bn3"))
    );
    let d = p.tensor(Layout::Nhwc).unwrap();
    assert_eq!(d.dims(), [2, 2048, 7, 7]);
    for bad in ["mb2", "ic0", "ic3ih", "ic3kh3", "ic3ih4ih4", "ic3eps0"] {
        let e = BatchNormProblem::parse(bad).unwrap_err();
        assert!(matches!(e, Error::Parse { .. }), "{bad}: {e}");
    }
}

/// Found by the `ops` fuzz target (`fuzz/regressions/ops/
/// batch_norm_name_after_underscore_holding_a_quote`): a `_name` holding a double quote was
/// accepted and printed as `n"..."`, which does not parse back. Such a name is refused; one
/// without a quote prints and parses back to the same problem.
#[test]
fn a_name_after_underscore_holding_a_quote_is_refused() {
    let e = BatchNormProblem::parse("mb1ic65_h112,oh1\"x1").unwrap_err();
    assert!(matches!(e, Error::Parse { .. }), "{e}");
    assert!(e.to_string().contains("double quote"), "{e}");
    let p = BatchNormProblem::parse("mb1ic65_h112,oh1").unwrap();
    assert_eq!(p.name.as_deref(), Some("h112,oh1"));
    assert_eq!(BatchNormProblem::parse(&p.to_string()).unwrap(), p);
}

/// The fused batch norm + ReLU (+ residual) forward and its backward (cuDNN's
/// BN_ACTIVATION / BN_ADD_ACTIVATION): y = max(BN(x) + z, 0) against the f64 reference
/// through a ReLU; the backward against the reference backward of g = dy where y > 0 (the
/// mask from the y the fused forward wrote), dz equal to g bit for bit; with and without a
/// residual, from saved and from recomputed statistics, every layout (the NCHW shape of
/// 16 channels takes the channel-at-a-time path), every ISA, 1 and 2 threads with identical
/// bits.
#[test]
fn batch_norm_relu_fused_matches_reference() {
    let hs = handles();
    let bn = BatchNorm::new(1e-3).unwrap();
    for (si, &dims) in SHAPES.iter().enumerate() {
        let c = dims[1];
        let (g, b) = params(c, si as u64 + 5);
        for (ln, d) in descs(dims) {
            let x = data(&d, si as u64 * 5 + 1);
            let dy = real_data(d.span(), si as u64 + 200, 500);
            let zs = real_data(d.span(), si as u64 + 300, 300);
            for residual in [false, true] {
                let z = residual.then_some((&d, &zs[..]));
                let r = rn::batch_norm_training(Blend::default(), &d, &x, &d, &[], &g, &b, 1e-3)
                    .unwrap();
                let mut ry = r.y.clone();
                for o in d.offsets() {
                    let t = ry[o] + if residual { zs[o] as f64 } else { 0.0 };
                    ry[o] = t.max(0.0);
                }
                let (pg, pb) = (real_data(c, 3, 10), real_data(c, 4, 10));
                let mut firsts: Option<Vec<Vec<f32>>> = None;
                for (isa, t, h) in &hs {
                    for from_saved in [true, false] {
                        let what = format!(
                            "{dims:?} {ln} residual {residual} saved {from_saved} {isa:?} {t}t"
                        );
                        let mut y = vec![f32::NAN; d.span()];
                        let (mut sm, mut si_) = (vec![0.0; c], vec![0.0; c]);
                        h.batch_norm_forward_training_relu(
                            &bn,
                            &d,
                            &x,
                            z,
                            &d,
                            &mut y,
                            &g,
                            &b,
                            None,
                            Some(SavedStatsMut {
                                mean: &mut sm,
                                inv_std: &mut si_,
                            }),
                        )
                        .unwrap();
                        check(&d, &y, &ry, TOL, &format!("y {what}"));
                        // The reference backward of the masked gradient.
                        let mut gm = vec![0.0f32; d.span()];
                        for o in d.offsets() {
                            gm[o] = if y[o] > 0.0 { dy[o] } else { 0.0 };
                        }
                        let rb = rn::batch_norm_backward(
                            Blend::default(),
                            Blend::new(1.0, 1.0),
                            &d,
                            &x,
                            &d,
                            &gm,
                            &d,
                            (&vec![0.0; d.span()], &pg, &pb),
                            &g,
                            &sm,
                            &si_,
                        )
                        .unwrap();
                        let mut dx = vec![f32::NAN; d.span()];
                        let mut dz = vec![f32::NAN; d.span()];
                        let (mut dg, mut db) = (pg.clone(), pb.clone());
                        h.batch_norm_backward_relu(
                            &bn,
                            Blend::new(1.0, 1.0),
                            &d,
                            &x,
                            &d,
                            &y,
                            &d,
                            &dy,
                            residual.then_some((&d, &mut dz[..])),
                            &d,
                            &mut dx,
                            &g,
                            from_saved.then_some(SavedStats {
                                mean: &sm,
                                inv_std: &si_,
                            }),
                            ParamGrads {
                                dgamma: &mut dg,
                                dbeta: &mut db,
                            },
                        )
                        .unwrap();
                        // Recomputed statistics round differently from the saved f32 ones.
                        let tol = if from_saved { TOL } else { 1e-4 };
                        check(&d, &dx, &rb.dx, tol, &format!("dx {what}"));
                        check_vec(&dg, &rb.dgamma, tol, &format!("dgamma {what}"));
                        check_vec(&db, &rb.dbeta, tol, &format!("dbeta {what}"));
                        if residual {
                            for o in d.offsets() {
                                assert_eq!(dz[o].to_bits(), gm[o].to_bits(), "dz {what} at {o}");
                            }
                        }
                        let outs = vec![y, dx, dg, db, dz];
                        match (&firsts, t) {
                            (Some(f), 2) if from_saved => {
                                for (a, b) in f.iter().zip(&outs) {
                                    same_bits(a, b, &what);
                                }
                            }
                            (None, 1) if from_saved => firsts = Some(outs),
                            _ => {}
                        }
                    }
                }
            }
        }
    }
}

/// The fused calls refuse a residual, output or residual gradient of other dimensions,
/// naming it.
#[test]
fn batch_norm_relu_refuses_mismatched_tensors() {
    let h = Handle::with_threads(1).unwrap();
    let bn = BatchNorm::new(1e-5).unwrap();
    let d = TensorDesc::new(DataType::F32, Layout::Nchw, [2, 3, 4, 5]).unwrap();
    let e = TensorDesc::new(DataType::F32, Layout::Nchw, [2, 3, 5, 4]).unwrap();
    let v = vec![1.0f32; d.span()];
    let mut y = v.clone();
    let (g, b) = ([1.0; 3], [0.0; 3]);
    let err = h
        .batch_norm_forward_training_relu(
            &bn,
            &d,
            &v,
            Some((&e, &v[..])),
            &d,
            &mut y,
            &g,
            &b,
            None,
            None,
        )
        .unwrap_err();
    assert!(
        matches!(&err, Error::BadParam { field, .. } if field == "z"),
        "{err}"
    );
    for bad in ["y", "dz"] {
        let (mut dx, mut dz) = (v.clone(), v.clone());
        let (mut dg, mut db) = ([0.0; 3], [0.0; 3]);
        let yd = if bad == "y" { &e } else { &d };
        let zd = if bad == "dz" { &e } else { &d };
        let err = h
            .batch_norm_backward_relu(
                &bn,
                Blend::default(),
                &d,
                &v,
                yd,
                &v,
                &d,
                &v,
                Some((zd, &mut dz[..])),
                &d,
                &mut dx,
                &g,
                None,
                ParamGrads {
                    dgamma: &mut dg,
                    dbeta: &mut db,
                },
            )
            .unwrap_err();
        assert!(
            matches!(&err, Error::BadParam { field, .. } if field == bad),
            "{err}"
        );
    }
}
