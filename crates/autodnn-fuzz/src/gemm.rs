//! GEMM: shapes, transposes, strides, alpha and beta, batches, from bytes; small products
//! against a naive f64 loop on integer data (exact), also with bf16 and f16 operands and under
//! `allow_bf16`; everything else an error or a no-op.

use autodnn::gemm::{GemmDesc, MatrixOrder};
use autodnn::{bf16, f16, Bf16Units, Error, MathMode};

use crate::conv_checks::handle;
use crate::input::{int_data, Bytes};

/// Buffers are allocated for spans up to this many elements (each operand, whole batch).
const MAX_SPAN: usize = 1 << 16;
/// Products are run up to this many multiply-adds (whole batch).
const MAX_FMAS: usize = 1 << 21;
/// Sums of this many products of values in [-4, 4] stay exact in f32.
const MAX_K: usize = 1 << 16;
/// What the gaps of C hold: they must stay untouched.
const SENTINEL: f32 = 12345.0;

fn scale(b: &mut Bytes<'_>) -> f32 {
    b.pick(&[1.0, 0.0, -1.0, 2.0, 0.5, -2.0, 3.0, 1.0])
}

/// Strides of one operand: the default, small explicit ones (padded, transposed, zero) or
/// extreme ones.
fn strides(b: &mut Bytes<'_>) -> Option<[usize; 2]> {
    if b.below(3) == 0 {
        Some([b.size(48), b.size(48)])
    } else {
        None
    }
}

/// Element (i, j) of a stored matrix.
fn at(x: &[f32], rs: usize, cs: usize, i: usize, j: usize) -> f32 {
    x[i * rs + j * cs]
}

struct Product<'a> {
    desc: &'a GemmDesc,
    alpha: f32,
    beta: f32,
}

impl Product<'_> {
    /// The expected C of one product, in f64 (exact on these data).
    fn expect(&self, a: &[f32], b: &[f32], c0: &[f32]) -> Vec<(usize, f64)> {
        let d = self.desc;
        let [ars, acs] = d.a_strides();
        let [brs, bcs] = d.b_strides();
        let [crs, ccs] = d.c_strides();
        let ta = d.transa() == autodnn::gemm::Transpose::Yes;
        let tb = d.transb() == autodnn::gemm::Transpose::Yes;
        let mut out = Vec::with_capacity(d.m() * d.n());
        for i in 0..d.m() {
            for j in 0..d.n() {
                let mut s = 0.0f64;
                if self.alpha != 0.0 {
                    for p in 0..d.k() {
                        let av = if ta {
                            at(a, ars, acs, p, i)
                        } else {
                            at(a, ars, acs, i, p)
                        };
                        let bv = if tb {
                            at(b, brs, bcs, j, p)
                        } else {
                            at(b, brs, bcs, p, j)
                        };
                        s += f64::from(av) * f64::from(bv);
                    }
                }
                let o = i * crs + j * ccs;
                let mut v = f64::from(self.alpha) * s;
                if self.beta != 0.0 {
                    v += f64::from(self.beta) * f64::from(c0[o]);
                }
                out.push((o, v));
            }
        }
        out
    }
}

/// C's buffer: the sentinel in the gaps, NaN (beta = 0: C is not read) or integers in the
/// matrix.
fn c_buffer(len: usize, desc: &GemmDesc, beta: f32, seed: u64, at_offset: usize) -> Vec<f32> {
    let mut c = vec![SENTINEL; len];
    let vals = int_data(desc.m() * desc.n(), seed);
    let [crs, ccs] = desc.c_strides();
    for i in 0..desc.m() {
        for j in 0..desc.n() {
            c[at_offset + i * crs + j * ccs] = if beta == 0.0 {
                f32::NAN
            } else {
                vals[i * desc.n() + j]
            };
        }
    }
    c
}

/// A, B: integers, or NaN when alpha = 0 (A and B are then not read).
fn input(len: usize, alpha: f32, seed: u64) -> Vec<f32> {
    if alpha == 0.0 {
        vec![f32::NAN; len]
    } else {
        int_data(len, seed)
    }
}

fn check_c(c: &[f32], expected: &[(usize, f64)], base: usize, what: &str) {
    for &(o, v) in expected {
        let got = c[base + o];
        assert!(
            f64::from(got) == v,
            "{what}: C at offset {} is {got}, expected {v}",
            base + o
        );
    }
}

