//! Reduced-precision GEMM: bf16 and f16 operands, and f32 operands under
//! `MathMode::AllowBf16`, against the f64 reference, on every ISA this machine runs and 1 and
//! 2 threads, with every choice of units (`Bf16Units`). Each test prints which kernel family
//! ran (the AVX512-BF16 one where the CPU has it and the choice lets it, else the f32 kernels
//! on operands converted while packing).

mod common;

use autodnn::cpu::{Feature, Isa};
use autodnn::gemm::{
    bf16_unit_speedup_for, kernel_name_for, kernel_name_for_depth, GemmDesc, BF16_UNITS_MIN_SPEEDUP,
};
use autodnn::{bf16, f16, Bf16Units, DataType, Handle, MathMode};
use common::Rng;

fn isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_available()).collect()
}

fn handle(isa: Isa, threads: usize, math: MathMode, units: Bf16Units) -> Handle {
    let h = Handle::with_threads(threads).unwrap();
    h.set_isa_cap(isa);
    h.set_math_mode(math);
    h.set_bf16_units(units);
    h
}

/// An integer in [-4, 4].
fn int(r: &mut Rng) -> f32 {
    r.range(-4, 4) as f32
}

/// A real in [-1, 1] on a grid of 2^-22, mostly not a bf16 value.
fn real(r: &mut Rng) -> f32 {
    r.range(-(1 << 22), 1 << 22) as f32 / (1 << 22) as f32
}

/// C = A·B in f64 for row-major or transposed operands as `d` describes them (alpha 1,
/// beta 0), from the operands as f64.
fn reference(d: &GemmDesc, a: &[f64], b: &[f64]) -> Vec<f64> {
    let (m, n, k) = (d.m(), d.n(), d.k());
    let [ars, acs] = d.a_strides();
    let [brs, bcs] = d.b_strides();
    let at = |i: usize, p: usize| {
        if d.transa() == autodnn::gemm::Transpose::Yes {
            a[p * ars + i * acs]
        } else {
            a[i * ars + p * acs]
        }
    };
    let bt = |p: usize, j: usize| {
        if d.transb() == autodnn::gemm::Transpose::Yes {
            b[j * brs + p * bcs]
        } else {
            b[p * brs + j * bcs]
        }
    };
    let [crs, ccs] = d.c_strides();
    let mut c = vec![0.0; (m - 1) * crs + (n - 1) * ccs + 1];
    for i in 0..m {
        for j in 0..n {
            c[i * crs + j * ccs] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
        }
    }
    c
}

/// Shapes with ragged edges, several depth blocks (some of odd depth) and both orders.
fn cases() -> Vec<GemmDesc> {
    let mut out = Vec::new();
    for &(m, n, k) in &[
        (1, 1, 1),
        (33, 15, 7),
        (64, 28, 1000),
        (100, 37, 2051),
        (5, 300, 96),
    ] {
        out.push(GemmDesc::new(m, n, k));
        out.push(
            GemmDesc::new(m, n, k)
                .with_transa(true)
                .with_a_strides(m, 1),
        );
        out.push(
            GemmDesc::new(m, n, k)
                .with_transb(true)
                .with_b_strides(k, 1)
                .with_c_strides(1, m),
        );
    }
    out
}

/// Elements a strided operand needs.
fn span(rows: usize, cols: usize, [rs, cs]: [usize; 2]) -> usize {
    (rows - 1) * rs + (cols - 1) * cs + 1
}

fn operand_spans(d: &GemmDesc) -> (usize, usize) {
    let (ar, ac) = if d.transa() == autodnn::gemm::Transpose::Yes {
        (d.k(), d.m())
    } else {
        (d.m(), d.k())
    };
    let (br, bc) = if d.transb() == autodnn::gemm::Transpose::Yes {
        (d.n(), d.k())
    } else {
        (d.k(), d.n())
    };
    (span(ar, ac, d.a_strides()), span(br, bc, d.b_strides()))
}

