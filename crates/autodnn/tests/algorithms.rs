//! Every registered algorithm, on property-based random problems, on every ISA path this
//! machine has and on 1 and 2 threads, against the f64 reference: exact on integer data for
//! exact algorithms (within the documented bound for the others), identical bits across
//! thread counts for deterministic ones, and an exact workspace size.

mod common;

use autodnn::conv::{self, Accuracy, ConvAlgorithm};
use autodnn::cpu::Isa;
use autodnn::{reference, ConvProblem, Error, Handle};
use common::{
    assert_within, int_data, random_dilated_problem, random_padded_problem, random_problem,
    run_plain, run_prepared, Rng,
};

fn handles() -> Vec<(Isa, usize, Handle)> {
    let mut out = Vec::new();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        for threads in [1, 2] {
            let h = Handle::with_threads(threads).unwrap();
            h.set_isa_cap(isa);
            assert_eq!(h.isa(), isa);
            out.push((isa, threads, h));
        }
    }
    out
}

fn run(h: &Handle, a: &dyn ConvAlgorithm, p: &ConvProblem, x: &[f32], w: &[f32]) -> Vec<f32> {
    // NaN in y: every element of the tensor must be written.
    let mut y = vec![f32::NAN; p.y().span()];
    h.conv_forward(p, a.name(), x, w, &mut y).unwrap();
    y
}

/// Runs every accepting algorithm on `cases` problems of `generate` against the reference;
/// every algorithm `expected` names must have accepted some.
fn every_algorithm_on(
    generate: fn(&mut Rng) -> ConvProblem,
    seed: u64,
    cases: u64,
    expected: fn(&str) -> bool,
) {
    let handles = handles();
    let mut rng = Rng(seed);
    let mut ran = vec![0usize; conv::algorithms().len()];
    for case in 0..cases {
        let p = generate(&mut rng);
        let x = int_data(p.x().span(), case);
        let w = int_data(p.w().elements(), case + 1000);
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        for (ai, a) in conv::algorithms().iter().enumerate() {
            if a.check(&p).is_err() {
                continue;
            }
            ran[ai] += 1;
            let mut by_isa: Vec<(Isa, Vec<f32>)> = Vec::new();
            for (isa, threads, h) in &handles {
                let y = run(h, *a, &p, &x, &w);
                let what = format!("case {case} {} {isa:?} {threads} threads", a.name());
                assert_within(a.accuracy(), &p, &y, &r, &what);
                if !a.deterministic() {
                    continue;
                }
                if let Some((_, y1)) = by_isa.iter().find(|(i, _)| i == isa) {
                    let same = y1
                        .iter()
                        .zip(&y)
                        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                    assert!(same, "{what}: bits differ between thread counts");
                } else {
                    by_isa.push((*isa, y));
                }
            }
        }
    }
    for (a, n) in conv::algorithms().iter().zip(&ran) {
        assert!(
            *n > 0 || !expected(a.name()),
            "{} accepted none of the random problems",
            a.name()
        );
    }
}

fn all(_: &str) -> bool {
    true
}

/// Every algorithm but those for dilated kernels.
fn dense(name: &str) -> bool {
    name != "kn2row" && !name.starts_with("s2b_")
}

#[test]
fn every_algorithm_on_random_problems() {
    every_algorithm_on(random_problem, 0x5eed, 400, all);
}

/// Paddings of every kind (none, small, wider than the kernel, negative, unequal sides) on
/// small dense kernels: the problems that once crashed `gemm`, `implicit_gemm` and
/// `fft_tiling`.
#[test]
fn every_algorithm_on_random_paddings() {
    every_algorithm_on(random_padded_problem, 0xbad_fad, 400, dense);
}

/// Dilations up to 24 with strides, paddings past the image, groups and layouts: the atrous
/// problems `kn2row` and the space-to-batch algorithms are for.
#[test]
fn every_algorithm_on_random_dilations() {
    every_algorithm_on(random_dilated_problem, 0xa7_0005, 300, all);
}

/// The space-to-batch algorithms run their frames in up to four batches, one per pair of
/// output counts (rows, columns), each with the one preparation of the filter: random dilated
/// problems, plain and prepared weights, against the reference; enough of them with classes
/// of two output counts in a dimension.
#[test]
fn space_to_batch_batches_share_prepared_weights() {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let h = Handle::with_threads(2).unwrap();
    let mut rng = Rng(0x52b);
    let mut split = 0;
    for case in 0..150 {
        let p = random_dilated_problem(&mut rng);
        let x = int_data(p.x().span(), case);
        let w = int_data(p.w().elements(), case + 1000);
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        let (stride, dilation, out) = (p.conv().stride(), p.conv().dilation(), p.y().dims());
        let uneven = (0..2).any(|d| {
            let period = dilation[d] / gcd(stride[d], dilation[d]);
            out[2 + d] > period && out[2 + d] % period != 0
        });
        for a in conv::algorithms() {
            if !a.name().starts_with("s2b_") || a.check(&p).is_err() {
                continue;
            }
            split += usize::from(uneven);
            let pw = h.prepare_weights(&p, a.name(), &w).unwrap();
            for (how, y) in [
                ("plain", run_plain(&h, a.name(), &p, &x, &w)),
                ("prepared", run_prepared(&h, a.name(), &p, &x, &pw)),
            ] {
                let what = format!("case {case} {} {how}", a.name());
                assert_within(a.accuracy(), &p, &y, &r, &what);
            }
        }
    }
    assert!(
        split >= 20,
        "only {split} runs with classes of two output counts"
    );
}

