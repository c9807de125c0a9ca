//! GEMM against the f64 reference: awkward shapes × alpha, beta × transposes × layouts ×
//! threads × every ISA this machine runs, batched and strided-batched, epilogues, NaN
//! handling, thread-count independence and typed errors.

mod common;

use autodnn::cpu::Isa;
use autodnn::gemm::{Activation, Epilogue, GemmDesc, MatrixOrder};
use autodnn::{Error, Handle};
use common::Rng;

/// Every ISA this machine runs.
fn isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_available()).collect()
}

fn handle(isa: Isa, threads: usize) -> Handle {
    let h = Handle::with_threads(threads).unwrap();
    h.set_isa_cap(isa);
    assert_eq!(h.isa(), isa);
    h
}

/// How C (and A, B) are laid out in a case.
#[derive(Debug, Clone, Copy)]
enum Lay {
    Row,
    Col,
    /// Row-major with padded leading dimensions.
    RowPad,
    /// Column-major with padded leading dimensions.
    ColPad,
}

const LAYS: [Lay; 4] = [Lay::Row, Lay::Col, Lay::RowPad, Lay::ColPad];

/// Strides of a stored `rows × cols` matrix in a layout.
fn strides(lay: Lay, rows: usize, cols: usize, pad: usize) -> [usize; 2] {
    match lay {
        Lay::Row => [cols.max(1), 1],
        Lay::Col => [1, rows.max(1)],
        Lay::RowPad => [cols + pad, 1],
        Lay::ColPad => [1, rows + pad],
    }
}

#[derive(Debug, Clone, Copy)]
struct Case {
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    beta: f32,
    ta: bool,
    tb: bool,
    lay: Lay,
}

impl Case {
    fn desc(&self) -> GemmDesc {
        let [ar, ac] = if self.ta {
            [self.k, self.m]
        } else {
            [self.m, self.k]
        };
        let [br, bc] = if self.tb {
            [self.n, self.k]
        } else {
            [self.k, self.n]
        };
        let a = strides(self.lay, ar, ac, 3);
        let b = strides(self.lay, br, bc, 5);
        let c = strides(self.lay, self.m, self.n, 2);
        GemmDesc::new(self.m, self.n, self.k)
            .with_transa(self.ta)
            .with_transb(self.tb)
            .with_a_strides(a[0], a[1])
            .with_b_strides(b[0], b[1])
            .with_c_strides(c[0], c[1])
    }
}

/// Strides of op(X) given the stored strides.
fn op_strides(s: [usize; 2], t: bool) -> [usize; 2] {
    if t {
        [s[1], s[0]]
    } else {
        s
    }
}

