//! The backward convolutions (data, filter, bias): every registered algorithm on random
//! problems over every geometry, every ISA path this machine has and 1, 2 and 3 threads,
//! against the f64 oracle (exact on integer data for exact algorithms, within the documented
//! bound for the others); deterministic algorithms bit-identical across thread counts; the
//! scales; the adjoint identities, which share no code with the oracle; bad calls.

mod common;

use autodnn::cpu::Isa;
use autodnn::op::{
    Accuracy, Algorithm, ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvBwdBiasInputs,
    ConvBwdDataInputs, ConvBwdFilterInputs, Registered, TensorMut,
};
use autodnn::{reference, ConvProblem, Error, Handle, OpKind};
use common::{int_data, random_padded_problem, random_problem, Rng};

fn handles() -> Vec<(Isa, usize, Handle)> {
    let mut out = Vec::new();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        for threads in [1, 2, 3] {
            let h = Handle::with_threads(threads).unwrap();
            h.set_isa_cap(isa);
            out.push((isa, threads, h));
        }
    }
    out
}

/// Offsets of the output tensor's elements (dx like x, dw like w, db 0..K).
fn out_offsets(p: &ConvProblem, op: OpKind) -> Vec<usize> {
    match op {
        OpKind::ConvBackwardData => p.x().offsets().collect(),
        OpKind::ConvBackwardFilter => p.w().offsets().collect(),
        _ => (0..p.w().k()).collect(),
    }
}

/// Checks `got` against `want` (the oracle, already scaled) at the output's elements.
fn check(p: &ConvProblem, op: OpKind, got: &[f32], want: &[f64], acc: Accuracy, what: &str) {
    let offs = out_offsets(p, op);
    let max = offs
        .iter()
        .map(|&o| want[o].abs())
        .fold(0.0f64, f64::max)
        .max(1.0);
    for &o in &offs {
        let d = (got[o] as f64 - want[o]).abs();
        assert!(!d.is_nan(), "{what}: element {o} is {} ({p:?})", got[o]);
        match acc {
            Accuracy::Exact => assert!(
                got[o] == want[o] as f32,
                "{what}: element {o} is {} but the oracle says {} ({p:?})",
                got[o],
                want[o]
            ),
            _ => assert!(
                d <= acc.integer_tolerance() * max,
                "{what}: |error| {d} > {} · {max} ({p:?})",
                acc.integer_tolerance()
            ),
        }
    }
}

fn same_bits(a: &[f32], b: &[f32], offs: &[usize]) -> bool {
    offs.iter().all(|&o| a[o].to_bits() == b[o].to_bits())
}

/// One operation's registry on `cases` random problems: every accepting algorithm on every
/// handle, against `oracle`; returns how many problems each algorithm accepted.
/// How a test runs one algorithm: (handle, name, problem, first input, second input, output,
/// alpha, beta).
type RunFn = dyn Fn(&Handle, &str, &ConvProblem, &[f32], &[f32], &mut [f32], f32, f32);
/// The oracle of an operation on its two inputs.
type OracleFn = dyn Fn(&ConvProblem, &[f32], &[f32]) -> Vec<f64>;