/// kn2row's prepared filters are the engine's panels for the instruction set they were
/// prepared under: calls under every other cap (other panel widths) repack them and stay
/// exact, on random dilated problems.
#[test]
fn kn2row_prepared_panels_run_under_every_isa() {
    let hs = handles();
    let mut rng = Rng(0x4b6);
    let mut ran = 0;
    for case in 0..40 {
        let p = random_dilated_problem(&mut rng);
        let kn2row = conv::algorithms()
            .iter()
            .find(|a| a.name() == "kn2row")
            .unwrap();
        if kn2row.check(&p).is_err() {
            continue;
        }
        let x = int_data(p.x().span(), case);
        let w = int_data(p.w().elements(), case + 500);
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        for (from, _, hp) in &hs {
            let pw = hp.prepare_weights(&p, "kn2row", &w).unwrap();
            for (to, threads, h) in &hs {
                let y = run_prepared(h, "kn2row", &p, &x, &pw);
                let what = format!("case {case} prepared {from:?}, run {to:?} x{threads}");
                assert_within(Accuracy::Exact, &p, &y, &r, &what);
                ran += 1;
            }
        }
    }
    assert!(ran >= 20 * hs.len(), "only {ran} runs");
}

#[test]
fn direct_accepts_everything_and_needs_no_workspace() {
    let direct = conv::algorithms().last().unwrap();
    assert_eq!(direct.name(), "direct");
    assert!(direct.deterministic());
    let mut rng = Rng(99);
    for _ in 0..200 {
        let p = random_problem(&mut rng);
        assert_eq!(direct.check(&p), Ok(()));
        assert_eq!(direct.workspace_bytes(&p), 0);
    }
}

#[test]
fn results_within_rounding_on_real_data() {
    let handles = handles();
    let mut rng = Rng(77);
    for case in 0..60 {
        let p = random_problem(&mut rng);
        let x: Vec<f32> = (0..p.x().span())
            .map(|_| rng.range(-1000, 1000) as f32 / 1000.0)
            .collect();
        let w: Vec<f32> = (0..p.w().elements())
            .map(|_| rng.range(-1000, 1000) as f32 / 1000.0)
            .collect();
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        let terms = (p.c_per_group() * p.w().r() * p.w().s()) as f64;
        let eps = f32::EPSILON as f64;
        for a in conv::algorithms() {
            if a.check(&p).is_err() {
                continue;
            }
            // max|x|, max|w| <= 1.
            let bound = match a.accuracy() {
                Accuracy::Exact => 2.0 * terms * eps,
                Accuracy::Normwise { c, .. } => c * eps * terms,
            };
            for (_, _, h) in &handles {
                let y = run(h, *a, &p, &x, &w);
                let [n, k, oh, ow] = p.y().dims();
                for b in 0..n {
                    for c in 0..k {
                        for i in 0..oh {
                            for j in 0..ow {
                                let o = p.y().offset(b, c, i, j);
                                let d = (y[o] as f64 - r[o]).abs();
                                assert!(
                                    d <= bound,
                                    "case {case} {}: {} vs {}",
                                    a.name(),
                                    y[o],
                                    r[o]
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The reported workspace is the high-water mark: a run writes its last byte and nothing past
/// it, and one byte less is refused with a clear error.
#[test]
fn workspace_size_is_exact() {
    let h = Handle::with_threads(2).unwrap();
    let mut rng = Rng(5);
    for case in 0..240 {
        // Half of them dilated: the atrous algorithms' blocks and scratch depend on which
        // taps see the image.
        let p = if case % 2 == 0 {
            random_problem(&mut rng)
        } else {
            random_dilated_problem(&mut rng)
        };
        let x = int_data(p.x().span(), case);
        let w = int_data(p.w().elements(), case + 1);
        for a in conv::algorithms() {
            if a.check(&p).is_err() {
                continue;
            }
            let need = a.workspace_bytes(&p);
            assert_eq!(h.conv_workspace_size(&p, a.name()).unwrap(), need);
            let mut high = 0usize;
            for sentinel in [0xA5u8, 0x5A] {
                let mut ws = vec![sentinel; need + 64];
                let mut y = vec![0.0; p.y().span()];
                h.conv_forward_with_workspace(&p, a.name(), &x, &w, &mut y, &mut ws)
                    .unwrap();
                assert!(
                    ws[need..].iter().all(|&b| b == sentinel),
                    "{} wrote past its workspace",
                    a.name()
                );
                high = high.max(ws.iter().rposition(|&b| b != sentinel).map_or(0, |i| i + 1));
            }
            assert_eq!(
                high,
                need,
                "case {case} {}: reported {need} bytes, used {high}",
                a.name()
            );
            if need > 0 {
                let mut ws = vec![0u8; need - 1];
                let mut y = vec![0.0; p.y().span()];
                let e = h
                    .conv_forward_with_workspace(&p, a.name(), &x, &w, &mut y, &mut ws)
                    .unwrap_err();
                assert!(matches!(e, Error::WorkspaceTooSmall { .. }), "{e:?}");
            }
        }
    }
}

#[test]
fn handle_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Handle>();
    assert_send_sync::<ConvProblem>();
}