/// Where in `c` the matrix elements of product `i` lie (all others are gaps).
fn matrix_offsets(desc: &GemmDesc, base: usize) -> Vec<usize> {
    let [crs, ccs] = desc.c_strides();
    let mut v = Vec::new();
    for i in 0..desc.m() {
        for j in 0..desc.n() {
            v.push(base + i * crs + j * ccs);
        }
    }
    v
}

fn check_gaps(c: &[f32], written: &[usize], what: &str) {
    let mut mask = vec![false; c.len()];
    for &o in written {
        mask[o] = true;
    }
    for (o, (&v, &m)) in c.iter().zip(&mask).enumerate() {
        if !m {
            assert!(
                v.to_bits() == SENTINEL.to_bits(),
                "{what}: the gap at offset {o} of C was written ({v})"
            );
        }
    }
}

fn assert_gemm_error(e: &Error) {
    match e {
        Error::BadParam { field, .. }
        | Error::Overflow { field, .. }
        | Error::BufferTooSmall { field, .. } => assert!(!field.is_empty(), "{e:?}"),
        other => panic!("a GEMM error of an unexpected kind: {other:?}"),
    }
}

/// Decodes one GEMM call from `data` and runs it.
pub fn gemm(data: &[u8]) {
    let mut b = Bytes::new(data);
    let h = handle(b.u8().into());
    let seed = u64::from(b.u8());
    let (m, n, k) = (b.size(40), b.size(40), b.size(40));
    let mut desc = GemmDesc::new(m, n, k)
        .with_transa(b.bool())
        .with_transb(b.bool())
        .with_order(b.pick(&[MatrixOrder::RowMajor, MatrixOrder::ColMajor]));
    if let Some([r, c]) = strides(&mut b) {
        desc = desc.with_a_strides(r, c);
    }
    if let Some([r, c]) = strides(&mut b) {
        desc = desc.with_b_strides(r, c);
    }
    if let Some([r, c]) = strides(&mut b) {
        desc = desc.with_c_strides(r, c);
    }
    let p = Product {
        desc: &desc,
        alpha: scale(&mut b),
        beta: scale(&mut b),
    };
    let mode = b.below(3);
    // Buffers: exactly the span, a little more, or (rarely) one element short.
    let slack = b.pick(&[0isize, 0, 0, 1, 3, -1]);
    let valid = desc.validate();
    let spans = (desc.a_span(), desc.b_span(), desc.c_span());
    let (Ok(()), (Ok(sa), Ok(sb), Ok(sc))) = (&valid, spans) else {
        // An invalid descriptor is an error, whatever the buffers.
        let mut c = [0.0f32; 4];
        let e = h
            .gemm(&desc, p.alpha, &[0.0f32; 4], &[0.0f32; 4], p.beta, &mut c)
            .unwrap_err();
        assert_gemm_error(&e);
        let e = h
            .gemm_strided_batched(
                &desc,
                p.alpha,
                &[0.0f32; 4],
                0,
                &[0.0f32; 4],
                0,
                p.beta,
                &mut c,
                4,
                1,
            )
            .unwrap_err();
        assert_gemm_error(&e);
        return;
    };
    let fmas = m.saturating_mul(n).saturating_mul(k);
    let runnable =
        sa <= MAX_SPAN && sb <= MAX_SPAN && sc <= MAX_SPAN && fmas <= MAX_FMAS && k <= MAX_K;
    match mode {
        0 => single(&desc, &p, h, seed, runnable, slack, (sa, sb, sc)),
        1 => strided(&desc, &p, h, &mut b, seed, runnable, slack, (sa, sb, sc)),
        _ => batched(&desc, &p, h, &mut b, seed, runnable, (sa, sb, sc)),
    }
}

fn len_with(span: usize, slack: isize) -> Option<usize> {
    span.checked_add_signed(slack)
}

