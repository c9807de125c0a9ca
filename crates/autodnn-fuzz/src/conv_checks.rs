//! What every valid convolution problem must satisfy, whatever surface it came from.

use std::sync::OnceLock;

use autodnn::conv::{self, Accuracy, EpilogueArgs, Weights};
use autodnn::cpu::Isa;
use autodnn::{reference, ConvProblem, DataType, Error, Handle};

use crate::conv_backward;
use crate::input::int_data;

/// Problems whose tensors each hold at most this many elements (spans included) are run.
pub const RUN_MAX_ELEMENTS: usize = 20_000;
/// ... and whose direct definition costs at most this many FLOPs.
pub const RUN_MAX_FLOPS: f64 = 4e5;
/// Below this many FLOPs, prepared weights and a caller-owned workspace are run too.
pub const FULL_RUN_MAX_FLOPS: f64 = 5e4;
/// The backward operations' bound on [`dense_flops`]: their algorithms do several times the
/// definition's work on small problems (stride-phase residues, transposed filters, per-group
/// transforms), and the instrumented build runs each some hundred times slower than a release
/// build.
pub const BWD_RUN_MAX_FLOPS: f64 = 1.5e5;

/// The definition's FLOPs of `p` as if its output had the larger of the two images' areas.
///
/// Backward data computes the input's gradient over the whole input image, and its
/// Winograd, FFT and via-forward algorithms transform that image per group, however few
/// output pixels feed it: a 224 × 1 input of 16 groups behind a 1 × 12 output (a negative
/// bottom padding) costs 27 kFLOPs by the definition and 1 ms per Winograd run. Bounding
/// the backward runs by this measure keeps every input of the harness well under the 1 s
/// timeout of an instrumented build.
pub fn dense_flops(p: &ConvProblem) -> f64 {
    let [_, _, ih, iw] = p.x().dims();
    let [_, _, oh, ow] = p.y().dims();
    let (x_area, y_area) = ((ih * iw) as f64, (oh * ow) as f64);
    p.flops() * (x_area / y_area.max(1.0)).max(1.0)
}

/// Handles for every instruction set this machine has, on 1 and 2 threads.
pub fn handles() -> &'static [Handle] {
    static HANDLES: OnceLock<Vec<Handle>> = OnceLock::new();
    HANDLES.get_or_init(|| {
        let mut out = Vec::new();
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            for threads in [1, 2] {
                let h = Handle::with_threads(threads).expect("a handle starts");
                h.set_isa_cap(isa);
                out.push(h);
            }
        }
        out
    })
}

/// The handle `sel` picks.
pub fn handle(sel: usize) -> &'static Handle {
    let hs = handles();
    &hs[sel % hs.len()]
}

/// True when `p` is small enough to run every algorithm on it.
pub fn is_small(p: &ConvProblem) -> bool {
    p.x().span() <= RUN_MAX_ELEMENTS
        && p.y().span() <= RUN_MAX_ELEMENTS
        && p.w().elements() <= RUN_MAX_ELEMENTS
        && p.flops() <= RUN_MAX_FLOPS
}

/// Checks, workspace queries, cost features and the heuristic ranking of `p` in the forward
/// and the three backward operations (for every problem, however large: they must be cheap),
/// then, for small f32 problems without an epilogue, runs every accepting algorithm of one
/// operation (picked by `seed`) on integer data against `direct` and `direct` against the
/// f64 reference.
pub fn check_problem(p: &ConvProblem, h: &Handle, seed: u64) {
    let accepted = queries(p, h);
    conv_backward::queries(p, h);
    if !is_small(p) || !p.epilogue().is_none() {
        return;
    }
    if !p.is_f32() {
        run_reduced(p, h, seed, &accepted);
        return;
    }
    match (seed % 4) as usize {
        0 => run_all(p, h, seed, &accepted),
        _ if dense_flops(p) > BWD_RUN_MAX_FLOPS => {}
        k => conv_backward::run_all(
            p,
            conv_backward::OPS[k - 1],
            h,
            seed,
            (seed >> 8) & 1 == 1,
            dense_flops(p) <= FULL_RUN_MAX_FLOPS,
        ),
    }
}

