//! One handle shared by eight threads (forward calls, and a training mix of forward and the
//! three backward operations): mixed problems (3x3, 1x1, strided, grouped,
//! depthwise, 5x5; both layouts), every registered algorithm that accepts each one plus the
//! handle's own selection, and mixed workspaces (the handle's pool under different budgets
//! through clones that share it, and caller-owned workspaces of different sizes). Every
//! output is checked against the f64 reference: exactly for exact algorithms, within the
//! integer tolerance for Winograd and FFT.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use autodnn::conv::{self, EpilogueArgs, Weights};
use autodnn::{reference, ConvProblem, Error, Handle, Layout};
use common::{assert_accurate, int_data, problem, Rng};

const THREADS: usize = 8;
const ITERATIONS: usize = 150;

struct Case {
    name: String,
    p: ConvProblem,
    x: Vec<f32>,
    w: Vec<f32>,
    reference: Vec<f64>,
    /// The registered algorithms that accept the problem, with their workspace bytes.
    algos: Vec<(&'static str, usize)>,
}

fn cases() -> Vec<Case> {
    cases_of(&[
        "mb2ic8ih12oc16kh3ph1",
        "mb2ic16ih9oc8kh1",
        "mb1ic8ih13oc8kh3sh2ph1",
        "mb2g4ic8ih10oc8kh3ph1",
        "mb1g8ic8ih11oc8kh3ph1",
        "mb1ic4ih16oc4kh5ph2",
    ])
}

fn cases_of(specs: &[&str]) -> Vec<Case> {
    let mut out = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let p = problem(s, layout);
            let x = int_data(p.x().span(), 100 + i as u64);
            let w = int_data(p.w().elements(), 200 + i as u64);
            let reference = reference::conv_forward(&p, &x, &w).unwrap();
            let algos: Vec<(&'static str, usize)> = conv::algorithms()
                .iter()
                .filter(|a| a.check(&p).is_ok())
                .map(|a| (a.name(), a.workspace_bytes(&p)))
                .collect();
            assert!(algos.len() >= 2, "{s}: {algos:?}");
            out.push(Case {
                name: format!("{s} {layout:?}"),
                p,
                x,
                w,
                reference,
                algos,
            });
        }
    }
    out
}

fn check(case: &Case, algo: &str, y: &[f32], what: &str) {
    let acc = common::algo(algo).accuracy();
    assert_accurate(
        &case.p,
        y,
        &case.reference,
        acc,
        &format!("{}: {what}", case.name),
    );
}