fn registry_on<O: Registered<Problem = ConvProblem>>(
    op: OpKind,
    generate: fn(&mut Rng) -> ConvProblem,
    seed: u64,
    cases: u64,
    run: &RunFn,
    out_len: fn(&ConvProblem) -> usize,
    oracle: &OracleFn,
) -> Vec<usize> {
    let handles = handles();
    let mut rng = Rng(seed);
    let algos = O::algorithms();
    let mut ran = vec![0usize; algos.len()];
    for case in 0..cases {
        let p = generate(&mut rng).for_op(op).unwrap();
        // (dy, w) for backward data, (x, dy) for the filter, (dy, -) for the bias.
        let (a_len, b_len) = match op {
            OpKind::ConvBackwardData => (p.y().span(), p.w().elements()),
            OpKind::ConvBackwardFilter => (p.x().span(), p.y().span()),
            _ => (p.y().span(), 0),
        };
        let a = int_data(a_len, case * 7 + 1);
        let b = int_data(b_len, case * 7 + 2);
        let want = oracle(&p, &a, &b);
        let offs = out_offsets(&p, op);
        // Half the cases accumulate: out = 2 · grad + 1 · out.
        let (alpha, beta) = if case % 2 == 0 {
            (1.0, 0.0)
        } else {
            (2.0, 1.0)
        };
        let prior = int_data(out_len(&p), case * 7 + 3);
        let mut want_scaled = want.clone();
        if beta != 0.0 {
            for &o in &offs {
                want_scaled[o] = alpha as f64 * want[o] + prior[o] as f64;
            }
        }
        for (ai, algo) in algos.iter().enumerate() {
            if algo.check(&p).is_err() {
                continue;
            }
            ran[ai] += 1;
            let mut first: Vec<(Isa, Vec<f32>)> = Vec::new();
            for (isa, threads, h) in &handles {
                // NaN where beta = 0: every element must be written, none read.
                let mut out = if beta == 0.0 {
                    vec![f32::NAN; out_len(&p)]
                } else {
                    prior.clone()
                };
                run(h, algo.name(), &p, &a, &b, &mut out, alpha, beta);
                let what = format!("{} case {case} {} {isa:?} {threads}T", O::NAME, algo.name());
                check(&p, op, &out, &want_scaled, algo.accuracy(), &what);
                if !algo.deterministic() {
                    continue;
                }
                match first.iter().find(|(i, _)| i == isa) {
                    Some((_, o1)) => assert!(same_bits(o1, &out, &offs), "{what}: bits differ"),
                    None => first.push((*isa, out)),
                }
            }
        }
    }
    ran
}

#[allow(clippy::too_many_arguments)]
fn run_data(
    h: &Handle,
    name: &str,
    p: &ConvProblem,
    dy: &[f32],
    w: &[f32],
    dx: &mut [f32],
    al: f32,
    be: f32,
) {
    h.conv_backward_data(p, name, dy, w, dx, al, be).unwrap()
}
#[allow(clippy::too_many_arguments)]
fn run_filter(
    h: &Handle,
    name: &str,
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    dw: &mut [f32],
    al: f32,
    be: f32,
) {
    h.conv_backward_filter(p, name, x, dy, dw, al, be).unwrap()
}
#[allow(clippy::too_many_arguments)]
fn run_bias(
    h: &Handle,
    name: &str,
    p: &ConvProblem,
    dy: &[f32],
    _: &[f32],
    db: &mut [f32],
    al: f32,
    be: f32,
) {
    h.conv_backward_bias(p, name, dy, db, al, be).unwrap()
}

fn every_algorithm_ran<O: Registered>(ran: &[usize]) {
    for (a, n) in O::algorithms().iter().zip(ran) {
        assert!(
            *n > 0,
            "{} {} accepted none of the random problems",
            O::NAME,
            a.name()
        );
    }
}

fn data_oracle(p: &ConvProblem, dy: &[f32], w: &[f32]) -> Vec<f64> {
    reference::conv_backward_data(p, dy, w).unwrap()
}
fn filter_oracle(p: &ConvProblem, x: &[f32], dy: &[f32]) -> Vec<f64> {
    reference::conv_backward_filter(p, x, dy).unwrap()
}
fn bias_oracle(p: &ConvProblem, dy: &[f32], _: &[f32]) -> Vec<f64> {
    reference::conv_backward_bias(p, dy).unwrap()
}

#[test]
fn backward_data_algorithms_match_the_oracle() {
    let mut ran = registry_on::<ConvBackwardData>(
        OpKind::ConvBackwardData,
        random_problem,
        11,
        60,
        &run_data,
        |p| p.x().span(),
        &data_oracle,
    );
    let more = registry_on::<ConvBackwardData>(
        OpKind::ConvBackwardData,
        random_padded_problem,
        12,
        40,
        &run_data,
        |p| p.x().span(),
        &data_oracle,
    );
    ran.iter_mut().zip(more).for_each(|(a, b)| *a += b);
    every_algorithm_ran::<ConvBackwardData>(&ran);
}