/// The names of the algorithms that accept `p`, after checking the queries of every one.
fn queries(p: &ConvProblem, h: &Handle) -> Vec<&'static str> {
    let mut accepted = Vec::new();
    for a in conv::algorithms() {
        // The operation's check: the algorithm's own plus the element types it computes.
        match autodnn::op::Algorithm::<autodnn::op::ConvForward>::check(*a, p) {
            Ok(()) => {
                // The operation's size: with the f32 copies of bf16 and f16 tensors.
                let ws = autodnn::op::Algorithm::<autodnn::op::ConvForward>::workspace_bytes(*a, p);
                assert_eq!(h.conv_workspace_size(p, a.name()), Ok(ws), "{}", a.name());
                assert!(ws >= a.workspace_bytes(&p.as_f32()), "{}", a.name());
                for (i, f) in a.cost_features(p).iter().enumerate() {
                    assert!(
                        f.is_finite() && *f >= 0.0,
                        "{}: cost feature {i} is {f}",
                        a.name()
                    );
                }
                accepted.push(a.name());
            }
            Err(reason) => {
                assert!(!reason.is_empty(), "{} declined without a reason", a.name());
                let e = h.conv_workspace_size(p, a.name()).unwrap_err();
                assert!(matches!(e, Error::Declined { .. }), "{e:?}");
            }
        }
    }
    assert!(
        accepted.contains(&"direct") || p.x().dtype() != DataType::F32,
        "direct must accept every valid f32 problem: {p:?}"
    );
    let ranked = h.get_conv_algorithms(p).expect("the heuristic ranks");
    let mut names: Vec<&str> = ranked.iter().map(|r| r.algo).collect();
    names.sort_unstable();
    let mut want = accepted.clone();
    want.sort_unstable();
    assert_eq!(
        names, want,
        "the ranking lists each accepting algorithm once"
    );
    for r in &ranked {
        assert!(
            r.predicted_ms.is_finite() && r.predicted_ms >= 0.0,
            "{}: predicted {} ms",
            r.algo,
            r.predicted_ms
        );
        let a = conv::find(r.algo).expect("ranked algorithms are registered");
        assert_eq!(
            r.workspace_bytes,
            autodnn::op::Algorithm::<autodnn::op::ConvForward>::workspace_bytes(a, p)
        );
    }
    accepted
}

fn run(h: &Handle, name: &str, p: &ConvProblem, x: &[f32], w: &[f32]) -> Vec<f32> {
    // NaN: every element of the tensor must be written.
    let mut y = vec![f32::NAN; p.y().span()];
    h.conv_forward(p, name, x, w, &mut y)
        .unwrap_or_else(|e| panic!("{name} failed on an accepted problem: {e} ({p:?})"));
    y
}

/// Compares `y` with `want` over the tensor's elements: equal for exact algorithms, within
/// the documented bound otherwise ([`Accuracy::tolerance`]).
fn compare(p: &ConvProblem, y: &[f32], want: &[f32], acc: Accuracy, what: &str) {
    let [n, k, oh, ow] = p.y().dims();
    let (mut diff, mut max) = (0.0f64, 0.0f64);
    for b in 0..n {
        for c in 0..k {
            for i in 0..oh {
                for j in 0..ow {
                    let o = p.y().offset(b, c, i, j);
                    let (got, exp) = (y[o], want[o]);
                    if acc == Accuracy::Exact {
                        assert!(
                            got == exp,
                            "{what}: y[{b},{c},{i},{j}] = {got}, direct gives {exp} ({p:?})"
                        );
                    } else {
                        let d = (f64::from(got) - f64::from(exp)).abs();
                        assert!(!d.is_nan(), "{what}: y[{b},{c},{i},{j}] = {got} ({p:?})");
                        diff = diff.max(d);
                        max = max.max(f64::from(exp).abs());
                    }
                }
            }
        }
    }
    // The data are integers in [-4, 4] (`int_data`).
    let depth = p.c_per_group() * p.w().r() * p.w().s();
    let tol = acc.tolerance(depth, 4.0, 4.0, max);
    assert!(
        diff <= tol,
        "{what}: max|y - direct| = {diff} > {tol} ({p:?})"
    );
}