fn data(len: usize, seed: u64, integer: bool) -> Vec<f32> {
    let mut r = Rng(seed);
    if integer {
        (0..len).map(|_| r.range(-4, 4) as f32).collect()
    } else {
        (0..len)
            .map(|_| (r.next_u64() >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0)
            .collect()
    }
}

/// The f64 reference of `alpha·A·B + beta·C` for a descriptor (C given as `c`).
fn reference(d: &GemmDesc, alpha: f64, a: &[f32], b: &[f32], beta: f64, c: &[f32]) -> Vec<f64> {
    let mut want: Vec<f64> = c.iter().map(|&x| x as f64).collect();
    let [m, n, k] = [d.m(), d.n(), d.k()];
    autodnn::reference::gemm(
        m,
        n,
        k,
        alpha,
        a,
        d.a_strides(),
        b,
        d.b_strides(),
        beta,
        &mut want,
        d.c_strides(),
    )
    .unwrap();
    want
}

/// Runs one case with `run` (which computes into c) and checks every element of C against
/// the reference: exactly for integer data and alpha, beta in {0, 1, 2}, else within
/// a componentwise bound of 2·(k + 2) f32 ulps; elements of the buffer outside C unchanged.
fn check_with(
    case: &Case,
    seed: u64,
    what: &str,
    run: impl FnOnce(&GemmDesc, &[f32], &[f32], &mut [f32]),
) {
    let d = case.desc();
    let exact = [0.0, 1.0, 2.0].contains(&case.alpha) && [0.0, 1.0, 2.0].contains(&case.beta);
    let a = data(d.a_span().unwrap(), seed, exact);
    let b = data(d.b_span().unwrap(), seed + 1, exact);
    let mut c = data(d.c_span().unwrap(), seed + 2, exact);
    let cs = d.c_strides();
    if case.beta == 0.0 {
        // beta = 0 must not read C: NaN in C must not reach the result.
        for (x, v) in c.iter_mut().enumerate() {
            if in_c_fast(x, case, cs) {
                *v = f32::NAN;
            }
        }
    }
    let before = c.clone();
    let mut want: Vec<f64> = c.iter().map(|&x| x as f64).collect();
    autodnn::reference::gemm(
        case.m,
        case.n,
        case.k,
        case.alpha as f64,
        &a,
        op_strides(d.a_strides(), case.ta),
        &b,
        op_strides(d.b_strides(), case.tb),
        case.beta as f64,
        &mut want,
        cs,
    )
    .unwrap();
    run(&d, &a, &b, &mut c);
    let sa = op_strides(d.a_strides(), case.ta);
    let sb = op_strides(d.b_strides(), case.tb);
    let eps = f32::EPSILON as f64;
    for i in 0..case.m {
        for j in 0..case.n {
            let x = i * cs[0] + j * cs[1];
            let got = c[x];
            if exact {
                assert!(
                    got == want[x] as f32,
                    "{what}: C[{i},{j}] = {got}, want {} ({case:?})",
                    want[x]
                );
            } else {
                let mut mag = 0.0f64;
                for p in 0..case.k {
                    mag +=
                        (a[i * sa[0] + p * sa[1]] as f64 * b[p * sb[0] + j * sb[1]] as f64).abs();
                }
                let c0 = if case.beta == 0.0 {
                    0.0
                } else {
                    before[x] as f64
                };
                let bound = 2.0
                    * (case.k as f64 + 2.0)
                    * eps
                    * (case.alpha.abs() as f64 * mag + case.beta.abs() as f64 * c0.abs())
                    + f64::MIN_POSITIVE;
                let err = (got as f64 - want[x]).abs();
                assert!(
                    err <= bound,
                    "{what}: C[{i},{j}] = {got}, want {}, error {err:e} > {bound:e} ({case:?})",
                    want[x]
                );
            }
        }
    }
    for (x, (&now, &was)) in c.iter().zip(&before).enumerate() {
        if !in_c_fast(x, case, cs) {
            assert!(
                now.to_bits() == was.to_bits(),
                "{what}: element {x} outside C changed from {was} to {now} ({case:?})"
            );
        }
    }
}

/// Whether buffer offset x is an element of C (C is row- or column-major, possibly padded).
fn in_c_fast(x: usize, case: &Case, cs: [usize; 2]) -> bool {
    if case.m == 0 || case.n == 0 {
        return false;
    }
    // Dimensions of extent 1 do not matter; order the others by stride (outer first).
    let mut dims: Vec<(usize, usize)> = [(cs[0], case.m), (cs[1], case.n)]
        .into_iter()
        .filter(|d| d.1 > 1)
        .collect();
    dims.sort();
    let mut r = x;
    for &(stride, ext) in dims.iter().rev() {
        let q = r / stride;
        if q >= ext {
            return false;
        }
        r -= q * stride;
    }
    r == 0
}

fn check(h: &Handle, case: &Case, seed: u64) {
    let what = format!("{} x{}", h.isa().name(), h.threads());
    check_with(case, seed, &what, |d, a, b, c| {
        h.gemm(d, case.alpha, a, b, case.beta, c).unwrap()
    });
}

const ALPHAS: [f32; 4] = [0.0, 1.0, 2.0, 2.3];
const BETAS: [f32; 4] = [0.0, 1.0, 2.0, 2.3];

/// Awkward shapes: zeros, ones, primes, micro-tile sizes ± 1 for every family (MR 32/16/8,
/// NR 14/6/4), long k across several depth blocks, tall-skinny, short-wide, several row
/// blocks (MC) and column panels (NC).
const SHAPES: &[(usize, usize, usize)] = &[
    (0, 5, 3),
    (4, 0, 3),
    (5, 4, 0),
    (1, 1, 1),
    (1, 17, 9),
    (19, 1, 9),
    (7, 13, 1),
    (31, 13, 17),
    (33, 15, 16),
    (32, 14, 29),
    (15, 5, 37),
    (17, 7, 8),
    (16, 6, 61),
    (9, 3, 2),
    (8, 4, 8),
    (61, 29, 101),
    (37, 41, 1031),
    (3, 5, 1500),
    (517, 3, 67),
    (2, 611, 45),
    (97, 101, 103),
    (130, 150, 300),
    (500, 45, 20),
    (3, 1900, 7),
];

#[test]
fn shapes_alpha_beta_transposes_layouts_threads_isas() {
    let mut rng = Rng(17);
    let mut count = 0;
    let mut seen = std::collections::HashSet::new();
    for isa in isas() {
        let hs = [handle(isa, 1), handle(isa, 2)];
        for (si, &(m, n, k)) in SHAPES.iter().enumerate() {
            // Sample the cross product: every shape with 6 combinations per ISA, rotating so
            // that every (alpha, beta) pair, transpose pair, layout and thread count occurs
            // for every ISA.
            let combos = if m * n * k > 1_000_000 { 3 } else { 6 };
            for t in 0..combos {
                let idx = si * 6 + t;
                let case = Case {
                    m,
                    n,
                    k,
                    alpha: ALPHAS[idx % 4],
                    beta: BETAS[(idx / 4) % 4],
                    ta: (idx / 2) % 2 == 1,
                    tb: (idx / 3) % 2 == 1,
                    lay: LAYS[(idx + si) % 4],
                };
                seen.insert((isa, case.alpha.to_bits(), case.beta.to_bits()));
                check(&hs[rng.range(0, 1) as usize], &case, idx as u64);
                count += 1;
            }
        }
    }
    assert_eq!(
        seen.len(),
        16 * isas().len(),
        "every (alpha, beta) for every ISA"
    );
    assert!(count > 100);
}

#[test]
fn every_alpha_beta_on_every_path() {
    // The full alpha × beta × transposes grid on two shapes that take the in-place (small)
    // and the packed, multi-block, multi-threaded paths.
    for isa in isas() {
        let hs = [handle(isa, 1), handle(isa, 2)];
        for (si, &(m, n, k)) in [(45usize, 29usize, 31usize), (150, 140, 700)]
            .iter()
            .enumerate()
        {
            for (ai, &alpha) in ALPHAS.iter().enumerate() {
                for (bi, &beta) in BETAS.iter().enumerate() {
                    let ta = (ai + bi) % 2 == 1;
                    let tb = (ai / 2 + bi) % 2 == 1;
                    let lay = LAYS[(ai + 2 * bi + si) % 4];
                    let case = Case {
                        m,
                        n,
                        k,
                        alpha,
                        beta,
                        ta,
                        tb,
                        lay,
                    };
                    check(&hs[(ai + bi + si) % 2], &case, (ai * 4 + bi) as u64);
                }
            }
        }
    }
}

#[test]
fn beta_zero_ignores_nan_and_alpha_zero_ignores_a_b() {
    for isa in isas() {
        let h = handle(isa, 2);
        for (m, n, k) in [(33usize, 15usize, 9usize), (200, 190, 120)] {
            for order in [MatrixOrder::RowMajor, MatrixOrder::ColMajor] {
                let d = GemmDesc::new(m, n, k).with_order(order);
                let a = vec![1.0f32; m * k];
                let b = vec![2.0f32; k * n];
                let mut c = vec![f32::NAN; m * n];
                h.gemm(&d, 1.0, &a, &b, 0.0, &mut c).unwrap();
                assert!(
                    c.iter().all(|&x| x == 2.0 * k as f32),
                    "{isa:?} beta = 0 read C"
                );
                // alpha = 0: A and B are not read; C = beta·C.
                let nan_a = vec![f32::NAN; m * k];
                let nan_b = vec![f32::INFINITY; k * n];
                h.gemm(&d, 0.0, &nan_a, &nan_b, 0.5, &mut c).unwrap();
                assert!(
                    c.iter().all(|&x| x == k as f32),
                    "{isa:?} alpha = 0 read A or B"
                );
                // alpha = 0 and beta = 0: zeros, even over NaN.
                c.fill(f32::NAN);
                h.gemm(&d, 0.0, &nan_a, &nan_b, 0.0, &mut c).unwrap();
                assert!(c.iter().all(|&x| x == 0.0));
                // k = 0: C = beta·C.
                c.fill(3.0);
                h.gemm(
                    &GemmDesc::new(m, n, 0).with_order(order),
                    1.0,
                    &[0f32; 0],
                    &[0f32; 0],
                    2.0,
                    &mut c,
                )
                .unwrap();
                assert!(c.iter().all(|&x| x == 6.0));
            }
        }
    }
}

#[test]
fn results_do_not_depend_on_thread_count() {
    for isa in isas() {
        let hs = [handle(isa, 1), handle(isa, 2), handle(isa, 3)];
        for &(m, n, k, lay) in &[
            (300usize, 257usize, 700usize, Lay::Row),
            (70, 900, 300, Lay::Col),
            (900, 40, 350, Lay::RowPad),
            (120, 130, 200, Lay::Row),
            // Above THRESHOLDS.shared_b_min_fmas: the threads share packed B panels.
            (800, 790, 740, Lay::Row),
        ] {
            let case = Case {
                m,
                n,
                k,
                alpha: 2.3,
                beta: 0.7,
                ta: m == 900,
                tb: n == 900,
                lay,
            };
            let d = case.desc();
            let a = data(d.a_span().unwrap(), 1, false);
            let b = data(d.b_span().unwrap(), 2, false);
            let c0 = data(d.c_span().unwrap(), 3, false);
            let outs: Vec<Vec<f32>> = hs
                .iter()
                .map(|h| {
                    let mut c = c0.clone();
                    h.gemm(&d, case.alpha, &a, &b, case.beta, &mut c).unwrap();
                    c
                })
                .collect();
            for (t, o) in outs.iter().enumerate().skip(1) {
                assert!(
                    o.iter()
                        .zip(&outs[0])
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{isa:?}: {} threads differ from 1 ({case:?})",
                    t + 1
                );
            }
            // And the batched paths compute each product the same way.
            let mut cb = [c0.clone(), c0.clone()];
            let mut refs: Vec<&mut [f32]> = cb.iter_mut().map(|c| &mut c[..]).collect();
            hs[1]
                .gemm_batched(&d, case.alpha, &[&a, &a], &[&b, &b], case.beta, &mut refs)
                .unwrap();
            assert!(cb.iter().all(|c| c
                .iter()
                .zip(&outs[0])
                .all(|(x, y)| x.to_bits() == y.to_bits())));
        }
    }
}

#[test]
fn batched_and_strided_batched() {
    for isa in isas() {
        for threads in [1, 2] {
            let h = handle(isa, threads);
            for (bi, &(m, n, k)) in [
                (13usize, 17usize, 19usize),
                (64, 64, 64),
                (150, 100, 130),
                (0, 3, 4),
                (3, 4, 0),
            ]
            .iter()
            .enumerate()
            {
                let exact = bi % 2 == 0;
                let (alpha, beta) = if exact { (2.0, 1.0) } else { (2.3, 2.3) };
                for (li, lay) in [Lay::RowPad, Lay::Col].into_iter().enumerate() {
                    let case = Case {
                        m,
                        n,
                        k,
                        alpha,
                        beta,
                        ta: li == 1,
                        tb: bi % 2 == 1,
                        lay,
                    };
                    let batch = 5;
                    // Batched: each item checked like a single call.
                    let d = case.desc();
                    let (sa, sb, sc) = (
                        d.a_span().unwrap(),
                        d.b_span().unwrap(),
                        d.c_span().unwrap(),
                    );
                    let a: Vec<Vec<f32>> = (0..batch).map(|i| data(sa, 10 + i, exact)).collect();
                    let b: Vec<Vec<f32>> = (0..batch).map(|i| data(sb, 20 + i, exact)).collect();
                    let c0: Vec<Vec<f32>> = (0..batch).map(|i| data(sc, 30 + i, exact)).collect();
                    let mut c = c0.clone();
                    {
                        let ar: Vec<&[f32]> = a.iter().map(|x| &x[..]).collect();
                        let br: Vec<&[f32]> = b.iter().map(|x| &x[..]).collect();
                        let mut cr: Vec<&mut [f32]> = c.iter_mut().map(|x| &mut x[..]).collect();
                        h.gemm_batched(&d, alpha, &ar, &br, beta, &mut cr).unwrap();
                    }
                    for i in 0..batch as usize {
                        let mut want = c0[i].clone();
                        h.gemm(&d, alpha, &a[i], &b[i], beta, &mut want).unwrap();
                        assert!(c[i]
                            .iter()
                            .zip(&want)
                            .all(|(x, y)| x.to_bits() == y.to_bits()));
                        // And the single call itself is right.
                        check_with(&case, 40 + i as u64, "batched item", |d, a, b, c| {
                            h.gemm(d, alpha, a, b, beta, c).unwrap()
                        });
                    }
                    // Strided-batched: gaps between operands, B shared (stride 0) in one
                    // variant; the gaps of C stay untouched.
                    for share_b in [false, true] {
                        let (ga, gc) = (sa + 7, sc + 3);
                        let gb = if share_b { 0 } else { sb + 2 };
                        let n_items = batch as usize;
                        let abuf = data(ga * n_items, 50, exact);
                        let bbuf = data(if share_b { sb } else { gb * n_items }, 51, exact);
                        let cbuf0 = data(gc * n_items, 52, exact);
                        let mut cbuf = cbuf0.clone();
                        h.gemm_strided_batched(
                            &d, alpha, &abuf, ga, &bbuf, gb, beta, &mut cbuf, gc, n_items,
                        )
                        .unwrap();
                        for i in 0..n_items {
                            let mut want = cbuf0[i * gc..i * gc + sc].to_vec();
                            let bi0 = if share_b { 0 } else { i * gb };
                            let mut r: Vec<f64> = want.iter().map(|&x| x as f64).collect();
                            autodnn::reference::gemm(
                                m,
                                n,
                                k,
                                alpha as f64,
                                &abuf[i * ga..],
                                op_strides(d.a_strides(), case.ta),
                                &bbuf[bi0..],
                                op_strides(d.b_strides(), case.tb),
                                beta as f64,
                                &mut r,
                                d.c_strides(),
                            )
                            .unwrap();
                            if exact {
                                for (x, (w, r)) in want.iter_mut().zip(&r).enumerate() {
                                    if in_c_fast(x, &case, d.c_strides()) {
                                        *w = *r as f32;
                                    }
                                }
                                assert_eq!(
                                    &cbuf[i * gc..i * gc + sc],
                                    &want[..],
                                    "{isa:?} item {i}"
                                );
                            } else {
                                for (x, r) in r.iter().enumerate() {
                                    let got = cbuf[i * gc + x] as f64;
                                    assert!(
                                        (got - r).abs() <= 1e-4 * (1.0 + r.abs()) * k as f64,
                                        "{isa:?} item {i}"
                                    );
                                }
                            }
                            assert_eq!(
                                &cbuf[i * gc + sc..(i + 1) * gc],
                                &cbuf0[i * gc + sc..(i + 1) * gc],
                                "gap after item {i}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn many_small_strided_batched_products() {
    // The batch split (one product per thread) against single calls, bit for bit.
    for isa in isas() {
        let h = handle(isa, 2);
        let d = GemmDesc::new(24, 20, 16);
        let batch = 300;
        let a = data(24 * 16 * batch, 1, false);
        let b = data(16 * 20 * batch, 2, false);
        let mut c = vec![f32::NAN; 24 * 20 * batch];
        h.gemm_strided_batched(
            &d,
            1.5,
            &a,
            24 * 16,
            &b,
            16 * 20,
            0.0,
            &mut c,
            24 * 20,
            batch,
        )
        .unwrap();
        for i in (0..batch).step_by(37) {
            let mut want = vec![0.0f32; 24 * 20];
            h.gemm(&d, 1.5, &a[i * 384..], &b[i * 320..], 0.0, &mut want)
                .unwrap();
            assert_eq!(&c[i * 480..(i + 1) * 480], &want[..], "{isa:?} item {i}");
        }
    }
}

#[test]
fn epilogue_bias_residual_activation() {
    for isa in isas() {
        for threads in [1, 2] {
            let h = handle(isa, threads);
            for (ci, &(m, n, k)) in [(37usize, 29usize, 23usize), (130, 170, 300)]
                .iter()
                .enumerate()
            {
                for order in [MatrixOrder::RowMajor, MatrixOrder::ColMajor] {
                    let d = GemmDesc::new(m, n, k).with_order(order);
                    let a = data(m * k, 1, true);
                    let b = data(k * n, 2, true);
                    let c0 = data(m * n, 3, true);
                    let rb = data(m, 4, true);
                    let cb = data(n, 5, true);
                    let res = data(m * n + 7, 6, true);
                    let cs = d.c_strides();
                    for (variant, act) in [
                        Activation::Relu,
                        Activation::None,
                        Activation::LeakyRelu { slope: 0.5 },
                        Activation::Clip { lo: -3.0, hi: 20.0 },
                    ]
                    .into_iter()
                    .enumerate()
                    {
                        let per_row = (variant + ci) % 2 == 0;
                        // Residual in the other order than C, to exercise strided reads.
                        let (rrs, rcs) = if variant % 2 == 0 { (1, m) } else { (n, 1) };
                        let mut e = Epilogue::new().with_activation(act);
                        e = if per_row {
                            e.with_bias_per_row(&rb)
                        } else {
                            e.with_bias_per_col(&cb)
                        };
                        if variant != 1 {
                            e = e.with_residual(&res, rrs, rcs);
                        }
                        let beta = if variant == 2 { 0.0 } else { 2.0 };
                        let mut c = c0.clone();
                        h.gemm_with_epilogue(&d, 2.0, &a, &b, beta, &mut c, &e)
                            .unwrap();
                        let want = reference(&d, 2.0, &a, &b, beta as f64, &c0);
                        for i in 0..m {
                            for j in 0..n {
                                let x = i * cs[0] + j * cs[1];
                                let mut v = want[x] as f32 + if per_row { rb[i] } else { cb[j] };
                                if variant != 1 {
                                    v += res[i * rrs + j * rcs];
                                }
                                let v = match act {
                                    Activation::Relu => v.max(0.0),
                                    Activation::LeakyRelu { slope: s } => {
                                        if v >= 0.0 {
                                            v
                                        } else {
                                            s * v
                                        }
                                    }
                                    Activation::Clip { lo, hi } => v.max(lo).min(hi),
                                    _ => v,
                                };
                                assert_eq!(
                                    c[x], v,
                                    "{isa:?} x{threads} {act:?} C[{i},{j}] {order:?}"
                                );
                            }
                        }
                    }
                    // k = 0 still applies the epilogue to beta·C.
                    let mut c = c0.clone();
                    let e = Epilogue::new()
                        .with_bias_per_col(&cb)
                        .with_activation(Activation::Relu);
                    h.gemm_with_epilogue(
                        &GemmDesc::new(m, n, 0).with_order(order),
                        1.0,
                        &[0f32; 0],
                        &[0f32; 0],
                        1.0,
                        &mut c,
                        &e,
                    )
                    .unwrap();
                    for i in 0..m {
                        for (j, &bj) in cb.iter().enumerate() {
                            let x = i * cs[0] + j * cs[1];
                            assert_eq!(c[x], (c0[x] + bj).max(0.0));
                        }
                    }
                }
            }
        }
    }
}

fn field_of(e: &Error) -> String {
    match e {
        Error::BadParam { field, .. }
        | Error::Overflow { field, .. }
        | Error::BufferTooSmall { field, .. } => field.clone(),
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn errors_name_the_field() {
    let h = Handle::with_threads(2).unwrap();
    let d = GemmDesc::new(4, 5, 6);
    let (a, b, mut c) = (vec![1.0f32; 24], vec![1.0f32; 30], vec![0.0f32; 20]);
    let short = |e: Error, f: &str| {
        assert!(matches!(e, Error::BufferTooSmall { .. }), "{e:?}");
        assert_eq!(field_of(&e), f);
    };
    short(h.gemm(&d, 1.0, &a[..23], &b, 0.0, &mut c).unwrap_err(), "a");
    short(h.gemm(&d, 1.0, &a, &b[..29], 0.0, &mut c).unwrap_err(), "b");
    short(h.gemm(&d, 1.0, &a, &b, 0.0, &mut c[..19]).unwrap_err(), "c");
    // Padded strides need more.
    short(
        h.gemm(&d.with_a_strides(7, 1), 1.0, &a, &b, 0.0, &mut c)
            .unwrap_err(),
        "a",
    );
    // Transposed A reads k × m.
    short(
        h.gemm(
            &d.with_transa(true).with_a_strides(5, 1),
            1.0,
            &a,
            &b,
            0.0,
            &mut c,
        )
        .unwrap_err(),
        "a",
    );
    // C's strides alias: equal strides, zero stride, interleaved rows.
    for (rs, cs) in [(1, 1), (0, 1), (5, 0), (2, 1), (1, 3)] {
        let e = h
            .gemm(
                &d.with_c_strides(rs, cs),
                1.0,
                &a,
                &b,
                0.0,
                &mut vec![0.0; 100],
            )
            .unwrap_err();
        assert!(matches!(e, Error::BadParam { .. }), "{e:?}");
        assert_eq!(field_of(&e), "c.strides");
    }
    // A one-row C may have any row stride, a one-column C any column stride.
    h.gemm(
        &GemmDesc::new(1, 5, 6).with_c_strides(0, 1),
        1.0,
        &a,
        &b,
        0.0,
        &mut c,
    )
    .unwrap();
    h.gemm(
        &GemmDesc::new(4, 1, 6).with_c_strides(1, 0),
        1.0,
        &a,
        &b,
        0.0,
        &mut c,
    )
    .unwrap();
    // Zero strides for A and B are broadcasts, and fine.
    h.gemm(
        &d.with_a_strides(0, 0).with_b_strides(0, 1),
        1.0,
        &a,
        &b,
        0.0,
        &mut c,
    )
    .unwrap();
    assert!(c[..5].iter().all(|&x| x == 6.0));
    // Spans that overflow.
    let e = h
        .gemm(
            &d.with_b_strides(usize::MAX / 2, 1),
            1.0,
            &a,
            &b,
            0.0,
            &mut c,
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::Overflow { .. }) && field_of(&e) == "b",
        "{e:?}"
    );
    let huge = GemmDesc::new(usize::MAX, 2, 1);
    assert_eq!(
        field_of(&h.gemm(&huge, 1.0, &a, &b, 0.0, &mut c).unwrap_err()),
        "c"
    );
    // Batched.
    let e = h
        .gemm_batched(
            &d,
            1.0,
            &[&a[..]],
            &[&b[..], &b[..]],
            0.0,
            &mut [&mut c[..]],
        )
        .unwrap_err();
    assert_eq!(field_of(&e), "batch");
    let mut c2 = [0.0f32; 19];
    let e = h
        .gemm_batched(
            &d,
            1.0,
            &[&a[..], &a[..]],
            &[&b[..], &b[..]],
            0.0,
            &mut [&mut c[..], &mut c2[..]],
        )
        .unwrap_err();
    short(e, "c[1]");
    // Strided-batched.
    let mut cc = vec![0.0f32; 60];
    let e = h
        .gemm_strided_batched(&d, 1.0, &a, 0, &b, 0, 0.0, &mut cc, 19, 3)
        .unwrap_err();
    assert!(
        matches!(e, Error::BadParam { .. }) && field_of(&e) == "stride_c",
        "{e:?}"
    );
    short(
        h.gemm_strided_batched(&d, 1.0, &a, 24, &b, 0, 0.0, &mut cc, 20, 3)
            .unwrap_err(),
        "a",
    );
    short(
        h.gemm_strided_batched(&d, 1.0, &a, 0, &b, 0, 0.0, &mut cc, 21, 3)
            .unwrap_err(),
        "c",
    );
    let e = h
        .gemm_strided_batched(&d, 1.0, &a, usize::MAX, &b, 0, 0.0, &mut cc, 20, 3)
        .unwrap_err();
    assert!(
        matches!(e, Error::Overflow { .. }) && field_of(&e) == "a",
        "{e:?}"
    );
    h.gemm_strided_batched(&d, 1.0, &a, 0, &b, 0, 0.0, &mut cc, 20, 3)
        .unwrap();
    // Empty products never read their buffers.
    h.gemm_strided_batched(
        &GemmDesc::new(0, 5, 6),
        1.0,
        &[],
        999,
        &b,
        0,
        0.0,
        &mut [],
        999,
        4,
    )
    .unwrap();
    // Epilogue buffers.
    let e = Epilogue::new().with_bias_per_row(&a[..3]);
    short(
        h.gemm_with_epilogue(&d, 1.0, &a, &b, 0.0, &mut c, &e)
            .unwrap_err(),
        "epilogue.bias",
    );
    let e = Epilogue::new().with_bias_per_col(&a[..4]);
    short(
        h.gemm_with_epilogue(&d, 1.0, &a, &b, 0.0, &mut c, &e)
            .unwrap_err(),
        "epilogue.bias",
    );
    let e = Epilogue::new().with_residual(&a[..19], 5, 1);
    short(
        h.gemm_with_epilogue(&d, 1.0, &a, &b, 0.0, &mut c, &e)
            .unwrap_err(),
        "epilogue.residual",
    );
}

#[test]
fn isa_cap_names_the_kernel() {
    for isa in isas() {
        let name = autodnn::gemm::kernel_name(isa);
        // AMX adds bf16 tiles only: f32 products run on the AVX-512 family under its cap.
        let f32_isa = if isa == Isa::Amx { Isa::Avx512 } else { isa };
        assert!(name.starts_with(f32_isa.name()), "{name} for {isa:?}");
        let bl = autodnn::gemm::blocking_for(isa);
        assert!(bl.mc.is_multiple_of(bl.mr) && bl.nc.is_multiple_of(bl.nr) && bl.kc > 0);
    }
    let (isa, gflops) = autodnn::gemm::fma_peak(Isa::Scalar, 1, 1000);
    assert_eq!(isa, Isa::Scalar);
    assert!(gflops > 0.0);
}

/// Asserts that C (laid out as `d` says) equals the reference exactly; `what` names the case.
fn assert_exact(d: &GemmDesc, c: &[f32], want: &[f64], what: impl Fn() -> String) {
    let cs = d.c_strides();
    for i in 0..d.m() {
        for j in 0..d.n() {
            let x = i * cs[0] + j * cs[1];
            assert!(
                c[x] == want[x] as f32,
                "{}: C[{i},{j}] = {}, want {}",
                what(),
                c[x],
                want[x]
            );
        }
    }
}

/// The operand along C's contiguous dimension (B for row-major C, A for column-major C),
/// unit-stride along it and larger than the kernels read in place: packed by the first
/// kernel calls that read it where the family can. Ragged micro-panels, several row blocks,
/// depth blocks and column blocks, leading dimensions that alias in L1 and ones that do
/// not, the other operand read in place or packed, 1 and 2 threads, every ISA: exact on
/// integer data.
#[test]
fn operand_packed_on_first_use() {
    let mut count = 0;
    // The last shape is above THRESHOLDS.shared_b_min_fmas: with the other operand packed, two
    // threads share its panels (one case of it, the reference being slow).
    let shapes = [
        (29, 300, 70),
        (40, 520, 1100),
        (2100, 290, 9),
        (15, 1030, 33),
        (780, 790, 760),
    ];
    for (s, &(m, n, k)) in shapes.iter().enumerate() {
        let big = s == shapes.len() - 1;
        for row_major in [true, false] {
            // The operand packed on first use is k × (the contiguous dimension).
            let wide = if row_major { n } else { m };
            for ld in [wide, 1024, 1040] {
                if ld < wide || (big && (ld != wide || !row_major)) {
                    continue;
                }
                for other_in_place in [true, false] {
                    if big && other_in_place {
                        continue;
                    }
                    let (d, a_len, b_len) = if row_major {
                        let a = if other_in_place { (k, 1) } else { (1, m) };
                        let d = GemmDesc::new(m, n, k)
                            .with_a_strides(a.0, a.1)
                            .with_b_strides(ld, 1)
                            .with_c_strides(n, 1);
                        (d, m * k, (k - 1) * ld + n)
                    } else {
                        let b = if other_in_place { (1, k) } else { (n, 1) };
                        let d = GemmDesc::new(m, n, k)
                            .with_a_strides(1, ld)
                            .with_b_strides(b.0, b.1)
                            .with_c_strides(1, m);
                        (d, (k - 1) * ld + m, k * n)
                    };
                    let seed = (m * 131 + n * 17 + k * 3 + ld) as u64;
                    let a = data(a_len, seed, true);
                    let b = data(b_len, seed + 1, true);
                    let c0 = data(m * n, seed + 2, true);
                    let want = reference(&d, 2.0, &a, &b, 1.0, &c0);
                    for isa in isas() {
                        for threads in [1, 2] {
                            let mut c = c0.clone();
                            handle(isa, threads)
                                .gemm(&d, 2.0, &a, &b, 1.0, &mut c)
                                .unwrap();
                            assert_exact(&d, &c, &want, || {
                                format!(
                                    "{} x{threads} {m}x{n}x{k} ld {ld} row-major {row_major} \
                                     other in place {other_in_place}",
                                    isa.name()
                                )
                            });
                            count += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(count >= 60);
}

/// C = 2·A·B + C on integer data of the given lengths (from `seed`), exact against the
/// reference.
fn exact_product(
    h: &Handle,
    d: &GemmDesc,
    [a, b, c]: [usize; 3],
    seed: u64,
    what: impl Fn() -> String,
) {
    let a = data(a, seed, true);
    let b = data(b, seed + 1, true);
    let mut c = data(c, seed + 2, true);
    let want = reference(d, 2.0, &a, &b, 1.0, &c);
    h.gemm(d, 2.0, &a, &b, 1.0, &mut c).unwrap();
    assert_exact(d, &c, &want, what);
}

/// The broadcast-side operand read in place (no packing) where it is unit-stride along the
/// depth: row-major C with row-major A, and column-major C with column-major B, with leading
/// dimensions whose columns alias in L1 (multiples of 4 KiB: the kernel calls take fewer
/// columns) and ones that do not, ragged column panels, one and two depth blocks, 1 and 2
/// threads, every ISA: exact on integer data.
#[test]
fn operands_read_in_place_at_aliasing_leading_dimensions() {
    let mut count = 0;
    for isa in isas() {
        for threads in [1, 2] {
            let h = handle(isa, threads);
            for &(m, n, k) in &[(70, 29, 600), (33, 15, 5), (64, 14, 1), (45, 100, 130)] {
                for ld in [k, 1024, 2048, 1536, 1040] {
                    if ld < k {
                        continue;
                    }
                    for row_major in [true, false] {
                        // The depth-contiguous operand: A (m × k, rows ld apart) for row-major
                        // C, B (k × n, columns ld apart) for column-major C.
                        let (d, a_len, b_len, c_len) = if row_major {
                            let d = GemmDesc::new(m, n, k)
                                .with_a_strides(ld, 1)
                                .with_b_strides(n, 1)
                                .with_c_strides(n, 1);
                            (d, (m - 1) * ld + k, k * n, m * n)
                        } else {
                            let d = GemmDesc::new(m, n, k)
                                .with_a_strides(1, m)
                                .with_b_strides(1, ld)
                                .with_c_strides(1, m);
                            (d, m * k, (n - 1) * ld + k, m * n)
                        };
                        let seed = (m * 31 + n * 7 + k + ld) as u64;
                        exact_product(&h, &d, [a_len, b_len, c_len], seed, || {
                            format!(
                                "{} x{threads} {m}x{n}x{k} ld {ld} row-major {row_major}",
                                isa.name()
                            )
                        });
                        count += 1;
                    }
                }
            }
        }
    }
    assert!(count >= 60);
}

/// The broadcast-side operand read in place by rows (no packing) where it is unit-stride
/// along C's columns in the engine's frame: row-major C with column-major A, column-major C
/// with row-major B; leading dimensions that spread the depth steps over L1 (read in place)
/// and multiples of 256 bytes (packed), ragged column panels, one and two depth blocks, beta
/// and 1 and 2 threads, every ISA: exact on integer data.
#[test]
fn operands_read_in_place_by_rows() {
    let mut count = 0;
    for isa in isas() {
        for threads in [1, 2] {
            let h = handle(isa, threads);
            for &(m, n, k) in &[
                (70, 29, 600),
                (33, 15, 5),
                (64, 14, 1),
                (45, 49, 1100),
                (512, 196, 64),
            ] {
                for extra in [0, 3, 17, 64] {
                    for row_major in [true, false] {
                        // The operand read by rows: A (m × k, columns ld apart) for row-major
                        // C, B (k × n, rows ld apart) for column-major C.
                        let (d, a_len, b_len, c_len) = if row_major {
                            let ld = m + extra;
                            let d = GemmDesc::new(m, n, k)
                                .with_a_strides(1, ld)
                                .with_b_strides(n, 1)
                                .with_c_strides(n, 1);
                            (d, (k - 1) * ld + m, k * n, m * n)
                        } else {
                            let ld = n + extra;
                            let d = GemmDesc::new(m, n, k)
                                .with_a_strides(1, m)
                                .with_b_strides(ld, 1)
                                .with_c_strides(1, m);
                            (d, m * k, (k - 1) * ld + n, m * n)
                        };
                        let seed = (m * 31 + n * 7 + k + extra) as u64;
                        exact_product(&h, &d, [a_len, b_len, c_len], seed, || {
                            format!(
                                "{} x{threads} {m}x{n}x{k} +{extra} row-major {row_major}",
                                isa.name()
                            )
                        });
                        count += 1;
                    }
                }
            }
        }
    }
    assert!(count >= 80);
}

/// One row or one column of C from a matrix read along its depth (the dot-product path): a
/// classifier's `x·Wᵀ` at batch 1 and `W·x`, at depths around the 16 lanes, rows around the
/// groups of four and the thread split, padded leading dimensions, beta and the epilogue;
/// integer data exact against the reference, real data the same bits on every instruction
/// set and thread count.
#[test]
fn matrix_vector_products() {
    let mut first: Vec<(String, Vec<f32>)> = Vec::new();
    for isa in isas() {
        for threads in [1, 2] {
            let h = handle(isa, threads);
            let mut outs = Vec::new();
            for &(len, k) in &[
                (1usize, 1usize),
                (3, 15),
                (4, 16),
                (9, 17),
                (1000, 2051),
                (4099, 64),
            ] {
                for (case, row) in [false, true].into_iter().enumerate() {
                    let pad = 3 * case;
                    // row: C (1 × len) = x (1 × k) · Wᵀ, W stored len × (k + pad).
                    // column: C (len × 1) = W (len × (k + pad)) · x.
                    let d = if row {
                        GemmDesc::new(1, len, k)
                            .with_transb(true)
                            .with_b_strides(k + pad, 1)
                    } else {
                        GemmDesc::new(len, 1, k).with_a_strides(k + pad, 1)
                    };
                    let wlen = (len - 1) * (k + pad) + k;
                    for integer in [true, false] {
                        let w = data(wlen, 7, integer);
                        let x = data(k, 8, integer);
                        let c0 = data(len, 9, integer);
                        let bias = data(len, 10, integer);
                        let res = data(len, 11, integer);
                        let (a, b) = if row { (&x, &w) } else { (&w, &x) };
                        for (beta, epi) in [(0.0f32, false), (2.0, false), (1.0, true)] {
                            let mut c = c0.clone();
                            let e = if epi {
                                let e = Epilogue::new().with_activation(Activation::Relu);
                                if row {
                                    e.with_bias_per_col(&bias).with_residual(&res, len, 1)
                                } else {
                                    e.with_bias_per_row(&bias).with_residual(&res, 1, len)
                                }
                            } else {
                                Epilogue::new()
                            };
                            h.gemm_with_epilogue(&d, 2.0, a, b, beta, &mut c, &e)
                                .unwrap();
                            let mut want: Vec<f64> = c0.iter().map(|&v| v as f64).collect();
                            autodnn::reference::gemm(
                                d.m(),
                                d.n(),
                                k,
                                2.0,
                                a,
                                op_strides(d.a_strides(), false),
                                b,
                                op_strides(d.b_strides(), row),
                                beta as f64,
                                &mut want,
                                d.c_strides(),
                            )
                            .unwrap();
                            if epi {
                                for (i, v) in want.iter_mut().enumerate() {
                                    *v = (*v + bias[i] as f64 + res[i] as f64).max(0.0);
                                }
                            }
                            for i in 0..len {
                                let err = (c[i] as f64 - want[i]).abs();
                                let ok = if integer {
                                    c[i] as f64 == want[i]
                                } else {
                                    err <= 4.0 * (k as f64 + 4.0) * f32::EPSILON as f64 * 16.0
                                };
                                assert!(
                                    ok,
                                    "{isa:?} x{threads} len {len} k {k} row {row} beta {beta} \
                                     epilogue {epi}: C[{i}] = {}, want {}",
                                    c[i], want[i]
                                );
                            }
                            outs.push(c);
                        }
                    }
                }
            }
            let key = format!("{isa:?} x{threads}");
            match first.first() {
                None => first.push((key, outs.concat())),
                Some((k0, o0)) => assert!(
                    outs.concat()
                        .iter()
                        .zip(o0)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{key} differs from {k0}"
                ),
            }
        }
    }
}