#[test]
fn backward_filter_algorithms_match_the_oracle() {
    let mut ran = registry_on::<ConvBackwardFilter>(
        OpKind::ConvBackwardFilter,
        random_problem,
        21,
        60,
        &run_filter,
        |p| p.w().elements(),
        &filter_oracle,
    );
    let more = registry_on::<ConvBackwardFilter>(
        OpKind::ConvBackwardFilter,
        random_padded_problem,
        22,
        40,
        &run_filter,
        |p| p.w().elements(),
        &filter_oracle,
    );
    ran.iter_mut().zip(more).for_each(|(a, b)| *a += b);
    every_algorithm_ran::<ConvBackwardFilter>(&ran);
}

#[test]
fn backward_bias_algorithms_match_the_oracle() {
    let ran = registry_on::<ConvBackwardBias>(
        OpKind::ConvBackwardBias,
        random_problem,
        31,
        40,
        &run_bias,
        |p| p.w().k(),
        &bias_oracle,
    );
    every_algorithm_ran::<ConvBackwardBias>(&ran);
}

/// Σ a[o]·b[o] over a tensor's element offsets, in f64 (exact on these integers).
fn dot(a: &[f32], b: &[f32], offs: &[usize]) -> f64 {
    offs.iter().map(|&o| a[o] as f64 * b[o] as f64).sum()
}

/// lhs = ⟨a, b⟩ exactly for exact algorithms; within the algorithm's integer bound times
/// Σ|a|·|b| for transformed-domain ones.
fn assert_adjoint(lhs: f64, a: &[f32], b: &[f32], offs: &[usize], acc: Accuracy, what: &str) {
    let rhs = dot(a, b, offs);
    if acc == Accuracy::Exact {
        assert_eq!(lhs, rhs, "{what}");
    } else {
        let norm: f64 = offs
            .iter()
            .map(|&o| (a[o] as f64 * b[o] as f64).abs())
            .sum();
        let tol = acc.integer_tolerance() * norm.max(1.0);
        assert!((lhs - rhs).abs() <= tol, "{what}: {lhs} vs {rhs}");
    }
}

/// ⟨dy, conv_fwd(x, w)⟩ = ⟨conv_bwd_data(dy, w), x⟩ = ⟨conv_bwd_filter(x, dy), w⟩ for every
/// algorithm of each operation: the three operations are each other's adjoints, checked
/// without the oracle.
#[test]
fn the_three_operations_are_adjoint() {
    let h = Handle::with_threads(2).unwrap();
    let mut rng = Rng(41);
    for case in 0..80u64 {
        let p = if case % 2 == 0 {
            random_problem(&mut rng)
        } else {
            random_padded_problem(&mut rng)
        };
        let x = int_data(p.x().span(), case * 3 + 1);
        let w = int_data(p.w().elements(), case * 3 + 2);
        let dy = int_data(p.y().span(), case * 3 + 3);
        let mut y = vec![0.0; p.y().span()];
        h.conv_forward(&p, "direct", &x, &w, &mut y).unwrap();
        let y_offs: Vec<usize> = {
            let [n, k, oh, ow] = p.y().dims();
            let mut v = Vec::new();
            for b in 0..n {
                for c in 0..k {
                    for i in 0..oh {
                        for j in 0..ow {
                            v.push(p.y().offset(b, c, i, j));
                        }
                    }
                }
            }
            v
        };
        let lhs = dot(&dy, &y, &y_offs);
        let pd = p.for_op(OpKind::ConvBackwardData).unwrap();
        for a in ConvBackwardData::algorithms()
            .iter()
            .filter(|a| a.check(&pd).is_ok())
        {
            let mut dx = vec![f32::NAN; p.x().span()];
            h.conv_backward_data(&p, a.name(), &dy, &w, &mut dx, 1.0, 0.0)
                .unwrap();
            let what = format!("case {case} bwd_data {}: {p:?}", a.name());
            let offs = out_offsets(&p, OpKind::ConvBackwardData);
            assert_adjoint(lhs, &dx, &x, &offs, a.accuracy(), &what);
        }
        let pf = p.for_op(OpKind::ConvBackwardFilter).unwrap();
        for a in ConvBackwardFilter::algorithms()
            .iter()
            .filter(|a| a.check(&pf).is_ok())
        {
            let mut dw = vec![f32::NAN; p.w().elements()];
            h.conv_backward_filter(&p, a.name(), &x, &dy, &mut dw, 1.0, 0.0)
                .unwrap();
            let what = format!("case {case} bwd_filter {}: {p:?}", a.name());
            let offs = out_offsets(&p, OpKind::ConvBackwardFilter);
            assert_adjoint(lhs, &dw, &w, &offs, a.accuracy(), &what);
        }
    }
}