fn run_all(p: &ConvProblem, h: &Handle, seed: u64, accepted: &[&'static str]) {
    let x = int_data(p.x().span(), seed);
    let w = int_data(p.w().elements(), seed ^ 0x5555);
    let direct = run(h, "direct", p, &x, &w);
    let r = reference::conv_forward(p, &x, &w).expect("the reference runs");
    let as_f32: Vec<f32> = r.iter().map(|&v| v as f32).collect();
    compare(
        p,
        &direct,
        &as_f32,
        Accuracy::Exact,
        "direct vs the f64 reference",
    );
    let full = p.flops() <= FULL_RUN_MAX_FLOPS;
    for &name in accepted {
        let a = conv::find(name).expect("registered");
        let acc = a.accuracy();
        if name != "direct" {
            let y = run(h, name, p, &x, &w);
            compare(p, &y, &direct, acc, name);
        }
        if !full {
            continue;
        }
        // Prepared weights give the same output.
        let prepared = h
            .prepare_weights(p, name, &w)
            .unwrap_or_else(|e| panic!("{name}: prepare failed: {e}"));
        let mut y = vec![f32::NAN; p.y().span()];
        h.conv_forward_ex(
            p,
            name,
            &x,
            Weights::Prepared(&prepared),
            &mut y,
            &EpilogueArgs::default(),
            None,
        )
        .unwrap_or_else(|e| panic!("{name} prepared: {e}"));
        compare(p, &y, &direct, acc, &format!("{name} prepared"));
        // A caller-owned workspace of exactly the reported size suffices; one byte less is
        // refused.
        let need = a.workspace_bytes(p);
        let mut ws = vec![0u8; need];
        let mut y = vec![f32::NAN; p.y().span()];
        h.conv_forward_with_workspace(p, name, &x, &w, &mut y, &mut ws)
            .unwrap_or_else(|e| panic!("{name} with its workspace: {e}"));
        compare(p, &y, &direct, acc, &format!("{name} caller workspace"));
        if need > 0 {
            let mut ws = vec![0u8; need - 1];
            let e = h
                .conv_forward_with_workspace(p, name, &x, &w, &mut y, &mut ws)
                .unwrap_err();
            assert!(matches!(e, Error::WorkspaceTooSmall { .. }), "{e:?}");
        }
    }
}

/// An error from a descriptor constructor or a parse: a bad-input kind naming its field.
pub fn assert_named_error(e: &Error) {
    match e {
        Error::BadParam { field, .. } | Error::Overflow { field, .. } => {
            assert!(!field.is_empty(), "an error without a field: {e:?}")
        }
        other => panic!("a descriptor error of an unexpected kind: {other:?}"),
    }
}

/// A problem of bf16 or f16 tensors: f32 buffers are refused naming x; on integer data (exact
/// in both types) one accepting algorithm (picked by `seed`) and `direct` give the f64 result
/// rounded once to y's type, exactly for the exact algorithms.
fn run_reduced(p: &ConvProblem, h: &Handle, seed: u64, accepted: &[&'static str]) {
    use autodnn::op::{ConvForward, ConvFwdInputs, TensorBuf};
    let xf = int_data(p.x().span(), seed);
    let wf = int_data(p.w().elements(), seed ^ 0x5a5a);
    let mut yf = vec![0.0; p.y().span()];
    let e = h.conv_forward(p, "direct", &xf, &wf, &mut yf).unwrap_err();
    assert!(
        matches!(&e, Error::BadParam { field, .. } if field == "x.dtype"),
        "{e:?}"
    );
    if dense_flops(p) > FULL_RUN_MAX_FLOPS || accepted.is_empty() {
        return;
    }
    let r = reference::conv_forward(&p.as_f32(), &xf, &wf).unwrap();
    let x = TensorBuf::from_f32(&xf, p.x().dtype(), "x").unwrap();
    let w = TensorBuf::from_f32(&wf, p.w().dtype(), "w").unwrap();
    let pick = accepted[(seed as usize >> 4) % accepted.len()];
    let exact: Vec<f32> = r.iter().map(|&v| v as f32).collect();
    let mut rounded = vec![0.0; exact.len()];
    TensorBuf::from_f32(&exact, p.y().dtype(), "r")
        .unwrap()
        .widen_into(&mut rounded);
    for name in ["direct", pick] {
        let mut y = TensorBuf::from_f32(&vec![f32::NAN; p.y().span()], p.y().dtype(), "y").unwrap();
        let inputs = ConvFwdInputs {
            x: x.view(),
            w: Weights::Tensor(w.view()),
            epilogue: EpilogueArgs::default(),
        };
        match h.run_algorithm::<ConvForward>(p, name, &inputs, &mut y.as_mut(), None) {
            Ok(()) => {}
            Err(Error::OutOfMemory { .. }) => continue,
            Err(e) => panic!("{name} on {p:?}: {e:?}"),
        }
        let mut got = vec![0.0; p.y().span()];
        y.widen_into(&mut got);
        // The exact algorithms equal the reference rounded once to y's type; the others stay
        // within their bound plus one ulp of y's type (2^-7 of max|ref| at most, for bf16):
        // the reference and the algorithm's result each round by up to half an ulp, and
        // either way near a tie.
        let acc = match conv::find(name).unwrap().accuracy() {
            Accuracy::Exact => Accuracy::Exact,
            Accuracy::Normwise { c, int_rel } => Accuracy::Normwise {
                c,
                int_rel: int_rel + 2f64.powi(-7),
            },
        };
        compare(p, &got, &rounded, acc, name);
    }
}