/// Integers in [-4, 4] are exact in bf16 and f16 and so are their products and sums (below
/// 2^24): bf16 and f16 operands give the f64 result exactly, as do f32 operands under
/// `allow_bf16`.
#[test]
fn integer_operands_are_exact_in_every_type_and_mode() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for isa in isas() {
        for threads in [1, 2] {
            for (math, units) in MathMode::ALL
                .into_iter()
                .flat_map(|m| Bf16Units::ALL.map(|u| (m, u)))
            {
                let h = handle(isa, threads, math, units);
                eprintln!(
                    "{isa:?} x{threads} {} {}: bf16 on {}, f16 on {}, f32 on {}",
                    math.name(),
                    units.name(),
                    kernel_name_for(isa, DataType::Bf16, math, units),
                    kernel_name_for(isa, DataType::F16, math, units),
                    kernel_name_for(isa, DataType::F32, math, units)
                );
                for d in cases() {
                    let (la, lb) = operand_spans(&d);
                    let a: Vec<f32> = (0..la).map(|_| int(&mut rng)).collect();
                    let b: Vec<f32> = (0..lb).map(|_| int(&mut rng)).collect();
                    let want = reference(
                        &d,
                        &a.iter().map(|&x| x as f64).collect::<Vec<_>>(),
                        &b.iter().map(|&x| x as f64).collect::<Vec<_>>(),
                    );
                    let check = |got: &[f32], what: &str| {
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(*g as f64, *w, "{what} {d:?} {isa:?} x{threads} c[{i}]");
                        }
                    };
                    let mut c = vec![0.0f32; want.len()];
                    let ab: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
                    let bb: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
                    h.gemm(&d, 1.0, &ab, &bb, 0.0, &mut c).unwrap();
                    check(&c, "bf16");
                    let ah: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
                    let bh: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
                    c.fill(f32::NAN);
                    h.gemm(&d, 1.0, &ah, &bh, 0.0, &mut c).unwrap();
                    check(&c, "f16");
                    c.fill(f32::NAN);
                    h.gemm(&d, 1.0, &a, &b, 0.0, &mut c).unwrap();
                    check(&c, "f32");
                    // alpha and beta on a prior C: C = 2·A·B − C.
                    let prior: Vec<f32> = (0..want.len()).map(|_| int(&mut rng)).collect();
                    c.copy_from_slice(&prior);
                    h.gemm(&d, 2.0, &ab, &bb, -1.0, &mut c).unwrap();
                    for (i, ((g, w), p)) in c.iter().zip(&want).zip(&prior).enumerate() {
                        assert_eq!(*g as f64, 2.0 * w - *p as f64, "beta {d:?} {isa:?} c[{i}]");
                    }
                }
            }
        }
    }
}

/// On real data: f32 operands under `allow_bf16` give the f64 product of the operands
/// rounded to bf16 (to nearest even) within the f32 summation bound, k·2^-24·Σ|a·b| (the
/// documented bound of the bf16 GEMM); where a bf16 family runs, the result is then not the
/// strict one. bf16 operands meet the same bound in every mode.
#[test]
fn allow_bf16_rounds_f32_operands_and_sums_in_f32() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for (isa, units) in isas()
        .into_iter()
        .flat_map(|i| Bf16Units::ALL.map(|u| (i, u)))
    {
        for threads in [1, 2] {
            let h = handle(isa, threads, MathMode::AllowBf16, units);
            for d in cases() {
                let family =
                    kernel_name_for_depth(isa, DataType::F32, MathMode::AllowBf16, units, d.k());
                eprintln!(
                    "{isa:?} x{threads} {} k {}: f32 under allow_bf16 on {family}",
                    units.name(),
                    d.k()
                );
                let (la, lb) = operand_spans(&d);
                let a: Vec<f32> = (0..la).map(|_| real(&mut rng)).collect();
                let b: Vec<f32> = (0..lb).map(|_| real(&mut rng)).collect();
                let rounded = |v: &[f32]| -> Vec<f64> {
                    v.iter().map(|&x| bf16::from_f32(x).to_f64()).collect()
                };
                let (ar, br) = (rounded(&a), rounded(&b));
                let want = reference(&d, &ar, &br);
                let abs = reference(
                    &d,
                    &ar.iter().map(|x| x.abs()).collect::<Vec<_>>(),
                    &br.iter().map(|x| x.abs()).collect::<Vec<_>>(),
                );
                let exact = reference(
                    &d,
                    &a.iter().map(|&x| x as f64).collect::<Vec<_>>(),
                    &b.iter().map(|&x| x as f64).collect::<Vec<_>>(),
                );
                let bound = |i: usize| d.k() as f64 * 2f64.powi(-24) * abs[i] + 1e-30;
                let mut c = vec![0.0f32; want.len()];
                h.gemm(&d, 1.0, &a, &b, 0.0, &mut c).unwrap();
                let mut away = 0;
                for i in 0..want.len() {
                    if family.contains("bf16") {
                        let e = (c[i] as f64 - want[i]).abs();
                        assert!(e <= bound(i), "{d:?} {isa:?} c[{i}]: {e} > {}", bound(i));
                        if (c[i] as f64 - exact[i]).abs() > bound(i) {
                            away += 1;
                        }
                    } else {
                        let e = (c[i] as f64 - exact[i]).abs();
                        assert!(e <= bound(i), "{d:?} {isa:?} c[{i}] strict: {e}");
                    }
                }
                if family.contains("bf16") && d.k() > 8 {
                    assert!(away > 0, "{d:?}: no element shows the bf16 rounding");
                }
                // bf16 operands: the same bound, in strict mode too.
                let ab: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
                let bb: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
                let hs = handle(isa, threads, MathMode::Strict, units);
                hs.gemm(&d, 1.0, &ab, &bb, 0.0, &mut c).unwrap();
                for i in (0..want.len()).filter(|&i| want[i] != 0.0 || abs[i] != 0.0) {
                    let e = (c[i] as f64 - want[i]).abs();
                    assert!(
                        e <= bound(i),
                        "bf16 {d:?} {isa:?} c[{i}]: {e} > {}",
                        bound(i)
                    );
                }
            }
        }
    }
}