#[test]
fn one_handle_shared_by_eight_threads_computes_every_output_right() {
    let cases = cases();
    let handle = Handle::with_threads(2).unwrap();
    // Clones share the handle's workspace pool, tuning cache and threads, each with its own
    // budget: a small one most workspaces exceed, and none at all.
    let small = cases
        .iter()
        .flat_map(|c| c.algos.iter().map(|a| a.1))
        .filter(|&b| b > 0)
        .min()
        .expect("some algorithm needs a workspace");
    let budgeted = handle.clone();
    budgeted.set_workspace_limit(Some(small));
    let no_workspace = handle.clone();
    no_workspace.set_workspace_limit(Some(0));
    let handles = [
        (&handle, None),
        (&budgeted, Some(small)),
        (&no_workspace, Some(0)),
    ];
    let (runs, refused, auto) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (cases, handles, handle) = (&cases, &handles, &handle);
            let (runs, refused, auto) = (&runs, &refused, &auto);
            s.spawn(move || {
                let mut rng = Rng(0x5eed + t as u64);
                for i in 0..ITERATIONS {
                    let case = &cases[rng.next_u64() as usize % cases.len()];
                    let (algo, needed) = case.algos[rng.next_u64() as usize % case.algos.len()];
                    let mut y = vec![f32::NAN; case.p.y().span()];
                    let what = format!("thread {t} iteration {i} {algo}");
                    match rng.range(0, 3) {
                        // The handle's workspace under one of the budgets.
                        0 => {
                            let (h, limit) = handles[rng.next_u64() as usize % handles.len()];
                            let r = h.conv_forward(&case.p, algo, &case.x, &case.w, &mut y);
                            if limit.is_some_and(|l| needed > l) {
                                assert!(
                                    matches!(r, Err(Error::OutOfMemory { .. })),
                                    "{what}: {needed} bytes over the budget {limit:?}: {r:?}"
                                );
                                refused.fetch_add(1, Ordering::Relaxed);
                            } else {
                                r.unwrap_or_else(|e| panic!("{what}: {e}"));
                                check(case, algo, &y, &what);
                                runs.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // A caller-owned workspace: exact, larger and filled with garbage,
                        // or one byte short.
                        1 => {
                            let extra = rng.range(0, 2);
                            let len = match extra {
                                0 => needed,
                                1 => needed + 4096,
                                _ => needed.saturating_sub(1),
                            };
                            let mut ws = vec![0xA5u8; len];
                            let r = handle.conv_forward_with_workspace(
                                &case.p, algo, &case.x, &case.w, &mut y, &mut ws,
                            );
                            if len < needed {
                                assert!(
                                    matches!(r, Err(Error::WorkspaceTooSmall { .. })),
                                    "{what}: {r:?}"
                                );
                                refused.fetch_add(1, Ordering::Relaxed);
                            } else {
                                r.unwrap_or_else(|e| panic!("{what}: {e}"));
                                check(case, algo, &y, &what);
                                runs.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // The handle's selection, under one of the budgets.
                        _ => {
                            let (h, limit) = handles[rng.next_u64() as usize % handles.len()];
                            let report = h
                                .conv_forward_auto(
                                    &case.p,
                                    &case.x,
                                    Weights::Plain(&case.w),
                                    &mut y,
                                    &EpilogueArgs::default(),
                                )
                                .unwrap_or_else(|e| panic!("{what}: auto: {e}"));
                            assert!(
                                limit.is_none_or(|l| report.workspace_bytes <= l),
                                "{what}: auto chose {} with {} bytes over {limit:?}",
                                report.algo,
                                report.workspace_bytes
                            );
                            check(case, report.algo, &y, &format!("{what} auto"));
                            auto.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let (runs, refused, auto) = (runs.into_inner(), refused.into_inner(), auto.into_inner());
    assert_eq!(runs + refused + auto, THREADS * ITERATIONS);
    assert!(
        runs > 0 && refused > 0 && auto > 0,
        "{runs} {refused} {auto}"
    );
    // Every (case, algorithm) pair once more, all threads at once on the same handle.
    let pairs: Vec<(&Case, &'static str)> = cases
        .iter()
        .flat_map(|c| c.algos.iter().map(move |a| (c, a.0)))
        .collect();
    std::thread::scope(|s| {
        for chunk in pairs.chunks(pairs.len().div_ceil(THREADS)) {
            let handle = &handle;
            s.spawn(move || {
                for (case, algo) in chunk {
                    let mut y = vec![f32::NAN; case.p.y().span()];
                    handle
                        .conv_forward(&case.p, algo, &case.x, &case.w, &mut y)
                        .unwrap_or_else(|e| panic!("{} {algo}: {e}", case.name));
                    check(case, algo, &y, "every pair");
                }
            });
        }
    });
}

/// Settings change through `&self` while calls run on the same handle: one thread flips the
/// policy, the budget, determinism, the timing limit and the instruction-set cap over and
/// over; the others select and run, and every output stays right (each call works with the
/// settings it started with).
#[test]
fn settings_change_from_another_thread_while_calls_run() {
    use std::sync::atomic::AtomicBool;
    let cases = cases();
    let handle = Handle::with_threads(2).unwrap();
    let done = AtomicBool::new(false);
    let changes = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let (handle, done, changes) = (&handle, &done, &changes);
        s.spawn(move || {
            let mut rng = Rng(0xc0ffee);
            let isas: Vec<_> = autodnn::cpu::Isa::ALL
                .into_iter()
                .filter(|i| i.is_available())
                .collect();
            while !done.load(Ordering::Relaxed) {
                let policy = autodnn::select::Policy::ALL[rng.range(0, 2) as usize];
                handle.set_policy(policy);
                handle.set_workspace_limit(match rng.range(0, 2) {
                    0 => None,
                    1 => Some(0),
                    _ => Some(1 << 16),
                });
                handle.set_deterministic(rng.range(0, 1) == 1);
                handle.set_max_timed(1 + rng.range(0, 4) as usize);
                handle.set_isa_cap(isas[rng.next_u64() as usize % isas.len()]);
                changes.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            }
        });
        let workers: Vec<_> = (0..THREADS - 1)
            .map(|t| {
                let cases = &cases;
                s.spawn(move || {
                    let mut rng = Rng(0xfeed + t as u64);
                    for i in 0..40 {
                        let case = &cases[rng.next_u64() as usize % cases.len()];
                        let mut y = vec![f32::NAN; case.p.y().span()];
                        let report = handle
                            .conv_forward_auto(
                                &case.p,
                                &case.x,
                                Weights::Plain(&case.w),
                                &mut y,
                                &EpilogueArgs::default(),
                            )
                            .unwrap_or_else(|e| panic!("thread {t} call {i}: {e}"));
                        check(case, report.algo, &y, &format!("thread {t} call {i}"));
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    assert!(changes.into_inner() > 0);
}

/// A training step's calls from eight threads on one handle (as data-parallel workers share
/// one): forward, backward data, backward filter and backward bias, each by a named algorithm
/// of its registry or by the handle's selection, with alpha = 1 and beta = 0 or 1 (the
/// accumulating form frameworks use), every output checked against the f64 oracle.
#[test]
fn training_calls_from_eight_threads_on_one_handle() {
    use autodnn::op::{
        Algorithm, ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvBwdBiasInputs,
        ConvBwdDataInputs, ConvBwdFilterInputs, Registered, TensorMut,
    };
    use autodnn::OpKind;

    /// The registered algorithms of `O` accepting `p`, with their integer-data bounds.
    fn accepting<O: Registered<Problem = ConvProblem>>(
        p: &ConvProblem,
    ) -> Vec<(&'static str, f64)> {
        O::algorithms()
            .iter()
            .filter(|a| a.check(p).is_ok())
            .map(|a| (a.name(), a.accuracy().integer_tolerance()))
            .collect()
    }
    fn tolerance<O: Registered>(name: &str) -> f64 {
        O::algorithms()
            .iter()
            .find(|a| a.name() == name)
            .map(|a| a.accuracy().integer_tolerance())
            .unwrap()
    }
    fn check_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        let max = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (o, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!(
                (f64::from(g) - w).abs() <= tol * max,
                "{what}: element {o} is {g}, the oracle {w}"
            );
        }
    }
    /// The oracle's gradient plus beta times the prior output.
    fn scaled(g: &[f64], prior: &[f32], beta: f32) -> Vec<f64> {
        g.iter()
            .zip(prior)
            .map(|(&g, &o)| g + f64::from(beta) * f64::from(o))
            .collect()
    }

    let cases = cases();
    let dys: Vec<Vec<f32>> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| int_data(c.p.y().span(), 300 + i as u64))
        .collect();
    let handle = Handle::with_threads(2).unwrap();
    let counts: [AtomicUsize; 4] = Default::default();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (cases, dys, handle, counts) = (&cases, &dys, &handle, &counts);
            s.spawn(move || {
                let mut rng = Rng(0x7a11 + t as u64);
                for i in 0..ITERATIONS / 2 {
                    let ci = rng.next_u64() as usize % cases.len();
                    let (c, dy) = (&cases[ci], &dys[ci]);
                    let beta = rng.range(0, 1) as f32;
                    let auto = rng.range(0, 3) == 0;
                    let op = rng.range(0, 3) as usize;
                    let what = format!("thread {t} iteration {i} {} op {op} beta {beta}", c.name);
                    counts[op].fetch_add(1, Ordering::Relaxed);
                    let pick = |algos: &[(&'static str, f64)], rng: &mut Rng| {
                        algos[rng.next_u64() as usize % algos.len()]
                    };
                    match op {
                        0 => {
                            let (algo, _) = c.algos[rng.next_u64() as usize % c.algos.len()];
                            let mut y = vec![f32::NAN; c.p.y().span()];
                            handle
                                .conv_forward(&c.p, algo, &c.x, &c.w, &mut y)
                                .unwrap_or_else(|e| panic!("{what}: {e}"));
                            check(c, algo, &y, &what);
                        }
                        1 => {
                            let p = c.p.for_op(OpKind::ConvBackwardData).unwrap();
                            let prior = int_data(p.x().span(), i as u64);
                            let g = reference::conv_backward_data(&p, dy, &c.w).unwrap();
                            let want = scaled(&g, &prior, beta);
                            let mut dx = prior.clone();
                            let inputs = ConvBwdDataInputs::new(dy, &c.w).scaled(1.0, beta);
                            let mut out = TensorMut::F32(&mut dx);
                            let (algo, tol) = if auto {
                                let r = handle
                                    .run::<ConvBackwardData>(&p, &inputs, &mut out)
                                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                                (r.algo, tolerance::<ConvBackwardData>(r.algo))
                            } else {
                                let (a, tol) = pick(&accepting::<ConvBackwardData>(&p), &mut rng);
                                handle
                                    .run_algorithm::<ConvBackwardData>(
                                        &p, a, &inputs, &mut out, None,
                                    )
                                    .unwrap_or_else(|e| panic!("{what} {a}: {e}"));
                                (a, tol)
                            };
                            check_close(&dx, &want, tol, &format!("{what} {algo}"));
                        }
                        2 => {
                            let p = c.p.for_op(OpKind::ConvBackwardFilter).unwrap();
                            let prior = int_data(p.w().elements(), i as u64);
                            let g = reference::conv_backward_filter(&p, &c.x, dy).unwrap();
                            let want = scaled(&g, &prior, beta);
                            let mut dw = prior.clone();
                            let inputs = ConvBwdFilterInputs::new(&c.x, dy).scaled(1.0, beta);
                            let mut out = TensorMut::F32(&mut dw);
                            let (algo, tol) = if auto {
                                let r = handle
                                    .run::<ConvBackwardFilter>(&p, &inputs, &mut out)
                                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                                (r.algo, tolerance::<ConvBackwardFilter>(r.algo))
                            } else {
                                let (a, tol) = pick(&accepting::<ConvBackwardFilter>(&p), &mut rng);
                                handle
                                    .run_algorithm::<ConvBackwardFilter>(
                                        &p, a, &inputs, &mut out, None,
                                    )
                                    .unwrap_or_else(|e| panic!("{what} {a}: {e}"));
                                (a, tol)
                            };
                            check_close(&dw, &want, tol, &format!("{what} {algo}"));
                        }
                        _ => {
                            let p = c.p.for_op(OpKind::ConvBackwardBias).unwrap();
                            let prior = int_data(p.w().k(), i as u64);
                            let g = reference::conv_backward_bias(&p, dy).unwrap();
                            let want = scaled(&g, &prior, beta);
                            let mut db = prior.clone();
                            let inputs = ConvBwdBiasInputs::new(dy).scaled(1.0, beta);
                            let mut out = TensorMut::F32(&mut db);
                            if auto {
                                handle
                                    .run::<ConvBackwardBias>(&p, &inputs, &mut out)
                                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                            } else {
                                handle
                                    .run_algorithm::<ConvBackwardBias>(
                                        &p, "direct", &inputs, &mut out, None,
                                    )
                                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                            }
                            check_close(&db, &want, 0.0, &what);
                        }
                    }
                }
            });
        }
    });
    let counts = counts.map(|c| c.into_inner());
    assert!(counts.iter().all(|&n| n > 0), "{counts:?}");
}

/// A handle whose parallel work runs on threads lent by the program (`Handle::with_runner`:
/// here scoped threads, the runner lending 2 of the 3 threads it is asked for, as an
/// OpenMP team may): every algorithm on every case is right, with the bits of a one-thread
/// handle where the algorithm is deterministic; calls from several threads at once too.
#[test]
fn a_handle_on_lent_threads_computes_every_output_right() {
    use autodnn::runtime::ParallelRunner;
    use std::sync::Arc;
    static REGIONS: AtomicUsize = AtomicUsize::new(0);
    let runner: Arc<ParallelRunner> = Arc::new(|n, body| {
        REGIONS.fetch_add(1, Ordering::Relaxed);
        std::thread::scope(|s| {
            for i in 1..n.min(2) {
                s.spawn(move || body(i));
            }
            body(0);
        })
    });
    let lent = Handle::with_runner(3, runner).unwrap();
    assert_eq!(lent.threads(), 3);
    let one = Handle::with_threads(1).unwrap();
    // Large enough that the algorithms split their work among threads.
    let cases = cases_of(&[
        "mb2ic32ih28oc48kh3ph1",
        "mb2ic64ih14oc64kh1",
        "mb1ic32ih29oc32kh3sh2ph1",
        "mb2g32ic32ih28oc32kh3ph1",
    ]);
    std::thread::scope(|s| {
        for t in 0..3 {
            let (cases, lent, one) = (&cases, &lent, &one);
            s.spawn(move || {
                for case in cases.iter().skip(t) {
                    for &(algo, _) in &case.algos {
                        let what = format!("{algo} on lent threads, caller {t}");
                        let mut y = vec![f32::NAN; case.p.y().span()];
                        lent.conv_forward(&case.p, algo, &case.x, &case.w, &mut y)
                            .unwrap_or_else(|e| panic!("{}: {what}: {e}", case.name));
                        check(case, algo, &y, &what);
                        if common::algo(algo).deterministic() {
                            let mut y1 = vec![f32::NAN; case.p.y().span()];
                            one.conv_forward(&case.p, algo, &case.x, &case.w, &mut y1)
                                .unwrap();
                            let same = y.iter().zip(&y1).all(|(a, b)| a.to_bits() == b.to_bits());
                            assert!(same, "{}: {what}: bits differ from 1 thread", case.name);
                        }
                    }
                }
            });
        }
    });
    let regions = REGIONS.load(Ordering::Relaxed);
    assert!(
        regions > 100,
        "only {regions} parallel regions ran on the lent threads"
    );
}