#[test]
fn bad_backward_calls_name_the_field() {
    let h = Handle::new().unwrap();
    let p = common::problem("ic4oc8ih9kh3ph1", autodnn::Layout::Nchw);
    let dy = vec![0.0; p.y().span()];
    let w = vec![0.0; p.w().elements()];
    let mut dx = vec![0.0; p.x().span()];
    let short = &dy[..dy.len() - 1];
    match h.conv_backward_data(&p, "direct", short, &w, &mut dx, 1.0, 0.0) {
        Err(Error::BufferTooSmall { field, .. }) => assert_eq!(field, "dy"),
        other => panic!("{other:?}"),
    }
    match h.conv_backward_data(&p, "direct", &dy, &w, &mut dx[..3], 1.0, 0.0) {
        Err(Error::BufferTooSmall { field, .. }) => assert_eq!(field, "dx"),
        other => panic!("{other:?}"),
    }
    match h.conv_backward_filter(&p, "direct", &dx, &dy, &mut [0.0; 5], 1.0, 0.0) {
        Err(Error::BufferTooSmall { field, .. }) => assert_eq!(field, "dw"),
        other => panic!("{other:?}"),
    }
    match h.conv_backward_bias(&p, "direct", &dy, &mut dx, f32::NAN, 0.0) {
        Err(Error::BadParam { field, .. }) => assert_eq!(field, "alpha"),
        other => panic!("{other:?}"),
    }
    // A forward problem handed to the generic verb of another operation.
    let inputs = ConvBwdDataInputs::new(&dy, &w);
    match h.run_algorithm::<ConvBackwardData>(
        &p,
        "direct",
        &inputs,
        &mut TensorMut::F32(&mut dx),
        None,
    ) {
        Err(Error::BadParam { field, .. }) => assert_eq!(field, "problem.op"),
        other => panic!("{other:?}"),
    }
    // A backward problem refuses a fused epilogue.
    let e = autodnn::conv::Epilogue {
        act: autodnn::Activation::Relu,
        ..Default::default()
    };
    match p.with_epilogue(e).for_op(OpKind::ConvBackwardFilter) {
        Err(Error::BadParam { field, .. }) => assert_eq!(field, "epilogue"),
        other => panic!("{other:?}"),
    }
    let _ = (
        ConvBwdFilterInputs::new(&dx, &dy),
        ConvBwdBiasInputs::new(&dy),
    );
}

/// The paths of `gemm` backward filter, on problems chosen to take each: output rows of a
/// large image in blocks, one in-place GEMM per image (1x1, NCHW), one over the whole batch
/// (1x1, NHWC, and single pixels in either layout, the batch folded into its depth), blocks
/// of several small images; beta = 0 and 1; 1 to 3 threads.
#[test]
fn gemm_backward_filter_takes_every_path_exactly() {
    let cases = [
        ("mb2ic3ih70iw70oc4kh3ph1", autodnn::Layout::Nchw),
        ("mb2ic3ih70iw70oc4kh3ph1", autodnn::Layout::Nhwc),
        ("mb3ic5ih20iw20oc6kh1ph0", autodnn::Layout::Nchw),
        ("mb3ic5ih20iw20oc6kh1ph0", autodnn::Layout::Nhwc),
        ("mb5ic5ih8iw8oc6kh1ph0", autodnn::Layout::Nchw),
        ("mb5g2ic6ih9iw9oc4kh3ph1sh2", autodnn::Layout::Nchw),
        // More output channels than taps, swapped for the tiles' fill (MobileNet's stem).
        ("mb2ic3ih20iw20oc32kh3ph1sh2", autodnn::Layout::Nchw),
        // Single pixels: the batch folded into the product's depth.
        ("mb6ic5ih1iw1oc7kh1ph0", autodnn::Layout::Nchw),
        ("mb4g2ic6ih1iw1oc4kh1ph0", autodnn::Layout::Nhwc),
    ];
    backward_filter_exactly("gemm", &cases, false);
}