/// The conversion of f32 operands under `allow_bf16` rounds to nearest even, at ties, and
/// keeps infinities and NaN; subnormal inputs (and products below the normal range) become
/// zero on the AVX512-BF16 kernels, as the instructions treat them. Read through C = A·1
/// with k = 1, whose single product is exact.
#[test]
fn allow_bf16_conversion_rounds_to_nearest_even() {
    let ulp = 2f32.powi(-7); // bf16's unit in the last place at 1
    let cases: [(f32, f32); 9] = [
        (1.0 + ulp / 2.0, 1.0),                        // a tie: to even (down)
        (1.0 + ulp + ulp / 2.0, 1.0 + 2.0 * ulp),      // a tie: to even (up)
        (1.0 + ulp / 2.0 + 2f32.powi(-20), 1.0 + ulp), // past the tie: up
        (1.0 + ulp / 4.0, 1.0),                        // below the tie: down
        (-(1.0 + ulp / 2.0), -1.0),
        (f32::MAX, f32::INFINITY), // rounds past bf16's largest finite value
        (f32::INFINITY, f32::INFINITY),
        (f32::NEG_INFINITY, f32::NEG_INFINITY),
        (3.0e38, bf16::from_f32(3.0e38).to_f32()),
    ];
    for (isa, units) in isas()
        .into_iter()
        .flat_map(|i| Bf16Units::ALL.map(|u| (i, u)))
    {
        let family = kernel_name_for_depth(isa, DataType::F32, MathMode::AllowBf16, units, 1);
        let h = handle(isa, 1, MathMode::AllowBf16, units);
        let d = GemmDesc::new(cases.len() + 2, 1, 1);
        let mut a: Vec<f32> = cases.iter().map(|c| c.0).collect();
        a.push(f32::NAN);
        a.push(1e-40); // subnormal
        let mut c = vec![0.0f32; a.len()];
        h.gemm(&d, 1.0, &a, &[1.0], 0.0, &mut c).unwrap();
        eprintln!("{isa:?} {}: {family}", units.name());
        let bf16_family = family.contains("bf16");
        for (i, &(x, want)) in cases.iter().enumerate() {
            let want = if bf16_family { want } else { x };
            assert_eq!(c[i], want, "{isa:?} {x:e}");
            if bf16_family {
                assert_eq!(want, bf16::from_f32(x).to_f32(), "half's rounding of {x:e}");
            }
        }
        assert!(c[cases.len()].is_nan(), "{isa:?}: NaN");
        let sub = c[cases.len() + 1];
        assert_eq!(
            sub,
            if bf16_family { 0.0 } else { 1e-40 },
            "{isa:?}: subnormal"
        );
    }
}