#[allow(clippy::too_many_arguments)]
fn single(
    desc: &GemmDesc,
    p: &Product<'_>,
    h: &autodnn::Handle,
    seed: u64,
    runnable: bool,
    slack: isize,
    (sa, sb, sc): (usize, usize, usize),
) {
    if !runnable {
        // Too large to allocate: short buffers are refused.
        let mut c = [0.0f32; 1];
        if sa > 1 || sb > 1 || sc > 1 {
            let e = h
                .gemm(desc, p.alpha, &[0.0f32], &[0.0f32], p.beta, &mut c)
                .unwrap_err();
            assert!(matches!(e, Error::BufferTooSmall { .. }), "{e:?}");
        }
        return;
    }
    let (Some(la), Some(lb), Some(lc)) = (
        len_with(sa, slack),
        len_with(sb, slack),
        len_with(sc, slack),
    ) else {
        return;
    };
    let a = input(la, p.alpha, seed);
    let bm = input(lb, p.alpha, seed + 1);
    let short = slack < 0 && (sa > 0 || sb > 0 || sc > 0);
    let mut c = if short {
        vec![0.0; lc]
    } else {
        c_buffer(lc, desc, p.beta, seed + 2, 0)
    };
    let c0 = c.clone();
    match h.gemm(desc, p.alpha, &a, &bm, p.beta, &mut c) {
        Ok(()) => {
            assert!(!short, "a short buffer was accepted");
            let want = p.expect(&a, &bm, &c0);
            check_c(&c, &want, 0, "gemm");
            check_gaps(&c, &matrix_offsets(desc, 0), "gemm");
            reduced_precision(desc, p, h, (&a, &bm, &c0), &want, seed);
        }
        Err(e) => {
            assert!(short, "a valid call failed: {e} ({desc:?})");
            assert!(matches!(e, Error::BufferTooSmall { .. }), "{e:?}");
        }
    }
}

/// The same product with bf16 and f16 operands, and with f32 operands under
/// `MathMode::AllowBf16`, with each choice of units (`always`: the bf16 kernels where the CPU
/// has them): the data are integers in [-4, 4], exact in both types, so the result is the
/// f64 one exactly in every case.
fn reduced_precision(
    desc: &GemmDesc,
    p: &Product<'_>,
    h: &autodnn::Handle,
    (a, b, c0): (&[f32], &[f32], &[f32]),
    want: &[(usize, f64)],
    seed: u64,
) {
    let mut c = c0.to_vec();
    let h = h.clone();
    h.set_bf16_units(Bf16Units::ALL[(seed / 3 % 3) as usize]);
    match seed % 3 {
        0 => {
            let a: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
            let b: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
            h.gemm(desc, p.alpha, &a, &b, p.beta, &mut c)
                .expect("a valid bf16 call");
            check_c(&c, want, 0, "bf16 gemm");
        }
        1 => {
            let a: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
            let b: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
            h.gemm(desc, p.alpha, &a, &b, p.beta, &mut c)
                .expect("a valid f16 call");
            check_c(&c, want, 0, "f16 gemm");
        }
        _ => {
            h.set_math_mode(MathMode::AllowBf16);
            h.gemm(desc, p.alpha, a, b, p.beta, &mut c)
                .expect("a valid allow_bf16 call");
            check_c(&c, want, 0, "allow_bf16 gemm");
        }
    }
    check_gaps(&c, &matrix_offsets(desc, 0), "reduced-precision gemm");
}