/// `algo`'s backward filter on `cases`, exact against the oracle, with beta = 0 (dw full of
/// NaN) and 1, alpha 1 and 2, on 1 to 3 threads (on every instruction set here when
/// `every_isa`).
fn backward_filter_exactly(algo: &str, cases: &[(&str, autodnn::Layout)], every_isa: bool) {
    let handles: Vec<(String, Handle)> = if every_isa {
        handles()
            .into_iter()
            .map(|(isa, t, h)| (format!("{isa:?} {t}T"), h))
            .collect()
    } else {
        (1..=3)
            .map(|t| (format!("{t}T"), Handle::with_threads(t).unwrap()))
            .collect()
    };
    for (i, &(s, layout)) in cases.iter().enumerate() {
        let p = common::problem(s, layout);
        let x = int_data(p.x().span(), i as u64);
        let dy = int_data(p.y().span(), i as u64 + 50);
        let want = reference::conv_backward_filter(&p, &x, &dy).unwrap();
        let prior = int_data(p.w().elements(), i as u64 + 90);
        for (name, h) in &handles {
            for (alpha, beta) in [(1.0f32, 0.0f32), (1.0, 1.0), (2.0, 1.0)] {
                let mut dw = if beta == 0.0 {
                    vec![f32::NAN; p.w().elements()]
                } else {
                    prior.clone()
                };
                h.conv_backward_filter(&p, algo, &x, &dy, &mut dw, alpha, beta)
                    .unwrap();
                for (j, (&g, &r)) in dw.iter().zip(&want).enumerate() {
                    let r = alpha as f64 * r + beta as f64 * prior[j] as f64;
                    assert!(
                        g == r as f32,
                        "{algo} {s} {layout:?} {name} alpha {alpha} beta {beta}: dw[{j}] = {g}, \
                         want {r}"
                    );
                }
            }
        }
    }
}

/// The paths of `implicit_gemm` backward filter (no workspace): one product per image with
/// dy read in place (NCHW images of at least 128 positions; 1x1 stride 1 with x read in
/// place too), one over the whole batch with dy in place (NHWC) or both operands packed
/// (small NCHW images, strided, padded and dilated windows, groups, single pixels), 1x1
/// strided windows read from x subsampled; taps as
/// the engine's rows or the output channels, in ragged panels; every instruction set here.
/// And the problems it declines: a filter whose taps are not in x's order, convolution
/// mode.
#[test]
fn implicit_gemm_backward_filter_takes_every_path_exactly() {
    use autodnn::Layout::{Nchw, Nhwc};
    let cases = [
        ("mb2ic3ih70iw70oc4kh3ph1", Nchw),
        ("mb2ic3ih70iw70oc4kh3ph1", Nhwc),
        ("mb3ic5ih20iw20oc6kh1ph0", Nchw),
        ("mb3ic5ih20iw20oc6kh1ph0", Nhwc),
        ("mb3ic40ih12iw12oc6kh1ph0", Nchw),
        ("mb5ic5ih8iw8oc6kh1ph0", Nchw),
        ("mb5g2ic6ih9iw9oc4kh3ph1sh2", Nchw),
        ("mb5g2ic6ih9iw9oc4kh3ph1sh2", Nhwc),
        ("mb2ic40ih12iw12oc36kh3ph1", Nchw),
        ("mb2ic40ih12iw12oc70kh3ph1", Nhwc),
        ("mb2ic3ih20iw20oc40kh3ph1sh2", Nchw),
        ("mb3ic7ih11iw13oc9kh3kw2ph2pw1sh2sw3dh1dw2", Nchw),
        ("mb3ic7ih11iw13oc9kh3kw2ph2pw1sh2sw3dh1dw2", Nhwc),
        ("mb6ic5ih1iw1oc7kh1ph0", Nchw),
        ("mb4g2ic6ih1iw1oc4kh1ph0", Nhwc),
        // 1x1 strided, unpadded: x subsampled read as the patch matrix, a run per output
        // row (one product per image at 400 positions; a single output row; groups).
        ("mb3ic10ih13iw12oc7kh1ph0sh2", Nchw),
        ("mb3ic10ih13iw12oc7kh1ph0sh2", Nhwc),
        ("mb2ic20ih40iw40oc24kh1ph0sh2", Nchw),
        ("mb2ic36ih40iw40oc6kh1ph0sh2", Nhwc),
        ("mb4ic6ih2iw9oc5kh1ph0sh2", Nchw),
        ("mb2g2ic12ih9iw10oc6kh1kw1sh3sw2ph0pw0", Nchw),
    ];
    backward_filter_exactly("implicit_gemm", &cases, true);
    let algo = ConvBackwardFilter::algorithms()
        .iter()
        .find(|a| a.name() == "implicit_gemm")
        .unwrap();
    let bwd = |p: ConvProblem| p.for_op(OpKind::ConvBackwardFilter).unwrap();
    let p = bwd(common::problem("mb2ic3ih9iw9oc4kh3ph1", Nchw));
    assert!(algo.check(&p).is_ok());
    assert_eq!(algo.workspace_bytes(&p), 0);
    let flipped = p.conv().with_mode(autodnn::ConvMode::Convolution);
    let mut declined = vec![ConvProblem::forward(*p.x(), *p.w(), flipped, *p.y()).unwrap()];
    for (layout, filter) in [
        (Nchw, autodnn::FilterLayout::Krsc),
        (Nhwc, autodnn::FilterLayout::Kcrs),
    ] {
        let q = common::problem("mb2ic3ih9iw9oc4kh3ph1", layout);
        let w = autodnn::FilterDesc::new(autodnn::DataType::F32, filter, [4, 3, 3, 3]).unwrap();
        declined.push(ConvProblem::forward(*q.x(), w, *q.conv(), *q.y()).unwrap());
    }
    for q in declined {
        let e = algo.check(&bwd(q)).unwrap_err();
        assert!(e.contains("not in x's order"), "{e}");
    }
}