/// Which family computes products of bf16 values: `never` the f32 kernels, `always` the
/// first bf16 family wherever the CPU (within the cap) has one for the product's depth (AMX
/// tiles from depth 16, else AVX512-BF16 dot products), `auto` that family only where its
/// measured speed-up over f32 reaches the threshold. f16 and strict f32 operands never run
/// on them.
#[test]
fn bf16_units_follow_the_choice_and_the_measured_speedup() {
    for isa in Isa::ALL {
        for k in [3, 16, 1024, usize::MAX] {
            let speedup = bf16_unit_speedup_for(isa, k);
            eprintln!("{isa:?} k {k}: bf16 units {speedup:?} times the f32 multiply-add rate");
            let has = isa.usable().contains(Feature::Avx512Bf16);
            assert_eq!(speedup.is_some(), has, "{isa:?} k {k}");
            let amx = isa.usable().contains(Feature::AmxBf16) && k >= 16;
            let faster = speedup.is_some_and(|s| s >= BF16_UNITS_MIN_SPEEDUP);
            let f32_family = autodnn::gemm::kernel_name(isa);
            for units in Bf16Units::ALL {
                let on_bf16 = match units {
                    Bf16Units::Never => false,
                    Bf16Units::Always => has,
                    Bf16Units::Auto => has && faster,
                };
                for (dtype, math) in [
                    (DataType::Bf16, MathMode::Strict),
                    (DataType::Bf16, MathMode::AllowBf16),
                    (DataType::F32, MathMode::AllowBf16),
                ] {
                    let family = kernel_name_for_depth(isa, dtype, math, units, k);
                    assert_eq!(
                        family.contains("bf16"),
                        on_bf16,
                        "{isa:?} {units:?} {dtype:?} k {k}"
                    );
                    assert_eq!(
                        family.starts_with("amx"),
                        on_bf16 && amx,
                        "{isa:?} {units:?} {dtype:?} k {k}: {family}"
                    );
                    if !on_bf16 {
                        assert_eq!(family, f32_family, "{isa:?} {units:?} {dtype:?}");
                    }
                    if k == usize::MAX {
                        assert_eq!(family, kernel_name_for(isa, dtype, math, units));
                    }
                }
                for (dtype, math) in [
                    (DataType::F32, MathMode::Strict),
                    (DataType::F16, MathMode::AllowBf16),
                ] {
                    assert_eq!(
                        kernel_name_for_depth(isa, dtype, math, units, k),
                        f32_family
                    );
                }
            }
        }
    }
}

/// The AMX tiles (where the CPU has them and the OS grants their state; elsewhere the family
/// that runs instead, named in the output) on the shapes that exercise their edges: depths
/// around the 16-pair and 32-deep steps, ragged m and n around the 32x32 tile pairs, C in
/// both layouts (the column-major one is stored straight from the tiles), alpha 1 and not,
/// beta 0 (NaN in C ignored), 1 and 2.5, on 1 and 2 threads: exact on integer data.
#[test]
fn amx_tiles_are_exact_at_their_edges() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let isa = Isa::Amx;
    let shapes = [
        (32, 32, 16),
        (31, 33, 17),
        (64, 64, 31),
        (17, 5, 33),
        (65, 97, 48),
        (1, 40, 64),
        (40, 1, 95),
        (96, 64, 257),
    ];
    let mut ran = std::collections::BTreeSet::new();
    for threads in [1, 2] {
        let h = handle(isa, threads, MathMode::AllowBf16, Bf16Units::Always);
        for &(m, n, k) in &shapes {
            let family = kernel_name_for_depth(
                isa,
                DataType::Bf16,
                MathMode::AllowBf16,
                Bf16Units::Always,
                k,
            );
            ran.insert(family);
            for col_major_c in [false, true] {
                let mut d = GemmDesc::new(m, n, k);
                if col_major_c {
                    d = d.with_c_strides(1, m);
                }
                let (la, lb) = operand_spans(&d);
                let a: Vec<f32> = (0..la).map(|_| int(&mut rng)).collect();
                let b: Vec<f32> = (0..lb).map(|_| int(&mut rng)).collect();
                let want = reference(
                    &d,
                    &a.iter().map(|&x| x as f64).collect::<Vec<_>>(),
                    &b.iter().map(|&x| x as f64).collect::<Vec<_>>(),
                );
                let ab: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
                let bb: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
                for (alpha, beta) in [(1.0f32, 0.0f32), (1.0, 1.0), (2.0, 2.5), (-1.0, 0.0)] {
                    let prior: Vec<f32> = (0..want.len()).map(|_| int(&mut rng)).collect();
                    let mut c = prior.clone();
                    if beta == 0.0 {
                        c.fill(f32::NAN);
                    }
                    h.gemm(&d, alpha, &ab, &bb, beta, &mut c).unwrap();
                    let mut cf = prior.clone();
                    if beta == 0.0 {
                        cf.fill(f32::NAN);
                    }
                    h.gemm(&d, alpha, &a, &b, beta, &mut cf).unwrap();
                    for i in 0..want.len() {
                        let p = if beta == 0.0 { 0.0 } else { prior[i] as f64 };
                        let w = alpha as f64 * want[i] + beta as f64 * p;
                        assert_eq!(
                            c[i] as f64, w,
                            "{family} {d:?} x{threads} a{alpha} b{beta} c[{i}]"
                        );
                        assert_eq!(cf[i] as f64, w, "f32 {family} {d:?} x{threads} c[{i}]");
                    }
                }
            }
        }
    }
    eprintln!("ran on: {ran:?}");
    if Isa::Amx.usable().contains(Feature::AmxBf16) {
        assert!(ran.iter().any(|f| f.starts_with("amx")), "{ran:?}");
    }
}