#[allow(clippy::too_many_arguments)]
fn strided(
    desc: &GemmDesc,
    p: &Product<'_>,
    h: &autodnn::Handle,
    b: &mut Bytes<'_>,
    seed: u64,
    runnable: bool,
    slack: isize,
    (sa, sb, sc): (usize, usize, usize),
) {
    let batch = b.size(5);
    // Strides: the span plus a gap, 0 (shared), or arbitrary.
    let stride = |span: usize, b: &mut Bytes<'_>| match b.below(4) {
        0 => 0,
        1 => b.size(64),
        _ => span.saturating_add(b.below(4)),
    };
    let (st_a, st_b, st_c) = (stride(sa, b), stride(sb, b), stride(sc, b));
    let need = |st: usize, span: usize| {
        if batch == 0 || span == 0 {
            Some(0)
        } else {
            (batch - 1).checked_mul(st)?.checked_add(span)
        }
    };
    // A call on one-element buffers that the sizes or strides make invalid: a typed error.
    let refused = || {
        let mut c = [0.0f32; 1];
        let e = h
            .gemm_strided_batched(
                desc,
                p.alpha,
                &[0.0f32],
                st_a,
                &[0.0f32],
                st_b,
                p.beta,
                &mut c,
                st_c,
                batch,
            )
            .unwrap_err();
        assert_gemm_error(&e);
    };
    let (Some(na), Some(nb), Some(nc)) = (need(st_a, sa), need(st_b, sb), need(st_c, sc)) else {
        refused();
        return;
    };
    let overlap = batch > 1 && sc > 0 && st_c < sc;
    let fmas = desc
        .m()
        .saturating_mul(desc.n())
        .saturating_mul(desc.k())
        .saturating_mul(batch);
    if !runnable || na > MAX_SPAN || nb > MAX_SPAN || nc > MAX_SPAN || fmas > MAX_FMAS {
        if na > 1 || nb > 1 || nc > 1 || overlap {
            refused();
        }
        return;
    }
    let (Some(la), Some(lb), Some(lc)) = (
        len_with(na, slack),
        len_with(nb, slack),
        len_with(nc, slack),
    ) else {
        return;
    };
    let short = slack < 0 && (na > 0 || nb > 0 || nc > 0);
    let a = input(la, p.alpha, seed);
    let bm = input(lb, p.alpha, seed + 1);
    let mut c = vec![SENTINEL; lc];
    if !short && !overlap {
        for i in 0..batch {
            if sc == 0 {
                break;
            }
            let one = c_buffer(sc, desc, p.beta, seed + 2 + i as u64, 0);
            for (o, v) in one.iter().enumerate() {
                if v.to_bits() != SENTINEL.to_bits() {
                    c[i * st_c + o] = *v;
                }
            }
        }
    }
    let c0 = c.clone();
    let r = h.gemm_strided_batched(
        desc, p.alpha, &a, st_a, &bm, st_b, p.beta, &mut c, st_c, batch,
    );
    match r {
        Ok(()) => {
            assert!(
                !short && !overlap,
                "an invalid batch was accepted ({desc:?})"
            );
            let mut written = Vec::new();
            for i in 0..batch {
                if sc == 0 {
                    break;
                }
                // An empty operand's offset is never formed: its stride is free.
                let ao = if sa == 0 { 0 } else { i * st_a };
                let bo = if sb == 0 { 0 } else { i * st_b };
                let co = i * st_c;
                let want = p.expect(
                    a.get(ao..).unwrap_or(&[]),
                    bm.get(bo..).unwrap_or(&[]),
                    &c0[co..],
                );
                check_c(&c, &want, co, &format!("strided batch item {i}"));
                written.extend(matrix_offsets(desc, co));
            }
            check_gaps(&c, &written, "strided batch");
        }
        Err(e) => {
            assert!(short || overlap, "a valid batch failed: {e} ({desc:?})");
            assert_gemm_error(&e);
        }
    }
}

fn batched(
    desc: &GemmDesc,
    p: &Product<'_>,
    h: &autodnn::Handle,
    b: &mut Bytes<'_>,
    seed: u64,
    runnable: bool,
    (sa, sb, sc): (usize, usize, usize),
) {
    let batch = b.below(4);
    let fmas = desc
        .m()
        .saturating_mul(desc.n())
        .saturating_mul(desc.k())
        .saturating_mul(batch);
    if !runnable || fmas > MAX_FMAS {
        return;
    }
    // Lists of unequal lengths are refused.
    let mismatch = b.below(8) == 0;
    let nc = if mismatch { batch + 1 } else { batch };
    let a: Vec<Vec<f32>> = (0..batch)
        .map(|i| input(sa, p.alpha, seed + 10 * i as u64))
        .collect();
    let bm: Vec<Vec<f32>> = (0..batch)
        .map(|i| input(sb, p.alpha, seed + 10 * i as u64 + 1))
        .collect();
    let mut c: Vec<Vec<f32>> = (0..nc)
        .map(|i| c_buffer(sc, desc, p.beta, seed + 10 * i as u64 + 2, 0))
        .collect();
    let c0 = c.clone();
    let ar: Vec<&[f32]> = a.iter().map(|v| &v[..]).collect();
    let br: Vec<&[f32]> = bm.iter().map(|v| &v[..]).collect();
    let mut cr: Vec<&mut [f32]> = c.iter_mut().map(|v| &mut v[..]).collect();
    match h.gemm_batched(desc, p.alpha, &ar, &br, p.beta, &mut cr) {
        Ok(()) => {
            assert!(!mismatch, "lists of unequal lengths were accepted");
            for i in 0..batch {
                let want = p.expect(&a[i], &bm[i], &c0[i]);
                check_c(&c[i], &want, 0, &format!("batch item {i}"));
                check_gaps(&c[i], &matrix_offsets(desc, 0), "batch");
            }
        }
        Err(e) => {
            assert!(mismatch, "a valid batch failed: {e}");
            assert!(matches!(e, Error::BadParam { .. }), "{e:?}");
        }
    }
}