/// `gemm` backward data on 1x1 stride-1 layers, whose GEMM writes dx directly (no column
/// buffer; Wᵀ packed once for batches of small images; single pixels folded into one
/// product), and on a strided one through col2im; beta = 0 and 1; both layouts.
#[test]
fn gemm_backward_data_with_and_without_the_column_buffer() {
    let cases = [
        "mb2ic5ih6oc7kh1ph0",
        "mb2g2ic6ih5oc4kh1ph0",
        "mb2ic5ih9oc3kh1ph0sh2",
        "mb1ic4ih7oc6kh3ph1sh2",
        // Wᵀ packed once for a batch of small images; single pixels (the batch folded into
        // one product's columns).
        "mb3ic40ih6oc33kh1ph0",
        "mb5ic9ih1oc7kh1ph0",
        "mb4g2ic6ih1oc10kh1ph0",
    ];
    for (i, s) in cases.into_iter().enumerate() {
        for layout in [autodnn::Layout::Nchw, autodnn::Layout::Nhwc] {
            let p = common::problem(s, layout);
            let dy = int_data(p.y().span(), i as u64);
            let w = int_data(p.w().elements(), i as u64 + 10);
            let want = reference::conv_backward_data(&p, &dy, &w).unwrap();
            let prior = int_data(p.x().span(), i as u64 + 20);
            let offs = out_offsets(&p, OpKind::ConvBackwardData);
            for threads in 1..=2 {
                let h = Handle::with_threads(threads).unwrap();
                for beta in [0.0f32, 1.0] {
                    let mut dx = if beta == 0.0 {
                        vec![f32::NAN; p.x().span()]
                    } else {
                        prior.clone()
                    };
                    h.conv_backward_data(&p, "gemm", &dy, &w, &mut dx, 2.0, beta)
                        .unwrap();
                    for &o in &offs {
                        let r = 2.0 * want[o] + beta as f64 * prior[o] as f64;
                        assert!(
                            dx[o] == r as f32,
                            "{s} {layout:?} {threads}T beta {beta}: dx[{o}] = {}, want {r}",
                            dx[o]
                        );
                    }
                }
            }
        }
    }
}

/// Backward data through the forward (`implicit_gemm`) copies the filter rotated with its
/// channels transposed: in vector tiles where channels are unit-stride on both sides (1x1
/// KCRS filters, every KRSC one), tap blocks otherwise, in bands of 16 destination channels
/// that threads share. Channel counts off the tiles and bands, groups, strides 1 and 2, both
/// layouts, every ISA path, 1 to 3 threads (the last case is large enough to split).
#[test]
fn backward_data_through_the_forward_rotates_the_filter_exactly() {
    let cases = [
        "mb2ic37ih5oc35kh1ph0",
        "mb2ic37ih6oc35kh1ph0sh2",
        "mb1g2ic40ih5oc36kh1ph0",
        "mb1ic19ih5oc35kh3ph1",
        "mb1ic35ih7oc21kh3ph1sh2",
        "mb1g2ic36ih4oc40kh3ph1",
        "mb1ic64ih4oc72kh3ph1",
    ];
    for (i, s) in cases.into_iter().enumerate() {
        for layout in [autodnn::Layout::Nchw, autodnn::Layout::Nhwc] {
            let p = common::problem(s, layout);
            let dy = int_data(p.y().span(), i as u64 + 30);
            let w = int_data(p.w().elements(), i as u64 + 40);
            let want = reference::conv_backward_data(&p, &dy, &w).unwrap();
            let offs = out_offsets(&p, OpKind::ConvBackwardData);
            for (isa, threads, h) in handles() {
                let mut dx = vec![f32::NAN; p.x().span()];
                h.conv_backward_data(&p, "implicit_gemm", &dy, &w, &mut dx, 1.0, 0.0)
                    .unwrap();
                for &o in &offs {
                    assert!(
                        dx[o] == want[o] as f32,
                        "{s} {layout:?} {isa:?} {threads}T: dx[{o}] = {}, want {}",
                        dx[o],
                        want[o]
                    );
                }
            }
        }
    }
}

/// `depthwise` backward filter on both of its NCHW paths: the channel-blocked one (at least
/// 16 output channels on small images: channel counts off the 16-lane blocks, channel
/// multipliers, strides, dilation, padding on every side, 2x2, 3x3, 5x5 and odd kernels;
/// transposed in registers with AVX-512 and AVX2, lane by lane without) and the flattened
/// one beside it (fewer channels, more pixels, and the middle sizes: 20x20 flattened with
/// AVX2 and portable code, blocked with AVX-512), exactly against
/// the oracle on integer data, every instruction set, 1 to 3 threads, beta 0 and 1,
/// convolution and cross-correlation.
#[test]
fn depthwise_backward_filter_takes_both_paths_exactly() {
    let cases = [
        "mb3g1024ic1024ih7oc1024oh7kh3ph1",
        "mb2g20ic20ih9iw11oc40oh5ow6kh3kw2sh2sw2ph1pw1",
        "mb2g17ic17ih14oc17oh7kh3sh2ph0",
        "mb2g24ic24ih12iw10oc48oh4ow4kh5kw5sh2sw2ph2pw1dh0",
        "mb2g33ic33ih9oc33oh5kh2ph0dh1",
        "mb1g18ic18ih6iw5oc18oh8ow7kh3kw3ph2pw2",
        "mb2g16ic16ih8oc16oh8kh1ph0",
        "mb2g20ic20ih9iw11oc40oh9ow11kh3kw3ph1pw1",
        "mb2g15ic15ih7oc15oh7kh3ph1",
        "mb2g32ic32ih12oc32oh12kh3ph1",
        "mb1g16ic16ih30oc16oh30kh3ph1",
        "mb1g40ic40ih29iw27oc40oh14ow13kh3sh2ph0",
        "mb2g24ic24ih20oc24oh20kh3ph1",
    ];
    for (i, s) in cases.into_iter().enumerate() {
        let base = common::problem(s, autodnn::Layout::Nchw);
        let conv = base.conv().with_mode(autodnn::ConvMode::Convolution);
        let flipped = ConvProblem::forward(*base.x(), *base.w(), conv, *base.y()).unwrap();
        let modes = [base, flipped];
        for p in modes {
            let x = int_data(p.x().span(), i as u64);
            let dy = int_data(p.y().span(), i as u64 + 50);
            let want = reference::conv_backward_filter(&p, &x, &dy).unwrap();
            let prior = int_data(p.w().elements(), i as u64 + 90);
            for (isa, threads, h) in handles() {
                for beta in [0.0f32, 1.0] {
                    let mut dw = if beta == 0.0 {
                        vec![f32::NAN; p.w().elements()]
                    } else {
                        prior.clone()
                    };
                    h.conv_backward_filter(&p, "depthwise", &x, &dy, &mut dw, 1.0, beta)
                        .unwrap();
                    for (j, (&g, &r)) in dw.iter().zip(&want).enumerate() {
                        let r = r + beta as f64 * prior[j] as f64;
                        assert!(
                            g == r as f32,
                            "{s} {:?} {isa:?} {threads}T beta {beta}: dw[{j}] = {g}, want {r}",
                            p.conv().mode()
                        );
                    }
                }
            }
        }
    }
}

/// `depthwise` backward data at stride above 1 computes each (image, channel) plane by
/// residue phases of a zero-padded dy plane: strides 2 to 4 (equal and not), channel
/// multipliers, odd and even widths (stride 2 interleaves two phases a vector at a time,
/// the last vector masked), widths over 32, padding on every side (wider than the kernel,
/// negative bottom and right), 1x1, 2x2, 3x3 and 5x5 kernels, residues no tap reaches,
/// rows with gaps between them; padding far larger than the image takes the residue path
/// instead. Exactly against the oracle on integer data, every instruction set, 1 to 3
/// threads, beta 0 onto NaN and alpha 2, beta 1 onto a prior gradient, convolution and
/// cross-correlation.
#[test]
fn depthwise_backward_data_by_residue_phases_exactly() {
    let cases = [
        "mb2g16ic16ih14oc16oh7kh3sh2ph0",
        "mb2g17ic17ih15iw13oc17oh8ow7kh3sh2ph1",
        "mb1g3ic3ih70iw71oc3oh35ow36kh3sh2ph1",
        "mb2g5ic5ih12iw11oc10oh4ow4kh3kw3sh3sw3ph1pw2",
        "mb1g4ic4ih9iw20oc4oh5ow5kh5kw5sh2sw4ph2pw0",
        "mb2g6ic6ih8iw8oc6oh4ow4kh1kw1sh2sw2ph0pw0",
        "mb1g6ic6ih9iw9oc6oh3ow3kh2kw2sh4sw4ph1pw1",
        "mb1g4ic4ih10iw10oc4oh8ow8kh3kw3sh2sw2ph6pw5",
        "mb2g7ic7ih11iw16oc14oh4ow7kh3kw3sh3sw2ph0pw0",
        "mb1g3ic3ih1iw9oc3oh1ow4kh3kw3sh2sw2ph1pw1",
        "mb1g2ic2ih16iw16oc2oh4ow4kh3kw3sh2sw2ph600pw600",
    ];
    for (i, s) in cases.into_iter().enumerate() {
        let base = common::problem(s, autodnn::Layout::Nchw);
        let conv = base.conv().with_mode(autodnn::ConvMode::Convolution);
        let mut ps = vec![
            base,
            ConvProblem::forward(*base.x(), *base.w(), conv, *base.y()).unwrap(),
        ];
        // Rows with gaps: x and dy with padded row pitches.
        let gapped = |d: &autodnn::TensorDesc| common::permuted(d.dims(), [0, 1, 2, 3], 3);
        let (gx, gy) = (gapped(base.x()), gapped(base.y()));
        ps.push(ConvProblem::forward(gx, *base.w(), *base.conv(), gy).unwrap());
        for p in ps {
            let dy = int_data(p.y().span(), i as u64 + 10);
            let w = int_data(p.w().elements(), i as u64 + 20);
            let want = reference::conv_backward_data(&p, &dy, &w).unwrap();
            let prior = int_data(p.x().span(), i as u64 + 30);
            let offs: Vec<usize> = p.x().offsets().collect();
            for (isa, threads, h) in handles() {
                for (alpha, beta) in [(1.0f32, 0.0f32), (2.0, 1.0)] {
                    let mut dx = if beta == 0.0 {
                        vec![f32::NAN; p.x().span()]
                    } else {
                        prior.clone()
                    };
                    h.conv_backward_data(&p, "depthwise", &dy, &w, &mut dx, alpha, beta)
                        .unwrap();
                    for &o in &offs {
                        let r = alpha as f64 * want[o] + beta as f64 * prior[o] as f64;
                        assert!(
                            dx[o] == r as f32,
                            "{s} {:?} {isa:?} {threads}T beta {beta}: dx[{o}] = {}, want {r}",
                            p.conv().mode(),
                            dx[o]
                        );
                    }
                }
            }
        }
    }
}
